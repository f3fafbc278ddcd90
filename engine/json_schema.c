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
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

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
    long long_strings[16][3]; /* (minLength, maxLength, rule) of strings past the repeat bound, shared */
    int n_long_strings;
    cJSON *scratch;           /* nodes folding made, freed at the end */
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
    "date ::= [1-9] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
    "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])) | "
    "([1-9] [0-9] (\"0\" [48] | [2468] [048] | [13579] [26]) | ([2468] [048] | [13579] [26]) \"00\") \"-02-29\"\n"
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "hex ::= [0-9a-f]\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "email ::= [a-zA-Z0-9_.+-]{1,32} \"@\" [a-zA-Z0-9-]{1,32} (\".\" [a-zA-Z0-9-]{1,16}){1,3}\n"
    "octet ::= [0-9] | [1-9] [0-9] | \"1\" [0-9] [0-9] | \"2\" [0-4] [0-9] | \"25\" [0-5]\n"
    "ipv4 ::= octet \".\" octet \".\" octet \".\" octet\n"
    "h16 ::= [0-9a-fA-F]{1,4}\n"
    "ipv6 ::= h16 (\":\" h16){7} | (h16 (\":\" h16){0,6})? \"::\" (h16 (\":\" h16){0,6})?\n"
    "label ::= [a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?\n"
    "hostname ::= label (\".\" label){0,8}\n"
    "uri ::= [a-zA-Z] [a-zA-Z0-9+.-]{0,15} \":\" [a-zA-Z0-9._~:/?#@!$&'()*+,;=%-]{0,512}\n"
    "uri-ref ::= [a-zA-Z0-9._~:/?#@!$&'()*+,;=%-]{0,512}\n"
    "duration ::= \"P\" ([0-9]{1,9} \"W\" | ([0-9]{1,9} \"Y\")? ([0-9]{1,9} \"M\")? ([0-9]{1,9} \"D\")? "
    "(\"T\" ([0-9]{1,9} \"H\")? ([0-9]{1,9} \"M\")? ([0-9]{1,9} ([.] [0-9]{1,9})? \"S\")?)?)\n";

static int gen(compiler *c, const cJSON *s, int depth);

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

/* ---- numbers in a range ---------------------------------------------------------- */

typedef struct bound {
    bool has, open;
    double v;
} bound;

/* The tightest lower and upper bounds of minimum, exclusiveMinimum, maximum, exclusiveMaximum. */
static int num_bounds(compiler *c, const cJSON *s, bound *lo, bound *hi) {
    static const char *const kws[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    *lo = *hi = (bound){0};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kws[i]);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
            size_t old = path_push(c, kws[i]);
            fail(c, "must be a number");
            path_pop(c, old);
            return -1;
        }
        bound *b = i < 2 ? lo : hi;
        bool open = i % 2 == 1;
        double d = v->valuedouble;
        bool tighter = !b->has || (i < 2 ? d > b->v : d < b->v) || (d == b->v && open);
        if (tighter) *b = (bound){true, open, d};
    }
    /* past 16 digits a bound cannot bind: the grammar's numbers are shorter */
    if (lo->has && lo->v < -1e16) lo->has = false;
    if (hi->has && hi->v > 1e16) hi->has = false;
    if ((lo->has && lo->v > 1e16) || (hi->has && hi->v < -1e16))
        return fail(c, "a bound past 1e16 leaves no number of at most 16 digits");
    if (lo->has && hi->has && (lo->v > hi->v || (lo->v == hi->v && (lo->open || hi->open))))
        return fail(c, "the minimum is above the maximum: no number fits");
    return 0;
}

/* x >= 0 as integer part and fraction digits, the shortest spelling that
 * reads back, trailing zeros dropped. */
static void decimal_parts(double x, long long *ip, char *frac, size_t cap) {
    char buf[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    char dg[24];
    int nd = 0;
    const char *p = buf;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') dg[nd++] = *p;
    int e = atoi(p + 1);
    *ip = 0;
    size_t nf = 0;
    for (int i = 0; i <= e && i < 17; i++) *ip = *ip * 10 + (i < nd ? dg[i] - '0' : 0);
    for (int i = e + 1; i < 0 && nf + 1 < cap; i++) frac[nf++] = '0';
    for (int i = e + 1 < 0 ? 0 : e + 1; i < nd && nf + 1 < cap; i++) frac[nf++] = dg[i];
    while (nf && frac[nf - 1] == '0') nf--;
    frac[nf] = 0;
}

/* Fraction digit strings s (at most left digits) with lo <= 0.s <= hi (lo
 * NULL: no lower bound; hi NULL: none below 1; open: strict). Writes the
 * nonempty ones as GBNF alternatives; returns whether any exists, *empty
 * whether s = "" fits. */
static bool frac_range(sbuf *b, const char *lo, bool lo_open, const char *hi, bool hi_open, int left, bool *empty) {
    if (lo && !*lo && !lo_open) lo = NULL; /* at least zero: no bound */
    *empty = !lo && (!hi || *hi || !hi_open);
    if (left == 0) return false;
    char l0 = lo ? (*lo ? *lo : '0') : 0, h0 = hi ? (*hi ? *hi : '0') : 0;
    char free_cls[11];
    int n_free = 0, n = 0;
    sbuf alts = {0};
    for (char d = '0'; d <= '9'; d++) {
        if ((lo && d < l0) || (hi && d > h0)) continue;
        bool lo_tight = lo && d == l0, hi_tight = hi && d == h0;
        if (!lo_tight && !hi_tight) {
            free_cls[n_free++] = d;
            continue;
        }
        sbuf sub = {0};
        bool e;
        bool some = frac_range(&sub, lo_tight ? (*lo ? lo + 1 : lo) : NULL, lo_open, hi_tight ? (*hi ? hi + 1 : hi) : NULL,
                               hi_open, left - 1, &e);
        if (some || e) {
            if (n++) sb_puts(&alts, " | ");
            sb_printf(&alts, "\"%c\"", d);
            if (some) {
                sb_puts(&alts, " (");
                sb_put(&alts, sub.s, sub.len);
                sb_puts(&alts, e ? ")?" : ")");
            }
        }
        free(sub.s);
    }
    if (n_free) {
        free_cls[n_free] = 0;
        sb_printf(b, "[%s] [0-9]{0,%d}", free_cls, left - 1);
        if (n) sb_puts(b, " | ");
    }
    if (n) sb_put(b, alts.s, alts.len);
    if (alts.oom) b->oom = true;
    free(alts.s);
    return n_free || n;
}

/* An integer part then a fraction in [lo, hi] (NULL hi: below 1); false when none fits. */
static bool with_fraction(sbuf *b, const char *ip, const char *lo, bool lo_open, const char *hi, bool hi_open,
                          int max_frac) {
    sbuf f = {0};
    bool e;
    bool some = frac_range(&f, lo, lo_open, hi, hi_open, max_frac, &e);
    if (some || e) {
        sb_puts(b, "(");
        sb_puts(b, ip);
        if (some) {
            sb_puts(b, " (\".\" (");
            sb_put(b, f.s, f.len);
            sb_puts(b, e ? "))?" : "))");
        }
        sb_puts(b, ")");
    }
    free(f.s);
    return some || e;
}

/* Magnitudes m in [a, z] (z NULL: unbounded), a decimal number without sign or exponent. */
static void magnitude_range(sbuf *b, double a, bool a_open, const double *z, bool z_open, int max_frac) {
    long long ai, zi = 0;
    char af[400], zf[400], ip[32];
    decimal_parts(a, &ai, af, sizeof af);
    if (z) decimal_parts(*z, &zi, zf, sizeof zf);
    int n = 0;
    sb_puts(b, "(");
    if (z && ai == zi) {
        snprintf(ip, sizeof ip, "\"%lld\"", ai);
        n += with_fraction(b, ip, af, a_open, zf, z_open, max_frac);
    } else {
        snprintf(ip, sizeof ip, "\"%lld\"", ai);
        n += with_fraction(b, ip, af, a_open, NULL, false, max_frac);
        if (!z || zi - ai >= 2) { /* whole parts strictly between */
            if (n) sb_puts(b, " | ");
            sbuf r = {0};
            nonneg_range(&r, ai + 1, z ? zi - 1 : -1);
            n += with_fraction(b, r.s, NULL, false, NULL, false, max_frac);
            free(r.s);
        }
        if (z) {
            snprintf(ip, sizeof ip, "\"%lld\"", zi);
            sbuf t = {0};
            if (with_fraction(&t, ip, "", false, zf, z_open, max_frac)) {
                if (n++) sb_puts(b, " | ");
                sb_put(b, t.s, t.len);
            }
            free(t.s);
        }
    }
    if (!n) sb_puts(b, "[^\\x00-\\U0010FFFF]"); /* nothing: cannot happen after num_bounds */
    sb_puts(b, ")");
}

/* A JSON number in the bounds, at most max_frac fraction digits (0: an integer). */
static void number_range(sbuf *b, const bound *lo, const bound *hi, int max_frac) {
    bool pos = !hi->has || hi->v > 0 || (hi->v == 0 && !hi->open);
    bool neg = !lo->has || lo->v < 0;
    sb_puts(b, "(");
    if (neg) { /* "-" m, m > 0 and m <= -lo, m >= -hi when hi < 0 */
        double top = lo->has ? -lo->v : 0;
        bool below_zero = hi->has && hi->v < 0;
        sb_puts(b, "\"-\" ");
        magnitude_range(b, below_zero ? -hi->v : 0, below_zero ? hi->open : true, lo->has ? &top : NULL,
                        lo->open, max_frac);
    }
    if (neg && pos) sb_puts(b, " | ");
    if (pos) {
        bool from_lo = lo->has && lo->v >= 0;
        magnitude_range(b, from_lo ? lo->v : 0, from_lo && lo->open, hi->has ? &hi->v : NULL, hi->open, max_frac);
    }
    sb_puts(b, ")");
}

/* Non-negative multiples of k, digit by digit through the remainders (k rules). */
static int multiples(compiler *c, long k) {
    int first = c->n_rules;
    for (long r = 0; r < k; r++)
        if (new_rule(c) < 0) return -1;
    for (long r = 0; r < k; r++) {
        sb_printf(&c->out, "r%ld ::= %s", first + r, r == 0 ? "\"\"" : "");
        for (int d = 0; d <= 9; d++) sb_printf(&c->out, "%s\"%d\" r%ld", r == 0 || d ? " | " : "", d, first + (r * 10 + d) % k);
        sb_puts(&c->out, "\n");
    }
    return first;
}

static int gen_number(compiler *c, const cJSON *s, bool integer, sbuf *b) {
    bound lo, hi;
    if (num_bounds(c, s, &lo, &hi) < 0) return -1;
    const cJSON *mult = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
    int max_frac = integer ? 0 : 16;
    if (mult) {
        size_t old = path_push(c, "multipleOf");
        double m = cJSON_IsNumber(mult) ? mult->valuedouble : 0;
        int d = 0;
        while (d < 16 && fabs(m * pow(10, d) - round(m * pow(10, d))) > 1e-9 * pow(10, d)) d++;
        if (!(m > 0)) fail(c, "must be a number above 0");
        else if (m == floor(m) && m <= 1000) integer = true;
        else if (m == floor(m)) fail(c, "multipleOf above 1000 is not supported");
        else if (fabs(m * pow(10, d) - 1) < 1e-9) max_frac = integer ? 0 : d; /* 0.1, 0.01, ... */
        else fail(c, "multipleOf %g is not supported (integers up to 1000 and powers of ten below 1 are)", m);
        if (!c->failed && integer && m > 1 && (lo.has || hi.has)) fail(c, "multipleOf together with minimum/maximum is not supported");
        path_pop(c, old);
        if (c->failed) return -1;
        if (integer && m > 1) {
            int first = multiples(c, (long)m);
            if (first < 0) return -1;
            /* the remainder after a first digit d is d mod m */
            sb_puts(b, "(\"0\" | \"-\"? (");
            for (int d = 1; d <= 9; d++) sb_printf(b, "%s\"%d\" r%ld", d > 1 ? " | " : "", d, first + d % (long)m);
            sb_puts(b, "))");
            return 0;
        }
    }
    if (integer) {
        if (lo.has) lo = (bound){true, false, lo.open && lo.v == ceil(lo.v) ? lo.v + 1 : ceil(lo.v)};
        if (hi.has) hi = (bound){true, false, hi.open && hi.v == floor(hi.v) ? hi.v - 1 : floor(hi.v)};
        if (lo.has && hi.has && lo.v > hi.v) return fail(c, "no integer lies between the minimum and the maximum");
    }
    if (!lo.has && !hi.has) sb_puts(b, integer ? "json-int" : max_frac == 16 ? "json-number" : "");
    if (!lo.has && !hi.has && (integer || max_frac == 16)) return 0;
    number_range(b, &lo, &hi, max_frac);
    return 0;
}

/* ---- pattern: a regex subset, parsed to a tree --------------------------------- */

enum { RX_SET, RX_CAT, RX_ALT, RX_REP };

typedef struct rx_node {
    int kind;
    int kid, next;            /* first child, next sibling (-1: none) */
    int min, max;             /* RX_REP: the count (max -1: unbounded) */
    int set, n_set;           /* RX_SET: ranges lo/hi[set .. set + n_set), sorted and merged */
} rx_node;

typedef struct rx {
    compiler *c;
    const char *p, *end;
    bool raw;                 /* match the characters themselves, not their JSON spelling (gl_grammar_from_regex) */
    bool search;              /* a JSON Schema pattern: unanchored ends match anything */
    rx_node *nodes;
    int n_nodes, cap_nodes;
    uint32_t *lo, *hi;        /* the code point ranges of every set */
    int n_rng, cap_rng;
} rx;

typedef struct cp_set {
    uint32_t lo[128], hi[128];
    int n;
} cp_set;

static bool rx_grow(rx *r, void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return true;
    int n = *cap ? *cap * 2 : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q) {
        fail(r->c, "out of memory");
        return false;
    }
    *p = q;
    *cap = n;
    return true;
}

static int rx_add_node(rx *r, int kind) {
    if (r->c->failed || !rx_grow(r, (void **)&r->nodes, &r->cap_nodes, r->n_nodes + 1, sizeof *r->nodes)) return -1;
    r->nodes[r->n_nodes] = (rx_node){kind, -1, -1, 0, 0, 0, 0};
    return r->n_nodes++;
}

static void rx_free(rx *r) {
    free(r->nodes);
    free(r->lo);
    free(r->hi);
}

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

/* A set node holding s's ranges (s normalized). */
static int rx_set_node(rx *r, const cp_set *s) {
    int n = rx_add_node(r, RX_SET);
    if (n < 0) return -1;
    int cap = r->cap_rng;
    if (!rx_grow(r, (void **)&r->lo, &cap, r->n_rng + s->n, sizeof *r->lo)) return -1;
    cap = r->cap_rng;
    if (!rx_grow(r, (void **)&r->hi, &cap, r->n_rng + s->n, sizeof *r->hi)) return -1;
    r->cap_rng = cap;
    memcpy(r->lo + r->n_rng, s->lo, (size_t)s->n * sizeof *r->lo);
    memcpy(r->hi + r->n_rng, s->hi, (size_t)s->n * sizeof *r->hi);
    r->nodes[n].set = r->n_rng;
    r->nodes[n].n_set = s->n;
    r->n_rng += s->n;
    return n;
}

static void sb_class(sbuf *b, const sbuf *members) {
    sb_puts(b, "[");
    sb_put(b, members->s, members->len);
    sb_puts(b, "] ");
}

/* Code point ranges (sorted, merged) as GBNF matching their JSON spelling:
 * the ones that need no escape as one class; quote, backslash and control
 * characters as their escapes, all behind one backslash so that a set is
 * at most two alternatives wherever the matcher stands. */
static void emit_ranges(rx *r, const uint32_t *rlo, const uint32_t *rhi, int n, sbuf *b) {
    if (r->raw) {
        sb_puts(b, "[");
        for (int i = 0; i < n; i++) sb_printf(b, "\\U%08X-\\U%08X", rlo[i], rhi[i]);
        sb_puts(b, "] ");
        if (!n) fail(r->c, "pattern: an empty character class matches nothing");
        return;
    }
    static const char short_esc[32] = {[8] = 'b', [9] = 't', [10] = 'n', [12] = 'f', [13] = 'r'};
    sbuf cls = {0}, esc = {0}, u[2] = {{0}, {0}};
    for (int i = 0; i < n; i++) {
        uint32_t lo = rlo[i] < 0x20 ? 0x20 : rlo[i], hi = rhi[i];
        while (lo <= hi) { /* pieces of [lo, hi] around '"' and '\\' */
            uint32_t stop = hi;
            if (lo <= '"' && '"' <= hi) stop = lo == '"' ? '"' : '"' - 1;
            else if (lo <= '\\' && '\\' <= hi) stop = lo == '\\' ? '\\' : '\\' - 1;
            if (stop == lo && (lo == '"' || lo == '\\')) sb_printf(&esc, "\\U%08X", lo);
            else sb_printf(&cls, "\\U%08X-\\U%08X", lo, stop);
            lo = stop + 1;
            if (stop == 0x10FFFF) break;
        }
        for (uint32_t cp = rlo[i]; cp <= rhi[i] && cp < 0x20; cp++) {
            if (short_esc[cp]) sb_printf(&esc, "\\U%08X", (uint32_t)short_esc[cp]);
            else sb_printf(&u[cp >> 4], "\\U%08X", (uint32_t)"0123456789abcdef"[cp & 15]);
        }
    }
    bool any = false;
    sb_puts(b, "(");
    if (cls.len) {
        sb_class(b, &cls);
        any = true;
    }
    if (esc.len || u[0].len || u[1].len) {
        sb_puts(b, any ? "| \"\\\\\" (" : "\"\\\\\" (");
        if (esc.len) sb_class(b, &esc);
        if (u[0].len || u[1].len) {
            sb_puts(b, esc.len ? "| \"u00\" (" : "\"u00\" (");
            if (u[0].len) sb_puts(b, "\"0\" "), sb_class(b, &u[0]);
            if (u[1].len) sb_puts(b, u[0].len ? "| \"1\" " : "\"1\" "), sb_class(b, &u[1]);
            sb_puts(b, ") ");
        }
        sb_puts(b, ") ");
        any = true;
    }
    if (cls.oom || esc.oom || u[0].oom || u[1].oom) b->oom = true;
    free(cls.s), free(esc.s), free(u[0].s), free(u[1].s);
    if (!any) fail(r->c, "pattern: an empty character class matches nothing");
    sb_puts(b, ") ");
}

static int rx_alt(rx *r, int depth);

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

/* [...] after its '[': the set node. */
static int rx_class(rx *r) {
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
            if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
                return fail(r->c, "pattern: escape \\%c is not in the supported subset", e);
        } else {
            lo = rx_char(r);
        }
        uint32_t hi = lo;
        if (r->end - r->p >= 2 && r->p[0] == '-' && r->p[1] != ']') {
            r->p++;
            hi = (unsigned char)*r->p++;
            if (hi == '\\' && r->p < r->end) hi = (unsigned char)*r->p++;
            if (hi < lo) return fail(r->c, "pattern: range end below its start");
        }
        set_add(r, &s, lo, hi);
    }
    if (r->c->failed) return -1;
    if (r->p >= r->end) return fail(r->c, "pattern: unterminated character class");
    r->p++;
    set_normalize(&s, neg);
    return rx_set_node(r, &s);
}

/* One atom: a group, a class, '.', an escape or a literal character. */
static int rx_atom(rx *r, int depth) {
    char ch = *r->p;
    cp_set s = {.n = 0};
    if (ch == '(') {
        if (depth > 32) return fail(r->c, "pattern: groups nested deeper than 32");
        r->p++;
        if (r->end - r->p >= 2 && r->p[0] == '?' && r->p[1] == ':') r->p += 2;
        else if (r->p < r->end && *r->p == '?')
            return fail(r->c, "pattern: (?...) other than (?:...) is not in the supported subset");
        int g = rx_alt(r, depth + 1);
        if (r->c->failed) return -1;
        if (r->p >= r->end || *r->p != ')') return fail(r->c, "pattern: unclosed group");
        r->p++;
        return g;
    }
    if (ch == '[') {
        r->p++;
        return rx_class(r);
    }
    if (ch == '.') {
        set_add(r, &s, '\n', '\n');
        set_normalize(&s, true);
        r->p++;
    } else if (ch == '\\') {
        if (r->p + 1 >= r->end) return fail(r->c, "pattern: escape at the end");
        char e = r->p[1];
        r->p += 2;
        bool upper = e == 'D' || e == 'W' || e == 'S';
        set_add_escape(r, &s, upper ? (char)(e + 32) : e);
        set_normalize(&s, upper);
    } else if (ch == '^' || ch == '$') {
        return fail(r->c, "pattern: anchor '%c' is only supported at the very start (^) or end ($)", ch);
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
        return fail(r->c, "pattern: quantifier '%c' with nothing to repeat", ch);
    } else {
        uint32_t cp = rx_char(r);
        set_add(r, &s, cp, cp);
    }
    return r->c->failed ? -1 : rx_set_node(r, &s);
}

/* A quantifier after an atom, if any: the repetition node around it. */
static int rx_quantified(rx *r, int atom) {
    int min, max;
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
        char q = *r->p++;
        min = q == '+';
        max = q == '?' ? 1 : -1;
    } else if (r->p < r->end && *r->p == '{') {
        r->p++;
        min = rx_number(r), max = min;
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            if (r->p < r->end && *r->p == '}') max = -1;
            else max = rx_number(r);
        }
        if (r->c->failed) return -1;
        if (r->p >= r->end || *r->p != '}') return fail(r->c, "pattern: expected '}'");
        r->p++;
        if (max >= 0 && max < min) return fail(r->c, "pattern: {%d,%d} has its maximum below its minimum", min, max);
    } else {
        return atom;
    }
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
    int rep = rx_add_node(r, RX_REP);
    if (rep < 0) return -1;
    r->nodes[rep].kid = atom;
    r->nodes[rep].min = min;
    r->nodes[rep].max = max;
    return rep;
}

/* .* over every code point, newline included. */
static int rx_any_star(rx *r) {
    cp_set all = {.lo = {0}, .hi = {0x10FFFF}, .n = 1};
    int set = rx_set_node(r, &all), rep = set < 0 ? -1 : rx_add_node(r, RX_REP);
    if (rep < 0) return -1;
    r->nodes[rep].kid = set;
    r->nodes[rep].max = -1;
    return rep;
}

/* A sequence. At the top level a pattern is searched for: an alternative
 * without ^ may start, and one without $ may end, with anything (for a
 * whole-output regex, r->search false, the anchors change nothing). */
static int rx_seq(rx *r, int depth) {
    bool head = depth == 0 && r->p < r->end && *r->p == '^', tail = false;
    if (head) r->p++;
    int cat = rx_add_node(r, RX_CAT), last = -1;
    while (cat >= 0 && !r->c->failed && r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (depth == 0 && *r->p == '$' && (r->p + 1 == r->end || r->p[1] == '|')) {
            r->p++;
            tail = true;
            break;
        }
        int a = rx_atom(r, depth);
        if (a >= 0) a = rx_quantified(r, a);
        if (a < 0) return -1;
        if (last < 0) r->nodes[cat].kid = a;
        else r->nodes[last].next = a;
        last = a;
    }
    if (r->c->failed || cat < 0) return -1;
    if (depth > 0 || !r->search) return cat;
    if (!head) {
        int any = rx_any_star(r);
        if (any < 0) return -1;
        r->nodes[any].next = r->nodes[cat].kid;
        r->nodes[cat].kid = any;
        if (last < 0) last = any;
    }
    if (!tail) {
        int any = rx_any_star(r);
        if (any < 0) return -1;
        if (last < 0) r->nodes[cat].kid = any;
        else r->nodes[last].next = any;
    }
    return cat;
}

static int rx_alt(rx *r, int depth) {
    int first = rx_seq(r, depth);
    if (first < 0 || r->p >= r->end || *r->p != '|') return first;
    int alt = rx_add_node(r, RX_ALT), last = first;
    if (alt < 0) return -1;
    r->nodes[alt].kid = first;
    while (!r->c->failed && r->p < r->end && *r->p == '|') {
        r->p++;
        int s = rx_seq(r, depth);
        if (s < 0) return -1;
        r->nodes[last].next = s;
        last = s;
    }
    return alt;
}

/* Parse a whole pattern into its tree; returns the root. */
static int rx_parse(rx *r, const char *pattern, size_t n) {
    r->p = pattern;
    r->end = pattern + n;
    int root = rx_alt(r, 0);
    if (root >= 0 && r->p < r->end) return fail(r->c, "pattern: unbalanced ')'");
    return root;
}

/* The GBNF of node n. */
static void rx_emit(rx *r, int n, sbuf *b) {
    const rx_node *x = &r->nodes[n];
    if (x->kind == RX_SET) {
        emit_ranges(r, r->lo + x->set, r->hi + x->set, x->n_set, b);
        return;
    }
    sb_puts(b, "(");
    for (int k = x->kid; k >= 0; k = r->nodes[k].next) {
        if (x->kind == RX_ALT && k != x->kid) sb_puts(b, "| ");
        rx_emit(r, k, b);
    }
    sb_puts(b, ") ");
    if (x->kind != RX_REP) return;
    if (x->max < 0) sb_printf(b, "{%d,} ", x->min);
    else sb_printf(b, "{%d,%d} ", x->min, x->max);
}

#define RX_INF (LONG_MAX / 4)

static long sat_mul(long a, long b) { return a && b > RX_INF / a ? RX_INF : a * b; }

/* The shortest and longest strings node n matches (RX_INF: unbounded). */
static void rx_len(const rx *r, int n, long *lo, long *hi) {
    const rx_node *x = &r->nodes[n];
    if (x->kind == RX_SET) {
        *lo = *hi = 1;
        return;
    }
    if (x->kind == RX_REP) {
        long a, z;
        rx_len(r, x->kid, &a, &z);
        *lo = sat_mul(a, x->min);
        *hi = x->max < 0 ? (z ? RX_INF : 0) : sat_mul(z, x->max);
        return;
    }
    *lo = x->kind == RX_ALT ? RX_INF : 0;
    *hi = 0;
    for (int k = x->kid; k >= 0; k = r->nodes[k].next) {
        long a, z;
        rx_len(r, k, &a, &z);
        if (x->kind == RX_ALT) {
            if (a < *lo) *lo = a;
            if (z > *hi) *hi = z;
        } else {
            *lo = *lo + a > RX_INF ? RX_INF : *lo + a;
            *hi = *hi + z > RX_INF ? RX_INF : *hi + z;
        }
    }
}

/* A string (a JSON string, quotes included) the pattern matches; defined with the length bounds below. */
static void gen_pattern(compiler *c, const char *pattern, sbuf *b);

/* ---- pattern within minLength/maxLength: an automaton times a length counter ---- */

#define RX_MAX_NFA 60000      /* automaton states before determinizing */
#define RX_MAX_DFA 4000       /* deterministic states */
#define RX_MAX_CELLS 4000000  /* states x lengths the counter walks */
#define RX_MAX_PRODUCT 60000  /* grammar rules the counter may write */
#define RX_MAX_INLINE 200000  /* grammar elements its inline repetitions may expand to */

typedef struct nfa_state {
    int eps[2];               /* empty moves (-1: none) */
    int set, to;              /* a move on set node `set` to `to`; set -1: none */
} nfa_state;

typedef struct nfa {
    rx *r;
    nfa_state *s;
    int n, cap;
    long max_len;             /* maxLength (-1: none): repetitions past it are unbounded */
} nfa;

static int nfa_add_state(nfa *a) {
    if (a->n >= RX_MAX_NFA)
        return fail(a->r->c, "pattern: its automaton needs more than %d states; not supported", RX_MAX_NFA);
    if (!rx_grow(a->r, (void **)&a->s, &a->cap, a->n + 1, sizeof *a->s)) return -1;
    a->s[a->n] = (nfa_state){{-1, -1}, -1, -1};
    return a->n++;
}

/* Thompson's construction of node n from `start` (a state with no moves
 * yet); returns its end state (no moves yet either). ctx: the fewest code
 * points the rest of the pattern needs around n. */
static int nfa_build(nfa *a, int n, int start, long ctx) {
    if (start < 0) return -1;
    const rx_node x = a->r->nodes[n];
    if (x.kind == RX_SET) {
        int e = nfa_add_state(a);
        if (e >= 0) a->s[start].set = n, a->s[start].to = e;
        return e;
    }
    long lo, hi;
    rx_len(a->r, n, &lo, &hi);
    if (x.kind == RX_CAT) {
        int cur = start;
        for (int k = x.kid; k >= 0 && cur >= 0; k = a->r->nodes[k].next) {
            long klo, khi;
            rx_len(a->r, k, &klo, &khi);
            cur = nfa_build(a, k, cur, ctx + lo - klo);
        }
        return cur;
    }
    if (x.kind == RX_ALT) {
        int e = nfa_add_state(a), split = start;
        for (int k = x.kid; k >= 0 && e >= 0 && split >= 0; k = a->r->nodes[k].next) {
            int ks = nfa_add_state(a), more = a->r->nodes[k].next >= 0 ? nfa_add_state(a) : -1;
            if (ks < 0) return -1;
            a->s[split].eps[0] = ks;
            a->s[split].eps[1] = more;
            int ke = nfa_build(a, k, ks, ctx);
            if (ke < 0) return -1;
            a->s[ke].eps[0] = e;
            split = more;
        }
        return e;
    }
    /* x{m,n}: m copies, then x* or n - m optional ones. When n + 1 copies
     * cannot fit in maxLength, the count n cannot bind: x{m,} is the same
     * language within the bounds, and its automaton is smaller. */
    long klo, khi;
    rx_len(a->r, x.kid, &klo, &khi);
    int max = x.max;
    if (max >= 0 && a->max_len >= 0 && (klo ? sat_mul(klo, max + 1L) + ctx > a->max_len : max > a->max_len)) max = -1;
    long kctx = ctx + (x.min > 1 ? sat_mul(klo, x.min - 1L) : 0);
    int cur = start;
    for (int i = 0; i < x.min && cur >= 0; i++) cur = nfa_build(a, x.kid, cur, kctx);
    if (cur < 0) return -1;
    if (max < 0) {
        int ks = nfa_add_state(a), e = nfa_add_state(a);
        if (e < 0) return -1;
        a->s[cur].eps[0] = ks;
        a->s[cur].eps[1] = e;
        int ke = nfa_build(a, x.kid, ks, kctx);
        if (ke >= 0) a->s[ke].eps[0] = cur;
        return ke < 0 ? -1 : e;
    }
    for (int i = x.min; i < max && cur >= 0; i++) {
        int ks = nfa_add_state(a), e = nfa_add_state(a);
        if (e < 0) return -1;
        a->s[cur].eps[0] = ks;
        a->s[cur].eps[1] = e;
        int ke = nfa_build(a, x.kid, ks, kctx);
        if (ke < 0) return -1;
        a->s[ke].eps[0] = e;
        cur = e;
    }
    return cur;
}

typedef struct dfa {
    int n, n_int;             /* states, alphabet intervals */
    uint32_t *cut;            /* interval i is [cut[i], cut[i + 1]) */
    int *next;                /* [n * n_int]: the state after interval i, -1: none */
    bool *accept;
} dfa;

static void dfa_free(dfa *d) {
    free(d->cut);
    free(d->next);
    free(d->accept);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

/* The interval that starts at code point cp (n_int: the end). */
static int interval_at(const dfa *d, uint32_t cp) {
    int lo = 0, hi = d->n_int + 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (d->cut[mid] <= cp) lo = mid;
        else hi = mid;
    }
    return lo;
}

typedef struct subset_set {  /* the deterministic states: sorted sets of automaton states */
    int *pool, n_pool, cap_pool;
    int *off, *len, cap;     /* state i is pool[off[i] .. off[i] + len[i]) */
    int *table, n_table;     /* open addressing, -1 empty */
} subset_set;

static unsigned hash_ints(const int *v, int n) {
    unsigned h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (unsigned)v[i]) * 16777619u;
    return h;
}

/* The number of the deterministic state {v}, made when new. */
static int subset_find(rx *r, subset_set *S, dfa *d, const int *v, int n) {
    unsigned h = hash_ints(v, n) & (unsigned)(S->n_table - 1);
    for (; S->table[h] >= 0; h = (h + 1) & (unsigned)(S->n_table - 1)) {
        int i = S->table[h];
        if (S->len[i] == n && !memcmp(S->pool + S->off[i], v, (size_t)n * sizeof *v)) return i;
    }
    if (d->n >= RX_MAX_DFA)
        return fail(r->c, "pattern: its deterministic automaton needs more than %d states; not supported",
                    RX_MAX_DFA);
    if (!rx_grow(r, (void **)&S->pool, &S->cap_pool, S->n_pool + n, sizeof *S->pool)) return -1;
    memcpy(S->pool + S->n_pool, v, (size_t)n * sizeof *v);
    S->off[d->n] = S->n_pool;
    S->len[d->n] = n;
    S->n_pool += n;
    S->table[h] = d->n;
    return d->n++;
}

/* The empty-move closure of v[0..n) into out, sorted; returns its size. */
static int closure(const nfa *a, const int *v, int n, int *out, int *mark, int stamp) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (mark[v[i]] != stamp) mark[v[i]] = stamp, out[m++] = v[i];
    for (int i = 0; i < m; i++)
        for (int k = 0; k < 2; k++) {
            int t = a->s[out[i]].eps[k];
            if (t >= 0 && mark[t] != stamp) mark[t] = stamp, out[m++] = t;
        }
    qsort(out, (size_t)m, sizeof *out, cmp_int);
    return m;
}

/* The subset construction over the intervals the sets' bounds cut the code
 * points into, from n automata at once: a state accepts when all of theirs
 * do (their intersection; one whose part has died accepts nothing more). */
static int dfa_build(rx *r, const nfa *a, const int *start, const int *accept, int n, dfa *d) {
    int n_cut = 2;
    for (int i = 0; i < r->n_nodes; i++)
        if (r->nodes[i].kind == RX_SET) n_cut += 2 * r->nodes[i].n_set;
    d->cut = malloc((size_t)n_cut * sizeof *d->cut);
    int *mark = calloc((size_t)a->n, sizeof *mark), *buf = malloc((size_t)a->n * 2 * sizeof *buf);
    subset_set S = {.n_table = 16384}; /* a power of two above RX_MAX_DFA */
    S.table = malloc((size_t)S.n_table * sizeof *S.table);
    S.off = malloc(RX_MAX_DFA * sizeof *S.off);
    S.len = malloc(RX_MAX_DFA * sizeof *S.len);
    int *pairs = NULL, cap_pairs = 0, cap_rows = 0, rc = 0;
    if (!d->cut || !mark || !buf || !S.table || !S.off || !S.len) {
        rc = fail(r->c, "out of memory");
        goto out;
    }
    memset(S.table, -1, (size_t)S.n_table * sizeof *S.table);
    n_cut = 0;
    d->cut[n_cut++] = 0;
    d->cut[n_cut++] = 0x110000;
    for (int i = 0; i < r->n_nodes; i++)
        for (int k = 0; r->nodes[i].kind == RX_SET && k < r->nodes[i].n_set; k++) {
            d->cut[n_cut++] = r->lo[r->nodes[i].set + k];
            d->cut[n_cut++] = r->hi[r->nodes[i].set + k] + 1;
        }
    qsort(d->cut, (size_t)n_cut, sizeof *d->cut, cmp_u32);
    int u = 0;
    for (int i = 0; i < n_cut; i++)
        if (!u || d->cut[i] != d->cut[u - 1]) d->cut[u++] = d->cut[i];
    d->n_int = u - 1;
    int stamp = 1, m = closure(a, start, n, buf, mark, stamp);
    if (subset_find(r, &S, d, buf, m) < 0) {
        rc = -1;
        goto out;
    }
    for (int q = 0; q < d->n; q++) {
        if ((size_t)(q + 1) * (size_t)d->n_int > RX_MAX_CELLS) {
            rc = fail(r->c, "pattern: its deterministic automaton is too large; not supported");
            goto out;
        }
        /* (interval, target) for each move of the states in q, sorted by interval */
        int n_pairs = 0;
        for (int j = 0; j < S.len[q]; j++) {
            const nfa_state *st = &a->s[S.pool[S.off[q] + j]];
            if (st->set == -1) continue;
            const rx_node *x = &r->nodes[st->set];
            for (int k = 0; k < x->n_set; k++) {
                int i0 = interval_at(d, r->lo[x->set + k]), i1 = interval_at(d, r->hi[x->set + k] + 1);
                if (n_pairs + 2 * (i1 - i0) > 2 * RX_MAX_CELLS) {
                    rc = fail(r->c, "pattern: its deterministic automaton is too large; not supported");
                    goto out;
                }
                if (!rx_grow(r, (void **)&pairs, &cap_pairs, n_pairs + 2 * (i1 - i0), sizeof *pairs)) {
                    rc = -1;
                    goto out;
                }
                for (int i = i0; i < i1; i++) pairs[n_pairs++] = i, pairs[n_pairs++] = st->to;
            }
        }
        qsort(pairs, (size_t)n_pairs / 2, 2 * sizeof *pairs, cmp_int);
        if (q >= cap_rows) {
            cap_rows = cap_rows ? cap_rows * 2 : 16;
            int *rows = realloc(d->next, (size_t)cap_rows * (size_t)d->n_int * sizeof *rows);
            if (!rows) {
                rc = fail(r->c, "out of memory");
                goto out;
            }
            d->next = rows;
        }
        int *row = d->next + (size_t)q * (size_t)d->n_int;
        for (int i = 0; i < d->n_int; i++) row[i] = -1;
        for (int p = 0; p < n_pairs;) {
            int i = pairs[p], n_to = 0;
            int *to = buf + a->n;
            for (; p < n_pairs && pairs[p] == i; p += 2) to[n_to++] = pairs[p + 1];
            m = closure(a, to, n_to, buf, mark, ++stamp);
            row[i] = subset_find(r, &S, d, buf, m);
            if (row[i] < 0) {
                rc = -1;
                goto out;
            }
        }
    }
    d->accept = calloc((size_t)d->n + 1, sizeof *d->accept);
    if (!d->accept) {
        rc = fail(r->c, "out of memory");
        goto out;
    }
    for (int q = 0; q < d->n; q++) {
        int n_has = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < S.len[q]; j++) n_has += S.pool[S.off[q] + j] == accept[i];
        d->accept[q] = n_has == n;
    }
out:
    free(mark);
    free(buf);
    free(pairs);
    free(S.pool);
    free(S.off);
    free(S.len);
    free(S.table);
    return rc;
}

/* alive[q]: some accepting state is reachable from q. */
static void dfa_alive(const dfa *d, bool *alive) {
    for (int q = 0; q < d->n; q++) alive[q] = d->accept[q];
    for (bool changed = true; changed;) { /* backwards first: states are numbered in discovery order */
        changed = false;
        for (int q = d->n - 1; q >= 0; q--)
            for (int i = 0; i < d->n_int && !alive[q]; i++) {
                int t = d->next[(size_t)q * (size_t)d->n_int + (size_t)i];
                if (t >= 0 && alive[t]) alive[q] = changed = true;
            }
    }
}

/* The minimal automaton of d (Moore's partition refinement): states that
 * accept the same rests become one, and states that accept nothing go, so
 * that every tail that accepts anything (the free end of an unanchored
 * pattern) is one state looping on itself. Skipped past a work bound, the
 * automaton staying as it was (larger, the same language). */
static int dfa_minimize(rx *r, dfa *d) {
    int n = d->n, k = d->n_int;
    bool *alive = calloc((size_t)n, sizeof *alive);
    int *block = malloc((size_t)n * sizeof *block), *next_block = malloc((size_t)n * sizeof *next_block);
    int *table = NULL, n_table = 64, rc = 0;
    while (n_table < 2 * n) n_table *= 2;
    table = malloc((size_t)n_table * sizeof *table);
    if (!alive || !block || !next_block || !table) {
        rc = fail(r->c, "out of memory");
        goto out;
    }
    dfa_alive(d, alive);
    if (!alive[0]) goto out; /* nothing accepted: the caller says so */
    bool used[2] = {false, false};
    for (int q = 0; q < n; q++) {
        block[q] = alive[q] ? d->accept[q] : -1;
        if (alive[q]) used[block[q]] = true;
    }
    int n_blocks = used[0] + used[1];
    long work = 0;
    for (;;) {
        if ((work += (long)n * k) > 50000000L) goto out;
        memset(table, -1, (size_t)n_table * sizeof *table);
        int m = 0;
        for (int q = 0; q < n; q++) {
            if (!alive[q]) {
                next_block[q] = -1;
                continue;
            }
            const int *row = d->next + (size_t)q * (size_t)k;
            unsigned h = 2166136261u ^ (unsigned)block[q];
            for (int i = 0; i < k; i++) h = (h ^ (unsigned)(row[i] >= 0 ? block[row[i]] + 1 : 0)) * 16777619u;
            unsigned at = h & (unsigned)(n_table - 1);
            for (; table[at] >= 0; at = (at + 1) & (unsigned)(n_table - 1)) {
                int p = table[at];
                const int *prow = d->next + (size_t)p * (size_t)k;
                bool same = block[p] == block[q];
                for (int i = 0; i < k && same; i++)
                    same = (row[i] >= 0 ? block[row[i]] : -1) == (prow[i] >= 0 ? block[prow[i]] : -1);
                if (same) break;
            }
            if (table[at] < 0) table[at] = q, next_block[q] = m++;
            else next_block[q] = next_block[table[at]];
        }
        memcpy(block, next_block, (size_t)n * sizeof *block);
        if (m == n_blocks) break;
        n_blocks = m;
    }
    /* block 0 holds state 0 (numbered in discovery order): the new automaton's start */
    int *rows = malloc((size_t)n_blocks * (size_t)k * sizeof *rows);
    bool *accept = calloc((size_t)n_blocks, sizeof *accept);
    if (!rows || !accept) {
        free(rows);
        free(accept);
        rc = fail(r->c, "out of memory");
        goto out;
    }
    for (int q = 0; q < n; q++) {
        if (!alive[q]) continue;
        const int *row = d->next + (size_t)q * (size_t)k;
        int *to = rows + (size_t)block[q] * (size_t)k;
        for (int i = 0; i < k; i++) to[i] = row[i] >= 0 && alive[row[i]] ? block[row[i]] : -1;
        accept[block[q]] = d->accept[q];
    }
    free(d->next);
    free(d->accept);
    d->next = rows;
    d->accept = accept;
    d->n = n_blocks;
out:
    free(alive);
    free(block);
    free(next_block);
    free(table);
    return rc;
}

/* item repeated min..max times (max -1: unbounded); past the grammar's
 * repeat bound in blocks of 1000. */
static void sb_repeat(sbuf *b, const char *item, long min, long max) {
    if (min <= 1000 && max <= 1000) {
        if (max < 0) sb_printf(b, "%s{%ld,} ", item, min);
        else sb_printf(b, "%s{%ld,%ld} ", item, min, max);
        return;
    }
    sb_printf(b, "(%s{1000}){%ld} %s{%ld} ", item, min / 1000, item, min % 1000);
    long extra = max - min; /* 0..extra more, as thousands then the rest */
    if (max < 0) sb_printf(b, "%s* ", item);
    else if (extra < 1000) sb_printf(b, "%s{0,%ld} ", item, extra);
    else
        sb_printf(b, "((%s{1000}){0,%ld} %s{0,999} | (%s{1000}){%ld} %s{0,%ld}) ", item, extra / 1000 - 1, item, item,
                  extra / 1000, item, extra % 1000);
}

/* The deterministic automaton times a counter of code points: rule (q, k)
 * matches the rest of a string that reached state q after k code points.
 * Only pairs from which an accepted length is reachable get rules, so the
 * grammar never leads into a dead end. Past minLength without maxLength
 * each state has one rule, and an accepting state that can only loop on
 * one set (the free tail of an unanchored pattern, a final [a-z]*) is
 * that set repeated. */
typedef struct product {
    compiler *c;
    rx *r;
    const dfa *d;
    const char *what;         /* "the pattern", "format 'x'": for messages */
    long min, max, K;         /* K: the last count tracked (maxLength, else minLength) */
    bool *coreach;            /* [n]: some accepting state is reachable */
    int *first, *n_edges;     /* [n]: the edges of state q */
    int *e_to, *e_rule, *e_rng, *e_nrng, n_e; /* each edge: target, set rule, ranges */
    uint32_t *lo, *hi;
    int n_rng;
    int *sets, n_sets;        /* edges with a set rule, by their ranges (open addressing, -1 empty) */
    int *loop;                /* [n]: -1 not a sink; -2 accepting with no move; else its self-loop edge */
    char *live;               /* [n * (K + 1)] */
    int *rule, *free_rule;    /* [n * (K + 1)] and [n]: rule numbers, -1 none yet */
    int *todo, n_todo, cap_todo;
    int n_made;
    long inline_cost;         /* elements of the repetitions written inline so far */
} product;

static void product_free(product *P) {
    free(P->coreach), free(P->first), free(P->n_edges), free(P->e_to), free(P->e_rule), free(P->e_rng);
    free(P->e_nrng), free(P->lo), free(P->hi), free(P->loop), free(P->live), free(P->rule), free(P->free_rule);
    free(P->todo), free(P->sets);
}

/* The edges of each state: one per target that can still accept, with the union of its intervals. */
static int product_edges(product *P) {
    const dfa *d = P->d;
    int n = d->n, cap_e = n * 4, cap_r = n * 8;
    P->e_to = malloc((size_t)cap_e * sizeof(int));
    P->e_rng = malloc((size_t)cap_e * sizeof(int));
    P->e_nrng = malloc((size_t)cap_e * sizeof(int));
    P->lo = malloc((size_t)cap_r * sizeof(uint32_t));
    P->hi = malloc((size_t)cap_r * sizeof(uint32_t));
    if (!P->e_to || !P->e_rng || !P->e_nrng || !P->lo || !P->hi) return fail(P->c, "out of memory");
    for (int q = 0; q < n; q++) {
        const int *row = d->next + (size_t)q * (size_t)d->n_int;
        P->first[q] = P->n_e;
        for (int i = 0; i < d->n_int; i++) {
            int t = row[i];
            if (t < 0 || !P->coreach[t]) continue;
            bool seen = false;
            for (int e = P->first[q]; e < P->n_e && !seen; e++) seen = P->e_to[e] == t;
            if (seen) continue;
            int c1 = cap_e, c2 = cap_e, c3 = cap_e;
            if (!rx_grow(P->r, (void **)&P->e_to, &c1, P->n_e + 1, sizeof(int)) ||
                !rx_grow(P->r, (void **)&P->e_rng, &c2, P->n_e + 1, sizeof(int)) ||
                !rx_grow(P->r, (void **)&P->e_nrng, &c3, P->n_e + 1, sizeof(int)))
                return -1;
            cap_e = c1;
            int e = P->n_e++;
            P->e_to[e] = t;
            P->e_rng[e] = P->n_rng;
            P->e_nrng[e] = 0;
            for (int j = i; j < d->n_int; j++) {
                if (row[j] != t) continue;
                uint32_t lo = d->cut[j], hi = d->cut[j + 1] - 1;
                if (P->e_nrng[e] && P->hi[P->n_rng - 1] + 1 == lo) {
                    P->hi[P->n_rng - 1] = hi;
                    continue;
                }
                int c4 = cap_r, c5 = cap_r;
                if (!rx_grow(P->r, (void **)&P->lo, &c4, P->n_rng + 1, sizeof(uint32_t)) ||
                    !rx_grow(P->r, (void **)&P->hi, &c5, P->n_rng + 1, sizeof(uint32_t)))
                    return -1;
                cap_r = c4;
                P->lo[P->n_rng] = lo;
                P->hi[P->n_rng++] = hi;
                P->e_nrng[e]++;
            }
        }
        P->n_edges[q] = P->n_e - P->first[q];
        P->loop[q] = -1;
        if (d->accept[q] && P->n_edges[q] == 0) P->loop[q] = -2;
        else if (d->accept[q] && P->n_edges[q] == 1 && P->e_to[P->first[q]] == q) P->loop[q] = P->first[q];
    }
    return 0;
}

static bool product_live(const product *P, int q, long k) {
    return k <= P->K && P->live[(size_t)q * (size_t)(P->K + 1) + (size_t)k];
}

static int product_rule(product *P, int q, long k);

/* The set rule of edge e, shared by every edge on the same set. */
static int edge_rule(product *P, int e) {
    if (P->e_rule[e] >= 0) return P->e_rule[e];
    const uint32_t *lo = P->lo + P->e_rng[e], *hi = P->hi + P->e_rng[e];
    int n = P->e_nrng[e];
    unsigned h = 2166136261u;
    for (int i = 0; i < n; i++) h = ((h ^ lo[i]) * 16777619u ^ hi[i]) * 16777619u;
    unsigned mask = (unsigned)P->n_sets - 1, at = h & mask;
    for (; P->sets[at] >= 0; at = (at + 1) & mask) {
        int f = P->sets[at];
        if (P->e_nrng[f] == n && !memcmp(P->lo + P->e_rng[f], lo, (size_t)n * sizeof *lo) &&
            !memcmp(P->hi + P->e_rng[f], hi, (size_t)n * sizeof *hi))
            return P->e_rule[e] = P->e_rule[f];
    }
    int rule = new_rule(P->c);
    if (rule < 0) return -1;
    sbuf body = {0};
    emit_ranges(P->r, lo, hi, n, &body);
    define(P->c, rule, &body);
    free(body.s);
    P->sets[at] = e;
    return P->e_rule[e] = rule;
}

/* What follows once state t is reached after k code points (k > K: past
 * the counter). Past minLength without maxLength, a state looping on one
 * set is that set repeated; within the counter it counts like any other,
 * a repetition per count costing as much as its bound. */
static void product_ref(product *P, int t, long k, sbuf *b) {
    if (P->loop[t] == -2) return;
    if (P->loop[t] >= 0 && k <= P->K) {
        /* reached at a few counts (after a fixed prefix), the loop is cheapest
         * as one repetition; reached at many, those would cost their bounds
         * each, and rules per count are cheaper: repetitions are written
         * while they expand to fewer elements than twice the counter's rules */
        long a = P->min > k ? P->min - k : 0, z = P->max < 0 ? -1 : P->max - k;
        long cost = z < 0 ? a + 1 : z;
        if (cost > 3000) cost = 3000;
        if (P->inline_cost + cost <= RX_MAX_INLINE && P->inline_cost + cost <= 2 * (P->K + 1)) {
            P->inline_cost += cost;
            int rule = edge_rule(P, P->loop[t]);
            if (rule < 0 || z == 0) return;
            char item[24];
            snprintf(item, sizeof item, "r%d", rule);
            sb_repeat(b, item, a, z);
            return;
        }
    }
    if (P->max < 0 && k >= P->K) {
        if (P->loop[t] >= 0) {
            int rule = edge_rule(P, P->loop[t]);
            if (rule >= 0) sb_printf(b, "r%d* ", rule);
            return;
        }
        k = P->K + 1; /* the automaton alone */
    }
    int rule = product_rule(P, t, k);
    if (rule >= 0) sb_printf(b, "r%d ", rule);
}

/* The rule of pair (q, k), made and queued when new; k > K: state q's free rule. */
static int product_rule(product *P, int q, long k) {
    bool free_tail = k > P->K;
    int *slot = free_tail ? &P->free_rule[q] : &P->rule[(size_t)q * (size_t)(P->K + 1) + (size_t)k];
    if (*slot >= 0) return *slot;
    if (++P->n_made > RX_MAX_PRODUCT || P->c->out.len > GR_MAX_TEXT)
        return fail(P->c, "%s with minLength/maxLength: counting the length needs more than %d grammar rules "
                          "(%d automaton states, lengths up to %ld); not supported",
                    P->what, RX_MAX_PRODUCT, P->d->n, P->K);
    *slot = new_rule(P->c);
    if (*slot < 0) return -1;
    if (!rx_grow(P->r, (void **)&P->todo, &P->cap_todo, P->n_todo + 2, sizeof *P->todo)) return -1;
    P->todo[P->n_todo++] = q;
    P->todo[P->n_todo++] = (int)(free_tail ? -1 : k);
    return *slot;
}

/* Rule (q, k)'s body: the end of the string where it may end, and each move that keeps an accepted length reachable. */
static void product_body(product *P, int q, long k, sbuf *b) {
    bool free_tail = k < 0, any = false;
    if (P->d->accept[q] && (free_tail || (k >= P->min && (P->max < 0 || k <= P->max)))) {
        sb_puts(b, "\"\" ");
        any = true;
    }
    for (int e = P->first[q]; e < P->first[q] + P->n_edges[q] && !P->c->failed; e++) {
        int t = P->e_to[e];
        long next = free_tail ? P->K + 1 : k + 1;
        if (!free_tail && !product_live(P, t, next)) continue;
        int rule = edge_rule(P, e);
        if (rule < 0) return;
        if (any) sb_puts(b, "| ");
        sb_printf(b, "r%d ", rule);
        product_ref(P, t, next, b);
        any = true;
    }
}

static int product_emit(compiler *c, rx *r, const dfa *d, const char *what, long min, long max, sbuf *b) {
    product P = {.c = c, .r = r, .d = d, .what = what, .min = min, .max = max, .K = max >= 0 ? max : min};
    int n = d->n;
    size_t cells = (size_t)n * (size_t)(P.K + 1);
    if (cells > RX_MAX_CELLS)
        return fail(c, "%s with minLength/maxLength: counting the length needs %d automaton states x %ld lengths, "
                       "more than %d; not supported", what, n, P.K + 1, RX_MAX_CELLS);
    if (!gr_budget_charge(cells * (1 + sizeof(int)), c->err)) return c->failed = true, -1;
    P.coreach = calloc((size_t)n, sizeof *P.coreach);
    P.first = calloc((size_t)n, sizeof(int));
    P.n_edges = calloc((size_t)n, sizeof(int));
    P.loop = calloc((size_t)n, sizeof(int));
    P.free_rule = malloc((size_t)n * sizeof(int));
    P.live = calloc(cells, 1);
    P.rule = malloc(cells * sizeof(int));
    if (!P.coreach || !P.first || !P.n_edges || !P.loop || !P.free_rule || !P.live || !P.rule) {
        product_free(&P);
        return fail(c, "out of memory");
    }
    memset(P.free_rule, -1, (size_t)n * sizeof(int));
    memset(P.rule, -1, cells * sizeof(int));
    dfa_alive(d, P.coreach);
    int rc = product_edges(&P);
    if (rc == 0) {
        P.e_rule = malloc((size_t)(P.n_e ? P.n_e : 1) * sizeof(int));
        for (P.n_sets = 64; P.n_sets < 2 * P.n_e; P.n_sets *= 2) {}
        P.sets = malloc((size_t)P.n_sets * sizeof(int));
        if (!P.e_rule || !P.sets) {
            rc = fail(c, "out of memory");
        } else {
            memset(P.e_rule, -1, (size_t)(P.n_e ? P.n_e : 1) * sizeof(int));
            memset(P.sets, -1, (size_t)P.n_sets * sizeof(int));
        }
    }
    for (long k = P.K; rc == 0 && k >= 0; k--)
        for (int q = 0; q < n; q++) {
            bool in_range = k >= min && (max < 0 || k <= max), ok;
            if (!P.coreach[q]) ok = false;
            else if (P.loop[q] == -2) ok = in_range;
            else if (max < 0 && k == P.K) ok = true;
            else ok = d->accept[q] && in_range;
            for (int e = P.first[q]; e < P.first[q] + P.n_edges[q] && !ok && k < P.K; e++)
                ok = product_live(&P, P.e_to[e], k + 1);
            P.live[(size_t)q * (size_t)(P.K + 1) + (size_t)k] = ok;
        }
    if (rc == 0 && !product_live(&P, 0, 0) && min == 0 && max < 0)
        rc = fail(c, "no string matches %s: no string fits", what);
    else if (rc == 0 && !product_live(&P, 0, 0))
        rc = fail(c, "no string of %s has a length within minLength/maxLength: no string fits", what);
    if (rc == 0) {
        sb_puts(b, "\"\\\"\" ");
        product_ref(&P, 0, 0, b);
        sb_puts(b, "\"\\\"\"");
    }
    while (rc == 0 && P.n_todo && !c->failed) {
        long k = P.todo[--P.n_todo];
        int q = P.todo[--P.n_todo];
        sbuf body = {0};
        product_body(&P, q, k, &body);
        int rule = k < 0 ? P.free_rule[q] : P.rule[(size_t)q * (size_t)(P.K + 1) + (size_t)k];
        if (!c->failed) define(c, rule, &body);
        free(body.s);
    }
    product_free(&P);
    return c->failed ? -1 : 0;
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

/* ---- keywords ----------------------------------------------------------------------- */

/* The keywords that assert something about an instance. Every other keyword
 * is an annotation or unknown, which JSON Schema says a validator ignores
 * (title, description, x-*, id, readonly, links, ...). */
static bool is_assertion(const char *k) {
    static const char *const kw[] = {
        "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains", "minContains",
        "maxContains", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "allOf", "not", "$ref", "minProperties", "maxProperties",
        "propertyNames", "dependencies", "dependentRequired", "dependentSchemas", "if", "unevaluatedProperties",
        "unevaluatedItems", "$dynamicRef", "$recursiveRef", NULL};
    for (int i = 0; kw[i]; i++)
        if (!strcmp(k, kw[i])) return true;
    return false;
}

static int n_assertions(const cJSON *s) {
    int n = 0;
    for (const cJSON *k = s->child; k; k = k->next) n += is_assertion(k->string);
    return n;
}

/* A new node the compiler owns until it finishes. */
static cJSON *own(compiler *c, cJSON *node) {
    if (!node) {
        fail(c, "out of memory");
        return NULL;
    }
    cJSON_AddItemToArray(c->scratch, node);
    return node;
}

/* ---- folding: allOf, a $ref beside other keywords, anyOf/oneOf beside other keywords --- */

static const cJSON *resolve_ref(compiler *c, const char *ref);
static const cJSON *fold(compiler *c, const cJSON *s, int depth);

static void replace(cJSON *o, const char *k, cJSON *v) {
    if (!v) return;
    if (cJSON_GetObjectItemCaseSensitive(o, k)) cJSON_ReplaceItemInObjectCaseSensitive(o, k, v);
    else cJSON_AddItemToObject(o, k, v);
}

/* {"allOf": [a, b]} (copies of both) */
static cJSON *all_of(compiler *c, const cJSON *a, const cJSON *b) {
    if (cJSON_IsTrue(a)) return cJSON_Duplicate(b, true);
    if (cJSON_IsTrue(b)) return cJSON_Duplicate(a, true);
    cJSON *o = cJSON_CreateObject(), *list = cJSON_CreateArray();
    if (!o || !list) {
        cJSON_Delete(o);
        cJSON_Delete(list);
        fail(c, "out of memory");
        return NULL;
    }
    cJSON_AddItemToObject(o, "allOf", list);
    cJSON_AddItemToArray(list, cJSON_Duplicate(a, true));
    cJSON_AddItemToArray(list, cJSON_Duplicate(b, true));
    return o;
}

/* acc's anyOf (or oneOf) and another list of the same keyword: every pair. */
static void cross(compiler *c, cJSON *acc, const char *key, const cJSON *list) {
    cJSON *have = cJSON_GetObjectItemCaseSensitive(acc, key);
    if (!have) {
        cJSON_AddItemToObject(acc, key, cJSON_Duplicate(list, true));
        return;
    }
    int na = cJSON_GetArraySize(have), nb = cJSON_GetArraySize(list);
    if ((long)na * nb > 256) {
        fail(c, "allOf of two %s lists with %d x %d alternatives is too big", key, na, nb);
        return;
    }
    cJSON *out = cJSON_CreateArray();
    for (const cJSON *x = have->child; x && out; x = x->next)
        for (const cJSON *y = list->child; y; y = y->next) cJSON_AddItemToArray(out, all_of(c, x, y));
    replace(acc, key, out);
}

/* The set of types a type keyword names (bits). */
enum { T_NULL = 1, T_BOOL = 2, T_OBJECT = 4, T_ARRAY = 8, T_NUMBER = 16, T_STRING = 32, T_INTEGER = 64, T_ALL = 127 };
static int type_bit(const char *t) {
    static const char *const names[] = {"null", "boolean", "object", "array", "number", "string", "integer"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

static int type_set(const cJSON *type) {
    if (!type) return T_ALL;
    if (cJSON_IsString(type)) return type_bit(type->valuestring);
    int set = 0;
    for (const cJSON *t = cJSON_IsArray(type) ? type->child : NULL; t; t = t->next)
        if (cJSON_IsString(t)) set |= type_bit(t->valuestring);
    return set;
}

static cJSON *type_node(int set) {
    static const char *const names[] = {"null", "boolean", "object", "array", "number", "string", "integer"};
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < 7; i++)
        if (set & 1 << i) cJSON_AddItemToArray(a, cJSON_CreateString(names[i]));
    return a;
}


static bool is_min_kw(const char *k) {
    return !strcmp(k, "minLength") || !strcmp(k, "minItems") || !strcmp(k, "minProperties") ||
           !strcmp(k, "minContains") || !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum");
}
static bool is_max_kw(const char *k) {
    return !strcmp(k, "maxLength") || !strcmp(k, "maxItems") || !strcmp(k, "maxProperties") ||
           !strcmp(k, "maxContains") || !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum");
}

/* Draft 4's boolean exclusiveMinimum/Maximum as the later numeric form. */
static void modern_bounds(cJSON *o) {
    static const char *const ex[2] = {"exclusiveMinimum", "exclusiveMaximum"}, *const in[2] = {"minimum", "maximum"};
    for (int i = 0; i < 2; i++) {
        cJSON *e = cJSON_GetObjectItemCaseSensitive(o, ex[i]), *b = cJSON_GetObjectItemCaseSensitive(o, in[i]);
        if (!cJSON_IsBool(e)) continue;
        if (cJSON_IsTrue(e) && cJSON_IsNumber(b)) replace(o, ex[i], cJSON_CreateNumber(b->valuedouble));
        else cJSON_DeleteItemFromObjectCaseSensitive(o, ex[i]);
        if (cJSON_IsTrue(e)) cJSON_DeleteItemFromObjectCaseSensitive(o, in[i]);
    }
}

/* The values of a list kept where keep says so. */
static bool enum_has(const cJSON *list, const cJSON *v) {
    for (const cJSON *x = list ? list->child : NULL; x; x = x->next)
        if (cJSON_Compare(x, v, true)) return true;
    return false;
}

/* Merge schema b (folded, an object) into acc: the instances both accept. */
static void merge(compiler *c, cJSON *acc, const cJSON *b) {
    if (cJSON_IsTrue(b)) return;
    if (!cJSON_IsObject(b)) {
        fail(c, "allOf: the schema false accepts nothing");
        return;
    }
    /* additionalProperties sees only its own schema's properties: a name one
     * side declares and the other side's additionalProperties: false
     * forbids must stay absent. */
    const cJSON *acc_props = cJSON_GetObjectItemCaseSensitive(acc, "properties");
    const cJSON *b_props = cJSON_GetObjectItemCaseSensitive(b, "properties");
    const cJSON *acc_addl = cJSON_GetObjectItemCaseSensitive(acc, "additionalProperties");
    const cJSON *b_addl = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    bool acc_closed = cJSON_IsFalse(acc_addl) && !cJSON_GetObjectItemCaseSensitive(acc, "patternProperties");
    bool b_closed = cJSON_IsFalse(b_addl) && !cJSON_GetObjectItemCaseSensitive(b, "patternProperties");
    for (const cJSON *k = b->child; k && !c->failed; k = k->next) {
        const char *key = k->string;
        if (!is_assertion(key) || !strcmp(key, "$ref")) continue;
        cJSON *have = cJSON_GetObjectItemCaseSensitive(acc, key);
        if (!strcmp(key, "type")) {
            int x = type_set(have), y = type_set(k);
            x |= x & T_NUMBER ? T_INTEGER : 0; /* a number type takes integers */
            y |= y & T_NUMBER ? T_INTEGER : 0;
            int set = x & y;
            if (set & T_NUMBER) set &= ~T_INTEGER;
            if (!set) {
                fail(c, "allOf: no type is in every branch");
                return;
            }
            replace(acc, "type", type_node(set));
        } else if (!strcmp(key, "enum") || !strcmp(key, "const")) {
            cJSON *list = cJSON_CreateArray();
            const cJSON *mine = cJSON_GetObjectItemCaseSensitive(acc, "enum");
            const cJSON *cn = cJSON_GetObjectItemCaseSensitive(acc, "const");
            for (const cJSON *x = !strcmp(key, "enum") ? k->child : k; x; x = !strcmp(key, "enum") ? x->next : NULL) {
                bool in = (!mine || enum_has(mine, x)) && (!cn || cJSON_Compare(cn, x, true));
                if (in) cJSON_AddItemToArray(list, cJSON_Duplicate(x, true));
            }
            cJSON_DeleteItemFromObjectCaseSensitive(acc, "const");
            replace(acc, "enum", list);
        } else if (!strcmp(key, "properties")) {
            cJSON *props = cJSON_CreateObject();
            for (const cJSON *p = acc_props ? acc_props->child : NULL; p; p = p->next) {
                if (b_closed && !cJSON_GetObjectItemCaseSensitive(b_props, p->string)) continue;
                const cJSON *other = cJSON_GetObjectItemCaseSensitive(b_props, p->string);
                if (!other && cJSON_IsObject(b_addl)) other = b_addl;
                cJSON_AddItemToObject(props, p->string, other ? all_of(c, p, other) : cJSON_Duplicate(p, true));
            }
            for (const cJSON *p = k->child; p; p = p->next) {
                if (cJSON_GetObjectItemCaseSensitive(acc_props, p->string) || acc_closed) continue;
                cJSON_AddItemToObject(props, p->string,
                                      cJSON_IsObject(acc_addl) ? all_of(c, p, acc_addl) : cJSON_Duplicate(p, true));
            }
            replace(acc, "properties", props);
        } else if (!strcmp(key, "required")) {
            cJSON *req = have ? have : cJSON_AddArrayToObject(acc, "required");
            for (const cJSON *r = k->child; r && req; r = r->next)
                if (!enum_has(req, r)) cJSON_AddItemToArray(req, cJSON_Duplicate(r, true));
        } else if (!strcmp(key, "patternProperties")) {
            cJSON *pp = have ? have : cJSON_AddObjectToObject(acc, "patternProperties");
            for (const cJSON *p = k->child; p && pp; p = p->next) {
                cJSON *old = cJSON_GetObjectItemCaseSensitive(pp, p->string);
                if (old) cJSON_ReplaceItemInObjectCaseSensitive(pp, p->string, all_of(c, old, p));
                else cJSON_AddItemToObject(pp, p->string, cJSON_Duplicate(p, true));
            }
        } else if (!have) {
            cJSON_AddItemToObject(acc, key, cJSON_Duplicate(k, true));
        } else if (is_min_kw(key) || is_max_kw(key)) {
            if (cJSON_IsNumber(k) && cJSON_IsNumber(have) &&
                (is_min_kw(key) ? k->valuedouble > have->valuedouble : k->valuedouble < have->valuedouble))
                replace(acc, key, cJSON_CreateNumber(k->valuedouble));
        } else if (!strcmp(key, "uniqueItems")) {
            if (cJSON_IsTrue(k)) replace(acc, key, cJSON_CreateTrue());
        } else if (!strcmp(key, "additionalProperties") || !strcmp(key, "items") || !strcmp(key, "additionalItems") ||
                   !strcmp(key, "contains") || !strcmp(key, "propertyNames")) {
            if (cJSON_IsFalse(have) || cJSON_IsTrue(k)) continue;
            if (cJSON_IsFalse(k) || cJSON_IsTrue(have)) replace(acc, key, cJSON_Duplicate(k, true));
            else replace(acc, key, all_of(c, have, k));
        } else if (!strcmp(key, "prefixItems")) {
            cJSON *list = cJSON_CreateArray();
            int na = cJSON_GetArraySize(have), nb = cJSON_GetArraySize(k);
            for (int i = 0; i < (na > nb ? na : nb); i++) {
                const cJSON *x = cJSON_GetArrayItem(have, i), *y = cJSON_GetArrayItem(k, i);
                cJSON_AddItemToArray(list, x && y ? all_of(c, x, y) : cJSON_Duplicate(x ? x : y, true));
            }
            replace(acc, key, list);
        } else if (!strcmp(key, "anyOf") || !strcmp(key, "oneOf")) {
            cross(c, acc, key, k);
        } else if (cJSON_Compare(have, k, true)) {
            /* the same value twice */
        } else if (!strcmp(key, "multipleOf") && cJSON_IsNumber(k) && cJSON_IsNumber(have) &&
                   k->valuedouble == (double)(long long)k->valuedouble && have->valuedouble == (double)(long long)have->valuedouble &&
                   k->valuedouble > 0 && have->valuedouble > 0 && k->valuedouble < 1e6 && have->valuedouble < 1e6) {
            long long x = (long long)k->valuedouble, y = (long long)have->valuedouble, a = x, bb = y;
            while (bb) {
                long long t = a % bb;
                a = bb;
                bb = t;
            }
            replace(acc, key, cJSON_CreateNumber((double)(x / a * y)));
        } else {
            fail(c, "allOf: two different values of '%s' cannot be combined", key);
            return;
        }
    }
    if (!c->failed && cJSON_IsObject(acc) && (acc_closed || b_closed)) {
        /* required names the merged properties no longer hold */
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(acc, "required");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(acc, "properties");
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) {
                fail(c, "required property '%s' is not allowed by additionalProperties: false", r->valuestring);
                return;
            }
    }
}

/* The schema a {"$ref": ...} (with nothing else asserted) stands for, followed. */
static const cJSON *deref(compiler *c, const cJSON *s) {
    for (int hops = 0;; hops++) {
        const cJSON *ref = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "$ref") : NULL;
        if (!cJSON_IsString(ref) || n_assertions(s) != 1) return s;
        if (hops == JS_MAX_DEPTH) {
            fail(c, "$ref chain longer than %d", JS_MAX_DEPTH);
            return NULL;
        }
        s = resolve_ref(c, ref->valuestring);
        if (!s) return NULL;
    }
}

/* s with allOf merged into one schema, a $ref beside other keywords merged
 * with them, Draft 4's items array and boolean exclusive bounds in today's
 * form, and anyOf/oneOf beside other keywords distributed over them (each
 * alternative merged with the rest); s itself when none applies. */
static const cJSON *fold(compiler *c, const cJSON *s, int depth) {
    if (!cJSON_IsObject(s) || c->failed) return s;
    if (depth > JS_MAX_DEPTH) {
        fail(c, "schema nested deeper than %d", JS_MAX_DEPTH);
        return NULL;
    }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *exmin = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *exmax = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    int n = n_assertions(s);
    bool draft4 = cJSON_IsArray(items) || cJSON_IsBool(exmin) || cJSON_IsBool(exmax);
    if (!all && !draft4 && !(ref && n > 1) && !((any || one) && n > 1)) return s;
    if (all && !cJSON_IsArray(all)) {
        fail(c, "allOf must be an array");
        return NULL;
    }
    cJSON *acc = own(c, cJSON_CreateObject());
    if (!acc) return NULL;
    for (const cJSON *k = s->child; k; k = k->next)
        if (is_assertion(k->string) && strcmp(k->string, "allOf") && strcmp(k->string, "$ref") &&
            strcmp(k->string, "anyOf") && strcmp(k->string, "oneOf"))
            cJSON_AddItemToObject(acc, k->string, cJSON_Duplicate(k, true));
    if (cJSON_IsArray(items)) { /* Draft 4 tuples */
        cJSON *list = cJSON_DetachItemFromObjectCaseSensitive(acc, "items");
        cJSON *more = cJSON_DetachItemFromObjectCaseSensitive(acc, "additionalItems");
        cJSON_AddItemToObject(acc, "prefixItems", list);
        if (more) cJSON_AddItemToObject(acc, "items", more);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(acc, "additionalItems");
    modern_bounds(acc);
    if (ref) {
        if (!cJSON_IsString(ref)) {
            fail(c, "$ref must be a string");
            return NULL;
        }
        const cJSON *t = deref(c, resolve_ref(c, ref->valuestring));
        if (t) t = fold(c, t, depth + 1);
        if (t) merge(c, acc, t);
    }
    for (const cJSON *x = all ? all->child : NULL; x && !c->failed; x = x->next) {
        const cJSON *t = deref(c, x);
        if (t) t = fold(c, t, depth + 1);
        if (t) merge(c, acc, t);
    }
    if (c->failed) return NULL;
    /* anyOf and oneOf: each alternative with the rest */
    static const char *const kws[2] = {"anyOf", "oneOf"};
    for (int i = 0; i < 2; i++) {
        const cJSON *list = i == 0 ? any : one;
        if (!list) continue;
        if (!cJSON_IsArray(list) || !list->child) {
            fail(c, "%s must be a non-empty array", kws[i]);
            return NULL;
        }
        cross(c, acc, kws[i], list);
    }
    if (c->failed) return NULL;
    cJSON *alts = cJSON_GetObjectItemCaseSensitive(acc, "anyOf");
    const char *alt_kw = "anyOf";
    if (!alts) alts = cJSON_GetObjectItemCaseSensitive(acc, "oneOf"), alt_kw = "oneOf";
    if (!alts || n_assertions(acc) == 1) return acc;
    cJSON_DetachItemViaPointer(acc, alts);
    cJSON *out = own(c, cJSON_CreateObject());
    cJSON *list = out ? cJSON_AddArrayToObject(out, alt_kw) : NULL;
    for (const cJSON *x = alts->child; x && list && !c->failed; x = x->next) {
        cJSON *m = cJSON_Duplicate(acc, true);
        const cJSON *t = deref(c, x);
        if (t) t = fold(c, t, depth + 1);
        if (t && m) merge(c, m, t);
        if (m) cJSON_AddItemToArray(list, m);
        if (c->failed) { /* an alternative that contradicts the rest is left out */
            c->failed = false;
            cJSON_DeleteItemFromArray(list, cJSON_GetArraySize(list) - 1);
        }
    }
    cJSON_Delete(alts);
    if (list && !list->child) fail(c, "no alternative of %s agrees with the keywords beside it", alt_kw);
    return c->failed ? NULL : out;
}

/* ---- enum and const beside other keywords: the values the rest accepts ------------ */

static size_t utf8_length(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool pattern_matches(const char *pattern, const char *subject) {
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &code, &off, NULL);
    if (!re) return true; /* the grammar will refuse a pattern it cannot read */
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)subject, strlen(subject), 0, 0, md, NULL) : 0;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static double num_kw(const cJSON *s, const char *k, bool *has) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    *has = cJSON_IsNumber(v);
    return *has ? v->valuedouble : 0;
}

/* Whether instance v satisfies schema s, for the keywords a grammar
 * enforces (an enum value the rest of its schema refuses is left out). */
static bool value_ok(compiler *c, const cJSON *s, const cJSON *v, int depth) {
    if (cJSON_IsFalse(s)) return false;
    if (!cJSON_IsObject(s) || depth > JS_MAX_DEPTH) return true;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (cJSON_IsString(ref)) {
        const cJSON *t = resolve_ref(c, ref->valuestring);
        if (!t || !value_ok(c, t, v, depth + 1)) return false;
    }
    int is = cJSON_IsNull(v) ? T_NULL : cJSON_IsBool(v) ? T_BOOL : cJSON_IsObject(v) ? T_OBJECT : cJSON_IsArray(v) ? T_ARRAY
             : cJSON_IsString(v) ? T_STRING : T_NUMBER;
    if (is == T_NUMBER && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e16) is |= T_INTEGER;
    int types = type_set(cJSON_GetObjectItemCaseSensitive(s, "type"));
    if (types & T_NUMBER) types |= T_INTEGER;
    if (!(types & is)) return false;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    if ((en && !enum_has(en, v)) || (cn && !cJSON_Compare(cn, v, true))) return false;
    bool has;
    double x;
    if (is & T_NUMBER) {
        double d = v->valuedouble;
        const cJSON *exmin = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
        const cJSON *exmax = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
        if ((x = num_kw(s, "minimum", &has), has) && (cJSON_IsTrue(exmin) ? d <= x : d < x)) return false;
        if ((x = num_kw(s, "maximum", &has), has) && (cJSON_IsTrue(exmax) ? d >= x : d > x)) return false;
        if ((x = num_kw(s, "exclusiveMinimum", &has), has) && d <= x) return false;
        if ((x = num_kw(s, "exclusiveMaximum", &has), has) && d >= x) return false;
        if ((x = num_kw(s, "multipleOf", &has), has) && x > 0 && fabs(d / x - round(d / x)) > 1e-9) return false;
    }
    if (is == T_STRING) {
        size_t n = utf8_length(v->valuestring);
        if ((x = num_kw(s, "minLength", &has), has) && (double)n < x) return false;
        if ((x = num_kw(s, "maxLength", &has), has) && (double)n > x) return false;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
        if (cJSON_IsString(pat) && !pattern_matches(pat->valuestring, v->valuestring)) return false;
    }
    if (is == T_OBJECT) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) return false;
        for (const cJSON *m = v->child; m; m = m->next) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(props, m->string);
            if (!p && !cJSON_GetObjectItemCaseSensitive(s, "patternProperties")) p = addl;
            if (p && !value_ok(c, p, m, depth + 1)) return false;
        }
        if ((x = num_kw(s, "minProperties", &has), has) && cJSON_GetArraySize(v) < x) return false;
        if ((x = num_kw(s, "maxProperties", &has), has) && cJSON_GetArraySize(v) > x) return false;
    }
    if (is == T_ARRAY) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
        if (cJSON_IsArray(items)) prefix = items, items = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
        int i = 0;
        for (const cJSON *m = v->child; m; m = m->next, i++) {
            const cJSON *p = i < cJSON_GetArraySize(prefix) ? cJSON_GetArrayItem(prefix, i) : items;
            if (p && !value_ok(c, p, m, depth + 1)) return false;
        }
        if ((x = num_kw(s, "minItems", &has), has) && i < x) return false;
        if ((x = num_kw(s, "maxItems", &has), has) && i > x) return false;
    }
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    for (const cJSON *a = all ? all->child : NULL; a; a = a->next)
        if (!value_ok(c, a, v, depth + 1)) return false;
    static const char *const alts[2] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(s, alts[k]);
        if (!cJSON_IsArray(list)) continue;
        int n = 0;
        for (const cJSON *a = list->child; a; a = a->next) n += value_ok(c, a, v, depth + 1);
        if (k == 0 ? n == 0 : n != 1) return false;
    }
    const cJSON *not = cJSON_GetObjectItemCaseSensitive(s, "not");
    if (not && value_ok(c, not, v, depth + 1)) return false;
    return true;
}

/* The enum (or const) values s accepts as a whole, as GBNF alternatives. */
static int gen_enum(compiler *c, const cJSON *s, sbuf *b) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    const char *kw = cn ? "const" : "enum";
    size_t old = path_push(c, kw);
    if (en && !cJSON_IsArray(en)) {
        int r = fail(c, "must be an array");
        path_pop(c, old);
        return r;
    }
    path_pop(c, old);
    bool alone = n_assertions(s) == 1;
    int n = 0;
    sb_puts(b, "(");
    for (const cJSON *x = cn ? cn : en->child; x; x = cn ? NULL : x->next) {
        if (!alone && !value_ok(c, s, x, 0)) continue;
        if (n++) sb_puts(b, " | ");
        literal_value(c, b, x);
    }
    sb_puts(b, ")");
    if (c->failed) return -1;
    if (!n) {
        old = path_push(c, kw);
        fail(c, cn ? "the const value does not satisfy the rest of its schema" : en->child ? "no enum value satisfies the rest of its schema" : "an empty enum accepts nothing");
        path_pop(c, old);
        return -1;
    }
    return 0;
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
    const cJSON *pprops = cJSON_GetObjectItemCaseSensitive(s, "patternProperties");
    if (pprops && (!cJSON_IsObject(pprops) || !pprops->child)) pprops = NULL;
    long min_props = count_kw(c, s, "minProperties", 0, LONG_MAX), max_props = count_kw(c, s, "maxProperties", -1, LONG_MAX);
    if (c->failed) return -1;
    if (!props && !req && !pprops && (!addl || cJSON_IsTrue(addl)) && min_props == 0 && max_props < 0) {
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
            /* required usually lists the properties in their order: look there first */
            int k = i < n && !strcmp(names[i], r->valuestring) ? i : 0;
            while (k < n && strcmp(names[k], r->valuestring)) k++;
            if (k == n && cJSON_IsFalse(addl) && !cJSON_GetObjectItemCaseSensitive(s, "patternProperties")) {
                fail(c, "required property '%s' is not in properties and additionalProperties is false: no object fits",
                     r->valuestring);
            } else if (k == n) { /* its value is an additional property's */
                names[n] = r->valuestring;
                rules[n] = cJSON_IsObject(addl) ? gen(c, addl, depth + 1) : new_rule(c);
                if (rules[n] >= 0 && !cJSON_IsObject(addl)) sb_printf(&c->out, "r%d ::= json-value\n", rules[n]);
                n++;
            }
            required[k] = true;
        }
        path_pop(c, o2);
    }
    path_pop(c, old);
    int extra = -1;
    /* minProperties/maxProperties only where the required and declared
     * properties already keep them */
    int n_required = 0;
    for (int i = 0; i < n; i++) n_required += required[i];
    bool open = pprops || !cJSON_IsFalse(addl);
    if (!c->failed && min_props > n_required) {
        old = path_push(c, "minProperties");
        fail(c, "minProperties above the number of required properties is not supported");
    } else if (!c->failed && max_props >= 0 && (open || max_props < n)) {
        old = path_push(c, "maxProperties");
        fail(c, max_props < n_required ? "maxProperties is below the number of required properties: no object fits"
                                       : "maxProperties below the number of properties an object may have is not supported");
    }
    if (pprops && !c->failed) {
        /* keys matching a pattern, with that pattern's schema; other keys
         * are left out, since a grammar cannot say "matches no pattern" */
        old = path_push(c, "patternProperties");
        sbuf body = {0};
        int i = 0;
        for (const cJSON *pp = pprops->child; pp && !c->failed; pp = pp->next, i++) {
            size_t o2 = path_push(c, pp->string);
            int v = gen(c, pp, depth + 1);
            if (i) sb_puts(&body, " | ");
            sb_puts(&body, "(");
            gen_pattern(c, pp->string, &body);
            sb_printf(&body, " ws \":\" ws r%d ws)", v);
            path_pop(c, o2);
        }
        path_pop(c, old);
        extra = new_rule(c);
        if (!c->failed) define(c, extra, &body);
        free(body.s);
    } else if (!cJSON_IsFalse(addl)) {
        /* absent or true: any other key, with any value */
        static const cJSON any_value = {.type = cJSON_True};
        if (!addl) addl = &any_value;
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
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    long cap_items = count_kw(c, s, "maxItems", -1, LONG_MAX);
    if (cJSON_IsTrue(uniq) && !(cap_items >= 0 && cap_items <= 1)) {
        size_t o = path_push(c, "uniqueItems");
        int r = fail(c, "uniqueItems cannot be enforced by a grammar and is not supported");
        path_pop(c, o);
        return r;
    }
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

/* The formats a grammar enforces: the prelude rule for the string's
 * content, and the same language as a pattern, which minLength/maxLength
 * are intersected with. Any other format is an annotation (JSON Schema
 * asserts none by default). */
#define RX_DATE                                                                                                \
    "([1-9][0-9]{3}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"             \
    "02-(0[1-9]|1[0-9]|2[0-8]))|([1-9][0-9](0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26])00)-02-29)"
#define RX_TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define RX_URI "[a-zA-Z][a-zA-Z0-9+.-]{0,15}:[a-zA-Z0-9._~:/?#@!$&'()*+,;=%-]{0,512}"
#define RX_URI_REF "[a-zA-Z0-9._~:/?#@!$&'()*+,;=%-]{0,512}"
#define RX_H16 "[0-9a-fA-F]{1,4}"
#define RX_OCTET "([0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])"
#define RX_LABEL "[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
#define RX_DIGITS "[0-9]{1,9}"
static const char *const FORMATS[][3] = {
    {"date", "date", RX_DATE},
    {"time", "time", RX_TIME},
    {"date-time", "date \"T\" time", RX_DATE "T" RX_TIME},
    {"uuid", "uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
    {"email", "email", "[a-zA-Z0-9_.+-]{1,32}@[a-zA-Z0-9-]{1,32}(\\.[a-zA-Z0-9-]{1,16}){1,3}"},
    {"ipv4", "ipv4", RX_OCTET "\\." RX_OCTET "\\." RX_OCTET "\\." RX_OCTET},
    {"ipv6", "ipv6", RX_H16 "(:" RX_H16 "){7}|(" RX_H16 "(:" RX_H16 "){0,6})?::(" RX_H16 "(:" RX_H16 "){0,6})?"},
    {"hostname", "hostname", RX_LABEL "(\\." RX_LABEL "){0,8}"},
    {"uri", "uri", RX_URI},
    {"iri", "uri", RX_URI},
    {"url", "uri", RX_URI},
    {"uri-reference", "uri-ref", RX_URI_REF},
    {"iri-reference", "uri-ref", RX_URI_REF},
    {"duration", "duration",
     "P(" RX_DIGITS "W|(" RX_DIGITS "Y)?(" RX_DIGITS "M)?(" RX_DIGITS "D)?"
     "(T(" RX_DIGITS "H)?(" RX_DIGITS "M)?(" RX_DIGITS "(\\." RX_DIGITS ")?S)?)?)"},
    {NULL, NULL, NULL}};

static int format_index(const char *f) {
    for (int i = 0; FORMATS[i][0]; i++)
        if (!strcmp(f, FORMATS[i][0])) return i;
    return -1;
}

/* n without the one-element sequences around it. */
static int rx_unwrap(const rx *r, int n) {
    while (r->nodes[n].kind == RX_CAT && r->nodes[n].kid >= 0 && r->nodes[r->nodes[n].kid].next < 0)
        n = r->nodes[n].kid;
    return n;
}

/* A repeated set node (or the set itself) that is the whole of an anchored
 * pattern: the set, with its count in *min and *max; -1 when the pattern is other. */
static int single_atom(const rx *r, int n, long *min, long *max) {
    n = rx_unwrap(r, n);
    *min = *max = 1;
    if (r->nodes[n].kind == RX_REP) {
        *min = r->nodes[n].min;
        *max = r->nodes[n].max;
        n = rx_unwrap(r, r->nodes[n].kid);
    }
    return r->nodes[n].kind == RX_SET ? n : -1;
}

/* The deterministic automaton of the patterns at roots (all of them: their
 * intersection) times a counter of code points in [min, max]. */
static void pattern_automaton(compiler *c, rx *r, const int *roots, int n, const char *what, long min, long max,
                              sbuf *b) {
    nfa a = {.r = r, .max_len = max};
    dfa d = {0};
    int start[2], end[2];
    for (int i = 0; i < n && i < 2; i++) {
        start[i] = nfa_add_state(&a);
        end[i] = nfa_build(&a, roots[i], start[i], 0);
    }
    if (!c->failed && dfa_build(r, &a, start, end, n, &d) == 0 && dfa_minimize(r, &d) == 0)
        product_emit(c, r, &d, what, min, max, b);
    free(a.s);
    dfa_free(&d);
}

/* Whether node n repeats something that matches "" more than once
 * ((a*)*, (a?b?){2}): the grammar refuses those, the automaton does not. */
static bool rx_repeats_empty(const rx *r, int n) {
    const rx_node *x = &r->nodes[n];
    if (x->kind == RX_REP) {
        long lo, hi;
        rx_len(r, x->kid, &lo, &hi);
        if (lo == 0 && (x->max < 0 || x->max > 1)) return true;
    }
    for (int k = x->kid; x->kind != RX_SET && k >= 0; k = r->nodes[k].next)
        if (rx_repeats_empty(r, k)) return true;
    return false;
}

/* A string matching a pattern (or a format, whose prelude rule is `rule`)
 * with a length in [min, max] code points (max -1: unbounded). When the
 * pattern's own lengths lie within the bounds, they are redundant; a
 * whole-string repeated set takes them into its count; any other pattern
 * becomes an automaton times a length counter. */
static int string_with_length(compiler *c, const char *kw, const char *what, const char *pattern, const char *rule,
                              long min, long max, sbuf *b) {
    size_t old = path_push(c, kw);
    rx r = {.c = c, .search = !rule}; /* a format is the whole string */
    int root = rx_parse(&r, pattern, strlen(pattern));
    long lo, hi, rep_lo, rep_hi;
    int atom;
    if (root < 0) goto out;
    rx_len(&r, root, &lo, &hi);
    bool redundant = lo >= min && (max < 0 || hi <= max);
    bool automaton_only = redundant && !rule && rx_repeats_empty(&r, root);
    if (redundant && !automaton_only) {
        if (rule) {
            sb_printf(b, "\"\\\"\" %s \"\\\"\"", rule);
        } else {
            sb_puts(b, "\"\\\"\" ");
            rx_emit(&r, root, b);
            sb_puts(b, "\"\\\"\"");
        }
    } else if (!redundant && ((max >= 0 && lo > max) || hi < min)) {
        if (hi == RX_INF)
            fail(c, "strings of %s are at least %ld characters long, above maxLength %ld: no string fits", what, lo, max);
        else
            fail(c, "strings of %s are %ld to %ld characters long, outside minLength %ld / maxLength %ld: no string fits",
                 what, lo, hi, min, max);
    } else if (!redundant && (atom = single_atom(&r, root, &rep_lo, &rep_hi)) >= 0) {
        if (rep_lo < min) rep_lo = min;
        if (max >= 0 && (rep_hi < 0 || rep_hi > max)) rep_hi = max;
        int set = new_rule(c);
        if (set >= 0) {
            sbuf body = {0};
            emit_ranges(&r, r.lo + r.nodes[atom].set, r.hi + r.nodes[atom].set, r.nodes[atom].n_set, &body);
            define(c, set, &body);
            free(body.s);
            char item[24];
            snprintf(item, sizeof item, "r%d", set);
            sb_puts(b, "\"\\\"\" ");
            sb_repeat(b, item, rep_lo, rep_hi);
            sb_puts(b, "\"\\\"\"");
        }
    } else {
        pattern_automaton(c, &r, &root, 1, what, automaton_only ? 0 : min, automaton_only ? -1 : max, b);
    }
out:
    rx_free(&r);
    path_pop(c, old);
    return c->failed ? -1 : 0;
}

/* A string of a format that also matches a pattern, within the length
 * bounds: the intersection of their automata. */
static int format_and_pattern(compiler *c, int f, const char *pattern, long min, long max, sbuf *b) {
    size_t old = path_push(c, "pattern");
    char what[96];
    snprintf(what, sizeof what, "format '%s' and the pattern", FORMATS[f][0]);
    rx r = {.c = c};
    int roots[2];
    roots[0] = rx_parse(&r, FORMATS[f][2], strlen(FORMATS[f][2]));
    r.search = true;
    roots[1] = roots[0] < 0 ? -1 : rx_parse(&r, pattern, strlen(pattern));
    if (roots[1] >= 0) pattern_automaton(c, &r, roots, 2, what, min, max, b);
    rx_free(&r);
    path_pop(c, old);
    return c->failed ? -1 : 0;
}

static void gen_pattern(compiler *c, const char *pattern, sbuf *b) {
    string_with_length(c, "pattern", "the pattern", pattern, NULL, 0, -1, b);
}

static int gen_string(compiler *c, const cJSON *s, sbuf *b) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    int f = cJSON_IsString(fmt) ? format_index(fmt->valuestring) : -1;
    if (pat && !cJSON_IsString(pat)) return fail(c, "pattern must be a string");
    long min = count_kw(c, s, "minLength", 0, 100000), max = count_kw(c, s, "maxLength", -1, LONG_MAX);
    if (c->failed) return -1;
    if (max >= 0 && min > max) return fail(c, "minLength %ld is above maxLength %ld", min, max);
    if (max > 100000) max = -1; /* a bound this high never binds in practice */
    if (f >= 0 && pat) return format_and_pattern(c, f, pat->valuestring, min, max, b);
    if (f >= 0) {
        char what[96];
        snprintf(what, sizeof what, "format '%s'", FORMATS[f][0]);
        return string_with_length(c, "format", what, FORMATS[f][2], FORMATS[f][1], min, max, b);
    }
    if (pat) return string_with_length(c, "pattern", "the pattern", pat->valuestring, NULL, min, max, b);
    if (min == 0 && max < 0) {
        sb_puts(b, "json-string");
    } else if (min <= 1000 && max <= 1000) {
        sb_puts(b, "\"\\\"\" ");
        sb_repeat(b, "json-char", min, max);
        sb_puts(b, "\"\\\"\"");
    } else { /* thousands of elements each: one rule per bound pair (a schema repeats its maxLength: 32767) */
        int i = 0;
        while (i < c->n_long_strings && (c->long_strings[i][0] != min || c->long_strings[i][1] != max)) i++;
        if (i == c->n_long_strings) {
            int rule = new_rule(c);
            if (rule < 0) return -1;
            sbuf body = {0};
            sb_puts(&body, "\"\\\"\" ");
            sb_repeat(&body, "json-char", min, max);
            sb_puts(&body, "\"\\\"\"");
            define(c, rule, &body);
            free(body.s);
            if (i == 16) i = 0; /* the table is full: the next pair reuses the first slot */
            else c->n_long_strings++;
            c->long_strings[i][0] = min, c->long_strings[i][1] = max, c->long_strings[i][2] = rule;
        }
        sb_printf(b, "r%ld", c->long_strings[i][2]);
    }
    return 0;
}

static int gen_type(compiler *c, const cJSON *s, const char *type, int depth, sbuf *b) {
    if (!strcmp(type, "object")) return gen_object(c, s, depth, b);
    if (!strcmp(type, "array")) return gen_array(c, s, depth, b);
    if (!strcmp(type, "string")) return gen_string(c, s, b);
    if (!strcmp(type, "integer")) return gen_number(c, s, true, b);
    if (!strcmp(type, "number")) return gen_number(c, s, false, b);
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
        s = fold(c, s, depth);
        if (!s) {
            free(body.s);
            return -1;
        }
        if (cJSON_IsFalse(s)) {
            free(body.s);
            return fail(c, "the schema accepts nothing");
        }
        static const char *const refused[] = {"not", "if", "dependencies", "dependentRequired", "dependentSchemas",
                                              "propertyNames", "contains", "unevaluatedProperties", "unevaluatedItems",
                                              "$dynamicRef", "$recursiveRef", NULL};
        for (int i = 0; refused[i]; i++) {
            const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, refused[i]);
            if (!k || (!strcmp(refused[i], "dependencies") && !k->child)) continue;
            path_push(c, refused[i]);
            free(body.s);
            return fail(c, "'%s' cannot be enforced by a grammar and is not supported", refused[i]);
        }
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
        const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
        const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
        if (en || cn) {
            gen_enum(c, s, &body);
        } else if (ref) {
            size_t old = path_push(c, "$ref");
            if (!cJSON_IsString(ref)) fail(c, "must be a string");
            path_pop(c, old);
            int r = c->failed ? -1 : gen_ref(c, ref->valuestring, depth);
            if (r >= 0) sb_printf(&body, "r%d", r);
        } else if (any || one) {
            gen_alternatives(c, any ? any : one, any ? "anyOf" : "oneOf", depth, &body);
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
            /* without type, keywords constrain only their own type's
             * instances: the other types stay free */
            if (implied_type(s)) {
                static const char *const all[] = {"object", "array", "string", "number", "boolean", "null"};
                sb_puts(&body, "(");
                for (int i = 0; i < 6 && !c->failed; i++) {
                    if (i) sb_puts(&body, " | ");
                    gen_type(c, s, all[i], depth, &body);
                }
                sb_puts(&body, ")");
            } else {
                sb_puts(&body, "json-value");
            }
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
    compiler c = {.root = root, .err = err, .scratch = cJSON_CreateArray()};
    int r = c.scratch ? gen(&c, root, 0) : fail(&c, "out of memory");
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
    cJSON_Delete(c.scratch);
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
    compiler c = {.err = err};
    rx r = {.c = &c, .raw = true};
    int root = rx_parse(&r, regex, len); /* a whole-output regex: anchored either way */
    if (root >= 0) {
        sb_puts(&c.out, "root ::= ");
        rx_emit(&r, root, &c.out);
        sb_puts(&c.out, "\n");
    }
    rx_free(&r);
    gl_grammar *g = NULL;
    if (c.out.oom && !c.failed) gl_error_set(err, "regex: out of memory");
    else if (!c.failed) g = gr_compile(c.out.s, c.out.len, err);
    free(c.out.s);
    return g;
}
