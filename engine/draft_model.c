/* draft_model.c -- greedy proposals from a draft model (draft_model.h). */
#include "draft_model.h"

#include <stdlib.h>
#include <string.h>

#include "gl_error.h"
#include "kv_cache.h"
#include "kv_manager.h"
#include "model.h"
#include "sampler.h"

struct dm_seq {
    kv_seq kv;                /* its blocks in the draft pool */
    int32_t *tokens;          /* [cap] the tokens whose K/V the draft cache holds */
    int n;                    /* how many */
    int cap;
    dm_seq *prev, *next;      /* every live state, freed by dm_free */
};

struct dm_drafter {
    const gl_model *model;
    kern_pool *pool;          /* the engine's compute threads */
    gl_kv_cache *kv;
    kv_manager *kvm;
    gl_run_state *rs;
    int chunk;                /* tokens per forward pass at most */
    float *logits;            /* [n_vocab] */
    int32_t *b_tokens, *b_positions, *b_seq; /* [chunk] */
    dm_seq *live;
};

/* Same size, same spelling of every token, same BOS and EOS. */
static bool vocab_matches(const gl_model *a, const gl_model *b, gl_error *err) {
    int na = tok_n_vocab(a->tokenizer), nb = tok_n_vocab(b->tokenizer);
    if (na != nb || a->config.n_vocab != b->config.n_vocab) {
        gl_error_set(err, "draft model %s: vocabulary differs from the target's (%d vs %d tokens)", a->info.path,
                     a->config.n_vocab, b->config.n_vocab);
        return false;
    }
    for (int i = 0; i < na; i++) {
        if (strcmp(tok_text(a->tokenizer, i), tok_text(b->tokenizer, i))) {
            gl_error_set(err, "draft model %s: vocabulary differs from the target's (token %d is '%.40s' vs '%.40s')",
                         a->info.path, i, tok_text(a->tokenizer, i), tok_text(b->tokenizer, i));
            return false;
        }
    }
    if (tok_bos(a->tokenizer) != tok_bos(b->tokenizer) || tok_eos(a->tokenizer) != tok_eos(b->tokenizer)) {
        gl_error_set(err, "draft model %s: vocabulary differs from the target's (BOS/EOS %d/%d vs %d/%d)", a->info.path,
                     tok_bos(a->tokenizer), tok_eos(a->tokenizer), tok_bos(b->tokenizer), tok_eos(b->tokenizer));
        return false;
    }
    return true;
}

dm_drafter *dm_create(const gl_model *draft, const gl_model *target, kern_pool *pool, int chunk, int pool_tokens,
                      int block_size, gl_kv_type kv_type, gl_error *err) {
    if (draft->vocab_only) {
        gl_error_set(err, "draft model %s: vocab-only GGUF, cannot generate", draft->info.path);
        return NULL;
    }
    if (!vocab_matches(draft, target, err)) return NULL;
    dm_drafter *d = calloc(1, sizeof *d);
    if (!d) goto oom;
    const gl_config *c = &draft->config;
    d->model = draft;
    d->pool = pool;
    d->chunk = chunk;
    int n_blocks = (pool_tokens + block_size - 1) / block_size;
    if (!(d->kv = kv_create(c->n_layers, c->n_kv_heads, c->head_dim, block_size, n_blocks, kv_type, err))) goto fail;
    if (!(d->rs = model_run_state_create(draft, chunk, 1, err))) goto fail;
    d->kvm = kv_manager_create(d->kv, false);
    d->logits = malloc((size_t)c->n_vocab * sizeof(float));
    d->b_tokens = malloc((size_t)chunk * sizeof(int32_t));
    d->b_positions = malloc((size_t)chunk * sizeof(int32_t));
    d->b_seq = calloc((size_t)chunk, sizeof(int32_t)); /* one sequence a pass: all zero */
    if (!d->kvm || !d->logits || !d->b_tokens || !d->b_positions || !d->b_seq) goto oom;
    return d;
oom:
    gl_error_set(err, "out of memory for the draft model");
fail:
    dm_free(d);
    return NULL;
}

void dm_seq_release(dm_drafter *d, dm_seq **sp) {
    dm_seq *s = *sp;
    if (!s) return;
    kv_seq_release(d->kvm, &s->kv);
    if (s->prev) s->prev->next = s->next;
    else d->live = s->next;
    if (s->next) s->next->prev = s->prev;
    free(s->tokens);
    free(s);
    *sp = NULL;
}

void dm_free(dm_drafter *d) {
    if (!d) return;
    while (d->live) {
        dm_seq *s = d->live;
        dm_seq_release(d, &s);
    }
    kv_manager_free(d->kvm);
    kv_free(d->kv);
    model_run_state_free(d->rs);
    free(d->logits);
    free(d->b_tokens);
    free(d->b_positions);
    free(d->b_seq);
    free(d);
}

int dm_blocks_used(const dm_drafter *d) { return d->kv->n_blocks - kv_manager_n_free(d->kvm); }

static dm_seq *dm_seq_create(dm_drafter *d, int cap) {
    dm_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cap = cap;
    s->tokens = malloc((size_t)cap * sizeof *s->tokens);
    if (!s->tokens || !kv_seq_init(&s->kv, s->tokens, 0, cap, kv_manager_block_size(d->kvm))) {
        kv_seq_release(NULL, &s->kv);
        free(s->tokens);
        free(s);
        return NULL;
    }
    s->next = d->live;
    if (d->live) d->live->prev = s;
    d->live = s;
    return s;
}

/* Runs toks[0..n) at positions s->n.. through the draft model, appending
 * them to s; on success the logits of the last one are in d->logits. */
static bool feed(dm_drafter *d, dm_seq *s, const int32_t *toks, int n) {
    const int32_t *table = s->kv.block_table;
    gl_error err;
    while (n > 0) {
        int m = n < d->chunk ? n : d->chunk;
        for (int i = 0; i < m; i++) {
            d->b_tokens[i] = toks[i];
            d->b_positions[i] = s->n + i;
        }
        int32_t last = m - 1;
        gl_batch b = {.n_tokens = m, .tokens = d->b_tokens, .positions = d->b_positions, .seq_of_token = d->b_seq,
                      .block_tables = &table, .n_logits = 1, .logit_tokens = &last};
        if (model_forward(d->model, d->rs, d->pool, d->kv, &b, d->logits, &err)) return false;
        memcpy(s->tokens + s->n, toks, (size_t)m * sizeof *toks);
        s->n += m;
        toks += m;
        n -= m;
    }
    return true;
}

int dm_propose(dm_drafter *d, dm_seq **sp, const int32_t *tokens, int n_tokens, int cap_tokens, int max_draft,
               int32_t *out) {
    if (max_draft <= 0 || n_tokens <= 0) return 0;
    if (n_tokens + max_draft - 1 > cap_tokens) max_draft = cap_tokens - n_tokens + 1;
    if (max_draft <= 0) return 0;
    dm_seq *s = *sp;
    if (!s && !(s = *sp = dm_seq_create(d, cap_tokens))) return 0;
    /* keep the cached prefix that still matches, and always feed the last token: its logits are the first proposal */
    int keep = 0, lim = s->n < n_tokens - 1 ? s->n : n_tokens - 1;
    while (keep < lim && s->tokens[keep] == tokens[keep]) keep++;
    s->n = keep;
    kv_trim_slots(d->kvm, &s->kv, keep);
    int end = n_tokens + max_draft - 1; /* the last proposal's input is never fed */
    if (!kv_allocate_slots(d->kvm, &s->kv, end)) {
        dm_seq_release(d, sp); /* the pool is full: no drafts, and leave room for others */
        return 0;
    }
    if (!feed(d, s, tokens + keep, n_tokens - keep)) goto fail;
    out[0] = sampler_argmax(d->logits, d->model->config.n_vocab);
    for (int j = 1; j < max_draft; j++) {
        if (!feed(d, s, out + j - 1, 1)) goto fail;
        out[j] = sampler_argmax(d->logits, d->model->config.n_vocab);
    }
    return max_draft;
fail:
    dm_seq_release(d, sp);
    return 0;
}
