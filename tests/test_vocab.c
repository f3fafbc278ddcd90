/* test_vocab.c -- the tokenizer against llama.cpp's vocab test vectors.
 *
 * For every vocab/NAME.gguf with NAME.gguf.inp/.out next to it: tokenize each
 * test string (no BOS/EOS, special tokens as plain text) and compare the ids
 * exactly; then decode them and compare with the input. Decoding is lossless
 * for byte-level BPE and for SentencePiece (the encoder's space prefix is the
 * one the decoder drops, and byte fallback covers every character); WordPiece
 * lower-cases and drops accents and whitespace, so it is only checked to
 * decode. Vocabularies without vectors are loaded and used once. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "testutil.h"
#include "tokenizer.h"

#define SEP "\n__ggml_vocab_test__\n"

static const char *vocab_dir;

static char *slurp(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, fp) != (size_t)n) { free(buf); fclose(fp); return NULL; }
    buf[n] = 0;
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static gl_tokenizer *load(const char *path, gguf_file **fout) {
    gl_error err = {0};
    gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f, "%s", err.message);
    gl_tokenizer *t = tok_load(f, &err);
    ck_assert_msg(t, "%s: %s", path, err.message);
    *fout = f;
    return t;
}

static bool is_wordpiece(const gguf_file *f) {
    gguf_str model;
    return gguf_get_str(f, "tokenizer.ggml.model", &model) && gguf_str_eq(model, "bert");
}

/* Returns the number of failures for one vocabulary. */
static int check_vectors(const char *name) {
    char path[8192], inp_path[8200], out_path[8200];
    snprintf(path, sizeof path, "%.4000s/%.255s", vocab_dir, name);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    size_t inp_len, out_len;
    char *inp = slurp(inp_path, &inp_len), *out = slurp(out_path, &out_len);
    ck_assert_msg(inp && out, "cannot read vectors of %s", name);

    gguf_file *f;
    gl_tokenizer *t = load(path, &f);
    bool lossless = !is_wordpiece(f);
    int passed = 0, total = 0;
    char *p = inp, *line = out;
    for (;;) {
        char *sep = strstr(p, SEP);
        if (!sep) break;
        size_t text_len = (size_t)(sep - p);
        char *eol = strchr(line, '\n');
        ck_assert_msg(eol, "%s: .out has fewer lines than .inp", name);
        *eol = 0;

        int32_t want[1024];
        int n_want = 0;
        for (char *q = line; *q;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            want[n_want++] = (int32_t)v;
            q = end;
        }

        gl_error err = {0};
        int32_t *ids;
        int n = tok_encode(t, p, text_len, 0, &ids, &err);
        ck_assert_msg(n >= 0, "%s: %s", name, err.message);
        bool ok = n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
        if (!ok) {
            fprintf(stderr, "%s: vector %d '%.*s'\n  want:", name, total, (int)text_len, p);
            for (int i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n  got: ");
            for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n");
        }
        char *back = tok_decode(t, ids, (size_t)n, &err);
        ck_assert_msg(back, "%s: %s", name, err.message);
        if (ok && lossless && (strlen(back) != text_len || memcmp(back, p, text_len) != 0)) {
            fprintf(stderr, "%s: vector %d does not round-trip: '%.*s' -> '%s'\n", name, total, (int)text_len, p, back);
            ok = false;
        }
        free(back);
        free(ids);
        passed += ok;
        total++;
        p = sep + strlen(SEP);
        line = eol + 1;
    }
    printf("%s: %d/%d vectors passed\n", name, passed, total);
    tok_free(t);
    gguf_close(f);
    free(inp);
    free(out);
    return total - passed;
}

START_TEST(all_vectors) {
    DIR *d = opendir(vocab_dir);
    ck_assert_msg(d, "cannot open %s", vocab_dir);
    char names[64][256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        size_t len = strlen(e->d_name);
        if (len > 9 && strcmp(e->d_name + len - 9, ".gguf.inp") == 0) {
            snprintf(names[n], sizeof names[n], "%.*s", (int)(len > 259 ? 255 : len - 4), e->d_name);
            n++;
        }
    }
    closedir(d);
    ck_assert_msg(n > 0, "no vectors in %s", vocab_dir);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    int failures = 0;
    for (int i = 0; i < n; i++) failures += check_vectors(names[i]);
    ck_assert_int_eq(failures, 0);
}
END_TEST

/* Vocabularies shipped without vectors must still load and tokenize. */
START_TEST(vocab_only_files_load) {
    static const char *const files[] = { "ggml-vocab-gpt-neox.gguf", "ggml-vocab-baichuan.gguf" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", vocab_dir, files[i]);
        gguf_file *f;
        gl_tokenizer *t = load(path, &f);
        const char *text = "Hello world, this is a test.\n  Indented 123";
        gl_error err = {0};
        int32_t *ids;
        int n = tok_encode(t, text, strlen(text), 0, &ids, &err);
        ck_assert_msg(n > 0, "%s: %s", files[i], err.message);
        char *back = tok_decode(t, ids, (size_t)n, &err);
        ck_assert_str_eq(back, text);
        printf("%s: loads, %d tokens for the sample\n", files[i], n);
        free(back);
        free(ids);
        tok_free(t);
        gguf_close(f);
    }
}
END_TEST

int main(void) {
    const char *dir = testdata_path("vocab");
    if (!dir) {
        printf("SKIP: shared test data missing\n");
        return TEST_SKIP;
    }
    vocab_dir = strdup(dir);
    Suite *s = suite_create("vocab");
    TCase *tc = tcase_create("vectors");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, all_vectors);
    tcase_add_test(tc, vocab_only_files_load);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
