/* compile.h -- a request's grammar (GBNF, JSON Schema, tools) compiled on a
 * compile thread under the server's time and memory budget, so that the
 * loop thread never waits for a compile: /health and running streams go on
 * while a big schema compiles. One thread compiles, one grammar at a time:
 * its malloc arena is the only one that compiles' memory passes through,
 * so refused and evicted grammars do not add up in the server's RSS.
 *
 * Request parsing (on the loop thread) only checks the fields' shape and
 * makes a compile_spec; compile_start queues it, and `done` runs
 * back on the loop thread with the grammar or a 4xx naming the field (and
 * the budget, when that is what stopped the compile). */
#ifndef GL_COMPILE_H
#define GL_COMPILE_H

#include <cjson/cJSON.h>
#include <uv.h>

#include "genloop.h"
#include "params.h"

/* What to compile. build runs on a pool thread and touches only the spec:
 * the grammar, or NULL with e filled (400 for a fault of the request). */
typedef struct compile_spec {
    gl_grammar *(*build)(struct compile_spec *self, params_error *e);
    void (*destroy)(struct compile_spec *self);
    char param[64];          /* the request field a budget error names */
} compile_spec;

/* GBNF text / a JSON Schema (printed now) as the constraint of `param`.
 * NULL when out of memory. */
compile_spec *compile_gbnf(const char *text, const char *param);
compile_spec *compile_schema(const cJSON *schema, const char *param);
/* A regular expression the whole output must match (gl_grammar_from_regex). */
compile_spec *compile_regex(const char *regex, const char *param);
void compile_spec_free(compile_spec *s);

typedef struct compile_budget {
    int max_ms;              /* wall time of one compile */
    int max_mib;             /* memory one compile may allocate */
} compile_budget;

/* g (owned by the callee) or NULL with e filled. */
typedef void (*compile_done_fn)(void *ctx, gl_grammar *g, const params_error *e);
typedef struct compile_task compile_task;
typedef struct compile_pool compile_pool;

/* The compile thread (started by the first compile), reporting on loop. */
compile_pool *compile_pool_create(uv_loop_t *loop);
/* Stops the thread (a compile under way is cancelled) and drops what is
 * queued; call after every task's owner abandoned it. The memory goes
 * when the loop runs the close callback. */
void compile_pool_free(compile_pool *p);

/* Takes spec. done runs on the loop thread, once, unless abandoned. NULL
 * (spec freed) when the task cannot be queued. */
compile_task *compile_start(compile_pool *p, compile_spec *spec, const compile_budget *b,
                            compile_done_fn done, void *ctx);
/* Asks the compile to stop soon; done still runs (with an error). */
void compile_cancel(compile_task *t);
/* The caller goes away: done will not run; the task frees itself. */
void compile_abandon(compile_task *t);

#endif
