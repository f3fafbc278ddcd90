/* engine.c -- requests in, events out: the step in three phases.
 *
 *   sched_schedule()      scheduler.c  which sequences run, how many tokens each
 *   run_model()           here         the plan as one batched forward pass (model.c)
 *   update_from_output()  here         sample, append, stop rules, events
 *
 * Submitting threads hand requests and cancels over under the mutex; one
 * thread runs the steps. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gl_error.h"
#include "grammar.h"
#include "kernels.h"
#include "kv_cache.h"
#include "kv_disk.h"
#include "kv_manager.h"
#include "model.h"
#include "reasoning.h"
#include "sampler.h"
#include "scheduler.h"
#include "spec.h"
#include "textstream.h"

/* Prompt positions that may ask for logprobs in one step: bounds the logits
 * buffer (n_vocab floats a row). */
#define PROMPT_LOGPROB_ROWS 64

struct gl_engine {
    gl_model *model;
    gl_engine_params params;
    int n_ctx;                /* token limit of one sequence */
    kern_pool *pool;
    gl_kv_cache *kv;          /* the block pool */
    kv_manager *kvm;          /* sequences' blocks over the pool */
    kv_disk *disk;            /* the prefix cache's folder, or NULL */
    scheduler *sched;         /* waiting and running sequences (engine thread only) */
    gl_run_state *rs;
    float *logits;            /* [max_logits][n_vocab] */
    gl_top_logprob *top;      /* [20] */
    gr_vocab *vocab;          /* token bytes for grammar masks */
    gl_spec *spec;            /* speculative decoding (spec.h), or NULL when off */
    int32_t *eog_ids;         /* end-of-generation tokens, banned under min_tokens */
    int n_eog;

    /* shared with submitting threads, under mutex */
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    seq_queue incoming;
    uint64_t *cancel_ids;
    int n_cancel, cap_cancel;
    uint64_t next_id;
    int n_queued;             /* incoming + waiting, for the queue bound */
    bool woken;

    gl_engine_stats stats;    /* engine thread's copy */
    gl_engine_stats published; /* what gl_engine_get_stats reads, under mutex */

    /* the forward pass's inputs, built from the plan */
    int32_t *b_tokens, *b_positions, *b_seq_of_token; /* [max_batch_tokens] */
    const int32_t **b_tables; /* [max_seqs] block table of each planned sequence */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
    p->prefill_first_tokens = 64;
    p->max_seqs = 32;
    p->max_waiting = 256;
    p->prefix_caching = true;
    p->kv_cache_dir_mib = 4096;
    p->activation_bits = 12; /* docs/activation-precision.md: within the exactness bar, prompts faster */
    p->spec_mode = GL_SPEC_NGRAM; /* README "Speculative decoding": the rule drafts only where it pays */
    p->spec_max_tokens = 8;
    p->spec_ngram_min = 2;
    p->spec_ngram_max = 4;
}

bool gl_activation_bits_valid(int bits) { return bits == 8 || bits == 12 || bits == 16; }

static const char *const kv_type_names[] = {[GL_KV_F16] = "f16", [GL_KV_Q8_0] = "q8_0", [GL_KV_F32] = "f32"};

bool gl_kv_type_parse(const char *s, gl_kv_type *out) {
    for (int t = 0; t < (int)(sizeof kv_type_names / sizeof *kv_type_names); t++) {
        if (s && !strcmp(s, kv_type_names[t])) {
            *out = (gl_kv_type)t;
            return true;
        }
    }
    return false;
}

const char *gl_kv_type_name(gl_kv_type t) {
    return (unsigned)t < sizeof kv_type_names / sizeof *kv_type_names ? kv_type_names[t] : "?";
}

const char *gl_kernels_name(void) {
    return kern_backend();
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

static gr_vocab *engine_vocab(gl_engine *e, const gl_model *m) {
    int n = m->config.n_vocab;
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    bool *eog = malloc((size_t)n * sizeof *eog);
    gr_vocab *v = NULL;
    if (pieces && lens && eog) {
        for (int t = 0; t < n; t++) {
            pieces[t] = tok_piece(m->tokenizer, t, &lens[t]);
            if (!pieces[t]) lens[t] = 0;
            eog[t] = tok_is_eog(m->tokenizer, t);
            e->n_eog += eog[t];
        }
        e->eog_ids = malloc((size_t)(e->n_eog ? e->n_eog : 1) * sizeof *e->eog_ids);
        for (int t = 0, k = 0; e->eog_ids && t < n; t++)
            if (eog[t]) e->eog_ids[k++] = t;
        v = gr_vocab_create(n, pieces, lens, eog);
    }
    free(pieces);
    free(lens);
    free(eog);
    return v;
}

gl_engine *gl_engine_create(gl_model *model, const gl_engine_params *params, gl_error *err) {
    if (model->vocab_only) {
        gl_error_set(err, "%s: vocab-only GGUF, cannot generate", model->info.path);
        return NULL;
    }
    gl_engine_params p = *params;
    const gl_config *c = &model->config;
    if (p.n_threads <= 0) p.n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (p.n_threads <= 0) p.n_threads = 1;
    if (p.block_size <= 0 || p.block_size > 1024 || p.max_batch_tokens <= 0 || p.prefill_first_tokens < 0 || p.max_seqs <= 0 ||
        p.max_waiting < 0 || p.n_ctx < 0 || p.kv_cache_tokens < 0 || p.kv_cache_mib < 0) {
        gl_error_set(err, "invalid engine parameters");
        return NULL;
    }
    if ((unsigned)p.kv_type > GL_KV_F32) {
        gl_error_set(err, "kv_type must be f16, q8_0 or f32");
        return NULL;
    }
    if (p.spec_mode != GL_SPEC_OFF && p.spec_mode != GL_SPEC_NGRAM && p.spec_mode != GL_SPEC_DRAFT) {
        gl_error_set(err, "unknown speculative decoding mode %d", p.spec_mode);
        return NULL;
    }
    if (p.spec_mode != GL_SPEC_OFF &&
        (p.spec_max_tokens < 1 || p.spec_max_tokens > GL_SPEC_MAX || p.spec_ngram_min < 1 ||
         p.spec_ngram_max < p.spec_ngram_min || p.spec_ngram_max > 64)) {
        gl_error_set(err, "speculative decoding: max tokens must be 1..%d and the n-gram range 1 <= min <= max <= 64 "
                     "(got %d, %d..%d)", GL_SPEC_MAX, p.spec_max_tokens, p.spec_ngram_min, p.spec_ngram_max);
        return NULL;
    }
    if (!gl_activation_bits_valid(p.activation_bits)) {
        gl_error_set(err, "activation_bits must be 8, 12 or 16, got %d", p.activation_bits);
        return NULL;
    }
    if (p.spec_mode == GL_SPEC_DRAFT && (!p.spec_draft_model || !*p.spec_draft_model)) {
        gl_error_set(err, "speculative decoding with a draft model needs the draft model's file (--model-draft)");
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
    size_t block_bytes = kv_block_bytes(c->n_layers, kv_dim, c->head_dim, p.block_size, p.kv_type);
    int n_blocks = p.kv_cache_tokens > 0 ? (p.kv_cache_tokens + p.block_size - 1) / p.block_size
                                         : (int)(((size_t)p.kv_cache_mib << 20) / block_bytes);
    if (n_blocks < 1) {
        gl_error_set(err, "KV cache of %d MiB holds no block of %zu bytes", p.kv_cache_mib, block_bytes);
        goto fail;
    }
    e->kv = kv_create(c->n_layers, c->n_kv_heads, c->head_dim, p.block_size, n_blocks, p.kv_type, err);
    if (!e->kv) goto fail;
    /* One sequence must always fit the pool on its own, so preemption can
     * always make progress: the pool caps the context. */
    e->n_ctx = p.n_ctx > 0 ? p.n_ctx : c->n_ctx_train;
    if (e->n_ctx > n_blocks * p.block_size) e->n_ctx = n_blocks * p.block_size;

    e->pool = kern_pool_create(p.n_threads);
    if (!e->pool || kern_pool_reserve(e->pool, (size_t)c->n_widest) ||
        kern_pool_reserve_tokens(e->pool, p.max_batch_tokens, c->n_widest)) {
        gl_error_set(err, "cannot start %d compute threads", p.n_threads);
        goto fail;
    }
    kern_pool_set_act_bits(e->pool, p.activation_bits); /* validated above */
    if (p.spec_mode != GL_SPEC_OFF && !(e->spec = spec_create(&p, model, e->pool, n_blocks * p.block_size, err)))
        goto fail;
    int draft_rows = spec_draft_rows(&p);
    sched_limits limits = {.max_batch_tokens = p.max_batch_tokens, .max_seqs = p.max_seqs,
                           .max_logits = p.max_seqs + PROMPT_LOGPROB_ROWS + draft_rows,
                           .prefill_first_tokens = p.prefill_first_tokens};
    e->rs = model_run_state_create(model, p.max_batch_tokens, limits.max_logits, err);
    if (!e->rs) goto fail;
    int T = p.max_batch_tokens;
    e->kvm = kv_manager_create(e->kv, p.prefix_caching);
    e->sched = e->kvm ? sched_create(&limits, e->kvm, p.prefix_caching) : NULL;
    if (e->kvm && p.kv_cache_dir && *p.kv_cache_dir) {
        if (!p.prefix_caching || p.kv_cache_dir_mib <= 0) {
            gl_error_set(err, "kv_cache_dir needs prefix caching on and a size bound above 0 MiB");
            goto fail;
        }
        e->disk = kv_disk_create(p.kv_cache_dir, (uint64_t)p.kv_cache_dir_mib << 20, e->kv,
                                 kv_disk_identity(model, p.activation_bits), err);
        if (!e->disk) goto fail;
        kv_manager_set_disk(e->kvm, e->disk);
    }
    e->logits = malloc((size_t)limits.max_logits * (size_t)c->n_vocab * sizeof(float));
    e->top = calloc(20, sizeof *e->top);
    e->vocab = engine_vocab(e, model);
    e->b_tokens = malloc((size_t)T * sizeof(int32_t));
    e->b_positions = malloc((size_t)T * sizeof(int32_t));
    e->b_seq_of_token = malloc((size_t)T * sizeof(int32_t));
    e->b_tables = malloc((size_t)p.max_seqs * sizeof *e->b_tables);
    if (!e->sched || !e->logits || !e->top || !e->vocab || !e->eog_ids || !e->b_tokens || !e->b_positions || !e->b_seq_of_token || !e->b_tables) {
        gl_error_set(err, "out of memory for the engine's buffers");
        goto fail;
    }
    e->stats.n_blocks_total = n_blocks;
    e->stats.block_size = p.block_size;
    e->stats.kv_capacity_tokens = n_blocks * p.block_size;
    e->published = e->stats;
    return e;
fail:
    gl_engine_free(e);
    return NULL;
}

void gl_engine_free(gl_engine *e) {
    if (!e) return;
    gl_seq *s;
    while ((s = queue_pop(&e->incoming))) seq_free(e->kvm, s);
    sched_free(e->sched);
    kv_manager_free(e->kvm);
    kv_disk_free(e->disk); /* writes out what is still queued */
    kv_free(e->kv);
    kern_pool_free(e->pool);
    model_run_state_free(e->rs);
    free(e->logits);
    free(e->top);
    gr_vocab_free(e->vocab);
    spec_free(e->spec); /* after sched_free: the sequences' draft states go with it */
    free(e->eog_ids);
    free(e->cancel_ids);
    free(e->b_tokens);
    free(e->b_positions);
    free(e->b_seq_of_token);
    free(e->b_tables);
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
    int limit = e->n_ctx;
    if (req->max_tokens > 0 && req->n_prompt + req->max_tokens < limit) limit = req->n_prompt + req->max_tokens;
    gl_seq *s = request_create(req, limit, e->params.block_size, n_vocab, e->vocab, e->model->tokenizer, e->spec, err);
    if (!s) return 0;
    s->t_submit = now_s();

    pthread_mutex_lock(&e->mutex);
    if (e->n_queued >= e->params.max_waiting) {
        pthread_mutex_unlock(&e->mutex);
        if (queue_full) *queue_full = true;
        gl_error_set(err, "the waiting queue is full (%d requests)", e->params.max_waiting);
        seq_free(NULL, s);
        return 0;
    }
    uint64_t id = s->id = e->next_id++;
    queue_push(&e->incoming, s);
    e->n_queued++;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mutex);
    return id; /* s may be finished and freed by the engine thread already */
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
    while (!e->woken && e->incoming.n == 0 && e->n_cancel == 0 && e->sched->waiting.n == 0 && e->sched->n_running == 0)
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

static void emit_finished(gl_seq *s, gl_finish_reason reason, const char *error, gl_event_fn fn, void *ctx) {
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
        .stop_index = reason == GL_FINISH_STOP ? ts_stop_matched(s->text) : -1,
        .error = error,
        .n_prompt_tokens = s->n_prompt,
        .n_cached_tokens = s->n_cached,
        .n_generated = s->n_generated,
        .n_reasoning_tokens = s->reasoning ? rs_thinking_tokens(s->reasoning) : 0,
        .t_queued = (s->t_scheduled > 0 ? s->t_scheduled : t) - s->t_submit,
        .t_first_token = s->t_first_token > 0 ? s->t_first_token - s->t_submit : 0,
        .t_total = t - s->t_submit,
        .n_draft_tokens = s->spec.n_draft_total,
        .n_accepted_tokens = s->spec.n_accepted_total,
    };
    if (fn) fn(&ev, ctx);
}

/* Take s out of the scheduler, report its end and free it. */
static void finish(gl_engine *e, gl_seq *s, gl_finish_reason reason, const char *error, gl_event_fn fn, void *ctx) {
    bool was_waiting;
    sched_remove(e->sched, s, &was_waiting);
    if (was_waiting) queued_add(e, -1);
    emit_finished(s, reason, error, fn, ctx);
    request_free(e->kvm, e->spec, s);
}

/* Move what other threads handed in (requests, cancels) to the scheduler. */
static void take_submissions(gl_engine *e, gl_event_fn fn, void *ctx) {
    uint64_t cancel_local[64];
    pthread_mutex_lock(&e->mutex);
    gl_seq *s;
    while ((s = queue_pop(&e->incoming))) queue_push(&e->sched->waiting, s);
    int n_cancel = e->n_cancel < 64 ? e->n_cancel : 64;
    if (n_cancel > 0) {
        memcpy(cancel_local, e->cancel_ids, (size_t)n_cancel * sizeof *cancel_local);
        memmove(e->cancel_ids, e->cancel_ids + n_cancel, (size_t)(e->n_cancel - n_cancel) * sizeof *cancel_local);
        e->n_cancel -= n_cancel;
    }
    pthread_mutex_unlock(&e->mutex);
    for (int c = 0; c < n_cancel; c++) {
        gl_seq *victim = sched_find(e->sched, cancel_local[c]);
        if (victim) finish(e, victim, GL_FINISH_CANCELLED, NULL, fn, ctx);
    }
}

/* ---- phase 2: the forward pass ------------------------------------------------------- */

/* Runs the plan's tokens through the model into e->logits. When the pass
 * fails every planned sequence finishes with the error; returns false. */
static bool run_model(gl_engine *e, const sched_plan *plan, gl_event_fn fn, void *ctx) {
    for (int si = 0; si < plan->n_entries; si++) {
        const sched_entry *en = &plan->entries[si];
        const gl_seq *s = en->seq;
        e->b_tables[si] = s->kv.block_table;
        for (int j = 0; j < en->n_tokens; j++) {
            int t = en->first + j;
            e->b_tokens[t] = s->tokens[s->num_computed_tokens + j];
            e->b_positions[t] = s->num_computed_tokens + j;
            e->b_seq_of_token[t] = si;
        }
    }
    gl_batch batch = {.n_tokens = plan->n_tokens, .tokens = e->b_tokens, .positions = e->b_positions,
                      .seq_of_token = e->b_seq_of_token, .block_tables = e->b_tables,
                      .n_logits = plan->n_logits, .logit_tokens = plan->logit_tokens};
    gl_error err;
    e->stats.n_steps++;
    e->stats.last_batch_tokens = plan->n_tokens;
    e->stats.last_batch_seqs = plan->n_entries;
    if (!model_forward(e->model, e->rs, e->pool, e->kv, &batch, e->logits, &err)) return true;
    for (int si = 0; si < plan->n_entries; si++) finish(e, plan->entries[si].seq, GL_FINISH_ERROR, err.message, fn, ctx);
    e->stats.last_batch_seqs = 0;
    return false;
}

/* ---- phase 3: tokens and events from the logits ----------------------------------------- */

/* Report prompt logprobs of the rows computed this step. */
static void emit_prompt_logprobs(gl_engine *e, const sched_entry *en, gl_event_fn fn, void *ctx) {
    gl_seq *s = en->seq;
    int n_vocab = e->model->config.n_vocab;
    int first = s->num_computed_tokens, n = en->n_tokens;
    int row = en->logit_first;
    for (int j = 0; j < n; j++) {
        int pos = first + j;
        if (!seq_wants_prompt_logprob(s, pos)) {
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

/* Prefill progress, when asked: processed counts the prompt tokens in the
 * cache (cached ones included); a preempted sequence's recomputation is not
 * reported again. */
static void emit_progress(gl_seq *s, int processed, gl_event_fn fn, void *ctx) {
    if (processed > s->n_prompt) processed = s->n_prompt;
    if (!s->prompt_progress || processed <= s->progress_sent || !fn) return;
    s->progress_sent = processed;
    double t = now_s();
    gl_event ev = {.type = GL_EVENT_PROMPT_PROGRESS, .request_id = s->id, .user = s->user, .text = "",
                   .n_prompt_tokens = s->n_prompt, .n_cached_tokens = s->n_cached, .n_processed = processed,
                   .t_queued = (s->t_scheduled > 0 ? s->t_scheduled : t) - s->t_submit,
                   .t_total = t - s->t_submit};
    fn(&ev, ctx);
}

/* Sample r's next token from its logits row, append it and stream its
 * text. Returns why r must finish (an end-of-generation token, a stop
 * string, a limit) or GL_FINISH_NONE; *error says why on GL_FINISH_ERROR.
 * The caller finishes r. */
static gl_finish_reason sample_and_append(gl_engine *e, gl_seq *r, float *row, const char **error, gl_event_fn fn,
                                          void *ctx) {
    const gl_model *m = e->model;
    int32_t tok;
    if ((*error = request_constrain(r, row, e->eog_ids, e->n_eog, &tok))) return GL_FINISH_ERROR;
    bool forced = tok >= 0; /* the thinking budget closes the block */
    float logprob = NAN;
    if (forced) {
        if (r->logprobs) logprob = sampler_logprob(row, m->config.n_vocab, tok, e->top, r->n_logprobs);
    } else {
        tok = sampler_sample(r->sampler, row, r->logprobs ? &logprob : NULL, r->logprobs ? e->top : NULL);
    }
    if (r->t_first_token == 0) r->t_first_token = now_s();
    gl_finish_reason why = request_stop(r, tok_is_eog(m->tokenizer, tok), false, false);
    if (why != GL_FINISH_NONE) {
        r->tokens[r->n_tokens] = tok; /* not appended, but seen by the draft check */
        return why;
    }
    size_t piece_len;
    const char *piece = tok_piece(m->tokenizer, tok, &piece_len);
    const char *held = NULL;
    size_t held_len = 0;
    int follow = r->reasoning ? rs_accept(r->reasoning, tok, piece, piece_len, &held, &held_len) : 1;
    if (r->grammar && follow && !(follow == 1 ? gr_matcher_accept_token(r->grammar, tok)
                                              : gr_matcher_accept_bytes(r->grammar, held, held_len))) {
        *error = follow == 2 ? "the grammar does not allow the start of the reply"
               : forced ? "the grammar does not allow the thinking block's closing text"
                        : "the grammar's run-time bounds (parse stacks, depth) were exceeded";
        return GL_FINISH_ERROR;
    }
    sampler_accept(r->sampler, tok);
    r->tokens[r->n_tokens++] = tok;
    r->n_generated++;
    const char *text;
    size_t text_len;
    bool stopped = ts_push(r->text, piece, piece_len, &text, &text_len);
    gl_event ev = {.type = GL_EVENT_TOKEN, .request_id = r->id, .user = r->user, .token = tok,
                   .text = text, .text_len = text_len, .logprob = logprob, .n_top = r->logprobs ? r->n_logprobs : 0,
                   .top = e->top, .n_generated = r->n_generated,
                   .n_reasoning_tokens = r->reasoning ? rs_thinking_tokens(r->reasoning) : 0};
    if (fn) fn(&ev, ctx);
    return request_stop(r, false, true, stopped);
}

/* Speculative verification: samples r's rows in order (row j predicts the
 * token after the known one and the first j drafted tokens) and keeps
 * going while the sampled token equals the drafted one. Each row is sampled
 * exactly as without drafts (grammar mask, penalties, RNG draw, events and
 * stop rules after the tokens before it), so greedy output is unchanged
 * and, a draft being a point mass, sampling "accept while equal" is the
 * speculative sampling rule: the output distribution is unchanged too.
 * Returns false when r finished (and is freed). */
static bool verify_drafts(gl_engine *e, gl_seq *r, const sched_entry *en, gl_event_fn fn, void *ctx) {
    int n_vocab = e->model->config.n_vocab, k = en->n_draft, base = r->n_tokens;
    int32_t draft[GL_SPEC_MAX];
    memcpy(draft, r->tokens + base, (size_t)k * sizeof *draft); /* sampling overwrites them */
    r->spec.n_draft = 0;
    int accepted = 0;
    gl_finish_reason why = GL_FINISH_NONE;
    const char *error = NULL;
    for (int j = 0; j <= k; j++) {
        float *row = e->logits + (size_t)(en->sample_row + j) * (size_t)n_vocab;
        why = sample_and_append(e, r, row, &error, fn, ctx);
        bool match = j < k && why != GL_FINISH_ERROR && r->tokens[base + j] == draft[j];
        accepted += match;
        if (why != GL_FINISH_NONE || !match) break;
    }
    spec_learn(e->spec, &r->spec, k, accepted, r->tokens, r->n_tokens, &e->stats);
    /* accepted drafts' K/V stay, and the blocks they fill are cached, a finishing sequence's too */
    r->num_computed_tokens += accepted;
    kv_publish_full_blocks(e->kvm, &r->kv, r->num_computed_tokens);
    if (why != GL_FINISH_NONE) {
        finish(e, r, why, error, fn, ctx);
        return false;
    }
    kv_trim_slots(e->kvm, &r->kv, r->n_tokens); /* the rejected positions' blocks go back */
    return true;
}

/* Advances every planned sequence past the tokens just computed and
 * samples those whose plan ends at their last token (and drafted ones). */
static void update_from_output(gl_engine *e, const sched_plan *plan, gl_event_fn fn, void *ctx) {
    for (int si = 0; si < plan->n_entries; si++) {
        const sched_entry *en = &plan->entries[si];
        gl_seq *r = en->seq;
        if (r->prompt_logprobs >= 0 && r->num_computed_tokens < r->n_prompt) emit_prompt_logprobs(e, en, fn, ctx);
        if (r->progress_sent < 0) emit_progress(r, r->num_computed_tokens, fn, ctx); /* the start: the cache hit */
        int before = r->num_computed_tokens;
        /* drafted positions count once accepted (verify_drafts) */
        r->num_computed_tokens += en->n_tokens - (en->sample_row >= 0 ? en->n_draft : 0);
        kv_publish_full_blocks(e->kvm, &r->kv, r->num_computed_tokens);
        if (before < r->n_prompt) emit_progress(r, r->num_computed_tokens, fn, ctx);
        if (en->sample_row < 0) continue; /* mid-prompt chunk */
        verify_drafts(e, r, en, fn, ctx);
    }
}

/* ---- the step ------------------------------------------------------------------------ */

static void publish_stats(gl_engine *e) {
    const scheduler *sc = e->sched;
    e->stats.n_running = sc->n_running;
    e->stats.n_blocks_used = e->kv->n_blocks - kv_n_free(e->kv);
    e->stats.spec_draft_blocks_used = spec_blocks_used(e->spec);
    e->stats.n_preemptions = sc->n_preemptions;
    e->stats.prefix_queries = sc->prefix_queries;
    e->stats.prefix_hits = sc->prefix_hits;
    if (e->disk) {
        kv_disk_stats ds;
        kv_disk_get_stats(e->disk, &ds);
        e->stats.disk_loaded = ds.n_loaded;
        e->stats.disk_written = ds.n_written;
        e->stats.disk_evicted = ds.n_evicted;
        e->stats.disk_skipped = ds.n_skipped;
        e->stats.disk_dropped = ds.n_dropped;
        e->stats.disk_bytes = ds.bytes;
    }
    pthread_mutex_lock(&e->mutex);
    e->stats.n_waiting = e->n_queued;
    e->published = e->stats;
    pthread_mutex_unlock(&e->mutex);
}

int gl_engine_step(gl_engine *e, gl_event_fn fn, void *ctx) {
    take_submissions(e, fn, ctx);
    const sched_plan *plan = sched_schedule(e->sched);
    if (plan->n_preempted != plan->n_admitted) queued_add(e, plan->n_preempted - plan->n_admitted);
    int n_seqs = 0;
    double t0 = now_s();
    /* A prompt's first progress event goes out before its first chunk is
     * computed: a client learns at once that its prefill has begun. */
    for (int si = 0; si < plan->n_entries; si++)
        if (plan->entries[si].seq->progress_sent < 0)
            emit_progress(plan->entries[si].seq, plan->entries[si].seq->num_computed_tokens, fn, ctx);
    bool ran = plan->n_tokens > 0 && run_model(e, plan, fn, ctx);
    if (ran) {
        n_seqs = plan->n_entries;
        update_from_output(e, plan, fn, ctx); /* may free finished sequences; the plan's entries stay */
    }
    spec_after_step(e->spec, e->sched, plan, ran, now_s() - t0); /* the next step's drafts */
    publish_stats(e);
    return n_seqs;
}
