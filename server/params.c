/* params.c -- one function per field kind; ranges follow the OpenAI API. */
#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

int params_fail(params_error *e, int status, const char *param, const char *code,
                const char *fmt, ...) {
    e->status = status;
    e->type = status == 404 ? "not_found_error"
            : status >= 500 ? "server_error"
                            : "invalid_request_error";
    e->code = code;
    /* Messages quote request bytes: keep them valid UTF-8 for the JSON reply. */
    char text[2 * sizeof(e->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    utf8_clean(e->message, sizeof(e->message), text, strlen(text));
    utf8_clean(e->param, sizeof(e->param), param ? param : "", param ? strlen(param) : 0);
    return -1;
}

static const cJSON *field(const cJSON *body, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int params_check_keys(const cJSON *body, const char *const *allowed, params_error *e) {
    for (const cJSON *item = body->child; item; item = item->next) {
        int known = 0;
        for (int i = 0; allowed[i] && !known; i++) known = !strcmp(allowed[i], item->string);
        if (!known)
            return params_fail(e, 400, item->string, "unsupported_parameter",
                               "Unrecognized request argument supplied: %s", item->string);
    }
    return 0;
}

/* The API surface beyond the endpoints' own fields (OpenAI's, llama.cpp
 * server's, vLLM's). neutral NULL: accepted and ignored, because it cannot
 * change the output. Else refused unless it holds this JSON value (or null),
 * because ignoring it would change the result. */
typedef struct field_rule {
    const char *name;
    const char *neutral;
} field_rule;

static const field_rule field_rules[] = {
    /* OpenAI: bookkeeping, routing and latency hints */
    { "store", NULL }, { "metadata", NULL }, { "service_tier", NULL },
    { "safety_identifier", NULL }, { "prompt_cache_key", NULL }, { "prediction", NULL },
    /* OpenAI: output changes we do not make */
    { "verbosity", "\"medium\"" }, { "web_search_options", "null" },
    /* llama.cpp server: slots and reporting (its samplers: PARAMS_SAMPLER_KEYS) */
    { "id_slot", NULL }, { "timings_per_token", NULL }, { "n_keep", NULL },
    { "tfs_z", "1" }, { "penalize_nl", "false" }, { "min_keep", "0" }, { "samplers", "null" },
    { "t_max_predict_ms", "0" }, { "post_sampling_probs", "false" }, { "lora", "[]" },
    { "n_indent", "0" }, { "return_tokens", "false" },
    /* vLLM */
    { "request_id", NULL }, { "stop_token_ids", "[]" }, { "include_stop_str_in_output", "false" },
    { "skip_special_tokens", "true" }, { "spaces_between_special_tokens", "true" },
    { "use_beam_search", "false" }, { "length_penalty", "1" }, { "truncate_prompt_tokens", "null" },
    { "priority", "0" }, { "echo", "false" }, { "chat_template", "null" }, { "documents", "null" },
    { "prompt_logprobs", "null" },
};

int params_check_fields(const cJSON *body, const char *const *handled, bool lenient,
                        params_error *e) {
    for (const cJSON *item = body->child; item; item = item->next) {
        const char *key = item->string;
        int known = 0;
        for (int i = 0; handled[i] && !known; i++) known = !strcmp(handled[i], key);
        for (size_t i = 0; !known && i < sizeof(field_rules) / sizeof(field_rules[0]); i++) {
            const field_rule *r = &field_rules[i];
            if (strcmp(r->name, key) != 0) continue;
            known = 1;
            if (!r->neutral || cJSON_IsNull(item)) break;
            cJSON *neutral = cJSON_Parse(r->neutral);
            int same = cJSON_Compare(item, neutral, true);
            cJSON_Delete(neutral);
            if (!same)
                return params_fail(e, 400, key, "unsupported_parameter",
                                   "'%s' is not supported by this server (only %s is accepted)",
                                   key, r->neutral);
        }
        if (known) continue;
        if (!lenient)
            return params_fail(e, 400, key, "unsupported_parameter",
                               "Unrecognized request argument supplied: %s", key);
        fprintf(stderr, "genloop: ignoring unknown request field '%.100s' (--lenient-params)\n", key);
    }
    return 0;
}

static int is_integer(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    return isfinite(d) && d == floor(d);
}

int params_get_int(const cJSON *body, const char *key, long lo, long hi, int *out,
                   params_error *e) {
    const cJSON *v = field(body, key);
    if (!v) return 0;
    if (!is_integer(v))
        return params_fail(e, 400, key, "invalid_type", "'%s' must be an integer", key);
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return params_fail(e, 400, key, "invalid_value", "'%s' must be between %ld and %ld, got %.0f",
                           key, lo, hi, v->valuedouble);
    *out = (int)v->valuedouble;
    return 0;
}

int params_get_number(const cJSON *body, const char *key, double lo, double hi, bool lo_open,
                      double *out, params_error *e) {
    const cJSON *v = field(body, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return params_fail(e, 400, key, "invalid_type", "'%s' must be a number", key);
    double d = v->valuedouble;
    /* every field is kept as a float: 1e-50 passes "> 0" as a double and
     * becomes 0 as a float (found by fuzz_request) */
    if (d < lo || d > hi || (lo_open && (float)d <= (float)lo))
        return params_fail(e, 400, key, "invalid_value", "'%s' must be in %c%g, %g], got %g", key,
                           lo_open ? '(' : '[', lo, hi, d);
    *out = d;
    return 0;
}

int params_get_bool(const cJSON *body, const char *key, bool *out, params_error *e) {
    const cJSON *v = field(body, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v))
        return params_fail(e, 400, key, "invalid_type", "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

bool params_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p;
        int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2
              : (c & 0xF8) == 0xF0 ? 3 : -1;
        if (n < 0 || (n > 0 && end - p <= n)) return false;
        if (n == 0) { p++; continue; }
        unsigned cp = c & (0x3F >> n);
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        static const unsigned min_cp[4] = { 0, 0x80, 0x800, 0x10000 };
        if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        p += n + 1;
    }
    return true;
}

static int parse_stop(const cJSON *body, const params_limits *lim, params_generation *g,
                      params_error *e) {
    const cJSON *v = field(body, "stop");
    if (!v) return 0;
    const cJSON *items[PARAMS_MAX_STOP];
    int n = 0;
    if (cJSON_IsString(v)) {
        if (lim->max_stop < 1)
            return params_fail(e, 400, "stop", "invalid_value", "'stop' is not accepted by this server");
        items[n++] = v;
    } else if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) > lim->max_stop)
            return params_fail(e, 400, "stop", "invalid_value",
                               "'stop' takes at most %d strings", lim->max_stop);
        for (const cJSON *s = v->child; s; s = s->next) {
            if (!cJSON_IsString(s))
                return params_fail(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
            items[n++] = s;
        }
    } else {
        return params_fail(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
    }
    for (int i = 0; i < n; i++) {
        const char *s = items[i]->valuestring;
        size_t len = strlen(s);
        if (!s[0]) continue; /* an empty stop string would end every completion at once */
        if (len > (size_t)lim->max_stop_bytes)
            return params_fail(e, 400, "stop", "invalid_value",
                               "'stop' strings must be at most %d bytes, got %zu", lim->max_stop_bytes, len);
        if (!params_utf8_valid(s, len))
            return params_fail(e, 400, "stop", "invalid_value", "'stop' is not valid UTF-8");
        g->stop[g->n_stop] = strdup(s);
        if (!g->stop[g->n_stop]) return params_fail(e, 500, "stop", NULL, "out of memory");
        g->n_stop++;
    }
    return 0;
}

/* DRY's sequence breakers: a non-empty array of non-empty strings. */
static int parse_dry_breakers(const cJSON *body, params_generation *g, params_error *e) {
    const char *key = "dry_sequence_breakers";
    const cJSON *v = field(body, key);
    if (!v) return 0;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return params_fail(e, 400, key, "invalid_type", "'%s' must be a non-empty array of strings", key);
    if (cJSON_GetArraySize(v) > PARAMS_MAX_DRY_BREAKERS)
        return params_fail(e, 400, key, "invalid_value", "'%s' takes at most %d strings", key,
                           PARAMS_MAX_DRY_BREAKERS);
    for (const cJSON *item = v->child; item; item = item->next) {
        if (!cJSON_IsString(item))
            return params_fail(e, 400, key, "invalid_type", "'%s' must be a non-empty array of strings", key);
        size_t len = strlen(item->valuestring);
        if (len == 0 || len > PARAMS_MAX_DRY_BREAKER_BYTES)
            return params_fail(e, 400, key, "invalid_value", "'%s' strings must be 1 to %d bytes, got %zu", key,
                               PARAMS_MAX_DRY_BREAKER_BYTES, len);
        if (!params_utf8_valid(item->valuestring, len))
            return params_fail(e, 400, key, "invalid_value", "'%s' strings must be valid UTF-8", key);
        if (!(g->dry_breakers[g->n_dry_breakers] = strdup(item->valuestring)))
            return params_fail(e, 500, key, NULL, "out of memory");
        g->n_dry_breakers++;
    }
    g->sampling.dry_breakers = (const char *const *)g->dry_breakers;
    g->sampling.n_dry_breakers = g->n_dry_breakers;
    return 0;
}

/* llama.cpp's samplers (docs/sampling.md), with its defaults and ranges
 * that keep each one meaningful. */
static int parse_llama_samplers(const cJSON *body, params_generation *g, params_error *e) {
    gl_sampling_params *sp = &g->sampling;
    double typical_p = sp->typical_p, top_n_sigma = sp->top_n_sigma, xtc_p = sp->xtc_probability,
           xtc_t = sp->xtc_threshold, dyn_range = sp->dynatemp_range, dyn_exp = sp->dynatemp_exponent,
           tau = sp->mirostat_tau, eta = sp->mirostat_eta, dry_mult = sp->dry_multiplier, dry_base = sp->dry_base;
    if (params_get_number(body, "typical_p", 0, 1, false, &typical_p, e) ||
        params_get_number(body, "top_n_sigma", -1, 1000, false, &top_n_sigma, e) ||
        params_get_number(body, "xtc_probability", 0, 1, false, &xtc_p, e) ||
        params_get_number(body, "xtc_threshold", 0, 1, false, &xtc_t, e) ||
        params_get_number(body, "dynatemp_range", 0, 2, false, &dyn_range, e) ||
        params_get_number(body, "dynatemp_exponent", 0, 100, false, &dyn_exp, e) ||
        params_get_int(body, "mirostat", 0, 2, &sp->mirostat, e) ||
        params_get_number(body, "mirostat_tau", 0, 100, false, &tau, e) ||
        params_get_number(body, "mirostat_eta", 0, 1, false, &eta, e) ||
        params_get_number(body, "dry_multiplier", 0, 100, false, &dry_mult, e) ||
        params_get_number(body, "dry_base", 1, 100, false, &dry_base, e) ||
        params_get_int(body, "dry_allowed_length", 0, 1 << 16, &sp->dry_allowed_length, e) ||
        params_get_int(body, "dry_penalty_last_n", -1, 1 << 24, &sp->dry_penalty_last_n, e) ||
        parse_dry_breakers(body, g, e))
        return -1;
    sp->typical_p = (float)typical_p;
    sp->top_n_sigma = (float)top_n_sigma;
    sp->xtc_probability = (float)xtc_p;
    sp->xtc_threshold = (float)xtc_t;
    sp->dynatemp_range = (float)dyn_range;
    sp->dynatemp_exponent = (float)dyn_exp;
    sp->mirostat_tau = (float)tau;
    sp->mirostat_eta = (float)eta;
    sp->dry_multiplier = (float)dry_mult;
    sp->dry_base = (float)dry_base;
    return 0;
}

static int parse_logit_bias(const cJSON *body, const gl_model *model, const params_limits *lim,
                            params_generation *g, params_error *e) {
    const cJSON *v = field(body, "logit_bias");
    if (!v) return 0;
    if (!cJSON_IsObject(v))
        return params_fail(e, 400, "logit_bias", "invalid_type",
                           "'logit_bias' must be an object mapping token ids to biases");
    int n = cJSON_GetArraySize(v), n_vocab = gl_model_get_info(model)->n_vocab;
    if (n > lim->max_logit_bias || n > n_vocab)
        return params_fail(e, 400, "logit_bias", "invalid_value",
                           "'logit_bias' has %d entries; at most %d are accepted", n,
                           lim->max_logit_bias < n_vocab ? lim->max_logit_bias : n_vocab);
    g->bias = malloc(sizeof(gl_logit_bias) * (size_t)(n ? n : 1));
    if (!g->bias) return params_fail(e, 500, "logit_bias", NULL, "out of memory");
    int k = 0;
    for (const cJSON *item = v->child; item; item = item->next) {
        char *end;
        long id = strtol(item->string, &end, 10);
        if (!item->string[0] || *end || id < 0 || id >= n_vocab)
            return params_fail(e, 400, "logit_bias", "invalid_value",
                               "'logit_bias' key '%.*s' is not a token id in 0..%d",
                               (int)utf8_cut(item->string, 32), item->string, n_vocab - 1);
        if (!cJSON_IsNumber(item) || item->valuedouble < -100 || item->valuedouble > 100)
            return params_fail(e, 400, "logit_bias", "invalid_value",
                               "'logit_bias' values must be numbers in [-100, 100]");
        g->bias[k++] = (gl_logit_bias){ (int32_t)id, (float)item->valuedouble };
    }
    g->sampling.logit_bias = g->bias;
    g->sampling.n_logit_bias = k;
    return 0;
}

int params_generation_parse_limits(const cJSON *body, const gl_model *model,
                                   const params_limits *lim, const char *max_tokens_key,
                                   params_generation *g, params_error *e) {
    memset(g, 0, sizeof(*g));
    gl_sampling_params *sp = &g->sampling;
    gl_sampling_params_default(sp);
    sp->temperature = 1.0f;   /* OpenAI's defaults, not the CLI's */
    sp->top_p = 1.0f;
    g->max_tokens = 16;
    g->n = 1;
    double temperature = 1, top_p = 1, min_p = 0, rep = 1, presence = 0, frequency = 0;
    int top_k = 0;
    if (params_get_number(body, "temperature", 0, 2, false, &temperature, e) ||
        params_get_number(body, "top_p", 0, 1, true, &top_p, e) ||
        params_get_int(body, "top_k", 0, 1L << 30, &top_k, e) ||
        params_get_number(body, "min_p", 0, 1, false, &min_p, e) ||
        params_get_number(body, "repetition_penalty", 0, 10, true, &rep, e) ||
        params_get_number(body, "presence_penalty", -2, 2, false, &presence, e) ||
        params_get_number(body, "frequency_penalty", -2, 2, false, &frequency, e) ||
        params_get_int(body, "n", 1, lim->max_n, &g->n, e) ||
        params_get_int(body, max_tokens_key, 0, lim->max_tokens, &g->max_tokens, e) ||
        params_get_bool(body, "stream", &g->stream, e) ||
        params_get_bool(body, "ignore_eos", &g->ignore_eos, e) ||
        params_get_int(body, "min_tokens", 0, lim->max_tokens, &g->min_tokens, e))
        return -1;
    bool cache_prompt = true, speculative = true;
    if (params_get_bool(body, "cache_prompt", &cache_prompt, e) ||
        params_get_bool(body, "speculative", &speculative, e) ||
        params_get_bool(body, "return_progress", &g->return_progress, e))
        return -1;
    g->no_prefix_cache = !cache_prompt;
    g->no_speculation = !speculative;
    if (g->min_tokens > g->max_tokens && field(body, max_tokens_key))
        return params_fail(e, 400, "min_tokens", "invalid_value",
                           "'min_tokens' (%d) must not exceed '%s' (%d)", g->min_tokens,
                           max_tokens_key, g->max_tokens);
    /* llama.cpp's name for the same penalty, over its last repeat_last_n tokens */
    if (field(body, "repeat_penalty")) {
        if (field(body, "repetition_penalty"))
            return params_fail(e, 400, "repeat_penalty", "invalid_value",
                               "give 'repetition_penalty' or 'repeat_penalty', not both");
        if (params_get_number(body, "repeat_penalty", 0, 10, true, &rep, e)) return -1;
    }
    if (params_get_int(body, "repeat_last_n", -1, 1 << 24, &sp->penalty_last_n, e)) return -1;
    sp->temperature = (float)temperature;
    sp->top_p = (float)top_p;
    sp->top_k = top_k;
    sp->min_p = (float)min_p;
    sp->repetition_penalty = (float)rep;
    sp->presence_penalty = (float)presence;
    sp->frequency_penalty = (float)frequency;

    const cJSON *seed = field(body, "seed");
    if (seed) {
        if (!is_integer(seed) || fabs(seed->valuedouble) > 9007199254740992.0)
            return params_fail(e, 400, "seed", "invalid_type", "'seed' must be an integer");
        sp->seed = (uint64_t)(int64_t)seed->valuedouble;
        sp->has_seed = true;
    }
    const cJSON *so = field(body, "stream_options");
    if (so) {
        if (!g->stream)
            return params_fail(e, 400, "stream_options", "invalid_value",
                               "'stream_options' is only allowed when 'stream' is true");
        if (!cJSON_IsObject(so))
            return params_fail(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
        static const char *const so_keys[] = { "include_usage", "continuous_usage_stats",
                                               "include_obfuscation", NULL };
        if (params_check_keys(so, so_keys, e)) return -1;
        bool obfuscation = false; /* padding against length side channels: nothing to pad */
        if (params_get_bool(so, "include_usage", &g->include_usage, e) ||
            params_get_bool(so, "continuous_usage_stats", &g->continuous_usage, e) ||
            params_get_bool(so, "include_obfuscation", &obfuscation, e)) {
            char key[sizeof(e->param)];
            snprintf(key, sizeof(key), "stream_options.%.40s", e->param); /* 15 + 40 < 64 */
            memcpy(e->param, key, sizeof(key));
            return -1;
        }
    }
    if (parse_stop(body, lim, g, e) || parse_logit_bias(body, model, lim, g, e) ||
        parse_llama_samplers(body, g, e))
        return -1;
    return 0;
}

int params_generation_parse(const cJSON *body, const gl_model *model, int max_n,
                            const char *max_tokens_key, int max_tokens_cap,
                            params_generation *g, params_error *e) {
    params_limits lim = { .max_n = max_n, .max_tokens = max_tokens_cap, .max_stop = 4,
                          .max_stop_bytes = 256, .max_logit_bias = 1024 };
    return params_generation_parse_limits(body, model, &lim, max_tokens_key, g, e);
}

void params_generation_free(params_generation *g) {
    for (int i = 0; i < g->n_stop; i++) free(g->stop[i]);
    for (int i = 0; i < g->n_dry_breakers; i++) free(g->dry_breakers[i]);
    free(g->bias);
    gl_grammar_free(g->grammar);
    memset(g, 0, sizeof(*g));
}

bool params_json_has_nul(const char *json, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (json[i] != '\\') continue;
        if (json[i + 1] == 'u' && i + 5 < len && memcmp(json + i + 2, "0000", 4) == 0) return true;
        i++; /* skip the escaped character, so "\\\\u0000" is not an escape */
    }
    return false;
}
