/* worker.h -- the engine thread, and the one queue that carries its events
 * to the loop thread.
 *
 * The worker thread loads the model, creates the engine and then loops on
 * gl_engine_step(). The loop thread submits and cancels through the
 * engine's own thread-safe calls (gl_engine_submit/gl_engine_cancel on
 * worker_engine()), so a request has one id, the engine's. Engine events are
 * copied into one queue that a uv_async_t drains on the loop thread, calling
 * the message function there with the public gl_event (user = the
 * request's user pointer). The same queue carries the worker's own news:
 * the model is up, or failed to load, and the shape of each forward pass
 * (WORKER_STEP), so the loop thread sees every batch without sampling. */
#ifndef GL_WORKER_H
#define GL_WORKER_H

#include <uv.h>

#include "genloop.h"

typedef enum worker_msg_type {
    WORKER_READY,            /* model and engine are up; worker_model/worker_engine work */
    WORKER_LOAD_FAILED,      /* ev.error holds the message; the thread has ended */
    WORKER_EVENT,            /* ev: an engine event */
    WORKER_STEP,             /* an engine step ran a forward pass: batch_* */
    WORKER_RELEASED,         /* after worker_release: engine and model are freed; worker_stop next */
} worker_msg_type;

typedef struct worker_msg {
    worker_msg_type type;
    gl_event ev;             /* EVENT (LOAD_FAILED: error only); pointers valid during the callback */
    double t_event;          /* monotonic seconds when the engine emitted it */
    int batch_seqs, batch_tokens; /* STEP: the forward pass's shape */
} worker_msg;

typedef void (*worker_msg_fn)(const worker_msg *msg, void *ctx);

typedef struct worker worker;

/* Starts the thread; messages are delivered on `loop` to fn(msg, ctx). */
worker *worker_start(uv_loop_t *loop, const char *model_path, const gl_engine_params *params,
                     worker_msg_fn fn, void *ctx);
/* The loaded model (read-only, shareable) once WORKER_READY was delivered. */
const gl_model *worker_model(const worker *w);
/* The engine, for gl_engine_submit/gl_engine_cancel (thread-safe), once
 * WORKER_READY was delivered and until worker_stop; else NULL. */
gl_engine *worker_engine(const worker *w);
/* While loading: the fraction of the weights prepared so far (0..1). */
float worker_load_progress(worker *w);
/* Engine counters as of the last step. */
void worker_stats(worker *w, gl_engine_stats *out);
/* Monotonic clock in seconds, the one t_event uses. */
double worker_now(void);
/* Unload without blocking the loop thread: the thread stops stepping,
 * frees the engine and model itself and posts WORKER_RELEASED, on which
 * the owner calls worker_stop (the join is then immediate). Only for an
 * engine without requests. */
void worker_release(worker *w);
/* Stop the thread (pending messages are dropped), free the engine and
 * model, and close the async handle; free happens in its close callback. */
void worker_stop(worker *w);

#endif
