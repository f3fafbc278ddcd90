/* structured.c -- response_format, grammar and json_schema to a gl_grammar. */
#include "structured.h"

#include <stdlib.h>
#include <string.h>

static const cJSON *given(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int from_schema(const cJSON *schema, const char *param, gl_grammar **out, params_error *e) {
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return params_fail(e, 500, param, NULL, "out of memory");
    gl_error err = {{0}};
    *out = gl_grammar_from_json_schema(text, strlen(text), &err);
    free(text);
    if (!*out) return params_fail(e, 400, param, "invalid_schema", "'%s': %s", param, err.message);
    return 0;
}

static int response_format(const cJSON *format, gl_grammar **out, params_error *e) {
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
    if (!strcmp(t, "json_object")) {
        static const char any_object[] = "{\"type\":\"object\"}";
        gl_error err = {{0}};
        *out = gl_grammar_from_json_schema(any_object, sizeof any_object - 1, &err);
        return *out ? 0 : params_fail(e, 500, "response_format", NULL, "%s", err.message);
    }
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
    if (!schema) { /* OpenAI: no schema means any JSON object */
        static const char any_object[] = "{\"type\":\"object\"}";
        gl_error err = {{0}};
        *out = gl_grammar_from_json_schema(any_object, sizeof any_object - 1, &err);
        return *out ? 0 : params_fail(e, 500, "response_format", NULL, "%s", err.message);
    }
    return from_schema(schema, "response_format.json_schema.schema", out, e);
}

int structured_parse(const cJSON *body, gl_grammar **out, params_error *e) {
    *out = NULL;
    const cJSON *format = given(body, "response_format");
    const cJSON *grammar = given(body, "grammar");
    const cJSON *schema = given(body, "json_schema");
    int n = 0;
    if (format) {
        const cJSON *t = cJSON_IsObject(format) ? given(format, "type") : NULL;
        n += !(cJSON_IsString(t) && !strcmp(t->valuestring, "text"));
    }
    if (n + !!grammar + !!schema > 1)
        return params_fail(e, 400, grammar ? "grammar" : "json_schema", "invalid_value",
                           "at most one of 'response_format' (other than text), 'grammar' and 'json_schema' may be given");
    if (format) return response_format(format, out, e);
    if (schema) return from_schema(schema, "json_schema", out, e);
    if (!grammar) return 0;
    if (!cJSON_IsString(grammar))
        return params_fail(e, 400, "grammar", "invalid_type", "'grammar' must be a string (GBNF)");
    gl_error err = {{0}};
    *out = gl_grammar_from_gbnf(grammar->valuestring, strlen(grammar->valuestring), &err);
    if (!*out) return params_fail(e, 400, "grammar", "invalid_grammar", "'grammar': %s", err.message);
    return 0;
}
