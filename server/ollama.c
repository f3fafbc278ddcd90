/* ollama.c -- the Ollama API, translated onto chat and completions jobs. */
#include "ollama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "api_chat.h"
#include "api_completions.h"
#include "job.h"
#include "translate.h"

/* ---- options -------------------------------------------------------------------- */

/* Ollama's option names and the OpenAI endpoints' fields they become. */
static const char *const option_fields[][2] = {
    { "temperature", "temperature" }, { "top_k", "top_k" }, { "top_p", "top_p" }, { "min_p", "min_p" },
    { "seed", "seed" }, { "stop", "stop" }, { "num_predict", "max_tokens" },
    { "repeat_penalty", "repeat_penalty" }, { "repeat_last_n", "repeat_last_n" },
    { "presence_penalty", "presence_penalty" }, { "frequency_penalty", "frequency_penalty" },
    { NULL, NULL } };

int ollama_apply_options(cJSON *body, const models_entry *m, params_error *e) {
    cJSON *opts = cJSON_DetachItemFromObjectCaseSensitive(body, "options");
    int rc = 0;
    if (!opts || cJSON_IsNull(opts)) goto done;
    if (!cJSON_IsObject(opts)) {
        rc = params_fail(e, 400, "options", "invalid_type", "'options' must be an object");
        goto done;
    }
    for (cJSON *o = opts->child; o && rc == 0; o = o->next) {
        if (cJSON_IsNull(o)) continue;
        if (!strcmp(o->string, "num_ctx")) {
            /* A request runs within the model's context; a smaller num_ctx needs nothing more. */
            if (!cJSON_IsNumber(o) || o->valuedouble < 1)
                rc = params_fail(e, 400, "options.num_ctx", "invalid_value", "'options.num_ctx' must be a positive integer");
            else if (o->valuedouble > m->n_ctx)
                rc = params_fail(e, 400, "options.num_ctx", "invalid_value",
                                 "'options.num_ctx' is %.0f, above model '%s''s context of %d tokens (set it "
                                 "with n_ctx and kv_cache_mib in the server's settings)", o->valuedouble, m->id, m->n_ctx);
            continue;
        }
        const char *field = NULL;
        for (int i = 0; option_fields[i][0]; i++)
            if (!strcmp(o->string, option_fields[i][0])) field = option_fields[i][1];
        if (!field) {
            rc = params_fail(e, 400, "options", "unsupported_parameter",
                             "'options.%.100s' is not supported by genloop (supported: temperature, top_k, top_p, "
                             "min_p, seed, stop, num_predict, num_ctx, repeat_penalty, repeat_last_n, "
                             "presence_penalty, frequency_penalty)", o->string);
            break;
        }
        const cJSON *have = cJSON_GetObjectItemCaseSensitive(body, field);
        if (have && !cJSON_IsNull(have)) {
            rc = params_fail(e, 400, "options", "invalid_value", "give '%s' or 'options.%s', not both", field,
                             o->string);
            break;
        }
        /* num_predict -1 (no bound) and -2 (fill the context) are both the context's end here */
        if (!strcmp(o->string, "num_predict") && cJSON_IsNumber(o) && o->valuedouble < 0) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(body, field);
        cJSON_AddItemToObject(body, field, cJSON_Duplicate(o, 1));
    }
done:
    cJSON_Delete(opts);
    return rc;
}

/* ---- replies ---------------------------------------------------------------------- */

/* Ollama's errors: {"error": "message"}. */
static void reply_error(api_server *a, http_req *req, const params_error *e) {
    char code[16];
    snprintf(code, sizeof code, "%d", e->status);
    metrics_inc(a->m.errors_total, code, 1);
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "error", e->message);
    api_reply_json(req, e->status, body);
}

static void job_reply_error(job *j, const params_error *e) {
    reply_error(j->api, j->req, e);
}

/* RFC 3339 with microseconds, UTC: Ollama's created_at. */
static void now_rfc3339(char *out, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[24];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, n, "%.19s.%06dZ", day, (int)(ts.tv_nsec / 1000) % 1000000);
}

static void time_rfc3339(long t, char *out, size_t n) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- the translated jobs ---------------------------------------------------------------- */

typedef struct ol_state {
    bool generate;           /* /api/generate: "response" and "thinking" at the top */
    tr_output out;           /* stream: the tool calls as they come */
} ol_state;

static ol_state *state(job *j) { return j->ext; }

/* {"model":..,"created_at":.. without the closing brace. */
static void write_head(jbuf *b, job *j) {
    char when[48];
    now_rfc3339(when, sizeof when);
    jbuf_puts(b, "{\"model\":");
    jbuf_str(b, j->model->id, strlen(j->model->id));
    jbuf_printf(b, ",\"created_at\":\"%s\"", when);
}

/* A streamed line with a piece of the answer (thinking: of the thinking). */
static void line_piece(job *j, bool thinking, const char *p, size_t n) {
    jbuf *b = &j->chunk;
    write_head(b, j);
    if (state(j)->generate) {
        jbuf_puts(b, thinking ? ",\"response\":\"\",\"thinking\":" : ",\"response\":");
        jbuf_str(b, p, n);
    } else {
        jbuf_puts(b, ",\"message\":{\"role\":\"assistant\",\"content\":");
        if (thinking) jbuf_puts(b, "\"\",\"thinking\":");
        jbuf_str(b, p, n);
        jbuf_puts(b, "}");
    }
    jbuf_puts(b, ",\"done\":false}\n");
    job_send(j);
}

/* tool_calls as Ollama writes them: [{"function":{"name":..,"arguments":{..}}}] */
static cJSON *calls_json(const tr_call *calls, int n) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", calls[i].name ? calls[i].name : "");
        cJSON_AddItemToObject(f, "arguments", tr_parse_or_empty(calls[i].args.data, calls[i].args.len));
        cJSON_AddItemToArray(arr, c);
    }
    return arr;
}

static const char *done_reason(job *j) {
    const job_seq *s = j->n_seqs > 0 ? job_seq_at(j, 0) : NULL;
    return s && s->finish == GL_FINISH_LENGTH ? "length" : "stop";
}

/* The counts and durations (nanoseconds) every final object carries. */
static void add_stats(cJSON *o, job *j, const job_totals *t) {
    cJSON_AddBoolToObject(o, "done", true);
    cJSON_AddStringToObject(o, "done_reason", done_reason(j));
    cJSON_AddNumberToObject(o, "total_duration", floor((worker_now() - j->t_start) * 1e9));
    cJSON_AddNumberToObject(o, "load_duration", floor((j->t_model - j->t_start) * 1e9));
    cJSON_AddNumberToObject(o, "prompt_eval_count", t->prompt_tokens);
    cJSON_AddNumberToObject(o, "prompt_eval_duration", floor(t->prefill_time * 1e9));
    cJSON_AddNumberToObject(o, "eval_count", t->completion_tokens);
    cJSON_AddNumberToObject(o, "eval_duration", floor(t->decode_time * 1e9));
}

static cJSON *final_object(job *j, const char *content, size_t content_len, const char *thinking,
                           size_t thinking_len, cJSON *calls, const job_totals *t) {
    char when[48];
    now_rfc3339(when, sizeof when);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", j->model->id);
    cJSON_AddStringToObject(o, "created_at", when);
    char *c = strndup(content ? content : "", content ? content_len : 0);
    char *th = thinking ? strndup(thinking, thinking_len) : NULL;
    if (state(j)->generate) {
        cJSON_AddStringToObject(o, "response", c ? c : "");
        if (th) cJSON_AddStringToObject(o, "thinking", th);
        cJSON_Delete(calls);
    } else {
        cJSON *m = cJSON_AddObjectToObject(o, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", c ? c : "");
        if (th) cJSON_AddStringToObject(m, "thinking", th);
        if (calls) cJSON_AddItemToObject(m, "tool_calls", calls);
    }
    free(c);
    free(th);
    add_stats(o, j, t);
    return o;
}

static void put_json(jbuf *b, cJSON *o, bool line) {
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) {
        b->oom = true;
        return;
    }
    jbuf_puts(b, text);
    if (line) jbuf_puts(b, "\n");
    cJSON_free(text);
}

static void ol_stream_close(job *j, const job_totals *t) {
    jbuf *b = &j->chunk;
    if (j->unfinished_err.status) { /* cut short: Ollama's stream ends with an error line */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", j->unfinished_err.message);
        put_json(b, o, true);
    } else {
        put_json(b, final_object(j, "", 0, NULL, 0, NULL, t), true);
    }
    job_send(j);
}

static int ol_stream_open(job_seq *s) {
    (void)s;
    return 1;
}

static const job_ops *ops_of(int kind);

static void ol_free(job *j) {
    const job_ops *base = j->ops == ops_of(2) ? completions_job_ops() : chat_job_ops();
    if (base->free) base->free(j);
    ol_state *st = state(j);
    if (!st) return;
    tr_output_free(&st->out);
    free(st);
    j->ext = NULL;
}

/* chat-based: the answer, its thinking and tool calls through chat's stream driver */
static void out_reasoning(job_seq *s, const char *p, size_t n) { line_piece(s->job, true, p, n); }
static void out_content(job_seq *s, const char *p, size_t n) { line_piece(s->job, false, p, n); }

static void out_call(job_seq *s, int index, const char *id, const char *name) {
    (void)index;
    tr_output_call(&state(s->job)->out, id, name);
}

static void out_args(job_seq *s, int index, const char *p, size_t n) {
    ol_state *st = state(s->job);
    if (index == st->out.n_calls - 1) jbuf_raw(&st->out.calls[index].args, p, n);
}

/* Ollama streams a reply's tool calls in one message once they are complete. */
static void out_finish(job_seq *s, const char *reason, bool with_timings) {
    (void)reason;
    (void)with_timings;
    job *j = s->job;
    ol_state *st = state(j);
    if (st->out.n_calls == 0 || st->generate) return;
    jbuf *b = &j->chunk;
    cJSON *o = cJSON_CreateObject();
    char when[48];
    now_rfc3339(when, sizeof when);
    cJSON_AddStringToObject(o, "model", j->model->id);
    cJSON_AddStringToObject(o, "created_at", when);
    cJSON *m = cJSON_AddObjectToObject(o, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", "");
    cJSON_AddItemToObject(m, "tool_calls", calls_json(st->out.calls, st->out.n_calls));
    cJSON_AddBoolToObject(o, "done", false);
    put_json(b, o, true);
    job_send(j);
}

static const chat_stream_ops chat_writers = { out_reasoning, out_content, out_call, out_args, out_finish };

static void chat_flush(job_seq *s, bool with_timings) {
    chat_stream_drive(s, &chat_writers, with_timings);
}

static void chat_reply(job *j, const job_totals *t, jbuf *b) {
    chat_result r;
    chat_result_get(job_seq_at(j, 0), &r);
    cJSON *calls = NULL;
    if (r.n_calls > 0) {
        calls = cJSON_CreateArray();
        for (int i = 0; i < r.n_calls; i++) {
            cJSON *c = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(f, "name", r.calls[i].name ? r.calls[i].name : "");
            const char *args = r.calls[i].arguments ? r.calls[i].arguments : "";
            cJSON_AddItemToObject(f, "arguments", tr_parse_or_empty(args, strlen(args)));
            cJSON_AddItemToArray(calls, c);
        }
    }
    put_json(b, final_object(j, r.content, r.content_len, r.reasoning, r.reasoning_len, calls, t), false);
}

/* The model must show a thinking block for `think` (marked by the translation as reasoning_format "auto"). */
static int chat_parse_checked(job *j, const cJSON *body, params_error *e) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "reasoning_format");
    if (cJSON_IsString(rf) && !j->model->reasoning.open[0])
        return params_fail(e, 400, "think", "invalid_value", "model '%s' does not support thinking (its chat "
                           "template shows no thinking block)", j->model->id);
    return chat_parse(j, body, e);
}

static int ol_chat_parse(job *j, const cJSON *body, params_error *e) {
    ol_state *st = j->ext = calloc(1, sizeof *st);
    if (!st) return params_fail(e, 500, NULL, NULL, "out of memory");
    st->generate = false;
    return chat_parse_checked(j, body, e);
}

static int ol_gen_chat_parse(job *j, const cJSON *body, params_error *e) {
    ol_state *st = j->ext = calloc(1, sizeof *st);
    if (!st) return params_fail(e, 500, NULL, NULL, "out of memory");
    st->generate = true;
    return chat_parse_checked(j, body, e);
}

/* raw (completions-based): the text as it comes */
static void raw_flush(job_seq *s, bool with_timings) {
    (void)with_timings;
    if (s->text.len > 0) line_piece(s->job, false, s->text.data, s->text.len);
    jbuf_clear(&s->text);
}

static void raw_reply(job *j, const job_totals *t, jbuf *b) {
    job_seq *s = job_seq_at(j, 0);
    put_json(b, final_object(j, s->text.data, s->text.len, NULL, 0, NULL, t), false);
}

/* Without num_predict, a generation may run to the end of the context, as Ollama's does. */
static int ol_raw_parse(job *j, const cJSON *body, params_error *e) {
    ol_state *st = j->ext = calloc(1, sizeof *st);
    if (!st) return params_fail(e, 500, NULL, NULL, "out of memory");
    st->generate = true;
    cJSON *copy = cJSON_Duplicate(body, 1);
    if (!copy) return params_fail(e, 500, NULL, NULL, "out of memory");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(copy, "prompt");
    if (!cJSON_GetObjectItemCaseSensitive(copy, "max_tokens") && cJSON_IsString(prompt)) {
        int32_t *ids = NULL;
        gl_error err = {{0}};
        int n = gl_tokenize(j->model->model, prompt->valuestring, strlen(prompt->valuestring),
                            GL_TOKENIZE_ADD_SPECIAL | GL_TOKENIZE_PARSE_SPECIAL, &ids, &err);
        free(ids);
        int room = n >= 0 ? j->model->n_ctx - n : 1;
        if (room > j->model->limits.max_tokens) room = j->model->limits.max_tokens;
        cJSON_AddNumberToObject(copy, "max_tokens", room > 1 ? room : 1);
    }
    int rc = completions_job_ops()->parse(j, copy, e);
    cJSON_Delete(copy);
    return rc;
}

static const job_ops *ops_of(int kind) {
    static job_ops ops[3];
    if (!ops[0].parse) {
        for (int k = 0; k < 3; k++) {
            ops[k] = k == 2 ? *completions_job_ops() : *chat_job_ops();
            ops[k].ollama_options = true;
            ops[k].stream_type = "application/x-ndjson";
            ops[k].reply_error = job_reply_error;
            ops[k].stream_open = ol_stream_open;
            ops[k].stream_close = ol_stream_close;
            ops[k].free = ol_free;
        }
        ops[0].parse = ol_chat_parse;
        ops[1].parse = ol_gen_chat_parse;
        ops[2].parse = ol_raw_parse;
        ops[0].stream_flush = ops[1].stream_flush = chat_flush;
        ops[0].reply = ops[1].reply = chat_reply;
        ops[2].stream_flush = raw_flush;
        ops[2].reply = raw_reply;
    }
    return &ops[kind];
}

/* ---- translating the requests ---------------------------------------------------------- */

static const cJSON *given(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int check_keys(const cJSON *body, const char *const *keys, params_error *e) {
    for (const cJSON *f = body->child; f; f = f->next) {
        int known = 0;
        for (int i = 0; keys[i]; i++) known |= !strcmp(f->string, keys[i]);
        if (!known)
            return params_fail(e, 400, f->string, "unsupported_parameter", "'%.100s' is not a field genloop's "
                               "Ollama API knows", f->string);
    }
    return 0;
}

static int no_images(const cJSON *v, const char *param, params_error *e) {
    if (!v || (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0)) return 0;
    return params_fail(e, 400, param, "unsupported_parameter",
                       "'%s': images are not supported (genloop serves text-only models)", param);
}

/* format: "json" or a JSON Schema, as chat's response_format. */
static int put_format(const cJSON *format, cJSON *out, params_error *e) {
    if (!format || (cJSON_IsString(format) && !format->valuestring[0])) return 0;
    cJSON *rf = cJSON_CreateObject();
    cJSON_AddItemToObject(out, "response_format", rf);
    if (cJSON_IsString(format) && !strcmp(format->valuestring, "json")) {
        cJSON_AddStringToObject(rf, "type", "json_object");
        return 0;
    }
    if (!cJSON_IsObject(format))
        return params_fail(e, 400, "format", "invalid_value", "'format' must be \"json\" or a JSON Schema object");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", "format");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(format, 1));
    return 0;
}

/* think: true separates the thinking (the model must have a thinking
 * block), false turns it off, "high"/"medium"/"low" is the effort. */
static int put_think(const cJSON *think, cJSON *out, params_error *e) {
    if (!think) return 0;
    if (cJSON_IsFalse(think)) {
        cJSON_AddStringToObject(out, "reasoning_effort", "none");
        return 0;
    }
    if (cJSON_IsString(think) && (!strcmp(think->valuestring, "high") || !strcmp(think->valuestring, "medium") ||
                                  !strcmp(think->valuestring, "low")))
        cJSON_AddStringToObject(out, "reasoning_effort", think->valuestring);
    else if (!cJSON_IsTrue(think))
        return params_fail(e, 400, "think", "invalid_value", "'think' must be true, false, \"high\", \"medium\" or \"low\"");
    cJSON_AddStringToObject(out, "reasoning_format", "auto");
    return 0;
}

/* What chat and generate share: model, stream (on unless false), options, keep_alive. */
static int put_common(const cJSON *body, cJSON *out, params_error *e) {
    const cJSON *model = given(body, "model");
    if (!cJSON_IsString(model) || !model->valuestring[0])
        return params_fail(e, 400, "model", "missing_required_parameter", "'model' is required");
    cJSON_AddStringToObject(out, "model", model->valuestring);
    const cJSON *stream = given(body, "stream");
    if (stream && !cJSON_IsBool(stream)) return params_fail(e, 400, "stream", "invalid_type", "'stream' must be a boolean");
    cJSON_AddBoolToObject(out, "stream", !stream || cJSON_IsTrue(stream));
    const char *copied[] = { "options", "keep_alive" };
    for (int i = 0; i < 2; i++)
        if (given(body, copied[i])) cJSON_AddItemToObject(out, copied[i], cJSON_Duplicate(given(body, copied[i]), 1));
    return 0;
}

/* An assistant's tool_calls as chat's: ids call_K (K counting over the
 * conversation), arguments as JSON text. */
static int put_calls(const cJSON *calls, int i, int *n_ids, cJSON *msg, params_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!cJSON_IsArray(calls)) return params_fail(e, 400, param, "invalid_type", "'%s' must be an array", param);
    cJSON *out = cJSON_AddArrayToObject(msg, "tool_calls");
    for (const cJSON *c = calls->child; c; c = c->next) {
        const cJSON *f = given(c, "function");
        const cJSON *name = given(f, "name"), *args = given(f, "arguments");
        if (!cJSON_IsString(name))
            return params_fail(e, 400, param, "invalid_value", "'%s' needs function.name for each call", param);
        cJSON *oc = cJSON_CreateObject();
        char id[32];
        snprintf(id, sizeof id, "call_%d", (*n_ids)++);
        cJSON_AddStringToObject(oc, "id", id);
        cJSON_AddStringToObject(oc, "type", "function");
        cJSON *of = cJSON_AddObjectToObject(oc, "function");
        cJSON_AddStringToObject(of, "name", name->valuestring);
        char *text = cJSON_IsString(args) ? strdup(args->valuestring)
                   : args ? cJSON_PrintUnformatted(args) : strdup("{}");
        cJSON_AddStringToObject(of, "arguments", text ? text : "{}");
        free(text);
        cJSON_AddItemToArray(out, oc);
    }
    return 0;
}

static int put_messages(const cJSON *msgs, cJSON *out, params_error *e) {
    static const char *const keys[] = { "role", "content", "images", "thinking", "tool_calls", "tool_name", NULL };
    cJSON *list = cJSON_AddArrayToObject(out, "messages");
    int i = 0, n_ids = 0;
    char param[64];
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return params_fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
        for (const cJSON *f = m->child; f; f = f->next) {
            int known = 0;
            for (int k = 0; keys[k]; k++) known |= !strcmp(f->string, keys[k]);
            if (!known) {
                snprintf(param, sizeof param, "messages[%d].%.40s", i, f->string);
                return params_fail(e, 400, param, "unsupported_parameter", "'%s' is not supported", param);
            }
        }
        snprintf(param, sizeof param, "messages[%d].images", i);
        if (no_images(given(m, "images"), param, e)) return -1;
        cJSON *om = cJSON_CreateObject();
        cJSON_AddItemToArray(list, om);
        const cJSON *role = given(m, "role"), *content = given(m, "content"), *thinking = given(m, "thinking");
        if (role) cJSON_AddItemToObject(om, "role", cJSON_Duplicate(role, 1));
        cJSON_AddItemToObject(om, "content", content ? cJSON_Duplicate(content, 1) : cJSON_CreateString(""));
        if (thinking) cJSON_AddItemToObject(om, "reasoning_content", cJSON_Duplicate(thinking, 1));
        if (given(m, "tool_calls") && put_calls(given(m, "tool_calls"), i, &n_ids, om, e)) return -1;
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "tool")) {
            /* Ollama names the tool; chat's tool results answer a call id: the latest one. */
            char id[32];
            snprintf(id, sizeof id, "call_%d", n_ids > 0 ? n_ids - 1 : 0);
            cJSON_AddStringToObject(om, "tool_call_id", id);
            if (cJSON_IsString(given(m, "tool_name")))
                cJSON_AddStringToObject(om, "name", given(m, "tool_name")->valuestring);
        }
    }
    return 0;
}

/* An empty prompt or conversation only loads the model (or, with
 * keep_alive 0, unloads it): done_reason "load" or "unload". */
static void reply_loaded(http_req *req, api_server *a, models_entry *m, const cJSON *body) {
    (void)a;
    char when[48];
    now_rfc3339(when, sizeof when);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", m->id);
    cJSON_AddStringToObject(o, "created_at", when);
    if (cJSON_GetObjectItemCaseSensitive(body, "messages")) {
        cJSON *msg = cJSON_AddObjectToObject(o, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddStringToObject(msg, "content", "");
    } else {
        cJSON_AddStringToObject(o, "response", "");
    }
    const cJSON *ka = cJSON_GetObjectItemCaseSensitive(body, "keep_alive");
    bool unload = cJSON_IsNumber(ka) && ka->valuedouble == 0;
    cJSON_AddBoolToObject(o, "done", true);
    cJSON_AddStringToObject(o, "done_reason", unload ? "unload" : "load");
    api_reply_json(req, 200, o);
}

/* Checks the model and keep_alive up front, so the errors come in Ollama's shape. */
static models_entry *find_model(api_server *a, const cJSON *body, double *keep_alive, params_error *e) {
    *keep_alive = MODELS_KEEP_DEFAULT;
    const cJSON *ka = given(body, "keep_alive");
    if (ka && models_parse_keep_alive(ka, "keep_alive", keep_alive, e)) return NULL;
    const cJSON *model = given(body, "model");
    if (!cJSON_IsString(model) || !model->valuestring[0]) {
        params_fail(e, 400, "model", "missing_required_parameter", "'model' is required");
        return NULL;
    }
    models_entry *m = models_find(a->models, model->valuestring);
    if (!m)
        params_fail(e, 404, "model", "model_not_found", "model '%.200s' not found (GET /api/tags lists them)",
                    model->valuestring);
    return m;
}

static cJSON *parse_body(api_server *a, http_req *req) {
    if (api_reply_if_loading(a, req)) return NULL;
    return api_parse_body(a, req);
}

void ollama_handle_chat(http_req *req, void *ctx) {
    static const char *const keys[] = { "model", "messages", "tools", "format", "options", "stream", "keep_alive",
                                        "think", NULL };
    api_server *a = ctx;
    cJSON *body = parse_body(a, req);
    if (!body) return;
    params_error e;
    double keep_alive;
    cJSON *chat = cJSON_CreateObject();
    const cJSON *msgs = given(body, "messages");
    models_entry *m = NULL;
    int rc = check_keys(body, keys, &e);
    if (rc == 0) rc = (m = find_model(a, body, &keep_alive, &e)) ? 0 : -1;
    if (rc == 0 && msgs && !cJSON_IsArray(msgs))
        rc = params_fail(&e, 400, "messages", "invalid_type", "'messages' must be an array");
    if (rc == 0 && (!msgs || cJSON_GetArraySize(msgs) == 0)) {
        cJSON_Delete(chat);
        cJSON *load = cJSON_CreateObject();
        cJSON_AddArrayToObject(load, "messages");
        if (given(body, "keep_alive")) cJSON_AddItemToObject(load, "keep_alive", cJSON_Duplicate(given(body, "keep_alive"), 1));
        cJSON_AddStringToObject(load, "model", m->id);
        cJSON_Delete(body);
        api_with_model(a, req, load, keep_alive, reply_loaded);
        return;
    }
    if (rc == 0) rc = put_common(body, chat, &e);
    if (rc == 0) rc = put_messages(msgs, chat, &e);
    if (rc == 0 && given(body, "tools")) cJSON_AddItemToObject(chat, "tools", cJSON_Duplicate(given(body, "tools"), 1));
    if (rc == 0) rc = put_format(given(body, "format"), chat, &e);
    if (rc == 0) rc = put_think(given(body, "think"), chat, &e);
    cJSON_Delete(body);
    if (rc) {
        cJSON_Delete(chat);
        reply_error(a, req, &e);
        return;
    }
    job_handle_body(req, a, ops_of(0), chat);
}

void ollama_handle_generate(http_req *req, void *ctx) {
    static const char *const keys[] = { "model", "prompt", "suffix", "system", "template", "context", "stream",
                                        "raw", "format", "options", "keep_alive", "images", "think", NULL };
    api_server *a = ctx;
    cJSON *body = parse_body(a, req);
    if (!body) return;
    params_error e;
    double keep_alive;
    cJSON *out = cJSON_CreateObject();
    const cJSON *prompt = given(body, "prompt"), *system = given(body, "system"), *raw = given(body, "raw");
    models_entry *m = NULL;
    int rc = check_keys(body, keys, &e);
    if (rc == 0) rc = (m = find_model(a, body, &keep_alive, &e)) ? 0 : -1;
    if (rc == 0 && prompt && !cJSON_IsString(prompt))
        rc = params_fail(&e, 400, "prompt", "invalid_type", "'prompt' must be a string");
    if (rc == 0 && system && !cJSON_IsString(system))
        rc = params_fail(&e, 400, "system", "invalid_type", "'system' must be a string");
    if (rc == 0 && raw && !cJSON_IsBool(raw)) rc = params_fail(&e, 400, "raw", "invalid_type", "'raw' must be a boolean");
    if (rc == 0 && cJSON_IsString(given(body, "suffix")) && given(body, "suffix")->valuestring[0])
        rc = params_fail(&e, 400, "suffix", "unsupported_parameter", "'suffix' (fill in the middle) is not supported");
    if (rc == 0 && cJSON_IsString(given(body, "template")) && given(body, "template")->valuestring[0])
        rc = params_fail(&e, 400, "template", "unsupported_parameter",
                         "'template' is not supported: the model's own chat template is used (or none with raw)");
    if (rc == 0 && given(body, "context") && !(cJSON_IsArray(given(body, "context")) &&
                                              cJSON_GetArraySize(given(body, "context")) == 0))
        rc = params_fail(&e, 400, "context", "unsupported_parameter",
                         "'context' (token ids of an earlier reply) is not supported; use /api/chat for a conversation");
    if (rc == 0) rc = no_images(given(body, "images"), "images", &e);
    if (rc == 0 && (!prompt || !prompt->valuestring[0])) {
        cJSON_Delete(out);
        cJSON *load = cJSON_CreateObject();
        if (given(body, "keep_alive")) cJSON_AddItemToObject(load, "keep_alive", cJSON_Duplicate(given(body, "keep_alive"), 1));
        cJSON_AddStringToObject(load, "model", m->id);
        cJSON_Delete(body);
        api_with_model(a, req, load, keep_alive, reply_loaded);
        return;
    }
    /* raw, or a model without a chat template (and no --chat-template): the prompt as it is (completions) */
    bool as_text = rc == 0 && (cJSON_IsTrue(raw) || (!m->summary.has_chat_template && !a->cfg->chat_template[0]));
    if (rc == 0) rc = put_common(body, out, &e);
    if (rc == 0) rc = put_format(given(body, "format"), out, &e);
    if (rc == 0 && as_text) {
        if (given(body, "think"))
            rc = params_fail(&e, 400, "think", "invalid_value", "'think' needs the model's chat template (not raw)");
        else if (system && cJSON_IsTrue(raw))
            rc = params_fail(&e, 400, "system", "invalid_value", "'system' is not used with raw: put it in the prompt");
        else if (system)
            rc = params_fail(&e, 400, "system", "invalid_value", "model '%s' has no chat template to put 'system' "
                             "in; put it in the prompt", m->id);
        else
            cJSON_AddStringToObject(out, "prompt", prompt->valuestring);
    } else if (rc == 0) {
        rc = put_think(given(body, "think"), out, &e);
        cJSON *msgs = cJSON_AddArrayToObject(out, "messages");
        if (system) {
            cJSON *sm = cJSON_CreateObject();
            cJSON_AddStringToObject(sm, "role", "system");
            cJSON_AddStringToObject(sm, "content", system->valuestring);
            cJSON_AddItemToArray(msgs, sm);
        }
        cJSON *um = cJSON_CreateObject();
        cJSON_AddStringToObject(um, "role", "user");
        cJSON_AddStringToObject(um, "content", prompt->valuestring);
        cJSON_AddItemToArray(msgs, um);
    }
    cJSON_Delete(body);
    if (rc) {
        cJSON_Delete(out);
        reply_error(a, req, &e);
        return;
    }
    job_handle_body(req, a, ops_of(as_text ? 2 : 1), out);
}

/* ---- the model list ---------------------------------------------------------------------- */

/* "135M", "1.5B": Ollama's parameter_size. */
static void size_label(uint64_t n, char *out, size_t len) {
    if (n >= 1000000000ull) snprintf(out, len, "%.1fB", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(out, len, "%.0fM", (double)n / 1e6);
    else snprintf(out, len, "%.0fK", (double)n / 1e3);
}

static cJSON *details(const models_entry *m) {
    cJSON *d = cJSON_CreateObject();
    char size[32];
    size_label(m->summary.n_params, size, sizeof size);
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "gguf");
    cJSON_AddStringToObject(d, "family", m->summary.arch);
    cJSON *fam = cJSON_AddArrayToObject(d, "families");
    cJSON_AddItemToArray(fam, cJSON_CreateString(m->summary.arch));
    cJSON_AddStringToObject(d, "parameter_size", size);
    cJSON_AddStringToObject(d, "quantization_level", m->summary.file_type);
    return d;
}

/* One model as /api/tags and /api/ps list it. */
static cJSON *model_item(const models_entry *m) {
    char when[48];
    time_rfc3339(m->mtime, when, sizeof when);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->id);
    cJSON_AddStringToObject(o, "model", m->id);
    cJSON_AddStringToObject(o, "modified_at", when);
    cJSON_AddNumberToObject(o, "size", (double)(m->bytes - ((uint64_t)m->params.kv_cache_mib << 20)));
    cJSON_AddItemToObject(o, "details", details(m));
    return o;
}

void ollama_handle_tags(http_req *req, void *ctx) {
    api_server *a = ctx;
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "models");
    for (int i = 0; i < models_count(a->models); i++) cJSON_AddItemToArray(list, model_item(models_at(a->models, i)));
    api_reply_json(req, 200, root);
}

void ollama_handle_ps(http_req *req, void *ctx) {
    api_server *a = ctx;
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "models");
    double now = worker_now();
    for (int i = 0; i < models_count(a->models); i++) {
        const models_entry *m = models_at(a->models, i);
        if (m->state != MODELS_LOADED) continue;
        cJSON *o = model_item(m);
        cJSON_ReplaceItemInObject(o, "size", cJSON_CreateNumber((double)m->bytes)); /* in memory: with the KV pool */
        /* when it will be unloaded if nothing uses it meanwhile */
        char when[48] = "9999-12-31T23:59:59Z";
        if (!m->pinned && m->keep_alive >= 0) {
            double left = m->n_users > 0 ? m->keep_alive : m->last_used + m->keep_alive - now;
            time_rfc3339((long)time(NULL) + (long)ceil(left > 0 ? left : 0), when, sizeof when);
        }
        cJSON_AddStringToObject(o, "expires_at", when);
        cJSON_AddNumberToObject(o, "size_vram", 0);
        cJSON_AddNumberToObject(o, "context_length", m->n_ctx);
        cJSON_AddItemToArray(list, o);
    }
    api_reply_json(req, 200, root);
}

void ollama_handle_show(http_req *req, void *ctx) {
    api_server *a = ctx;
    cJSON *body = api_parse_body(a, req);
    if (!body) return;
    params_error e;
    /* older clients send "name" */
    const cJSON *name = given(body, "model") ? given(body, "model") : given(body, "name");
    models_entry *m = cJSON_IsString(name) ? models_find(a->models, name->valuestring) : NULL;
    if (!m) {
        if (cJSON_IsString(name))
            params_fail(&e, 404, "model", "model_not_found", "model '%.200s' not found", name->valuestring);
        else
            params_fail(&e, 400, "model", "missing_required_parameter", "'model' is required");
        cJSON_Delete(body);
        reply_error(a, req, &e);
        return;
    }
    cJSON_Delete(body);
    char when[48], key[96];
    time_rfc3339(m->mtime, when, sizeof when);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "license", "");
    cJSON_AddStringToObject(o, "modelfile", "");
    cJSON_AddStringToObject(o, "parameters", "");
    const gl_model_info *info = m->model ? gl_model_get_info(m->model) : NULL;
    /* the template's source is read with the model: there once it is loaded */
    cJSON_AddStringToObject(o, "template", info && info->chat_template ? info->chat_template : "");
    cJSON_AddItemToObject(o, "details", details(m));
    cJSON *mi = cJSON_AddObjectToObject(o, "model_info");
    cJSON_AddStringToObject(mi, "general.architecture", m->summary.arch);
    if (m->general_name[0]) cJSON_AddStringToObject(mi, "general.name", m->general_name);
    cJSON_AddNumberToObject(mi, "general.parameter_count", (double)m->summary.n_params);
    snprintf(key, sizeof key, "%s.context_length", m->summary.arch);
    cJSON_AddNumberToObject(mi, key, m->n_ctx_train);
    cJSON *caps = cJSON_AddArrayToObject(o, "capabilities");
    cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
    if (m->summary.has_chat_template) cJSON_AddItemToArray(caps, cJSON_CreateString("tools"));
    if (m->reasoning.open[0]) cJSON_AddItemToArray(caps, cJSON_CreateString("thinking"));
    cJSON_AddStringToObject(o, "modified_at", when);
    api_reply_json(req, 200, o);
}

void ollama_handle_version(http_req *req, void *ctx) {
    (void)ctx;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", GL_VERSION);
    api_reply_json(req, 200, o);
}

void ollama_handle_unsupported(http_req *req, void *ctx) {
    params_error e;
    params_fail(&e, 501, NULL, "unsupported_endpoint",
                "%.100s %.200s is not supported by genloop: it serves generation (/api/chat, /api/generate), "
                "not embeddings or model management", http_req_method(req), http_req_path(req));
    reply_error(ctx, req, &e);
}
