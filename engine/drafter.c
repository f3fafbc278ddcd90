/* drafter.c -- n-gram (prompt lookup) proposals. */
#include "drafter.h"

#include <stdlib.h>
#include <string.h>

#include "genloop.h"

struct gl_drafter {
    drafter_params p;
};

gl_drafter *drafter_create(const drafter_params *p) {
    if (p->mode != GL_SPEC_NGRAM || p->ngram_min < 1 || p->ngram_max < p->ngram_min) return NULL;
    gl_drafter *d = calloc(1, sizeof *d);
    if (d) d->p = *p;
    return d;
}

void drafter_free(gl_drafter *d) { free(d); }

/* The latest i < n - g with tokens[i..i+g) equal to the last g tokens, or -1. */
static int latest_match(const int32_t *tokens, int n, int g) {
    const int32_t *suffix = tokens + n - g;
    for (int i = n - g - 1; i >= 0; i--) {
        if (tokens[i] != suffix[0] || tokens[i + g - 1] != suffix[g - 1]) continue;
        if (memcmp(tokens + i, suffix, (size_t)g * sizeof *tokens) == 0) return i;
    }
    return -1;
}

int drafter_propose(const gl_drafter *d, const int32_t *tokens, int n_tokens, int max_draft, int32_t *out) {
    if (max_draft <= 0) return 0;
    for (int g = d->p.ngram_max; g >= d->p.ngram_min; g--) {
        if (g >= n_tokens) continue;
        int i = latest_match(tokens, n_tokens, g);
        if (i < 0) continue;
        int from = i + g, n = n_tokens - from; /* >= 1: the match ends before the suffix */
        if (n > max_draft) n = max_draft;
        memcpy(out, tokens + from, (size_t)n * sizeof *out);
        return n;
    }
    return 0;
}
