/* config.c -- one table describes every setting; the file parser, the flag
 * parser, --help and --print-config all walk it. */
#include "config.h"

#include <ctype.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "genloop_chat.h"

#include "params.h"
#include "reasoning.h"

typedef enum {
    SETTING_STR,
    SETTING_INT,
    SETTING_BOOL,            /* a flag alone means true; JSON true/false */
    SETTING_LIST,            /* comma-joined strings; JSON string or array */
} setting_kind;

typedef struct setting {
    const char *name;        /* JSON key; flag is --name with '-' for '_' */
    char short_flag;         /* 0 = none */
    setting_kind kind;
    size_t offset;
    size_t size;             /* SETTING_STR/LIST: buffer size */
    long min, max;           /* SETTING_INT range */
    const char *help;
} setting;

#define STR(field, sf, help) { #field, sf, SETTING_STR, offsetof(config, field), \
    sizeof(((config *)0)->field), 0, 0, help }
#define INT(field, sf, lo, hi, help) { #field, sf, SETTING_INT, offsetof(config, field), \
    sizeof(int), lo, hi, help }
#define BOOL(field, help) { #field, 0, SETTING_BOOL, offsetof(config, field), sizeof(bool), \
    0, 1, help }
#define LIST(field, help) { #field, 0, SETTING_LIST, offsetof(config, field), \
    sizeof(((config *)0)->field), 0, 0, help }

static const setting settings[] = {
    STR(host, 0, "address to bind"),
    INT(port, 0, 0, 65535, "TCP port; 0 = any free port"),
    STR(model, 'm', "GGUF model file"),
    STR(served_model_name, 0, "model id for the API and responses; empty = the first alias, else the file name"),
    { "alias", 'a', SETTING_LIST, offsetof(config, alias), sizeof(((config *)0)->alias), 0, 0,
      "another name the model answers to (repeatable, comma list); the first is the model id" },
    BOOL(strict_model, "answer 404 when a request's `model` is not one of this model's names"),
    BOOL(lenient_params, "log and ignore unknown request fields instead of answering 400"),
    INT(shutdown_timeout, 0, 0, 86400, "seconds in-flight requests may take to finish on SIGTERM"),
    STR(chat_template, 0, "chat format: jinja (the model's own), chatml, llama2, llama3, mistral, "
                          "gemma, phi3, zephyr; empty = the model's, else a guess"),
    STR(reasoning_format, 0, "where a reply's thinking goes: auto (reasoning_content, with the model's "
                             "markers), deepseek (a leading <think> block), none (left in the content)"),
    INT(reasoning_budget, 0, -1, 1 << 24, "thinking tokens at most, then the engine closes the block; -1 = no bound"),
    INT(threads, 't', 0, 1024, "compute threads; 0 = all cores"),
    INT(activation_bits, 0, INT_MIN, INT_MAX,
        "matmul activation precision: 12 (Q4_0/Q4_1 weights; others 16), 16 (exact), or 8 (faster, less precise)"),
    INT(kv_cache_mib, 0, 1, 1 << 20, "KV cache size in MiB"),
    STR(kv_cache_dir, 0, "keep the prefix cache's KV blocks in this folder too, so a restart finds them "
                         "(docs/prefix-cache.md); empty = memory only"),
    INT(kv_cache_dir_size, 0, 1, INT_MAX, "MiB the --kv-cache-dir folder may take; the oldest entries go first"),
    STR(kv_type, 0, "KV cache element type: f16, q8_0 (about 1.9x the tokens in the same MiB; "
                    "slightly less precise) or f32"),
    INT(block_size, 0, 1, 4096, "tokens per KV cache block"),
    INT(max_batch_tokens, 0, 1, 1 << 20, "token budget of one engine step"),
    INT(prefill_first_tokens, 0, 0, 1 << 20, "a waiting prompt of at most this many tokens runs in a step of its own "
                                             "before the running streams' next token (short TTFT under load); 0 = never"),
    INT(max_seqs, 0, 1, 4096, "sequences decoded together"),
    INT(max_waiting, 0, 0, 1 << 20, "waiting-queue bound; beyond it requests get 503"),
    INT(grammar_compile_ms, 0, 1, 600000, "time one request's grammar (schema, GBNF, tools) may take to compile; "
                                          "beyond it 400"),
    INT(grammar_compile_mib, 0, 1, 65536, "memory one grammar compile may allocate; beyond it 400"),
    INT(max_body_bytes, 0, 64, INT_MAX, "largest request body; beyond it 413"),
    INT(n_ctx, 'c', 0, 1 << 24, "context length per sequence; 0 = the model's"),
    STR(spec, 0, "speculative decoding: ngram (drafts from the request's own prompt and output), "
                 "draft (from model_draft) or off"),
    STR(model_draft, 0, "draft model GGUF for spec = draft (must share the model's vocabulary)"),
    INT(spec_max_tokens, 0, 1, GL_SPEC_MAX, "drafted tokens per sequence and step at most"),
    INT(spec_ngram_min, 0, 1, 64, "n-gram drafter: shortest suffix looked up"),
    INT(spec_ngram_max, 0, 1, 64, "n-gram drafter: longest suffix looked up"),
    BOOL(spec_fixed, "always draft spec_max_tokens tokens (no adaptive draft length; for tests)"),
    INT(timeout, 0, 1, 86400, "seconds an idle keep-alive connection is kept open"),
    INT(header_timeout, 0, 1, 86400, "seconds a new connection has to send its whole request head"),
    INT(body_timeout, 0, 1, 86400, "seconds a request body may pause between two reads (then 408)"),
    INT(max_connections, 0, 1, 1 << 20,
        "open connections at most; a new one closes the oldest idle one, or gets 503 when none is idle"),
    INT(max_connections_per_address, 0, 0, 1 << 20,
        "open connections per client address (429 beyond it); 0 = no cap (e.g. behind a proxy)"),
    INT(stream_buffer_bytes, 0, 4096, 1 << 30,
        "unsent bytes a streaming client may lag; beyond it it is dropped"),
    INT(max_n, 0, 1, 128, "largest `n` (choices per prompt) accepted"),
    INT(max_prompt_tokens, 0, 0, 1 << 24, "tokens per prompt at most; 0 = the context length"),
    INT(max_tokens_cap, 0, 0, 1 << 24, "largest `max_tokens` accepted; 0 = the context length"),
    INT(max_stop, 0, 0, PARAMS_MAX_STOP, "stop strings per request at most"),
    INT(max_stop_bytes, 0, 1, 65536, "bytes per stop string at most"),
    INT(max_logit_bias, 0, 0, 1 << 24, "`logit_bias` entries per request at most"),
    STR(api_key, 0, "require `Authorization: Bearer KEY` (visible in ps; prefer the file)"),
    STR(api_key_file, 0, "read the API key from this file"),
    BOOL(metrics_public, "serve /metrics without the API key"),
    BOOL(metrics_vllm_names, "/metrics also exports queue length and KV use under vLLM's names "
                             "(vllm:num_requests_waiting, ...) for endpoint pickers"),
    LIST(cors_origin, "allow browser calls from this Origin (repeatable, comma list, *)"),
    STR(models_dir, 0, "serve every .gguf in this folder, each loaded when a request names it"),
    INT(models_max_loaded, 0, 0, 1024, "models loaded at once; the least recently used idle one is unloaded "
                                       "for another; 0 = no bound"),
    INT(models_memory, 0, 0, 1 << 30, "MiB of weights and KV pools loaded at once (LRU unload past it); 0 = no bound"),
    INT(keep_alive, 0, 0, 1 << 30, "seconds an idle model loaded on demand stays loaded; 0 = forever "
                                   "(a request's keep_alive overrides it)"),
};
#define N_SETTINGS (int)(sizeof(settings) / sizeof(settings[0]))

void config_default(config *c) {
    memset(c, 0, sizeof(*c));
    strcpy(c->host, "127.0.0.1");
    c->port = 8080;
    /* The engine's own defaults, except for the two queue sizes: a server
     * keeps fewer sequences running and waiting than the engine allows. */
    gl_engine_params ep;
    gl_engine_params_default(&ep);
    strcpy(c->reasoning_format, "auto");
    c->reasoning_budget = -1;
    c->threads = ep.n_threads;
    c->activation_bits = ep.activation_bits;
    c->kv_cache_mib = ep.kv_cache_mib;
    c->kv_cache_dir_size = ep.kv_cache_dir_mib;
    snprintf(c->kv_type, sizeof c->kv_type, "%s", gl_kv_type_name(ep.kv_type));
    c->block_size = ep.block_size;
    c->max_batch_tokens = ep.max_batch_tokens;
    c->prefill_first_tokens = ep.prefill_first_tokens;
    c->n_ctx = ep.n_ctx;
    strcpy(c->spec, ep.spec_mode == GL_SPEC_NGRAM ? "ngram" : ep.spec_mode == GL_SPEC_DRAFT ? "draft" : "off");
    c->spec_max_tokens = ep.spec_max_tokens;
    c->spec_ngram_min = ep.spec_ngram_min;
    c->spec_ngram_max = ep.spec_ngram_max;
    c->max_seqs = 16;
    c->max_waiting = 64;
    c->grammar_compile_ms = 10000;
    c->grammar_compile_mib = 512;
    c->max_body_bytes = 1 << 20;
    c->timeout = 600;
    c->header_timeout = 10;
    c->body_timeout = 30;
    c->max_connections = 512;
    c->max_connections_per_address = 256;
    c->stream_buffer_bytes = 1 << 20;
    c->max_n = 16;
    c->max_prompt_tokens = 0;
    c->max_tokens_cap = 0;
    c->max_stop = 4;
    c->max_stop_bytes = 256;
    c->max_logit_bias = 1024;
    c->metrics_public = false;
    c->shutdown_timeout = 30;
    c->keep_alive = 300;
}

static int fail(char *err, size_t err_len, const char *fmt, const char *a, const char *b) {
    snprintf(err, err_len, fmt, a, b);
    return -1;
}

static int set_str(config *c, const setting *s, const char *v, char *err, size_t err_len) {
    if (strlen(v) >= s->size)
        return fail(err, err_len, "%s: value too long: %s", s->name, v);
    strcpy((char *)c + s->offset, v);
    return 0;
}

static int set_int(config *c, const setting *s, long v, char *err, size_t err_len) {
    if (v < s->min || v > s->max) {
        char range[64];
        snprintf(range, sizeof(range), "%ld..%ld", s->min, s->max);
        return fail(err, err_len, "%s: out of range (%s)", s->name, range);
    }
    *(int *)((char *)c + s->offset) = (int)v;
    return 0;
}

/* Appends the comma-separated items of v (spaces around items dropped). */
static int list_add(config *c, const setting *s, const char *v, char *err, size_t err_len) {
    char *list = (char *)c + s->offset;
    while (*v) {
        while (*v == ',' || isspace((unsigned char)*v)) v++;
        size_t n = strcspn(v, ",");
        while (n > 0 && isspace((unsigned char)v[n - 1])) n--;
        if (n == 0) break;
        size_t used = strlen(list);
        if (used + 1 + n >= s->size) return fail(err, err_len, "%s: too long: %s", s->name, v);
        if (used) list[used++] = ',';
        memcpy(list + used, v, n);
        list[used + n] = 0;
        v += n;
        while (*v && *v != ',') v++;
    }
    return 0;
}

static int parse_bool(const char *v, bool *out) {
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *out = true;
    else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *out = false;
    else return -1;
    return 0;
}

static const setting *find_setting(const char *name) {
    for (int i = 0; i < N_SETTINGS; i++)
        if (strcmp(settings[i].name, name) == 0) return &settings[i];
    return NULL;
}

static int load_item(config *c, const setting *s, const cJSON *item, const char *path,
                     char *err, size_t err_len) {
    switch (s->kind) {
    case SETTING_STR:
        if (!cJSON_IsString(item))
            return fail(err, err_len, "%s: \"%s\" must be a string", path, s->name);
        return set_str(c, s, item->valuestring, err, err_len);
    case SETTING_INT: {
        double v = cJSON_GetNumberValue(item);
        if (!cJSON_IsNumber(item) || v != (double)(long)v)
            return fail(err, err_len, "%s: \"%s\" must be an integer", path, s->name);
        return set_int(c, s, (long)v, err, err_len);
    }
    case SETTING_BOOL:
        if (!cJSON_IsBool(item))
            return fail(err, err_len, "%s: \"%s\" must be true or false", path, s->name);
        *(bool *)((char *)c + s->offset) = cJSON_IsTrue(item);
        return 0;
    case SETTING_LIST:
        ((char *)c + s->offset)[0] = 0;
        if (cJSON_IsString(item)) return list_add(c, s, item->valuestring, err, err_len);
        if (!cJSON_IsArray(item))
            return fail(err, err_len, "%s: \"%s\" must be an array of strings", path, s->name);
        for (const cJSON *v = item->child; v; v = v->next) {
            if (!cJSON_IsString(v))
                return fail(err, err_len, "%s: \"%s\" must be an array of strings", path, s->name);
            if (list_add(c, s, v->valuestring, err, err_len)) return -1;
        }
        return 0;
    }
    return -1;
}

static int model_str(char *dst, size_t size, const cJSON *m, const char *key, const char *path,
                     char *err, size_t err_len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    if (!v) return 0;
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= size)
        return fail(err, err_len, "%s: models: \"%s\" must be a string (not too long)", path, key);
    strcpy(dst, v->valuestring);
    return 0;
}

static int model_int(int *dst, const cJSON *m, const char *key, long lo, long hi, const char *path,
                     char *err, size_t err_len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    if (!v) return 0;
    double d = cJSON_GetNumberValue(v);
    if (!cJSON_IsNumber(v) || d != (double)(long)d || d < lo || d > hi)
        return fail(err, err_len, "%s: models: \"%s\" must be an integer in range", path, key);
    *dst = (int)d;
    return 0;
}

/* The `models` list: [{name, path, alias, n_ctx, kv_type, activation_bits,
 * kv_cache_mib, model_draft}, ...]; name and path are required. */
static int load_models(config *c, const cJSON *list, const char *path, char *err, size_t err_len) {
    static const char *const keys[] = { "name", "path", "alias", "n_ctx", "kv_type", "activation_bits",
                                        "kv_cache_mib", "model_draft", NULL };
    if (!cJSON_IsArray(list)) return fail(err, err_len, "%s: %s", path, "\"models\" must be an array of objects");
    c->n_models = 0;
    for (const cJSON *m = list->child; m; m = m->next) {
        if (!cJSON_IsObject(m)) return fail(err, err_len, "%s: %s", path, "\"models\" must be an array of objects");
        for (const cJSON *k = m->child; k; k = k->next) {
            int known = 0;
            for (int i = 0; keys[i]; i++) known |= !strcmp(k->string, keys[i]);
            if (!known) return fail(err, err_len, "%s: models: unknown setting \"%s\"", path, k->string);
        }
        if (c->n_models == CONFIG_MAX_MODELS) return fail(err, err_len, "%s: %s", path, "models: too many (32 at most)");
        config_model *cm = &c->models[c->n_models];
        memset(cm, 0, sizeof *cm);
        const cJSON *alias = cJSON_GetObjectItemCaseSensitive(m, "alias");
        if (cJSON_IsArray(alias)) {
            for (const cJSON *a = alias->child; a; a = a->next) {
                size_t used = strlen(cm->alias);
                if (!cJSON_IsString(a) || used + strlen(a->valuestring) + 2 > sizeof cm->alias)
                    return fail(err, err_len, "%s: %s", path, "models: \"alias\" must be strings");
                if (used) cm->alias[used++] = ',';
                memcpy(cm->alias + used, a->valuestring, strlen(a->valuestring) + 1);
            }
        } else if (model_str(cm->alias, sizeof cm->alias, m, "alias", path, err, err_len)) {
            return -1;
        }
        if (model_str(cm->name, sizeof cm->name, m, "name", path, err, err_len) ||
            model_str(cm->path, sizeof cm->path, m, "path", path, err, err_len) ||
            model_str(cm->kv_type, sizeof cm->kv_type, m, "kv_type", path, err, err_len) ||
            model_str(cm->model_draft, sizeof cm->model_draft, m, "model_draft", path, err, err_len) ||
            model_int(&cm->n_ctx, m, "n_ctx", 0, 1 << 24, path, err, err_len) ||
            model_int(&cm->activation_bits, m, "activation_bits", 0, 16, path, err, err_len) ||
            model_int(&cm->kv_cache_mib, m, "kv_cache_mib", 0, 1 << 30, path, err, err_len))
            return -1;
        if (!cm->name[0] || !cm->path[0])
            return fail(err, err_len, "%s: %s", path, "models: each needs \"name\" and \"path\"");
        c->n_models++;
    }
    return 0;
}

int config_load_file(config *c, const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, err_len, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = text ? fread(text, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    fclose(f);
    if (!text) return fail(err, err_len, "%s: %s", path, "out of memory");
    text[got] = 0;
    cJSON *root = cJSON_ParseWithLength(text, got);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail(err, err_len, "%s: %s", path, "not a JSON object");
    }
    int rc = 0;
    for (cJSON *item = root->child; item && rc == 0; item = item->next) {
        if (!strcmp(item->string, "models")) {
            rc = load_models(c, item, path, err, err_len);
            continue;
        }
        const setting *s = find_setting(item->string);
        rc = s ? load_item(c, s, item, path, err, err_len)
               : fail(err, err_len, "%s: unknown setting \"%s\"", path, item->string);
    }
    cJSON_Delete(root);
    return rc;
}

/* Matches "--kv-cache-mib" (or "--kv_cache_mib") against a setting name. */
static int flag_matches(const char *flag, const char *name) {
    for (; *flag && *name; flag++, name++)
        if (*flag != *name && !(*flag == '-' && *name == '_')) return 0;
    return *flag == 0 && *name == 0;
}

int config_parse_args(config *c, int argc, char **argv, const char **config_path,
                      bool *help, bool *print, char *err, size_t err_len) {
    int list_seen[N_SETTINGS] = {0}; /* the first --cors-origin replaces the file's list */
    int seen[N_SETTINGS] = {0};      /* a single-value flag given twice is a mistake, not an override */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) { *help = true; continue; }
        if (!strcmp(arg, "--print-config")) { *print = true; continue; }
        const char *value = NULL;
        char name[64] = "";
        /* --name=value, --name value, -x value */
        if (arg[0] == '-' && arg[1] == '-') {
            const char *eq = strchr(arg, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            if (len >= sizeof(name)) return fail(err, err_len, "unknown option: %s%s", arg, "");
            memcpy(name, arg + 2, len);
            name[len] = 0;
            if (eq) value = eq + 1;
        } else if (arg[0] == '-' && arg[1] && !arg[2]) {
            for (int k = 0; k < N_SETTINGS; k++)
                if (settings[k].short_flag == arg[1]) strcpy(name, settings[k].name);
            if (!name[0]) return fail(err, err_len, "unknown option: %s%s", arg, "");
        } else {
            return fail(err, err_len, "unexpected argument: %s%s", arg, "");
        }
        int k = -1;
        for (int j = 0; j < N_SETTINGS; j++)
            if (flag_matches(name, settings[j].name)) k = j;
        const setting *s = k >= 0 ? &settings[k] : NULL;
        if (!value && s && s->kind == SETTING_BOOL) value = "true";
        if (!value) {
            if (i + 1 >= argc) return fail(err, err_len, "%s needs a value%s", arg, "");
            value = argv[++i];
        }
        if (!strcmp(name, "config")) { *config_path = value; continue; }
        if (!s) return fail(err, err_len, "unknown option: %s%s", arg, "");
        if (s->kind != SETTING_LIST && seen[k]++)
            return fail(err, err_len, "%s given twice (a setting takes one value)%s", arg, "");
        if (s->kind == SETTING_STR) {
            if (set_str(c, s, value, err, err_len)) return -1;
        } else if (s->kind == SETTING_BOOL) {
            if (parse_bool(value, (bool *)((char *)c + s->offset)))
                return fail(err, err_len, "%s: not true or false: %s", s->name, value);
        } else if (s->kind == SETTING_LIST) {
            if (!list_seen[k]) ((char *)c + s->offset)[0] = 0;
            list_seen[k] = 1;
            if (list_add(c, s, value, err, err_len)) return -1;
        } else {
            char *end;
            errno = 0;
            long v = strtol(value, &end, 10);
            if (errno || end == value || *end)
                return fail(err, err_len, "%s: not an integer: %s", s->name, value);
            if (set_int(c, s, v, err, err_len)) return -1;
        }
    }
    return 0;
}

/* A key travels in a header: visible ASCII only, no spaces. */
static int key_valid(const char *k) {
    if (!k[0]) return 0;
    for (; *k; k++)
        if (*k < 0x21 || *k > 0x7e) return 0;
    return 1;
}

/* "*", or scheme://host[:port] as browsers send it in Origin (no path). */
static int origin_valid(const char *o, size_t n) {
    if (n == 1 && o[0] == '*') return 1;
    const char *sep = memchr(o, ':', n);
    if (!sep || sep == o || (size_t)(o + n - sep) < 4 || sep[1] != '/' || sep[2] != '/') return 0;
    for (const char *p = sep + 3; p < o + n; p++)
        if (*p == '/' || *p == '*' || isspace((unsigned char)*p)) return 0;
    return 1;
}

int config_validate(const config *c, char *err, size_t err_len) {
    gl_kv_type kt;
    if (!c->model[0] && !c->models_dir[0] && c->n_models == 0)
        return fail(err, err_len, "no model given (-m FILE, --models-dir DIR or a models list in --config)%s%s", "", "");
    for (int i = 0; i < c->n_models; i++) {
        const config_model *m = &c->models[i];
        if (m->kv_type[0] && !gl_kv_type_parse(m->kv_type, &kt))
            return fail(err, err_len, "models: %s: kv_type must be f16, q8_0 or f32%s", m->name, "");
        if (m->activation_bits && !gl_activation_bits_valid(m->activation_bits))
            return fail(err, err_len, "models: %s: activation_bits must be 8, 12 or 16%s", m->name, "");
    }
    if (!c->host[0]) return fail(err, err_len, "empty host%s%s", "", "");
    if (!gl_activation_bits_valid(c->activation_bits)) {
        char got[32];
        snprintf(got, sizeof(got), "%d", c->activation_bits);
        return fail(err, err_len, "activation_bits: must be 8, 12 or 16, got %s", got, NULL);
    }
    if (!gl_kv_type_parse(c->kv_type, &kt))
        return fail(err, err_len, "kv_type: must be f16, q8_0 or f32, got \"%s\"%s", c->kv_type, "");
    if (strcmp(c->spec, "ngram") && strcmp(c->spec, "draft") && strcmp(c->spec, "off"))
        return fail(err, err_len, "spec: must be ngram, draft or off, got %s%s", c->spec, "");
    if (!strcmp(c->spec, "draft") && !c->model_draft[0])
        return fail(err, err_len, "spec draft needs model_draft (--model-draft FILE)%s%s", "", "");
    if (c->spec_ngram_min > c->spec_ngram_max)
        return fail(err, err_len, "spec_ngram_min must not exceed spec_ngram_max%s%s", "", "");
    if (c->api_key[0] && c->api_key_file[0])
        return fail(err, err_len, "give api_key or api_key_file, not both%s%s", "", "");
    if (c->api_key[0] && !key_valid(c->api_key))
        return fail(err, err_len, "api_key: only visible ASCII characters, no spaces%s%s", "", "");
    for (const char *o = c->cors_origin; *o;) {
        size_t n = strcspn(o, ",");
        if (!origin_valid(o, n)) {
            char shown[256];
            size_t k = n < sizeof(shown) - 1 ? n : sizeof(shown) - 1;
            memcpy(shown, o, k);
            shown[k] = 0;
            return fail(err, err_len, "cors_origin: \"%s\" is not * or scheme://host[:port]%s",
                        shown, "");
        }
        o += n;
        if (*o == ',') o++;
    }
    reasoning_format rf;
    if (!reasoning_format_parse(c->reasoning_format, &rf))
        return fail(err, err_len, "reasoning_format: \"%s\" is not none, auto or deepseek%s", c->reasoning_format, "");
    if (c->chat_template[0] && strcmp(c->chat_template, "jinja") != 0) {
        int known = 0;
        for (int i = 0; gl_chat_template_builtin_names[i]; i++)
            known |= !strcmp(c->chat_template, gl_chat_template_builtin_names[i]);
        if (!known)
            return fail(err, err_len, "chat_template: unknown format \"%s\"%s (known: jinja, chatml, "
                        "llama2, llama3, mistral, gemma, phi3, zephyr)", c->chat_template, "");
    }
    return 0;
}

int config_read_api_key(config *c, char *err, size_t err_len) {
    if (!c->api_key_file[0]) return 0;
    FILE *f = fopen(c->api_key_file, "rb");
    if (!f) return fail(err, err_len, "api_key_file: %s: %s", c->api_key_file, strerror(errno));
    char buf[sizeof(c->api_key) + 2];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    buf[n] = 0;
    int has_nul = memchr(buf, 0, n) != NULL; /* a NUL would cut the key short */
    char *start = buf;
    while (isspace((unsigned char)*start)) start++;
    size_t len = strlen(start);
    while (len > 0 && isspace((unsigned char)start[len - 1])) start[--len] = 0;
    if (more || len >= sizeof(c->api_key))
        return fail(err, err_len, "api_key_file: %s: %s", c->api_key_file, "key too long");
    if (has_nul || !key_valid(start))
        return fail(err, err_len, "api_key_file: %s: %s", c->api_key_file,
                    len ? "the key must be visible ASCII without spaces" : "empty");
    memcpy(c->api_key, start, len + 1);
    return 0;
}

void config_print_help(FILE *out, const config *d) {
    fprintf(out, "usage: genloop serve -m MODEL | --models-dir DIR [options]\n\n"
                 "Serves an OpenAI-compatible HTTP API. Settings come from built-in\n"
                 "defaults, then --config FILE (JSON, same keys as below with '_'),\n"
                 "then flags.\n\noptions:\n");
    fprintf(out, "  %-30s %s\n", "--config FILE", "JSON settings file (e.g. config/genloop.json)");
    static const char *const arg_names[] = { " STR", " N", "", " LIST" };
    for (int i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        char flag[64], def[64];
        int n = s->short_flag ? snprintf(flag, sizeof(flag), "-%c, ", s->short_flag)
                              : snprintf(flag, sizeof(flag), "    ");
        n += snprintf(flag + n, sizeof(flag) - (size_t)n, "--");
        for (const char *p = s->name; *p; p++) flag[n++] = *p == '_' ? '-' : *p;
        snprintf(flag + n, sizeof(flag) - (size_t)n, "%s", arg_names[s->kind]);
        const char *p = (const char *)d + s->offset;
        if (s->kind == SETTING_STR || s->kind == SETTING_LIST)
            snprintf(def, sizeof(def), "\"%.50s\"", p);
        else if (s->kind == SETTING_BOOL)
            snprintf(def, sizeof(def), "%s", *(const bool *)p ? "on" : "off");
        else
            snprintf(def, sizeof(def), "%d", *(const int *)p);
        fprintf(out, "  %-30s %s (default %s)\n", flag, s->help, def);
    }
    fprintf(out, "  %-30s %s\n", "    --print-config", "print the merged settings as JSON and exit");
    fprintf(out, "  %-30s %s\n", "-h, --help", "show this help");
}

void config_print_json(FILE *out, const config *c) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        const char *p = (const char *)c + s->offset;
        if (s->kind == SETTING_STR) {
            cJSON_AddStringToObject(root, s->name, p);
        } else if (s->kind == SETTING_BOOL) {
            cJSON_AddBoolToObject(root, s->name, *(const bool *)p);
        } else if (s->kind == SETTING_LIST) {
            cJSON *arr = cJSON_AddArrayToObject(root, s->name);
            while (*p) {
                size_t n = strcspn(p, ",");
                char item[1024];
                snprintf(item, sizeof(item), "%.*s", (int)n, p);
                cJSON_AddItemToArray(arr, cJSON_CreateString(item));
                p += n;
                if (*p == ',') p++;
            }
        } else {
            cJSON_AddNumberToObject(root, s->name, *(const int *)p);
        }
    }
    cJSON *models = cJSON_AddArrayToObject(root, "models");
    for (int i = 0; i < c->n_models; i++) {
        const config_model *m = &c->models[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", m->name);
        cJSON_AddStringToObject(o, "path", m->path);
        cJSON_AddStringToObject(o, "alias", m->alias);
        cJSON_AddNumberToObject(o, "n_ctx", m->n_ctx);
        cJSON_AddStringToObject(o, "kv_type", m->kv_type);
        cJSON_AddNumberToObject(o, "activation_bits", m->activation_bits);
        cJSON_AddNumberToObject(o, "kv_cache_mib", m->kv_cache_mib);
        cJSON_AddStringToObject(o, "model_draft", m->model_draft);
        cJSON_AddItemToArray(models, o);
    }
    char *text = cJSON_Print(root);
    fprintf(out, "%s\n", text);
    cJSON_free(text);
    cJSON_Delete(root);
}
