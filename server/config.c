/* config.c -- one table describes every setting; the file parser, the flag
 * parser, --help and --print-config all walk it. */
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SETTING_STR, SETTING_INT } setting_kind;

typedef struct setting {
    const char *name;        /* JSON key; flag is --name with '-' for '_' */
    char short_flag;         /* 0 = none */
    setting_kind kind;
    size_t offset;
    size_t size;             /* SETTING_STR: buffer size */
    long min, max;           /* SETTING_INT range */
    const char *help;
} setting;

#define STR(field, sf, help) { #field, sf, SETTING_STR, offsetof(config, field), \
    sizeof(((config *)0)->field), 0, 0, help }
#define INT(field, sf, lo, hi, help) { #field, sf, SETTING_INT, offsetof(config, field), \
    sizeof(int), lo, hi, help }

static const setting settings[] = {
    STR(host, 0, "address to bind"),
    INT(port, 0, 0, 65535, "TCP port; 0 = any free port"),
    STR(model, 'm', "GGUF model file"),
    STR(alias, 'a', "model id for the API; empty = the file name"),
    INT(threads, 't', 0, 1024, "compute threads; 0 = all cores"),
    INT(kv_cache_mib, 0, 1, 1 << 20, "KV cache size in MiB"),
    INT(block_size, 0, 1, 4096, "tokens per KV cache block"),
    INT(max_batch_tokens, 0, 1, 1 << 20, "token budget of one engine step"),
    INT(max_seqs, 0, 1, 4096, "sequences decoded together"),
    INT(max_waiting, 0, 0, 1 << 20, "waiting-queue bound; beyond it requests get 503"),
    INT(max_body_bytes, 0, 64, INT_MAX, "largest request body; beyond it 413"),
    INT(n_ctx, 'c', 0, 1 << 24, "context length per sequence; 0 = the model's"),
    INT(timeout, 0, 1, 86400, "seconds an idle connection is kept open"),
    INT(max_n, 0, 1, 128, "largest `n` (choices per prompt) accepted"),
};
#define N_SETTINGS (int)(sizeof(settings) / sizeof(settings[0]))

void config_default(config *c) {
    memset(c, 0, sizeof(*c));
    strcpy(c->host, "127.0.0.1");
    c->port = 8080;
    c->threads = 0;
    c->kv_cache_mib = 256;
    c->block_size = 16;
    c->max_batch_tokens = 512;
    c->max_seqs = 16;
    c->max_waiting = 64;
    c->max_body_bytes = 1 << 20;
    c->n_ctx = 0;
    c->timeout = 600;
    c->max_n = 16;
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
        const setting *s = NULL;
        for (int i = 0; i < N_SETTINGS; i++)
            if (strcmp(settings[i].name, item->string) == 0) s = &settings[i];
        if (!s) {
            rc = fail(err, err_len, "%s: unknown setting \"%s\"", path, item->string);
        } else if (s->kind == SETTING_STR) {
            if (!cJSON_IsString(item))
                rc = fail(err, err_len, "%s: \"%s\" must be a string", path, s->name);
            else
                rc = set_str(c, s, item->valuestring, err, err_len);
        } else {
            double v = cJSON_GetNumberValue(item);
            if (!cJSON_IsNumber(item) || v != (double)(long)v)
                rc = fail(err, err_len, "%s: \"%s\" must be an integer", path, s->name);
            else
                rc = set_int(c, s, (long)v, err, err_len);
        }
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
                      int *help, int *print, char *err, size_t err_len) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) { *help = 1; continue; }
        if (!strcmp(arg, "--print-config")) { *print = 1; continue; }
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
        if (!value) {
            if (i + 1 >= argc) return fail(err, err_len, "%s needs a value%s", arg, "");
            value = argv[++i];
        }
        if (!strcmp(name, "config")) { *config_path = value; continue; }
        const setting *s = NULL;
        for (int k = 0; k < N_SETTINGS; k++)
            if (flag_matches(name, settings[k].name)) s = &settings[k];
        if (!s) return fail(err, err_len, "unknown option: %s%s", arg, "");
        if (s->kind == SETTING_STR) {
            if (set_str(c, s, value, err, err_len)) return -1;
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

int config_validate(const config *c, char *err, size_t err_len) {
    if (!c->model[0]) return fail(err, err_len, "no model given (-m FILE)%s%s", "", "");
    if (!c->host[0]) return fail(err, err_len, "empty host%s%s", "", "");
    return 0;
}

void config_print_help(FILE *out, const config *d) {
    fprintf(out, "usage: genloop serve -m MODEL [options]\n\n"
                 "Serves an OpenAI-compatible HTTP API. Settings come from built-in\n"
                 "defaults, then --config FILE (JSON, same keys as below with '_'),\n"
                 "then flags.\n\noptions:\n");
    fprintf(out, "  %-26s %s\n", "--config FILE", "JSON settings file (e.g. config/genloop.json)");
    for (int i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        char flag[64], def[64];
        int n = s->short_flag ? snprintf(flag, sizeof(flag), "-%c, ", s->short_flag)
                              : snprintf(flag, sizeof(flag), "    ");
        n += snprintf(flag + n, sizeof(flag) - (size_t)n, "--");
        for (const char *p = s->name; *p; p++) flag[n++] = *p == '_' ? '-' : *p;
        snprintf(flag + n, sizeof(flag) - (size_t)n, s->kind == SETTING_STR ? " STR" : " N");
        if (s->kind == SETTING_STR)
            snprintf(def, sizeof(def), "\"%s\"", (const char *)d + s->offset);
        else
            snprintf(def, sizeof(def), "%d", *(const int *)((const char *)d + s->offset));
        fprintf(out, "  %-26s %s (default %s)\n", flag, s->help, def);
    }
    fprintf(out, "  %-26s %s\n", "    --print-config", "print the merged settings as JSON and exit");
    fprintf(out, "  %-26s %s\n", "-h, --help", "show this help");
}

void config_print_json(FILE *out, const config *c) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        const char *p = (const char *)c + s->offset;
        if (s->kind == SETTING_STR)
            cJSON_AddStringToObject(root, s->name, p);
        else
            cJSON_AddNumberToObject(root, s->name, *(const int *)p);
    }
    char *text = cJSON_Print(root);
    fprintf(out, "%s\n", text);
    cJSON_free(text);
    cJSON_Delete(root);
}
