/* api_responses.c -- the Responses API as a chat job: the request is
 * rewritten as a chat request body (translate), chat parses and runs it,
 * and its output is written as a `response` object or the Responses
 * events. One choice per request. */
#include "api_responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "translate.h"

#define STORE_MAX_RESPONSES 1024
#define STORE_MAX_BYTES ((size_t)64 << 20)

/* ---- the store ------------------------------------------------------------------- */

typedef struct resp_stored {
    struct resp_stored *newer;
    char id[48];
    char *response;          /* the response object's JSON (GET) */
    char *conversation;      /* chat messages JSON: inputs and output, instructions left out */
    size_t bytes;
} resp_stored;

typedef struct responses_store {
    resp_stored *oldest, *newest;
    int n;
    size_t bytes;
} responses_store;

static void stored_free(resp_stored *r) {
    cJSON_free(r->response);
    cJSON_free(r->conversation);
    free(r);
}

static void store_drop_oldest(responses_store *st) {
    resp_stored *r = st->oldest;
    st->oldest = r->newer;
    if (!st->oldest) st->newest = NULL;
    st->n--;
    st->bytes -= r->bytes;
    stored_free(r);
}

void responses_store_free(api_server *a) {
    responses_store *st = a->responses;
    while (st && st->oldest) store_drop_oldest(st);
    free(st);
    a->responses = NULL;
}

static const resp_stored *store_find(const api_server *a, const char *id) {
    for (const resp_stored *r = a->responses ? a->responses->oldest : NULL; r; r = r->newer)
        if (!strcmp(r->id, id)) return r;
    return NULL;
}

/* Whether id was stored (and is now gone). */
static bool store_remove(api_server *a, const char *id) {
    responses_store *st = a->responses;
    resp_stored *prev = NULL;
    for (resp_stored *r = st ? st->oldest : NULL; r; prev = r, r = r->newer) {
        if (strcmp(r->id, id)) continue;
        if (prev) prev->newer = r->newer;
        else st->oldest = r->newer;
        if (st->newest == r) st->newest = prev;
        st->n--;
        st->bytes -= r->bytes;
        stored_free(r);
        return true;
    }
    return false;
}

/* Takes response and conversation (cJSON_free'd); the oldest go to make room. */
static void store_add(api_server *a, const char *id, char *response, char *conversation) {
    size_t bytes = strlen(response) + strlen(conversation) + sizeof(resp_stored);
    resp_stored *r = bytes <= STORE_MAX_BYTES ? calloc(1, sizeof *r) : NULL;
    if (!a->responses) a->responses = calloc(1, sizeof *a->responses);
    responses_store *st = a->responses;
    if (!r || !st) {
        free(r);
        cJSON_free(response);
        cJSON_free(conversation);
        return;
    }
    snprintf(r->id, sizeof r->id, "%s", id);
    r->response = response;
    r->conversation = conversation;
    r->bytes = bytes;
    while (st->oldest && (st->n >= STORE_MAX_RESPONSES || st->bytes + bytes > STORE_MAX_BYTES))
        store_drop_oldest(st);
    if (st->newest) st->newest->newer = r;
    else st->oldest = r;
    st->newest = r;
    st->n++;
    st->bytes += bytes;
}

/* ---- the job's own state ----------------------------------------------------------- */

enum { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL };

typedef struct resp_state {
    cJSON *echo;             /* the response's fields that repeat the request */
    cJSON *conversation;     /* chat messages: the previous response's, then the input */
    bool store;
    bool summary;            /* reasoning.summary asked for */
    tr_output out;
    int seq_no;              /* stream: sequence_number of the next event */
    int n_items;             /* stream: output items opened */
    int open;                /* stream: the open item (ITEM_*) */
} resp_state;

static resp_state *state(job *j) {
    return j->ext;
}

/* ---- request translation -------------------------------------------------------------- */

/* Chat's names of the fields in the Responses API's terms, for errors. */
static const char *const renames[][2] = {
    { "max_completion_tokens", "max_output_tokens" }, { "response_format", "text.format" },
    { "reasoning_effort", "reasoning.effort" }, { "messages", "input" }, { NULL, NULL },
};

static int oom(params_error *e) {
    return params_fail(e, 500, NULL, NULL, "out of memory");
}

/* A content part list's texts as chat text parts; param names the list. */
static int text_parts(const cJSON *parts, const char *param, cJSON **out, params_error *e) {
    if (cJSON_IsString(parts)) {
        *out = cJSON_CreateString(parts->valuestring);
        return *out ? 0 : oom(e);
    }
    if (!cJSON_IsArray(parts))
        return params_fail(e, 400, param, "invalid_type", "'%s' must be a string or an array of content parts", param);
    *out = cJSON_CreateArray();
    int k = 0;
    for (const cJSON *p = parts->child; p; p = p->next, k++) {
        const cJSON *type = tr_given(p, "type"), *text = tr_given(p, "text");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal")) {
            cJSON_Delete(*out);
            return params_fail(e, 400, param, "unsupported_content_type",
                               "'%s[%d].type' is '%.40s'; only input_text and output_text parts are supported",
                               param, k, cJSON_IsString(type) ? t : "missing");
        }
        if (!strcmp(t, "refusal")) text = tr_given(p, "refusal");
        if (!cJSON_IsString(text)) {
            cJSON_Delete(*out);
            return params_fail(e, 400, param, "invalid_type", "'%s[%d].text' must be a string", param, k);
        }
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "text");
        cJSON_AddStringToObject(part, "text", text->valuestring);
        cJSON_AddItemToArray(*out, part);
    }
    return 0;
}

/* The assistant message a function_call item joins: the last message when
 * it is the assistant's, else a new one. */
static cJSON *assistant_for_calls(cJSON *msgs) {
    cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *role = tr_given(last, "role");
    if (!last || !cJSON_IsString(role) || strcmp(role->valuestring, "assistant")) {
        last = cJSON_CreateObject();
        cJSON_AddStringToObject(last, "role", "assistant");
        cJSON_AddNullToObject(last, "content");
        cJSON_AddItemToArray(msgs, last);
    }
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
    if (!cJSON_IsArray(calls)) {
        cJSON_DeleteItemFromObjectCaseSensitive(last, "tool_calls");
        calls = cJSON_AddArrayToObject(last, "tool_calls");
    }
    return calls;
}

static int need_string(const cJSON *item, const char *key, const char *param, const char **out,
                       params_error *e) {
    const cJSON *v = tr_given(item, key);
    if (!cJSON_IsString(v))
        return params_fail(e, 400, param, v ? "invalid_type" : "missing_required_parameter",
                           "'%s.%s' must be a string", param, key);
    *out = v->valuestring;
    return 0;
}

/* input[i] as chat messages appended to msgs. */
static int add_item(cJSON *msgs, const cJSON *item, int i, params_error *e) {
    char param[64], sub[80];
    snprintf(param, sizeof param, "input[%d]", i);
    if (!cJSON_IsObject(item)) return params_fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
    const cJSON *type = tr_given(item, "type");
    if (type && !cJSON_IsString(type)) return params_fail(e, 400, param, "invalid_type", "'%s.type' must be a string", param);
    const char *t = type ? type->valuestring : "message";
    if (!strcmp(t, "message")) {
        const char *role = NULL;
        if (need_string(item, "role", param, &role, e)) return -1;
        if (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer"))
            return params_fail(e, 400, param, "invalid_value",
                               "'%s.role' must be 'user', 'assistant', 'system' or 'developer'", param);
        cJSON *content = NULL;
        snprintf(sub, sizeof sub, "%s.content", param);
        if (text_parts(tr_given(item, "content"), sub, &content, e)) return -1;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", role);
        cJSON_AddItemToObject(m, "content", content);
        cJSON_AddItemToArray(msgs, m);
    } else if (!strcmp(t, "function_call")) {
        const char *call_id = NULL, *name = NULL, *args = NULL;
        if (need_string(item, "call_id", param, &call_id, e) || need_string(item, "name", param, &name, e) ||
            need_string(item, "arguments", param, &args, e))
            return -1;
        cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(call, "id", call_id);
        cJSON_AddStringToObject(call, "type", "function");
        cJSON_AddStringToObject(fn, "name", name);
        cJSON_AddStringToObject(fn, "arguments", args);
        cJSON_AddItemToObject(call, "function", fn);
        cJSON_AddItemToArray(assistant_for_calls(msgs), call);
    } else if (!strcmp(t, "function_call_output")) {
        const char *call_id = NULL;
        cJSON *content = NULL;
        snprintf(sub, sizeof sub, "%s.output", param);
        if (need_string(item, "call_id", param, &call_id, e) || text_parts(tr_given(item, "output"), sub, &content, e))
            return -1;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "tool");
        cJSON_AddStringToObject(m, "tool_call_id", call_id);
        cJSON_AddItemToObject(m, "content", content);
        cJSON_AddItemToArray(msgs, m);
    } else if (strcmp(t, "reasoning")) {
        /* reasoning items sent back are dropped, as chat templates drop past thinking */
        return params_fail(e, 400, param, "unsupported_value",
                           "'%s.type' is '%.40s'; supported input items are message, function_call, "
                           "function_call_output and reasoning", param, t);
    }
    return 0;
}

static int add_input(cJSON *msgs, const cJSON *input, params_error *e) {
    if (!input) return params_fail(e, 400, "input", "missing_required_parameter", "'input' is required");
    if (cJSON_IsString(input)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", input->valuestring);
        cJSON_AddItemToArray(msgs, m);
        return 0;
    }
    if (!cJSON_IsArray(input))
        return params_fail(e, 400, "input", "invalid_type", "'input' must be a string or an array of items");
    int i = 0;
    for (const cJSON *item = input->child; item; item = item->next, i++)
        if (add_item(msgs, item, i, e)) return -1;
    return 0;
}

/* tools: function tools, flat in this API, nested in chat's. */
static int translate_tools(const cJSON *body, cJSON *chat, params_error *e) {
    const cJSON *tools = tr_given(body, "tools");
    if (tools && !cJSON_IsArray(tools)) return params_fail(e, 400, "tools", "invalid_type", "'tools' must be an array");
    cJSON *list = cJSON_AddArrayToObject(chat, "tools");
    int k = 0;
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, k++) {
        const cJSON *type = tr_given(t, "type");
        char param[32];
        snprintf(param, sizeof param, "tools[%d].type", k);
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return params_fail(e, 400, param, "unsupported_value",
                               "'%s' is '%.40s'; only function tools are supported", param,
                               cJSON_IsString(type) ? type->valuestring : "missing");
        cJSON *fn = cJSON_CreateObject();
        for (const cJSON *f = t->child; f; f = f->next)
            if (strcmp(f->string, "type")) cJSON_AddItemToObject(fn, f->string, cJSON_Duplicate(f, 1));
        if (!tr_given(fn, "parameters")) { /* parameters: null means none */
            cJSON_DeleteItemFromObjectCaseSensitive(fn, "parameters");
            cJSON_AddItemToObject(fn, "parameters", cJSON_Parse("{\"type\":\"object\",\"properties\":{}}"));
        }
        cJSON *entry = cJSON_CreateObject();
        cJSON_AddStringToObject(entry, "type", "function");
        cJSON_AddItemToObject(entry, "function", fn);
        cJSON_AddItemToArray(list, entry);
    }
    const cJSON *choice = tr_given(body, "tool_choice");
    if (cJSON_IsObject(choice)) { /* {"type": "function", "name": N} */
        const cJSON *type = tr_given(choice, "type"), *name = tr_given(choice, "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
            return params_fail(e, 400, "tool_choice", "invalid_value",
                               "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}");
        cJSON *c = cJSON_AddObjectToObject(chat, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", name->valuestring);
    } else if (choice) {
        cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(choice, 1));
    }
    const cJSON *parallel = tr_given(body, "parallel_tool_calls");
    if (parallel) cJSON_AddItemToObject(chat, "parallel_tool_calls", cJSON_Duplicate(parallel, 1));
    return 0;
}

/* text.format as chat's response_format; reasoning.effort as reasoning_effort. */
static int translate_text_reasoning(const cJSON *body, resp_state *st, cJSON *chat, params_error *e) {
    const cJSON *text = tr_given(body, "text");
    if (text && !cJSON_IsObject(text)) return params_fail(e, 400, "text", "invalid_type", "'text' must be an object");
    for (const cJSON *f = text ? text->child : NULL; f; f = f->next) {
        if (!strcmp(f->string, "format") || cJSON_IsNull(f)) continue;
        if (!strcmp(f->string, "verbosity") && cJSON_IsString(f) && !strcmp(f->valuestring, "medium")) continue;
        char param[64];
        snprintf(param, sizeof param, "text.%.40s", f->string);
        return params_fail(e, 400, param, "unsupported_parameter", "'%s' is not supported by this server%s",
                           param, strcmp(f->string, "verbosity") ? "" : " (only \"medium\" is accepted)");
    }
    const cJSON *format = tr_given(text, "format");
    if (format) {
        const cJSON *type = tr_given(format, "type");
        if (!cJSON_IsString(type))
            return params_fail(e, 400, "text.format.type", "invalid_type", "'text.format' must be an object with a string 'type'");
        cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
        cJSON_AddStringToObject(rf, "type", type->valuestring);
        if (!strcmp(type->valuestring, "json_schema")) { /* flat here, nested in chat's */
            cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
            for (const cJSON *f = format->child; f; f = f->next)
                if (strcmp(f->string, "type")) cJSON_AddItemToObject(js, f->string, cJSON_Duplicate(f, 1));
        } else {
            for (const cJSON *f = format->child; f; f = f->next)
                if (strcmp(f->string, "type")) cJSON_AddItemToObject(rf, f->string, cJSON_Duplicate(f, 1));
        }
    }
    const cJSON *reasoning = tr_given(body, "reasoning");
    if (reasoning && !cJSON_IsObject(reasoning))
        return params_fail(e, 400, "reasoning", "invalid_type", "'reasoning' must be an object");
    for (const cJSON *f = reasoning ? reasoning->child : NULL; f; f = f->next) {
        char param[64];
        snprintf(param, sizeof param, "reasoning.%.40s", f->string);
        if (cJSON_IsNull(f)) continue;
        if (!strcmp(f->string, "effort")) {
            cJSON_AddItemToObject(chat, "reasoning_effort", cJSON_Duplicate(f, 1));
        } else if (!strcmp(f->string, "summary") || !strcmp(f->string, "generate_summary")) {
            if (!cJSON_IsString(f) || (strcmp(f->valuestring, "auto") && strcmp(f->valuestring, "concise") &&
                                       strcmp(f->valuestring, "detailed")))
                return params_fail(e, 400, param, "invalid_value", "'%s' must be 'auto', 'concise' or 'detailed'", param);
            st->summary = true;
        } else {
            return params_fail(e, 400, param, "unsupported_parameter", "'%s' is not supported by this server", param);
        }
    }
    return 0;
}

/* The response's fields that repeat the request, with the API's defaults. */
static cJSON *make_echo(const cJSON *body, bool store) {
    static const struct { const char *key, *dflt; } fields[] = {
        { "instructions", "null" }, { "max_output_tokens", "null" }, { "metadata", "{}" },
        { "parallel_tool_calls", "true" }, { "previous_response_id", "null" },
        { "reasoning", "{\"effort\":null,\"summary\":null}" }, { "temperature", "1" },
        { "text", "{\"format\":{\"type\":\"text\"}}" }, { "tool_choice", "\"auto\"" }, { "tools", "[]" },
        { "top_p", "1" }, { "truncation", "\"disabled\"" }, { "user", "null" },
    };
    cJSON *echo = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const cJSON *v = tr_given(body, fields[i].key);
        cJSON_AddItemToObject(echo, fields[i].key, v ? cJSON_Duplicate(v, 1) : cJSON_Parse(fields[i].dflt));
    }
    cJSON_AddBoolToObject(echo, "store", store);
    return echo;
}

static int translate(job *j, const cJSON *body, resp_state *st, cJSON *chat, params_error *e) {
    static const char *const own[] = {
        "input", "instructions", "max_output_tokens", "text", "tools", "tool_choice",
        "parallel_tool_calls", "reasoning", "store", "previous_response_id", "truncation", "include",
        "background", "max_tool_calls", "stream_options", "conversation", "prompt", "top_logprobs", NULL };
    if (tr_copy_fields(j->api, body, own, chat, e) ||
        tr_neutral_only(body, "truncation", "\"disabled\"", e) || tr_neutral_only(body, "include", "[]", e) ||
        tr_neutral_only(body, "background", "false", e) || tr_neutral_only(body, "max_tool_calls", "null", e) ||
        tr_neutral_only(body, "conversation", "null", e) || tr_neutral_only(body, "prompt", "null", e) ||
        tr_neutral_only(body, "top_logprobs", "0", e))
        return -1;
    const cJSON *so = tr_given(body, "stream_options");
    for (const cJSON *f = so ? so->child : NULL; f; f = f->next)
        if (strcmp(f->string, "include_obfuscation"))
            return params_fail(e, 400, "stream_options", "unsupported_parameter",
                               "'stream_options.%.40s' is not supported", f->string);
    st->store = true;
    if (params_get_bool(body, "store", &st->store, e)) return -1;
    const cJSON *max = tr_given(body, "max_output_tokens");
    if (max) cJSON_AddItemToObject(chat, "max_completion_tokens", cJSON_Duplicate(max, 1));
    if (translate_tools(body, chat, e) || translate_text_reasoning(body, st, chat, e)) return -1;

    cJSON *msgs = st->conversation = cJSON_CreateArray();
    const cJSON *prev = tr_given(body, "previous_response_id");
    if (prev) {
        if (!cJSON_IsString(prev))
            return params_fail(e, 400, "previous_response_id", "invalid_type", "'previous_response_id' must be a string");
        const resp_stored *r = store_find(j->api, prev->valuestring);
        if (!r)
            return params_fail(e, 404, "previous_response_id", "previous_response_not_found",
                               "Previous response with id '%.100s' not found (responses are kept in memory, "
                               "a bounded number, and not when sent with store: false)", prev->valuestring);
        cJSON *past = cJSON_Parse(r->conversation);
        if (!past) return oom(e);
        cJSON_Delete(msgs);
        msgs = st->conversation = past;
    }
    if (add_input(msgs, tr_given(body, "input"), e)) return -1;
    cJSON *chat_msgs = cJSON_AddArrayToObject(chat, "messages");
    const cJSON *instructions = tr_given(body, "instructions");
    if (instructions && !cJSON_IsString(instructions))
        return params_fail(e, 400, "instructions", "invalid_type", "'instructions' must be a string");
    if (instructions) {
        cJSON *sys = cJSON_CreateObject();
        cJSON_AddStringToObject(sys, "role", "system");
        cJSON_AddStringToObject(sys, "content", instructions->valuestring);
        cJSON_AddItemToArray(chat_msgs, sys);
    }
    for (const cJSON *m = msgs->child; m; m = m->next) cJSON_AddItemToArray(chat_msgs, cJSON_Duplicate(m, 1));
    st->echo = make_echo(body, st->store);
    return st->echo ? 0 : oom(e);
}

static void resp_free(job *j) {
    chat_job_ops()->free(j);
    resp_state *st = state(j);
    if (!st) return;
    cJSON_Delete(st->echo);
    cJSON_Delete(st->conversation);
    tr_output_free(&st->out);
    free(st);
}

static int resp_parse(job *j, const cJSON *body, params_error *e) {
    resp_state *st = j->ext = calloc(1, sizeof(resp_state));
    cJSON *chat = cJSON_CreateObject();
    if (!st || !chat) {
        cJSON_Delete(chat);
        return oom(e);
    }
    int rc = translate(j, body, st, chat, e);
    if (rc == 0) {
        rc = chat_parse(j, chat, e);
        if (rc) tr_rename_error(e, renames);
    }
    cJSON_Delete(chat);
    return rc;
}

/* ---- the response object ------------------------------------------------------------------ */

/* An output item's id: its kind, then the response id's number. */
static void item_id(char *out, size_t size, const job *j, const char *kind, int k) {
    const char *num = strchr(j->id, '-');
    if (k >= 0) snprintf(out, size, "%s_%s_%d", kind, num ? num + 1 : j->id, k);
    else snprintf(out, size, "%s_%s", kind, num ? num + 1 : j->id);
}

static cJSON *text_of(const jbuf *b) {
    return cJSON_CreateString(b->data ? b->data : "");
}

static cJSON *item_reasoning(job *j, const char *status) {
    resp_state *st = state(j);
    char id[64];
    item_id(id, sizeof id, j, "rs", -1);
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "type", "reasoning");
    cJSON_AddStringToObject(it, "id", id);
    cJSON *summary = cJSON_AddArrayToObject(it, "summary");
    if (st->summary) { /* no summarizer: the summary is the thinking itself */
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "type", "summary_text");
        cJSON_AddItemToObject(s, "text", text_of(&st->out.reasoning));
        cJSON_AddItemToArray(summary, s);
    }
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", "reasoning_text");
    cJSON_AddItemToObject(part, "text", text_of(&st->out.reasoning));
    cJSON_AddItemToArray(cJSON_AddArrayToObject(it, "content"), part);
    cJSON_AddStringToObject(it, "status", status);
    return it;
}

static cJSON *text_part(const jbuf *text) {
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", "output_text");
    cJSON_AddItemToObject(part, "text", text_of(text));
    cJSON_AddArrayToObject(part, "annotations");
    cJSON_AddArrayToObject(part, "logprobs");
    return part;
}

static cJSON *item_message(job *j, const char *status, bool with_part) {
    char id[64];
    item_id(id, sizeof id, j, "msg", -1);
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "type", "message");
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "status", status);
    cJSON_AddStringToObject(it, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (with_part) cJSON_AddItemToArray(content, text_part(&state(j)->out.content));
    return it;
}

static cJSON *item_call(job *j, int k, const char *status) {
    const tr_call *c = &state(j)->out.calls[k];
    char id[64];
    item_id(id, sizeof id, j, "fc", k);
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "call_id", c->id);
    cJSON_AddStringToObject(it, "name", c->name);
    cJSON_AddItemToObject(it, "arguments", text_of(&c->args));
    cJSON_AddStringToObject(it, "status", status);
    return it;
}

/* The response in its state: "in_progress" (no output yet), "completed",
 * "incomplete" (max_output_tokens) or "failed". */
static cJSON *build_response(job *j, const char *status, const job_totals *t) {
    resp_state *st = state(j);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", j->id);
    cJSON_AddStringToObject(r, "object", "response");
    cJSON_AddNumberToObject(r, "created_at", (double)j->created);
    cJSON_AddStringToObject(r, "status", status);
    cJSON_AddBoolToObject(r, "background", false);
    if (!strcmp(status, "failed")) {
        cJSON *err = cJSON_AddObjectToObject(r, "error");
        cJSON_AddStringToObject(err, "code", j->unfinished_err.code ? j->unfinished_err.code : "server_error");
        cJSON_AddStringToObject(err, "message", j->unfinished_err.message);
    } else {
        cJSON_AddNullToObject(r, "error");
    }
    if (!strcmp(status, "incomplete"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "incomplete_details"), "reason", "max_output_tokens");
    else
        cJSON_AddNullToObject(r, "incomplete_details");
    cJSON_AddStringToObject(r, "model", j->model->id);
    cJSON *output = cJSON_AddArrayToObject(r, "output");
    if (strcmp(status, "in_progress")) {
        const char *item_status = !strcmp(status, "completed") ? "completed" : "incomplete";
        if (st->out.reasoning.len) cJSON_AddItemToArray(output, item_reasoning(j, item_status));
        if (st->out.content.len || !st->out.n_calls) cJSON_AddItemToArray(output, item_message(j, item_status, true));
        for (int k = 0; k < st->out.n_calls; k++) cJSON_AddItemToArray(output, item_call(j, k, "completed"));
    }
    for (const cJSON *f = st->echo->child; f; f = f->next)
        cJSON_AddItemToObject(r, f->string, cJSON_Duplicate(f, 1));
    if (t) {
        cJSON *u = cJSON_AddObjectToObject(r, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", t->prompt_tokens);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", t->cached_tokens);
        cJSON_AddNumberToObject(u, "output_tokens", t->completion_tokens);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", t->reasoning_tokens);
        cJSON_AddNumberToObject(u, "total_tokens", t->prompt_tokens + t->completion_tokens);
    } else {
        cJSON_AddNullToObject(r, "usage");
    }
    return r;
}

static const char *final_status(const job *j, const resp_state *st) {
    if (j->unfinished_err.status || !st->out.finish_reason) return "failed";
    return !strcmp(st->out.finish_reason, "length") ? "incomplete" : "completed";
}

/* Keeps a finished response for previous_response_id and GET: its JSON and
 * the conversation with its output as the assistant's message. */
static void keep(job *j, const cJSON *response) {
    resp_state *st = state(j);
    if (!st->store || strcmp(cJSON_GetObjectItem(response, "status")->valuestring, "failed") == 0) return;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    if (st->out.content.len || !st->out.n_calls) cJSON_AddItemToObject(m, "content", text_of(&st->out.content));
    else cJSON_AddNullToObject(m, "content");
    if (st->out.n_calls) {
        cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
        for (int k = 0; k < st->out.n_calls; k++) {
            cJSON *c = cJSON_CreateObject(), *fn = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "id", st->out.calls[k].id);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON_AddStringToObject(fn, "name", st->out.calls[k].name);
            cJSON_AddItemToObject(fn, "arguments", text_of(&st->out.calls[k].args));
            cJSON_AddItemToObject(c, "function", fn);
            cJSON_AddItemToArray(calls, c);
        }
    }
    cJSON_AddItemToArray(st->conversation, m);
    char *resp_text = cJSON_PrintUnformatted(response), *conv = cJSON_PrintUnformatted(st->conversation);
    if (resp_text && conv) {
        store_add(j->api, j->id, resp_text, conv);
    } else {
        cJSON_free(resp_text);
        cJSON_free(conv);
    }
}

static void resp_reply(job *j, const job_totals *t, jbuf *b) {
    resp_state *st = state(j);
    if (tr_output_from_seq(&st->out, job_seq_at(j, 0))) {
        b->oom = true;
        return;
    }
    cJSON *r = build_response(j, final_status(j, st), t);
    char *text = cJSON_PrintUnformatted(r);
    if (text) jbuf_puts(b, text);
    else b->oom = true;
    cJSON_free(text);
    keep(j, r);
    cJSON_Delete(r);
}

/* ---- the event stream -------------------------------------------------------------------- */

/* Starts event `type` with its type and sequence number; the caller adds
 * ",FIELD:..." and calls ev_end. */
static jbuf *ev_begin(job *j, const char *type) {
    jbuf *b = tr_event_begin(j, type);
    jbuf_printf(b, "{\"type\":\"%s\",\"sequence_number\":%d", type, state(j)->seq_no++);
    return b;
}

static void ev_end(job *j) {
    jbuf_puts(&j->chunk, "}");
    tr_event_end(j);
}

/* ,"key":VALUE for value (freed). */
static void ev_json(jbuf *b, const char *key, cJSON *value) {
    char *text = cJSON_PrintUnformatted(value);
    cJSON_Delete(value);
    jbuf_printf(b, ",\"%s\":%s", key, text ? text : "null");
    cJSON_free(text);
}

static void ev_item(job *j, const char *type, cJSON *item) {
    jbuf *b = ev_begin(j, type);
    jbuf_printf(b, ",\"output_index\":%d", state(j)->n_items - 1);
    ev_json(b, "item", item);
    ev_end(j);
}

/* ,"item_id":ID,"output_index":N for the open item */
static void ev_where(job *j, jbuf *b, const char *kind, int k) {
    char id[64];
    item_id(id, sizeof id, j, kind, k);
    jbuf_printf(b, ",\"item_id\":\"%s\",\"output_index\":%d", id, state(j)->n_items - 1);
}

static void close_item(job *j) {
    resp_state *st = state(j);
    const char *reason = st->out.finish_reason; /* set once the choice is done */
    const char *status = reason && !strcmp(reason, "length") ? "incomplete" : "completed";
    jbuf *b;
    switch (st->open) {
    case ITEM_REASONING:
        b = ev_begin(j, "response.reasoning_text.done");
        ev_where(j, b, "rs", -1);
        jbuf_puts(b, ",\"content_index\":0,\"text\":");
        jbuf_str(b, st->out.reasoning.data ? st->out.reasoning.data : "", st->out.reasoning.len);
        ev_end(j);
        ev_item(j, "response.output_item.done", item_reasoning(j, status));
        break;
    case ITEM_MESSAGE:
        b = ev_begin(j, "response.output_text.done");
        ev_where(j, b, "msg", -1);
        jbuf_puts(b, ",\"content_index\":0,\"logprobs\":[],\"text\":");
        jbuf_str(b, st->out.content.data ? st->out.content.data : "", st->out.content.len);
        ev_end(j);
        b = ev_begin(j, "response.content_part.done");
        ev_where(j, b, "msg", -1);
        jbuf_puts(b, ",\"content_index\":0");
        ev_json(b, "part", text_part(&st->out.content));
        ev_end(j);
        ev_item(j, "response.output_item.done", item_message(j, status, true));
        break;
    case ITEM_CALL: {
        int k = st->out.n_calls - 1;
        const tr_call *c = &st->out.calls[k];
        b = ev_begin(j, "response.function_call_arguments.done");
        ev_where(j, b, "fc", k);
        jbuf_puts(b, ",\"name\":");
        jbuf_str(b, c->name, strlen(c->name));
        jbuf_puts(b, ",\"arguments\":");
        jbuf_str(b, c->args.data ? c->args.data : "", c->args.len);
        ev_end(j);
        ev_item(j, "response.output_item.done", item_call(j, k, "completed"));
        break;
    }
    }
    st->open = ITEM_NONE;
}

/* Opens an item of the kind unless it is open. */
static void open_item(job *j, int kind) {
    resp_state *st = state(j);
    if (st->open == kind && kind != ITEM_CALL) return;
    close_item(j);
    st->open = kind;
    st->n_items++;
    if (kind == ITEM_REASONING) {
        ev_item(j, "response.output_item.added", item_reasoning(j, "in_progress"));
    } else if (kind == ITEM_MESSAGE) {
        ev_item(j, "response.output_item.added", item_message(j, "in_progress", false));
        jbuf *b = ev_begin(j, "response.content_part.added");
        ev_where(j, b, "msg", -1);
        jbuf_puts(b, ",\"content_index\":0");
        ev_json(b, "part", text_part(&st->out.content));
        ev_end(j);
    } else {
        ev_item(j, "response.output_item.added", item_call(j, st->out.n_calls - 1, "in_progress"));
    }
}

static void out_reasoning(job_seq *s, const char *p, size_t n) {
    job *j = s->job;
    open_item(j, ITEM_REASONING);
    jbuf_raw(&state(j)->out.reasoning, p, n);
    jbuf *b = ev_begin(j, "response.reasoning_text.delta");
    ev_where(j, b, "rs", -1);
    jbuf_puts(b, ",\"content_index\":0,\"delta\":");
    jbuf_str(b, p, n);
    ev_end(j);
}

static void out_content(job_seq *s, const char *p, size_t n) {
    job *j = s->job;
    open_item(j, ITEM_MESSAGE);
    jbuf_raw(&state(j)->out.content, p, n);
    jbuf *b = ev_begin(j, "response.output_text.delta");
    ev_where(j, b, "msg", -1);
    jbuf_puts(b, ",\"content_index\":0,\"logprobs\":[],\"delta\":");
    jbuf_str(b, p, n);
    ev_end(j);
}

static void out_call(job_seq *s, int index, const char *id, const char *name) {
    (void)index;
    job *j = s->job;
    close_item(j);
    if (tr_output_call(&state(j)->out, id, name)) return;
    open_item(j, ITEM_CALL);
}

static void out_args(job_seq *s, int index, const char *p, size_t n) {
    job *j = s->job;
    resp_state *st = state(j);
    if (index != st->out.n_calls - 1) return; /* out_call failed (out of memory) */
    jbuf_raw(&st->out.calls[index].args, p, n);
    jbuf *b = ev_begin(j, "response.function_call_arguments.delta");
    ev_where(j, b, "fc", index);
    jbuf_puts(b, ",\"delta\":");
    jbuf_str(b, p, n);
    ev_end(j);
}

static void out_finish(job_seq *s, const char *reason, bool with_timings) {
    (void)with_timings;
    job *j = s->job;
    resp_state *st = state(j);
    st->out.finish_reason = reason;
    if (reason && !st->out.n_calls && st->n_items == (st->out.reasoning.len > 0))
        open_item(j, ITEM_MESSAGE); /* an empty answer is still a message */
    close_item(j);
}

static int resp_stream_open(job_seq *s) {
    job *j = s->job;
    cJSON *r = build_response(j, "in_progress", NULL);
    jbuf *b = ev_begin(j, "response.created");
    ev_json(b, "response", cJSON_Duplicate(r, 1));
    ev_end(j);
    b = ev_begin(j, "response.in_progress");
    ev_json(b, "response", r);
    ev_end(j);
    return 1;
}

static void resp_stream_flush(job_seq *s, bool with_timings) {
    static const chat_stream_ops events = {
        .reasoning = out_reasoning, .content = out_content, .call = out_call, .args = out_args,
        .finish = out_finish,
    };
    chat_stream_drive(s, &events, with_timings);
}

static void resp_stream_close(job *j, const job_totals *t) {
    const char *status = final_status(j, state(j));
    cJSON *r = build_response(j, status, t);
    keep(j, r);
    jbuf *b = ev_begin(j, !strcmp(status, "completed") ? "response.completed"
                        : !strcmp(status, "incomplete") ? "response.incomplete" : "response.failed");
    ev_json(b, "response", r);
    ev_end(j);
}

static const job_ops *responses_ops(void) {
    static job_ops ops;
    if (!ops.parse) {
        ops = *chat_job_ops();
        ops.ollama_options = false; /* its own sampler fields only */
        ops.id_prefix = "resp";
        ops.object = ops.chunk_object = "response";
        ops.prompt_param = "input";
        ops.parse = resp_parse;
        ops.stream_open = resp_stream_open;
        ops.stream_flush = resp_stream_flush;
        ops.reply = resp_reply;
        ops.stream_close = resp_stream_close;
        ops.free = resp_free;
    }
    return &ops;
}

void responses_handle(http_req *req, void *ctx) {
    job_handle(req, ctx, responses_ops());
}

void responses_handle_get(http_req *req, void *ctx) {
    api_server *a = ctx;
    const char *id = http_req_path(req) + strlen("/v1/responses/");
    const resp_stored *r = store_find(a, id);
    if (!r) {
        params_error e;
        params_fail(&e, 404, NULL, "not_found", "Response with id '%.100s' not found", id);
        api_reply_error(a, req, &e);
        return;
    }
    http_reply(req, 200, "application/json", r->response, strlen(r->response));
}

void responses_handle_delete(http_req *req, void *ctx) {
    api_server *a = ctx;
    const char *id = http_req_path(req) + strlen("/v1/responses/");
    if (!store_remove(a, id)) {
        params_error e;
        params_fail(&e, 404, NULL, "not_found", "Response with id '%.100s' not found", id);
        api_reply_error(a, req, &e);
        return;
    }
    char body[160];
    int n = snprintf(body, sizeof body, "{\"id\":\"%s\",\"object\":\"response.deleted\",\"deleted\":true}", id);
    http_reply(req, 200, "application/json", body, (size_t)n);
}
