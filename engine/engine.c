/* engine.c -- requests, the scheduler, and the step loop.
 *
 * Like vLLM's v1 scheduler there are no prefill and decode modes: a request
 * has num_computed_tokens (K/V in the cache) and n_tokens (prompt plus
 * generated), and each step hands out tokens under a budget: first one
 * token to every running request that is decoding, then prompt chunks to
 * running requests still prefilling, then to waiting ones (admission). All
 * scheduled tokens run in one batched forward pass. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gl_error.h"
#include "kernels.h"
#include "kv_cache.h"
#include "model.h"
#include "sampler.h"
#include "textstream.h"

/* Prompt positions that may ask for logprobs in one step: bounds the logits
 * buffer (n_vocab floats a row). */
#define PROMPT_LOGPROB_ROWS 64

typedef struct gl_seq {
    uint64_t id;
    void *user;
    int32_t *tokens;          /* prompt then generated, [cap_tokens] */
    int n_tokens;
    int cap_tokens;           /* = the sequence's token limit */
    int n_prompt;
    int num_computed_tokens;  /* positions whose K/V are in the cache */
    int32_t *block_table;     /* [cap_blocks] */
    int n_blocks;
    uint64_t *block_hashes;   /* [cap_blocks] prefix hash of each full block */
    int n_hashed;             /* leading blocks hashed and published */
    int max_generated;        /* generated tokens at most */
    int n_generated;
    int n_cached;             /* prompt tokens served from the prefix cache */
    int prompt_logprobs;      /* -1: none, else top alternatives per prompt token */
    int prompt_logprobs_sent; /* prompt tokens already reported */
    bool ignore_eos;
    bool cancelled;
    gl_sampler *sampler;
    ts_stream *text;
    int n_logprobs;           /* alternatives per generated token */
    bool logprobs;            /* report each generated token's logprob */
    double t_submit, t_scheduled, t_first_token;
    struct gl_seq *next;      /* in the incoming or waiting list */
} gl_seq;

typedef struct seq_queue {
    gl_seq *head, *tail;
    int n;
} seq_queue;

struct gl_engine {
    gl_model *model;
    gl_engine_params params;
    int n_ctx;                /* token limit of one sequence */
    kern_pool *pool;
    gl_kv_cache *kv;
    gl_run_state *rs;
    int max_logits;
    float *logits;            /* [max_logits][n_vocab] */
    gl_top_logprob *top;      /* [20] */

    /* shared with submitting threads, under mutex */
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    seq_queue incoming;
    uint64_t *cancel_ids;
    int n_cancel, cap_cancel;
    uint64_t next_id;
    int n_queued;             /* incoming + waiting, for the queue bound */
    bool woken;

    /* engine thread only */
    seq_queue waiting;
    gl_seq **running;         /* [max_seqs], admission order */
    int n_running;
    gl_engine_stats stats;    /* engine thread's copy */
    gl_engine_stats published; /* what gl_engine_get_stats reads, under mutex */

    /* batch under construction */
    int32_t *b_tokens, *b_positions, *b_seq_of_token, *b_logit_tokens;
    const int32_t **b_tables;
    gl_seq **b_seqs;          /* sequences in this step, by batch seq index */
    int *b_first, *b_count;   /* each scheduled sequence's token range */
    int *b_logit_first;       /* first logits row of each scheduled sequence, or -1 */
    int *b_sample_row;        /* logits row to sample from, or -1 mid-prompt */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void queue_push(seq_queue *q, gl_seq *s) {
    s->next = NULL;
    if (q->tail) q->tail->next = s;
    else q->head = s;
    q->tail = s;
    q->n++;
}

static void queue_push_front(seq_queue *q, gl_seq *s) {
    s->next = q->head;
    q->head = s;
    if (!q->tail) q->tail = s;
    q->n++;
}

/* Remove the element *link points at; prev is the element before it. */
static void queue_unlink(seq_queue *q, gl_seq **link, gl_seq *prev) {
    gl_seq *s = *link;
    *link = s->next;
    if (q->tail == s) q->tail = prev;
    q->n--;
}

static gl_seq *queue_pop(seq_queue *q) {
    gl_seq *s = q->head;
    if (!s) return NULL;
    q->head = s->next;
    if (!q->head) q->tail = NULL;
    q->n--;
    return s;
}

/* The waiting count that bounds submissions; shared with submitting threads. */
static void queued_add(gl_engine *e, int delta) {
    pthread_mutex_lock(&e->mutex);
    e->n_queued += delta;
    pthread_mutex_unlock(&e->mutex);
}

/* ---- parameters ------------------------------------------------------------- */

void gl_engine_params_default(gl_engine_params *p) {
    memset(p, 0, sizeof *p);
    p->n_threads = 0;
    p->kv_cache_mib = 256;
    p->block_size = 16;
    p->max_batch_tokens = 512;
    p->max_seqs = 32;
    p->max_waiting = 256;
    p->prefix_caching = true;
    p->activation_bits = 16;
}

const char *gl_finish_reason_str(gl_finish_reason r) {
    switch (r) {
    case GL_FINISH_STOP: return "stop";
    case GL_FINISH_LENGTH: return "length";
    case GL_FINISH_CANCELLED: return "cancelled";
    case GL_FINISH_ERROR: return "error";
    default: return "none";
    }
}

/* ---- lifetime ----------------------------------------------------------------- */

gl_engine *gl_engine_create(gl_model *model, const gl_engine_params *params, gl_error *err) {
    if (model->vocab_only) {
        gl_error_set(err, "%s: vocab-only GGUF, cannot generate", model->info.path);
        return NULL;
    }
    gl_engine_params p = *params;
    const gl_config *c = &model->config;
    if (p.n_threads <= 0) p.n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (p.n_threads <= 0) p.n_threads = 1;
    if (p.block_size <= 0 || p.block_size > 1024 || p.max_batch_tokens <= 0 || p.max_seqs <= 0 ||
        p.max_waiting < 0 || p.n_ctx < 0 || p.kv_cache_tokens < 0 || p.kv_cache_mib < 0) {
        gl_error_set(err, "invalid engine parameters");
        return NULL;
    }
    if (p.activation_bits != 8 && p.activation_bits != 16) {
        gl_error_set(err, "activation_bits must be 8 or 16, got %d", p.activation_bits);
        return NULL;
    }
    gl_engine *e = calloc(1, sizeof *e);
    if (!e) {
        gl_error_set(err, "out of memory");
        return NULL;
    }
    e->model = model;
    e->params = p;
    pthread_mutex_init(&e->mutex, NULL);
    pthread_cond_init(&e->cond, NULL);
    e->next_id = 1;

    int kv_dim = c->n_kv_heads * c->head_dim;
    size_t block_bytes = kv_block_bytes(c->n_layers, kv_dim, p.block_size, !p.kv_f32);
    int n_blocks = p.kv_cache_tokens > 0 ? (p.kv_cache_tokens + p.block_size - 1) / p.block_size
                                         : (int)(((size_t)p.kv_cache_mib << 20) / block_bytes);
    if (n_blocks < 1) {
        gl_error_set(err, "KV cache of %d MiB holds no block of %zu bytes", p.kv_cache_mib, block_bytes);
        goto fail;
    }
    e->kv = kv_new(c->n_layers, c->n_kv_heads, c->head_dim, p.block_size, n_blocks, !p.kv_f32, err);
    if (!e->kv) goto fail;
    /* One sequence must always fit the pool on its own, so preemption can
     * always make progress: the pool caps the context. */
    e->n_ctx = p.n_ctx > 0 ? p.n_ctx : c->n_ctx_train;
    if (e->n_ctx > n_blocks * p.block_size) e->n_ctx = n_blocks * p.block_size;

    e->pool = kern_pool_new(p.n_threads);
    int widest = c->n_ff > c->n_embd ? c->n_ff : c->n_embd;
    if (!e->pool || kern_pool_reserve(e->pool, (size_t)widest) ||
        kern_pool_reserve_tokens(e->pool, p.max_batch_tokens, widest)) {
        gl_error_set(err, "cannot start %d compute threads", p.n_threads);
        goto fail;
    }
    kern_pool_set_act_bits(e->pool, p.activation_bits); /* validated above */
    e->max_logits = p.max_seqs + PROMPT_LOGPROB_ROWS;
    e->rs = model_run_state_new(model, p.max_batch_tokens, e->max_logits, err);
    if (!e->rs) goto fail;
    int T = p.max_batch_tokens, S = p.max_seqs;
    e->logits = malloc((size_t)e->max_logits * (size_t)c->n_vocab * sizeof(float));
    e->top = calloc(20, sizeof *e->top);
    e->running = calloc((size_t)S, sizeof *e->running);
    e->b_tokens = malloc((size_t)T * sizeof(int32_t));
    e->b_positions = malloc((size_t)T * sizeof(int32_t));
    e->b_seq_of_token = malloc((size_t)T * sizeof(int32_t));
    e->b_logit_tokens = malloc((size_t)e->max_logits * sizeof(int32_t));
    e->b_tables = malloc((size_t)S * sizeof *e->b_tables);
    e->b_seqs = malloc((size_t)S * sizeof *e->b_seqs);
    e->b_first = malloc((size_t)S * sizeof(int));
    e->b_count = malloc((size_t)S * sizeof(int));
    e->b_logit_first = malloc((size_t)S * sizeof(int));
    e->b_sample_row = malloc((size_t)S * sizeof(int));
    if (!e->b_sample_row || !e->logits || !e->top || !e->running || !e->b_tokens || !e->b_positions || !e->b_seq_of_token ||
        !e->b_logit_tokens || !e->b_tables || !e->b_seqs || !e->b_first || !e->b_count || !e->b_logit_first) {
        gl_error_set(err, "out of memory for the engine's buffers");
        goto fail;
    }
    e->stats.n_blocks_total = n_blocks;
    e->stats.block_size = p.block_size;
    e->published = e->stats;
    return e;
fail:
    gl_engine_free(e);
    return NULL;
}

static void seq_free(gl_engine *e, gl_seq *s) {
    if (!s) return;
    for (int i = 0; i < s->n_blocks; i++) kv_release_block(e->kv, s->block_table[i]);
    sampler_free(s->sampler);
    ts_free(s->text);
    free(s->tokens);
    free(s->block_table);
    free(s->block_hashes);
    free(s);
}

void gl_engine_free(gl_engine *e) {
    if (!e) return;
    gl_seq *s;
    while ((s = queue_pop(&e->incoming))) seq_free(e, s);
    while ((s = queue_pop(&e->waiting))) seq_free(e, s);
    for (int i = 0; i < e->n_running; i++) seq_free(e, e->running[i]);
    kv_free(e->kv);
    kern_pool_free(e->pool);
    model_run_state_free(e->rs);
    free(e->logits);
    free(e->top);
    free(e->running);
    free(e->cancel_ids);
    free(e->b_tokens);
    free(e->b_positions);
    free(e->b_seq_of_token);
    free(e->b_logit_tokens);
    free(e->b_tables);
    free(e->b_seqs);
    free(e->b_first);
    free(e->b_count);
    free(e->b_logit_first);
    free(e->b_sample_row);
    pthread_mutex_destroy(&e->mutex);
    pthread_cond_destroy(&e->cond);
    free(e);
}

/* ---- submission (any thread) ---------------------------------------------------- */

uint64_t gl_engine_submit(gl_engine *e, const gl_request *req, bool *queue_full, gl_error *err) {
    if (queue_full) *queue_full = false;
    int n_vocab = e->model->config.n_vocab;
    if (req->n_prompt <= 0) {
        gl_error_set(err, "the prompt is empty");
        return 0;
    }
    if (req->n_prompt >= e->n_ctx) {
        gl_error_set(err, "the prompt has %d tokens, but the context holds %d (including at least one generated token)",
                     req->n_prompt, e->n_ctx);
        return 0;
    }
    for (int i = 0; i < req->n_prompt; i++) {
        if (req->prompt[i] < 0 || req->prompt[i] >= n_vocab) {
            gl_error_set(err, "prompt token id %d is out of range [0, %d)", req->prompt[i], n_vocab);
            return 0;
        }
    }
    if (req->sampling.n_logprobs < 0 || req->sampling.n_logprobs > 20 || req->prompt_logprobs > 20) {
        gl_error_set(err, "logprobs must be between 0 and 20");
        return 0;
    }
    gl_seq *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    int limit = e->n_ctx;
    if (req->max_tokens > 0 && req->n_prompt + req->max_tokens < limit) limit = req->n_prompt + req->max_tokens;
    s->cap_tokens = limit;
    s->max_generated = limit - req->n_prompt;
    s->tokens = malloc((size_t)limit * sizeof *s->tokens);
    int cap_blocks = (limit + e->params.block_size - 1) / e->params.block_size;
    s->block_table = malloc((size_t)cap_blocks * sizeof *s->block_table);
    s->block_hashes = malloc((size_t)cap_blocks * sizeof *s->block_hashes);
    s->sampler = sampler_new(&req->sampling, n_vocab);
    s->text = ts_new(req->stop, req->n_stop);
    if (!s->tokens || !s->block_table || !s->block_hashes || !s->sampler || !s->text) goto oom;
    memcpy(s->tokens, req->prompt, (size_t)req->n_prompt * sizeof *s->tokens);
    s->n_tokens = s->n_prompt = req->n_prompt;
    for (int i = 0; i < req->n_prompt; i++) sampler_accept(s->sampler, req->prompt[i]);
    /* Prompt block hashes up front: admission compares them with the
     * blocks other sequences are still computing. */
    int bs = e->params.block_size;
    for (int i = 0; i < req->n_prompt / bs; i++)
        s->block_hashes[i] = kv_hash_block(i ? s->block_hashes[i - 1] : 0, s->tokens + (size_t)i * (size_t)bs, bs);
    s->user = req->user;
    s->ignore_eos = req->ignore_eos;
    s->prompt_logprobs = req->prompt_logprobs;
    s->n_logprobs = req->sampling.n_logprobs;
    s->logprobs = req->sampling.logprobs;
    s->t_submit = now_s();

    pthread_mutex_lock(&e->mutex);
    if (e->n_queued >= e->params.max_waiting) {
        pthread_mutex_unlock(&e->mutex);
        if (queue_full) *queue_full = true;
        gl_error_set(err, "the waiting queue is full (%d requests)", e->params.max_waiting);
        seq_free(e, s);
        return 0;
    }
    s->id = e->next_id++;
    queue_push(&e->incoming, s);
    e->n_queued++;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mutex);
    return s->id;
oom:
    seq_free(e, s);
    gl_error_set(err, "out of memory");
    return 0;
}

void gl_engine_cancel(gl_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mutex);
    if (e->n_cancel == e->cap_cancel) {
        int cap = e->cap_cancel ? 2 * e->cap_cancel : 16;
        uint64_t *ids = realloc(e->cancel_ids, (size_t)cap * sizeof *ids);
        if (!ids) { /* keep the request running rather than lose the lock */
            pthread_mutex_unlock(&e->mutex);
            return;
        }
        e->cancel_ids = ids;
        e->cap_cancel = cap;
    }
    e->cancel_ids[e->n_cancel++] = id;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mutex);
}

void gl_engine_wait(gl_engine *e) {
    pthread_mutex_lock(&e->mutex);
    while (!e->woken && e->incoming.n == 0 && e->n_cancel == 0 && e->waiting.n == 0 && e->n_running == 0)
        pthread_cond_wait(&e->cond, &e->mutex);
    e->woken = false;
    pthread_mutex_unlock(&e->mutex);
}

void gl_engine_wake(gl_engine *e) {
    pthread_mutex_lock(&e->mutex);
    e->woken = true;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mutex);
}

void gl_engine_get_stats(gl_engine *e, gl_engine_stats *out) {
    pthread_mutex_lock(&e->mutex);
    *out = e->published;
    out->n_waiting = e->n_queued; /* live: submissions land between steps */
    pthread_mutex_unlock(&e->mutex);
}

/* ---- events ------------------------------------------------------------------------ */

static void emit_finished(gl_engine *e, gl_seq *s, gl_finish_reason reason, const char *error, gl_event_fn fn,
                          void *ctx) {
    const char *text = "";
    size_t text_len = 0;
    if (reason != GL_FINISH_CANCELLED && reason != GL_FINISH_ERROR) ts_finish(s->text, &text, &text_len);
    double t = now_s();
    gl_event ev = {
        .type = GL_EVENT_FINISHED,
        .request_id = s->id,
        .user = s->user,
        .token = -1,
        .text = text,
        .text_len = text_len,
        .finish = reason,
        .error = error,
        .n_prompt_tokens = s->n_prompt,
        .n_cached_tokens = s->n_cached,
        .n_generated = s->n_generated,
        .t_queued = (s->t_scheduled > 0 ? s->t_scheduled : t) - s->t_submit,
        .t_first_token = s->t_first_token > 0 ? s->t_first_token - s->t_submit : 0,
        .t_total = t - s->t_submit,
    };
    if (fn) fn(&ev, ctx);
    (void)e;
}

/* Remove running[i], keeping admission order. */
static void running_remove(gl_engine *e, int i) {
    memmove(&e->running[i], &e->running[i + 1], (size_t)(e->n_running - i - 1) * sizeof *e->running);
    e->n_running--;
}

static void apply_cancels(gl_engine *e, uint64_t *ids, int n, gl_event_fn fn, void *ctx) {
    for (int c = 0; c < n; c++) {
        for (int i = 0; i < e->n_running; i++) {
            if (e->running[i]->id == ids[c]) {
                gl_seq *s = e->running[i];
                running_remove(e, i);
                emit_finished(e, s, GL_FINISH_CANCELLED, NULL, fn, ctx);
                seq_free(e, s);
                break;
            }
        }
        gl_seq **link = &e->waiting.head, *prev = NULL;
        while (*link) {
            gl_seq *s = *link;
            if (s->id == ids[c]) {
                queue_unlink(&e->waiting, link, prev);
                emit_finished(e, s, GL_FINISH_CANCELLED, NULL, fn, ctx);
                seq_free(e, s);
                queued_add(e, -1);
                break;
            }
            prev = s;
            link = &s->next;
        }
    }
}

/* ---- scheduling ------------------------------------------------------------------- */

/* Give a preempted sequence's blocks back and queue it first in line: it
 * recomputes its prompt and generated tokens later; its client only waits. */
static void preempt(gl_engine *e, int i) {
    gl_seq *s = e->running[i];
    running_remove(e, i);
    for (int b = 0; b < s->n_blocks; b++) kv_release_block(e->kv, s->block_table[b]);
    s->n_blocks = 0;
    s->n_hashed = 0;
    s->num_computed_tokens = 0;
    queue_push_front(&e->waiting, s);
    e->stats.n_preemptions++;
    queued_add(e, +1);
}

/* Blocks s needs so that positions below end are backed. */
static int blocks_needed(const gl_engine *e, const gl_seq *s, int end) {
    int need = (end + e->params.block_size - 1) / e->params.block_size - s->n_blocks;
    return need > 0 ? need : 0;
}

static void grow_blocks(gl_engine *e, gl_seq *s, int end) {
    for (int n = blocks_needed(e, s, end); n > 0; n--) s->block_table[s->n_blocks++] = kv_alloc_block(e->kv);
}

/* Whether the row at pos yields a prompt logprob still to report: it
 * predicts prompt token pos + 1, which has not been reported yet. */
static bool wants_prompt_logprob(const gl_seq *s, int pos) {
    return s->prompt_logprobs >= 0 && pos + 1 < s->n_prompt && pos + 1 >= s->prompt_logprobs_sent;
}

/* Add n tokens of s (from num_computed_tokens) to the batch. */
static void schedule(gl_engine *e, gl_seq *s, int n, int *n_batch_tokens, int *n_seqs, int *n_logits) {
    int si = (*n_seqs)++;
    e->b_seqs[si] = s;
    e->b_tables[si] = s->block_table;
    e->b_first[si] = *n_batch_tokens;
    e->b_count[si] = n;
    e->b_logit_first[si] = -1;
    e->b_sample_row[si] = -1;
    if (s->t_scheduled == 0) s->t_scheduled = now_s();
    int first = s->num_computed_tokens;
    for (int j = 0; j < n; j++) {
        int t = (*n_batch_tokens)++;
        e->b_tokens[t] = s->tokens[first + j];
        e->b_positions[t] = first + j;
        e->b_seq_of_token[t] = si;
    }
    /* Logits: every row whose next token is a prompt token still to report,
     * and the last row when it predicts a new token. */
    bool samples = first + n == s->n_tokens;
    for (int j = 0; j < n; j++) {
        int pos = first + j;
        bool want = (samples && j == n - 1) ||
                    wants_prompt_logprob(s, pos);
        if (!want) continue;
        if (e->b_logit_first[si] < 0) e->b_logit_first[si] = *n_logits;
        if (samples && j == n - 1) e->b_sample_row[si] = *n_logits;
        e->b_logit_tokens[(*n_logits)++] = e->b_first[si] + j;
    }
}

/* Hash of block i of s: precomputed for the prompt, computed for blocks
 * holding generated tokens (their predecessors are hashed already). */
static uint64_t block_hash(const gl_engine *e, gl_seq *s, int i) {
    int bs = e->params.block_size;
    if (i >= s->n_prompt / bs)
        s->block_hashes[i] = kv_hash_block(i ? s->block_hashes[i - 1] : 0, s->tokens + (size_t)i * (size_t)bs, bs);
    return s->block_hashes[i];
}

/* True when a running sequence is computing block i with this hash right
 * now: waiting for it to be published beats computing it twice (n > 1
 * completions of one prompt, or a burst of requests with a shared prefix). */
static bool block_in_flight(const gl_engine *e, int i, uint64_t hash) {
    int bs = e->params.block_size;
    for (int r = 0; r < e->n_running; r++) {
        const gl_seq *o = e->running[r];
        if (o->n_hashed <= i && i < o->n_prompt / bs && o->block_hashes[i] == hash) return true;
    }
    return false;
}

/* Take the cached blocks that hold a prefix of s (a sequence with no
 * blocks yet). The last token is always recomputed: its logits are needed.
 * Returns false when the next block is being computed by another sequence
 * (the caller retries next step). */
static bool prefix_lookup(gl_engine *e, gl_seq *s) {
    int bs = e->params.block_size;
    int max_blocks = (s->n_tokens - 1) / bs;
    while (s->n_blocks < max_blocks) {
        int i = s->n_blocks;
        uint64_t parent = i ? s->block_hashes[i - 1] : 0, h = block_hash(e, s, i);
        int b = kv_lookup(e->kv, h, parent, s->tokens + (size_t)i * (size_t)bs);
        if (b < 0) {
            if (block_in_flight(e, i, h)) return false;
            break;
        }
        kv_share_block(e->kv, b);
        s->block_table[s->n_blocks++] = b;
    }
    s->n_hashed = s->n_blocks;
    s->num_computed_tokens = s->n_blocks * bs;
    return true;
}

/* Give back what prefix_lookup took (the sequence could not be admitted). */
static void prefix_unlookup(gl_engine *e, gl_seq *s) {
    for (int b = 0; b < s->n_blocks; b++) kv_release_block(e->kv, s->block_table[b]);
    s->n_blocks = s->n_hashed = s->num_computed_tokens = 0;
}

/* Publish the blocks of s that became full and computed. */
static void prefix_publish(gl_engine *e, gl_seq *s) {
    int bs = e->params.block_size;
    while ((s->n_hashed + 1) * bs <= s->num_computed_tokens) {
        int i = s->n_hashed;
        uint64_t h = block_hash(e, s, i);
        kv_register(e->kv, s->block_table[i], h, i ? s->block_hashes[i - 1] : 0, s->tokens + (size_t)i * (size_t)bs);
        s->n_hashed++;
    }
}

/* Tokens of s to run this step under the budget, the block pool and (for
 * prompt logprobs) the logits rows left. */
static int chunk_size(const gl_engine *e, const gl_seq *s, int budget, int logits_left) {
    int n = s->n_tokens - s->num_computed_tokens;
    if (n > budget) n = budget;
    if (s->prompt_logprobs >= 0 && s->num_computed_tokens < s->n_prompt && n > logits_left - 1) n = logits_left - 1;
    int free_tokens = (s->n_blocks * e->params.block_size - s->num_computed_tokens) +
                      kv_n_free(e->kv) * e->params.block_size;
    if (n > free_tokens) n = free_tokens;
    return n > 0 ? n : 0;
}

/* ---- the step ------------------------------------------------------------------------ */

static void finish_running(gl_engine *e, gl_seq *s, gl_finish_reason reason, gl_event_fn fn, void *ctx) {
    for (int i = 0; i < e->n_running; i++) {
        if (e->running[i] == s) {
            running_remove(e, i);
            break;
        }
    }
    emit_finished(e, s, reason, NULL, fn, ctx);
    seq_free(e, s);
}

/* Report prompt logprobs of the rows computed this step. */
static void emit_prompt_logprobs(gl_engine *e, gl_seq *s, int si, gl_event_fn fn, void *ctx) {
    int n_vocab = e->model->config.n_vocab;
    int first = s->num_computed_tokens, n = e->b_count[si];
    int row = e->b_logit_first[si];
    for (int j = 0; j < n; j++) {
        int pos = first + j;
        if (!wants_prompt_logprob(s, pos)) {
            if (first + n == s->n_tokens && j == n - 1) break; /* the sampling row, handled later */
            continue;
        }
        if (s->prompt_logprobs_sent == 0) { /* nothing predicts the first token */
            gl_event ev = {.type = GL_EVENT_PROMPT_TOKEN, .request_id = s->id, .user = s->user,
                           .token = s->tokens[0], .logprob = NAN, .text = "", .n_top = 0};
            if (fn) fn(&ev, ctx);
            s->prompt_logprobs_sent = 1;
        }
        int32_t tok = s->tokens[pos + 1];
        float lp = sampler_logprob(e->logits + (size_t)row * (size_t)n_vocab, n_vocab, tok, e->top, s->prompt_logprobs);
        row++;
        gl_event ev = {.type = GL_EVENT_PROMPT_TOKEN, .request_id = s->id, .user = s->user, .token = tok,
                       .logprob = lp, .text = "", .n_top = s->prompt_logprobs, .top = e->top};
        if (fn) fn(&ev, ctx);
        s->prompt_logprobs_sent = pos + 2;
    }
}

int gl_engine_step(gl_engine *e, gl_event_fn fn, void *ctx) {
    gl_model *m = e->model;
    int n_vocab = m->config.n_vocab;

    /* Take what other threads handed in. */
    uint64_t cancel_local[64];
    int n_cancel;
    pthread_mutex_lock(&e->mutex);
    gl_seq *s;
    while ((s = queue_pop(&e->incoming))) queue_push(&e->waiting, s);
    n_cancel = e->n_cancel < 64 ? e->n_cancel : 64;
    if (n_cancel > 0) {
        memcpy(cancel_local, e->cancel_ids, (size_t)n_cancel * sizeof *cancel_local);
        memmove(e->cancel_ids, e->cancel_ids + n_cancel, (size_t)(e->n_cancel - n_cancel) * sizeof *cancel_local);
        e->n_cancel -= n_cancel;
    }
    pthread_mutex_unlock(&e->mutex);
    apply_cancels(e, cancel_local, n_cancel, fn, ctx);

    int budget = e->params.max_batch_tokens;
    int n_batch = 0, n_seqs = 0, n_logits = 0;

    /* 1. one token for every running sequence that is decoding */
    for (int i = 0; i < e->n_running && budget > 0; i++) {
        gl_seq *r = e->running[i];
        if (r->n_tokens - r->num_computed_tokens != 1) continue;
        while (blocks_needed(e, r, r->n_tokens) > kv_n_free(e->kv)) {
            preempt(e, e->n_running - 1); /* the most recently admitted */
            if (e->n_running <= i) break; /* r itself was the one */
        }
        if (e->n_running <= i) break;
        grow_blocks(e, r, r->n_tokens);
        schedule(e, r, 1, &n_batch, &n_seqs, &n_logits);
        budget--;
    }
    /* 2. prompt chunks of running sequences still prefilling */
    for (int i = 0; i < e->n_running && budget > 0; i++) {
        gl_seq *r = e->running[i];
        if (r->n_tokens - r->num_computed_tokens <= 1) continue;
        int n = chunk_size(e, r, budget, e->max_logits - n_logits - (e->n_running - n_seqs));
        if (n == 0) continue;
        grow_blocks(e, r, r->num_computed_tokens + n);
        schedule(e, r, n, &n_batch, &n_seqs, &n_logits);
        budget -= n;
    }
    /* 3. admit waiting sequences, first come first served (one whose prefix
     * another sequence is computing waits a step for the cache instead) */
    gl_seq **link = &e->waiting.head, *prev = NULL;
    while (*link && budget > 0 && e->n_running < e->params.max_seqs) {
        gl_seq *w = *link;
        /* cached positions produce no logits, so prompt logprobs need them all computed */
        bool use_cache = e->params.prefix_caching && !(w->prompt_logprobs >= 0 && w->prompt_logprobs_sent < w->n_prompt);
        if (use_cache && !prefix_lookup(e, w)) {
            prefix_unlookup(e, w);
            prev = w;
            link = &w->next;
            continue;
        }
        int n = chunk_size(e, w, budget, e->max_logits - n_logits - (e->n_running - n_seqs) - 1);
        if (n == 0) {
            prefix_unlookup(e, w);
            break;
        }
        if (w->t_scheduled == 0) { /* first admission: count cache use once */
            w->n_cached = w->num_computed_tokens;
            e->stats.prefix_queries += (uint64_t)w->n_prompt;
            e->stats.prefix_hits += (uint64_t)w->n_cached;
        }
        queue_unlink(&e->waiting, link, prev);
        queued_add(e, -1);
        e->running[e->n_running++] = w;
        grow_blocks(e, w, w->num_computed_tokens + n);
        schedule(e, w, n, &n_batch, &n_seqs, &n_logits);
        budget -= n;
    }

    if (n_batch > 0) {
        gl_batch batch = {.n_tokens = n_batch, .tokens = e->b_tokens, .positions = e->b_positions,
                          .seq_of_token = e->b_seq_of_token, .block_tables = e->b_tables,
                          .n_logits = n_logits, .logit_tokens = e->b_logit_tokens};
        gl_error err;
        if (model_forward(m, e->rs, e->pool, e->kv, &batch, e->logits, &err)) {
            for (int si = 0; si < n_seqs; si++) {
                gl_seq *r = e->b_seqs[si];
                for (int i = 0; i < e->n_running; i++)
                    if (e->running[i] == r) running_remove(e, i);
                emit_finished(e, r, GL_FINISH_ERROR, err.message, fn, ctx);
                seq_free(e, r);
            }
            n_seqs = 0;
        }
        e->stats.n_steps++;
        e->stats.last_batch_seqs = n_seqs;
        e->stats.last_batch_tokens = n_batch;
    }

    /* Sample, stream, check stops. */
    for (int si = 0; si < n_seqs; si++) {
        gl_seq *r = e->b_seqs[si];
        if (r->prompt_logprobs >= 0 && r->num_computed_tokens < r->n_prompt) emit_prompt_logprobs(e, r, si, fn, ctx);
        r->num_computed_tokens += e->b_count[si];
        if (e->params.prefix_caching) prefix_publish(e, r);
        if (e->b_sample_row[si] < 0) continue; /* mid-prompt chunk */
        float *row = e->logits + (size_t)e->b_sample_row[si] * (size_t)n_vocab;
        float logprob = NAN;
        int32_t tok = sampler_sample(r->sampler, row, r->logprobs ? &logprob : NULL, r->logprobs ? e->top : NULL);
        if (r->t_first_token == 0) r->t_first_token = now_s();
        if (!r->ignore_eos && tok_is_eog(m->tokenizer, tok)) {
            finish_running(e, r, GL_FINISH_STOP, fn, ctx);
            continue;
        }
        sampler_accept(r->sampler, tok);
        r->tokens[r->n_tokens++] = tok;
        r->n_generated++;
        size_t piece_len;
        const char *piece = tok_piece(m->tokenizer, tok, &piece_len);
        const char *text;
        size_t text_len;
        bool stopped = ts_push(r->text, piece, piece_len, &text, &text_len);
        gl_event ev = {.type = GL_EVENT_TOKEN, .request_id = r->id, .user = r->user, .token = tok,
                       .text = text, .text_len = text_len, .logprob = logprob, .n_top = r->logprobs ? r->n_logprobs : 0,
                       .top = e->top, .n_generated = r->n_generated};
        if (fn) fn(&ev, ctx);
        if (stopped) finish_running(e, r, GL_FINISH_STOP, fn, ctx);
        else if (r->n_generated >= r->max_generated || r->n_tokens >= r->cap_tokens)
            finish_running(e, r, GL_FINISH_LENGTH, fn, ctx);
    }

    e->stats.n_running = e->n_running;
    e->stats.n_blocks_used = e->kv->n_blocks - kv_n_free(e->kv);
    pthread_mutex_lock(&e->mutex);
    e->stats.n_waiting = e->n_queued;
    e->published = e->stats;
    pthread_mutex_unlock(&e->mutex);
    return n_seqs;
}
