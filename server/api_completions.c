/* api_completions.c -- a completion request is a job of n x prompts engine
 * requests ("seqs"), one per choice. The handler validates, tokenizes and
 * submits; engine events then fill each seq; when every seq has finished
 * the job replies (or, streaming, writes chunks as tokens arrive).
 *
 * A job outlives its HTTP request when the client leaves early: it is freed
 * once the connection is closed and every seq has finished. */
#include "api_completions.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "jbuf.h"

typedef struct cmpl_prompt {
    int32_t *ids;
    int n;
    char *text;              /* what echo prepends */
    size_t text_len;
} cmpl_prompt;

typedef enum { SEQ_SUBMITTING, SEQ_RUNNING, SEQ_DONE } seq_state;

typedef struct cmpl_seq {
    api_sink sink;           /* first: the engine request's user pointer */
    struct cmpl_job *job;
    int index;               /* choice index */
    int prompt;              /* index into job->prompts */
    seq_state state;
    jbuf text;               /* non-stream: the whole text; stream: not yet sent */
    size_t text_bytes;       /* choice text so far, for text_offset */
    size_t prompt_offset;    /* echo+logprobs: offset of the next prompt token */
    int n_lp;                /* logprob entries in lp_* not yet written */
    jbuf lp_tokens, lp_values, lp_tops, lp_offsets;
    int final_sent;          /* stream: chunk with finish_reason written */
    int n_generated;
    gl_finish_reason finish;
    double t_first, t_total; /* seconds since submit */
    double t_last_token;     /* for inter-token latency */
} cmpl_seq;

typedef struct cmpl_job {
    api_job base;            /* first: listed in api_server */
    api_server *api;
    http_req *req;           /* NULL once the connection has closed */
    char id[48];
    long created;
    params_generation gen;
    int logprobs;            /* -1: none */
    bool echo;
    cmpl_prompt *prompts;
    int n_prompts;
    cmpl_seq *seqs;
    int n_seqs;
    int n_submitting;        /* seqs without SUBMITTED/REJECTED yet */
    int n_unfinished;        /* seqs not DONE */
    int failed;              /* a submit was rejected: err holds the reply */
    params_error err;
    int stream_started;
    int replied;
    jbuf chunk;              /* scratch for one SSE chunk */
} cmpl_job;

/* ---- job lifetime ------------------------------------------------------------- */

static void job_destroy(api_job *base) {
    cmpl_job *job = (cmpl_job *)base;
    for (int i = 0; i < job->n_prompts; i++) {
        free(job->prompts[i].ids);
        free(job->prompts[i].text);
    }
    free(job->prompts);
    for (int i = 0; i < job->n_seqs; i++) {
        cmpl_seq *s = &job->seqs[i];
        jbuf_free(&s->text);
        jbuf_free(&s->lp_tokens);
        jbuf_free(&s->lp_values);
        jbuf_free(&s->lp_tops);
        jbuf_free(&s->lp_offsets);
    }
    free(job->seqs);
    params_generation_free(&job->gen);
    jbuf_free(&job->chunk);
    free(job);
}

static void job_cancel(api_job *base) {
    cmpl_job *job = (cmpl_job *)base;
    for (int i = 0; i < job->n_seqs; i++)
        if (job->seqs[i].state != SEQ_DONE) worker_cancel(job->api->worker, &job->seqs[i].sink);
}

static void job_release(cmpl_job *job) {
    api_job_remove(job->api, &job->base);
    job_destroy(&job->base);
}

static void on_http_close(void *data, int aborted) {
    cmpl_job *job = data;
    job->req = NULL;
    if (job->n_unfinished > 0)
        job_cancel(&job->base);  /* the client left: stop computing for it */
    else
        job_release(job);
}

/* ---- logprobs ----------------------------------------------------------------- */

/* One entry; logprob NAN (the first prompt token) gives nulls. */
static void lp_add(cmpl_seq *s, int32_t token, float logprob, int n_top,
                   const gl_top_logprob *top, size_t offset) {
    const api_server *a = s->job->api;
    const char *sep = s->n_lp ? "," : "";
    jbuf_puts(&s->lp_tokens, sep);
    api_write_piece(a, &s->lp_tokens, token);
    jbuf_puts(&s->lp_values, sep);
    jbuf_num(&s->lp_values, logprob);
    jbuf_puts(&s->lp_tops, sep);
    if (isnan(logprob)) {
        jbuf_puts(&s->lp_tops, "null");
    } else {
        jbuf_puts(&s->lp_tops, "{");
        int n = n_top < s->job->logprobs ? n_top : s->job->logprobs;
        for (int i = 0; i < n; i++) {
            if (i) jbuf_puts(&s->lp_tops, ",");
            api_write_piece(a, &s->lp_tops, top[i].token);
            jbuf_puts(&s->lp_tops, ":");
            jbuf_num(&s->lp_tops, top[i].logprob);
        }
        jbuf_puts(&s->lp_tops, "}");
    }
    jbuf_printf(&s->lp_offsets, "%s%zu", sep, offset);
    s->n_lp++;
}

/* Writes the pending entries as a logprobs object (or null) and clears them. */
static void lp_write(jbuf *out, cmpl_seq *s) {
    if (s->job->logprobs < 0) { jbuf_puts(out, "null"); return; }
    jbuf_puts(out, "{\"tokens\":[");
    jbuf_raw(out, s->lp_tokens.data ? s->lp_tokens.data : "", s->lp_tokens.len);
    jbuf_puts(out, "],\"token_logprobs\":[");
    jbuf_raw(out, s->lp_values.data ? s->lp_values.data : "", s->lp_values.len);
    jbuf_puts(out, "],\"top_logprobs\":[");
    jbuf_raw(out, s->lp_tops.data ? s->lp_tops.data : "", s->lp_tops.len);
    jbuf_puts(out, "],\"text_offset\":[");
    jbuf_raw(out, s->lp_offsets.data ? s->lp_offsets.data : "", s->lp_offsets.len);
    jbuf_puts(out, "]}");
    jbuf_clear(&s->lp_tokens);
    jbuf_clear(&s->lp_values);
    jbuf_clear(&s->lp_tops);
    jbuf_clear(&s->lp_offsets);
    s->n_lp = 0;
}

/* ---- response pieces ------------------------------------------------------------ */

static void write_head(jbuf *b, cmpl_job *job) {
    jbuf_puts(b, "{\"id\":");
    jbuf_str(b, job->id, strlen(job->id));
    jbuf_printf(b, ",\"object\":\"text_completion\",\"created\":%ld,\"model\":", job->created);
    jbuf_str(b, job->api->model_id, strlen(job->api->model_id));
}

static void write_choice(jbuf *b, cmpl_seq *s, int final) {
    jbuf_puts(b, "{\"text\":");
    jbuf_str(b, s->text.data ? s->text.data : "", s->text.len);
    jbuf_printf(b, ",\"index\":%d,\"logprobs\":", s->index);
    lp_write(b, s);
    jbuf_puts(b, ",\"finish_reason\":");
    if (final) {
        const char *r = gl_finish_reason_str(s->finish);
        jbuf_str(b, r, strlen(r));
    } else {
        jbuf_puts(b, "null");
    }
    jbuf_puts(b, "}");
    jbuf_clear(&s->text);
}

typedef struct job_totals {
    int prompt_tokens, completion_tokens;
    double ttft, decode_time;
    int seqs_with_tokens;
} job_totals;

static job_totals totals(const cmpl_job *job) {
    job_totals t = { 0, 0, INFINITY, 0, 0 };
    double last = 0;
    for (int i = 0; i < job->n_prompts; i++) t.prompt_tokens += job->prompts[i].n;
    for (int i = 0; i < job->n_seqs; i++) {
        const cmpl_seq *s = &job->seqs[i];
        t.completion_tokens += s->n_generated;
        if (s->n_generated > 0) {
            t.seqs_with_tokens++;
            if (s->t_first < t.ttft) t.ttft = s->t_first;
            if (s->t_total > last) last = s->t_total;
        }
    }
    if (t.seqs_with_tokens == 0) t.ttft = 0;
    else t.decode_time = last - t.ttft;
    return t;
}

static void write_usage(jbuf *b, const job_totals *t) {
    jbuf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                t->prompt_tokens, t->completion_tokens, t->prompt_tokens + t->completion_tokens);
}

/* timings: ttft over the first token of any choice; predicted_per_second is
 * the decode rate after each choice's first token. */
static void write_timings(jbuf *b, const job_totals *t) {
    int decoded = t->completion_tokens - t->seqs_with_tokens;
    jbuf_printf(b, "\"timings\":{\"prompt_n\":%d,\"ttft_ms\":", t->prompt_tokens);
    jbuf_num(b, t->ttft * 1e3);
    jbuf_puts(b, ",\"prompt_per_second\":");
    jbuf_num(b, t->ttft > 0 ? t->prompt_tokens / t->ttft : 0);
    jbuf_printf(b, ",\"predicted_n\":%d,\"predicted_per_second\":", t->completion_tokens);
    jbuf_num(b, t->decode_time > 0 && decoded > 0 ? decoded / t->decode_time : 0);
    jbuf_puts(b, "}");
}

/* ---- streaming -------------------------------------------------------------------- */

static void send_chunk(cmpl_job *job) {
    if (job->req) http_stream_write(job->req, job->chunk.data, job->chunk.len);
    jbuf_clear(&job->chunk);
}

/* Writes a seq's pending text/logprobs (and its finish_reason once done);
 * chunks without text are skipped except the final one. */
static void stream_flush(cmpl_seq *s, int with_timings) {
    cmpl_job *job = s->job;
    if (!job->stream_started || s->final_sent) return;
    int final = s->state == SEQ_DONE;
    if (!final && s->text.len == 0) return;
    jbuf *b = &job->chunk;
    jbuf_puts(b, "data: ");
    write_head(b, job);
    jbuf_puts(b, ",\"choices\":[");
    write_choice(b, s, final);
    jbuf_puts(b, "]");
    if (job->gen.include_usage) jbuf_puts(b, ",\"usage\":null");
    if (with_timings) {
        job_totals t = totals(job);
        jbuf_puts(b, ",");
        write_timings(b, &t);
    }
    jbuf_puts(b, "}\n\n");
    send_chunk(job);
    if (final) s->final_sent = 1;
}

static void stream_start(cmpl_job *job) {
    job->stream_started = 1;
    if (job->req) http_stream_start(job->req, 200, "text/event-stream");
    /* Echo text goes out now unless prompt logprobs are still to come. */
    for (int i = 0; i < job->n_seqs; i++) {
        cmpl_seq *s = &job->seqs[i];
        if (s->state == SEQ_DONE || !job->echo || job->logprobs < 0) stream_flush(s, 0);
    }
}

/* ---- completion ---------------------------------------------------------------------- */

static void log_line(cmpl_job *job, const job_totals *t) {
    if (!job->req) return;
    int decoded = t->completion_tokens - t->seqs_with_tokens;
    http_req_log(job->req, "%s prompt=%d gen=%d ttft=%.1fms tps=%.1f finish=%s%s", job->id,
                 t->prompt_tokens, t->completion_tokens, t->ttft * 1e3,
                 t->decode_time > 0 ? decoded / t->decode_time : 0.0,
                 job->n_seqs ? gl_finish_reason_str(job->seqs[0].finish) : "-",
                 job->n_seqs > 1 ? " (choice 0)" : "");
}

static void job_complete(cmpl_job *job) {
    job->replied = 1;
    job_totals t = totals(job);
    if (job->failed) {
        if (job->req) api_reply_error(job->api, job->req, &job->err);
    } else if (job->gen.stream) {
        jbuf *b = &job->chunk;
        for (int i = 0; i < job->n_seqs; i++) stream_flush(&job->seqs[i], 0);
        if (job->gen.include_usage) {
            jbuf_puts(b, "data: ");
            write_head(b, job);
            jbuf_puts(b, ",\"choices\":[],");
            write_usage(b, &t);
            jbuf_puts(b, ",");
            write_timings(b, &t);
            jbuf_puts(b, "}\n\n");
        }
        jbuf_puts(b, "data: [DONE]\n\n");
        send_chunk(job);
        if (job->req) http_stream_end(job->req);
        log_line(job, &t);
    } else if (job->req) {
        jbuf b = {0};
        write_head(&b, job);
        jbuf_puts(&b, ",\"choices\":[");
        for (int i = 0; i < job->n_seqs; i++) {
            if (i) jbuf_puts(&b, ",");
            write_choice(&b, &job->seqs[i], 1);
        }
        jbuf_puts(&b, "],");
        write_usage(&b, &t);
        jbuf_puts(&b, ",");
        write_timings(&b, &t);
        jbuf_puts(&b, "}");
        if (b.oom) {
            params_fail(&job->err, 500, NULL, NULL, "out of memory");
            api_reply_error(job->api, job->req, &job->err);
        } else {
            http_reply(job->req, 200, "application/json", b.data, b.len);
        }
        jbuf_free(&b);
        log_line(job, &t);
    }
    if (!job->req) job_release(job);
}

static void seq_append_text(cmpl_seq *s, const char *text, size_t len) {
    jbuf_raw(&s->text, text, len);
    s->text_bytes += len;
}

static void seq_on_event(api_sink *sink, const worker_event *ev) {
    cmpl_seq *s = (cmpl_seq *)sink;
    cmpl_job *job = s->job;
    api_server *a = job->api;
    int scoring_only = job->gen.max_tokens == 0; /* echo/logprobs of the prompt only */
    switch (ev->type) {
    case WORKER_SUBMITTED:
        s->state = SEQ_RUNNING;
        job->n_submitting--;
        if (job->failed) worker_cancel(a->worker, sink);
        else if (job->n_submitting == 0 && job->gen.stream) stream_start(job);
        break;
    case WORKER_REJECTED:
        s->state = SEQ_DONE;
        job->n_submitting--;
        job->n_unfinished--;
        if (!job->failed) {
            job->failed = 1;
            if (ev->queue_full)
                params_fail(&job->err, 503, NULL, "server_busy",
                            "The server is busy (waiting queue full); retry later");
            else
                params_fail(&job->err, 400, "prompt", NULL, "%s", ev->error ? ev->error : "rejected");
            job_cancel(&job->base);
        }
        if (job->n_unfinished == 0) job_complete(job);
        break;
    case WORKER_PROMPT_TOKEN:
        if (job->echo && job->logprobs >= 0) {
            size_t len = 0;
            gl_token_piece(a->model, ev->token, &len);
            lp_add(s, ev->token, ev->logprob, ev->n_top, ev->top, s->prompt_offset);
            s->prompt_offset += len;
        }
        break;
    case WORKER_TOKEN:
        if (s->t_last_token > 0) metrics_observe(a->m.itl, ev->t_event - s->t_last_token);
        s->t_last_token = ev->t_event;
        if (scoring_only) break;
        if (job->logprobs >= 0) lp_add(s, ev->token, ev->logprob, ev->n_top, ev->top, s->text_bytes);
        seq_append_text(s, ev->text, ev->text_len);
        if (job->gen.stream) stream_flush(s, 0);
        break;
    case WORKER_FINISHED: {
        worker_event shown = *ev;
        if (scoring_only && ev->finish != GL_FINISH_CANCELLED && ev->finish != GL_FINISH_ERROR) {
            shown.n_generated = 0;
            shown.finish = GL_FINISH_LENGTH;
        }
        api_note_finished(a, &shown);
        if (!scoring_only) seq_append_text(s, ev->text, ev->text_len);
        s->state = SEQ_DONE;
        s->finish = shown.finish;
        s->n_generated = shown.n_generated;
        s->t_first = ev->t_first_token;
        s->t_total = ev->t_total;
        if (ev->finish == GL_FINISH_ERROR && !job->failed && !job->stream_started) {
            job->failed = 1;
            params_fail(&job->err, 500, NULL, "engine_error", "%s", ev->error ? ev->error : "engine error");
        }
        job->n_unfinished--;
        if (job->gen.stream) stream_flush(s, job->n_unfinished == 0);
        if (job->n_unfinished == 0) job_complete(job);
        break;
    }
    default:
        break;
    }
}

/* ---- request parsing ------------------------------------------------------------------- */

static int parse_token_array(const cJSON *arr, int n_vocab, cmpl_prompt *p, params_error *e) {
    int n = cJSON_GetArraySize(arr);
    p->ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!p->ids) return params_fail(e, 500, "prompt", NULL, "out of memory");
    for (const cJSON *t = arr->child; t; t = t->next) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
            t->valuedouble < 0 || t->valuedouble >= n_vocab)
            return params_fail(e, 400, "prompt", "invalid_value",
                               "'prompt' token ids must be integers in 0..%d", n_vocab - 1);
        p->ids[p->n++] = (int32_t)t->valuedouble;
    }
    return 0;
}

static int tokenize_prompt(const gl_model *model, const char *text, cmpl_prompt *p,
                           params_error *e) {
    size_t len = strlen(text);
    if (!params_utf8_valid(text, len))
        return params_fail(e, 400, "prompt", "invalid_value", "'prompt' is not valid UTF-8");
    gl_error err = {{0}};
    int n = gl_tokenize(model, text, len, GL_TOKENIZE_ADD_SPECIAL | GL_TOKENIZE_PARSE_SPECIAL,
                        &p->ids, &err);
    if (n < 0) return params_fail(e, 400, "prompt", "invalid_value", "%s", err.message);
    p->n = n;
    p->text = strdup(text);
    p->text_len = len;
    return 0;
}

/* prompt: "s" | ["s", ...] | [id, ...] | [[id, ...], ...] */
static int parse_prompts(cmpl_job *job, const cJSON *prompt, params_error *e) {
    const gl_model *model = job->api->model;
    int n_vocab = gl_model_get_info(model)->n_vocab;
    if (!prompt) return params_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    int n = cJSON_IsString(prompt) ? 1 : cJSON_IsArray(prompt) ? cJSON_GetArraySize(prompt) : -1;
    if (n < 0)
        return params_fail(e, 400, "prompt", "invalid_type",
                           "'prompt' must be a string, an array of strings, an array of token ids or an array of token-id arrays");
    if (n == 0) return params_fail(e, 400, "prompt", "invalid_value", "'prompt' must not be empty");
    const cJSON *first = cJSON_IsArray(prompt) ? prompt->child : NULL;
    int is_ids = first && cJSON_IsNumber(first);
    if (is_ids) n = 1;
    if (n > 256) return params_fail(e, 400, "prompt", "invalid_value", "at most 256 prompts per request");
    job->prompts = calloc((size_t)n, sizeof(cmpl_prompt));
    if (!job->prompts) return params_fail(e, 500, "prompt", NULL, "out of memory");
    job->n_prompts = n;
    if (cJSON_IsString(prompt)) {
        if (tokenize_prompt(model, prompt->valuestring, &job->prompts[0], e)) return -1;
    } else if (is_ids) {
        if (parse_token_array(prompt, n_vocab, &job->prompts[0], e)) return -1;
    } else {
        int i = 0;
        for (const cJSON *item = prompt->child; item; item = item->next, i++) {
            int rc = cJSON_IsString(item) ? tokenize_prompt(model, item->valuestring, &job->prompts[i], e)
                   : cJSON_IsArray(item) && cJSON_GetArraySize(item) > 0 &&
                     (!first || cJSON_IsArray(first))
                       ? parse_token_array(item, n_vocab, &job->prompts[i], e)
                       : params_fail(e, 400, "prompt", "invalid_type",
                                     "'prompt' array items must all be strings or all be non-empty token-id arrays");
            if (rc) return -1;
            if (cJSON_IsString(item) != cJSON_IsString(first))
                return params_fail(e, 400, "prompt", "invalid_type",
                                   "'prompt' array items must all be strings or all be token-id arrays");
        }
    }
    for (int i = 0; i < n; i++) {
        cmpl_prompt *p = &job->prompts[i];
        if (p->n == 0)
            return params_fail(e, 400, "prompt", "invalid_value", "'prompt' has no tokens");
        if (!p->text) {
            gl_error err = {{0}};
            p->text = gl_detokenize(model, p->ids, (size_t)p->n, &err);
            if (!p->text) return params_fail(e, 400, "prompt", "invalid_value", "%s", err.message);
            p->text_len = strlen(p->text);
        }
    }
    return 0;
}

static int parse_request(cmpl_job *job, const cJSON *body, params_error *e) {
    static const char *const keys[] = {
        "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
        "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "seed",
        "user", "best_of", "suffix", "top_k", "min_p", "repetition_penalty", NULL };
    api_server *a = job->api;
    if (params_check_keys(body, keys, e)) return -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model))
            return params_fail(e, 400, "model", "invalid_type", "'model' must be a string");
        if (!api_model_matches(a, model->valuestring))
            return params_fail(e, 404, "model", "model_not_found",
                               "The model '%.200s' does not exist; this server has '%s'",
                               model->valuestring, a->model_id);
    }
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(body, "suffix");
    if (suffix && !cJSON_IsNull(suffix))
        return params_fail(e, 400, "suffix", "unsupported_parameter", "'suffix' is not supported");
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(body, "user");
    if (user && !cJSON_IsNull(user) && !cJSON_IsString(user))
        return params_fail(e, 400, "user", "invalid_type", "'user' must be a string");
    if (params_generation_parse(body, a->model, a->cfg->max_n, "max_tokens", a->n_ctx, &job->gen, e))
        return -1;
    int best_of = job->gen.n;
    if (params_get_int(body, "best_of", 1, a->cfg->max_n, &best_of, e)) return -1;
    if (best_of != job->gen.n)
        return params_fail(e, 400, "best_of", "unsupported_parameter",
                           "'best_of' is only supported equal to 'n'");
    job->logprobs = -1;
    if (params_get_int(body, "logprobs", 0, 5, &job->logprobs, e) ||
        params_get_bool(body, "echo", &job->echo, e))
        return -1;
    if (parse_prompts(job, cJSON_GetObjectItemCaseSensitive(body, "prompt"), e)) return -1;
    if ((long)job->n_prompts * job->gen.n > 256)
        return params_fail(e, 400, "n", "invalid_value", "'n' times the number of prompts must be at most 256");
    for (int i = 0; i < job->n_prompts; i++) {
        int need = job->prompts[i].n + (job->gen.max_tokens > 0 ? job->gen.max_tokens : 1);
        if (need > a->n_ctx)
            return params_fail(e, 400, "prompt", "context_length_exceeded",
                               "This model's maximum context length is %d tokens, however you "
                               "requested %d tokens (%d in your prompt; %d for the completion). "
                               "Please reduce your prompt or completion length.",
                               a->n_ctx, need, job->prompts[i].n, job->gen.max_tokens);
    }
    return 0;
}

void completions_handle(http_req *req, void *ctx) {
    api_server *a = ctx;
    if (api_reply_if_loading(a, req)) return;
    cJSON *body = api_parse_body(a, req);
    if (!body) return;
    cmpl_job *job = calloc(1, sizeof(*job));
    params_error e;
    if (!job) {
        cJSON_Delete(body);
        params_fail(&e, 500, NULL, NULL, "out of memory");
        api_reply_error(a, req, &e);
        return;
    }
    job->api = a;
    job->base.cancel = job_cancel;
    job->base.destroy = job_destroy;
    int rc = parse_request(job, body, &e);
    cJSON_Delete(body);
    if (rc == 0) {
        job->n_seqs = job->n_prompts * job->gen.n;
        job->seqs = calloc((size_t)job->n_seqs, sizeof(cmpl_seq));
        if (!job->seqs) rc = params_fail(&e, 500, NULL, NULL, "out of memory");
    }
    if (rc) {
        api_reply_error(a, req, &e);
        job_destroy(&job->base);
        return;
    }
    job->req = req;
    job->created = (long)time(NULL);
    snprintf(job->id, sizeof(job->id), "cmpl-%llx%06llx", (unsigned long long)job->created,
             (unsigned long long)++a->next_id);
    job->n_submitting = job->n_unfinished = job->n_seqs;
    api_job_add(a, &job->base);
    http_req_on_close(req, on_http_close, job);

    job->gen.sampling.n_logprobs = job->logprobs > 0 ? job->logprobs : 0;
    for (int i = 0; i < job->n_seqs; i++) {
        cmpl_seq *s = &job->seqs[i];
        s->sink.on_event = seq_on_event;
        s->job = job;
        s->index = i;
        s->prompt = i / job->gen.n;
        const cmpl_prompt *p = &job->prompts[s->prompt];
        if (job->echo) seq_append_text(s, p->text, p->text_len);
        gl_request r = {
            .prompt = p->ids,
            .n_prompt = p->n,
            /* max_tokens 0 (prompt scoring): generate one token and drop it */
            .max_tokens = job->gen.max_tokens > 0 ? job->gen.max_tokens : 1,
            .sampling = job->gen.sampling,
            .n_stop = job->gen.n_stop,
            .stop = (const char *const *)job->gen.stop,
            .ignore_eos = false,
            .prompt_logprobs = job->echo && job->logprobs >= 0 ? job->logprobs : -1,
            .user = &s->sink,
        };
        worker_submit(a->worker, &r);
    }
}
