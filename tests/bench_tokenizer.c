/* bench_tokenizer.c -- tokenizer throughput: bench_tokenizer MODEL [TEXTFILE]
 *
 * Encodes about 1 MiB of English text (the file, or generated sentences) five
 * times and prints the median speed. Not a test: numbers only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "tokenizer.h"

#define TARGET_BYTES (1u << 20)
#define RUNS 5

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Deterministic varied English: random picks from a few word lists. */
static char *generate(size_t *len) {
    static const char *const subjects[] = { "The old sailor", "A curious child", "Our neighbour's dog", "The committee",
                                            "Every morning, the baker", "Nobody in the village", "My grandmother",
                                            "The new software release", "A flock of geese", "The city council" };
    static const char *const verbs[] = { "walked slowly towards", "carefully examined", "could not believe",
                                         "wrote a long letter about", "quietly ignored", "was surprised by",
                                         "decided to investigate", "spent 42 minutes discussing", "laughed at",
                                         "remembered" };
    static const char *const objects[] = { "the lighthouse on the hill.", "an unexpected parcel from Paris.",
                                           "the price of bread in 1923!", "what had happened yesterday.",
                                           "the strange noise behind the barn?", "a recipe for apple pie.",
                                           "the results of the 2nd experiment.", "everyone's favourite song.",
                                           "the rain, which hadn't stopped for days.", "a map drawn in blue ink." };
    char *text = malloc(TARGET_BYTES + 256);
    if (!text) return NULL;
    size_t n = 0;
    uint32_t rng = 12345;
    while (n < TARGET_BYTES) {
        rng = rng * 1664525u + 1013904223u;
        const char *s = subjects[(rng >> 8) % 10];
        rng = rng * 1664525u + 1013904223u;
        const char *v = verbs[(rng >> 8) % 10];
        rng = rng * 1664525u + 1013904223u;
        const char *o = objects[(rng >> 8) % 10];
        n += (size_t)sprintf(text + n, "%s %s %s%s", s, v, o, (rng >> 20) % 7 == 0 ? "\n\n" : " ");
    }
    *len = n;
    return text;
}

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = malloc(TARGET_BYTES * 4 + 1);
    if (!buf) { fclose(fp); return NULL; }
    *len = fread(buf, 1, TARGET_BYTES * 4, fp);
    fclose(fp);
    return buf;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: bench_tokenizer MODEL.gguf [TEXTFILE]\n");
        return 2;
    }
    gl_error err = {0};
    gguf_file *f = gguf_open(argv[1], &err);
    gl_tokenizer *t = f ? tok_load(f, &err) : NULL;
    if (!t) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    size_t len;
    char *text = argc == 3 ? read_file(argv[2], &len) : generate(&len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argc == 3 ? argv[2] : "(generated text)");
        return 1;
    }
    double secs[RUNS];
    int n_tokens = 0;
    for (int r = 0; r < RUNS; r++) {
        int32_t *ids;
        double t0 = now();
        n_tokens = tok_encode(t, text, len, 0, &ids, &err);
        secs[r] = now() - t0;
        if (n_tokens < 0) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        free(ids);
    }
    qsort(secs, RUNS, sizeof secs[0], cmp_double);
    double median = secs[RUNS / 2];
    printf("%s: %zu bytes -> %d tokens (%.2f bytes/token), median %.1f ms, %.2f MB/s\n", argv[1], len, n_tokens,
           (double)len / n_tokens, median * 1e3, (double)len / median / 1e6);
    free(text);
    tok_free(t);
    gguf_close(f);
    return 0;
}
