/* fuzz_tokenizer.c -- encode and decode arbitrary input with real vocabularies.
 *
 * The vocabularies load once (LLVMFuzzerInitialize): SmolLM2's byte-level BPE
 * (pre-tokenizer smollm; GPT-2's own vocab stands in when the model is not
 * there), Llama's SentencePiece, GPT-2's BPE and BERT's WordPiece, all from
 * the shared test data. The first input byte picks a vocabulary (low bits)
 * and what to do with the rest (high bits):
 *   encode   plain text: must fail exactly when the text is not valid UTF-8;
 *            with a byte-level BPE vocab, the pieces of encode(text) spell
 *            text exactly (less the bytes the vocab has no token for, which
 *            tokenizer.h says are dropped), and so does decode (when text
 *            has no NUL byte: tok_decode returns a C string)
 *   encode   with GL_TOKENIZE_PARSE_SPECIAL | GL_TOKENIZE_ADD_SPECIAL, then decode
 *   decode   the rest read as int32 ids folded into -4 .. n_vocab+3: must fail
 *            exactly when an id is out of range; for BPE it must equal the
 *            concatenated pieces */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gguf.h"
#include "tokenizer.h"

typedef struct vocab {
    const char *what;
    gl_tokenizer *tok;
    int byte_level;           /* byte-level BPE: encoding loses nothing but... */
    bool has_byte[256];       /* ...bytes without a token, which it drops (tokenizer.h) */
} vocab;

static vocab vocabs[4];
static int n_vocabs;

static void add_vocab(const char *path, const char *what, int byte_level) {
    gl_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    if (!f) fuzz_die("%s", err.message);
    gl_tokenizer *t = tok_load(f, &err);
    gguf_close(f);
    if (!t) fuzz_die("%s: %s", path, err.message);
    vocab *v = &vocabs[n_vocabs++];
    *v = (vocab){ what, t, byte_level, {0} };
    /* A byte has a token when some token's piece is exactly that byte. */
    for (int id = 0; id < tok_n_vocab(t); id++) {
        size_t len = 0;
        const char *p = tok_piece(t, id, &len);
        if (p && len == 1) v->has_byte[(unsigned char)p[0]] = true;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    char *smollm = fuzz_smollm_path();
    char *gpt2 = fuzz_testdata("vocab/ggml-vocab-gpt-2.gguf");
    char *spm = fuzz_testdata("vocab/ggml-vocab-llama-spm.gguf");
    char *bert = fuzz_testdata("vocab/ggml-vocab-bert-bge.gguf");
    if (!gpt2 || !spm || !bert)
        fuzz_die("shared test data not found (set GENLOOP_TESTDATA to the testdata folder)");
    add_vocab(smollm ? smollm : gpt2, smollm ? "smollm2" : "gpt-2", 1);
    add_vocab(spm, "llama-spm", 0);
    add_vocab(gpt2, "gpt-2", 1);
    add_vocab(bert, "bert-bge", 0);
    fprintf(stderr, "fuzz_tokenizer: vocabularies %s (%s), llama-spm, gpt-2, bert-bge\n",
            vocabs[0].what, smollm ? smollm : gpt2);
    free(smollm); free(gpt2); free(spm); free(bert);
    return 0;
}

static void fail(const vocab *v, const char *what, const char *in, size_t len) {
    fprintf(stderr, "fuzz_tokenizer [%s]: %s; input (%zu bytes): \"", v->what, what, len);
    for (size_t i = 0; i < len; i++) fprintf(stderr, "\\x%02x", (unsigned char)in[i]);
    fprintf(stderr, "\"\n");
    abort();
}

static void encode(const vocab *v, const char *text, size_t len, int flags) {
    gl_error err = {{0}};
    int32_t *ids = NULL;
    int n = tok_encode(v->tok, text, len, flags, &ids, &err);
    int valid = fuzz_utf8_valid(text, len);
    if (n < 0) {
        if (valid) fail(v, err.message, text, len);
        if (ids) fail(v, "failed encode left *out set", text, len);
        return;
    }
    if (!valid) fail(v, "encoded invalid UTF-8", text, len);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(v->tok)) fail(v, "id out of range", text, len);
    char *back = tok_decode(v->tok, ids, (size_t)n, &err);
    if (!back) fail(v, err.message, text, len);
    if (v->byte_level && flags == 0) {
        /* Lossless but for bytes the vocabulary has no token for: the pieces
         * spell the rest of the text byte for byte; decode returns a C
         * string, so it is compared only when the text has no NUL. */
        char *want = malloc(len + 1);
        size_t want_len = 0;
        for (size_t i = 0; i < len; i++)
            if (v->has_byte[(unsigned char)text[i]]) want[want_len++] = text[i];
        size_t at = 0;
        for (int i = 0; i < n; i++) {
            size_t plen = 0;
            const char *p = tok_piece(v->tok, ids[i], &plen);
            if (at + plen > want_len || memcmp(want + at, p, plen)) fail(v, "pieces(encode(text)) != text", text, len);
            at += plen;
        }
        if (at != want_len) fail(v, "pieces(encode(text)) shorter than text", text, len);
        if (!memchr(want, 0, want_len) && (strlen(back) != want_len || memcmp(back, want, want_len)))
            fail(v, "decode(encode(text)) != text", text, len);
        free(want);
    }
    free(back);
    free(ids);
}

static void decode(const vocab *v, const uint8_t *data, size_t size) {
    int n_vocab = tok_n_vocab(v->tok);
    size_t n = size / 4;
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    int any_bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t raw;
        memcpy(&raw, data + 4 * i, 4);
        ids[i] = (int32_t)(raw % (uint32_t)(n_vocab + 8)) - 4;
        any_bad |= ids[i] < 0 || ids[i] >= n_vocab;
    }
    gl_error err = {{0}};
    char *text = tok_decode(v->tok, ids, n, &err);
    if ((text == NULL) != any_bad) fail(v, any_bad ? "decoded an out-of-range id" : err.message, (const char *)data, size);
    if (text && v->byte_level) {
        /* Byte-level BPE decoding is plain concatenation of the pieces (the
         * result is a C string: compared only when no piece holds a NUL). */
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            tok_piece(v->tok, ids[i], &len);
            total += len;
        }
        char *want = malloc(total + 1);
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            const char *p = tok_piece(v->tok, ids[i], &len);
            memcpy(want + at, p, len);
            at += len;
        }
        if (!memchr(want, 0, total) && (strlen(text) != total || memcmp(text, want, total)))
            fail(v, "decode != concatenated pieces", (const char *)data, size);
        free(want);
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *p = tok_piece(v->tok, ids[i], &len);
        if ((p == NULL) != (ids[i] < 0 || ids[i] >= n_vocab)) fail(v, "tok_piece range", (const char *)data, size);
    }
    free(text);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const vocab *v = &vocabs[data[0] % n_vocabs];
    int mode = (data[0] >> 4) % 3;
    const char *rest = (const char *)data + 1;
    size_t len = size - 1;
    if (mode == 0) encode(v, rest, len, 0);
    else if (mode == 1) encode(v, rest, len, GL_TOKENIZE_PARSE_SPECIAL | GL_TOKENIZE_ADD_SPECIAL);
    else decode(v, data + 1, len);
    return 0;
}
