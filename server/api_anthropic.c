/* api_anthropic.c -- the Messages API as a chat job: the request is
 * rewritten as a chat request body (translate), chat parses and runs it,
 * and its output is written as a `message` or Anthropic's events. One
 * choice per request. */
#include "api_anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "translate.h"

/* ---- errors ----------------------------------------------------------------------- */

bool anthropic_path(const char *path) {
    return path && !strncmp(path, "/v1/messages", 12) && (path[12] == 0 || path[12] == '/' || path[12] == '?');
}

cJSON *anthropic_error_json(const params_error *e) {
    const char *type = e->status == 401 ? "authentication_error"
                     : e->status == 403 ? "permission_error"
                     : e->status == 404 ? "not_found_error"
                     : e->status == 413 ? "request_too_large"
                     : e->status == 429 ? "rate_limit_error"
                     : e->status == 503 ? "overloaded_error"
                     : e->status >= 500 ? "api_error" : "invalid_request_error";
    cJSON *root = cJSON_CreateObject(), *err = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "type", "error");
    cJSON_AddItemToObject(root, "error", err);
    cJSON_AddStringToObject(err, "type", type);
    cJSON_AddStringToObject(err, "message", e->message);
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param); /* beyond Anthropic's: which field */
    return root;
}

/* ---- the job's own state ------------------------------------------------------------- */

enum { BLOCK_NONE, BLOCK_THINKING, BLOCK_TEXT, BLOCK_TOOL_USE };

typedef struct msg_state {
    tr_output out;
    int n_blocks;            /* stream: content blocks started */
    int open;                /* stream: the open block (BLOCK_*) */
} msg_state;

static msg_state *state(job *j) {
    return j->ext;
}

static int oom(params_error *e) {
    return params_fail(e, 500, NULL, NULL, "out of memory");
}

/* ---- request translation ---------------------------------------------------------------- */

static const char *const renames[][2] = {
    { "max_completion_tokens", "max_tokens" }, { "stop", "stop_sequences" },
    { "thinking_budget_tokens", "thinking.budget_tokens" }, { NULL, NULL },
};

/* The text of a text block list (or a string) as chat text parts; tool_use
 * and tool_result blocks go to calls and results when those are given. */
typedef struct blocks_out {
    cJSON *text;             /* chat content parts */
    cJSON *calls;            /* chat tool_calls, or NULL where tool_use is not allowed */
    cJSON *results;          /* chat tool messages, or NULL where tool_result is not allowed */
} blocks_out;

static int block_text(const cJSON *b, const char *param, cJSON *parts, params_error *e) {
    const cJSON *text = tr_given(b, "text");
    if (!cJSON_IsString(text)) return params_fail(e, 400, param, "invalid_type", "'%s.text' must be a string", param);
    for (const cJSON *f = b->child; f; f = f->next)
        if (strcmp(f->string, "type") && strcmp(f->string, "text") && strcmp(f->string, "cache_control") &&
            !cJSON_IsNull(f) && !(!strcmp(f->string, "citations") && cJSON_IsArray(f) && !cJSON_GetArraySize(f)))
            return params_fail(e, 400, param, "unsupported_parameter", "'%s.%.40s' is not supported", param, f->string);
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", "text");
    cJSON_AddStringToObject(part, "text", text->valuestring);
    cJSON_AddItemToArray(parts, part);
    return 0;
}

static int block_tool_use(const cJSON *b, const char *param, cJSON *calls, params_error *e) {
    const cJSON *id = tr_given(b, "id"), *name = tr_given(b, "name"), *input = tr_given(b, "input");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input))
        return params_fail(e, 400, param, "invalid_value",
                           "'%s' must have a string 'id', a string 'name' and an object 'input'", param);
    char *args = cJSON_PrintUnformatted(input);
    if (!args) return oom(e);
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(call, "id", id->valuestring);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddStringToObject(fn, "arguments", args);
    cJSON_free(args);
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToArray(calls, call);
    return 0;
}

/* A tool's result: a tool message; is_error shows as an "Error: " prefix. */
static int block_tool_result(const cJSON *b, const char *param, cJSON *results, params_error *e) {
    const cJSON *id = tr_given(b, "tool_use_id"), *content = tr_given(b, "content");
    const cJSON *is_error = tr_given(b, "is_error");
    char sub[160];
    if (!cJSON_IsString(id))
        return params_fail(e, 400, param, "missing_required_parameter", "'%s.tool_use_id' must be a string", param);
    if (is_error && !cJSON_IsBool(is_error))
        return params_fail(e, 400, param, "invalid_type", "'%s.is_error' must be a boolean", param);
    jbuf text = {0};
    if (cJSON_IsTrue(is_error)) jbuf_puts(&text, "Error: ");
    if (cJSON_IsString(content)) {
        jbuf_puts(&text, content->valuestring);
    } else if (cJSON_IsArray(content)) {
        int k = 0;
        for (const cJSON *c = content->child; c; c = c->next, k++) {
            const cJSON *type = tr_given(c, "type"), *t = tr_given(c, "text");
            snprintf(sub, sizeof sub, "%s.content[%d]", param, k);
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
                jbuf_free(&text);
                return params_fail(e, 400, sub, "unsupported_content_type",
                                   "'%s' must be a text block (only text tool results are supported)", sub);
            }
            if (k) jbuf_puts(&text, "\n");
            jbuf_puts(&text, t->valuestring);
        }
    } else if (content) {
        return params_fail(e, 400, param, "invalid_type", "'%s.content' must be a string or an array of blocks", param);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
    cJSON_AddStringToObject(m, "content", text.data ? text.data : "");
    jbuf_free(&text);
    cJSON_AddItemToArray(results, m);
    return 0;
}

static int read_blocks(const cJSON *content, const char *param, blocks_out *out, params_error *e) {
    if (cJSON_IsString(content)) {
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "text");
        cJSON_AddStringToObject(part, "text", content->valuestring);
        cJSON_AddItemToArray(out->text, part);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return params_fail(e, 400, param, content ? "invalid_type" : "missing_required_parameter",
                           "'%s' must be a string or an array of content blocks", param);
    int k = 0;
    for (const cJSON *b = content->child; b; b = b->next, k++) {
        char sub[96];
        snprintf(sub, sizeof sub, "%s[%d]", param, k);
        const cJSON *type = tr_given(b, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        int rc;
        if (!strcmp(t, "text")) rc = block_text(b, sub, out->text, e);
        else if (!strcmp(t, "tool_use") && out->calls) rc = block_tool_use(b, sub, out->calls, e);
        else if (!strcmp(t, "tool_result") && out->results) rc = block_tool_result(b, sub, out->results, e);
        else if ((!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) && out->calls)
            rc = 0; /* past thinking sent back is dropped, as chat templates drop it */
        else
            rc = params_fail(e, 400, sub, "unsupported_content_type",
                             "'%s.type' is '%.40s'; supported blocks are text, tool_use and thinking (assistant) "
                             "and tool_result (user)", sub, cJSON_IsString(type) ? t : "missing");
        if (rc) return -1;
    }
    return 0;
}

static int add_message(cJSON *msgs, const cJSON *m, int i, params_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    const cJSON *role = tr_given(m, "role");
    if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
        (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return params_fail(e, 400, param, "invalid_value", "'%s' must be an object with role 'user' or 'assistant'", param);
    for (const cJSON *f = m->child; f; f = f->next)
        if (strcmp(f->string, "role") && strcmp(f->string, "content"))
            return params_fail(e, 400, param, "unsupported_parameter", "'%s.%.40s' is not supported", param, f->string);
    bool user = !strcmp(role->valuestring, "user");
    blocks_out out = { cJSON_CreateArray(), user ? NULL : cJSON_CreateArray(), user ? cJSON_CreateArray() : NULL };
    char sub[80];
    snprintf(sub, sizeof sub, "%s.content", param);
    int rc = read_blocks(tr_given(m, "content"), sub, &out, e);
    if (rc == 0 && user) { /* tool results first (as Anthropic asks them to come), then the text */
        for (cJSON *r = out.results->child; r; r = r->next) cJSON_AddItemToArray(msgs, cJSON_Duplicate(r, 1));
        if (cJSON_GetArraySize(out.text) || !cJSON_GetArraySize(out.results)) {
            cJSON *msg = cJSON_CreateObject();
            cJSON_AddStringToObject(msg, "role", "user");
            cJSON_AddItemToObject(msg, "content", out.text);
            out.text = NULL;
            cJSON_AddItemToArray(msgs, msg);
        }
    } else if (rc == 0) {
        cJSON *msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (cJSON_GetArraySize(out.text) || !cJSON_GetArraySize(out.calls)) {
            cJSON_AddItemToObject(msg, "content", out.text);
            out.text = NULL;
        }
        if (cJSON_GetArraySize(out.calls)) {
            cJSON_AddItemToObject(msg, "tool_calls", out.calls);
            out.calls = NULL;
        }
        cJSON_AddItemToArray(msgs, msg);
    }
    cJSON_Delete(out.text);
    cJSON_Delete(out.calls);
    cJSON_Delete(out.results);
    return rc;
}

static int translate_tools(const cJSON *body, cJSON *chat, params_error *e) {
    const cJSON *tools = tr_given(body, "tools");
    if (tools && !cJSON_IsArray(tools)) return params_fail(e, 400, "tools", "invalid_type", "'tools' must be an array");
    cJSON *list = cJSON_AddArrayToObject(chat, "tools");
    int k = 0;
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, k++) {
        char param[32];
        snprintf(param, sizeof param, "tools[%d]", k);
        const cJSON *type = tr_given(t, "type"), *name = tr_given(t, "name"), *schema = tr_given(t, "input_schema");
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom")))
            return params_fail(e, 400, param, "unsupported_value",
                               "'%s.type' is '%.40s'; only client tools (type 'custom' or none) are supported",
                               param, cJSON_IsString(type) ? type->valuestring : "?");
        if (!cJSON_IsString(name) || !cJSON_IsObject(schema))
            return params_fail(e, 400, param, "invalid_value",
                               "'%s' must have a string 'name' and an object 'input_schema'", param);
        cJSON *fn = cJSON_CreateObject();
        for (const cJSON *f = t->child; f; f = f->next) {
            if (!strcmp(f->string, "name") || !strcmp(f->string, "description"))
                cJSON_AddItemToObject(fn, f->string, cJSON_Duplicate(f, 1));
            else if (!strcmp(f->string, "input_schema"))
                cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(f, 1));
            else if (strcmp(f->string, "type") && strcmp(f->string, "cache_control") && !cJSON_IsNull(f)) {
                cJSON_Delete(fn);
                return params_fail(e, 400, param, "unsupported_parameter", "'%s.%.40s' is not supported", param, f->string);
            }
        }
        cJSON *entry = cJSON_CreateObject();
        cJSON_AddStringToObject(entry, "type", "function");
        cJSON_AddItemToObject(entry, "function", fn);
        cJSON_AddItemToArray(list, entry);
    }
    const cJSON *choice = tr_given(body, "tool_choice");
    if (!choice) return 0;
    const cJSON *type = tr_given(choice, "type"), *disable = tr_given(choice, "disable_parallel_tool_use");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (disable && !cJSON_IsBool(disable))
        return params_fail(e, 400, "tool_choice.disable_parallel_tool_use", "invalid_type",
                           "'tool_choice.disable_parallel_tool_use' must be a boolean");
    if (!strcmp(t, "auto") || !strcmp(t, "none")) {
        cJSON_AddStringToObject(chat, "tool_choice", t);
    } else if (!strcmp(t, "any")) {
        cJSON_AddStringToObject(chat, "tool_choice", "required");
    } else if (!strcmp(t, "tool") && cJSON_IsString(tr_given(choice, "name"))) {
        cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", tr_given(choice, "name")->valuestring);
    } else {
        return params_fail(e, 400, "tool_choice", "invalid_value",
                           "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"none\"} "
                           "or {\"type\": \"tool\", \"name\": ...}");
    }
    if (disable) cJSON_AddBoolToObject(chat, "parallel_tool_calls", !cJSON_IsTrue(disable));
    return 0;
}

/* thinking: the template's enable_thinking, and chat's thinking budget. */
static int translate_thinking(const cJSON *body, cJSON *chat, params_error *e) {
    const cJSON *thinking = tr_given(body, "thinking");
    if (!thinking) return 0;
    const cJSON *type = tr_given(thinking, "type"), *budget = tr_given(thinking, "budget_tokens");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (strcmp(t, "enabled") && strcmp(t, "disabled"))
        return params_fail(e, 400, "thinking.type", "invalid_value", "'thinking.type' must be 'enabled' or 'disabled'");
    cJSON *kw = cJSON_GetObjectItemCaseSensitive(chat, "chat_template_kwargs");
    if (!kw) kw = cJSON_AddObjectToObject(chat, "chat_template_kwargs");
    if (!cJSON_IsObject(kw))
        return params_fail(e, 400, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object");
    cJSON_DeleteItemFromObjectCaseSensitive(kw, "enable_thinking");
    cJSON_AddBoolToObject(kw, "enable_thinking", !strcmp(t, "enabled"));
    if (!strcmp(t, "disabled")) return 0;
    if (!budget)
        return params_fail(e, 400, "thinking.budget_tokens", "missing_required_parameter",
                           "'thinking.budget_tokens' is required when thinking is enabled");
    cJSON_AddItemToObject(chat, "thinking_budget_tokens", cJSON_Duplicate(budget, 1));
    return 0;
}

static int translate(job *j, const cJSON *body, bool counting, cJSON *chat, params_error *e) {
    static const char *const own[] = {
        "messages", "system", "max_tokens", "stop_sequences", "tools", "tool_choice", "thinking",
        "container", "mcp_servers", "context_management", NULL };
    if (tr_copy_fields(j->api, body, own, chat, e) || tr_neutral_only(body, "container", "null", e) ||
        tr_neutral_only(body, "mcp_servers", "[]", e) || tr_neutral_only(body, "context_management", "null", e))
        return -1;
    const cJSON *max = tr_given(body, "max_tokens");
    if (!max && !counting)
        return params_fail(e, 400, "max_tokens", "missing_required_parameter", "'max_tokens' is required");
    if (max && !counting) cJSON_AddItemToObject(chat, "max_completion_tokens", cJSON_Duplicate(max, 1));
    const cJSON *stops = tr_given(body, "stop_sequences");
    if (stops && !cJSON_IsArray(stops))
        return params_fail(e, 400, "stop_sequences", "invalid_type", "'stop_sequences' must be an array of strings");
    if (stops) cJSON_AddItemToObject(chat, "stop", cJSON_Duplicate(stops, 1));
    if (translate_tools(body, chat, e) || translate_thinking(body, chat, e)) return -1;

    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    const cJSON *system = tr_given(body, "system");
    if (system) {
        blocks_out out = { cJSON_CreateArray(), NULL, NULL };
        if (read_blocks(system, "system", &out, e)) {
            cJSON_Delete(out.text);
            return -1;
        }
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddItemToObject(m, "content", out.text);
        cJSON_AddItemToArray(msgs, m);
    }
    const cJSON *messages = tr_given(body, "messages");
    if (!cJSON_IsArray(messages))
        return params_fail(e, 400, "messages", messages ? "invalid_type" : "missing_required_parameter",
                           "'messages' must be an array");
    int i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++)
        if (add_message(msgs, m, i, e)) return -1;
    return 0;
}

static void msg_free(job *j) {
    chat_job_ops()->free(j);
    msg_state *st = state(j);
    if (!st) return;
    tr_output_free(&st->out);
    free(st);
}

static int parse_as(job *j, const cJSON *body, bool counting, params_error *e) {
    msg_state *st = j->ext = calloc(1, sizeof(msg_state));
    cJSON *chat = cJSON_CreateObject();
    if (!st || !chat) {
        cJSON_Delete(chat);
        return oom(e);
    }
    int rc = translate(j, body, counting, chat, e);
    if (rc == 0) rc = chat_parse(j, chat, e);
    if (rc) tr_rename_error(e, renames);
    cJSON_Delete(chat);
    return rc;
}

static int msg_parse(job *j, const cJSON *body, params_error *e) {
    return parse_as(j, body, false, e);
}

static int count_parse(job *j, const cJSON *body, params_error *e) {
    if (tr_given(body, "stream") || tr_given(body, "max_tokens"))
        return params_fail(e, 400, tr_given(body, "stream") ? "stream" : "max_tokens", "unsupported_parameter",
                           "'%s' is not a field of count_tokens", tr_given(body, "stream") ? "stream" : "max_tokens");
    return parse_as(j, body, true, e);
}

/* ---- the message --------------------------------------------------------------------- */

/* The stop_sequences entry that ended the message, or NULL. */
static const char *matched_stop(job *j) {
    const job_seq *s = job_seq_at(j, 0);
    return s->finish == GL_FINISH_STOP && s->stop_index >= 0 && s->stop_index < j->gen.n_stop ? j->gen.stop[s->stop_index]
                                                                                              : NULL;
}

static const char *stop_reason(job *j, const char *finish) {
    if (!finish) return NULL;
    if (!strcmp(finish, "stop") && matched_stop(j)) return "stop_sequence";
    return !strcmp(finish, "length") ? "max_tokens" : !strcmp(finish, "tool_calls") ? "tool_use" : "end_turn";
}

static void add_stop_sequence(cJSON *obj, job *j) {
    const char *stop = matched_stop(j);
    if (stop) cJSON_AddStringToObject(obj, "stop_sequence", stop);
    else cJSON_AddNullToObject(obj, "stop_sequence");
}

static void add_usage(cJSON *obj, const job_totals *t, int output_tokens) {
    cJSON *u = cJSON_AddObjectToObject(obj, "usage");
    /* Anthropic counts the prompt tokens read from the cache apart */
    cJSON_AddNumberToObject(u, "input_tokens", t->prompt_tokens - t->cached_tokens);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", t->cached_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", output_tokens);
}

static cJSON *block_thinking(const jbuf *text) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "thinking");
    cJSON_AddStringToObject(b, "thinking", text->data ? text->data : "");
    cJSON_AddStringToObject(b, "signature", ""); /* nothing to verify: the thinking stays local */
    return b;
}

static cJSON *block_textual(const jbuf *text) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddStringToObject(b, "text", text->data ? text->data : "");
    return b;
}

static cJSON *block_call(const tr_call *c, bool with_input) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", c->id);
    cJSON_AddStringToObject(b, "name", c->name);
    cJSON_AddItemToObject(b, "input", with_input ? tr_parse_or_empty(c->args.data, c->args.len) : cJSON_CreateObject());
    return b;
}

static cJSON *build_message(job *j, bool with_content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", j->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", j->model->id);
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    if (with_content) {
        const tr_output *o = &state(j)->out;
        if (o->reasoning.len) cJSON_AddItemToArray(content, block_thinking(&o->reasoning));
        if (o->content.len || !o->n_calls) cJSON_AddItemToArray(content, block_textual(&o->content));
        for (int k = 0; k < o->n_calls; k++) cJSON_AddItemToArray(content, block_call(&o->calls[k], true));
    }
    const char *reason = with_content ? stop_reason(j, state(j)->out.finish_reason) : NULL;
    if (reason) cJSON_AddStringToObject(m, "stop_reason", reason);
    else cJSON_AddNullToObject(m, "stop_reason");
    if (with_content) add_stop_sequence(m, j);
    else cJSON_AddNullToObject(m, "stop_sequence");
    return m;
}

static void print_into(jbuf *b, cJSON *v) {
    char *text = cJSON_PrintUnformatted(v);
    cJSON_Delete(v);
    if (text) jbuf_puts(b, text);
    else b->oom = true;
    cJSON_free(text);
}

static void msg_reply(job *j, const job_totals *t, jbuf *b) {
    if (tr_output_from_seq(&state(j)->out, job_seq_at(j, 0))) {
        b->oom = true;
        return;
    }
    cJSON *m = build_message(j, true);
    add_usage(m, t, t->completion_tokens);
    print_into(b, m);
}

/* ---- the event stream ---------------------------------------------------------------------- */

/* An event's data object, its type first. */
static cJSON *event_data(const char *type) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "type", type);
    return d;
}

/* Sends data (freed) as the event its type names. */
static void event(job *j, cJSON *data) {
    jbuf *b = tr_event_begin(j, cJSON_GetObjectItem(data, "type")->valuestring);
    print_into(b, data);
    tr_event_end(j);
}

static void close_block(job *j) {
    msg_state *st = state(j);
    if (st->open == BLOCK_NONE) return;
    cJSON *d = event_data("content_block_stop");
    cJSON_AddNumberToObject(d, "index", st->n_blocks - 1);
    event(j, d);
    st->open = BLOCK_NONE;
}

static void open_block(job *j, int kind, cJSON *block) {
    msg_state *st = state(j);
    close_block(j);
    st->open = kind;
    cJSON *d = event_data("content_block_start");
    cJSON_AddNumberToObject(d, "index", st->n_blocks++);
    cJSON_AddItemToObject(d, "content_block", block);
    event(j, d);
}

/* A content_block_delta: {"type": delta_type, key: text}. */
static void block_delta(job *j, const char *delta_type, const char *key, const char *p, size_t n) {
    jbuf *b = tr_event_begin(j, "content_block_delta");
    jbuf_printf(b, "{\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":",
                state(j)->n_blocks - 1, delta_type, key);
    jbuf_str(b, p, n);
    jbuf_puts(b, "}}");
    tr_event_end(j);
}

static void out_reasoning(job_seq *s, const char *p, size_t n) {
    job *j = s->job;
    jbuf empty = {0};
    if (state(j)->open != BLOCK_THINKING) open_block(j, BLOCK_THINKING, block_thinking(&empty));
    block_delta(j, "thinking_delta", "thinking", p, n);
}

static void out_content(job_seq *s, const char *p, size_t n) {
    job *j = s->job;
    jbuf empty = {0};
    if (state(j)->open != BLOCK_TEXT) open_block(j, BLOCK_TEXT, block_textual(&empty));
    block_delta(j, "text_delta", "text", p, n);
}

static void out_call(job_seq *s, int index, const char *id, const char *name) {
    (void)index;
    job *j = s->job;
    tr_output *o = &state(j)->out;
    if (tr_output_call(o, id, name)) return;
    open_block(j, BLOCK_TOOL_USE, block_call(&o->calls[o->n_calls - 1], false));
}

static void out_args(job_seq *s, int index, const char *p, size_t n) {
    job *j = s->job;
    if (index != state(j)->out.n_calls - 1) return; /* out_call failed (out of memory) */
    block_delta(j, "input_json_delta", "partial_json", p, n);
}

static void out_finish(job_seq *s, const char *reason, bool with_timings) {
    (void)with_timings;
    job *j = s->job;
    msg_state *st = state(j);
    st->out.finish_reason = reason;
    jbuf empty = {0};
    if (reason && st->n_blocks == 0) open_block(j, BLOCK_TEXT, block_textual(&empty)); /* an empty answer */
    close_block(j);
}

static int msg_stream_open(job_seq *s) {
    job *j = s->job;
    cJSON *m = build_message(j, false);
    job_totals t = { .prompt_tokens = j->prompt_tokens };
    add_usage(m, &t, 0);
    cJSON *d = event_data("message_start");
    cJSON_AddItemToObject(d, "message", m);
    event(j, d);
    event(j, event_data("ping"));
    return 1;
}

static void msg_stream_flush(job_seq *s, bool with_timings) {
    static const chat_stream_ops events = {
        .reasoning = out_reasoning, .content = out_content, .call = out_call, .args = out_args,
        .finish = out_finish,
    };
    chat_stream_drive(s, &events, with_timings);
}

static void msg_stream_close(job *j, const job_totals *t) {
    if (j->unfinished_err.status) {
        event(j, anthropic_error_json(&j->unfinished_err)); /* {"type": "error", ...} */
        return;
    }
    cJSON *d = event_data("message_delta"), *delta = cJSON_AddObjectToObject(d, "delta");
    cJSON_AddStringToObject(delta, "stop_reason", stop_reason(j, state(j)->out.finish_reason));
    add_stop_sequence(delta, j);
    add_usage(d, t, t->completion_tokens);
    event(j, d);
    event(j, event_data("message_stop"));
}

static const job_ops *messages_ops(void) {
    static job_ops ops;
    if (!ops.parse) {
        ops = *chat_job_ops();
        ops.ollama_options = false; /* its own sampler fields only */
        ops.id_prefix = "msg";
        ops.object = ops.chunk_object = "message";
        ops.parse = msg_parse;
        ops.stream_open = msg_stream_open;
        ops.stream_flush = msg_stream_flush;
        ops.reply = msg_reply;
        ops.stream_close = msg_stream_close;
        ops.free = msg_free;
    }
    return &ops;
}

void anthropic_handle(http_req *req, void *ctx) {
    job_handle(req, ctx, messages_ops());
}

static void count_tokens(http_req *req, api_server *a, models_entry *m, const cJSON *body) {
    static job_ops count_ops;
    count_ops = *messages_ops();
    count_ops.parse = count_parse;
    params_error e;
    int n = 0;
    int rc = job_count_prompt(a, m, &count_ops, body, &n, &e);
    if (rc) {
        api_reply_error(a, req, &e);
        return;
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "input_tokens", n);
    api_reply_json(req, 200, r);
}

void anthropic_handle_count(http_req *req, void *ctx) {
    api_server *a = ctx;
    if (api_reply_if_loading(a, req)) return;
    cJSON *body = api_parse_body(a, req);
    if (body) api_with_model(a, req, body, MODELS_KEEP_UNCHANGED, count_tokens);
}
