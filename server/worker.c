/* worker.c -- the engine thread and its event queue to the loop thread.
 *
 * The queue is guarded by a mutex and swapped wholesale: the engine thread
 * appends to the `pending` buffer, the loop thread swaps it with its own
 * (empty) one and delivers without the lock. Buffers keep their capacity,
 * so steady-state token events allocate nothing. */
#include "worker.h"

#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- event queue ----------------------------------------------------------- */

typedef struct event_rec {
    worker_msg msg;          /* text/top/error pointers unused; offsets below */
    size_t text_off, error_off;
    bool has_error;
    size_t top_off;
} event_rec;

typedef struct event_buf {
    event_rec *recs;
    int n, cap;
    char *bytes;             /* texts and error messages */
    size_t len, bytes_cap;
    gl_top_logprob *tops;
    size_t n_tops, tops_cap;
} event_buf;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need) cap2 *= 2;
    void *q = realloc(*p, cap2 * elem);
    if (!q) return -1;
    *p = q;
    *cap = cap2;
    return 0;
}

static size_t put_bytes(event_buf *b, const char *s, size_t n) {
    if (grow((void **)&b->bytes, &b->bytes_cap, b->len + n + 1, 1)) return (size_t)-1;
    size_t off = b->len;
    if (n) memcpy(b->bytes + off, s, n);
    b->bytes[off + n] = 0;
    b->len += n + 1;
    return off;
}

/* Appends a copy of msg. Returns -1 when out of memory (the message is
 * lost; the server would never see FINISHED for it, so post() retries the
 * copy without payload rather than drop it). */
static int event_buf_push(event_buf *b, const worker_msg *msg) {
    const gl_event *ev = &msg->ev;
    size_t cap = (size_t)b->cap;
    if (grow((void **)&b->recs, &cap, (size_t)b->n + 1, sizeof(event_rec))) return -1;
    b->cap = (int)cap;
    event_rec *r = &b->recs[b->n];
    r->msg = *msg;
    r->text_off = put_bytes(b, ev->text ? ev->text : "", ev->text ? ev->text_len : 0);
    r->has_error = ev->error != NULL;
    r->error_off = ev->error ? put_bytes(b, ev->error, strlen(ev->error)) : 0;
    r->top_off = b->n_tops;
    if (r->text_off == (size_t)-1 || r->error_off == (size_t)-1) return -1;
    if (ev->n_top > 0 && ev->top) {
        if (grow((void **)&b->tops, &b->tops_cap, b->n_tops + (size_t)ev->n_top,
                 sizeof(gl_top_logprob)))
            return -1;
        memcpy(b->tops + b->n_tops, ev->top, sizeof(gl_top_logprob) * (size_t)ev->n_top);
        b->n_tops += (size_t)ev->n_top;
    }
    b->n++;
    return 0;
}

static void event_buf_clear(event_buf *b) { b->n = 0; b->len = 0; b->n_tops = 0; }

static void event_buf_free(event_buf *b) { free(b->recs); free(b->bytes); free(b->tops); }

/* ---- the worker ------------------------------------------------------------ */

struct worker {
    uv_async_t async;        /* first: the close callback casts back */
    worker_msg_fn fn;
    void *ctx;
    char *model_path;
    gl_engine_params params;
    gl_model *model;
    gl_engine *engine;
    pthread_t thread;
    atomic_bool stop;        /* the thread leaves its loop */
    atomic_bool release;     /* ... and frees the engine and model itself (worker_release) */
    atomic_bool closing;     /* worker_stop: no more deliveries */
    _Atomic float load_fraction; /* of the weights prepared, while loading */
    atomic_bool ready;       /* engine created; set before WORKER_READY */

    pthread_mutex_t mu;      /* guards pending and stats */
    event_buf pending;       /* engine thread appends */
    gl_engine_stats stats;

    event_buf draining;      /* loop thread only */
};

double worker_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void post(worker *w, const worker_msg *msg) {
    pthread_mutex_lock(&w->mu);
    if (event_buf_push(&w->pending, msg)) {
        /* Out of memory: keep the event's identity and kind so the server
         * still learns a request finished, without its payload. */
        worker_msg bare = *msg;
        bare.ev.text = NULL;
        bare.ev.text_len = 0;
        bare.ev.n_top = 0;
        bare.ev.error = NULL;
        event_buf_push(&w->pending, &bare);
    }
    pthread_mutex_unlock(&w->mu);
    uv_async_send(&w->async);
}

static void on_engine_event(const gl_event *e, void *ctx) {
    worker_msg msg = {.type = WORKER_EVENT, .ev = *e, .t_event = worker_now()};
    if (!e->top) msg.ev.n_top = 0;
    bool failed = e->type == GL_EVENT_FINISHED && e->finish == GL_FINISH_ERROR;
    msg.ev.error = failed ? (e->error ? e->error : "engine error") : NULL;
    post(ctx, &msg);
}

/* Load progress on stderr, at most once a second: a small model loads
 * before the first line is due and prints none. */
typedef struct load_log {
    double t_start, t_last;
    _Atomic float *fraction; /* the worker's, for worker_load_progress */
} load_log;

static void on_load_progress(float fraction, void *ctx) {
    load_log *l = ctx;
    atomic_store(l->fraction, fraction);
    double now = worker_now();
    if (now - l->t_last < 1.0) return;
    l->t_last = now;
    fprintf(stderr, "genloop: loading model: %3.0f%% (%.0f s)\n", fraction * 100.0, now - l->t_start);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    gl_error err = {{0}};
    load_log log = { worker_now(), worker_now(), &w->load_fraction };
    w->model = gl_model_load_progress(w->model_path, on_load_progress, &log, &err);
    if (w->model) w->engine = gl_engine_create(w->model, &w->params, &err);
    if (!w->engine) {
        worker_msg failed = {.type = WORKER_LOAD_FAILED, .t_event = worker_now()};
        failed.ev.error = err.message[0] ? err.message : "model load failed";
        post(w, &failed);
        return NULL;
    }
    gl_engine_get_stats(w->engine, &w->stats);
    atomic_store(&w->ready, true);
    post(w, &(worker_msg){.type = WORKER_READY, .t_event = worker_now()});

    while (!atomic_load(&w->stop)) {
        int ran = gl_engine_step(w->engine, on_engine_event, w);
        gl_engine_stats stats;
        gl_engine_get_stats(w->engine, &stats);
        pthread_mutex_lock(&w->mu);
        uint64_t steps_before = w->stats.n_steps;
        w->stats = stats;
        pthread_mutex_unlock(&w->mu);
        if (stats.n_steps != steps_before) {
            /* One step, at most one forward pass: its shape is the latest. */
            worker_msg step = {.type = WORKER_STEP, .batch_seqs = stats.last_batch_seqs,
                               .batch_tokens = stats.last_batch_tokens, .t_event = worker_now()};
            post(w, &step);
        }
        /* Idle: sleep until a submit, cancel or stop wakes the engine. */
        if (ran == 0 && !atomic_load(&w->stop)) gl_engine_wait(w->engine);
    }
    if (atomic_load(&w->release)) {
        atomic_store(&w->ready, false);
        gl_engine_free(w->engine);
        gl_model_free(w->model);
        w->engine = NULL;
        w->model = NULL;
        post(w, &(worker_msg){.type = WORKER_RELEASED, .t_event = worker_now()});
    }
    return NULL;
}

static void on_async_closed(uv_handle_t *h);

/* Loop thread: deliver everything queued so far. */
static void on_async(uv_async_t *handle) {
    worker *w = (worker *)handle;
    pthread_mutex_lock(&w->mu);
    event_buf tmp = w->pending;
    w->pending = w->draining;
    w->draining = tmp;
    pthread_mutex_unlock(&w->mu);
    event_buf *b = &w->draining;
    for (int i = 0; i < b->n; i++) {
        event_rec *r = &b->recs[i];
        worker_msg msg = r->msg;
        msg.ev.text = b->bytes + r->text_off;
        msg.ev.error = r->has_error ? b->bytes + r->error_off : NULL;
        msg.ev.top = msg.ev.n_top > 0 ? b->tops + r->top_off : NULL;
        w->fn(&msg, w->ctx);
        if (atomic_load(&w->closing)) break;
    }
    event_buf_clear(b);
}

worker *worker_start(uv_loop_t *loop, const char *model_path, const gl_engine_params *params,
                     worker_msg_fn fn, void *ctx) {
    worker *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->fn = fn;
    w->ctx = ctx;
    w->model_path = strdup(model_path);
    w->params = *params;
    pthread_mutex_init(&w->mu, NULL);
    uv_async_init(loop, &w->async, on_async);
    if (!w->model_path || pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        uv_close((uv_handle_t *)&w->async, on_async_closed);
        return NULL;
    }
    return w;
}

const gl_model *worker_model(const worker *w) {
    return atomic_load(&((worker *)w)->ready) ? w->model : NULL;
}

gl_engine *worker_engine(const worker *w) {
    return w && atomic_load(&((worker *)w)->ready) ? w->engine : NULL;
}

float worker_load_progress(worker *w) {
    return atomic_load(&w->load_fraction);
}

void worker_stats(worker *w, gl_engine_stats *out) {
    pthread_mutex_lock(&w->mu);
    *out = w->stats;
    pthread_mutex_unlock(&w->mu);
}

static void on_async_closed(uv_handle_t *h) {
    worker *w = (worker *)h;
    event_buf_free(&w->pending);
    event_buf_free(&w->draining);
    pthread_mutex_destroy(&w->mu);
    free(w->model_path);
    free(w);
}

void worker_release(worker *w) {
    atomic_store(&w->release, true);
    atomic_store(&w->stop, true);
    if (atomic_load(&w->ready)) gl_engine_wake(w->engine);
}

void worker_stop(worker *w) {
    if (!w) return;
    atomic_store(&w->stop, true);
    atomic_store(&w->closing, true);
    if (atomic_load(&w->ready)) gl_engine_wake(w->engine);
    pthread_join(w->thread, NULL);
    atomic_store(&w->ready, false);
    gl_engine_free(w->engine);
    gl_model_free(w->model);
    w->engine = NULL;
    w->model = NULL;
    uv_close((uv_handle_t *)&w->async, on_async_closed);
}
