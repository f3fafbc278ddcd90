/* api_chat.c -- a chat request renders its messages with the chat template
 * into one prompt, then runs as a job (job.h) of n seqs, one per choice.
 * What is particular to this endpoint: the messages and the template (its
 * end-of-turn texts join the stop strings), max_completion_tokens, the
 * logprobs.content shape, and the chat.completion JSON with streamed deltas
 * (a role chunk first, content chunks, then an empty delta with the
 * finish_reason). */
#include "api_chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genloop_chat.h"
#include "job.h"
#include "structured.h"
#include "tools.h"

#define CHAT_MAX_STOP (PARAMS_MAX_STOP + 4) /* the request's, then the template's */
#define CHAT_MAX_TOP_LOGPROBS 20

typedef struct chat_seq {
    job_seq base;            /* first */
    jbuf lp;                 /* logprobs.content entries not yet written */
    int n_lp;
    int reply_kind;          /* REPLY_*: decided once, streamed text is cleared as it goes */
    tool_call *found;        /* REPLY_HELD, once done: the calls recognised in it (NULL: it is text) */
    int n_found;
    tools_reader calls;      /* stream of a tool-call reply: how far its text was sent */
    jbuf args;               /* stream: argument bytes read, not yet sent */
    int args_index;          /* the call they belong to */
    reasoning_split split;   /* base.split points here when the thinking is separated */
    jbuf delta;              /* stream: scratch for one delta object */
    const chat_stream_ops *out; /* stream: the writer chat_stream_drive feeds */
} chat_seq;

typedef struct chat_job {
    job base;                /* first */
    const char *stops[CHAT_MAX_STOP]; /* gen.stop plus the template's end-of-turn texts */
    int n_stops;
    bool logprobs;
    int top_logprobs;
    int32_t *prompt;
    int n_prompt;
    chat_tools tools;
    bool tools_grammar;      /* the reply is constrained by the tools' grammar (not the request's own) */
    reasoning_opts reasoning;
    gl_reasoning engine_reasoning; /* what the engine is told, when has_reasoning */
    bool has_reasoning;
    const reasoning_markers *split; /* the markers the reply is split with, or NULL */
} chat_job;

/* ---- the template, built at model load ------------------------------------------ */

void chat_setup(models_entry *a, const config *cfg) {
    const gl_model_info *info = gl_model_get_info(a->model);
    const char *name = cfg->chat_template[0] ? cfg->chat_template : NULL;
    const char *bos = info->bos_id >= 0 ? gl_token_text(a->model, info->bos_id) : "";
    const char *eos = info->eos_id >= 0 ? gl_token_text(a->model, info->eos_id) : "";
    gl_error err = {{0}};
    a->chat_template = gl_chat_template_create(info->chat_template, name, bos, eos, &err);
    if (!a->chat_template) {
        snprintf(a->chat_template_error, sizeof(a->chat_template_error), "%s", err.message);
        fprintf(stderr, "genloop: WARNING: the chat template cannot be used: %s; "
                        "/v1/chat/completions will answer with an error "
                        "(pick a built-in format with --chat-template NAME)\n", err.message);
        return;
    }
    const gl_chat_template *t = a->chat_template;
    reasoning_find_markers(a->model, info->chat_template, t, &a->reasoning);
    if (a->reasoning.open[0])
        fprintf(stderr, "genloop: thinking block: %s ... %s (reasoning_format %s)\n", a->reasoning.open,
                a->reasoning.close, cfg->reasoning_format);
    /* Its own tool section is used only where it writes the calls as the grammar does. */
    a->chat_tools_native = gl_chat_template_has_tools(t) && gl_chat_template_is_model_source(t) &&
                           info->chat_template && strstr(info->chat_template, "<tool_call>");
    const char *origin = gl_chat_template_is_model_source(t) ? "the model's own template"
                       : name ? "built-in, as asked by --chat-template"
                       : info->chat_template ? "built-in, standing in for the model's template that cannot be parsed"
                                             : "built-in; the model has no template";
    fprintf(stderr, "genloop: chat template: %s (%s)\n", gl_chat_template_name(t), origin);
}

void chat_teardown(models_entry *a) {
    gl_chat_template_free(a->chat_template);
    a->chat_template = NULL;
}

static void chat_free(job *j) {
    chat_job *cj = (chat_job *)j;
    for (int i = 0; j->seqs && i < j->n_seqs; i++) {
        jbuf_free(&((chat_seq *)job_seq_at(j, i))->lp);
        jbuf_free(&((chat_seq *)job_seq_at(j, i))->args);
        tools_calls_free(((chat_seq *)job_seq_at(j, i))->found, ((chat_seq *)job_seq_at(j, i))->n_found);
        jbuf_free(&((chat_seq *)job_seq_at(j, i))->delta);
    }
    free(cj->prompt);
    tools_free(&cj->tools);
}

/* ---- logprobs, in the chat shape ------------------------------------------------ */

/* {"token": text, "logprob": x, "bytes": [...]} without the closing brace. */
static void lp_token(jbuf *b, const gl_model *model, int32_t token, float logprob) {
    size_t len = 0;
    const char *piece = gl_token_piece(model, token, &len);
    if (!piece) len = 0;
    jbuf_puts(b, "{\"token\":");
    api_write_piece(model, b, token);
    jbuf_puts(b, ",\"logprob\":");
    jbuf_num(b, logprob);
    jbuf_puts(b, ",\"bytes\":[");
    for (size_t i = 0; i < len; i++) jbuf_printf(b, "%s%u", i ? "," : "", (unsigned char)piece[i]);
    jbuf_puts(b, "]");
}

static void chat_on_token(job_seq *js, const gl_event *ev) {
    chat_seq *s = (chat_seq *)js;
    const chat_job *cj = (const chat_job *)js->job;
    if (!cj->logprobs) return;
    const gl_model *model = cj->base.model->model;
    jbuf *b = &s->lp;
    if (s->n_lp++) jbuf_puts(b, ",");
    lp_token(b, model, ev->token, ev->logprob);
    jbuf_puts(b, ",\"top_logprobs\":[");
    int n = ev->n_top < cj->top_logprobs ? ev->n_top : cj->top_logprobs;
    for (int i = 0; i < n; i++) {
        if (i) jbuf_puts(b, ",");
        lp_token(b, model, ev->top[i].token, ev->top[i].logprob);
        jbuf_puts(b, "}");
    }
    jbuf_puts(b, "]}");
}

/* The pending entries as a logprobs object (or null), then cleared. */
static void lp_write(jbuf *out, chat_seq *s) {
    if (!((const chat_job *)s->base.job)->logprobs) { jbuf_puts(out, "null"); return; }
    jbuf_puts(out, "{\"content\":[");
    jbuf_raw(out, s->lp.data ? s->lp.data : "", s->lp.len);
    jbuf_puts(out, "]}");
    jbuf_clear(&s->lp);
    s->n_lp = 0;
}

/* ---- response pieces ------------------------------------------------------------ */

/* With tools, what a reply is. Its text is held back until that is known:
 * LIVE is the tools grammar's own envelope (it starts with '<'), streamed
 * call by call as it is generated; HELD starts like a call in one of the
 * forms models write (tools_recognize), is kept whole and read once done:
 * calls, or text after all. */
enum { REPLY_UNKNOWN, REPLY_TEXT, REPLY_LIVE, REPLY_HELD };

static int reply_kind(const job_seq *s) {
    chat_seq *cs = (chat_seq *)s;
    const chat_job *cj = (const chat_job *)s->job;
    if (!cj->tools.active) return REPLY_TEXT;
    if (cs->reply_kind == REPLY_UNKNOWN && s->text.len > 0) {
        int maybe = tools_maybe_call(s->text.data, s->text.len);
        if (cj->tools_grammar && tools_is_call_text(s->text.data, s->text.len)) cs->reply_kind = REPLY_LIVE;
        else if (maybe >= 0) cs->reply_kind = maybe ? REPLY_HELD : REPLY_TEXT;
    }
    if (cs->reply_kind == REPLY_UNKNOWN && s->state == JOB_SEQ_DONE) cs->reply_kind = REPLY_HELD;
    if (cs->reply_kind == REPLY_HELD && s->state == JOB_SEQ_DONE && !cs->found) {
        cs->found = tools_recognize(s->text.data ? s->text.data : "", s->text.len, &cj->tools, &cs->n_found);
        if (!cs->found) cs->reply_kind = REPLY_TEXT;
    }
    return cs->reply_kind;
}

/* A seq whose reply is tool calls (so far, for LIVE). */
static bool is_tool_reply(const job_seq *s) {
    int kind = reply_kind(s);
    return kind == REPLY_LIVE || (kind == REPLY_HELD && ((const chat_seq *)s)->found);
}

static const char *finish_reason(const job_seq *s) {
    if (s->finish == GL_FINISH_STOP && is_tool_reply(s)) return "tool_calls";
    if (s->finish == GL_FINISH_STOP || s->finish == GL_FINISH_LENGTH) return gl_finish_reason_str(s->finish);
    return NULL;
}

void chat_call_id(char *out, size_t size, const job_seq *s, int k) {
    snprintf(out, size, "call_%s_%d_%d", s->job->id, s->index, k);
}

static void chat_write_finish(jbuf *b, const job_seq *s, int final) {
    if (final && s->finish == GL_FINISH_STOP && is_tool_reply(s)) jbuf_puts(b, ",\"finish_reason\":\"tool_calls\"");
    else job_write_finish(b, s, final);
}

static void write_call_head(jbuf *b, const job_seq *s, int k, const char *name, const char *args) {
    char id[96];
    chat_call_id(id, sizeof id, s, k);
    jbuf_printf(b, "{\"index\":%d,\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":", k, id);
    jbuf_str(b, name, strlen(name));
    jbuf_puts(b, ",\"arguments\":");
    jbuf_str(b, args, strlen(args));
    jbuf_puts(b, "}}");
}

/* A finished tool reply's complete calls, kept on the seq: recognised in
 * a held reply, read from the text of one the tools' grammar shaped. */
static const tool_call *reply_calls(job_seq *s, int *n) {
    chat_seq *cs = (chat_seq *)s;
    if (!cs->found) cs->found = tools_extract(s->text.data, s->text.len, &cs->n_found);
    *n = cs->n_found;
    return cs->found;
}

/* The tool_calls array of a tool reply: its complete calls. */
static void write_tool_calls(jbuf *b, job_seq *s) {
    int n;
    const tool_call *calls = reply_calls(s, &n);
    jbuf_puts(b, "[");
    for (int k = 0; k < n; k++) {
        if (k) jbuf_puts(b, ",");
        write_call_head(b, s, k, calls[k].name, calls[k].arguments);
    }
    jbuf_puts(b, "]");
}

/* One chat.completion.chunk with one choice: delta (a JSON object text),
 * the pending logprobs when with_lp, the finish_reason when final. */
static void send_delta(job_seq *s, const char *delta, bool with_lp, bool final, bool with_timings) {
    jbuf *b = job_chunk_begin(s->job);
    jbuf_printf(b, "{\"index\":%d,\"delta\":%s,\"logprobs\":", s->index, delta);
    if (with_lp) lp_write(b, (chat_seq *)s);
    else jbuf_puts(b, "null");
    chat_write_finish(b, s, final);
    jbuf_puts(b, "}");
    job_chunk_end(s->job, with_timings);
}

/* A delta {"KEY": "text"} (content) or {"tool_calls": [...]} through the seq's scratch. */
static void send_text_delta(job_seq *s, const char *key, const char *p, size_t n) {
    jbuf *d = &((chat_seq *)s)->delta;
    jbuf_clear(d);
    jbuf_printf(d, "{\"%s\":", key);
    jbuf_str(d, p, n);
    jbuf_puts(d, "}");
    if (!d->oom) send_delta(s, d->data, true, false, false);
}

static void chat_out_content(job_seq *s, const char *p, size_t n) {
    send_text_delta(s, "content", p, n);
}

/* A streamed tool-call reply goes out as OpenAI streams it: per call, a
 * delta with index, id, type, name and empty arguments, then deltas with
 * the index and pieces of the arguments as they are generated. */
static void chat_out_call(job_seq *s, int index, const char *id, const char *name) {
    (void)id; /* write_call_head spells the same id */
    jbuf *d = &((chat_seq *)s)->delta;
    jbuf_clear(d);
    jbuf_puts(d, "{\"tool_calls\":[");
    write_call_head(d, s, index, name, "");
    jbuf_puts(d, "]}");
    if (!d->oom) send_delta(s, d->data, false, false, false);
}

static void chat_out_args(job_seq *s, int index, const char *p, size_t n) {
    jbuf *d = &((chat_seq *)s)->delta;
    jbuf_clear(d);
    jbuf_printf(d, "{\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", index);
    jbuf_str(d, p, n);
    jbuf_puts(d, "}}]}");
    if (!d->oom) send_delta(s, d->data, false, false, false);
}

/* The closing chunk: empty delta, finish_reason; logprobs still pending ride on it. */
static void chat_out_finish(job_seq *s, const char *reason, bool with_timings) {
    (void)reason; /* chat_write_finish writes it */
    send_delta(s, "{}", true, true, with_timings);
}

/* ---- the stream of a choice, for any API's writer ----------------------------------- */

static void flush_args(chat_seq *cs) {
    if (!cs->args.len) return;
    cs->out->args(&cs->base, cs->args_index, cs->args.data, cs->args.len);
    jbuf_clear(&cs->args);
}

static void stream_call(void *ctx, int index, const char *name) {
    chat_seq *cs = ctx;
    flush_args(cs);
    char id[96];
    chat_call_id(id, sizeof id, &cs->base, index);
    cs->out->call(&cs->base, index, id, name);
}

static void stream_args(void *ctx, int index, const char *p, size_t n) {
    chat_seq *cs = ctx;
    if (cs->args.len && cs->args_index != index) flush_args(cs);
    cs->args_index = index;
    jbuf_raw(&cs->args, p, n);
}

static void stream_end(void *ctx, int index) {
    (void)index;
    flush_args(ctx);
}

/* Thinking goes out as reasoning_content deltas. */
static void chat_out_reasoning(job_seq *s, const char *p, size_t n) {
    send_text_delta(s, "reasoning_content", p, n);
}

void chat_stream_drive(job_seq *s, const chat_stream_ops *ops, bool with_timings) {
    chat_seq *cs = (chat_seq *)s;
    cs->out = ops;
    if (s->reasoning.len) { /* the thinking goes first, whatever the reply turns out to be */
        ops->reasoning(s, s->reasoning.data, s->reasoning.len);
        jbuf_clear(&s->reasoning);
    }
    int kind = reply_kind(s);
    if (kind == REPLY_UNKNOWN || (kind == REPLY_HELD && s->state != JOB_SEQ_DONE)) return; /* held back */
    if (kind == REPLY_HELD && cs->found) { /* recognized once whole: each call at once */
        for (int k = 0; k < cs->n_found; k++) {
            char id[96];
            chat_call_id(id, sizeof id, s, k);
            ops->call(s, k, id, cs->found[k].name);
            ops->args(s, k, cs->found[k].arguments, strlen(cs->found[k].arguments));
        }
    } else if (kind == REPLY_LIVE) { /* the text is kept whole: the reader moves through it */
        static const tools_reader_ops reader = {stream_call, stream_args, stream_end};
        tools_reader_feed(&cs->calls, s->text.data, s->text.len, &reader, cs);
        flush_args(cs);
    } else if (s->text.len > 0) {
        ops->content(s, s->text.data, s->text.len);
        jbuf_clear(&s->text);
    }
    if (s->state == JOB_SEQ_DONE) {
        ops->finish(s, finish_reason(s), with_timings);
        jbuf_clear(&s->text);
    }
}

static void chat_stream_flush(job_seq *s, bool with_timings) {
    static const chat_stream_ops chunks = {
        .reasoning = chat_out_reasoning, .content = chat_out_content, .call = chat_out_call,
        .args = chat_out_args, .finish = chat_out_finish,
    };
    chat_stream_drive(s, &chunks, with_timings);
}

void chat_result_get(job_seq *s, chat_result *r) {
    memset(r, 0, sizeof *r);
    r->finish_reason = finish_reason(s);
    if (s->split && s->reasoning.len) {
        r->reasoning = s->reasoning.data;
        r->reasoning_len = s->reasoning.len;
    }
    if (is_tool_reply(s)) {
        r->calls = reply_calls(s, &r->n_calls);
        return;
    }
    r->content = s->text.data ? s->text.data : "";
    r->content_len = s->text.len;
}

static int chat_stream_open(job_seq *s) {
    send_delta(s, "{\"role\":\"assistant\",\"content\":\"\"}", false, false, false);
    return 1;
}

static void chat_write_choice(jbuf *b, job_seq *s) {
    jbuf_printf(b, "{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":", s->index);
    if (is_tool_reply(s)) { /* cut by max_tokens: the complete calls, finish_reason "length" */
        jbuf_puts(b, "null,\"tool_calls\":");
        write_tool_calls(b, s);
    } else {
        jbuf_str(b, s->text.data ? s->text.data : "", s->text.len);
    }
    if (s->split && s->reasoning.len) {
        jbuf_puts(b, ",\"reasoning_content\":");
        jbuf_str(b, s->reasoning.data, s->reasoning.len);
    }
    jbuf_puts(b, "},\"logprobs\":");
    lp_write(b, (chat_seq *)s);
    chat_write_finish(b, s, 1);
    jbuf_puts(b, "}");
}

/* ---- request parsing ------------------------------------------------------------------- */

static const cJSON *given(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Fields of the API this server does not implement: present and not null
 * is a 400 naming the field. Some have one value that changes nothing. */
static int check_unsupported(const cJSON *body, params_error *e) {
    static const char *const fields[] = { "functions", "function_call", "audio", NULL };
    for (int i = 0; fields[i]; i++) {
        const cJSON *v = given(body, fields[i]);
        if (v && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0)) /* [] = no tools */
            return params_fail(e, 400, fields[i], "unsupported_parameter",
                               "'%s' is not supported by this server (use 'tools')",
                               fields[i]);
    }
    const cJSON *modalities = given(body, "modalities");
    if (modalities && !(cJSON_IsArray(modalities) && cJSON_GetArraySize(modalities) == 1 &&
                        cJSON_IsString(modalities->child) &&
                        !strcmp(modalities->child->valuestring, "text")))
        return params_fail(e, 400, "modalities", "unsupported_parameter",
                           "'modalities' other than [\"text\"] is not supported");
    return 0;
}

/* A message's content as one text: a string, or the texts of an array of
 * {type: "text", text} parts joined by newlines. *owned is set when the
 * text was built here. */
static int flatten_content(const cJSON *content, int i, const char **text, char **owned,
                           params_error *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].content", i);
    if (cJSON_IsString(content)) {
        *text = content->valuestring;
    } else if (cJSON_IsArray(content)) {
        jbuf b = {0};
        int j = 0;
        for (const cJSON *part = content->child; part; part = part->next, j++) {
            const cJSON *type = cJSON_IsObject(part) ? given(part, "type") : NULL;
            const cJSON *ptext = cJSON_IsObject(part) ? given(part, "text") : NULL;
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0) {
                jbuf_free(&b);
                snprintf(param, sizeof(param), "messages[%d].content[%d].type", i, j);
                return params_fail(e, 400, param, "unsupported_content_type",
                                   "'%s' is %s%.40s%s; only text parts are supported", param,
                                   cJSON_IsString(type) ? "'" : "", cJSON_IsString(type) ? type->valuestring : "missing",
                                   cJSON_IsString(type) ? "'" : "");
            }
            if (!cJSON_IsString(ptext)) {
                jbuf_free(&b);
                snprintf(param, sizeof(param), "messages[%d].content[%d].text", i, j);
                return params_fail(e, 400, param, "invalid_type", "'%s' must be a string", param);
            }
            if (j) jbuf_puts(&b, "\n");
            jbuf_puts(&b, ptext->valuestring);
        }
        if (b.oom) {
            jbuf_free(&b);
            return params_fail(e, 500, param, NULL, "out of memory");
        }
        *owned = b.data ? b.data : strdup("");
        if (!*owned) return params_fail(e, 500, param, NULL, "out of memory");
        *text = *owned;
    } else {
        return params_fail(e, 400, param, cJSON_IsNull(content) || !content ? "missing_required_parameter" : "invalid_type",
                           "'%s' must be a string or an array of text parts", param);
    }
    if (!params_utf8_valid(*text, strlen(*text)))
        return params_fail(e, 400, param, "invalid_value", "'%s' is not valid UTF-8", param);
    return 0;
}

/* owned[0] and owned[1]: what the message's texts were built in. native:
 * the template has its own tool section (tools.h), so tool calls and
 * results stay structured fields. */
static int parse_message(const cJSON *m, int i, gl_chat_message *out, char **owned, bool native, params_error *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d]", i);
    if (!cJSON_IsObject(m))
        return params_fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
    for (const cJSON *f = m->child; f; f = f->next) {
        if (!strcmp(f->string, "role") || !strcmp(f->string, "content") || !strcmp(f->string, "name") ||
            !strcmp(f->string, "tool_calls") || !strcmp(f->string, "tool_call_id") ||
            !strcmp(f->string, "reasoning_content"))
            continue;
        /* Assistant messages echoed back from a response carry nulls and empty lists. */
        if (cJSON_IsNull(f) || (cJSON_IsArray(f) && cJSON_GetArraySize(f) == 0)) continue;
        snprintf(param, sizeof(param), "messages[%d].%.40s", i, f->string);
        return params_fail(e, 400, param, "unsupported_parameter", "'%s' is not supported%s", param,
                           strstr(f->string, "tool") || strstr(f->string, "function")
                               ? " (no tool or function calling)" : "");
    }
    const cJSON *role = given(m, "role");
    snprintf(param, sizeof(param), "messages[%d].role", i);
    if (!cJSON_IsString(role))
        return params_fail(e, 400, param, role ? "invalid_type" : "missing_required_parameter",
                           "'%s' must be one of 'system', 'developer', 'user', 'assistant'", param);
    const char *r = role->valuestring;
    if (!strcmp(r, "developer")) r = "system"; /* the newer name of the same role */
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
        return params_fail(e, 400, param, "unsupported_value",
                           "'%s' is '%.40s'; supported roles are 'system', 'developer', 'user', 'assistant' and 'tool'",
                           param, r);
    const cJSON *name = given(m, "name");
    if (name && !cJSON_IsString(name)) {
        snprintf(param, sizeof(param), "messages[%d].name", i);
        return params_fail(e, 400, param, "invalid_type", "'%s' must be a string", param);
    }
    out->role = r;
    const cJSON *calls = given(m, "tool_calls");
    if (calls && cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0) {
        snprintf(param, sizeof(param), "messages[%d].tool_calls", i);
        if (strcmp(r, "assistant"))
            return params_fail(e, 400, param, "invalid_value", "'%s' needs role 'assistant'", param);
        if (native) {
            out->content = NULL; /* none unless given */
            if (given(m, "content") && flatten_content(given(m, "content"), i, &out->content, &owned[0], e)) return -1;
            if (tools_message_fields(m, i, &owned[1], e)) return -1;
            out->fields = owned[1];
            return 0;
        }
        const char *content = NULL;
        char *flat = NULL;
        if (given(m, "content") && flatten_content(given(m, "content"), i, &content, &flat, e)) return -1;
        owned[0] = tools_render_calls(content, calls, i, e);
        free(flat);
        out->content = owned[0];
        return owned[0] ? 0 : -1;
    }
    snprintf(param, sizeof(param), "messages[%d].tool_calls", i);
    if (calls && !cJSON_IsArray(calls))
        return params_fail(e, 400, param, "invalid_type", "'%s' must be an array", param);
    if (flatten_content(given(m, "content"), i, &out->content, &owned[0], e)) return -1;
    if (!strcmp(r, "tool")) { /* a tool's result: a user message in the Hermes format (tools.h) */
        snprintf(param, sizeof(param), "messages[%d].tool_call_id", i);
        if (!cJSON_IsString(given(m, "tool_call_id")))
            return params_fail(e, 400, param, "missing_required_parameter", "'%s' must be a string for role 'tool'",
                               param);
        if (native) {
            if (tools_message_fields(m, i, &owned[1], e)) return -1;
            out->fields = owned[1];
            return 0;
        }
        char *wrapped = tools_render_result(out->content);
        free(owned[0]);
        owned[0] = wrapped;
        out->role = "user";
        out->content = wrapped;
        if (!wrapped) return params_fail(e, 500, param, NULL, "out of memory");
    }
    return 0;
}

/* An assistant message's reasoning_content goes to the template as a field:
 * Qwen3's shows it for the turns after the last user message, most
 * templates drop past thinking. */
static int add_reasoning_field(const cJSON *m, int i, gl_chat_message *out, char **fields, params_error *e) {
    const cJSON *r = given(m, "reasoning_content");
    if (!r) return 0;
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].reasoning_content", i);
    if (!cJSON_IsString(r) || !params_utf8_valid(r->valuestring, strlen(r->valuestring)))
        return params_fail(e, 400, param, "invalid_type", "'%s' must be a string", param);
    if (strcmp(out->role, "assistant") != 0)
        return params_fail(e, 400, param, "invalid_value", "'%s' needs role 'assistant'", param);
    cJSON *f = out->fields ? cJSON_Parse(out->fields) : cJSON_CreateObject();
    char *text = f && cJSON_AddStringToObject(f, "reasoning_content", r->valuestring) ? cJSON_PrintUnformatted(f) : NULL;
    cJSON_Delete(f);
    if (!text) return params_fail(e, 500, param, NULL, "out of memory");
    free(*fields);
    *fields = text;
    out->fields = text;
    return 0;
}

#define CHAT_MAX_VARS 34 /* kwargs, reasoning_effort, enable_thinking, tools */
#define CONTINUE_MARK "<|genloop-continue-here|>"

/* How the conversation is rendered: the extensions add_generation_prompt,
 * continue_final_message and chat_template_kwargs, and reasoning_effort,
 * which templates that know it (gpt-oss) read as a variable. */
typedef struct render_opts {
    bool add_generation_prompt;
    bool continue_final;     /* the final assistant message is continued, not closed */
    gl_chat_var vars[CHAT_MAX_VARS];
    int n_vars;
} render_opts;

static int parse_render_opts(const cJSON *body, render_opts *o, params_error *e) {
    o->add_generation_prompt = true;
    o->continue_final = false;
    o->n_vars = 0;
    if (params_get_bool(body, "continue_final_message", &o->continue_final, e)) return -1;
    if (o->continue_final) o->add_generation_prompt = false;
    if (params_get_bool(body, "add_generation_prompt", &o->add_generation_prompt, e)) return -1;
    if (o->continue_final && o->add_generation_prompt)
        return params_fail(e, 400, "continue_final_message", "invalid_value",
                           "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    const cJSON *kw = given(body, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw))
        return params_fail(e, 400, "chat_template_kwargs", "invalid_type",
                           "'chat_template_kwargs' must be an object");
    for (const cJSON *v = kw ? kw->child : NULL; v; v = v->next) {
        char param[96];
        snprintf(param, sizeof(param), "chat_template_kwargs.%.60s", v->string);
        if (o->n_vars == CHAT_MAX_VARS - 3) /* three left: reasoning_effort, enable_thinking, tools */
            return params_fail(e, 400, "chat_template_kwargs", "invalid_value",
                               "'chat_template_kwargs' takes at most %d entries", CHAT_MAX_VARS - 3);
        gl_chat_var *cv = &o->vars[o->n_vars++];
        if (cJSON_IsBool(v)) {
            *cv = (gl_chat_var){ .name = v->string, .type = GL_CHAT_VAR_BOOL, .b = cJSON_IsTrue(v) };
        } else if (cJSON_IsNull(v)) {
            *cv = (gl_chat_var){ .name = v->string, .type = GL_CHAT_VAR_NONE };
        } else if (cJSON_IsString(v) && params_utf8_valid(v->valuestring, strlen(v->valuestring))) {
            *cv = (gl_chat_var){ .name = v->string, .type = GL_CHAT_VAR_STR, .s = v->valuestring };
        } else if (cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble) {
            *cv = (gl_chat_var){ .name = v->string, .type = GL_CHAT_VAR_INT, .i = (long long)v->valuedouble };
        } else {
            return params_fail(e, 400, param, "invalid_type",
                               "'%s' must be a string, boolean, integer or null", param);
        }
    }
    const cJSON *effort = given(body, "reasoning_effort");
    if (effort) {
        if (!cJSON_IsString(effort))
            return params_fail(e, 400, "reasoning_effort", "invalid_type", "'reasoning_effort' must be a string");
        o->vars[o->n_vars++] = (gl_chat_var){ .name = "reasoning_effort", .type = GL_CHAT_VAR_STR,
                                           .s = effort->valuestring };
        /* templates that only know enable_thinking (Qwen3's) hear "none" too */
        if (!strcmp(effort->valuestring, "none") && !(kw && given(kw, "enable_thinking")))
            o->vars[o->n_vars++] = (gl_chat_var){ .name = "enable_thinking", .type = GL_CHAT_VAR_BOOL, .b = false };
    }
    return 0;
}

/* continue_final_message: the final message rendered as a closed turn, then
 * cut where its content ends (found by a mark appended to it). */
static char *render_continued(const gl_chat_template *t, gl_chat_message *msgs, int n,
                              const render_opts *o, params_error *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].role", n - 1);
    if (strcmp(msgs[n - 1].role, "assistant") != 0) {
        params_fail(e, 400, param, "invalid_value",
                    "'continue_final_message' needs the final message to be from the assistant");
        return NULL;
    }
    size_t len = strlen(msgs[n - 1].content ? msgs[n - 1].content : "");
    char *marked = malloc(len + sizeof(CONTINUE_MARK));
    if (!marked) {
        params_fail(e, 500, "messages", NULL, "out of memory");
        return NULL;
    }
    memcpy(marked, msgs[n - 1].content ? msgs[n - 1].content : "", len);
    memcpy(marked + len, CONTINUE_MARK, sizeof(CONTINUE_MARK));
    const char *orig = msgs[n - 1].content;
    msgs[n - 1].content = marked;
    gl_error err = {{0}};
    char *text = gl_chat_template_render_vars(t, msgs, n, false, o->vars, o->n_vars, &err);
    msgs[n - 1].content = orig;
    free(marked);
    if (!text) {
        params_fail(e, 400, "messages", "invalid_value", "%s", err.message);
        return NULL;
    }
    char *cut = strstr(text, CONTINUE_MARK);
    if (!cut) {
        free(text);
        params_fail(e, 400, "continue_final_message", "invalid_value",
                    "the chat template does not show the final message's content as given, so it cannot be continued");
        return NULL;
    }
    *cut = 0;
    return text;
}

/* Renders the messages with the template and tokenizes the result. */
static int build_prompt(chat_job *cj, const cJSON *messages, const render_opts *o, params_error *e) {
    const models_entry *a = cj->base.model;
    if (!messages)
        return params_fail(e, 400, "messages", "missing_required_parameter", "'messages' is required");
    if (!cJSON_IsArray(messages))
        return params_fail(e, 400, "messages", "invalid_type", "'messages' must be an array");
    int n = cJSON_GetArraySize(messages);
    if (n == 0) return params_fail(e, 400, "messages", "invalid_value", "'messages' must not be empty");
    /* one more slot: the tools' system message; two texts a message may own */
    gl_chat_message *msgs = calloc((size_t)n + 1, sizeof(*msgs));
    char **owned = calloc(2 * ((size_t)n + 1), sizeof(*owned));
    int rc = 0, i = 0;
    bool native = a->chat_tools_native;
    if (!msgs || !owned) rc = params_fail(e, 500, "messages", NULL, "out of memory");
    for (const cJSON *m = messages->child; m && rc == 0; m = m->next, i++) {
        rc = parse_message(m, i, &msgs[i], &owned[2 * i], native, e);
        if (rc == 0) rc = add_reasoning_field(m, i, &msgs[i], &owned[2 * i + 1], e);
    }
    render_opts ro = *o; /* plus the tools for the template's own tool section */
    if (rc == 0 && cj->tools.listed && native) {
        ro.vars[ro.n_vars++] = (gl_chat_var){.name = "tools", .type = GL_CHAT_VAR_JSON, .s = cj->tools.tools_json};
    } else if (rc == 0 && cj->tools.listed) { /* merged into the first system message, or one of its own */
        if (!strcmp(msgs[0].role, "system")) {
            size_t len = strlen(msgs[0].content) + strlen(cj->tools.system) + 3;
            char *merged = malloc(len);
            if (!merged) rc = params_fail(e, 500, "messages", NULL, "out of memory");
            else snprintf(merged, len, "%s\n\n%s", msgs[0].content, cj->tools.system);
            free(owned[0]);
            owned[0] = merged;
            msgs[0].content = merged;
        } else {
            memmove(msgs + 1, msgs, (size_t)n * sizeof *msgs);
            memmove(owned + 2, owned, 2 * (size_t)n * sizeof *owned);
            msgs[0] = (gl_chat_message){"system", cj->tools.system, NULL};
            owned[0] = owned[1] = NULL;
            n++;
        }
    }
    /* The template is checked after the request, so a bad request is still
     * told what is wrong with it. */
    char *text = NULL;
    if (rc == 0 && !a->chat_template)
        rc = params_fail(e, 500, "messages", "chat_template_unsupported",
                         "This model's chat template is not supported (%s); the server can be "
                         "started with --chat-template NAME to use a built-in format",
                         a->chat_template_error);
    if (rc == 0 && ro.continue_final) {
        text = render_continued(a->chat_template, msgs, n, &ro, e);
        if (!text) rc = -1;
    } else if (rc == 0) {
        gl_error err = {{0}};
        text = gl_chat_template_render_vars(a->chat_template, msgs, n, ro.add_generation_prompt,
                                            ro.vars, ro.n_vars, &err);
        if (!text) rc = params_fail(e, 400, "messages", "invalid_value", "%s", err.message);
    }
    for (int k = 0; owned && k < 2 * n; k++) free(owned[k]);
    free(owned);
    free(msgs);
    if (rc == 0)
        cj->has_reasoning = reasoning_request(&a->reasoning, &cj->reasoning, text,
                                              cj->engine_reasoning.grammar_after, &cj->engine_reasoning);
    if (rc) return rc;
    gl_error err = {{0}};
    /* Templates write BOS themselves; only their special tokens are parsed. */
    int n_ids = gl_tokenize(a->model, text, strlen(text), GL_TOKENIZE_PARSE_SPECIAL, &cj->prompt, &err);
    free(text);
    if (n_ids < 0) return params_fail(e, 400, "messages", "invalid_value", "%s", err.message);
    if (n_ids == 0) return params_fail(e, 400, "messages", "invalid_value", "the conversation renders to an empty prompt");
    cj->n_prompt = n_ids;
    return 0;
}

static void add_stop(chat_job *cj, const char *s) {
    for (int i = 0; i < cj->n_stops; i++)
        if (!strcmp(cj->stops[i], s)) return;
    if (cj->n_stops < CHAT_MAX_STOP) cj->stops[cj->n_stops++] = s;
}

int chat_parse(job *j, const cJSON *body, params_error *e) {
    chat_job *cj = (chat_job *)j;
    static const char *const keys[] = {
        "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
        "stream", "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
        "seed", "user", "logprobs", "top_logprobs", "response_format", "top_k", "min_p",
        "repetition_penalty", "ignore_eos", "grammar", "json_schema",
        "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
        /* llama.cpp server / vLLM extensions (README "Request fields") */
        "repeat_penalty", "repeat_last_n", "min_tokens", "cache_prompt", "speculative", "n_probs", "return_progress",
        "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "reasoning_effort",
        "reasoning_format", "thinking_budget_tokens", "reasoning_budget_tokens",
        PARAMS_SAMPLER_KEYS,
        /* known, refused by check_unsupported unless null (or harmless) */
        "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "audio",
        "modalities", NULL };
    api_server *a = j->api;
    const models_entry *m = j->model;
    if (params_check_fields(body, keys, a->cfg->lenient_params, e) || check_unsupported(body, e))
        return -1;
    const cJSON *user = given(body, "user");
    if (user && !cJSON_IsString(user))
        return params_fail(e, 400, "user", "invalid_type", "'user' must be a string");

    /* max_completion_tokens is the newer name and wins; without either the
     * reply may run to the end of the context. */
    int has_mct = given(body, "max_completion_tokens") != NULL;
    int has_mt = given(body, "max_tokens") != NULL;
    const char *max_key = has_mct ? "max_completion_tokens" : "max_tokens";
    if (params_generation_parse_limits(body, m->model, &m->limits, max_key, &j->gen, e) ||
        structured_parse(body, &j->grammar_spec, e) || tools_parse(body, &cj->tools, e))
        return -1;
    if (cj->tools.active && j->grammar_spec && !cj->tools.free_text)
        return params_fail(e, 400, "tools", "invalid_value",
                           "'tools' with tool_choice 'required' or a named function and a response_format, grammar, "
                           "json_schema or guided_* constraint cannot be combined");
    if (cj->tools.active && !j->grammar_spec) { /* with "auto", the request's own constraint shapes the reply */
        j->grammar_spec = cj->tools.spec; /* the job's now */
        cj->tools.spec = NULL;
        cj->tools_grammar = true;
    }
    int ignored;
    if (has_mct && has_mt && params_get_int(body, "max_tokens", 1, m->limits.max_tokens, &ignored, e))
        return -1;
    if ((has_mct || has_mt) && j->gen.max_tokens < 1)
        return params_fail(e, 400, max_key, "invalid_value", "'%s' must be at least 1", max_key);

    if (params_get_bool(body, "logprobs", &cj->logprobs, e) ||
        params_get_int(body, "top_logprobs", 0, CHAT_MAX_TOP_LOGPROBS, &cj->top_logprobs, e))
        return -1;
    if (given(body, "top_logprobs") && !cj->logprobs)
        return params_fail(e, 400, "top_logprobs", "invalid_value",
                           "'top_logprobs' needs 'logprobs' set to true");
    if (given(body, "n_probs")) { /* llama.cpp's name: logprobs with this many alternatives */
        int np = 0;
        if (params_get_int(body, "n_probs", 0, CHAT_MAX_TOP_LOGPROBS, &np, e)) return -1;
        if (given(body, "top_logprobs") && np != cj->top_logprobs)
            return params_fail(e, 400, "n_probs", "invalid_value", "give 'top_logprobs' or 'n_probs', not both");
        if (np > 0) {
            cj->logprobs = true;
            cj->top_logprobs = np;
        }
    }

    reasoning_format rf = REASONING_AUTO;
    reasoning_format_parse(a->cfg->reasoning_format, &rf);
    if (reasoning_parse(body, rf, a->cfg->reasoning_budget, &m->reasoning, &cj->reasoning, e)) return -1;
    /* a schema or the tools shape the answer; a raw grammar the whole output
     * (either is compiled after parsing: grammar_spec says one will be) */
    cj->engine_reasoning.grammar_after = j->grammar_spec && !given(body, "grammar");
    cj->split = reasoning_split_markers(&m->reasoning, cj->reasoning.format);
    render_opts ro;
    if (parse_render_opts(body, &ro, e) || build_prompt(cj, given(body, "messages"), &ro, e)) return -1;
    int need = cj->n_prompt + (has_mct || has_mt ? j->gen.max_tokens : 1);
    if (need > m->n_ctx)
        return params_fail(e, 400, "messages", "context_length_exceeded",
                           "This model's maximum context length is %d tokens, however you "
                           "requested %d tokens (%d in the messages; %d for the completion). "
                           "Please reduce the length of the messages or completion.",
                           m->n_ctx, need, cj->n_prompt, need - cj->n_prompt);
    if (api_check_prompt_tokens(m, cj->n_prompt, "messages", e)) return -1;
    if (!has_mct && !has_mt) { /* up to the end of the context, within the server's cap */
        int room = m->n_ctx - cj->n_prompt;
        j->gen.max_tokens = room < m->limits.max_tokens ? room : m->limits.max_tokens;
    }

    for (int i = 0; i < j->gen.n_stop; i++) add_stop(cj, j->gen.stop[i]);
    int n_tpl = 0;
    const char *const *tpl_stops = gl_chat_template_stop_strings(m->chat_template, &n_tpl);
    for (int i = 0; i < n_tpl; i++) add_stop(cj, tpl_stops[i]);
    j->n_seqs = j->gen.n;
    j->prompt_tokens = cj->n_prompt;
    j->gen.sampling.logprobs = cj->logprobs;
    j->gen.sampling.n_logprobs = cj->logprobs ? cj->top_logprobs : 0;
    return 0;
}

static void chat_prepare(job_seq *s, gl_request *r) {
    chat_job *cj = (chat_job *)s->job;
    r->prompt = cj->prompt;
    r->n_prompt = cj->n_prompt;
    r->n_stop = cj->n_stops;
    r->stop = cj->stops;
    if (cj->has_reasoning) r->reasoning = &cj->engine_reasoning;
    if (cj->split) {
        chat_seq *cs = (chat_seq *)s;
        reasoning_split_init(&cs->split, cj->split, cj->has_reasoning && cj->engine_reasoning.opened);
        s->split = &cs->split;
    }
}

static const job_ops chat_ops = {
    .job_size = sizeof(chat_job), .seq_size = sizeof(chat_seq), .ollama_options = true,
    .id_prefix = "chatcmpl", .prompt_param = "messages",
    .object = "chat.completion", .chunk_object = "chat.completion.chunk",
    .parse = chat_parse, .prepare = chat_prepare,
    .on_token = chat_on_token, /* no prompt logprobs */
    .stream_open = chat_stream_open, .stream_flush = chat_stream_flush,
    .write_choice = chat_write_choice,
    .free = chat_free,
};

const job_ops *chat_job_ops(void) {
    return &chat_ops;
}

void chat_handle(http_req *req, void *ctx) {
    job_handle(req, ctx, &chat_ops);
}

