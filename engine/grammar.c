/* grammar.c -- GBNF parser, pushdown automaton over bytes, token masks.
 *
 * Representation: every rule is a run of elements in one array, its
 * alternatives separated by END; an element is a character class (code
 * point ranges, maybe negated) or a reference to a rule. Groups and
 * repetitions become anonymous rules, so the automaton knows only classes,
 * references and END. A parse stack is a linked list of positions in the
 * element array (the top is the class to match next); references push the
 * position after them, except in tail position (the next element is END),
 * so right recursion ("x*") runs in constant stack depth. Left recursion
 * would expand forever and is refused at compile. */
#include "grammar.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gl_error.h"

enum { E_END, E_CHARS, E_RULE };

typedef struct gr_elem {
    uint32_t type;            /* E_* */
    uint32_t arg;             /* E_CHARS: class index; E_RULE: rule index */
} gr_elem;

typedef struct gr_range {
    uint32_t lo, hi;          /* code points, inclusive */
} gr_range;

typedef struct gr_class {
    uint32_t first, n;        /* sorted, merged ranges in ranges[] */
    bool negated;
    uint64_t ascii[2];        /* membership of code points < 128, precomputed */
} gr_class;

typedef struct mask_entry {
    uint64_t hash;
    uint32_t *key;            /* the state it was computed for; NULL = free slot */
    int key_len;
    uint64_t *bits;           /* allowed tokens */
} mask_entry;

struct gl_grammar {
    atomic_int refs;
    gr_elem *elems;
    int n_elems;
    gr_class *classes;
    int n_classes;
    gr_range *ranges;
    int n_ranges;
    uint32_t *alts;           /* start element of each alternative, grouped by rule */
    int *rule_first_alt, *rule_n_alts;
    int n_rules;
    int root;

    /* masks computed so far, for one vocabulary */
    pthread_mutex_t cache_mutex;
    const gr_vocab *cache_vocab;
    mask_entry *cache;        /* open addressing, [MASK_CACHE_SLOTS] */
    int cache_used;
};

#define MASK_CACHE_SLOTS 2048 /* power of two; cleared when 3/4 full */

/* ---- compiled-grammar cache (by text) -------------------------------------- */

/* Only grammars that compiled and can start are kept, at most this many
 * and this many bytes (text and compiled form), the oldest going first. */
#define COMPILE_CACHE_SIZE 32
#define COMPILE_CACHE_BYTES ((size_t)64 << 20)

typedef struct compiled_entry {
    uint64_t hash;
    char *text;
    size_t len;
    size_t bytes;             /* what the entry holds */
    uint64_t stamp;           /* insertion order */
    gr_grammar *g;
} compiled_entry;

static pthread_mutex_t compiled_mutex = PTHREAD_MUTEX_INITIALIZER;
static compiled_entry compiled[COMPILE_CACHE_SIZE];
static size_t compiled_bytes;
static uint64_t compiled_stamp;

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

/* ---- compile budget --------------------------------------------------------- */

static _Thread_local gl_compile_budget *budget;
static _Thread_local struct timespec budget_t0;
static _Thread_local size_t budget_used;
static _Thread_local unsigned budget_ticks;

void gl_compile_budget_set(gl_compile_budget *b) {
    budget = b;
    budget_used = 0;
    budget_ticks = 0;
    clock_gettime(CLOCK_MONOTONIC, &budget_t0);
    if (b) b->exceeded = GL_BUDGET_OK;
}

bool gr_budget_charge(size_t n, gl_error *err) {
    gl_compile_budget *b = budget;
    if (!b) return true;
    if (b->exceeded) return false;
    budget_used += n;
    if (b->max_bytes && budget_used > b->max_bytes) {
        b->exceeded = GL_BUDGET_MEMORY;
        gl_error_set(err, "grammar compile stopped: it needs more than the memory budget of %zu MiB",
                     b->max_bytes >> 20);
        return false;
    }
    if (++budget_ticks % 256) return true; /* the clock read is kept off the hot loops */
    if (b->cancel && atomic_load(b->cancel)) {
        b->exceeded = GL_BUDGET_CANCELLED;
        gl_error_set(err, "grammar compile cancelled");
        return false;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double spent = (double)(now.tv_sec - budget_t0.tv_sec) + (double)(now.tv_nsec - budget_t0.tv_nsec) * 1e-9;
    if (b->max_seconds > 0 && spent > b->max_seconds) {
        b->exceeded = GL_BUDGET_TIME;
        gl_error_set(err, "grammar compile stopped: it takes longer than the time budget of %.0f ms",
                     b->max_seconds * 1e3);
        return false;
    }
    return true;
}

/* ---- parser ------------------------------------------------------------------ */

typedef struct b_rule {
    char *name;               /* NULL for anonymous rules */
    gr_elem *body;            /* alternatives, each ended by E_END */
    int n, cap;
    bool defined;
    bool repeated;            /* some repetition has two or more copies of it in a row */
    const char *first_use;    /* where an undefined rule was first referenced */
} b_rule;

typedef struct parser {
    const char *text, *p, *end;
    gl_error *err;
    bool failed;
    b_rule *rules;
    int n_rules, cap_rules;
    gr_class *classes;
    int n_classes, cap_classes;
    gr_range *ranges;
    int n_ranges, cap_ranges;
    long n_elems;             /* across all bodies, for the size bound */
    int *by_name;             /* open addressing over named rules: index + 1, 0 = free */
    int n_named, cap_by_name; /* cap: a power of two, kept under half full */
} parser;

static void where(const parser *ps, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *c = ps->text; c < at && c < ps->end; c++) {
        if (*c == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

__attribute__((format(printf, 3, 4))) static void fail_at(parser *ps, const char *at, const char *fmt, ...) {
    if (ps->failed) return;
    ps->failed = true;
    int line, col;
    where(ps, at, &line, &col);
    va_list ap;
    va_start(ap, fmt);
    gl_error_vset(ps->err, fmt, ap);
    va_end(ap);
    gl_error_prefix(ps->err, "grammar: line %d, column %d", line, col);
}

static bool grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *a = realloc(*arr, (size_t)c * elem);
    if (!a) return false;
    *arr = a;
    *cap = c;
    return true;
}

/* Charges what the parser is about to hold (arrays grow by doubling, so
 * twice the bytes); false once the thread's compile budget is spent. */
static bool within_budget(parser *ps, size_t bytes) {
    if (ps->failed) return false;
    if (gr_budget_charge(2 * bytes, ps->err)) return true;
    ps->failed = true;
    return false;
}

static int new_rule(parser *ps, const char *name, size_t len) {
    if (!within_budget(ps, sizeof(b_rule) + len + 1 + 2 * sizeof(int))) return -1;
    if (!grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)) {
        fail_at(ps, ps->p, "out of memory");
        return -1;
    }
    b_rule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        r->name = strndup(name, len);
        if (!r->name) {
            fail_at(ps, ps->p, "out of memory");
            return -1;
        }
    }
    return ps->n_rules++;
}

/* Named rules are found through a hash index, so a grammar of many rules
 * compiles in time linear in its size. */
static bool index_name(parser *ps, int rule) {
    if (2 * (ps->n_named + 1) > ps->cap_by_name) {
        int cap = ps->cap_by_name ? 2 * ps->cap_by_name : 64;
        int *idx = calloc((size_t)cap, sizeof *idx);
        if (!idx) return false;
        for (int i = 0; i < ps->cap_by_name; i++) {
            int r = ps->by_name[i] - 1;
            if (r < 0) continue;
            uint64_t h = hash_bytes(ps->rules[r].name, strlen(ps->rules[r].name), 0xcbf29ce484222325ull);
            size_t k = h & (size_t)(cap - 1);
            while (idx[k]) k = (k + 1) & (size_t)(cap - 1);
            idx[k] = r + 1;
        }
        free(ps->by_name);
        ps->by_name = idx;
        ps->cap_by_name = cap;
    }
    const char *name = ps->rules[rule].name;
    size_t k = hash_bytes(name, strlen(name), 0xcbf29ce484222325ull) & (size_t)(ps->cap_by_name - 1);
    while (ps->by_name[k]) k = (k + 1) & (size_t)(ps->cap_by_name - 1);
    ps->by_name[k] = rule + 1;
    ps->n_named++;
    return true;
}

static int rule_by_name(parser *ps, const char *name, size_t len) {
    if (ps->cap_by_name) {
        size_t k = hash_bytes(name, len, 0xcbf29ce484222325ull) & (size_t)(ps->cap_by_name - 1);
        for (; ps->by_name[k]; k = (k + 1) & (size_t)(ps->cap_by_name - 1)) {
            const char *have = ps->rules[ps->by_name[k] - 1].name;
            if (!strncmp(have, name, len) && have[len] == 0) return ps->by_name[k] - 1;
        }
    }
    int r = new_rule(ps, name, len);
    if (r >= 0 && !index_name(ps, r)) {
        fail_at(ps, ps->p, "out of memory");
        return -1;
    }
    return r;
}

static void emit(parser *ps, int rule, uint32_t type, uint32_t arg) {
    if (ps->failed) return;
    if (++ps->n_elems > GR_MAX_ELEMS) {
        fail_at(ps, ps->p, "the grammar expands to more than %d elements", GR_MAX_ELEMS);
        return;
    }
    if (!within_budget(ps, sizeof(gr_elem) * 2 + sizeof(uint32_t))) return; /* body, then elems and alts */
    b_rule *r = &ps->rules[rule];
    if (!grow((void **)&r->body, &r->cap, r->n + 1, sizeof *r->body)) {
        fail_at(ps, ps->p, "out of memory");
        return;
    }
    r->body[r->n++] = (gr_elem){type, arg};
}

/* A class from ranges (negated or not); returns its index. */
static int add_class(parser *ps, const gr_range *rs, int n, bool negated) {
    if (!within_budget(ps, sizeof(gr_class) + (size_t)n * sizeof *rs)) return 0;
    if (!grow((void **)&ps->classes, &ps->cap_classes, ps->n_classes + 1, sizeof *ps->classes) ||
        !grow((void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + n, sizeof *ps->ranges)) {
        fail_at(ps, ps->p, "out of memory");
        return 0;
    }
    gr_class *c = &ps->classes[ps->n_classes];
    c->first = (uint32_t)ps->n_ranges;
    c->negated = negated;
    if (n > 0) memcpy(ps->ranges + ps->n_ranges, rs, (size_t)n * sizeof *rs);
    c->n = (uint32_t)n;
    ps->n_ranges += n;
    return ps->n_classes++;
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void skip_space(parser *ps) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        } else {
            break;
        }
    }
}

/* At "name ::=": the start of the next rule (ends the current one). */
static bool at_rule_start(const parser *ps) {
    const char *q = ps->p;
    if (q >= ps->end || !is_name_char(*q)) return false;
    while (q < ps->end && is_name_char(*q)) q++;
    while (q < ps->end && (*q == ' ' || *q == '\t')) q++;
    return ps->end - q >= 3 && !memcmp(q, "::=", 3);
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 code point of the grammar text; -1 on bad encoding. */
static int32_t decode_utf8(const char **pp, const char *end) {
    const unsigned char *s = (const unsigned char *)*pp;
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || (const char *)s + n > end) return -1;
    uint32_t cp = n == 1 ? s[0] : n == 2 ? s[0] & 0x1Fu : n == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *pp += n;
    return (int32_t)cp;
}

/* A character of a literal or class, escapes included; -1 after an error. */
static int32_t parse_char(parser *ps) {
    const char *at = ps->p;
    if (*ps->p != '\\') {
        int32_t cp = decode_utf8(&ps->p, ps->end);
        if (cp < 0) fail_at(ps, at, "invalid UTF-8");
        return cp;
    }
    ps->p++;
    if (ps->p >= ps->end) {
        fail_at(ps, at, "escape at the end of the grammar");
        return -1;
    }
    char c = *ps->p++;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = ps->p < ps->end ? hex_value(*ps->p) : -1;
            if (h < 0) {
                fail_at(ps, at, "\\%c needs %d hex digits", c, digits);
                return -1;
            }
            v = v << 4 | (uint32_t)h;
            ps->p++;
        }
        if (v > 0x10FFFF) {
            fail_at(ps, at, "code point U+%X is beyond U+10FFFF", v);
            return -1;
        }
        return (int32_t)v;
    }
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
            fail_at(ps, at, "unknown escape \\%c", c);
            return -1;
        }
        return (unsigned char)c; /* \\ \" \] \[ \- \^ ... stand for themselves */
    }
}

static void parse_alternates(parser *ps, int rule, int depth);

/* Turn the elements [start, end) of rule's body into one element (a new
 * rule when there are several) and repeat it min..max times (max -1 =
 * unbounded): x{m} then nested optionals, or a right-recursive star. */
static void repeat(parser *ps, int rule, int start, int min, int max) {
    if (ps->failed) return;
    gr_elem x;
    b_rule *r = &ps->rules[rule];
    if (r->n - start == 1) {
        x = r->body[start];
    } else {
        int sub = new_rule(ps, NULL, 0);
        if (sub < 0) return;
        r = &ps->rules[rule];
        for (int i = start; i < r->n; i++) emit(ps, sub, r->body[i].type, r->body[i].arg);
        emit(ps, sub, E_END, 0);
        x = (gr_elem){E_RULE, (uint32_t)sub};
    }
    ps->n_elems -= ps->rules[rule].n - start;
    ps->rules[rule].n = start;
    /* Copies of something that can match "" in a row make every string
     * parse in many ways (which copies took the characters), and the stack
     * sets grow with their number: refused in build() once nullability is
     * known. */
    if (x.type == E_RULE && (min > 1 || max > 1 || max < 0)) ps->rules[x.arg].repeated = true;
    for (int i = 0; i < min; i++) emit(ps, rule, x.type, x.arg);
    if (max < 0) {
        int star = new_rule(ps, NULL, 0); /* star ::= x star | "" */
        if (star < 0) return;
        emit(ps, star, x.type, x.arg);
        emit(ps, star, E_RULE, (uint32_t)star);
        emit(ps, star, E_END, 0);
        emit(ps, star, E_END, 0);
        emit(ps, rule, E_RULE, (uint32_t)star);
    } else if (max > min) {
        int inner = -1; /* opt_k ::= x opt_{k-1} | "" */
        for (int k = 0; k < max - min && !ps->failed; k++) {
            int opt = new_rule(ps, NULL, 0);
            if (opt < 0) return;
            emit(ps, opt, x.type, x.arg);
            if (inner >= 0) emit(ps, opt, E_RULE, (uint32_t)inner);
            emit(ps, opt, E_END, 0);
            emit(ps, opt, E_END, 0);
            inner = opt;
        }
        emit(ps, rule, E_RULE, (uint32_t)inner);
    }
}

static int parse_count(parser *ps) {
    const char *at = ps->p;
    long v = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
        fail_at(ps, at, "expected a number in {}");
        return -1;
    }
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > GR_MAX_REPEAT) {
            fail_at(ps, at, "repetition count above %d", GR_MAX_REPEAT);
            return -1;
        }
    }
    return (int)v;
}

static void parse_class(parser *ps, int rule) {
    const char *at = ps->p;
    ps->p++; /* [ */
    bool negated = ps->p < ps->end && *ps->p == '^';
    if (negated) ps->p++;
    gr_range rs[256];
    int n = 0;
    while (!ps->failed) {
        if (ps->p >= ps->end) {
            fail_at(ps, at, "unterminated character class");
            return;
        }
        if (*ps->p == ']') break;
        int32_t lo = parse_char(ps), hi = lo;
        if (lo < 0) return;
        if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            hi = parse_char(ps);
            if (hi < 0) return;
            if (hi < lo) {
                fail_at(ps, at, "range end below its start in a character class");
                return;
            }
        }
        if (lo >= 0xD800 && hi <= 0xDFFF) {
            fail_at(ps, at, "U+%04X is a UTF-16 surrogate, not a character (write a character beyond "
                            "U+FFFF as \\U0001F600 or as itself)", (unsigned)lo);
            return;
        }
        if (n == (int)(sizeof rs / sizeof *rs)) {
            fail_at(ps, at, "more than 256 ranges in a character class");
            return;
        }
        rs[n++] = (gr_range){(uint32_t)lo, (uint32_t)hi};
    }
    ps->p++; /* ] */
    emit(ps, rule, E_CHARS, (uint32_t)add_class(ps, rs, n, negated));
}

static void parse_sequence(parser *ps, int rule, int depth) {
    while (!ps->failed) {
        skip_space(ps);
        if (ps->p >= ps->end || *ps->p == '|' || *ps->p == ')' || at_rule_start(ps)) return;
        int start = ps->rules[rule].n;
        const char *at = ps->p;
        char c = *ps->p;
        if (c == '"') {
            ps->p++;
            while (!ps->failed) {
                if (ps->p >= ps->end) {
                    fail_at(ps, at, "unterminated string literal");
                    return;
                }
                if (*ps->p == '"') break;
                const char *char_at = ps->p;
                int32_t cp = parse_char(ps);
                if (cp < 0) return;
                if (cp >= 0xD800 && cp <= 0xDFFF) {
                    fail_at(ps, char_at, "U+%04X is a UTF-16 surrogate, not a character (write a character "
                                         "beyond U+FFFF as \\U0001F600 or as itself)", (unsigned)cp);
                    return;
                }
                gr_range r1 = {(uint32_t)cp, (uint32_t)cp};
                emit(ps, rule, E_CHARS, (uint32_t)add_class(ps, &r1, 1, false));
            }
            ps->p++;
        } else if (c == '[') {
            parse_class(ps, rule);
        } else if (c == '.') {
            ps->p++;
            emit(ps, rule, E_CHARS, (uint32_t)add_class(ps, NULL, 0, true));
        } else if (c == '(') {
            if (depth >= GR_MAX_NESTING) {
                fail_at(ps, at, "parentheses nested deeper than %d", GR_MAX_NESTING);
                return;
            }
            ps->p++;
            int sub = new_rule(ps, NULL, 0);
            if (sub < 0) return;
            parse_alternates(ps, sub, depth + 1);
            if (ps->failed) return;
            if (ps->p >= ps->end || *ps->p != ')') {
                fail_at(ps, at, "unclosed parenthesis");
                return;
            }
            ps->p++;
            emit(ps, rule, E_RULE, (uint32_t)sub);
        } else if (is_name_char(c)) {
            const char *name = ps->p;
            while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
            int ref = rule_by_name(ps, name, (size_t)(ps->p - name));
            if (ref < 0) return;
            if (!ps->rules[ref].first_use) ps->rules[ref].first_use = name;
            emit(ps, rule, E_RULE, (uint32_t)ref);
        } else {
            fail_at(ps, at, "unexpected character '%c'", c);
            return;
        }
        /* postfix operators */
        skip_space(ps);
        if (ps->p >= ps->end) return;
        c = *ps->p;
        if (c == '*' || c == '+' || c == '?') {
            ps->p++;
            repeat(ps, rule, start, c == '+', c == '?' ? 1 : -1);
        } else if (c == '{') {
            ps->p++;
            skip_space(ps);
            int min = parse_count(ps), max = min;
            skip_space(ps);
            if (!ps->failed && ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                skip_space(ps);
                max = ps->p < ps->end && *ps->p == '}' ? -1 : parse_count(ps);
                skip_space(ps);
            }
            if (ps->failed) return;
            if (ps->p >= ps->end || *ps->p != '}') {
                fail_at(ps, at, "expected '}' after a repetition count");
                return;
            }
            ps->p++;
            if (max >= 0 && max < min) {
                fail_at(ps, at, "repetition {%d,%d}: the maximum is below the minimum", min, max);
                return;
            }
            repeat(ps, rule, start, min, max);
        }
    }
}

static void parse_alternates(parser *ps, int rule, int depth) {
    for (;;) {
        parse_sequence(ps, rule, depth);
        emit(ps, rule, E_END, 0);
        if (ps->failed) return;
        skip_space(ps);
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            continue;
        }
        return;
    }
}

static void parse_grammar(parser *ps) {
    skip_space(ps);
    while (!ps->failed && ps->p < ps->end) {
        const char *at = ps->p;
        if (!at_rule_start(ps)) {
            fail_at(ps, at, "expected a rule: name ::= ...");
            return;
        }
        const char *name = ps->p;
        while (is_name_char(*ps->p)) ps->p++;
        int rule = rule_by_name(ps, name, (size_t)(ps->p - name));
        if (rule < 0) return;
        if (ps->rules[rule].defined) {
            fail_at(ps, at, "rule '%s' is defined twice", ps->rules[rule].name);
            return;
        }
        ps->rules[rule].defined = true;
        while (*ps->p != ':') ps->p++;
        ps->p += 3;
        parse_alternates(ps, rule, 0);
        if (!ps->failed && ps->p < ps->end && *ps->p == ')') fail_at(ps, ps->p, "')' without '('");
        skip_space(ps);
    }
}

/* ---- compile: flatten, check ------------------------------------------------ */

static int cmp_range(const void *a, const void *b) {
    const gr_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static bool class_has(const gr_grammar *g, const gr_class *c, uint32_t cp) {
    if (cp < 128) return (c->ascii[cp >> 6] >> (cp & 63)) & 1;
    bool in = false;
    for (uint32_t i = 0; i < c->n && !in; i++) in = cp >= g->ranges[c->first + i].lo && cp <= g->ranges[c->first + i].hi;
    return in != c->negated;
}

/* Whether some code point in [lo, hi] is in the class (for a partial UTF-8
 * character, whose completions form such an interval). */
static bool class_meets(const gr_grammar *g, const gr_class *c, uint32_t lo, uint32_t hi) {
    for (uint32_t i = 0; i < c->n; i++) {
        gr_range r = g->ranges[c->first + i];
        if (!c->negated && r.lo <= hi && r.hi >= lo) return true;
        if (c->negated && r.lo <= lo && r.hi >= hi) return false; /* merged ranges: one covers all or none does */
    }
    return c->negated;
}

static void normalize_classes(gr_grammar *g) {
    for (int i = 0; i < g->n_classes; i++) {
        gr_class *c = &g->classes[i];
        gr_range *r = c->n ? g->ranges + c->first : NULL; /* "." has no ranges, maybe none at all */
        if (c->n > 1) qsort(r, c->n, sizeof *r, cmp_range);
        uint32_t n = 0;
        for (uint32_t j = 0; j < c->n; j++) {
            if (n && r[j].lo <= r[n - 1].hi + 1) {
                if (r[j].hi > r[n - 1].hi) r[n - 1].hi = r[j].hi;
            } else {
                r[n++] = r[j];
            }
        }
        c->n = n;
        c->ascii[0] = c->ascii[1] = 0;
        for (uint32_t j = 0; j < n; j++)
            for (uint32_t cp = r[j].lo; cp <= r[j].hi && cp < 128; cp++) c->ascii[cp >> 6] |= 1ull << (cp & 63);
        if (c->negated) {
            c->ascii[0] = ~c->ascii[0];
            c->ascii[1] = ~c->ascii[1];
        }
    }
}

static bool class_empty(const gr_grammar *g, const gr_class *c) {
    return !c->negated ? c->n == 0 : (c->n == 1 && g->ranges[c->first].lo == 0 && g->ranges[c->first].hi >= 0x10FFFF);
}

/* Fixed points: rules that derive "" (nullable) and some string (productive). */
static void rule_properties(const gr_grammar *g, bool *nullable, bool *productive) {
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < g->n_rules; r++) {
            for (int a = 0; a < g->rule_n_alts[r]; a++) {
                bool all_null = true, all_prod = true;
                for (uint32_t p = g->alts[g->rule_first_alt[r] + a]; g->elems[p].type != E_END; p++) {
                    gr_elem e = g->elems[p];
                    if (e.type == E_CHARS) {
                        all_null = false;
                        if (class_empty(g, &g->classes[e.arg])) all_prod = false;
                    } else {
                        all_null = all_null && nullable[e.arg];
                        all_prod = all_prod && productive[e.arg];
                    }
                }
                if (all_null && !nullable[r]) nullable[r] = changed = true;
                if (all_prod && !productive[r]) productive[r] = changed = true;
            }
        }
    }
}

/* A rule reachable from itself without consuming input would expand
 * forever: find one (iterative DFS over "leftmost" references). */
static int left_recursive_rule(const gr_grammar *g, const bool *nullable) {
    int n = g->n_rules, found = -1;
    unsigned char *color = calloc((size_t)n, 1); /* 0 new, 1 on the path, 2 done */
    int *stack = malloc((size_t)n * 2 * sizeof(int)); /* (rule, next alt*element cursor) pairs */
    uint32_t *cursor = malloc((size_t)n * sizeof(uint32_t));
    int *alt_of = malloc((size_t)n * sizeof(int));
    if (!color || !stack || !cursor || !alt_of) {
        found = -2;
        goto done;
    }
    for (int s = 0; s < n && found < 0; s++) {
        if (color[s]) continue;
        int sp = 0;
        stack[sp++] = s;
        color[s] = 1;
        alt_of[s] = 0;
        cursor[s] = g->rule_n_alts[s] ? g->alts[g->rule_first_alt[s]] : 0;
        while (sp > 0 && found < 0) {
            int r = stack[sp - 1];
            /* next leftmost reference of r, across its alternatives */
            int next = -1;
            while (alt_of[r] < g->rule_n_alts[r] && next < 0) {
                gr_elem e = g->elems[cursor[r]];
                if (e.type == E_RULE) {
                    next = (int)e.arg;
                    cursor[r] = nullable[e.arg] ? cursor[r] + 1 : UINT32_MAX;
                } else {
                    cursor[r] = UINT32_MAX;
                }
                if (cursor[r] == UINT32_MAX || g->elems[cursor[r]].type == E_END) {
                    if (++alt_of[r] < g->rule_n_alts[r]) cursor[r] = g->alts[g->rule_first_alt[r] + alt_of[r]];
                }
            }
            if (next < 0) {
                color[r] = 2;
                sp--;
            } else if (color[next] == 1) {
                found = next;
            } else if (color[next] == 0) {
                color[next] = 1;
                alt_of[next] = 0;
                cursor[next] = g->rule_n_alts[next] ? g->alts[g->rule_first_alt[next]] : 0;
                stack[sp++] = next;
            }
        }
    }
done:
    free(color);
    free(stack);
    free(cursor);
    free(alt_of);
    return found;
}

static void grammar_destroy(gr_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->classes);
    free(g->ranges);
    free(g->alts);
    free(g->rule_first_alt);
    free(g->rule_n_alts);
    if (g->cache) {
        for (int i = 0; i < MASK_CACHE_SLOTS; i++) {
            free(g->cache[i].key);
            free(g->cache[i].bits);
        }
        free(g->cache);
    }
    pthread_mutex_destroy(&g->cache_mutex);
    free(g);
}

static gr_grammar *build(parser *ps) {
    int root = -1;
    for (int r = 0; r < ps->n_rules; r++) {
        if (!ps->rules[r].name) continue;
        if (!ps->rules[r].defined) {
            fail_at(ps, ps->rules[r].first_use, "rule '%s' is used but never defined", ps->rules[r].name);
            return NULL;
        }
        if (!strcmp(ps->rules[r].name, "root")) root = r;
    }
    if (root < 0) {
        fail_at(ps, ps->end, "no rule named 'root'");
        return NULL;
    }
    gr_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->cache_mutex, NULL);
    g->root = root;
    g->n_rules = ps->n_rules;
    g->n_elems = (int)ps->n_elems + 1;
    g->elems = malloc((size_t)g->n_elems * sizeof *g->elems);
    g->alts = malloc((size_t)g->n_elems * sizeof *g->alts);
    g->rule_first_alt = malloc((size_t)g->n_rules * sizeof(int));
    g->rule_n_alts = malloc((size_t)g->n_rules * sizeof(int));
    g->classes = ps->classes;
    g->n_classes = ps->n_classes;
    g->ranges = ps->ranges;
    g->n_ranges = ps->n_ranges;
    ps->classes = NULL;
    ps->ranges = NULL;
    bool *nullable = calloc((size_t)g->n_rules, 1), *productive = calloc((size_t)g->n_rules, 1);
    if (!g->elems || !g->alts || !g->rule_first_alt || !g->rule_n_alts || !nullable || !productive) {
        fail_at(ps, ps->p, "out of memory");
        goto fail;
    }
    int n = 0, n_alts = 0;
    g->elems[n++] = (gr_elem){E_END, 0}; /* position 0 is never a live element */
    for (int r = 0; r < g->n_rules; r++) {
        g->rule_first_alt[r] = n_alts;
        g->rule_n_alts[r] = 0;
        b_rule *br = &ps->rules[r];
        for (int i = 0; i < br->n; i++) {
            if (i == 0 || br->body[i - 1].type == E_END) {
                g->alts[n_alts++] = (uint32_t)n;
                g->rule_n_alts[r]++;
            }
            g->elems[n++] = br->body[i];
        }
    }
    g->n_elems = n;
    normalize_classes(g);
    rule_properties(g, nullable, productive);
    if (!productive[root]) {
        fail_at(ps, ps->end, "the grammar accepts nothing (rule 'root' derives no finite string)");
        goto fail;
    }
    for (int r = 0; r < g->n_rules; r++) {
        if (ps->rules[r].repeated && nullable[r]) {
            fail_at(ps, ps->end, "a repetition repeats something that can match nothing (x*, x+ or x{m,n} with x "
                                 "matching \"\"): make the repeated part non-empty");
            goto fail;
        }
    }
    int lr = left_recursive_rule(g, nullable);
    if (lr == -2) {
        fail_at(ps, ps->p, "out of memory");
        goto fail;
    }
    if (lr >= 0) {
        if (ps->rules[lr].name)
            fail_at(ps, ps->end, "rule '%s' is left-recursive (it can reach itself before matching a character)",
                    ps->rules[lr].name);
        else
            fail_at(ps, ps->end, "a repetition repeats something that can match nothing (x* with x matching \"\"), "
                                 "or a group is left-recursive");
        goto fail;
    }
    free(nullable);
    free(productive);
    return g;
fail:
    free(nullable);
    free(productive);
    grammar_destroy(g);
    return NULL;
}

static gr_grammar *compile_text(const char *text, size_t len, gl_error *err) {
    if (len > GR_MAX_TEXT) {
        gl_error_set(err, "grammar: %zu bytes, more than the limit of %d", len, GR_MAX_TEXT);
        return NULL;
    }
    parser ps = {.text = text, .p = text, .end = text + len, .err = err};
    parse_grammar(&ps);
    gr_grammar *g = ps.failed ? NULL : build(&ps);
    if (!g && !ps.failed) gl_error_set(err, "grammar: out of memory");
    for (int r = 0; r < ps.n_rules; r++) {
        free(ps.rules[r].name);
        free(ps.rules[r].body);
    }
    free(ps.rules);
    free(ps.by_name);
    free(ps.classes);
    free(ps.ranges);
    return g;
}

static bool start_fits(gr_grammar *g, gl_error *err); /* after the matcher */

static size_t grammar_bytes(const gr_grammar *g) {
    return sizeof *g + (size_t)g->n_elems * (sizeof *g->elems + sizeof *g->alts) +
           (size_t)g->n_classes * sizeof *g->classes + (size_t)g->n_ranges * sizeof *g->ranges +
           (size_t)g->n_rules * 2 * sizeof(int);
}

gr_grammar *gr_compile(const char *text, size_t len, gl_error *err) {
    uint64_t h = hash_bytes(text, len, 0xcbf29ce484222325ull);
    pthread_mutex_lock(&compiled_mutex);
    for (int i = 0; i < COMPILE_CACHE_SIZE; i++) {
        compiled_entry *c = &compiled[i];
        if (c->g && c->hash == h && c->len == len && !memcmp(c->text, text, len)) {
            gr_grammar *g = gr_retain(c->g);
            pthread_mutex_unlock(&compiled_mutex);
            return g;
        }
    }
    pthread_mutex_unlock(&compiled_mutex);
    gr_grammar *g = compile_text(text, len, err);
    if (!g) return NULL;
    if (!start_fits(g, err)) {
        gr_release(g);
        return NULL;
    }
    size_t bytes = len + 1 + grammar_bytes(g);
    if (bytes > COMPILE_CACHE_BYTES) return g; /* works, just not cached */
    char *copy = malloc(len + 1);
    if (!copy) return g;
    memcpy(copy, text, len);
    gr_grammar *evicted[COMPILE_CACHE_SIZE];
    int n_evicted = 0;
    pthread_mutex_lock(&compiled_mutex);
    for (;;) { /* the oldest go until the new one fits */
        int free_slot = -1, oldest = -1;
        for (int i = 0; i < COMPILE_CACHE_SIZE; i++) {
            if (!compiled[i].g) free_slot = free_slot < 0 ? i : free_slot;
            else if (oldest < 0 || compiled[i].stamp < compiled[oldest].stamp) oldest = i;
        }
        if (free_slot >= 0 && compiled_bytes + bytes <= COMPILE_CACHE_BYTES) {
            compiled[free_slot] = (compiled_entry){h, copy, len, bytes, ++compiled_stamp, gr_retain(g)};
            compiled_bytes += bytes;
            break;
        }
        compiled_entry *c = &compiled[oldest];
        evicted[n_evicted++] = c->g;
        free(c->text);
        compiled_bytes -= c->bytes;
        memset(c, 0, sizeof *c);
    }
    pthread_mutex_unlock(&compiled_mutex);
    for (int i = 0; i < n_evicted; i++) gr_release(evicted[i]);
    return g;
}

gr_grammar *gr_retain(gr_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void gr_release(gr_grammar *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_destroy(g);
}

/* ---- vocabulary trie ------------------------------------------------------------ */

typedef struct trie_node {
    uint8_t byte;
    uint16_t depth;           /* 1 for children of the root */
    int32_t end;              /* index after this node's subtree (preorder) */
    int32_t tok_first, n_tok; /* tokens spelled exactly by the path, in sorted[] */
} trie_node;

struct gr_vocab {
    int n_vocab;
    int n_words;              /* uint64 words of a mask */
    trie_node *nodes;         /* preorder */
    int n_nodes;
    int32_t *sorted;          /* token ids by bytes */
    int max_len;
    int32_t *eog;             /* end-of-generation tokens */
    int n_eog;
    char **pieces;
    size_t *lens;
};

static int cmp_piece(const void *a, const void *b, void *ctx) {
    const gr_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t n = v->lens[x] < v->lens[y] ? v->lens[x] : v->lens[y];
    int c = memcmp(v->pieces[x], v->pieces[y], n);
    if (c) return c;
    if (v->lens[x] != v->lens[y]) return v->lens[x] < v->lens[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

void gr_vocab_free(gr_vocab *v) {
    if (!v) return;
    if (v->pieces)
        for (int i = 0; i < v->n_vocab; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->nodes);
    free(v->sorted);
    free(v->eog);
    free(v);
}

gr_vocab *gr_vocab_create(int n_vocab, const char *const *pieces, const size_t *piece_lens, const bool *is_eog) {
    gr_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n_vocab = n_vocab;
    v->n_words = (n_vocab + 63) / 64;
    v->pieces = calloc((size_t)n_vocab, sizeof *v->pieces);
    v->lens = calloc((size_t)n_vocab, sizeof *v->lens);
    v->sorted = malloc((size_t)n_vocab * sizeof *v->sorted);
    v->eog = malloc((size_t)n_vocab * sizeof *v->eog);
    if (!v->pieces || !v->lens || !v->sorted || !v->eog) goto fail;
    int n_sorted = 0;
    size_t total = 0;
    for (int t = 0; t < n_vocab; t++) {
        if (is_eog[t]) v->eog[v->n_eog++] = t;
        if (!pieces[t] || piece_lens[t] == 0 || is_eog[t]) continue;
        size_t len = piece_lens[t] > 1024 ? 1024 : piece_lens[t];
        v->pieces[t] = malloc(len);
        if (!v->pieces[t]) goto fail;
        memcpy(v->pieces[t], pieces[t], len);
        v->lens[t] = len;
        v->sorted[n_sorted++] = t;
        total += len;
        if ((int)len > v->max_len) v->max_len = (int)len;
    }
    qsort_r(v->sorted, (size_t)n_sorted, sizeof *v->sorted, cmp_piece, v);
    v->nodes = malloc((total + 1) * sizeof *v->nodes);
    int32_t *path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    if (!v->nodes || !path) {
        free(path);
        goto fail;
    }
    int depth = 0, prev = -1;
    for (int i = 0; i < n_sorted; i++) {
        int32_t t = v->sorted[i];
        const unsigned char *b = (const unsigned char *)v->pieces[t];
        int len = (int)v->lens[t], lcp = 0;
        if (prev >= 0) {
            const unsigned char *pb = (const unsigned char *)v->pieces[prev];
            int pl = (int)v->lens[prev];
            while (lcp < len && lcp < pl && lcp < depth && pb[lcp] == b[lcp]) lcp++;
        }
        while (depth > lcp) v->nodes[path[--depth]].end = v->n_nodes; /* close subtrees left behind */
        for (; depth < len; depth++) {
            int k = v->n_nodes++;
            v->nodes[k] = (trie_node){.byte = b[depth], .depth = (uint16_t)(depth + 1), .tok_first = i, .n_tok = 0};
            path[depth] = k;
        }
        trie_node *leaf = &v->nodes[path[len - 1]];
        if (leaf->n_tok == 0) leaf->tok_first = i;
        leaf->n_tok++;
        prev = t;
    }
    while (depth > 0) v->nodes[path[--depth]].end = v->n_nodes;
    free(path);
    return v;
fail:
    gr_vocab_free(v);
    return NULL;
}

/* ---- matcher ----------------------------------------------------------------------- */

typedef struct gm_node {
    uint32_t pos;             /* element to match next (or continue at) */
    int32_t parent;           /* node below; -1 = bottom */
    uint32_t depth;
} gm_node;

/* A state of the automaton: parse stacks (node ids, -1 = the empty stack,
 * i.e. the text is complete) and the partial UTF-8 character. */
typedef struct gm_state {
    int32_t *stacks;          /* [GR_MAX_STACKS] */
    int n;
    uint32_t acc;             /* bits of the partial character so far */
    int left;                 /* continuation bytes still expected */
    int len;                  /* bytes of the whole character (overlong forms are rejected) */
} gm_state;

struct gr_matcher {
    gr_grammar *g;
    const gr_vocab *v;
    gm_node *nodes;           /* hash-consed: equal stacks are the same node */
    int n_nodes, cap_nodes;
    int32_t *table;           /* (pos, parent) -> node, open addressing, -1 empty */
    int cap_table;            /* power of two, at least twice n_nodes */
    gm_state cur;
    gm_state *walk;           /* [max_len + 1]: state after each trie depth */
    int32_t *work;            /* expansion worklist */
    int cap_work;
    int32_t *remap;           /* compaction scratch */
    uint32_t *key;            /* cache key scratch */
    int cap_key;
    uint64_t *bits;           /* the latest mask */
    bool overflow;            /* a run-time bound was hit */

    /* one mask walk's memo: states interned to ids (equal stacks are equal
     * node ids), and transitions (state, byte) -> state, so the many trie
     * nodes that lead back to a state seen before (inside a string: most
     * of them) cost one lookup */
    int32_t *ms_stacks;       /* flat stacks of the interned states */
    int ms_n_stacks, ms_cap_stacks;
    int *ms_off;              /* per state: first stack in ms_stacks, count, partial character */
    int *ms_cnt;
    uint32_t *ms_acc;
    int *ms_left, *ms_len;
    int ms_n, ms_cap;
    int32_t *ms_index;        /* state hash table -> id, -1 empty */
    int ms_cap_index;
    uint64_t *tr_key;         /* transitions: (state << 8 | byte) + 1, 0 empty */
    int32_t *tr_next;         /* next state, -1 = no stack survives */
    int tr_n, tr_cap;
    int32_t *walk_ids;        /* [max_len + 1] state id after each trie depth */
};

static uint32_t node_hash(uint32_t pos, int32_t parent) {
    uint64_t h = ((uint64_t)pos << 32 | (uint32_t)parent) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

/* Rebuild the table for nodes [0, n_nodes) at capacity cap. */
static bool rehash(gr_matcher *m, int cap) {
    if (cap != m->cap_table) {
        int32_t *t = realloc(m->table, (size_t)cap * sizeof *t);
        if (!t) return false;
        m->table = t;
        m->cap_table = cap;
    }
    memset(m->table, 0xff, (size_t)cap * sizeof *m->table);
    for (int i = 0; i < m->n_nodes; i++) {
        uint32_t k = node_hash(m->nodes[i].pos, m->nodes[i].parent) & (uint32_t)(cap - 1);
        while (m->table[k] >= 0) k = (k + 1) & (uint32_t)(cap - 1);
        m->table[k] = i;
    }
    return true;
}

/* Drop nodes from n on (a finished mask walk) and their table entries. */
static void truncate_nodes(gr_matcher *m, int n) {
    if (n == m->n_nodes) return;
    m->n_nodes = n;
    int cap = m->cap_table;
    while (cap > 1024 && cap / 4 > 2 * n) cap /= 2; /* shrink after a big walk */
    if (!rehash(m, cap)) m->n_nodes = n;
}

static int32_t new_node(gr_matcher *m, uint32_t pos, int32_t parent) {
    uint32_t depth = parent < 0 ? 1 : m->nodes[parent].depth + 1;
    if (depth > GR_MAX_DEPTH) {
        m->overflow = true;
        return -2;
    }
    if (2 * (m->n_nodes + 1) > m->cap_table && !rehash(m, m->cap_table ? 2 * m->cap_table : 1024)) {
        m->overflow = true;
        return -2;
    }
    uint32_t mask = (uint32_t)m->cap_table - 1, k = node_hash(pos, parent) & mask;
    for (; m->table[k] >= 0; k = (k + 1) & mask) {
        const gm_node *n = &m->nodes[m->table[k]];
        if (n->pos == pos && n->parent == parent) return m->table[k];
    }
    if (m->n_nodes == m->cap_nodes) {
        int cap = m->cap_nodes ? 2 * m->cap_nodes : 1024;
        gm_node *n = realloc(m->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            m->overflow = true;
            return -2;
        }
        m->nodes = n;
        m->cap_nodes = cap;
    }
    m->nodes[m->n_nodes] = (gm_node){pos, parent, depth};
    m->table[k] = m->n_nodes;
    return m->n_nodes++;
}

static bool push_work(gr_matcher *m, int *nw, int32_t x) {
    if (*nw == m->cap_work) {
        int cap = m->cap_work ? 2 * m->cap_work : 256;
        int32_t *w = realloc(m->work, (size_t)cap * sizeof *w);
        if (!w) return false;
        m->work = w;
        m->cap_work = cap;
    }
    m->work[(*nw)++] = x;
    return true;
}

static void add_stack(gr_matcher *m, gm_state *s, int32_t x) {
    for (int i = 0; i < s->n; i++)
        if (s->stacks[i] == x) return;
    if (s->n == GR_MAX_STACKS) {
        m->overflow = true;
        return;
    }
    s->stacks[s->n++] = x;
}

/* Add to s every stack whose top is a class (or the empty stack) that the
 * stack starting at node x leads to without consuming input. */
static void expand(gr_matcher *m, gm_state *s, int32_t x) {
    const gr_grammar *g = m->g;
    int nw = 0, steps = 0;
    if (!push_work(m, &nw, x)) {
        m->overflow = true;
        return;
    }
    while (nw > 0) {
        x = m->work[--nw];
        if (x == -2) continue; /* bounded away */
        if (++steps > 100000) {
            m->overflow = true;
            return;
        }
        if (x < 0) {
            add_stack(m, s, -1);
            continue;
        }
        gm_node node = m->nodes[x];
        gr_elem e = g->elems[node.pos];
        if (e.type == E_CHARS) {
            add_stack(m, s, x);
            continue;
        }
        bool ok = true;
        if (e.type == E_END) {
            ok = push_work(m, &nw, node.parent);
        } else {
            int32_t base = g->elems[node.pos + 1].type == E_END ? node.parent : new_node(m, node.pos + 1, node.parent);
            if (base == -2) continue;
            int first = g->rule_first_alt[e.arg];
            for (int a = g->rule_n_alts[e.arg] - 1; a >= 0 && ok; a--) ok = push_work(m, &nw, new_node(m, g->alts[first + a], base));
        }
        if (!ok) {
            m->overflow = true;
            return;
        }
    }
}

/* out = in after byte b; false when no stack survives. */
static bool step_byte(gr_matcher *m, const gm_state *in, uint8_t b, gm_state *out) {
    const gr_grammar *g = m->g;
    out->n = 0;
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t acc;
    int left, len = in->len;
    if (in->left == 0) {
        if (b < 0x80) {
            acc = b;
            left = 0;
        } else if (b >= 0xC2 && b <= 0xDF) {
            acc = b & 0x1Fu;
            left = 1;
        } else if ((b & 0xF0) == 0xE0) {
            acc = b & 0x0Fu;
            left = 2;
        } else if (b >= 0xF0 && b <= 0xF4) {
            acc = b & 0x07u;
            left = 3;
        } else {
            return false;
        }
        len = left + 1;
    } else {
        if ((b & 0xC0) != 0x80) return false;
        acc = in->acc << 6 | (b & 0x3Fu);
        left = in->left - 1;
    }
    out->acc = acc;
    out->left = left;
    out->len = left ? len : 0;
    if (left > 0) { /* keep the stacks whose class some completion can match */
        uint32_t lo = acc << (6 * left), hi = lo | ((1u << (6 * left)) - 1);
        if (hi < min_cp[len]) return false; /* overlong whatever follows */
        if (lo < min_cp[len]) lo = min_cp[len];
        if (lo > 0x10FFFF || (lo >= 0xD800 && hi <= 0xDFFF)) return false;
        for (int i = 0; i < in->n; i++) {
            int32_t x = in->stacks[i];
            if (x >= 0 && class_meets(g, &g->classes[g->elems[m->nodes[x].pos].arg], lo, hi)) out->stacks[out->n++] = x;
        }
        return out->n > 0;
    }
    out->acc = 0;
    if (acc > 0x10FFFF || (acc >= 0xD800 && acc <= 0xDFFF) || (len > 1 && acc < min_cp[len])) return false;
    for (int i = 0; i < in->n; i++) {
        int32_t x = in->stacks[i];
        if (x < 0) continue;
        gm_node node = m->nodes[x];
        if (!class_has(g, &g->classes[g->elems[node.pos].arg], acc)) continue;
        int32_t next = g->elems[node.pos + 1].type == E_END ? node.parent : new_node(m, node.pos + 1, node.parent);
        if (next != -2) expand(m, out, next);
    }
    return out->n > 0;
}

static bool state_alloc(gm_state *s) {
    s->stacks = malloc(GR_MAX_STACKS * sizeof *s->stacks);
    s->n = 0;
    s->acc = 0;
    s->left = 0;
    s->len = 0;
    return s->stacks != NULL;
}

void gr_matcher_free(gr_matcher *m) {
    if (!m) return;
    free(m->cur.stacks);
    if (m->walk)
        for (int d = 0; d <= m->v->max_len + 1; d++) free(m->walk[d].stacks);
    free(m->walk);
    free(m->nodes);
    free(m->table);
    free(m->ms_stacks);
    free(m->ms_off);
    free(m->ms_cnt);
    free(m->ms_acc);
    free(m->ms_left);
    free(m->ms_len);
    free(m->ms_index);
    free(m->tr_key);
    free(m->tr_next);
    free(m->walk_ids);
    free(m->work);
    free(m->remap);
    free(m->key);
    free(m->bits);
    gr_release(m->g);
    free(m);
}

gr_matcher *gr_matcher_create(gr_grammar *g, const gr_vocab *v, gl_error *err) {
    gr_matcher *m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->g = gr_retain(g);
    m->v = v;
    m->walk = calloc((size_t)v->max_len + 2, sizeof *m->walk);
    m->bits = malloc((size_t)v->n_words * sizeof *m->bits);
    m->walk_ids = malloc(((size_t)v->max_len + 2) * sizeof *m->walk_ids);
    if (!m->walk || !m->bits || !m->walk_ids || !state_alloc(&m->cur)) goto oom;
    for (int d = 0; d <= v->max_len + 1; d++)
        if (!state_alloc(&m->walk[d])) goto oom;
    int first = g->rule_first_alt[g->root];
    for (int a = 0; a < g->rule_n_alts[g->root]; a++) expand(m, &m->cur, new_node(m, g->alts[first + a], -1));
    if (m->overflow || m->cur.n == 0) {
        gl_error_set(err, "grammar: its start needs more than %d parse stacks or a stack deeper than %d "
                          "(the run-time bounds); factor alternatives that begin alike", GR_MAX_STACKS, GR_MAX_DEPTH);
        gr_matcher_free(m);
        return NULL;
    }
    return m;
oom:
    gl_error_set(err, "out of memory");
    gr_matcher_free(m);
    return NULL;
}

bool gr_matcher_can_end(const gr_matcher *m) {
    if (m->cur.left) return false;
    for (int i = 0; i < m->cur.n; i++)
        if (m->cur.stacks[i] < 0) return true;
    return false;
}

bool gr_matcher_is_done(const gr_matcher *m) { return m->cur.left == 0 && m->cur.n == 1 && m->cur.stacks[0] < 0; }

/* Keep only the nodes the current stacks use (the arena grows with every
 * token and every mask walk). Parents always precede children. */
static void compact(gr_matcher *m) {
    int32_t *remap = realloc(m->remap, (size_t)m->n_nodes * sizeof *remap);
    if (!remap) return;
    m->remap = remap;
    for (int i = 0; i < m->n_nodes; i++) remap[i] = -1;
    for (int i = 0; i < m->cur.n; i++)
        for (int32_t x = m->cur.stacks[i]; x >= 0 && remap[x] != 0; x = m->nodes[x].parent) remap[x] = 0;
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        if (remap[i] < 0) continue;
        gm_node node = m->nodes[i];
        if (node.parent >= 0) node.parent = remap[node.parent];
        m->nodes[n] = node;
        remap[i] = n++;
    }
    m->n_nodes = n;
    for (int i = 0; i < m->cur.n; i++)
        if (m->cur.stacks[i] >= 0) m->cur.stacks[i] = remap[m->cur.stacks[i]];
    int cap = 1024;
    while (cap < 2 * n) cap *= 2;
    rehash(m, cap);
}

bool gr_matcher_accept_bytes(gr_matcher *m, const char *bytes, size_t n) {
    int mark = m->n_nodes;
    gm_state *a = &m->walk[0], *b = &m->walk[1];
    a->n = m->cur.n;
    a->acc = m->cur.acc;
    a->left = m->cur.left;
    a->len = m->cur.len;
    memcpy(a->stacks, m->cur.stacks, (size_t)m->cur.n * sizeof *a->stacks);
    m->overflow = false;
    for (size_t i = 0; i < n; i++) {
        if (!step_byte(m, a, (uint8_t)bytes[i], b) || m->overflow) {
            truncate_nodes(m, mark);
            return false;
        }
        gm_state t = *a;
        *a = *b;
        *b = t;
    }
    int32_t *keep = m->cur.stacks;
    m->cur = *a;
    *a = (gm_state){.stacks = keep};
    if (m->n_nodes > 4096) compact(m);
    return true;
}

bool gr_matcher_accept_token(gr_matcher *m, int32_t t) {
    const gr_vocab *v = m->v;
    if (t < 0 || t >= v->n_vocab) return false;
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t) return gr_matcher_can_end(m);
    if (v->lens[t] == 0) return false;
    return gr_matcher_accept_bytes(m, v->pieces[t], v->lens[t]);
}

/* The cache key of the current state: partial character, then each stack
 * as its positions from the top down. */
static int state_key(gr_matcher *m) {
    int need = 4;
    for (int i = 0; i < m->cur.n; i++) need += 1 + (m->cur.stacks[i] >= 0 ? (int)m->nodes[m->cur.stacks[i]].depth : 0);
    if (need > m->cap_key) {
        uint32_t *k = realloc(m->key, (size_t)need * sizeof *k);
        if (!k) return -1;
        m->key = k;
        m->cap_key = need;
    }
    int n = 0;
    m->key[n++] = m->cur.acc;
    m->key[n++] = (uint32_t)m->cur.left;
    m->key[n++] = (uint32_t)m->cur.len;
    m->key[n++] = (uint32_t)m->cur.n;
    for (int i = 0; i < m->cur.n; i++) {
        for (int32_t x = m->cur.stacks[i]; x >= 0; x = m->nodes[x].parent) m->key[n++] = m->nodes[x].pos;
        m->key[n++] = UINT32_MAX;
    }
    return n;
}

static uint64_t state_hash(const gm_state *st) {
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)st->acc << 8 | (uint64_t)st->left << 4 | (uint64_t)st->len);
    for (int i = 0; i < st->n; i++) h = (h ^ (uint32_t)st->stacks[i]) * 0x100000001b3ull;
    return h ^ (uint64_t)st->n;
}

static bool state_equal(const gr_matcher *m, int id, const gm_state *st) {
    return m->ms_cnt[id] == st->n && m->ms_acc[id] == st->acc && m->ms_left[id] == st->left && m->ms_len[id] == st->len &&
           !memcmp(m->ms_stacks + m->ms_off[id], st->stacks, (size_t)st->n * sizeof *st->stacks);
}

static bool memo_grow_index(gr_matcher *m) {
    int cap = m->ms_cap_index ? 2 * m->ms_cap_index : 256;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return false;
    memset(t, 0xff, (size_t)cap * sizeof *t);
    for (int id = 0; id < m->ms_n; id++) {
        gm_state st = {m->ms_stacks + m->ms_off[id], m->ms_cnt[id], m->ms_acc[id], m->ms_left[id], m->ms_len[id]};
        uint32_t k = (uint32_t)state_hash(&st) & (uint32_t)(cap - 1);
        while (t[k] >= 0) k = (k + 1) & (uint32_t)(cap - 1);
        t[k] = id;
    }
    free(m->ms_index);
    m->ms_index = t;
    m->ms_cap_index = cap;
    return true;
}

/* The id of state st (sorted in place), adding it; -1 out of memory. */
static int memo_intern(gr_matcher *m, gm_state *st) {
    for (int i = 1; i < st->n; i++) /* canonical order */
        for (int j = i; j > 0 && st->stacks[j] < st->stacks[j - 1]; j--) {
            int32_t t = st->stacks[j];
            st->stacks[j] = st->stacks[j - 1];
            st->stacks[j - 1] = t;
        }
    if (2 * (m->ms_n + 1) > m->ms_cap_index && !memo_grow_index(m)) return -1;
    uint32_t mask = (uint32_t)m->ms_cap_index - 1, k = (uint32_t)state_hash(st) & mask;
    for (; m->ms_index[k] >= 0; k = (k + 1) & mask)
        if (state_equal(m, m->ms_index[k], st)) return m->ms_index[k];
    if (m->ms_n == m->ms_cap) {
        int cap = m->ms_cap ? 2 * m->ms_cap : 64;
        int *off = realloc(m->ms_off, (size_t)cap * sizeof *off);
        if (off) m->ms_off = off;
        int *cnt = realloc(m->ms_cnt, (size_t)cap * sizeof *cnt);
        if (cnt) m->ms_cnt = cnt;
        uint32_t *acc = realloc(m->ms_acc, (size_t)cap * sizeof *acc);
        if (acc) m->ms_acc = acc;
        int *left = realloc(m->ms_left, (size_t)cap * sizeof *left);
        if (left) m->ms_left = left;
        int *len = realloc(m->ms_len, (size_t)cap * sizeof *len);
        if (len) m->ms_len = len;
        if (!off || !cnt || !acc || !left || !len) return -1;
        m->ms_cap = cap;
    }
    if (m->ms_n_stacks + st->n > m->ms_cap_stacks) {
        int cap = m->ms_cap_stacks ? m->ms_cap_stacks : 256;
        while (cap < m->ms_n_stacks + st->n) cap *= 2;
        int32_t *sb = realloc(m->ms_stacks, (size_t)cap * sizeof *sb);
        if (!sb) return -1;
        m->ms_stacks = sb;
        m->ms_cap_stacks = cap;
    }
    int id = m->ms_n++;
    m->ms_off[id] = m->ms_n_stacks;
    m->ms_cnt[id] = st->n;
    m->ms_acc[id] = st->acc;
    m->ms_left[id] = st->left;
    m->ms_len[id] = st->len;
    memcpy(m->ms_stacks + m->ms_n_stacks, st->stacks, (size_t)st->n * sizeof *st->stacks);
    m->ms_n_stacks += st->n;
    m->ms_index[k] = id;
    return id;
}

/* The state after byte b from state id: memoized; -1 dead, -2 out of memory. */
static int memo_step(gr_matcher *m, int id, uint8_t b) {
    uint64_t key = ((uint64_t)id << 8 | b) + 1;
    if (2 * (m->tr_n + 1) > m->tr_cap) {
        int cap = m->tr_cap ? 2 * m->tr_cap : 1024;
        uint64_t *keys = calloc((size_t)cap, sizeof *keys);
        int32_t *next = malloc((size_t)cap * sizeof *next);
        if (!keys || !next) {
            free(keys);
            free(next);
            return -2;
        }
        for (int i = 0; i < m->tr_cap; i++) {
            if (!m->tr_key[i]) continue;
            uint32_t k = (uint32_t)(m->tr_key[i] * 0x9E3779B97F4A7C15ull >> 32) & (uint32_t)(cap - 1);
            while (keys[k]) k = (k + 1) & (uint32_t)(cap - 1);
            keys[k] = m->tr_key[i];
            next[k] = m->tr_next[i];
        }
        free(m->tr_key);
        free(m->tr_next);
        m->tr_key = keys;
        m->tr_next = next;
        m->tr_cap = cap;
    }
    uint32_t mask = (uint32_t)m->tr_cap - 1, k = (uint32_t)(key * 0x9E3779B97F4A7C15ull >> 32) & mask;
    for (; m->tr_key[k]; k = (k + 1) & mask)
        if (m->tr_key[k] == key) return m->tr_next[k];
    gm_state *in = &m->walk[0], *out = &m->walk[1];
    in->n = m->ms_cnt[id];
    in->acc = m->ms_acc[id];
    in->left = m->ms_left[id];
    in->len = m->ms_len[id];
    memcpy(in->stacks, m->ms_stacks + m->ms_off[id], (size_t)in->n * sizeof *in->stacks);
    m->overflow = false;
    int next = step_byte(m, in, b, out) && !m->overflow ? memo_intern(m, out) : -1;
    if (next == -1 && m->overflow) m->overflow = false;
    m->tr_key[k] = key;
    m->tr_next[k] = next;
    m->tr_n++;
    return next;
}

static void walk_trie(gr_matcher *m) {
    const gr_vocab *v = m->v;
    memset(m->bits, 0, (size_t)v->n_words * sizeof *m->bits);
    int mark = m->n_nodes;
    m->ms_n = m->ms_n_stacks = m->tr_n = 0;
    if (m->ms_index) memset(m->ms_index, 0xff, (size_t)m->ms_cap_index * sizeof *m->ms_index);
    if (m->tr_key) memset(m->tr_key, 0, (size_t)m->tr_cap * sizeof *m->tr_key);
    gm_state *w = m->walk;
    w[0].n = m->cur.n;
    w[0].acc = m->cur.acc;
    w[0].left = m->cur.left;
    w[0].len = m->cur.len;
    memcpy(w[0].stacks, m->cur.stacks, (size_t)m->cur.n * sizeof *w[0].stacks);
    int32_t *ids = m->walk_ids;
    ids[0] = memo_intern(m, &w[0]);
    if (ids[0] < 0) goto done;
    for (int i = 0; i < v->n_nodes;) {
        const trie_node *t = &v->nodes[i];
        int next = memo_step(m, ids[t->depth - 1], t->byte);
        if (next == -2) break; /* out of memory: a smaller mask, never a wrong token */
        if (next < 0) {
            i = t->end;
            continue;
        }
        ids[t->depth] = next;
        for (int k = 0; k < t->n_tok; k++) {
            int32_t tok = v->sorted[t->tok_first + k];
            m->bits[tok >> 6] |= 1ull << (tok & 63);
        }
        i++;
    }
done:
    m->overflow = false;
    truncate_nodes(m, mark);
}

/* Fill m->bits for the current state, from the grammar's cache when it has it. */
static void compute_mask(gr_matcher *m) {
    gr_grammar *g = m->g;
    const gr_vocab *v = m->v;
    int key_len = state_key(m);
    if (key_len < 0) {
        walk_trie(m);
        return;
    }
    uint64_t h = hash_bytes(m->key, (size_t)key_len * sizeof *m->key, 0xcbf29ce484222325ull);
    size_t mask_bytes = (size_t)v->n_words * sizeof *m->bits;
    pthread_mutex_lock(&g->cache_mutex);
    if (g->cache_vocab != v && g->cache) { /* another model's masks */
        for (int i = 0; i < MASK_CACHE_SLOTS; i++) {
            free(g->cache[i].key);
            free(g->cache[i].bits);
        }
        memset(g->cache, 0, MASK_CACHE_SLOTS * sizeof *g->cache);
        g->cache_used = 0;
    }
    g->cache_vocab = v;
    if (!g->cache) g->cache = calloc(MASK_CACHE_SLOTS, sizeof *g->cache);
    if (g->cache) {
        for (uint64_t i = h;; i++) {
            mask_entry *e = &g->cache[i & (MASK_CACHE_SLOTS - 1)];
            if (!e->key) break;
            if (e->hash == h && e->key_len == key_len && !memcmp(e->key, m->key, (size_t)key_len * sizeof *m->key)) {
                memcpy(m->bits, e->bits, mask_bytes);
                pthread_mutex_unlock(&g->cache_mutex);
                return;
            }
        }
    }
    pthread_mutex_unlock(&g->cache_mutex);
    walk_trie(m);
    pthread_mutex_lock(&g->cache_mutex);
    if (g->cache && g->cache_vocab == v) {
        if (g->cache_used >= MASK_CACHE_SLOTS * 3 / 4) {
            for (int i = 0; i < MASK_CACHE_SLOTS; i++) {
                free(g->cache[i].key);
                free(g->cache[i].bits);
            }
            memset(g->cache, 0, MASK_CACHE_SLOTS * sizeof *g->cache);
            g->cache_used = 0;
        }
        uint32_t *key = malloc((size_t)key_len * sizeof *key);
        uint64_t *bits = malloc(mask_bytes);
        if (key && bits) {
            memcpy(key, m->key, (size_t)key_len * sizeof *key);
            memcpy(bits, m->bits, mask_bytes);
            uint64_t i = h;
            while (g->cache[i & (MASK_CACHE_SLOTS - 1)].key) i++;
            g->cache[i & (MASK_CACHE_SLOTS - 1)] = (mask_entry){h, key, key_len, bits};
            g->cache_used++;
        } else {
            free(key);
            free(bits);
        }
    }
    pthread_mutex_unlock(&g->cache_mutex);
}

int gr_matcher_mask(gr_matcher *m, float *logits) {
    const gr_vocab *v = m->v;
    compute_mask(m);
    if (gr_matcher_can_end(m))
        for (int i = 0; i < v->n_eog; i++) m->bits[v->eog[i] >> 6] |= 1ull << (v->eog[i] & 63);
    int allowed = 0;
    for (int w = 0; w < v->n_words; w++) {
        uint64_t bits = m->bits[w];
        int base = w * 64, n = v->n_vocab - base < 64 ? v->n_vocab - base : 64;
        if (n == 64 && bits == ~0ull) {
            allowed += 64;
            continue;
        }
        for (int j = 0; j < n; j++) {
            if ((bits >> j) & 1) allowed++;
            else logits[base + j] = -INFINITY;
        }
    }
    return allowed;
}

bool gr_matcher_allows(gr_matcher *m, int32_t t) {
    if (t < 0 || t >= m->v->n_vocab) return false;
    return (m->bits[t >> 6] >> (t & 63)) & 1;
}

/* The start state is the same for every vocabulary, so a grammar whose
 * start is over the run-time bounds is refused here, before it is cached. */
static bool start_fits(gr_grammar *g, gl_error *err) {
    gr_vocab none = {.n_words = 1};
    gr_matcher *m = gr_matcher_create(g, &none, err);
    if (!m) return false;
    gr_matcher_free(m);
    return true;
}

gl_grammar *gl_grammar_from_gbnf(const char *text, size_t len, gl_error *err) { return gr_compile(text, len, err); }

void gl_grammar_free(gl_grammar *g) { gr_release(g); }
