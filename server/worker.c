/* worker.c -- engine thread, command queue in, event queue out.
 *
 * Both queues are guarded by one mutex and are swapped wholesale: the
 * producer appends to the `pending` buffers, the consumer swaps them with
 * its own (empty) ones and works without the lock. Buffers keep their
 * capacity, so steady-state token events allocate nothing. */
#include "worker.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- event queue ----------------------------------------------------------- */

typedef struct event_rec {
    worker_event ev;         /* text/top/error pointers unused; offsets below */
    size_t text_off, error_off;
    int has_error;
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

/* Appends a copy of ev. Returns -1 when out of memory (the event is lost;
 * the server then never sees FINISHED for it, so we retry the copy without
 * payload below rather than drop it). */
static int event_buf_push(event_buf *b, const worker_event *ev) {
    size_t cap = (size_t)b->cap;
    if (grow((void **)&b->recs, &cap, (size_t)b->n + 1, sizeof(event_rec))) return -1;
    b->cap = (int)cap;
    event_rec *r = &b->recs[b->n];
    r->ev = *ev;
    r->text_off = put_bytes(b, ev->text ? ev->text : "", ev->text ? ev->text_len : 0);
    r->has_error = ev->error != NULL;
    r->error_off = ev->error ? put_bytes(b, ev->error, strlen(ev->error)) : 0;
    r->top_off = b->n_tops;
    if (r->text_off == (size_t)-1 || r->error_off == (size_t)-1) return -1;
    if (ev->n_top > 0) {
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

/* ---- command queue --------------------------------------------------------- */

typedef struct command {
    int is_cancel;
    void *user;
    gl_request req;          /* submit: owns prompt, stop strings, logit bias */
} command;

static void command_free(command *c) {
    if (c->is_cancel) return;
    free((void *)c->req.prompt);
    for (int i = 0; i < c->req.n_stop; i++) free((void *)c->req.stop[i]);
    free((void *)c->req.stop);
    free((void *)c->req.sampling.logit_bias);
}

/* ---- the worker ------------------------------------------------------------ */

typedef struct active_req { void *user; uint64_t id; } active_req;

struct worker {
    uv_async_t async;        /* first: the close callback casts back */
    worker_event_fn fn;
    void *ctx;
    char *model_path;
    gl_engine_params params;
    gl_model *model;
    gl_engine *engine;
    pthread_t thread;
    atomic_int stop;
    atomic_int ready;        /* engine created; set before WORKER_READY */

    pthread_mutex_t mu;      /* guards everything below */
    event_buf pending;       /* engine thread appends */
    command *commands;       /* loop thread appends */
    size_t n_commands, cap_commands;
    gl_engine_stats stats;

    event_buf draining;      /* loop thread only */
    command *taken;          /* engine thread only */
    size_t cap_taken;
    active_req *active;      /* engine thread only: user -> engine id */
    size_t n_active, cap_active;
};

double worker_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void post(worker *w, const worker_event *ev) {
    pthread_mutex_lock(&w->mu);
    if (event_buf_push(&w->pending, ev)) {
        /* Out of memory: keep the event's identity and kind so the server
         * still learns a request finished, without its payload. */
        worker_event bare = *ev;
        bare.text = NULL; bare.text_len = 0; bare.n_top = 0; bare.error = NULL;
        event_buf_push(&w->pending, &bare);
    }
    pthread_mutex_unlock(&w->mu);
    uv_async_send(&w->async);
}

static void on_engine_event(const gl_event *e, void *ctx) {
    worker *w = ctx;
    worker_event ev = {0};
    ev.type = e->type == GL_EVENT_PROMPT_TOKEN ? WORKER_PROMPT_TOKEN
            : e->type == GL_EVENT_TOKEN        ? WORKER_TOKEN
                                               : WORKER_FINISHED;
    ev.user = e->user;
    ev.request_id = e->request_id;
    ev.token = e->token;
    ev.text = e->text;
    ev.text_len = e->text ? e->text_len : 0;
    ev.logprob = e->logprob;
    ev.n_top = e->top ? e->n_top : 0;
    ev.top = e->top;
    ev.finish = e->finish;
    ev.error = e->type == GL_EVENT_FINISHED && e->finish == GL_FINISH_ERROR
             ? (e->error ? e->error : "engine error") : NULL;
    ev.n_prompt_tokens = e->n_prompt_tokens;
    ev.n_cached_tokens = e->n_cached_tokens;
    ev.n_generated = e->n_generated;
    ev.t_queued = e->t_queued;
    ev.t_first_token = e->t_first_token;
    ev.t_total = e->t_total;
    ev.t_event = worker_now();
    if (e->type == GL_EVENT_FINISHED) {
        for (size_t i = 0; i < w->n_active; i++)
            if (w->active[i].id == e->request_id) {
                w->active[i] = w->active[--w->n_active];
                break;
            }
    }
    post(w, &ev);
}

static void run_commands(worker *w) {
    pthread_mutex_lock(&w->mu);
    command *cmds = w->commands;
    size_t n = w->n_commands, cap = w->cap_commands;
    w->commands = w->taken;       /* hand back an empty buffer */
    w->cap_commands = w->cap_taken;
    w->n_commands = 0;
    pthread_mutex_unlock(&w->mu);
    w->taken = cmds;
    w->cap_taken = cap;

    for (size_t i = 0; i < n; i++) {
        command *c = &cmds[i];
        if (c->is_cancel) {
            for (size_t k = 0; k < w->n_active; k++)
                if (w->active[k].user == c->user) gl_engine_cancel(w->engine, w->active[k].id);
            continue;
        }
        bool queue_full = false;
        gl_error err = {{0}};
        uint64_t id = gl_engine_submit(w->engine, &c->req, &queue_full, &err);
        worker_event ev = {0};
        ev.user = c->user;
        ev.t_event = worker_now();
        if (id == 0) {
            ev.type = WORKER_REJECTED;
            ev.queue_full = queue_full;
            ev.error = err.message[0] ? err.message : "request rejected by the engine";
        } else if (grow((void **)&w->active, &w->cap_active, w->n_active + 1,
                        sizeof(active_req)) == 0) {
            w->active[w->n_active++] = (active_req){ c->user, id };
            ev.type = WORKER_SUBMITTED;
            ev.request_id = id;
        } else {
            gl_engine_cancel(w->engine, id); /* cannot track it; its events still flow */
            ev.type = WORKER_SUBMITTED;
            ev.request_id = id;
        }
        post(w, &ev);
        command_free(c);
    }
}

static int has_commands(worker *w) {
    pthread_mutex_lock(&w->mu);
    int n = w->n_commands > 0;
    pthread_mutex_unlock(&w->mu);
    return n;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    gl_error err = {{0}};
    worker_event ev = {0};
    w->model = gl_model_load(w->model_path, &err);
    if (w->model) w->engine = gl_engine_create(w->model, &w->params, &err);
    if (!w->engine) {
        ev.type = WORKER_LOAD_FAILED;
        ev.error = err.message[0] ? err.message : "model load failed";
        post(w, &ev);
        return NULL;
    }
    gl_engine_get_stats(w->engine, &w->stats);
    atomic_store(&w->ready, 1);
    ev.type = WORKER_READY;
    post(w, &ev);

    while (!atomic_load(&w->stop)) {
        run_commands(w);
        int ran = gl_engine_step(w->engine, on_engine_event, w);
        gl_engine_stats stats;
        gl_engine_get_stats(w->engine, &stats);
        pthread_mutex_lock(&w->mu);
        uint64_t steps_before = w->stats.n_steps;
        w->stats = stats;
        pthread_mutex_unlock(&w->mu);
        if (stats.n_steps != steps_before) {
            /* One step, at most one forward pass: its shape is the latest. */
            worker_event step = { .type = WORKER_STEP, .batch_seqs = stats.last_batch_seqs,
                                  .batch_tokens = stats.last_batch_tokens,
                                  .t_event = worker_now() };
            post(w, &step);
        }
        /* Idle: sleep until a submit/cancel/stop wakes the engine. */
        if (ran == 0 && !has_commands(w) && !atomic_load(&w->stop))
            gl_engine_wait(w->engine);
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
        worker_event ev = r->ev;
        ev.text = b->bytes + r->text_off;
        ev.error = r->has_error ? b->bytes + r->error_off : NULL;
        ev.top = ev.n_top > 0 ? b->tops + r->top_off : NULL;
        w->fn(&ev, w->ctx);
        if (atomic_load(&w->stop)) break;
    }
    event_buf_clear(b);
}

worker *worker_start(uv_loop_t *loop, const char *model_path, const gl_engine_params *params,
                     worker_event_fn fn, void *ctx) {
    worker *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->fn = fn;
    w->ctx = ctx;
    w->model_path = strdup(model_path);
    w->params = *params;
    pthread_mutex_init(&w->mu, NULL);
    uv_async_init(loop, &w->async, on_async);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        uv_close((uv_handle_t *)&w->async, on_async_closed);
        return NULL;
    }
    return w;
}

const gl_model *worker_model(const worker *w) {
    return atomic_load(&((worker *)w)->ready) ? w->model : NULL;
}

static void push_command(worker *w, const command *c) {
    pthread_mutex_lock(&w->mu);
    int ok = grow((void **)&w->commands, &w->cap_commands, w->n_commands + 1,
                  sizeof(command)) == 0;
    if (ok) w->commands[w->n_commands++] = *c;
    pthread_mutex_unlock(&w->mu);
    if (!ok) {
        /* Out of memory: answer the submit ourselves so the request ends. */
        command copy = *c;
        if (!c->is_cancel) {
            worker_event ev = { .type = WORKER_REJECTED, .user = c->user,
                                .error = "out of memory", .t_event = worker_now() };
            post(w, &ev);
        }
        command_free(&copy);
        return;
    }
    if (atomic_load(&w->ready)) gl_engine_wake(w->engine);
}

void worker_submit(worker *w, const gl_request *req) {
    command c = { .is_cancel = 0, .user = req->user, .req = *req };
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)(req->n_prompt > 0 ? req->n_prompt : 1));
    char **stop = calloc((size_t)req->n_stop + 1, sizeof(char *));
    gl_logit_bias *bias = malloc(sizeof(gl_logit_bias) *
                                 (size_t)(req->sampling.n_logit_bias + 1));
    int ok = prompt && stop && bias;
    if (ok && req->n_prompt > 0) memcpy(prompt, req->prompt, sizeof(int32_t) * (size_t)req->n_prompt);
    for (int i = 0; ok && i < req->n_stop; i++) ok = (stop[i] = strdup(req->stop[i])) != NULL;
    if (ok && req->sampling.n_logit_bias > 0)
        memcpy(bias, req->sampling.logit_bias,
               sizeof(gl_logit_bias) * (size_t)req->sampling.n_logit_bias);
    c.req.prompt = prompt;
    c.req.stop = (const char *const *)stop;
    c.req.sampling.logit_bias = bias;
    if (!ok) {
        c.req.n_stop = stop ? req->n_stop : 0;
        command_free(&c);
        worker_event ev = { .type = WORKER_REJECTED, .user = req->user,
                            .error = "out of memory", .t_event = worker_now() };
        post(w, &ev);
        return;
    }
    push_command(w, &c);
}

void worker_cancel(worker *w, void *user) {
    command c = { .is_cancel = 1, .user = user };
    push_command(w, &c);
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
    for (size_t i = 0; i < w->n_commands; i++) command_free(&w->commands[i]);
    free(w->commands);
    free(w->taken);
    free(w->active);
    pthread_mutex_destroy(&w->mu);
    free(w->model_path);
    free(w);
}

void worker_stop(worker *w) {
    if (!w) return;
    atomic_store(&w->stop, 1);
    if (atomic_load(&w->ready)) gl_engine_wake(w->engine);
    pthread_join(w->thread, NULL);
    gl_engine_free(w->engine);
    gl_model_free(w->model);
    w->engine = NULL;
    w->model = NULL;
    uv_close((uv_handle_t *)&w->async, on_async_closed);
}
