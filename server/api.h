/* api.h -- what the HTTP endpoints share: server state, the route table,
 * error/JSON replies, metrics, and the dispatch of engine events to the
 * requests (jobs) that wait for them.
 *
 * A job is an HTTP request with work in the engine. Each engine request's
 * `user` pointer is an api_sink embedded in its job's data; the job itself
 * is listed so shutdown can cancel everything. */
#ifndef GL_API_H
#define GL_API_H

#include <cjson/cJSON.h>

#include "config.h"
#include "genloop.h"
#include "http.h"
#include "jbuf.h"
#include "metrics.h"
#include "models.h"
#include "params.h"
#include "reasoning.h"
#include "worker.h"

typedef struct api_sink {
    /* An engine event of this request; t_event: when the engine emitted it (worker_now) */
    void (*on_event)(struct api_sink *self, const gl_event *ev, double t_event);
} api_sink;

typedef struct api_job {
    void (*cancel)(struct api_job *self);  /* cancel all its engine requests */
    void (*destroy)(struct api_job *self); /* free; only at shutdown, after the worker stopped */
    struct api_job *prev, *next;
} api_job;

typedef struct api_metrics {
    metrics_family *ttft, *itl, *e2e, *queue_time;     /* seconds */
    metrics_family *prefill_time, *decode_time;        /* seconds: scheduled..first token..end */
    metrics_family *prompt_tokens, *generation_tokens; /* per request */
    metrics_family *prompt_tokens_total, *generation_tokens_total;
    metrics_family *requests_total, *errors_total;     /* {finish_reason}, {code} */
    metrics_family *running, *waiting, *kv_usage, *kv_capacity;
    metrics_family *preemptions, *prefix_queries, *prefix_hits;
    metrics_family *spec_drafts, *spec_draft_tokens, *spec_accepted, *spec_accepted_at; /* vLLM's spec_decode_* */
    metrics_family *engine_steps;                      /* forward passes */
    metrics_family *batch_size, *batch_tokens;         /* per forward pass */
    metrics_family *disk_loaded, *disk_written, *disk_evicted, *disk_skipped, *disk_dropped, *disk_bytes; /* kv_cache_dir */
    /* vLLM's names for what an endpoint picker reads (Gateway API Inference Extension) */
    metrics_family *vllm_waiting, *vllm_running, *vllm_kv_usage;
} api_metrics;

typedef struct api_server {
    const config *cfg;
    struct models_registry *models; /* the served models, each its own engine (models.h) */
    struct compile_pool *compiler; /* request grammars are compiled there (compile.h) */
    char url[300];           /* printed when ready */
    bool shutting_down;
    void (*on_load_failed)(struct api_server *a); /* serve.c ends the process (the -m model failed) */
    metrics *registry;
    metrics *vllm_registry;  /* the "vllm:" aliases (docs/prefix-cache.md) */
    api_metrics m;
    api_job *jobs;
    int n_jobs;
    uint64_t next_id;        /* for response ids */
    struct responses_store *responses; /* kept /v1/responses (api_responses.h) */
} api_server;

void api_init(api_server *a, const config *cfg);
/* The model_name label of every metric, on a server of one model (-m). */
void api_set_model_label(api_server *a, const char *id);
/* Frees jobs left after the worker stopped, and the metrics (the
 * endpoints' model state is theirs to free: chat_teardown). */
void api_free(api_server *a);

/* The small endpoints (ctx = api_server), listed in routes.c. */
void api_handle_health(http_req *req, void *ctx);
void api_handle_models(http_req *req, void *ctx);
void api_handle_model(http_req *req, void *ctx);       /* GET /v1/models/{id} */
void api_handle_unsupported(http_req *req, void *ctx); /* a 404 naming the endpoint */
void api_handle_tokenize(http_req *req, void *ctx);
void api_handle_detokenize(http_req *req, void *ctx);
void api_handle_metrics(http_req *req, void *ctx);

/* The worker's message function (ctx = api_server). */
void api_on_worker_msg(const worker_msg *msg, void *ctx);
/* http_options.admit: CORS headers and preflights, then the API key
 * (everything but open routes, and /metrics when metrics_public, needs
 * `Authorization: Bearer KEY` when a key is set; else 401). */
int api_admit(http_req *req, const http_route *route, void *ctx);
/* http_options.error: errors found by the HTTP layer, as OpenAI errors. */
void api_http_error(http_req *req, int status, const char *message, void *ctx);

void api_reply_error(api_server *a, http_req *req, const params_error *e);
void api_reply_json(http_req *req, int status, cJSON *body); /* frees body */
/* 503 while the -m model loads at startup or the server shuts down;
 * returns 1 when it replied. */
int api_reply_if_loading(api_server *a, http_req *req);
/* Parses the body as a JSON object, or replies 400 and returns NULL. */
cJSON *api_parse_body(api_server *a, http_req *req);
/* 400 naming param when a prompt of n tokens is over the max_prompt_tokens
 * setting (a prompt over the context is left to the caller's
 * context_length_exceeded check); returns 0 or -1. */
int api_check_prompt_tokens(const models_entry *m, int n, const char *param, params_error *e);
/* The model a request's `model` field names (models_find's names): absent
 * or null is the default model; so is an unknown name on a server of one
 * model without --strict-model. Else NULL with a 400/404 in e. */
models_entry *api_model_for(api_server *a, const cJSON *body, params_error *e);
/* Runs fn once the request's model is loaded (at once when it is; the
 * request waits for a load), holding the model while fn runs and setting
 * its keep-alive after (MODELS_KEEP_UNCHANGED: left as it is). Takes body;
 * replies with the error when the model is unknown or cannot be loaded. */
typedef void (*api_model_fn)(http_req *req, api_server *a, models_entry *m, const cJSON *body);
void api_with_model(api_server *a, http_req *req, cJSON *body, double keep_alive, api_model_fn fn);

void api_job_add(api_server *a, api_job *job);
void api_job_remove(api_server *a, api_job *job);
void api_cancel_all(api_server *a);

/* Writes the text one token adds (leading space kept) as a JSON string;
 * partial UTF-8 shows as U+FFFD. */
void api_write_piece(const gl_model *model, jbuf *out, int32_t token);

/* "WHAT: URL" on stdout for scripts that start the server; skipped when
 * stdout is the terminal stderr already writes the same news to. */
void api_print_status(const char *what, const char *url);

/* Metrics for one finished engine request. */
void api_note_finished(api_server *a, const gl_event *ev);

#endif
