/* tools.c -- tool definitions to a system text and a grammar; calls in
 * messages to text; calls in generated text back to JSON. */
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define CALL_OPEN "<tool_call>\n"
#define CALL_CLOSE "\n</tool_call>"

static const cJSON *given(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

void tools_free(chat_tools *t) {
    free(t->system);
    free(t->tools_json);
    cJSON_Delete(t->defs);
    compile_spec_free(t->spec);
    memset(t, 0, sizeof *t);
}

/* GBNF for one call of tool k: the fixed JSON envelope around its arguments. */
static int call_rule(jbuf *g, const char *name, const cJSON *params, int k, params_error *e) {
    char *schema = cJSON_PrintUnformatted(params);
    if (!schema) return params_fail(e, 500, "tools", NULL, "out of memory");
    char prefix[32], param[64];
    snprintf(prefix, sizeof prefix, "t%d-", k);
    gl_error err = {{0}};
    char *rules = gl_json_schema_to_gbnf(schema, strlen(schema), prefix, &err);
    free(schema);
    if (!rules) {
        snprintf(param, sizeof param, "tools[%d].function.parameters", k);
        return params_fail(e, 400, param, "invalid_schema", "'%s': %s", param, err.message);
    }
    jbuf_puts(g, rules);
    free(rules);
    /* "{\"name\": \"NAME\", \"arguments\": " as a GBNF literal: the name's JSON spelling, escaped again */
    cJSON *jname = cJSON_CreateString(name);
    char *quoted = jname ? cJSON_PrintUnformatted(jname) : NULL;
    cJSON_Delete(jname);
    if (!quoted) return params_fail(e, 500, "tools", NULL, "out of memory");
    jbuf_printf(g, "t%d-call ::= \"{\\\"name\\\": ", k);
    for (const char *c = quoted; *c; c++) {
        if (*c == '"' || *c == '\\') jbuf_printf(g, "\\%c", *c);
        else jbuf_raw(g, c, 1);
    }
    free(quoted);
    jbuf_printf(g, ", \\\"arguments\\\": \" t%d-root \"}\"\n", k);
    return 0;
}

/* The reply's grammar, built on a compile thread (compile.h): the calls
 * allowed, then the envelope. */
typedef struct tools_spec {
    compile_spec base;       /* first */
    cJSON *tools;            /* [{type, function}], checked */
    char *named;             /* tool_choice names this function, or NULL */
    bool many;               /* parallel_tool_calls */
    bool text_allowed;       /* "auto": free text instead of calls */
} tools_spec;

static gl_grammar *tools_build(compile_spec *self, params_error *e) {
    tools_spec *ts = (tools_spec *)self;
    jbuf g = {0}, rules = {0};
    jbuf_puts(&rules, "call ::= ");
    int first = 1, k = 0, rc = 0;
    for (const cJSON *t = ts->tools->child; t && rc == 0; t = t->next, k++) {
        const cJSON *fn = given(t, "function");
        const char *name = given(fn, "name")->valuestring;
        if (ts->named && strcmp(ts->named, name)) continue;
        rc = call_rule(&g, name, given(fn, "parameters"), k, e);
        jbuf_printf(&rules, "%st%d-call", first ? "" : " | ", k);
        first = 0;
    }
    gl_grammar *grammar = NULL;
    if (rc == 0) {
        jbuf_printf(&rules, "\none-call ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n"
                            "calls-all ::= one-call%s\n", ts->many ? " (\"\\n\" one-call){0,7}" : "");
        jbuf_printf(&rules, "root ::= calls-all%s\n", ts->text_allowed ? " | [^<] .*" : "");
        jbuf_puts(&rules, gl_json_schema_gbnf_common());
        jbuf full = {0};
        jbuf_raw(&full, g.data ? g.data : "", g.len);
        jbuf_raw(&full, rules.data, rules.len);
        gl_error err = {{0}};
        grammar = full.oom ? NULL : gl_grammar_from_gbnf(full.data, full.len, &err);
        if (!grammar) params_fail(e, 400, "tools", "invalid_value", "tools: %s", full.oom ? "out of memory" : err.message);
        jbuf_free(&full);
    }
    jbuf_free(&rules);
    jbuf_free(&g);
    return grammar;
}

static void tools_spec_destroy(compile_spec *self) {
    tools_spec *ts = (tools_spec *)self;
    cJSON_Delete(ts->tools);
    free(ts->named);
    free(ts);
}

int tools_parse(const cJSON *body, chat_tools *out, params_error *e) {
    memset(out, 0, sizeof *out);
    const cJSON *tools = given(body, "tools"), *choice = given(body, "tool_choice");
    const cJSON *parallel = given(body, "parallel_tool_calls");
    if (parallel && !cJSON_IsBool(parallel))
        return params_fail(e, 400, "parallel_tool_calls", "invalid_type", "'parallel_tool_calls' must be a boolean");
    if (tools && !cJSON_IsArray(tools))
        return params_fail(e, 400, "tools", "invalid_type", "'tools' must be an array");
    int n = tools ? cJSON_GetArraySize(tools) : 0;
    if (n > 128) return params_fail(e, 400, "tools", "invalid_value", "at most 128 tools");
    const char *mode = "auto", *named = NULL;
    if (cJSON_IsString(choice)) {
        mode = choice->valuestring;
        if (strcmp(mode, "none") && strcmp(mode, "auto") && strcmp(mode, "required"))
            return params_fail(e, 400, "tool_choice", "invalid_value",
                               "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (choice) {
        const cJSON *type = cJSON_IsObject(choice) ? given(choice, "type") : NULL;
        const cJSON *fn = cJSON_IsObject(choice) ? given(choice, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? given(fn, "name") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
            return params_fail(e, 400, "tool_choice", "invalid_value",
                               "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        mode = "named";
        named = name->valuestring;
    }
    if (n == 0) {
        if (choice && strcmp(mode, "none"))
            return params_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' needs 'tools'");
        return 0;
    }
    jbuf desc = {0};
    cJSON *list = cJSON_CreateArray();
    int found = named ? -1 : 0, rc = 0, k = 0;
    char param[64];
    for (const cJSON *t = tools->child; t && rc == 0; t = t->next, k++) {
        const cJSON *type = cJSON_IsObject(t) ? given(t, "type") : NULL;
        const cJSON *fn = cJSON_IsObject(t) ? given(t, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? given(fn, "name") : NULL;
        const cJSON *params = cJSON_IsObject(fn) ? given(fn, "parameters") : NULL;
        snprintf(param, sizeof param, "tools[%d]", k);
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            rc = params_fail(e, 400, param, "invalid_value", "'%s.type' must be 'function'", param);
        else if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 64)
            rc = params_fail(e, 400, param, "invalid_value", "'%s.function.name' must be a string of 1 to 64 characters", param);
        else if (!cJSON_IsObject(params))
            rc = params_fail(e, 400, param, "missing_required_parameter",
                             "'%s.function.parameters' must be a JSON schema object", param);
        for (const cJSON *prev = list->child; prev && !rc; prev = prev->next)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(prev, "function"), "name")
                            ->valuestring, name->valuestring))
                rc = params_fail(e, 400, param, "invalid_value", "'%s.function.name': '%.64s' names two tools", param,
                                 name->valuestring);
        if (rc) break;
        if (named && !strcmp(named, name->valuestring)) found = k;
        cJSON *entry = cJSON_CreateObject();
        cJSON_AddStringToObject(entry, "type", "function");
        cJSON_AddItemToObject(entry, "function", cJSON_Duplicate(fn, 1));
        cJSON_AddItemToArray(list, entry);
    }
    if (rc == 0 && named && found < 0)
        rc = params_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' names function '%.64s', which is not in 'tools'", named);
    out->listed = true;
    out->active = rc == 0 && strcmp(mode, "none");
    if (rc == 0) {
        jbuf_puts(&desc, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                         "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n");
        for (const cJSON *t = list->child; t; t = t->next) {
            char *one = cJSON_PrintUnformatted(t);
            if (one) jbuf_puts(&desc, one);
            jbuf_puts(&desc, "\n");
            free(one);
        }
        jbuf_puts(&desc, "</tools>\n\nFor each function call, return a json object with function name and arguments "
                         "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                         "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
        out->system = desc.data ? desc.data : strdup("");
        desc.data = NULL;
        out->tools_json = cJSON_PrintUnformatted(list);
        out->defs = cJSON_Duplicate(list, 1);
        out->one_call = parallel && !cJSON_IsTrue(parallel);
        out->free_text = !strcmp(mode, "auto");
        if (!out->system || !out->tools_json || !out->defs) rc = params_fail(e, 500, "tools", NULL, "out of memory");
    }
    if (rc == 0 && out->active) {
        tools_spec *ts = calloc(1, sizeof *ts);
        if (ts) {
            ts->base.build = tools_build;
            ts->base.destroy = tools_spec_destroy;
            snprintf(ts->base.param, sizeof ts->base.param, "tools");
            ts->tools = cJSON_Duplicate(list, 1);
            ts->named = named ? strdup(named) : NULL;
            ts->many = !parallel || cJSON_IsTrue(parallel);
            ts->text_allowed = !strcmp(mode, "auto");
        }
        if (!ts || !ts->tools || (named && !ts->named)) {
            compile_spec_free(ts ? &ts->base : NULL);
            rc = params_fail(e, 500, "tools", NULL, "out of memory");
        } else {
            out->spec = &ts->base;
        }
    }
    jbuf_free(&desc);
    cJSON_Delete(list);
    if (rc) tools_free(out);
    return rc;
}

char *tools_render_calls(const char *content, const cJSON *tool_calls, int i, params_error *e) {
    jbuf b = {0};
    char param[80];
    if (content) jbuf_puts(&b, content);
    int k = 0;
    for (const cJSON *c = tool_calls->child; c; c = c->next, k++) {
        const cJSON *fn = cJSON_IsObject(c) ? given(c, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? given(fn, "name") : NULL;
        const cJSON *args = cJSON_IsObject(fn) ? given(fn, "arguments") : NULL;
        snprintf(param, sizeof param, "messages[%d].tool_calls[%d]", i, k);
        if (!cJSON_IsString(name) || (args && !cJSON_IsString(args))) {
            jbuf_free(&b);
            params_fail(e, 400, param, "invalid_value",
                        "'%s' must have function.name and function.arguments (a JSON string)", param);
            return NULL;
        }
        cJSON *parsed = args ? cJSON_Parse(args->valuestring) : cJSON_CreateObject();
        if (!parsed) {
            jbuf_free(&b);
            params_fail(e, 400, param, "invalid_value", "'%s.function.arguments' is not valid JSON", param);
            return NULL;
        }
        cJSON *call = cJSON_CreateObject();
        cJSON_AddStringToObject(call, "name", name->valuestring);
        cJSON_AddItemToObject(call, "arguments", parsed);
        char *text = cJSON_PrintUnformatted(call);
        cJSON_Delete(call);
        if (b.len) jbuf_puts(&b, "\n");
        jbuf_puts(&b, CALL_OPEN);
        if (text) jbuf_puts(&b, text);
        jbuf_puts(&b, CALL_CLOSE);
        free(text);
    }
    if (!b.data) return strdup("");
    return b.data;
}

int tools_message_fields(const cJSON *m, int i, char **out, params_error *e) {
    *out = NULL;
    char param[80];
    cJSON *fields = cJSON_CreateObject();
    if (!fields) return params_fail(e, 500, "messages", NULL, "out of memory");
    const cJSON *calls = given(m, "tool_calls");
    if (cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0) {
        cJSON *copy = cJSON_Duplicate(calls, 1);
        cJSON_AddItemToObject(fields, "tool_calls", copy);
        int k = 0;
        for (cJSON *c = copy ? copy->child : NULL; c; c = c->next, k++) {
            cJSON *fn = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "function") : NULL;
            const cJSON *name = cJSON_IsObject(fn) ? given(fn, "name") : NULL;
            const cJSON *args = cJSON_IsObject(fn) ? given(fn, "arguments") : NULL;
            snprintf(param, sizeof param, "messages[%d].tool_calls[%d]", i, k);
            cJSON *parsed = NULL;
            if (!cJSON_IsString(name) || (args && !cJSON_IsString(args))) {
                params_fail(e, 400, param, "invalid_value",
                            "'%s' must have function.name and function.arguments (a JSON string)", param);
            } else if (!(parsed = args ? cJSON_Parse(args->valuestring) : cJSON_CreateObject())) {
                params_fail(e, 400, param, "invalid_value", "'%s.function.arguments' is not valid JSON", param);
            } else {
                cJSON_DeleteItemFromObjectCaseSensitive(fn, "arguments");
                cJSON_AddItemToObject(fn, "arguments", parsed);
                continue;
            }
            cJSON_Delete(fields);
            return -1;
        }
    }
    for (const char *const *key = (const char *const[]){"tool_call_id", "name", NULL}; *key; key++) {
        const cJSON *v = given(m, *key);
        if (cJSON_IsString(v)) cJSON_AddStringToObject(fields, *key, v->valuestring);
    }
    if (fields->child) {
        *out = cJSON_PrintUnformatted(fields);
        if (!*out) {
            cJSON_Delete(fields);
            return params_fail(e, 500, "messages", NULL, "out of memory");
        }
    }
    cJSON_Delete(fields);
    return 0;
}

char *tools_render_result(const char *content) {
    jbuf b = {0};
    jbuf_puts(&b, "<tool_response>\n");
    jbuf_puts(&b, content ? content : "");
    jbuf_puts(&b, "\n</tool_response>");
    return b.data;
}

bool tools_is_call_text(const char *text, size_t len) { return len > 0 && text[0] == '<'; }

/* The envelope of each call, as the grammar writes it (tools_parse). */
#define HEAD_OPEN "<tool_call>\n{\"name\": "
#define HEAD_ARGS ", \"arguments\": "

enum { R_HEAD, R_ARGS, R_TAIL };

void tools_reader_feed(tools_reader *r, const char *text, size_t len, const tools_reader_ops *ops, void *ctx) {
    const size_t lo = strlen(HEAD_OPEN), la = strlen(HEAD_ARGS), lc = strlen(CALL_CLOSE);
    while (r->pos < len) {
        const char *p = text + r->pos;
        size_t left = len - r->pos;
        if (r->state == R_HEAD) {
            size_t sep = r->index > 0 && p[0] == '\n'; /* between calls */
            if (left < sep + lo) return;
            if (memcmp(p + sep, HEAD_OPEN, lo)) { r->pos = len; return; } /* not a call: nothing more to read */
            const char *q = p + sep + lo, *end = text + len;
            if (*q != '"') { r->pos = len; return; }
            for (q++; q < end && *q != '"'; q++)
                if (*q == '\\') q++;
            if (q >= end || (size_t)(end - (q + 1)) < la) return; /* the name or what follows is not complete */
            if (memcmp(q + 1, HEAD_ARGS, la)) { r->pos = len; return; }
            const char *name_at = p + sep + lo;
            cJSON *name = cJSON_ParseWithLength(name_at, (size_t)(q + 1 - name_at));
            ops->call(ctx, r->index, cJSON_IsString(name) ? name->valuestring : "");
            cJSON_Delete(name);
            r->pos = (size_t)(q + 1 + la - text);
            r->state = R_ARGS;
            r->depth = 0;
            r->in_str = r->esc = false;
        } else if (r->state == R_ARGS) {
            /* up to the end of the arguments' value; the envelope's '}' follows it */
            size_t i = 0, run = 0; /* run: first byte of the stretch to pass on */
            bool done = false;
            for (; i < left && !done; i++) {
                char c = p[i];
                bool keep = true, before = false;
                if (r->in_str) {
                    if (r->esc) r->esc = false;
                    else if (c == '\\') r->esc = true;
                    else if (c == '"') { r->in_str = false; done = r->depth == 0; }
                } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
                    keep = false;
                } else if (c == '"') {
                    r->in_str = true;
                } else if (c == '{' || c == '[') {
                    r->depth++;
                } else if (c == '}' || c == ']') {
                    if (r->depth == 0) keep = false, before = done = true; /* a bare scalar ended */
                    else done = --r->depth == 0;
                }
                if (!keep) {
                    if (i > run) ops->args(ctx, r->index, p + run, i - run);
                    run = i + 1;
                }
                if (before) break; /* i stays at the envelope's '}' */
            }
            if (i > run) ops->args(ctx, r->index, p + run, i - run);
            r->pos += i;
            if (done) r->state = R_TAIL;
        } else {
            /* "}\n</tool_call>", then maybe the next call */
            if (p[0] == ' ' || p[0] == '\n') { r->pos++; continue; }
            if (left < 1 + lc) return;
            if (p[0] != '}' || memcmp(p + 1, CALL_CLOSE, lc)) { r->pos = len; return; }
            r->pos += 1 + lc;
            ops->end(ctx, r->index);
            r->index++;
            r->state = R_HEAD;
        }
    }
}

typedef struct extract_ctx {
    tool_call *calls;
    int n, cap;              /* complete calls, allocated */
    jbuf args;               /* of the call being read */
    char *name;
    bool oom;
} extract_ctx;

static void ex_call(void *c, int index, const char *name) {
    extract_ctx *x = c;
    (void)index;
    free(x->name);
    x->name = strdup(name);
    jbuf_clear(&x->args);
}

static void ex_args(void *c, int index, const char *p, size_t n) {
    (void)index;
    jbuf_raw(&((extract_ctx *)c)->args, p, n);
}

static void ex_end(void *c, int index) {
    extract_ctx *x = c;
    (void)index;
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 4;
        tool_call *grown = realloc(x->calls, (size_t)cap * sizeof *grown);
        if (!grown) { x->oom = true; return; }
        x->calls = grown;
        x->cap = cap;
    }
    char *args = malloc(x->args.len + 1);
    if (!args || !x->name || x->args.oom) { free(args); x->oom = true; return; }
    memcpy(args, x->args.data ? x->args.data : "", x->args.len);
    args[x->args.len] = 0;
    x->calls[x->n++] = (tool_call){x->name, args};
    x->name = NULL;
}

tool_call *tools_extract(const char *text, size_t len, int *n) {
    static const tools_reader_ops ops = {ex_call, ex_args, ex_end};
    extract_ctx x = {0};
    tools_reader r = {0};
    tools_reader_feed(&r, text, len, &ops, &x);
    free(x.name);
    jbuf_free(&x.args);
    *n = x.n;
    return x.calls;
}

void tools_calls_free(tool_call *calls, int n) {
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

/* ---- calls in the forms models write them ------------------------------------------ */

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    return p;
}

static bool starts(const char *p, const char *end, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(end - p) >= n && !memcmp(p, lit, n);
}

/* The tool named `name` among defs, or NULL. */
static const cJSON *find_tool(const cJSON *defs, const char *name) {
    for (const cJSON *t = defs ? defs->child : NULL; t; t = t->next) {
        const cJSON *fn = given(t, "function");
        const cJSON *n = fn ? given(fn, "name") : NULL;
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return fn;
    }
    return NULL;
}

typedef struct call_list {
    tool_call *calls;
    int n, cap;
    bool bad;                /* something that is not a call of a known tool */
} call_list;

/* One call object: {"name", "arguments" | "parameters"} (arguments an
 * object, or its JSON text), or OpenAI's {"type": "function", "function":
 * {...}}. It counts when it names a tool and its arguments are an object
 * holding the parameters' required properties. */
static void add_call(call_list *l, const cJSON *defs, const cJSON *obj) {
    const cJSON *fn = cJSON_IsObject(obj) ? given(obj, "function") : NULL;
    if (cJSON_IsObject(fn) && given(fn, "name")) obj = fn;
    const cJSON *name = cJSON_IsObject(obj) ? given(obj, "name") : NULL;
    const cJSON *args = cJSON_IsObject(obj) ? given(obj, "arguments") : NULL;
    if (!args && cJSON_IsObject(obj)) args = given(obj, "parameters");
    const cJSON *tool = cJSON_IsString(name) ? find_tool(defs, name->valuestring) : NULL;
    cJSON *parsed = NULL;
    if (cJSON_IsString(args)) args = parsed = cJSON_Parse(args->valuestring);
    if (!args && tool) args = parsed = cJSON_CreateObject(); /* a call without arguments */
    bool ok = tool && cJSON_IsObject(args);
    const cJSON *required = ok ? given(given(tool, "parameters"), "required") : NULL;
    for (const cJSON *r = cJSON_IsArray(required) ? required->child : NULL; r && ok; r = r->next)
        ok = !cJSON_IsString(r) || cJSON_GetObjectItemCaseSensitive(args, r->valuestring);
    char *text = ok ? cJSON_PrintUnformatted(args) : NULL;
    cJSON_Delete(parsed);
    if (text && l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        tool_call *grown = realloc(l->calls, (size_t)cap * sizeof *grown);
        if (grown) l->calls = grown, l->cap = cap;
    }
    if (!text || l->n == l->cap) {
        free(text);
        l->bad = true;
        return;
    }
    l->calls[l->n++] = (tool_call){strdup(name->valuestring), text};
    if (!l->calls[l->n - 1].name) l->bad = true;
}

/* A JSON value at p: a call object or a list of them. Returns the end of
 * the value, or NULL when it is not one. */
static const char *json_calls(call_list *l, const cJSON *defs, const char *p, const char *end) {
    const char *stop = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &stop, 0);
    if (!v) return NULL;
    if (cJSON_IsArray(v) && v->child) {
        for (const cJSON *c = v->child; c; c = c->next) add_call(l, defs, c);
    } else if (cJSON_IsObject(v)) {
        add_call(l, defs, v);
    } else {
        l->bad = true;
    }
    cJSON_Delete(v);
    return stop;
}

tool_call *tools_recognize(const char *text, size_t len, const chat_tools *t, int *n) {
    call_list l = {0};
    const char *p = skip_ws(text, text + len), *end = text + len;
    while (end > p && (end[-1] == ' ' || end[-1] == '\n' || end[-1] == '\t' || end[-1] == '\r')) end--;
    if (starts(p, end, "<tool_call>")) { /* Hermes, Qwen: one tagged object per call */
        while (p < end && !l.bad) {
            if (!starts(p, end, "<tool_call>")) { l.bad = true; break; }
            p = skip_ws(p + strlen("<tool_call>"), end);
            const char *after = json_calls(&l, t->defs, p, end);
            if (!after) { l.bad = true; break; }
            p = skip_ws(after, end);
            if (!starts(p, end, "</tool_call>")) { l.bad = true; break; }
            p = skip_ws(p + strlen("</tool_call>"), end);
        }
    } else if (starts(p, end, "```")) { /* a fenced block: ```json or ``` */
        p += 3;
        if (starts(p, end, "json")) p += 4;
        const char *after = json_calls(&l, t->defs, skip_ws(p, end), end);
        p = after ? skip_ws(after, end) : NULL;
        if (!p || !starts(p, end, "```") || skip_ws(p + 3, end) != end) l.bad = true;
    } else if (starts(p, end, "[TOOL_CALLS]")) { /* Mistral: a list, or NAME[ARGS]{...} */
        p = skip_ws(p + strlen("[TOOL_CALLS]"), end);
        const char *args = NULL;
        for (const char *q = p; q + 6 <= end && !args; q++)
            if (!memcmp(q, "[ARGS]", 6)) args = q;
        if (*p != '[' && *p != '{' && args) {
            cJSON *call = cJSON_CreateObject();
            char *name = strndup(p, (size_t)(args - p));
            cJSON_AddStringToObject(call, "name", name ? name : "");
            free(name);
            const char *stop = NULL;
            cJSON *a = cJSON_ParseWithLengthOpts(args + 6, (size_t)(end - args - 6), &stop, 0);
            if (a) cJSON_AddItemToObject(call, "arguments", a);
            if (a && skip_ws(stop, end) == end) add_call(&l, t->defs, call);
            else l.bad = true;
            cJSON_Delete(call);
        } else {
            const char *after = json_calls(&l, t->defs, p, end);
            if (!after || skip_ws(after, end) != end) l.bad = true;
        }
    } else if (p < end && (*p == '{' || *p == '[' || starts(p, end, "<|python_tag|>"))) {
        /* bare JSON, Llama 3.x (with or without <|python_tag|>): calls separated by ';' or newlines */
        if (starts(p, end, "<|python_tag|>")) p = skip_ws(p + strlen("<|python_tag|>"), end);
        while (p < end && !l.bad) {
            const char *after = json_calls(&l, t->defs, p, end);
            if (!after) { l.bad = true; break; }
            p = skip_ws(after, end);
            if (p < end && *p == ';') p = skip_ws(p + 1, end);
        }
    } else {
        l.bad = true;
    }
    if (l.bad || l.n == 0) {
        tools_calls_free(l.calls, l.n);
        *n = 0;
        return NULL;
    }
    if (t->one_call) { /* parallel_tool_calls false: the first call only */
        for (int i = 1; i < l.n; i++) {
            free(l.calls[i].name);
            free(l.calls[i].arguments);
        }
        l.n = 1;
    }
    *n = l.n;
    return l.calls;
}

int tools_maybe_call(const char *text, size_t len) {
    static const char *const starts_of_calls[] = {"<tool_call>", "```", "[TOOL_CALLS]", "<|python_tag|>", "{", "[",
                                                  NULL};
    const char *p = skip_ws(text, text + len), *end = text + len;
    if (p == end) return -1;
    for (int i = 0; starts_of_calls[i]; i++) {
        size_t n = strlen(starts_of_calls[i]), have = (size_t)(end - p);
        if (!memcmp(p, starts_of_calls[i], have < n ? have : n)) return have < n ? -1 : 1;
    }
    return 0;
}
