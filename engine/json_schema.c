/* json_schema.c -- JSON Schema to GBNF text.
 *
 * Each schema node becomes a rule matching one JSON value. Objects emit
 * their declared properties in schema order, required ones always and
 * optional ones maybe (a chain of rules: "first member still to come" and
 * "a member came, the next needs a comma"); properties not declared are
 * emitted only when additionalProperties is a schema. Whitespace between
 * tokens is bounded (one space or a newline and up to 16 spaces) and so are
 * number lengths, so a model cannot loop forever inside a structure that
 * has no string in it. $refs become shared rules, which makes recursion
 * free. */
#include "json_schema.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gl_error.h"
#include "grammar.h"

#define JS_MAX_DEPTH 64       /* schema nesting */
#define JS_MAX_ITEMS 1000     /* minItems/maxItems that unroll into rules */
#define JS_MAX_RULES 100000

typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof tmp) n = (int)sizeof tmp - 1;
    if (n > 0) sb_put(b, tmp, (size_t)n);
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* A GBNF string literal matching exactly these bytes. */
static void sb_literal(sbuf *b, const char *s, size_t n) {
    sb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) sb_printf(b, "\\x%02X", c);
        else sb_put(b, (const char *)&c, 1);
    }
    sb_puts(b, "\"");
}

typedef struct ref_rule {
    char *ref;
    int rule;
} ref_rule;

typedef struct compiler {
    const cJSON *root;
    sbuf out;                 /* rules so far */
    int n_rules;
    ref_rule *refs;
    int n_refs, cap_refs;
    gl_error *err;
    size_t charged;           /* bytes of out charged to the compile budget */
    bool failed;
    char path[1024];          /* JSON pointer of the schema node at hand */
} compiler;

__attribute__((format(printf, 2, 3))) static int fail(compiler *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    gl_error_vset(c->err, fmt, ap);
    va_end(ap);
    gl_error_prefix(c->err, "json_schema at %s", c->path[0] ? c->path : "/");
    return -1;
}

/* Append a path segment (JSON pointer escaping); returns the old length to restore. */
static size_t path_push(compiler *c, const char *seg) {
    size_t old = strlen(c->path), n = old;
    if (n + 2 < sizeof c->path) c->path[n++] = '/';
    for (const char *s = seg; *s && n + 3 < sizeof c->path; s++) {
        if (*s == '~' || *s == '/') {
            c->path[n++] = '~';
            c->path[n++] = *s == '~' ? '0' : '1';
        } else {
            c->path[n++] = *s;
        }
    }
    c->path[n] = 0;
    return old;
}

static size_t path_push_index(compiler *c, int i) {
    char seg[16];
    snprintf(seg, sizeof seg, "%d", i);
    return path_push(c, seg);
}

static void path_pop(compiler *c, size_t old) { c->path[old] = 0; }

static int new_rule(compiler *c) {
    if (c->n_rules >= JS_MAX_RULES) return fail(c, "the schema needs more than %d grammar rules", JS_MAX_RULES);
    return c->n_rules++;
}

/* Write "rN ::= body\n". */
static void define(compiler *c, int rule, const sbuf *body) {
    sb_printf(&c->out, "r%d ::= ", rule);
    sb_put(&c->out, body->s ? body->s : "", body->len);
    sb_puts(&c->out, "\n");
    if (body->oom) c->out.oom = true;
}

static const char *const PRELUDE =
    "ws ::= | \" \" | \"\\n\" [ ]{0,16}\n"
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
    "json-int ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "json-number ::= json-int (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "json-bool ::= \"true\" | \"false\"\n"
    "json-null ::= \"null\"\n"
    "json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null\n"
    "json-member ::= json-string ws \":\" ws json-value ws\n"
    "json-object ::= \"{\" ws (json-member (\",\" ws json-member)*)? \"}\"\n"
    "json-array ::= \"[\" ws (json-value ws (\",\" ws json-value ws)*)? \"]\"\n"
    "date ::= [1-9] [0-9]{3} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])\n"
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "hex ::= [0-9a-f]\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "email ::= [a-zA-Z0-9_.+-]{1,32} \"@\" [a-zA-Z0-9-]{1,32} (\".\" [a-zA-Z0-9-]{1,16}){1,3}\n";

static int gen(compiler *c, const cJSON *s, int depth);

static bool is_annotation(const char *k) {
    static const char *const ann[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
    for (int i = 0; ann[i]; i++)
        if (!strcmp(k, ann[i])) return true;
    return false;
}

static bool is_supported(const char *k) {
    static const char *const kw[] = {"type", "properties", "required", "additionalProperties", "items", "prefixItems",
                                     "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
                                     "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                     "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; kw[i]; i++)
        if (!strcmp(k, kw[i])) return true;
    return is_annotation(k);
}

/* A non-negative integer keyword, or def when absent. */
static long count_kw(compiler *c, const cJSON *s, const char *k, long def, long max) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    if (!v) return def;
    size_t old = path_push(c, k);
    long r = def;
    /* The range first: casting a double past LONG_MAX to long is undefined. */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0))
        fail(c, "must be a non-negative integer");
    else if (v->valuedouble > (double)max)
        fail(c, "values above %ld are not supported", max);
    else if (v->valuedouble != (double)(long)v->valuedouble)
        fail(c, "must be a non-negative integer");
    else
        r = (long)v->valuedouble;
    path_pop(c, old);
    return r;
}

/* ---- literals (enum, const) ------------------------------------------------- */

static void literal_value(compiler *c, sbuf *b, const cJSON *v) {
    char *text = cJSON_PrintUnformatted(v);
    if (!text) {
        b->oom = true;
        return;
    }
    sb_literal(b, text, strlen(text));
    free(text);
}

/* ---- integers in a range ------------------------------------------------------- */

/* Decimal strings lo..hi of the same length n, digit by digit. */
static void digits_range(sbuf *b, const char *lo, const char *hi, int n) {
    if (n == 0) return;
    if (lo[0] == hi[0]) {
        sb_printf(b, "\"%c\" ", lo[0]);
        digits_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_rest_zero = true, hi_rest_nine = true;
    for (int i = 1; i < n; i++) {
        lo_rest_zero = lo_rest_zero && lo[i] == '0';
        hi_rest_nine = hi_rest_nine && hi[i] == '9';
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    sb_puts(b, "(");
    int first = lo[0], last = hi[0];
    if (!lo_rest_zero) {
        sb_printf(b, "\"%c\" ", lo[0]);
        digits_range(b, lo + 1, nines, n - 1);
        sb_puts(b, "| ");
        first++;
    }
    if (!hi_rest_nine) last--;
    if (first <= last) {
        sb_printf(b, "[%c-%c] ", first, last);
        if (n > 1) sb_printf(b, "[0-9]{%d} ", n - 1);
        if (!hi_rest_nine) sb_puts(b, "| ");
    }
    if (!hi_rest_nine) {
        sb_printf(b, "\"%c\" ", hi[0]);
        digits_range(b, zeros, hi + 1, n - 1);
    }
    sb_puts(b, ") ");
}

static int n_digits(long long x) {
    int n = 1;
    while (x >= 10) {
        x /= 10;
        n++;
    }
    return n;
}

/* Non-negative integers in [a, b] (b < 0: unbounded, up to 18 digits). */
static void nonneg_range(sbuf *b, long long lo, long long hi) {
    long long p10[20];
    p10[0] = 1;
    for (int i = 1; i < 19; i++) p10[i] = p10[i - 1] * 10;
    int d_lo = n_digits(lo), d_hi = hi < 0 ? 18 : n_digits(hi);
    sb_puts(b, "(");
    for (int d = d_lo; d <= d_hi; d++) {
        long long a = d == 1 ? 0 : p10[d - 1], z = p10[d] - 1;
        if (a < lo) a = lo;
        if (hi >= 0 && z > hi) z = hi;
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%lld", a);
        snprintf(sz, sizeof sz, "%lld", z);
        if (d > d_lo) sb_puts(b, "| ");
        digits_range(b, sa, sz, d);
    }
    sb_puts(b, ") ");
}

static int gen_integer(compiler *c, const cJSON *s, sbuf *b) {
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    static const char *const kws[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kws[i]);
        if (!v) continue;
        size_t old = path_push(c, kws[i]);
        if (!cJSON_IsNumber(v) || v->valuedouble < -1e17 || v->valuedouble > 1e17) {
            fail(c, "must be a number between -1e17 and 1e17");
            path_pop(c, old);
            return -1;
        }
        path_pop(c, old);
        double d = v->valuedouble;
        if (i < 2) {
            long long x = (long long)d;
            if ((double)x < d) x++; /* ceil */
            if (i == 1 && (double)x == d) x++;
            if (!has_lo || x > lo) lo = x;
            has_lo = true;
        } else {
            long long x = (long long)d;
            if ((double)x > d) x--; /* floor */
            if (i == 3 && (double)x == d) x--;
            if (!has_hi || x < hi) hi = x;
            has_hi = true;
        }
    }
    if (has_lo && has_hi && lo > hi) return fail(c, "minimum %lld is above maximum %lld: no integer fits", lo, hi);
    if (!has_lo && !has_hi) {
        sb_puts(b, "json-int");
        return 0;
    }
    bool neg = !has_lo || lo < 0, pos = !has_hi || hi >= 0;
    sb_puts(b, "(");
    if (neg) { /* -x for x in [max(1, -hi), -lo] */
        long long xl = has_hi && hi < 0 ? -hi : 1, xh = has_lo ? -lo : -1;
        sb_puts(b, "\"-\" ");
        nonneg_range(b, xl, xh);
    }
    if (neg && pos) sb_puts(b, "| ");
    if (pos) nonneg_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    sb_puts(b, ")");
    return 0;
}

/* ---- pattern: a regex subset to GBNF for string content ------------------------ */

typedef struct rx {
    compiler *c;
    const char *p, *end;
    sbuf *b;
    bool raw;                 /* match the characters themselves, not their JSON spelling (gl_grammar_from_regex) */
} rx;

typedef struct cp_set {
    uint32_t lo[128], hi[128];
    int n;
} cp_set;

static void set_add(rx *r, cp_set *s, uint32_t lo, uint32_t hi) {
    if (s->n == 128) {
        fail(r->c, "pattern: character class with more than 128 ranges");
        return;
    }
    s->lo[s->n] = lo;
    s->hi[s->n++] = hi;
}

static void set_add_escape(rx *r, cp_set *s, char e) {
    switch (e) {
    case 'd': set_add(r, s, '0', '9'); break;
    case 'w': set_add(r, s, '0', '9'); set_add(r, s, 'a', 'z'); set_add(r, s, 'A', 'Z'); set_add(r, s, '_', '_'); break;
    case 's': set_add(r, s, ' ', ' '); set_add(r, s, '\t', '\r'); break;
    case 'n': set_add(r, s, '\n', '\n'); break;
    case 't': set_add(r, s, '\t', '\t'); break;
    case 'r': set_add(r, s, '\r', '\r'); break;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
            fail(r->c, "pattern: escape \\%c is not in the supported subset", e);
        else
            set_add(r, s, (unsigned char)e, (unsigned char)e);
    }
}

static void set_normalize(cp_set *s, bool negate) {
    for (int i = 1; i < s->n; i++) /* insertion sort by lo */
        for (int j = i; j > 0 && s->lo[j] < s->lo[j - 1]; j--) {
            uint32_t t = s->lo[j]; s->lo[j] = s->lo[j - 1]; s->lo[j - 1] = t;
            t = s->hi[j]; s->hi[j] = s->hi[j - 1]; s->hi[j - 1] = t;
        }
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        if (n && s->lo[i] <= s->hi[n - 1] + 1) {
            if (s->hi[i] > s->hi[n - 1]) s->hi[n - 1] = s->hi[i];
        } else {
            s->lo[n] = s->lo[i];
            s->hi[n++] = s->hi[i];
        }
    }
    s->n = n;
    if (!negate) return;
    cp_set out = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < n; i++) {
        if (s->lo[i] > next) {
            out.lo[out.n] = next;
            out.hi[out.n++] = s->lo[i] - 1;
        }
        next = s->hi[i] + 1;
    }
    if (next <= 0x10FFFF && out.n < 128) {
        out.lo[out.n] = next;
        out.hi[out.n++] = 0x10FFFF;
    }
    *s = out;
}

/* The JSON spelling of one code point inside a string, as a GBNF literal. */
static void json_cp_literal(sbuf *b, uint32_t cp) {
    static const char *const esc[32] = {[8] = "\\\\b", [9] = "\\\\t", [10] = "\\\\n", [12] = "\\\\f", [13] = "\\\\r"};
    if (cp == '"') sb_puts(b, "\"\\\\\\\"\"");
    else if (cp == '\\') sb_puts(b, "\"\\\\\\\\\"");
    else if (cp < 0x20 && esc[cp]) sb_printf(b, "\"%s\"", esc[cp]);
    else if (cp < 0x20) sb_printf(b, "\"\\\\u00%02x\"", cp);
    else sb_printf(b, "[\\U%08X]", cp);
}

/* A set of code points (sorted, merged) as GBNF matching their JSON
 * spelling: the ones that need no escape as one class, then quote,
 * backslash and control characters as escape alternatives. */
static void emit_set_json(rx *r, const cp_set *s) {
    sbuf *b = r->b;
    if (r->raw) {
        sb_puts(b, "[");
        for (int i = 0; i < s->n; i++) sb_printf(b, "\\U%08X-\\U%08X", s->lo[i], s->hi[i]);
        sb_puts(b, "] ");
        if (!s->n) fail(r->c, "pattern: an empty character class matches nothing");
        return;
    }
    sbuf cls = {0};
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->lo[i] < 0x20 ? 0x20 : s->lo[i], hi = s->hi[i];
        while (lo <= hi) { /* pieces of [lo, hi] around '"' and '\\' */
            uint32_t stop = hi;
            if (lo <= '"' && '"' <= hi) stop = lo == '"' ? '"' : '"' - 1;
            else if (lo <= '\\' && '\\' <= hi) stop = lo == '\\' ? '\\' : '\\' - 1;
            if (!(stop == lo && (lo == '"' || lo == '\\'))) sb_printf(&cls, "\\U%08X-\\U%08X", lo, stop);
            lo = stop + 1;
            if (stop == 0x10FFFF) break;
        }
    }
    bool any = false;
    sb_puts(b, "(");
    if (cls.len) {
        sb_printf(b, "[%s] ", cls.s);
        any = true;
    }
    free(cls.s);
    for (int i = 0; i < s->n; i++) {
        for (uint32_t cp = s->lo[i]; cp <= s->hi[i] && cp < 0x20; cp++) {
            if (any) sb_puts(b, "| ");
            json_cp_literal(b, cp);
            any = true;
        }
        static const uint32_t special[2] = {'"', '\\'};
        for (int k = 0; k < 2; k++) {
            if (special[k] < s->lo[i] || special[k] > s->hi[i]) continue;
            if (any) sb_puts(b, "| ");
            json_cp_literal(b, special[k]);
            any = true;
        }
    }
    if (!any) fail(r->c, "pattern: an empty character class matches nothing");
    sb_puts(b, ") ");
}

static void rx_alt(rx *r, int depth);

/* The next UTF-8 character of the pattern (a stray byte stands for itself). */
static uint32_t rx_char(rx *r) {
    const unsigned char *q = (const unsigned char *)r->p;
    int n = q[0] < 0x80 ? 1 : (q[0] & 0xE0) == 0xC0 ? 2 : (q[0] & 0xF0) == 0xE0 ? 3 : 4;
    if ((const char *)q + n > r->end) n = 1;
    uint32_t cp = q[0];
    if (n > 1) {
        cp &= 0x3Fu >> (n - 1);
        for (int i = 1; i < n; i++) cp = cp << 6 | (q[i] & 0x3Fu);
    }
    r->p += n;
    return cp;
}

static int rx_number(rx *r) {
    long v = 0;
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') {
        fail(r->c, "pattern: expected a number in {}");
        return 0;
    }
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        v = v * 10 + (*r->p++ - '0');
        if (v > 1000) {
            fail(r->c, "pattern: repetition count above 1000");
            return 0;
        }
    }
    return (int)v;
}

static void rx_seq(rx *r, int depth) {
    sbuf *b = r->b;
    sb_puts(b, "(");
    while (!r->c->failed && r->p < r->end && *r->p != '|' && *r->p != ')') {
        char ch = *r->p;
        if (ch == '(') {
            if (depth > 32) {
                fail(r->c, "pattern: groups nested deeper than 32");
                return;
            }
            r->p++;
            if (r->end - r->p >= 2 && r->p[0] == '?' && r->p[1] == ':') r->p += 2;
            else if (r->p < r->end && *r->p == '?') {
                fail(r->c, "pattern: (?...) other than (?:...) is not in the supported subset");
                return;
            }
            sb_puts(b, "(");
            rx_alt(r, depth + 1);
            sb_puts(b, ") ");
            if (r->p >= r->end || *r->p != ')') {
                fail(r->c, "pattern: unclosed group");
                return;
            }
            r->p++;
        } else if (ch == '[') {
            r->p++;
            bool neg = r->p < r->end && *r->p == '^';
            if (neg) r->p++;
            cp_set s = {.n = 0};
            bool first = true;
            while (!r->c->failed && r->p < r->end && (*r->p != ']' || first)) {
                first = false;
                uint32_t lo;
                if (*r->p == '\\' && r->p + 1 < r->end) {
                    char e = r->p[1];
                    r->p += 2;
                    if (strchr("dwsntr", e)) {
                        set_add_escape(r, &s, e);
                        continue;
                    }
                    lo = (unsigned char)e;
                    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
                        fail(r->c, "pattern: escape \\%c is not in the supported subset", e);
                        return;
                    }
                } else {
                    lo = rx_char(r);
                }
                uint32_t hi = lo;
                if (r->end - r->p >= 2 && r->p[0] == '-' && r->p[1] != ']') {
                    r->p++;
                    hi = (unsigned char)*r->p++;
                    if (hi == '\\' && r->p < r->end) hi = (unsigned char)*r->p++;
                    if (hi < lo) {
                        fail(r->c, "pattern: range end below its start");
                        return;
                    }
                }
                set_add(r, &s, lo, hi);
            }
            if (r->p >= r->end) {
                fail(r->c, "pattern: unterminated character class");
                return;
            }
            r->p++;
            set_normalize(&s, neg);
            emit_set_json(r, &s);
        } else if (ch == '.' || ch == '\\') {
            cp_set s = {.n = 0};
            if (ch == '.') {
                set_add(r, &s, '\n', '\n');
                set_normalize(&s, true);
                r->p++;
            } else {
                if (r->p + 1 >= r->end) {
                    fail(r->c, "pattern: escape at the end");
                    return;
                }
                char e = r->p[1];
                r->p += 2;
                bool upper = e == 'D' || e == 'W' || e == 'S';
                set_add_escape(r, &s, upper ? (char)(e + 32) : e);
                set_normalize(&s, upper);
            }
            emit_set_json(r, &s);
        } else if (ch == '^' || ch == '$') {
            fail(r->c, "pattern: anchor '%c' is only supported at the very start (^) or end ($)", ch);
            return;
        } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
            fail(r->c, "pattern: quantifier '%c' with nothing to repeat", ch);
            return;
        } else {
            uint32_t cp = rx_char(r);
            if (r->raw) sb_printf(b, "[\\U%08X]", cp);
            else json_cp_literal(b, cp);
            sb_puts(b, " ");
        }
        /* quantifier */
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
            sb_printf(b, "%c ", *r->p++);
        } else if (r->p < r->end && *r->p == '{') {
            r->p++;
            int min = rx_number(r), max = min;
            bool open = false;
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                if (r->p < r->end && *r->p == '}') open = true;
                else max = rx_number(r);
            }
            if (r->c->failed) return;
            if (r->p >= r->end || *r->p != '}') {
                fail(r->c, "pattern: expected '}'");
                return;
            }
            r->p++;
            if (!open && max < min) {
                fail(r->c, "pattern: {%d,%d} has its maximum below its minimum", min, max);
                return;
            }
            if (open) sb_printf(b, "{%d,} ", min);
            else sb_printf(b, "{%d,%d} ", min, max);
        }
        if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
    }
    sb_puts(b, ") ");
}

static void rx_alt(rx *r, int depth) {
    rx_seq(r, depth);
    while (!r->c->failed && r->p < r->end && *r->p == '|') {
        r->p++;
        sb_puts(r->b, "| ");
        rx_seq(r, depth);
    }
}

static void gen_pattern(compiler *c, const char *pattern, sbuf *b) {
    size_t n = strlen(pattern);
    const char *p = pattern, *end = pattern + n;
    if (p < end && *p == '^') p++;
    if (end > p && end[-1] == '$' && (end - 1 == p || end[-2] != '\\')) end--;
    size_t old = path_push(c, "pattern");
    rx r = {c, p, end, b};
    sb_puts(b, "\"\\\"\" (");
    rx_alt(&r, 0);
    if (!c->failed && r.p < r.end) fail(c, "pattern: unbalanced ')'");
    sb_puts(b, ") \"\\\"\"");
    path_pop(c, old);
}

/* ---- the schema walk ---------------------------------------------------------------- */

static const cJSON *resolve_ref(compiler *c, const char *ref) {
    if (ref[0] != '#') {
        fail(c, "$ref '%s': only local references (#/...) are supported", ref);
        return NULL;
    }
    const cJSON *node = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                seg[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                seg[n++] = *p++;
            }
        }
        seg[n] = 0;
        if (cJSON_IsArray(node)) {
            char *endp;
            long i = strtol(seg, &endp, 10);
            node = *endp ? NULL : cJSON_GetArrayItem(node, (int)i);
        } else {
            node = cJSON_GetObjectItemCaseSensitive(node, seg);
        }
        if (!node) {
            fail(c, "$ref '%s' does not resolve", ref);
            return NULL;
        }
    }
    if (*p) {
        fail(c, "$ref '%s' is not a JSON pointer", ref);
        return NULL;
    }
    return node;
}

static int gen_ref(compiler *c, const char *ref, int depth) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) return c->refs[i].rule;
    const cJSON *target = resolve_ref(c, ref);
    if (!target) return -1;
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? 2 * c->cap_refs : 16;
        ref_rule *r = realloc(c->refs, (size_t)cap * sizeof *r);
        if (!r) return fail(c, "out of memory");
        c->refs = r;
        c->cap_refs = cap;
    }
    int rule = new_rule(c);
    if (rule < 0) return -1;
    char *copy = strdup(ref);
    if (!copy) return fail(c, "out of memory");
    c->refs[c->n_refs++] = (ref_rule){copy, rule};
    /* errors inside the target name its own path */
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref + 1);
    int inner = gen(c, target, depth + 1);
    memcpy(c->path, saved, sizeof saved);
    if (inner < 0) return -1;
    sbuf body = {0};
    sb_printf(&body, "r%d", inner);
    define(c, rule, &body);
    free(body.s);
    return rule;
}

/* One property "name": value, as a GBNF sequence. */
static void member(sbuf *b, const char *name, int value_rule) {
    cJSON *key = cJSON_CreateString(name);
    char *text = key ? cJSON_PrintUnformatted(key) : NULL;
    if (text) sb_literal(b, text, strlen(text));
    else b->oom = true;
    sb_printf(b, " ws \":\" ws r%d ws", value_rule);
    free(text);
    cJSON_Delete(key);
}

/* Code points of a UTF-8 name (bytes that do not decode stand for themselves). */
static int name_code_points(const char *name, int32_t *cp, int cap) {
    const unsigned char *p = (const unsigned char *)name;
    int n = 0;
    while (*p && n < cap) {
        int len = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 1;
        int32_t v = len == 1 ? *p : *p & (0x3F >> (len - 1));
        int k = 1;
        for (; k < len && (p[k] & 0xC0) == 0x80; k++) v = v << 6 | (p[k] & 0x3F);
        if (k < len) len = 1, v = *p;
        cp[n++] = v;
        p += len;
    }
    return *p ? -1 : n;
}

#define JS_MAX_KEY 256        /* code points of a name an additional key must differ from */

static void sb_code_point(sbuf *b, int32_t v) {
    if (v <= 0xFFFF) sb_printf(b, "\\u%04X", (unsigned)v);
    else sb_printf(b, "\\U%08X", (unsigned)v);
}

/* The rest of a JSON string key after a prefix that names idx[0..m-1]
 * share (their first pos code points): it may end only where no name
 * does, leave them by a character none of them has next (then anything),
 * or follow one. Escapes that could spell a name's next character are left
 * out while following, so a key cannot equal a name in another spelling. */
static int key_rest(compiler *c, int32_t (*cps)[JS_MAX_KEY], const int *lens, const int *idx, int m, int pos) {
    int r = new_rule(c);
    if (r < 0) return -1;
    bool terminal = false;
    int32_t *next = malloc((size_t)m * sizeof *next); /* the names' distinct next characters */
    int *sub = malloc((size_t)m * sizeof *sub);
    int n_next = 0;
    if (!next || !sub) {
        free(next);
        free(sub);
        return fail(c, "out of memory");
    }
    for (int i = 0; i < m; i++) {
        if (lens[idx[i]] == pos) {
            terminal = true;
            continue;
        }
        int32_t v = cps[idx[i]][pos];
        int k = 0;
        while (k < n_next && next[k] != v) k++;
        if (k == n_next) next[n_next++] = v;
    }
    sbuf body = {0};
    if (!terminal) sb_puts(&body, "\"\\\"\" | ");
    sb_puts(&body, "([^\"\\\\\\x00-\\x1F");
    for (int k = 0; k < n_next; k++) sb_code_point(&body, next[k]);
    sb_puts(&body, "]");
    static const char esc[] = "\"\\/bfnrt", dec[] = "\"\\/\b\f\n\r\t";
    for (int e = 0; esc[e]; e++) {
        int k = 0;
        while (k < n_next && next[k] != dec[e]) k++;
        if (k < n_next) continue;
        sb_puts(&body, " | \"\\\\");
        if (esc[e] == '"' || esc[e] == '\\') sb_puts(&body, "\\");
        sb_put(&body, &esc[e], 1);
        sb_puts(&body, "\"");
    }
    sb_puts(&body, ") json-char* \"\\\"\"");
    for (int k = 0; k < n_next && !c->failed; k++) {
        int ms = 0;
        for (int i = 0; i < m; i++)
            if (lens[idx[i]] > pos && cps[idx[i]][pos] == next[k]) sub[ms++] = idx[i];
        int child = key_rest(c, cps, lens, sub, ms, pos + 1);
        sb_puts(&body, " | \"");
        sb_code_point(&body, next[k]);
        sb_printf(&body, "\" r%d", child);
    }
    free(next);
    free(sub);
    if (!c->failed) define(c, r, &body);
    free(body.s);
    return c->failed ? -1 : r;
}

/* A JSON string that is none of names[0..n-1]: an additional property's
 * key, which must not repeat a declared one (readers keep the last of
 * duplicate keys, so the declared value would be lost). */
static int key_not_in(compiler *c, const char *const *names, int n) {
    int32_t (*cps)[JS_MAX_KEY] = malloc((size_t)n * sizeof *cps);
    int *lens = malloc((size_t)n * sizeof *lens), *idx = malloc((size_t)n * sizeof *idx);
    int r = -1;
    if (!cps || !lens || !idx) {
        r = fail(c, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        lens[i] = name_code_points(names[i], cps[i], JS_MAX_KEY);
        idx[i] = i;
        if (lens[i] < 0) {
            r = fail(c, "property name longer than %d characters beside additionalProperties", JS_MAX_KEY);
            goto done;
        }
    }
    int rest = key_rest(c, cps, lens, idx, n, 0);
    r = new_rule(c);
    if (rest >= 0 && r >= 0) sb_printf(&c->out, "r%d ::= \"\\\"\" r%d\n", r, rest);
done:
    free(cps);
    free(lens);
    free(idx);
    return c->failed ? -1 : r;
}

static int gen_object(compiler *c, const cJSON *s, int depth, sbuf *b) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, "properties must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, "required must be an array");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, "additionalProperties must be a boolean or a schema");
    int n_props = props ? cJSON_GetArraySize(props) : 0;
    if (!props && !req && (!addl || cJSON_IsTrue(addl))) {
        sb_puts(b, "json-object");
        return 0;
    }
    /* declared properties, then required names not declared (any value) */
    int n_req = req ? cJSON_GetArraySize(req) : 0;
    int cap = n_props + n_req;
    const char **names = calloc((size_t)cap + 1, sizeof *names);
    int *rules = calloc((size_t)cap + 1, sizeof *rules);
    bool *required = calloc((size_t)cap + 1, sizeof *required);
    int n = 0, ret = 0;
    if (!names || !rules || !required) {
        ret = fail(c, "out of memory");
        goto done;
    }
    size_t old = path_push(c, "properties");
    for (const cJSON *p = props ? props->child : NULL; p && !c->failed; p = p->next) {
        size_t o2 = path_push(c, p->string);
        names[n] = p->string;
        rules[n] = gen(c, p, depth + 1);
        n++;
        path_pop(c, o2);
    }
    path_pop(c, old);
    old = path_push(c, "required");
    for (int i = 0; i < n_req && !c->failed; i++) {
        const cJSON *r = cJSON_GetArrayItem(req, i);
        size_t o2 = path_push_index(c, i);
        if (!cJSON_IsString(r)) {
            fail(c, "must be a string");
        } else {
            int k = 0;
            while (k < n && strcmp(names[k], r->valuestring)) k++;
            if (k == n) {
                names[n] = r->valuestring;
                rules[n] = new_rule(c);
                if (rules[n] >= 0) sb_printf(&c->out, "r%d ::= json-value\n", rules[n]);
                n++;
            }
            required[k] = true;
        }
        path_pop(c, o2);
    }
    path_pop(c, old);
    int extra = -1;
    if (addl && cJSON_IsObject(addl)) {
        old = path_push(c, "additionalProperties");
        int v = gen(c, addl, depth + 1);
        path_pop(c, old);
        int key = n ? key_not_in(c, names, n) : -1;
        extra = new_rule(c);
        if (v >= 0 && extra >= 0 && !n) sb_printf(&c->out, "r%d ::= json-string ws \":\" ws r%d ws\n", extra, v);
        if (v >= 0 && extra >= 0 && n && key >= 0) sb_printf(&c->out, "r%d ::= r%d ws \":\" ws r%d ws\n", extra, key, v);
    }
    if (c->failed) {
        ret = -1;
        goto done;
    }
    /* F_i: no member yet, members i.. to come; C_i: a member came. */
    int *f = malloc(((size_t)n + 1) * sizeof *f), *cc = malloc(((size_t)n + 1) * sizeof *cc);
    if (!f || !cc) {
        free(f);
        free(cc);
        ret = fail(c, "out of memory");
        goto done;
    }
    for (int i = 0; i <= n; i++) {
        f[i] = new_rule(c);
        cc[i] = new_rule(c);
    }
    if (!c->failed) {
        sbuf body = {0};
        if (extra >= 0) sb_printf(&body, "(\",\" ws r%d)*", extra);
        define(c, cc[n], &body);
        body.len = 0;
        if (extra >= 0) sb_printf(&body, "(r%d r%d)?", extra, cc[n]);
        define(c, f[n], &body);
        for (int i = n - 1; i >= 0; i--) {
            body.len = 0;
            if (required[i]) sb_puts(&body, "\",\" ws ");
            else sb_puts(&body, "(\",\" ws ");
            member(&body, names[i], rules[i]);
            sb_printf(&body, required[i] ? " r%d" : ")? r%d", cc[i + 1]);
            define(c, cc[i], &body);
            body.len = 0;
            member(&body, names[i], rules[i]);
            sb_printf(&body, " r%d", cc[i + 1]);
            if (!required[i]) sb_printf(&body, " | r%d", f[i + 1]);
            define(c, f[i], &body);
        }
        free(body.s);
        sb_printf(b, "\"{\" ws r%d \"}\"", f[0]);
    }
    free(f);
    free(cc);
    ret = c->failed ? -1 : 0;
done:
    free(names);
    free(rules);
    free(required);
    return ret;
}

static int gen_array(compiler *c, const cJSON *s, int depth, sbuf *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    if (prefix && !cJSON_IsArray(prefix)) return fail(c, "prefixItems must be an array");
    if (items && !cJSON_IsBool(items) && !cJSON_IsObject(items))
        return fail(c, "items must be a schema (an array of schemas is prefixItems since 2020-12)");
    long min = count_kw(c, s, "minItems", 0, JS_MAX_ITEMS);
    long max = count_kw(c, s, "maxItems", -1, LONG_MAX);
    if (c->failed) return -1;
    int k = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (k > JS_MAX_ITEMS) return fail(c, "more than %d prefixItems", JS_MAX_ITEMS);
    bool no_more = items && cJSON_IsFalse(items);
    if (no_more && (max < 0 || max > k)) max = k;
    if (max >= 0 && max > JS_MAX_ITEMS && max > min) max = -1; /* a bound this high never binds in practice */
    if (max >= 0 && min > max) return fail(c, "minItems %ld is above maxItems %ld", min, max);
    int *elem = malloc(((size_t)k + 1) * sizeof *elem);
    if (!elem) return fail(c, "out of memory");
    size_t old = path_push(c, "prefixItems");
    for (int i = 0; i < k && !c->failed; i++) {
        size_t o2 = path_push_index(c, i);
        elem[i] = gen(c, cJSON_GetArrayItem(prefix, i), depth + 1);
        path_pop(c, o2);
    }
    path_pop(c, old);
    int rest = -1;
    if (!c->failed && !no_more) {
        if (items && cJSON_IsObject(items)) {
            old = path_push(c, "items");
            rest = gen(c, items, depth + 1);
            path_pop(c, old);
        } else {
            rest = new_rule(c);
            if (rest >= 0) sb_printf(&c->out, "r%d ::= json-value\n", rest);
        }
    }
    if (c->failed) {
        free(elem);
        return -1;
    }
    /* A_j: j elements so far (j >= 1). Unrolled up to the last bound. */
    long unroll = max >= 0 ? max : (min > k ? min : k);
    if (unroll < 1) unroll = 1;
    int *a = malloc(((size_t)unroll + 2) * sizeof *a);
    if (!a) {
        free(elem);
        return fail(c, "out of memory");
    }
    for (long j = 1; j <= unroll; j++) a[j] = new_rule(c);
    sbuf body = {0};
    for (long j = unroll; j >= 1 && !c->failed; j--) {
        body.len = 0;
        if (body.s) body.s[0] = 0;
        int ej = j < k ? elem[j] : rest;
        if (max >= 0 && j == max) {
            /* nothing more */
        } else if (j == unroll) { /* unbounded tail (max < 0): j >= k and j >= min */
            sb_printf(&body, "(\",\" ws r%d ws)*", rest);
        } else if (j < min) {
            sb_printf(&body, "\",\" ws r%d ws r%ld", ej, (long)a[j + 1]);
        } else {
            sb_printf(&body, "(\",\" ws r%d ws r%d)?", ej, a[j + 1]);
        }
        define(c, a[j], &body);
    }
    free(body.s);
    if (max == 0) sb_puts(b, "\"[\" ws \"]\"");
    else if (min == 0) sb_printf(b, "\"[\" ws (r%d ws r%d)? \"]\"", k > 0 ? elem[0] : rest, a[1]);
    else sb_printf(b, "\"[\" ws r%d ws r%d \"]\"", k > 0 ? elem[0] : rest, a[1]);
    free(a);
    free(elem);
    return c->failed ? -1 : 0;
}

static int gen_string(compiler *c, const cJSON *s, sbuf *b) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    bool has_len = cJSON_GetObjectItemCaseSensitive(s, "minLength") || cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    if (fmt) {
        size_t old = path_push(c, "format");
        static const char *const formats[] = {"date", "time", "date-time", "uuid", "email", NULL};
        int i = 0;
        while (cJSON_IsString(fmt) && formats[i] && strcmp(formats[i], fmt->valuestring)) i++;
        if (!cJSON_IsString(fmt) || !formats[i]) {
            int r = fail(c, "format '%s' is not supported (date, time, date-time, uuid, email are)",
                         cJSON_IsString(fmt) ? fmt->valuestring : "?");
            path_pop(c, old);
            return r;
        }
        if (pat || has_len) {
            int r = fail(c, "format together with pattern or minLength/maxLength is not supported");
            path_pop(c, old);
            return r;
        }
        path_pop(c, old);
        sb_printf(b, "\"\\\"\" %s \"\\\"\"", i == 2 ? "date \"T\" time" : formats[i]);
        return 0;
    }
    if (pat) {
        if (!cJSON_IsString(pat)) return fail(c, "pattern must be a string");
        if (has_len) return fail(c, "pattern together with minLength/maxLength is not supported");
        gen_pattern(c, pat->valuestring, b);
        return c->failed ? -1 : 0;
    }
    long min = count_kw(c, s, "minLength", 0, 1000), max = count_kw(c, s, "maxLength", -1, 1000);
    if (c->failed) return -1;
    if (max >= 0 && min > max) return fail(c, "minLength %ld is above maxLength %ld", min, max);
    if (min == 0 && max < 0) sb_puts(b, "json-string");
    else if (max < 0) sb_printf(b, "\"\\\"\" json-char{%ld,} \"\\\"\"", min);
    else sb_printf(b, "\"\\\"\" json-char{%ld,%ld} \"\\\"\"", min, max);
    return 0;
}

static int gen_type(compiler *c, const cJSON *s, const char *type, int depth, sbuf *b) {
    if (!strcmp(type, "object")) return gen_object(c, s, depth, b);
    if (!strcmp(type, "array")) return gen_array(c, s, depth, b);
    if (!strcmp(type, "string")) return gen_string(c, s, b);
    if (!strcmp(type, "integer")) return gen_integer(c, s, b);
    if (!strcmp(type, "number")) {
        static const char *const bounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
        for (int i = 0; bounds[i]; i++) {
            if (cJSON_GetObjectItemCaseSensitive(s, bounds[i])) {
                path_push(c, bounds[i]);
                return fail(c, "bounds are supported for type integer only");
            }
        }
        sb_puts(b, "json-number");
        return 0;
    }
    if (!strcmp(type, "boolean")) {
        sb_puts(b, "json-bool");
        return 0;
    }
    if (!strcmp(type, "null")) {
        sb_puts(b, "json-null");
        return 0;
    }
    return fail(c, "unknown type '%s'", type);
}

/* The type a schema without "type" means, from its keywords. */
static const char *implied_type(const cJSON *s) {
    static const char *const obj[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arr[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
    static const char *const str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; obj[i]; i++) if (cJSON_GetObjectItemCaseSensitive(s, obj[i])) return "object";
    for (int i = 0; arr[i]; i++) if (cJSON_GetObjectItemCaseSensitive(s, arr[i])) return "array";
    for (int i = 0; str[i]; i++) if (cJSON_GetObjectItemCaseSensitive(s, str[i])) return "string";
    for (int i = 0; num[i]; i++) if (cJSON_GetObjectItemCaseSensitive(s, num[i])) return "integer";
    return NULL;
}

/* Alternatives from anyOf/oneOf/enum. */
static int gen_alternatives(compiler *c, const cJSON *list, const char *kw, int depth, sbuf *b) {
    size_t old = path_push(c, kw);
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0) {
        int r = fail(c, "must be a non-empty array");
        path_pop(c, old);
        return r;
    }
    sb_puts(b, "(");
    int i = 0;
    for (const cJSON *x = list->child; x && !c->failed; x = x->next, i++) {
        if (i) sb_puts(b, " | ");
        if (!strcmp(kw, "enum")) {
            literal_value(c, b, x);
            continue;
        }
        size_t o2 = path_push_index(c, i);
        int r = gen(c, x, depth + 1);
        path_pop(c, o2);
        sb_printf(b, "r%d", r);
    }
    sb_puts(b, ")");
    path_pop(c, old);
    return c->failed ? -1 : 0;
}

/* A rule for the schema s; returns its number. */
static int gen(compiler *c, const cJSON *s, int depth) {
    if (c->failed) return -1;
    if (depth > JS_MAX_DEPTH) return fail(c, "schema nested deeper than %d", JS_MAX_DEPTH);
    if (!gr_budget_charge(c->out.len - c->charged, c->err)) return c->failed = true, -1; /* the rules written since */
    c->charged = c->out.len;
    int rule = new_rule(c);
    if (rule < 0) return -1;
    sbuf body = {0};
    if (cJSON_IsTrue(s)) {
        sb_puts(&body, "json-value");
    } else if (cJSON_IsFalse(s)) {
        return fail(c, "the schema false accepts nothing");
    } else if (!cJSON_IsObject(s)) {
        return fail(c, "a schema must be an object or a boolean");
    } else {
        for (const cJSON *k = s->child; k; k = k->next) {
            if (!is_supported(k->string)) {
                path_push(c, k->string);
                return fail(c, "unsupported keyword '%s'", k->string);
            }
        }
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
        const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
        const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
        const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
        int combinators = !!ref + !!en + !!cn + !!any + !!one + !!all;
        if (combinators > 1 || (combinators && type)) {
            free(body.s);
            return fail(c, "combining %s with %s is not supported", ref ? "$ref" : en ? "enum" : cn ? "const" : any ? "anyOf" : one ? "oneOf" : "allOf",
                        type ? "type" : "another combinator");
        }
        if (ref) {
            size_t old = path_push(c, "$ref");
            if (!cJSON_IsString(ref)) fail(c, "must be a string");
            path_pop(c, old);
            int r = c->failed ? -1 : gen_ref(c, ref->valuestring, depth);
            if (r >= 0) sb_printf(&body, "r%d", r);
        } else if (cn) {
            literal_value(c, &body, cn);
        } else if (en) {
            gen_alternatives(c, en, "enum", depth, &body);
        } else if (any || one) {
            gen_alternatives(c, any ? any : one, any ? "anyOf" : "oneOf", depth, &body);
        } else if (all) {
            size_t old = path_push(c, "allOf");
            if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) != 1) {
                fail(c, "only an allOf of exactly one schema is supported");
            } else {
                size_t o2 = path_push_index(c, 0);
                int r = gen(c, all->child, depth + 1);
                path_pop(c, o2);
                if (r >= 0) sb_printf(&body, "r%d", r);
            }
            path_pop(c, old);
        } else if (cJSON_IsArray(type)) {
            sb_puts(&body, "(");
            int i = 0;
            for (const cJSON *t = type->child; t && !c->failed; t = t->next, i++) {
                if (!cJSON_IsString(t)) {
                    path_push(c, "type");
                    fail(c, "must be a string or an array of strings");
                    break;
                }
                if (i) sb_puts(&body, " | ");
                gen_type(c, s, t->valuestring, depth, &body);
            }
            if (i == 0) {
                path_push(c, "type");
                fail(c, "an empty list of types accepts nothing");
            }
            sb_puts(&body, ")");
        } else if (type) {
            if (!cJSON_IsString(type)) {
                path_push(c, "type");
                fail(c, "must be a string or an array of strings");
            } else {
                gen_type(c, s, type->valuestring, depth, &body);
            }
        } else {
            const char *t = implied_type(s);
            if (t) gen_type(c, s, t, depth, &body);
            else sb_puts(&body, "json-value");
        }
    }
    if (!c->failed) define(c, rule, &body);
    free(body.s);
    return c->failed ? -1 : rule;
}

/* Prefix the rule names the compiler made (root and r<digits>), outside
 * literals and classes, so several schemas can share one grammar. */
static char *prefix_rules(const char *text, const char *prefix) {
    sbuf b = {0};
    bool in_str = false, in_class = false;
    size_t plen = strlen(prefix);
    for (const char *p = text; *p; p++) {
        char ch = *p;
        if (in_str || in_class) {
            sb_put(&b, p, 1);
            if (ch == '\\' && p[1]) sb_put(&b, ++p, 1);
            else if ((in_str && ch == '"') || (in_class && ch == ']')) in_str = in_class = false;
            continue;
        }
        if (ch == '"') in_str = true;
        if (ch == '[') in_class = true;
        bool word_start = p == text || !((p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= '0' && p[-1] <= '9') || p[-1] == '-' ||
                                         p[-1] == '_' || (p[-1] >= 'A' && p[-1] <= 'Z'));
        if (word_start && ((ch == 'r' && p[1] >= '0' && p[1] <= '9') || !strncmp(p, "root ", 5))) sb_put(&b, prefix, plen);
        sb_put(&b, p, 1);
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s ? b.s : strdup("");
}

char *js_to_gbnf_rules(const char *schema, size_t len, const char *prefix, gl_error *err) {
    char *full = js_to_gbnf(schema, len, err);
    if (!full) return NULL;
    char *prelude = strstr(full, PRELUDE);
    if (prelude) *prelude = 0;
    char *out = prefix_rules(full, prefix);
    free(full);
    if (!out) gl_error_set(err, "json_schema: out of memory");
    return out;
}

char *js_to_gbnf(const char *schema, size_t len, gl_error *err) {
    cJSON *root = cJSON_ParseWithLength(schema, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= schema && at <= schema + len ? (long)(at - schema) : -1;
        gl_error_set(err, "json_schema: not valid JSON (near byte %ld)", off);
        return NULL;
    }
    compiler c = {.root = root, .err = err};
    int r = gen(&c, root, 0);
    char *text = NULL;
    if (r >= 0) {
        sb_printf(&c.out, "root ::= r%d\n", r);
        sb_puts(&c.out, PRELUDE);
        if (c.out.oom) gl_error_set(err, "json_schema: out of memory");
        else text = c.out.s, c.out.s = NULL;
    }
    free(c.out.s);
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    cJSON_Delete(root);
    return text;
}

char *gl_json_schema_to_gbnf(const char *schema, size_t len, const char *prefix, gl_error *err) {
    return js_to_gbnf_rules(schema, len, prefix, err);
}

const char *gl_json_schema_gbnf_common(void) { return PRELUDE; }

gl_grammar *gl_grammar_from_json_schema(const char *schema, size_t len, gl_error *err) {
    char *text = js_to_gbnf(schema, len, err);
    if (!text) return NULL;
    gl_grammar *g = gr_compile(text, strlen(text), err);
    free(text);
    return g;
}

gl_grammar *gl_grammar_from_regex(const char *regex, size_t len, gl_error *err) {
    const char *p = regex, *end = regex + len;
    if (p < end && *p == '^') p++;
    if (end > p && end[-1] == '$' && (end - 1 == p || end[-2] != '\\')) end--;
    compiler c = {.err = err};
    rx r = {&c, p, end, &c.out, true};
    sb_puts(&c.out, "root ::= ");
    rx_alt(&r, 0);
    if (!c.failed && r.p < r.end) fail(&c, "pattern: unbalanced ')'");
    sb_puts(&c.out, "\n");
    gl_grammar *g = NULL;
    if (c.out.oom && !c.failed) gl_error_set(err, "regex: out of memory");
    else if (!c.failed) g = gr_compile(c.out.s, c.out.len, err);
    free(c.out.s);
    return g;
}
