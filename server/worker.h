/* worker.h -- the engine thread and its two queues.
 *
 * The worker thread loads the model, creates the engine and then loops:
 * take submit/cancel commands, gl_engine_step(), wait for work. The loop
 * thread never calls into the engine: worker_submit/worker_cancel only
 * append to a command queue, and engine events are copied into an event queue
 * that a uv_async_t drains on the loop thread, calling the event function
 * there. Requests are named by their `user` pointer (unique while active).
 * Each forward pass is reported too (WORKER_STEP), through the same queue,
 * so the loop thread sees every batch shape without sampling. */
#ifndef WORKER_H
#define WORKER_H

#include <uv.h>

#include "genloop.h"

typedef enum worker_event_type {
    WORKER_READY,            /* model and engine are up; worker_model() works */
    WORKER_LOAD_FAILED,      /* error holds the message; the thread has ended */
    WORKER_SUBMITTED,        /* the engine accepted the request (request_id) */
    WORKER_REJECTED,         /* submit failed: queue_full, or error */
    WORKER_PROMPT_TOKEN,     /* the gl_event kinds, copied */
    WORKER_TOKEN,
    WORKER_FINISHED,
    WORKER_STEP,             /* an engine step ran a forward pass: batch_* (user NULL) */
} worker_event_type;

typedef struct worker_event {
    worker_event_type type;
    void *user;              /* the request's user pointer */
    uint64_t request_id;
    int32_t token;
    const char *text;        /* valid during the callback only */
    size_t text_len;
    float logprob;
    int n_top;
    const gl_top_logprob *top;  /* valid during the callback only */
    gl_finish_reason finish;
    const char *error;       /* REJECTED, LOAD_FAILED, FINISHED(error); else NULL */
    int queue_full;          /* REJECTED because the waiting queue was full */
    int n_prompt_tokens, n_cached_tokens, n_generated;
    double t_queued, t_first_token, t_total;
    double t_event;          /* monotonic seconds when the engine emitted it */
    int batch_seqs, batch_tokens; /* STEP: the forward pass's shape */
} worker_event;

typedef void (*worker_event_fn)(const worker_event *ev, void *ctx);

typedef struct worker worker;

/* Starts the thread; events are delivered on `loop` to fn(ev, ctx). */
worker *worker_start(uv_loop_t *loop, const char *model_path, const gl_engine_params *params,
                     worker_event_fn fn, void *ctx);
/* The loaded model (read-only, shareable) once WORKER_READY was delivered. */
const gl_model *worker_model(const worker *w);
/* Queue a request (copied, including prompt, stops and logit bias). */
void worker_submit(worker *w, const gl_request *req);
void worker_cancel(worker *w, void *user);
/* Engine counters as of the last step. */
void worker_stats(worker *w, gl_engine_stats *out);
/* Monotonic clock in seconds, the one t_event uses. */
double worker_now(void);
/* Stop the thread (pending events are dropped), free the engine and model,
 * and close the async handle; free happens in its close callback. */
void worker_stop(worker *w);

#endif
