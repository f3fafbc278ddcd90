/* models.h -- the models one server serves: each is loaded into its own
 * engine (worker thread, KV pool, scheduler) when a request names it, and
 * unloaded when idle past its keep-alive or to make room for another
 * (least recently used first, under --models-max-loaded and
 * --models-memory). docs/models-multi.md.
 *
 * The list comes from -m (the default model: loaded at startup, never
 * unloaded), the config file's `models` list and every .gguf in
 * --models-dir. A model answers to its id, its aliases, its general.name
 * and its file name with or without .gguf.
 *
 * A request holds its model (models_acquire .. models_release) for its
 * whole life, so a model with requests is never unloaded; one that waits
 * for a load is queued on the model, and concurrent requests share the
 * load. Loads run on the model's worker thread, unloads too (the worker
 * frees its engine and model itself), so the loop thread never waits. */
#ifndef GL_MODELS_H
#define GL_MODELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include <uv.h>

#include "config.h"
#include "genloop.h"
#include "params.h"
#include "reasoning.h"
#include "worker.h"

struct api_server;
struct gl_chat_template;

typedef enum { MODELS_UNLOADED, MODELS_LOADING, MODELS_LOADED, MODELS_UNLOADING } models_state;

/* A request waiting for its model: ready runs on the loop thread once,
 * with e NULL when the model is loaded, else the error to reply with. */
typedef struct models_waiter {
    void (*ready)(struct models_waiter *w, const params_error *e);
    struct models_waiter *next;
    struct models_entry *entry; /* set while queued */
} models_waiter;

typedef struct models_entry {
    /* what it is */
    char id[256];            /* its name in the API */
    char path[1024];         /* the GGUF file */
    char alias[1024];        /* comma list of more names */
    char general_name[256];  /* the GGUF's general.name ("" when absent or unreadable) */
    int n_ctx_train;         /* from the GGUF's metadata (0 when unreadable) */
    gl_model_summary summary;/* the rest of what the metadata says (/api/tags, /api/show) */
    long mtime;              /* the file's modification time (seconds) */
    gl_engine_params params; /* its engine: context, KV type, activation bits, draft model */
    char kv_type[16];
    char model_draft[1024];  /* params.spec_draft_model points here */
    uint64_t bytes;          /* weights (file size) and KV pool: what it counts against --models-memory */
    bool pinned;             /* the -m model: loaded at startup, never unloaded */
    /* its state (loop thread) */
    models_state state;
    worker *worker;          /* while not UNLOADED */
    const gl_model *model;   /* while LOADED */
    int n_ctx;               /* context per sequence, once loaded */
    params_limits limits;    /* request bounds, once loaded */
    int max_prompt_tokens;   /* tokens per prompt when capped below the context, else INT_MAX */
    struct gl_chat_template *chat_template; /* NULL when the model's cannot be used */
    char chat_template_error[512]; /* why, for the chat endpoint's error */
    bool chat_tools_native;  /* the template renders tools itself (tools.h) */
    reasoning_markers reasoning; /* the model's thinking-block markers (reasoning.h) */
    int n_users;             /* requests holding it; never unloaded while > 0 */
    double last_used;        /* worker_now() when it was last acquired or released */
    double keep_alive;       /* seconds it stays loaded when idle; < 0 forever, 0 unload at once */
    double t_load_start;
    models_waiter *waiters;  /* requests waiting for it to load */
    struct models_registry *registry;
} models_entry;

typedef struct models_registry models_registry;

/* The list from cfg (the -m model first); NULL with err naming the fault
 * (a --models-dir that cannot be read, two models under one name). */
models_registry *models_create(struct api_server *a, uv_loop_t *loop, const config *cfg, char *err,
                               size_t err_len);
/* Stops every worker (joins the threads) and frees; at shutdown, after the jobs. */
void models_free(models_registry *r);
int models_count(const models_registry *r);
models_entry *models_at(models_registry *r, int i);
/* The model of requests that name none: -m, else the first listed; NULL when none. */
models_entry *models_default(models_registry *r);
/* The model answering to name, or NULL. */
models_entry *models_find(models_registry *r, const char *name);
/* Whether name is one of m's names. */
bool models_matches(const models_entry *m, const char *name);
/* Starts loading the -m model (at startup). */
void models_load_pinned(models_registry *r);

/* Holds m for a request and calls w->ready when it is loaded (at once
 * when it is), loading it first (queued behind evictions when the budget
 * is full). Every acquire is paired with one release. */
void models_acquire(models_entry *m, models_waiter *w);
/* A waiting request went away: ready will not run. */
void models_cancel_wait(models_waiter *w);
/* The request is done with m; keep_alive >= -1 sets the model's keep-alive
 * (Ollama's: seconds, -1 forever, 0 unload now), MODELS_KEEP_DEFAULT sets
 * the server's (--keep-alive), MODELS_KEEP_UNCHANGED leaves it. */
#define MODELS_KEEP_UNCHANGED (-2.0)
#define MODELS_KEEP_DEFAULT (-3.0)
void models_release(models_entry *m, double keep_alive);

/* Ollama's keep_alive: seconds as a number, or a duration string ("5m",
 * "1h30m", "90s", "-1"); negative = forever. Returns 0, or -1 with e naming
 * param. */
int models_parse_keep_alive(const cJSON *v, const char *param, double *out, params_error *e);

const char *models_state_name(models_state s);
/* /metrics: the per-model gauges as of now. */
void models_update_metrics(models_registry *r);

#endif
