/* api.c -- shared plumbing and the small endpoints (/health, /v1/models,
 * /tokenize, /detokenize, /metrics); routes.c lists them with the rest. */
#include "api.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "access.h"
#include "api_anthropic.h"
#include "api_responses.h"
#include "jbuf.h"
#include "utf8.h"

/* ---- metrics ------------------------------------------------------------------ */

static const double time_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                       0.5, 1, 2.5, 5, 10, 20, 30, 60 };
/* whole requests: a long generation on a CPU takes minutes */
static const double latency_buckets[] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                                          20, 30, 60, 120, 300, 600, 1200 };
static const double token_buckets[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024,
                                        2048, 4096, 8192, 16384, 32768 };
static const double seq_buckets[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096 };
#define N_OF(a) (int)(sizeof(a) / sizeof((a)[0]))

void api_init(api_server *a, const config *cfg) {
    memset(a, 0, sizeof(*a));
    a->cfg = cfg;
    metrics *r = a->registry = metrics_create("genloop_");
    api_metrics *m = &a->m;
    m->ttft = metrics_histogram(r, "time_to_first_token_seconds",
        "Time from submission to the first generated token.", latency_buckets, N_OF(latency_buckets));
    m->itl = metrics_histogram(r, "inter_token_latency_seconds",
        "Time between consecutive generated tokens of a request.", time_buckets, N_OF(time_buckets));
    m->e2e = metrics_histogram(r, "e2e_request_latency_seconds",
        "Time from submission to the end of a request.", latency_buckets, N_OF(latency_buckets));
    m->queue_time = metrics_histogram(r, "request_queue_time_seconds",
        "Time a request waited before it was scheduled.", latency_buckets, N_OF(latency_buckets));
    m->prefill_time = metrics_histogram(r, "request_prefill_time_seconds",
        "Time from a request's scheduling to its first token (reading the prompt).",
        latency_buckets, N_OF(latency_buckets));
    m->decode_time = metrics_histogram(r, "request_decode_time_seconds",
        "Time from a request's first token to its end.", latency_buckets, N_OF(latency_buckets));
    m->prompt_tokens = metrics_histogram(r, "request_prompt_tokens",
        "Prompt tokens per finished request.", token_buckets, N_OF(token_buckets));
    m->generation_tokens = metrics_histogram(r, "request_generation_tokens",
        "Generated tokens per finished request.", token_buckets, N_OF(token_buckets));
    m->prompt_tokens_total = metrics_counter(r, "prompt_tokens_total",
        "Prompt tokens of finished requests.", NULL);
    m->generation_tokens_total = metrics_counter(r, "generation_tokens_total",
        "Generated tokens of finished requests.", NULL);
    m->requests_total = metrics_counter(r, "requests_total",
        "Finished engine requests by finish reason.", "finish_reason");
    static const gl_finish_reason reasons[] = { GL_FINISH_STOP, GL_FINISH_LENGTH,
                                                GL_FINISH_CANCELLED, GL_FINISH_ERROR };
    for (int i = 0; i < N_OF(reasons); i++)
        metrics_inc(m->requests_total, gl_finish_reason_str(reasons[i]), 0);
    m->errors_total = metrics_counter(r, "request_errors_total",
        "HTTP requests answered with an error, by status code.", "code");
    m->running = metrics_gauge(r, "requests_running", "Sequences in the running batch.");
    m->waiting = metrics_gauge(r, "requests_waiting", "Requests queued in the engine.");
    m->kv_usage = metrics_gauge(r, "kv_cache_usage_ratio", "Fraction of KV cache blocks in use.");
    m->kv_capacity = metrics_gauge(r, "kv_cache_capacity_tokens", "Tokens the KV cache holds (all sequences together).");
    m->preemptions = metrics_counter(r, "num_preemptions_total",
        "Sequences preempted to free KV cache.", NULL);
    m->prefix_queries = metrics_counter(r, "prefix_cache_queries_total",
        "Prompt tokens looked up in the prefix cache.", NULL);
    m->prefix_hits = metrics_counter(r, "prefix_cache_hits_total",
        "Prompt tokens found in the prefix cache.", NULL);
    m->spec_drafts = metrics_counter(r, "spec_decode_num_drafts_total",
        "Drafts verified by speculative decoding (one per sequence and step).", NULL);
    m->spec_draft_tokens = metrics_counter(r, "spec_decode_num_draft_tokens_total",
        "Tokens drafted by speculative decoding.", NULL);
    m->spec_accepted = metrics_counter(r, "spec_decode_num_accepted_tokens_total",
        "Drafted tokens accepted.", NULL);
    m->spec_accepted_at = metrics_counter(r, "spec_decode_num_accepted_tokens_per_pos_total",
        "Drafted tokens accepted, by position in the draft (0 = first).", "position");
    m->engine_steps = metrics_counter(r, "engine_steps_total",
        "Engine steps that ran a forward pass.", NULL);
    m->batch_size = metrics_histogram(r, "batch_size",
        "Sequences in each forward pass.", seq_buckets, N_OF(seq_buckets));
    m->batch_tokens = metrics_histogram(r, "batch_tokens",
        "Tokens in each forward pass (prompt chunks and decoded tokens).", token_buckets,
        N_OF(token_buckets));
    m->disk_loaded = metrics_counter(r, "kv_disk_loaded_blocks_total",
        "KV blocks read back from --kv-cache-dir.", NULL);
    m->disk_written = metrics_counter(r, "kv_disk_written_blocks_total",
        "KV blocks written to --kv-cache-dir.", NULL);
    m->disk_evicted = metrics_counter(r, "kv_disk_evicted_blocks_total",
        "--kv-cache-dir entries deleted for its size bound.", NULL);
    m->disk_skipped = metrics_counter(r, "kv_disk_skipped_files_total",
        "--kv-cache-dir files skipped as corrupt, truncated or written for another model.", NULL);
    m->disk_dropped = metrics_counter(r, "kv_disk_dropped_blocks_total",
        "KV blocks not written to --kv-cache-dir (writer queue full, disk error).", NULL);
    m->disk_bytes = metrics_gauge(r, "kv_disk_bytes", "Bytes of the --kv-cache-dir entries.");
    if (!cfg->metrics_vllm_names) return;
    metrics *v = a->vllm_registry = metrics_create("vllm:");
    m->vllm_waiting = metrics_gauge(v, "num_requests_waiting", "Requests queued in the engine (genloop_requests_waiting).");
    m->vllm_running = metrics_gauge(v, "num_requests_running", "Sequences in the running batch (genloop_requests_running).");
    m->vllm_kv_usage = metrics_gauge(v, "kv_cache_usage_perc",
        "Fraction of KV cache blocks in use, 0 to 1 (genloop_kv_cache_usage_ratio).");
}

void api_set_model_label(api_server *a, const char *id) {
    metrics_set_const_label(a->registry, "model_name", id);
    if (a->vllm_registry) metrics_set_const_label(a->vllm_registry, "model_name", id);
}

void api_note_finished(api_server *a, const gl_event *ev) {
    api_metrics *m = &a->m;
    metrics_inc(m->requests_total, gl_finish_reason_str(ev->finish), 1);
    metrics_inc(m->prompt_tokens_total, NULL, ev->n_prompt_tokens);
    metrics_inc(m->generation_tokens_total, NULL, ev->n_generated);
    metrics_observe(m->prompt_tokens, ev->n_prompt_tokens);
    metrics_observe(m->generation_tokens, ev->n_generated);
    metrics_observe(m->e2e, ev->t_total);
    metrics_observe(m->queue_time, ev->t_queued);
    if (ev->n_generated > 0) {
        metrics_observe(m->ttft, ev->t_first_token);
        metrics_observe(m->prefill_time, ev->t_first_token - ev->t_queued);
        metrics_observe(m->decode_time, ev->t_total - ev->t_first_token);
    }
}

void api_free(api_server *a) {
    while (a->jobs) {
        api_job *j = a->jobs;
        api_job_remove(a, j);
        j->destroy(j);
    }
    responses_store_free(a);
    metrics_free(a->registry);
    a->registry = NULL;
    metrics_free(a->vllm_registry);
    a->vllm_registry = NULL;
}

/* ---- jobs ----------------------------------------------------------------------- */

void api_job_add(api_server *a, api_job *job) {
    job->prev = NULL;
    job->next = a->jobs;
    if (a->jobs) a->jobs->prev = job;
    a->jobs = job;
    a->n_jobs++;
}

void api_job_remove(api_server *a, api_job *job) {
    if (job->prev) job->prev->next = job->next; else a->jobs = job->next;
    if (job->next) job->next->prev = job->prev;
    job->prev = job->next = NULL;
    a->n_jobs--;
}

void api_cancel_all(api_server *a) {
    for (api_job *j = a->jobs; j; j = j->next) j->cancel(j);
}

/* ---- model readiness ------------------------------------------------------------ */

void api_print_status(const char *what, const char *url) {
    if (isatty(STDOUT_FILENO) && isatty(STDERR_FILENO)) return;
    printf("%s: %s\n", what, url);
    fflush(stdout);
}

void api_on_worker_msg(const worker_msg *msg, void *ctx) {
    api_server *a = ctx;
    switch (msg->type) {
    case WORKER_READY:
    case WORKER_LOAD_FAILED:
    case WORKER_RELEASED:
        break;                   /* models.c's */
    case WORKER_STEP:
        metrics_observe(a->m.batch_size, msg->batch_seqs);
        metrics_observe(a->m.batch_tokens, msg->batch_tokens);
        break;
    case WORKER_EVENT: {
        api_sink *sink = msg->ev.user;
        if (sink) sink->on_event(sink, &msg->ev, msg->t_event);
        break;
    }
    }
}

int api_check_prompt_tokens(const models_entry *m, int n, const char *param, params_error *e) {
    if (n <= m->max_prompt_tokens) return 0;
    return params_fail(e, 400, param, "invalid_value",
                       "'%s' has %d tokens; this server accepts at most %d per prompt", param, n,
                       m->max_prompt_tokens);
}

/* "'a', 'b', 'c'": the ids, for a 404's message. */
static void list_ids(api_server *a, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < models_count(a->models) && used + 4 < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s'%s'", i ? ", " : "", models_at(a->models, i)->id);
    if (used >= n) snprintf(out + n - 4, 4, "...");
}

models_entry *api_model_for(api_server *a, const cJSON *body, params_error *e) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    models_entry *def = models_default(a->models);
    if (!model || cJSON_IsNull(model)) return def;
    if (!cJSON_IsString(model)) {
        params_fail(e, 400, "model", "invalid_type", "'model' must be a string");
        return NULL;
    }
    models_entry *m = models_find(a->models, model->valuestring);
    if (m) return m;
    /* One model and no --strict-model: any name is that model (clients send their own). */
    if (models_count(a->models) == 1 && !a->cfg->strict_model) return def;
    char ids[600];
    list_ids(a, ids, sizeof ids);
    params_fail(e, 404, "model", "model_not_found", "The model '%.*s' does not exist; this server has %s",
                (int)utf8_cut(model->valuestring, 200), model->valuestring, ids);
    return NULL;
}

/* ---- requests that wait for their model ---------------------------------------------- */

typedef struct model_hold {
    models_waiter wait;      /* first: the waiter's callback casts back */
    api_server *api;
    http_req *req;
    cJSON *body;
    models_entry *model;
    api_model_fn fn;
    double keep_alive;       /* the request's, for models_release */
    bool held;               /* acquired and not yet released */
} model_hold;

static void hold_ready(models_waiter *w, const params_error *e) {
    model_hold *h = (model_hold *)w;
    if (e) api_reply_error(h->api, h->req, e);
    else h->fn(h->req, h->api, h->model, h->body);
    h->held = false;
    models_release(h->model, h->keep_alive);
}

static void hold_closed(void *data, bool aborted) {
    (void)aborted;
    model_hold *h = data;
    if (h->held) {               /* the client left while the model loaded */
        models_cancel_wait(&h->wait);
        models_release(h->model, MODELS_KEEP_UNCHANGED);
    }
    cJSON_Delete(h->body);
    free(h);
}

void api_with_model(api_server *a, http_req *req, cJSON *body, double keep_alive, api_model_fn fn) {
    params_error e;
    models_entry *m = api_model_for(a, body, &e);
    model_hold *h = m ? calloc(1, sizeof *h) : NULL;
    if (!h) {
        if (m) params_fail(&e, 500, NULL, NULL, "out of memory");
        cJSON_Delete(body);
        api_reply_error(a, req, &e);
        return;
    }
    *h = (model_hold){ .wait.ready = hold_ready, .api = a, .req = req, .body = body, .model = m, .fn = fn,
                       .keep_alive = keep_alive, .held = true };
    http_req_on_close(req, hold_closed, h);
    models_acquire(m, &h->wait);
}

void api_write_piece(const gl_model *model, jbuf *out, int32_t token) {
    size_t len = 0;
    const char *piece = gl_token_piece(model, token, &len);
    jbuf_str(out, piece ? piece : "", piece ? len : 0);
}

/* ---- replies ---------------------------------------------------------------------- */

void api_reply_json(http_req *req, int status, cJSON *body) {
    char *text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        http_reply(req, 500, "application/json", oom, sizeof(oom) - 1);
        return;
    }
    http_reply(req, status, "application/json", text, strlen(text));
    cJSON_free(text);
}

void api_reply_error(api_server *a, http_req *req, const params_error *e) {
    char code[16];
    snprintf(code, sizeof(code), "%d", e->status);
    metrics_inc(a->m.errors_total, code, 1);
    if (e->status == 503) http_add_header(req, "Retry-After", "1");
    if (anthropic_path(http_req_path(req))) { /* that API's clients read errors in its shape */
        http_req_log(req, "error=\"%s\"", e->message);
        api_reply_json(req, e->status, anthropic_error_json(e));
        return;
    }
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    http_req_log(req, "error=\"%s\"", e->message);
    api_reply_json(req, e->status, root);
}

/* ---- access: CORS, then the API key ------------------------------------------------ */

/* Adds Access-Control-Allow-Origin when the request's Origin is allowed;
 * returns whether it is. */
static int cors_headers(api_server *a, http_req *req) {
    const char *origin = http_req_header(req, "Origin");
    if (!a->cfg->cors_origin[0] || !origin) return 0;
    const char *allow = access_cors_match(a->cfg->cors_origin, origin);
    if (!allow || strcmp(allow, "*") != 0)
        http_add_header(req, "Vary", "Origin"); /* the answer depends on Origin */
    if (!allow) return 0;
    http_add_header(req, "Access-Control-Allow-Origin", allow);
    return 1;
}

int api_admit(http_req *req, const http_route *route, void *ctx) {
    api_server *a = ctx;
    params_error e;
    int allowed = cors_headers(a, req);
    if (a->cfg->cors_origin[0] && !strcmp(http_req_method(req), "OPTIONS") &&
        http_req_header(req, "Origin") && http_req_header(req, "Access-Control-Request-Method")) {
        /* A preflight carries no credentials, so it needs no key. */
        if (!allowed) {
            params_fail(&e, 403, NULL, "origin_not_allowed", "Origin not allowed (see --cors-origin)");
            api_reply_error(a, req, &e);
            return 1;
        }
        http_add_header(req, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        http_add_header(req, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
        http_add_header(req, "Access-Control-Max-Age", "86400");
        http_reply(req, 204, NULL, "", 0);
        return 1;
    }
    const char *key = a->cfg->api_key;
    if (!key[0] || !route || route->open) return 0; /* unknown paths get 404/405 */
    if (a->cfg->metrics_public && !strcmp(route->path, "/metrics")) return 0;
    size_t given_len = 0;
    const char *given = access_bearer(http_req_header(req, "Authorization"), &given_len);
    if (!given && (given = http_req_header(req, "x-api-key"))) given_len = strlen(given); /* Anthropic's clients */
    if (given && access_key_equal(key, strlen(key), given, given_len)) return 0;
    http_add_header(req, "WWW-Authenticate", "Bearer");
    params_fail(&e, 401, NULL, "invalid_api_key", "%s",
                given ? "Incorrect API key provided"
                      : "Missing API key: send the header 'Authorization: Bearer YOUR_KEY' (or 'x-api-key: YOUR_KEY')");
    api_reply_error(a, req, &e);
    return 1;
}

void api_http_error(http_req *req, int status, const char *message, void *ctx) {
    params_error e;
    const char *code = status == 400 ? "invalid_request" : status == 404 ? "not_found"
                     : status == 405 ? "method_not_allowed"
                     : status == 413 ? "request_too_large" : NULL;
    params_fail(&e, status, NULL, code, "%s", message);
    api_reply_error(ctx, req, &e);
}

/* The -m model is still loading at startup. */
static bool starting(api_server *a) {
    const models_entry *def = models_default(a->models);
    return def && def->pinned && def->state != MODELS_LOADED;
}

int api_reply_if_loading(api_server *a, http_req *req) {
    bool loading = starting(a);
    if (!loading && !a->shutting_down) return 0;
    params_error e;
    params_fail(&e, 503, NULL, !loading ? "shutting_down" : "model_loading", "%s",
                !loading ? "The server is shutting down" : "The model is still loading");
    api_reply_error(a, req, &e);
    return 1;
}

/* True when only JSON whitespace is left in s[0..len). */
static int only_space(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return 0;
    return 1;
}

cJSON *api_parse_body(api_server *a, http_req *req) {
    params_error e;
    const char *text = http_req_body(req), *end = NULL;
    size_t len = http_req_body_len(req);
    /* cJSON keeps a raw NUL inside a string, but hands strings over as C
     * strings: the text after it would silently go missing. */
    int has_nul = memchr(text, 0, len) != NULL;
    cJSON *body = has_nul ? NULL : cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (has_nul) {
        params_fail(&e, 400, NULL, "invalid_json", "The request body must not contain NUL bytes");
    } else if (!body) {
        params_fail(&e, 400, NULL, "invalid_json", "The request body is not valid JSON");
    } else if (!only_space(end, len - (size_t)(end - text))) {
        params_fail(&e, 400, NULL, "invalid_json",
                    "The request body has data after its JSON value (at byte %zu)", (size_t)(end - text));
    } else if (!cJSON_IsObject(body)) {
        params_fail(&e, 400, NULL, "invalid_json", "The request body must be a JSON object");
    } else if (params_json_has_nul(http_req_body(req), http_req_body_len(req))) {
        params_fail(&e, 400, NULL, "invalid_value", "Strings must not contain NUL characters (\\u0000)");
    } else {
        return body;
    }
    cJSON_Delete(body);
    api_reply_error(a, req, &e);
    return NULL;
}

/* ---- small endpoints --------------------------------------------------------------- */

void api_handle_health(http_req *req, void *ctx) {
    api_server *a = ctx;
    bool loading = starting(a);
    int ok = !loading && !a->shutting_down;
    const char *body = loading ? "{\"status\":\"loading model\"}"
                     : a->shutting_down ? "{\"status\":\"draining\"}"
                                        : "{\"status\":\"ok\"}";
    if (!ok) http_add_header(req, "Retry-After", "1");
    http_reply(req, ok ? 200 : 503, "application/json", body, strlen(body));
}

/* A model object as /v1/models lists it, under the name id: its state,
 * and what is known of it before a load (from the GGUF's metadata). */
static cJSON *model_object(const models_entry *e, const char *id) {
    const gl_model_info *info = e->model ? gl_model_get_info(e->model) : NULL;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "genloop");
    cJSON_AddStringToObject(m, "state", models_state_name(e->state));
    if (e->state == MODELS_LOADING) cJSON_AddNumberToObject(m, "load_progress", worker_load_progress(e->worker));
    /* context_length: what one request can use (prompt and completion); the
     * trained context can be more than the KV cache holds, which is only
     * known once loaded. */
    int n_ctx = info ? e->n_ctx : e->params.n_ctx > 0 ? e->params.n_ctx : e->n_ctx_train;
    cJSON_AddNumberToObject(m, "context_length", n_ctx);
    cJSON_AddNumberToObject(m, "max_model_len", n_ctx);   /* vLLM's name for the same */
    cJSON_AddNumberToObject(m, "trained_context_length", info ? info->n_ctx_train : e->n_ctx_train);
    cJSON_AddStringToObject(m, "path", e->path);
    if (info) {
        /* A GGUF without a chat template is a base model: it continues text. */
        cJSON_AddBoolToObject(m, "instruction_tuned", info->chat_template != NULL);
        if (!info->chat_template)
            cJSON_AddStringToObject(m, "note", "a base (pretrained) model: it continues text; use /v1/completions, "
                                               "chat replies will ramble or repeat");
    }
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    if (info && info->name) cJSON_AddStringToObject(meta, "name", info->name);
    else if (e->general_name[0]) cJSON_AddStringToObject(meta, "name", e->general_name);
    if (info && info->arch) cJSON_AddStringToObject(meta, "arch", info->arch);
    cJSON_AddNumberToObject(meta, "n_ctx_train", info ? info->n_ctx_train : e->n_ctx_train);
    if (info) {
        cJSON_AddNumberToObject(meta, "n_vocab", info->n_vocab);
        cJSON_AddNumberToObject(meta, "n_params", (double)info->n_params);
    }
    return m;
}

/* Each model under its id, then under each alias. */
void api_handle_models(http_req *req, void *ctx) {
    api_server *a = ctx;
    if (api_reply_if_loading(a, req)) return;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; i < models_count(a->models); i++) {
        const models_entry *e = models_at(a->models, i);
        cJSON_AddItemToArray(data, model_object(e, e->id));
        for (const char *p = e->alias; *p;) {
            size_t n = strcspn(p, ",");
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)n, p);
            if (strcmp(name, e->id) != 0) cJSON_AddItemToArray(data, model_object(e, name));
            p += n + (p[n] == ',');
        }
    }
    api_reply_json(req, 200, root);
}

/* GET /v1/models/{id} (client.models.retrieve): any of a model's names. */
void api_handle_model(http_req *req, void *ctx) {
    api_server *a = ctx;
    if (api_reply_if_loading(a, req)) return;
    const char *id = http_req_path(req) + strlen("/v1/models/");
    const models_entry *e = models_find(a->models, id);
    if (!e) {
        params_error err;
        char ids[600];
        list_ids(a, ids, sizeof ids);
        params_fail(&err, 404, "model", "model_not_found", "The model '%.200s' does not exist; this server has %s",
                    id, ids);
        api_reply_error(a, req, &err);
        return;
    }
    api_reply_json(req, 200, model_object(e, id));
}

/* Endpoints of the OpenAI API that clients probe and this server has not. */
void api_handle_unsupported(http_req *req, void *ctx) {
    params_error e;
    params_fail(&e, 404, NULL, "unsupported_endpoint",
                "%.100s %.200s is not supported by this server (genloop serves /v1/completions, "
                "/v1/chat/completions and /v1/models)", http_req_method(req), http_req_path(req));
    api_reply_error(ctx, req, &e);
}

static void tokenize(http_req *req, api_server *a, models_entry *m, const cJSON *body) {
    static const char *const keys[] = { "content", "add_special", "parse_special", "with_pieces", "model", NULL };
    params_error e;
    bool add_special = true, parse_special = true, with_pieces = false;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(body, "content");
    if (params_check_keys(body, keys, &e) ||
        params_get_bool(body, "add_special", &add_special, &e) ||
        params_get_bool(body, "parse_special", &parse_special, &e) ||
        params_get_bool(body, "with_pieces", &with_pieces, &e) ||
        (!cJSON_IsString(content) &&
         params_fail(&e, 400, "content", "invalid_type", "'content' must be a string")) ||
        (!params_utf8_valid(content->valuestring, strlen(content->valuestring)) &&
         params_fail(&e, 400, "content", "invalid_value", "'content' is not valid UTF-8"))) {
        api_reply_error(a, req, &e);
        return;
    }
    int32_t *ids = NULL;
    gl_error err = {{0}};
    int flags = (add_special ? GL_TOKENIZE_ADD_SPECIAL : 0) | (parse_special ? GL_TOKENIZE_PARSE_SPECIAL : 0);
    int n = gl_tokenize(m->model, content->valuestring, strlen(content->valuestring), flags, &ids, &err);
    if (n < 0) {
        params_fail(&e, 400, "content", "invalid_value", "%s", err.message);
        api_reply_error(a, req, &e);
        return;
    }
    jbuf out = {0};
    jbuf_puts(&out, "{\"tokens\":[");
    for (int i = 0; i < n; i++) {
        if (i) jbuf_puts(&out, ",");
        if (!with_pieces) { jbuf_printf(&out, "%d", ids[i]); continue; }
        jbuf_printf(&out, "{\"id\":%d,\"piece\":", ids[i]);
        api_write_piece(m->model, &out, ids[i]);
        jbuf_puts(&out, "}");
    }
    jbuf_puts(&out, "]}");
    free(ids);
    http_reply(req, out.oom ? 500 : 200, "application/json", out.data, out.len);
    jbuf_free(&out);
}

void api_handle_tokenize(http_req *req, void *ctx) {
    api_server *a = ctx;
    if (api_reply_if_loading(a, req)) return;
    cJSON *body = api_parse_body(a, req);
    if (body) api_with_model(a, req, body, MODELS_KEEP_UNCHANGED, tokenize);
}

static void detokenize(http_req *req, api_server *a, models_entry *m, const cJSON *body) {
    static const char *const keys[] = { "tokens", "model", NULL };
    params_error e;
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(body, "tokens");
    int n_vocab = gl_model_get_info(m->model)->n_vocab;
    int32_t *ids = NULL;
    int n = 0;
    if (params_check_keys(body, keys, &e) ||
        (!cJSON_IsArray(tokens) &&
         params_fail(&e, 400, "tokens", "invalid_type", "'tokens' must be an array of token ids")))
        goto fail;
    ids = malloc(sizeof(int32_t) * (size_t)(cJSON_GetArraySize(tokens) + 1));
    for (const cJSON *t = tokens->child; t; t = t->next) {
        if (!cJSON_IsNumber(t) || t->valuedouble != (double)(int32_t)t->valuedouble ||
            t->valuedouble < 0 || t->valuedouble >= n_vocab) {
            params_fail(&e, 400, "tokens", "invalid_value", "'tokens' must hold token ids in 0..%d",
                        n_vocab - 1);
            goto fail;
        }
        ids[n++] = (int32_t)t->valuedouble;
    }
    gl_error err = {{0}};
    char *text = gl_detokenize(m->model, ids, (size_t)n, &err);
    if (!text) {
        params_fail(&e, 400, "tokens", "invalid_value", "%s", err.message);
        goto fail;
    }
    jbuf out = {0};
    jbuf_puts(&out, "{\"content\":");
    jbuf_str(&out, text, strlen(text));
    jbuf_puts(&out, "}");
    http_reply(req, out.oom ? 500 : 200, "application/json", out.data, out.len);
    jbuf_free(&out);
    free(text);
    free(ids);
    return;
fail:
    free(ids);
    api_reply_error(a, req, &e);
}

void api_handle_detokenize(http_req *req, void *ctx) {
    api_server *a = ctx;
    if (api_reply_if_loading(a, req)) return;
    cJSON *body = api_parse_body(a, req);
    if (body) api_with_model(a, req, body, MODELS_KEEP_UNCHANGED, detokenize);
}

/* The engines' counters added up over the loaded models. */
static bool sum_stats(api_server *a, gl_engine_stats *st) {
    memset(st, 0, sizeof *st);
    bool any = false;
    for (int i = 0; i < models_count(a->models); i++) {
        models_entry *m = models_at(a->models, i);
        if (m->state != MODELS_LOADED) continue;
        gl_engine_stats one;
        worker_stats(m->worker, &one);
        any = true;
        st->n_running += one.n_running;
        st->n_waiting += one.n_waiting;
        st->n_blocks_used += one.n_blocks_used;
        st->n_blocks_total += one.n_blocks_total;
        st->disk_loaded += one.disk_loaded;
        st->disk_written += one.disk_written;
        st->disk_evicted += one.disk_evicted;
        st->disk_skipped += one.disk_skipped;
        st->disk_dropped += one.disk_dropped;
        st->disk_bytes += one.disk_bytes;
        st->kv_capacity_tokens += one.kv_capacity_tokens;
        st->n_preemptions += one.n_preemptions;
        st->prefix_queries += one.prefix_queries;
        st->prefix_hits += one.prefix_hits;
        st->n_steps += one.n_steps;
        st->spec_drafts += one.spec_drafts;
        st->spec_draft_tokens += one.spec_draft_tokens;
        st->spec_accepted_tokens += one.spec_accepted_tokens;
        for (int k = 0; k < GL_SPEC_MAX; k++) st->spec_accepted_at[k] += one.spec_accepted_at[k];
    }
    return any;
}

void api_handle_metrics(http_req *req, void *ctx) {
    api_server *a = ctx;
    gl_engine_stats st;
    models_update_metrics(a->models);
    if (sum_stats(a, &st)) {
        metrics_set(a->m.running, NULL, st.n_running);
        metrics_set(a->m.waiting, NULL, st.n_waiting);
        double kv_usage = st.n_blocks_total > 0 ? (double)st.n_blocks_used / st.n_blocks_total : 0;
        metrics_set(a->m.kv_usage, NULL, kv_usage);
        if (a->vllm_registry) {
            metrics_set(a->m.vllm_kv_usage, NULL, kv_usage);
            metrics_set(a->m.vllm_waiting, NULL, st.n_waiting);
            metrics_set(a->m.vllm_running, NULL, st.n_running);
        }
        metrics_set(a->m.disk_loaded, NULL, (double)st.disk_loaded);
        metrics_set(a->m.disk_written, NULL, (double)st.disk_written);
        metrics_set(a->m.disk_evicted, NULL, (double)st.disk_evicted);
        metrics_set(a->m.disk_skipped, NULL, (double)st.disk_skipped);
        metrics_set(a->m.disk_dropped, NULL, (double)st.disk_dropped);
        metrics_set(a->m.disk_bytes, NULL, (double)st.disk_bytes);
        metrics_set(a->m.kv_capacity, NULL, st.kv_capacity_tokens);
        metrics_set(a->m.preemptions, NULL, (double)st.n_preemptions);
        metrics_set(a->m.prefix_queries, NULL, (double)st.prefix_queries);
        metrics_set(a->m.prefix_hits, NULL, (double)st.prefix_hits);
        metrics_set(a->m.engine_steps, NULL, (double)st.n_steps);
        metrics_set(a->m.spec_drafts, NULL, (double)st.spec_drafts);
        metrics_set(a->m.spec_draft_tokens, NULL, (double)st.spec_draft_tokens);
        metrics_set(a->m.spec_accepted, NULL, (double)st.spec_accepted_tokens);
        for (int i = 0; i < GL_SPEC_MAX; i++) {
            if (st.spec_accepted_at[i] == 0 && i > 0) break; /* positions past the longest accepted run */
            char pos[16];
            snprintf(pos, sizeof pos, "%d", i);
            metrics_set(a->m.spec_accepted_at, pos, (double)st.spec_accepted_at[i]);
        }
    }
    size_t len = 0, alias_len = 0;
    char *text = metrics_render(a->registry, &len);
    char *aliases = a->vllm_registry ? metrics_render(a->vllm_registry, &alias_len) : strdup("");
    char *both = text && aliases ? realloc(text, len + alias_len + 1) : NULL;
    if (!both) {
        free(text);
        free(aliases);
        http_reply(req, 500, "text/plain", "out of memory\n", 14);
        return;
    }
    text = both;
    memcpy(text + len, aliases, alias_len + 1);
    len += alias_len;
    free(aliases);
    http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}
