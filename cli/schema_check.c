/* schema_check.c -- `genloop schema-check`: how many real-world JSON
 * Schemas the structured-output compiler takes, and whether each compiled
 * grammar accepts the schema's valid instances and rejects its invalid ones
 * token by token (the metric of MaskBench, JSONSchemaBench's mask benchmark).
 *
 *   genloop schema-check -m MODEL [--limit N] [--every K] [--summary] FILE...
 *
 * FILE: JSON lines (gzipped when it ends in .gz), each {"id", "schema",
 * "tests": [{"valid", "data"}]}. An instance is spelled as Python's
 * json.dumps(data, ensure_ascii=False, separators=(",", ":")) spells it, the
 * spelling the published scores used. One JSON line per schema, then a
 * summary line. */
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "genloop.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: genloop schema-check -m MODEL [--limit N] [--every K] [--summary] FILE...\n"
            "  -m, --model PATH   GGUF model or vocab-only GGUF whose tokenizer spells the instances\n"
            "  --limit N          check the first N schemas only\n"
            "  --every K          check every K-th schema (a sample spread over the file)\n"
            "  --summary          print only the summary line\n"
            "FILE: MaskBench JSON lines, gzipped when the name ends in .gz\n");
}

/* ---- instances spelled as Python's json.dumps spells them --------------------------- */

typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) abort();
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
}

static void put_utf8(text *t, unsigned cp) {
    char b[4];
    int n;
    if (cp < 0x80) b[0] = (char)cp, n = 1;
    else if (cp < 0x800) b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000) b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | (cp >> 6 & 0x3F)), b[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | (cp >> 12 & 0x3F)), b[2] = (char)(0x80 | (cp >> 6 & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    put(t, b, (size_t)n);
}

static void put_string(text *t, const char *s) {
    put(t, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': put(t, "\\\"", 2); break;
        case '\\': put(t, "\\\\", 2); break;
        case '\n': put(t, "\\n", 2); break;
        case '\r': put(t, "\\r", 2); break;
        case '\t': put(t, "\\t", 2); break;
        case '\b': put(t, "\\b", 2); break;
        case '\f': put(t, "\\f", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                put(t, esc, 6);
            } else {
                put(t, (const char *)p, 1);
            }
        }
    }
    put(t, "\"", 1);
}

/* repr(float): the shortest digits that read back, fixed notation for
 * 1e-4 <= |x| < 1e16 (with ".0" when whole), otherwise d.ddde+XX. */
static void put_float(text *t, double x) {
    char buf[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    char digits[24];
    int nd = 0;
    const char *p = buf;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) put(t, "-", 1);
    if (exp >= -5 && exp < 16) {
        if (exp < 0) {
            put(t, "0.", 2);
            for (int i = 0; i < -exp - 1; i++) put(t, "0", 1);
            put(t, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp; i++) put(t, i < nd ? &digits[i] : "0", 1);
            put(t, ".", 1);
            if (nd > exp + 1) put(t, digits + exp + 1, (size_t)(nd - exp - 1));
            else put(t, "0", 1);
        }
    } else {
        put(t, digits, 1);
        if (nd > 1) {
            put(t, ".", 1);
            put(t, digits + 1, (size_t)(nd - 1));
        }
        snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        put(t, buf, strlen(buf));
    }
}

/* A number's source text decides int or float, as in Python. */
static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static const char *put_value(text *t, const char *p);

static const char *put_number(text *t, const char *p) {
    const char *q = p;
    bool is_float = false;
    while (*q && strchr("+-0123456789.eE", *q)) {
        if (*q == '.' || *q == 'e' || *q == 'E') is_float = true;
        q++;
    }
    if (is_float) {
        put_float(t, strtod(p, NULL));
    } else {
        const char *d = p + (*p == '-');
        bool zero = true;
        for (const char *r = d; r < q; r++) zero = zero && *r == '0';
        if (zero) put(t, "0", 1);
        else put(t, p, (size_t)(q - p));
    }
    return q;
}

static unsigned hex4(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (unsigned)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10);
    }
    return v;
}

/* A string literal decoded and spelled again (raw UTF-8, minimal escapes). */
static const char *put_str_literal(text *t, const char *p) {
    text raw = {0};
    put(&raw, "", 0);
    for (p++; *p && *p != '"'; p++) {
        if (*p != '\\') {
            put(&raw, p, 1);
            continue;
        }
        p++;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, *p);
        if (*p == 'u') {
            unsigned cp = hex4(p + 1);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[1] == '\\' && p[2] == 'u') {
                unsigned lo = hex4(p + 3);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            put_utf8(&raw, cp);
        } else if (k && *p) {
            put(&raw, &to[k - from], 1);
        }
    }
    put_string(t, raw.s);
    free(raw.s);
    return *p ? p + 1 : p;
}

static const char *put_value(text *t, const char *p) {
    p = skip_ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        put(t, p, 1);
        p = skip_ws(p + 1);
        bool first = true;
        while (*p && *p != close) {
            if (!first) put(t, ",", 1);
            first = false;
            if (close == '}') {
                p = put_str_literal(t, skip_ws(p));
                p = skip_ws(p);
                if (*p == ':') p++;
                put(t, ":", 1);
            }
            p = skip_ws(put_value(t, p));
            if (*p == ',') p = skip_ws(p + 1);
        }
        put(t, &close, 1);
        return *p ? p + 1 : p;
    }
    if (*p == '"') return put_str_literal(t, p);
    if (*p == '-' || (*p >= '0' && *p <= '9')) return put_number(t, p);
    const char *words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if (!strncmp(p, words[i], n)) {
            put(t, words[i], n);
            return p + n;
        }
    }
    return p + (*p != 0);
}

/* ---- the line's parts ---------------------------------------------------------- */

/* The end of the JSON value at p (which is valid JSON: cJSON read it). */
static const char *skip_value(const char *p) {
    p = skip_ws(p);
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1]) p++;
        return *p ? p + 1 : p;
    }
    if (*p == '{' || *p == '[') {
        int depth = 0;
        for (; *p; p++) {
            if (*p == '"') {
                p = skip_value(p) - 1;
                continue;
            }
            if (*p == '{' || *p == '[') depth++;
            if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
        }
        return p;
    }
    while (*p && !strchr(",}] \t\r\n", *p)) p++;
    return p;
}

/* The source text of member key of the object at p, or NULL. */
static const char *member_at(const char *p, const char *key) {
    p = skip_ws(p);
    if (*p != '{') return NULL;
    p = skip_ws(p + 1);
    size_t klen = strlen(key);
    while (*p == '"') {
        const char *kend = skip_value(p);
        bool match = (size_t)(kend - p) == klen + 2 && !strncmp(p + 1, key, klen);
        p = skip_ws(kend);
        if (*p == ':') p = skip_ws(p + 1);
        if (match) return p;
        p = skip_ws(skip_value(p));
        if (*p == ',') p = skip_ws(p + 1);
    }
    return NULL;
}

/* ---- statistics ------------------------------------------------------------------ */

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

static void add_sample(samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) abort();
    }
    s->v[s->n++] = x;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(samples *s, double q) {
    if (!s->n) return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_double);
    size_t i = (size_t)(q * (double)(s->n - 1) + 0.5);
    return s->v[i];
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct totals {
    long schemas, passing, compile_errors, valid, invalid, valid_rejected, invalid_accepted, tokens;
    samples compile_ms, mask_us;
} totals;

typedef struct options {
    long limit, every;
    bool summary;
} options;

static void check_line(gl_grammar_probe *probe, const char *line, totals *tot, const options *o) {
    cJSON *doc = cJSON_Parse(line);
    if (!doc) return;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(doc, "id");
    const char *schema_src = member_at(line, "schema");
    const char *tests_src = member_at(line, "tests");
    if (!schema_src) {
        cJSON_Delete(doc);
        return;
    }
    const char *schema_end = skip_value(schema_src);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddItemToObject(out, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
    gl_error err = {0};
    double t0 = now_ms();
    gl_grammar *g = gl_grammar_from_json_schema(schema_src, (size_t)(schema_end - schema_src), &err);
    double compile_ms = now_ms() - t0;
    tot->schemas++;
    cJSON_AddBoolToObject(out, "compiled", g != NULL);
    if (!g) cJSON_AddStringToObject(out, "error", err.message);
    cJSON_AddNumberToObject(out, "compile_ms", round(compile_ms * 1000) / 1000);
    add_sample(&tot->compile_ms, compile_ms);
    bool pass = g != NULL;
    if (!g) tot->compile_errors++;
    cJSON *tests = cJSON_AddArrayToObject(out, "tests");
    samples mine = {0};
    long tokens = 0;
    const char *p = tests_src ? skip_ws(tests_src) : NULL;
    if (p && *p == '[') p = skip_ws(p + 1);
    while (g && p && *p == '{') {
        const char *end = skip_value(p);
        const char *valid_src = member_at(p, "valid"), *data_src = member_at(p, "data");
        if (valid_src && data_src) {
            bool valid = !strncmp(valid_src, "true", 4);
            text inst = {0};
            put(&inst, "", 0);
            put_value(&inst, data_src);
            gl_grammar_walk w;
            bool walked = gl_grammar_probe_walk(probe, g, inst.s, inst.len, &w, &err);
            bool accepted = walked && w.accepted;
            for (int i = 0; walked && i < w.n_masks; i++) {
                add_sample(&mine, w.mask_us[i]);
                add_sample(&tot->mask_us, w.mask_us[i]);
            }
            tokens += walked ? w.n_tokens : 0;
            cJSON *r = cJSON_CreateObject();
            cJSON_AddBoolToObject(r, "valid", valid);
            cJSON_AddBoolToObject(r, "accepted", accepted);
            cJSON_AddItemToArray(tests, r);
            if (valid) tot->valid++, tot->valid_rejected += !accepted;
            else tot->invalid++, tot->invalid_accepted += accepted;
            if (accepted != valid) pass = false;
            free(inst.s);
        }
        p = skip_ws(end);
        if (*p == ',') p = skip_ws(p + 1);
    }
    tot->tokens += tokens;
    tot->passing += pass;
    cJSON_AddNumberToObject(out, "tokens", (double)tokens);
    double mx = mine.n ? pct(&mine, 1.0) : 0;
    cJSON_AddNumberToObject(out, "mask_us_max", round(mx * 10) / 10);
    cJSON_AddNumberToObject(out, "mask_us_p50", round(pct(&mine, 0.5) * 10) / 10);
    free(mine.v);
    if (!o->summary) {
        char *s = cJSON_PrintUnformatted(out);
        if (s) puts(s);
        free(s);
    }
    cJSON_Delete(out);
    cJSON_Delete(doc);
    gl_grammar_free(g);
}

/* A file's lines through gzip -dc when it is gzipped (no zlib dependency for
 * one command); pid is the decompressor's, 0 when there is none. */
static FILE *open_lines(const char *path, pid_t *pid) {
    *pid = 0;
    size_t n = strlen(path);
    if (n < 3 || strcmp(path + n - 3, ".gz")) return fopen(path, "r");
    if (access(path, R_OK)) return NULL;
    int fd[2];
    if (pipe(fd)) return NULL;
    *pid = fork();
    if (*pid < 0) return NULL;
    if (*pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execlp("gzip", "gzip", "-dc", "--", path, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    return fdopen(fd[0], "r");
}

int cmd_schema_check(int argc, char **argv) {
    const char *model_path = NULL;
    options o = {.limit = -1, .every = 1};
    const char **files = calloc((size_t)argc, sizeof *files);
    int n_files = 0;
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            if (!cli_set_once("-m", &model_path, argv[++i])) return 2;
        } else if (!strcmp(a, "--limit") && i + 1 < argc) {
            if (!cli_parse_int("--limit", argv[++i], 0, 1L << 40, &o.limit)) return 2;
        } else if (!strcmp(a, "--every") && i + 1 < argc) {
            if (!cli_parse_int("--every", argv[++i], 1, 1L << 40, &o.every)) return 2;
        } else if (!strcmp(a, "--summary")) {
            o.summary = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "genloop schema-check: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            files[n_files++] = a;
        }
    }
    if (!model_path || !n_files) {
        free(files);
        fprintf(stderr, "genloop schema-check: %s is required\n", !model_path ? "-m MODEL" : "FILE");
        usage(stderr);
        return 2;
    }
    gl_error err = {0};
    gl_model *model = gl_model_load(model_path, &err);
    if (!model) {
        fprintf(stderr, "genloop schema-check: %s\n", err.message);
        free(files);
        return 1;
    }
    gl_grammar_probe *probe = gl_grammar_probe_create(model, &err);
    if (!probe) {
        fprintf(stderr, "genloop schema-check: %s\n", err.message);
        gl_model_free(model);
        free(files);
        return 1;
    }
    totals tot = {0};
    double t0 = now_ms();
    long seen = 0;
    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    for (int f = 0; f < n_files && rc == 0; f++) {
        pid_t pid;
        FILE *in = open_lines(files[f], &pid);
        if (!in) {
            fprintf(stderr, "genloop schema-check: %s: cannot read\n", files[f]);
            rc = 1;
            break;
        }
        ssize_t n;
        while ((n = getline(&line, &cap, in)) > 0 && (o.limit < 0 || tot.schemas < o.limit)) {
            if (seen++ % o.every) continue;
            if (*skip_ws(line)) check_line(probe, line, &tot, &o);
        }
        fclose(in);
        if (pid > 0) {
            int st;
            kill(pid, SIGTERM);
            waitpid(pid, &st, 0);
        }
    }
    free(line);
    free(files);
    double total_s = (now_ms() - t0) / 1e3;
    printf("{\"summary\":true,\"schemas\":%ld,\"passing\":%ld,\"passing_pct\":%.1f,\"compile_error\":%ld,"
           "\"valid\":%ld,\"valid_rejected\":%ld,\"invalid\":%ld,\"invalid_accepted\":%ld,\"tokens\":%ld,"
           "\"compile_ms_p50\":%.3f,\"compile_ms_p99\":%.3f,\"compile_ms_max\":%.3f,"
           "\"mask_us_p50\":%.1f,\"mask_us_p99\":%.1f,\"mask_us_max\":%.1f,\"seconds\":%.1f}\n",
           tot.schemas, tot.passing, tot.schemas ? 100.0 * (double)tot.passing / (double)tot.schemas : 0.0,
           tot.compile_errors, tot.valid, tot.valid_rejected, tot.invalid, tot.invalid_accepted, tot.tokens,
           pct(&tot.compile_ms, 0.5), pct(&tot.compile_ms, 0.99), pct(&tot.compile_ms, 1.0), pct(&tot.mask_us, 0.5),
           pct(&tot.mask_us, 0.99), pct(&tot.mask_us, 1.0), total_s);
    free(tot.compile_ms.v);
    free(tot.mask_us.v);
    gl_grammar_probe_free(probe);
    gl_model_free(model);
    return rc;
}
