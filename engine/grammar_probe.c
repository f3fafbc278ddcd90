/* grammar_probe.c -- walk a text through a grammar the way generation
 * would, for measuring schema coverage (genloop schema-check): the text is
 * tokenized as the model tokenizes it, the mask is computed before every
 * token and must allow it, and the grammar must accept at the end. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gl_error.h"
#include "grammar.h"
#include "model.h"

struct gl_grammar_probe {
    const gl_model *model;
    gr_vocab *vocab;
    float *logits;            /* n_vocab, the mask's output */
    double *mask_us;          /* one per mask of the last walk */
    int cap_mask_us;
};

gl_grammar_probe *gl_grammar_probe_create(const gl_model *m, gl_error *err) {
    int n = tok_n_vocab(m->tokenizer);
    gl_grammar_probe *p = calloc(1, sizeof *p);
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    bool *eog = malloc((size_t)n * sizeof *eog);
    if (p && pieces && lens && eog) {
        for (int t = 0; t < n; t++) {
            pieces[t] = tok_piece(m->tokenizer, t, &lens[t]);
            if (!pieces[t]) lens[t] = 0;
            eog[t] = tok_is_eog(m->tokenizer, t);
        }
        p->model = m;
        p->vocab = gr_vocab_create(n, pieces, lens, eog);
        p->logits = malloc((size_t)n * sizeof *p->logits);
    }
    free(pieces);
    free(lens);
    free(eog);
    if (!p || !p->vocab || !p->logits) {
        gl_error_set(err, "out of memory");
        gl_grammar_probe_free(p);
        return NULL;
    }
    return p;
}

void gl_grammar_probe_free(gl_grammar_probe *p) {
    if (!p) return;
    gr_vocab_free(p->vocab);
    free(p->logits);
    free(p->mask_us);
    free(p);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

bool gl_grammar_probe_walk(gl_grammar_probe *p, gl_grammar *g, const char *text, size_t len, gl_grammar_walk *out,
                           gl_error *err) {
    memset(out, 0, sizeof *out);
    int32_t *ids = NULL;
    int n = gl_tokenize(p->model, text, len, 0, &ids, err);
    if (n < 0) return false;
    if (n + 1 > p->cap_mask_us) {
        double *t = realloc(p->mask_us, (size_t)(n + 1) * sizeof *t);
        if (!t) {
            free(ids);
            gl_error_set(err, "out of memory");
            return false;
        }
        p->mask_us = t;
        p->cap_mask_us = n + 1;
    }
    gr_matcher *m = gr_matcher_create(g, p->vocab, err);
    if (!m) {
        free(ids);
        return false;
    }
    int n_vocab = tok_n_vocab(p->model->tokenizer);
    out->n_tokens = n;
    out->mask_us = p->mask_us;
    bool ok = true;
    /* one mask per token and one at the end, where an end-of-generation
     * token must be allowed */
    for (int i = 0; i <= n && ok; i++) {
        memset(p->logits, 0, (size_t)n_vocab * sizeof *p->logits);
        double t0 = now_us();
        gr_matcher_mask(m, p->logits);
        p->mask_us[out->n_masks++] = now_us() - t0;
        if (i == n) break;
        ok = p->logits[ids[i]] == 0 && gr_matcher_accept_token(m, ids[i]);
    }
    out->accepted = ok && gr_matcher_can_end(m);
    gr_matcher_free(m);
    free(ids);
    return true;
}
