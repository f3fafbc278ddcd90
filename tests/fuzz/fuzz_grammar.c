/* fuzz_grammar.c -- the GBNF parser, the JSON Schema compiler and the byte
 * automaton over arbitrary input.
 *
 * grammar.h promises that any text compiles or fails with a message, within
 * its size bounds, and that matching any bytes is bounded. Byte 0 picks the
 * front end (even: GBNF, odd: JSON Schema); the rest is split at the first
 * NUL into the grammar or schema and bytes fed to a matcher built over a
 * small vocabulary, whose mask is computed after each byte. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "json_schema.h"

static gr_vocab *vocab;

static void make_vocab(void) {
    static char bytes[256];
    static const char *const multi[] = {"{\"", "\":", "true", "\xc3", "\xa9", "ab", "12", "\n  ", "\"}"};
    enum { N_MULTI = sizeof multi / sizeof *multi, N = 256 + N_MULTI + 1 };
    const char *pieces[N];
    size_t lens[N];
    bool eog[N];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        pieces[i] = &bytes[i];
        lens[i] = 1;
        eog[i] = false;
    }
    for (int i = 0; i < N_MULTI; i++) {
        pieces[256 + i] = multi[i];
        lens[256 + i] = strlen(multi[i]);
        eog[256 + i] = false;
    }
    pieces[N - 1] = "";
    lens[N - 1] = 0;
    eog[N - 1] = true;
    vocab = gr_vocab_create(N, pieces, lens, eog);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!vocab) make_vocab();
    const char *text = (const char *)data + 1;
    size_t n = size - 1, text_len = n;
    const char *nul = memchr(text, 0, n);
    if (nul) text_len = (size_t)(nul - text);
    gl_error err = {{0}};
    gr_grammar *g = (data[0] & 1) ? gl_grammar_from_json_schema(text, text_len, &err)
                                  : gr_compile(text, text_len, &err);
    if (!g) {
        if (!err.message[0]) {
            fprintf(stderr, "fuzz_grammar: compile failed without a message\n");
            abort();
        }
        return 0;
    }
    gr_matcher *m = gr_matcher_create(g, vocab, &err);
    if (m && nul) {
        float logits[256 + 10];
        const char *in = nul + 1;
        size_t in_len = n - text_len - 1;
        if (in_len > 64) in_len = 64;
        for (size_t i = 0; i < in_len; i++) {
            gr_matcher_mask(m, logits);
            if (!gr_matcher_accept_bytes(m, in + i, 1)) break;
        }
        gr_matcher_can_end(m);
    }
    gr_matcher_free(m);
    gr_release(g);
    return 0;
}
