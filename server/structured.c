/* structured.c -- response_format, grammar, json_schema and vLLM's guided_*
 * / structured_outputs fields to the compile_spec of a gl_grammar. */
#include "structured.h"

#include <stdlib.h>
#include <string.h>

#include "jbuf.h"

static const cJSON *given(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int made(compile_spec *s, compile_spec **out, params_error *e) {
    if (!s) return params_fail(e, 500, NULL, NULL, "out of memory");
    *out = s;
    return 0;
}

static int any_object(const char *param, compile_spec **out, params_error *e) {
    cJSON *schema = cJSON_CreateObject();
    cJSON_AddStringToObject(schema, "type", "object");
    compile_spec *s = compile_schema(schema, param);
    cJSON_Delete(schema);
    return made(s, out, e);
}

static int response_format(const cJSON *format, compile_spec **out, params_error *e) {
    const cJSON *type = cJSON_IsObject(format) ? given(format, "type") : NULL;
    if (!cJSON_IsString(type))
        return params_fail(e, 400, "response_format.type", "invalid_type",
                           "'response_format' must be an object with a string 'type'");
    const char *t = type->valuestring;
    for (const cJSON *k = format->child; k; k = k->next) {
        if (!strcmp(k->string, "type") || (!strcmp(k->string, "json_schema") && !strcmp(t, "json_schema"))) continue;
        return params_fail(e, 400, "response_format", "unsupported_parameter",
                           "'response_format.%.40s' is not a field of type '%.40s'", k->string, t);
    }
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) return any_object("response_format", out, e);
    if (strcmp(t, "json_schema"))
        return params_fail(e, 400, "response_format.type", "invalid_value",
                           "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '%.40s'", t);
    const cJSON *js = given(format, "json_schema");
    if (!cJSON_IsObject(js))
        return params_fail(e, 400, "response_format.json_schema", "missing_required_parameter",
                           "'response_format.json_schema' must be an object with 'name' and 'schema'");
    for (const cJSON *k = js->child; k; k = k->next) {
        if (!strcmp(k->string, "name") || !strcmp(k->string, "schema") || !strcmp(k->string, "strict") ||
            !strcmp(k->string, "description"))
            continue;
        return params_fail(e, 400, "response_format.json_schema", "unsupported_parameter",
                           "'response_format.json_schema.%.40s' is not supported", k->string);
    }
    const cJSON *name = given(js, "name"), *strict = given(js, "strict");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return params_fail(e, 400, "response_format.json_schema.name", "missing_required_parameter",
                           "'response_format.json_schema.name' must be a non-empty string");
    if (strict && !cJSON_IsBool(strict))
        return params_fail(e, 400, "response_format.json_schema.strict", "invalid_type",
                           "'response_format.json_schema.strict' must be a boolean");
    const cJSON *schema = given(js, "schema");
    if (!schema) return any_object("response_format", out, e); /* OpenAI: no schema means any JSON object */
    return made(compile_schema(schema, "response_format.json_schema.schema"), out, e);
}

/* A JSON Schema given as an object (or, as vLLM allows, as its JSON text). */
static int schema_field(const cJSON *v, const char *param, compile_spec **out, params_error *e) {
    if (cJSON_IsString(v)) {
        cJSON *parsed = cJSON_Parse(v->valuestring);
        if (!cJSON_IsObject(parsed) && !cJSON_IsBool(parsed)) {
            cJSON_Delete(parsed);
            return params_fail(e, 400, param, "invalid_schema", "'%s' must be a JSON Schema (an object, or its JSON text)",
                               param);
        }
        int rc = made(compile_schema(parsed, param), out, e);
        cJSON_Delete(parsed);
        return rc;
    }
    if (!cJSON_IsObject(v) && !cJSON_IsBool(v))
        return params_fail(e, 400, param, "invalid_type", "'%s' must be a JSON Schema object", param);
    return made(compile_schema(v, param), out, e);
}

static int string_field(const cJSON *v, const char *param, const char *what, compile_spec **out, bool regex,
                        params_error *e) {
    if (!cJSON_IsString(v)) return params_fail(e, 400, param, "invalid_type", "'%s' must be a string (%s)", param, what);
    return made(regex ? compile_regex(v->valuestring, param) : compile_gbnf(v->valuestring, param), out, e);
}

/* guided_choice: the output is one of the strings, as written. */
static int choice_field(const cJSON *v, const char *param, compile_spec **out, params_error *e) {
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return params_fail(e, 400, param, "invalid_type", "'%s' must be a non-empty array of strings", param);
    for (const cJSON *c = v->child; c; c = c->next)
        if (!cJSON_IsString(c) || !c->valuestring[0])
            return params_fail(e, 400, param, "invalid_type", "'%s' must be a non-empty array of non-empty strings",
                               param);
    /* the choices as bare text, not JSON strings: a GBNF alternation of literals */
    jbuf g = {0};
    jbuf_puts(&g, "root ::= ");
    for (const cJSON *c = v->child; c; c = c->next) {
        if (c != v->child) jbuf_puts(&g, " | ");
        jbuf_puts(&g, "\"");
        for (const unsigned char *p = (const unsigned char *)c->valuestring; *p; p++) {
            if (*p == '"' || *p == '\\') jbuf_printf(&g, "\\%c", *p);
            else if (*p < 0x20) jbuf_printf(&g, "\\x%02x", *p);
            else jbuf_raw(&g, (const char *)p, 1);
        }
        jbuf_puts(&g, "\"");
    }
    if (g.oom) {
        jbuf_free(&g);
        return params_fail(e, 500, NULL, NULL, "out of memory");
    }
    int rc = made(compile_gbnf(g.data, param), out, e);
    jbuf_free(&g);
    return rc;
}

/* vLLM's structured_outputs object: exactly one of json, regex, choice, grammar. */
static int structured_outputs(const cJSON *v, compile_spec **out, params_error *e) {
    if (!cJSON_IsObject(v))
        return params_fail(e, 400, "structured_outputs", "invalid_type", "'structured_outputs' must be an object");
    const cJSON *found = NULL;
    for (const cJSON *k = v->child; k; k = k->next) {
        if (cJSON_IsNull(k)) continue;
        if (strcmp(k->string, "json") && strcmp(k->string, "regex") && strcmp(k->string, "choice") &&
            strcmp(k->string, "grammar"))
            return params_fail(e, 400, "structured_outputs", "unsupported_parameter",
                               "'structured_outputs.%.40s' is not supported (json, regex, choice or grammar)", k->string);
        if (found)
            return params_fail(e, 400, "structured_outputs", "invalid_value",
                               "'structured_outputs' takes one of json, regex, choice and grammar");
        found = k;
    }
    if (!found) return 0;
    if (!strcmp(found->string, "json")) return schema_field(found, "structured_outputs.json", out, e);
    if (!strcmp(found->string, "regex"))
        return string_field(found, "structured_outputs.regex", "a regular expression", out, true, e);
    if (!strcmp(found->string, "choice")) return choice_field(found, "structured_outputs.choice", out, e);
    return string_field(found, "structured_outputs.grammar", "GBNF", out, false, e);
}

int structured_parse(const cJSON *body, compile_spec **out, params_error *e) {
    *out = NULL;
    static const char *const fields[] = {"response_format", "grammar", "json_schema", "guided_json", "guided_regex",
                                         "guided_choice", "guided_grammar", "structured_outputs", NULL};
    const cJSON *which = NULL;
    int n = 0;
    for (int i = 0; fields[i]; i++) {
        const cJSON *v = given(body, fields[i]);
        if (!v) continue;
        const cJSON *t = i == 0 && cJSON_IsObject(v) ? given(v, "type") : NULL;
        if (i == 0 && cJSON_IsString(t) && !strcmp(t->valuestring, "text")) continue; /* no constraint */
        if (i == 7 && cJSON_IsObject(v) && !v->child) continue;
        if (n++ && which)
            return params_fail(e, 400, fields[i], "invalid_value",
                               "at most one of 'response_format' (other than text), 'grammar', 'json_schema', "
                               "'guided_json', 'guided_regex', 'guided_choice', 'guided_grammar' and "
                               "'structured_outputs' may be given ('%s' and '%s' are)", which->string, fields[i]);
        which = v;
    }
    const cJSON *format = given(body, "response_format");
    if (!which && format) return response_format(format, out, e); /* type text, or a fault to report */
    if (!which) return 0;
    const char *f = which->string;
    if (!strcmp(f, "response_format")) return response_format(which, out, e);
    if (!strcmp(f, "json_schema") || !strcmp(f, "guided_json")) return schema_field(which, f, out, e);
    if (!strcmp(f, "guided_regex")) return string_field(which, f, "a regular expression", out, true, e);
    if (!strcmp(f, "guided_choice")) return choice_field(which, f, out, e);
    if (!strcmp(f, "structured_outputs")) return structured_outputs(which, out, e);
    return string_field(which, f, "GBNF", out, false, e);
}
