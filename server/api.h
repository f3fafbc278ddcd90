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
    worker *worker;
    struct compile_pool *compiler; /* request grammars are compiled there (compile.h) */
    const gl_model *model;   /* NULL while loading */
    int n_ctx;               /* context per sequence */
    params_limits limits;    /* request bounds (set when the model is up) */
    int max_prompt_tokens;   /* tokens per prompt when capped below the context, else INT_MAX */
    char model_id[256];      /* what /v1/models lists */
    char url[300];           /* printed when ready */
    bool shutting_down;
    void (*on_load_failed)(struct api_server *a); /* serve.c ends the process */
    void (*on_model_ready)(struct api_server *a); /* serve.c sets up the endpoints' model state */
    metrics *registry;
    metrics *vllm_registry;  /* the "vllm:" aliases (docs/prefix-cache.md) */
    api_metrics m;
    api_job *jobs;
    int n_jobs;
    uint64_t next_id;        /* for response ids */
    struct gl_chat_template *chat_template; /* NULL when the model's cannot be used */
    char chat_template_error[512];       /* why, for the chat endpoint's error */
    bool chat_tools_native;  /* the template renders tools itself (tools.h) */
    reasoning_markers reasoning; /* the model's thinking-block markers (reasoning.h) */
    struct responses_store *responses; /* kept /v1/responses (api_responses.h) */
} api_server;

void api_init(api_server *a, const config *cfg);
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
/* 503 while the model loads; returns 1 when it replied. */
int api_reply_if_loading(api_server *a, http_req *req);
/* Parses the body as a JSON object, or replies 400 and returns NULL. */
cJSON *api_parse_body(api_server *a, http_req *req);
/* 400 naming param when a prompt of n tokens is over the max_prompt_tokens
 * setting (a prompt over the context is left to the caller's
 * context_length_exceeded check); returns 0 or -1. */
int api_check_prompt_tokens(const api_server *a, int n, const char *param, params_error *e);
/* A request's `model` field: absent, null, or naming the loaded model (id,
 * alias, general.name, file name with or without .gguf); else 400/404.
 * Returns 0 or -1. */
int api_check_model(const api_server *a, const cJSON *body, params_error *e);

void api_job_add(api_server *a, api_job *job);
void api_job_remove(api_server *a, api_job *job);
void api_cancel_all(api_server *a);

/* Writes the text one token adds (leading space kept) as a JSON string;
 * partial UTF-8 shows as U+FFFD. */
void api_write_piece(const api_server *a, jbuf *out, int32_t token);

/* "WHAT: URL" on stdout for scripts that start the server; skipped when
 * stdout is the terminal stderr already writes the same news to. */
void api_print_status(const char *what, const char *url);

/* Metrics for one finished engine request. */
void api_note_finished(api_server *a, const gl_event *ev);

#endif
