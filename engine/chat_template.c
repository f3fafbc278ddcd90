/* chat_template.c -- a bounded interpreter for the Jinja subset of chat templates.
 *
 * Three stages: lex the template into tokens (text runs and the tokens
 * inside {{ }} / {% %}), parse them into a tree of statements and
 * expressions, then walk the tree once per render. Parse trees live in an
 * arena owned by the template; everything a render creates (values,
 * intermediate strings, variables) lives in an arena dropped when it ends.
 * Errors at any depth longjmp back to the entry point: with every
 * allocation in an arena there is nothing to unwind, and the evaluator stays
 * free of error plumbing. */
#include "genloop_chat.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "gl_error.h"

/* Limits that keep a hostile template from crashing or hanging the server. */
#define MAX_SOURCE_BYTES   (1u << 20)   /* template text */
#define MAX_PARSE_DEPTH    100          /* nested blocks + nested expressions */
#define MAX_EVAL_DEPTH     400          /* recursion while evaluating */
#define MAX_STEPS          2000000      /* statements + expressions evaluated per render */
#define MAX_RENDER_MEMORY  (64u << 20)  /* values created during one render */
#define MAX_OUTPUT_BYTES   (16u << 20)  /* rendered prompt */
#define MAX_RANGE          1000000      /* elements of range() */

/* ---- failing and arenas ------------------------------------------------------ */

typedef struct failer {
    jmp_buf jb;
    gl_error *err;
} failer;

static _Noreturn void die(failer *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void die(failer *f, const char *fmt, ...) {
    if (f->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->err->message, sizeof f->err->message, fmt, ap);
        va_end(ap);
    }
    longjmp(f->jb, 1);
}

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
    alignas(max_align_t) unsigned char data[];
} chunk;

typedef struct arena {
    chunk *head;
    size_t total, cap;        /* bytes malloc'd so far, and the most allowed */
    failer *f;                /* where running out goes */
} arena;

static void *arena_alloc(arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->size - a->head->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (size > a->cap || a->total > a->cap - size) die(a->f, "template needs more than %zu MiB of memory", a->cap >> 20);
        chunk *c = malloc(sizeof *c + size);
        if (!c) die(a->f, "out of memory");
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->total += size;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

static void arena_free(arena *a) {
    for (chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

/* Grow an arena array to hold at least need elements. */
static void *arena_grow(arena *a, void *old, size_t *cap, size_t n, size_t need, size_t elem) {
    if (need <= *cap) return old;
    size_t new_cap = *cap ? *cap * 2 : 8;
    while (new_cap < need) new_cap *= 2;
    void *p = arena_alloc(a, new_cap * elem);
    if (n) memcpy(p, old, n * elem);
    *cap = new_cap;
    return p;
}

typedef struct str {
    const char *p;
    size_t n;
} str;

static str str_of(const char *s) { return (str){s ? s : "", s ? strlen(s) : 0}; }
static bool str_eq(str a, const char *b) { return a.n == strlen(b) && memcmp(a.p, b, a.n) == 0; }
static bool str_same(str a, str b) { return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); }

/* A growable byte buffer in an arena, for building strings. */
typedef struct sbuf {
    arena *a;
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (n == 0) return;
    b->p = arena_grow(b->a, b->p, &b->cap, b->n, b->n + n, 1);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static str sb_str(sbuf *b) { return (str){b->p ? b->p : "", b->n}; }

/* ---- lexer -------------------------------------------------------------------- */

typedef enum tok_kind {
    T_TEXT,                   /* literal template text (whitespace control applied) */
    T_OUT,                    /* {{ */
    T_STMT,                   /* {% */
    T_END,                    /* }} or %} */
    T_NAME, T_STR, T_INT,
    T_OP,                     /* punctuation, 1 or 2 chars */
    T_EOF,
} tok_kind;

typedef struct token {
    tok_kind kind;
    str s;                    /* TEXT, NAME, STR (unescaped), OP */
    int64_t ival;             /* INT */
    int line;
} token;

typedef struct lexer {
    failer *f;
    arena *a;
    const char *src;
    size_t len, pos;
    int line;
    token *toks;
    size_t n, cap;
} lexer;

static void emit(lexer *L, tok_kind kind, str s, int64_t ival) {
    L->toks = arena_grow(L->a, L->toks, &L->cap, L->n, L->n + 1, sizeof *L->toks);
    L->toks[L->n++] = (token){kind, s, ival, L->line};
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static int count_lines(const char *p, size_t n) {
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += p[i] == '\n';
    return lines;
}

/* Tokens inside a tag, up to and including its closer. Returns whether the
 * closer carried '-' (strip the whitespace that follows). */
static bool lex_tag(lexer *L, char closer) {
    const char *s = L->src;
    for (;;) {
        while (L->pos < L->len && is_space(s[L->pos])) L->line += s[L->pos++] == '\n';
        if (L->pos >= L->len) die(L->f, "line %d: unterminated tag", L->line);
        size_t p = L->pos;
        char c = s[p];
        /* The closer: "}}" / "%}", optionally preceded by '-'. */
        if (c == '-' && p + 2 < L->len + 0 && s[p + 1] == closer && s[p + 2] == '}') {
            L->pos = p + 3;
            emit(L, T_END, (str){0}, 0);
            return true;
        }
        if (c == closer && p + 1 < L->len && s[p + 1] == '}') {
            L->pos = p + 2;
            emit(L, T_END, (str){0}, 0);
            return false;
        }
        if (is_ident_start(c)) {
            while (L->pos < L->len && (is_ident_start(s[L->pos]) || is_digit(s[L->pos]))) L->pos++;
            emit(L, T_NAME, (str){s + p, L->pos - p}, 0);
        } else if (is_digit(c)) {
            int64_t v = 0;
            while (L->pos < L->len && is_digit(s[L->pos])) {
                int d = s[L->pos++] - '0';
                if (v > (INT64_MAX - d) / 10) die(L->f, "line %d: integer literal too large", L->line);
                v = v * 10 + d;
            }
            if (L->pos < L->len && s[L->pos] == '.' && L->pos + 1 < L->len && is_digit(s[L->pos + 1]))
                die(L->f, "line %d: floating-point numbers are not supported", L->line);
            emit(L, T_INT, (str){s + p, L->pos - p}, v);
        } else if (c == '\'' || c == '"') {
            /* Python string literal: find its end, then unescape into a
             * buffer of that size (the result is never longer). */
            size_t end = p + 1;
            while (end < L->len && s[end] != c) end += s[end] == '\\' ? 2 : 1;
            if (end >= L->len) die(L->f, "line %d: unterminated string", L->line);
            char *out = arena_alloc(L->a, end - p);
            size_t n = 0;
            L->pos++;
            for (;;) {
                if (L->pos >= L->len) die(L->f, "line %d: unterminated string", L->line);
                char ch = s[L->pos++];
                if (ch == c) break;
                if (ch == '\n') L->line++;
                if (ch == '\\' && L->pos < L->len) {
                    char e = s[L->pos++];
                    switch (e) {
                    case 'n': out[n++] = '\n'; break;
                    case 't': out[n++] = '\t'; break;
                    case 'r': out[n++] = '\r'; break;
                    case '\\': case '\'': case '"': out[n++] = e; break;
                    case '\n': L->line++; break; /* line continuation */
                    default: out[n++] = '\\'; out[n++] = e; break; /* Python keeps unknown escapes */
                    }
                } else {
                    out[n++] = ch;
                }
            }
            emit(L, T_STR, (str){out, n}, 0);
        } else {
            static const char *const two[] = {"==", "!=", "<=", ">=", "//", "**", NULL};
            size_t n = 1;
            for (int i = 0; two[i]; i++)
                if (p + 1 < L->len && s[p] == two[i][0] && s[p + 1] == two[i][1]) n = 2;
            if (n == 1 && !strchr("()[]{}.,:|~+-*/%<>=", c))
                die(L->f, "line %d: unexpected character '%c' in tag", L->line, c >= 32 && c < 127 ? c : '?');
            L->pos += n;
            emit(L, T_OP, (str){s + p, n}, 0);
        }
    }
}

/* Whole-template lexing, with the whitespace rules Hugging Face renders
 * chat templates with: trim_blocks (drop the newline after a block tag) and
 * lstrip_blocks (drop spaces before a block tag at the start of a line), plus
 * explicit '-' / '+' control on any tag. */
static void lex(lexer *L) {
    const char *s = L->src;
    bool strip_next = false, trim_newline = false;
    while (L->pos < L->len) {
        size_t start = L->pos, tag = start;
        while (tag < L->len && !(s[tag] == '{' && tag + 1 < L->len && strchr("{%#", s[tag + 1]) && s[tag + 1])) tag++;
        size_t text_start = start, text_end = tag;
        if (strip_next) {
            while (text_start < text_end && is_space(s[text_start])) text_start++;
        } else if (trim_newline) {
            if (text_start < text_end && s[text_start] == '\n') text_start++;
            else if (text_start + 1 < text_end && s[text_start] == '\r' && s[text_start + 1] == '\n') text_start += 2;
        }
        char kind = tag < L->len ? s[tag + 1] : 0;
        char sign = tag + 2 < L->len ? s[tag + 2] : 0;
        if (kind && sign == '-') {
            while (text_end > text_start && is_space(s[text_end - 1])) text_end--;
        } else if ((kind == '%' || kind == '#') && sign != '+') {
            size_t b = text_end;
            while (b > text_start && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
            if (b == 0 || s[b - 1] == '\n') text_end = b;
        }
        if (text_end > text_start) emit(L, T_TEXT, (str){s + text_start, text_end - text_start}, 0);
        L->line += count_lines(s + start, tag - start);
        if (!kind) break;
        L->pos = tag + 2 + (sign == '-' || sign == '+');
        if (kind == '#') {
            size_t e = L->pos;
            while (e + 1 < L->len && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= L->len) die(L->f, "line %d: unterminated comment", L->line);
            strip_next = e > L->pos && s[e - 1] == '-';
            L->line += count_lines(s + L->pos, e - L->pos);
            L->pos = e + 2;
            trim_newline = true;
            continue;
        }
        emit(L, kind == '{' ? T_OUT : T_STMT, (str){0}, 0);
        strip_next = lex_tag(L, kind == '{' ? '}' : '%');
        trim_newline = kind == '%';
    }
    emit(L, T_EOF, (str){0}, 0);
}

/* ---- syntax tree -------------------------------------------------------------- */

/* V_FLOAT comes only from JSON data (tool arguments): printed, compared, tested, never computed with. */
typedef enum vtype { V_UNDEF, V_NONE, V_BOOL, V_INT, V_STR, V_LIST, V_DICT, V_FLOAT } vtype;

typedef struct vlist vlist;
typedef struct vdict vdict;
typedef struct value {
    vtype t;
    union {
        bool b;
        int64_t i;
        double d;             /* FLOAT */
        str s;                /* STR; UNDEF: the missing name, for messages */
        vlist *list;
        vdict *dict;
    };
} value;
struct vlist { value *items; size_t n, cap; };
struct vdict { str *keys; value *vals; size_t n, cap; };

typedef enum expr_kind {
    E_LIT, E_NAME, E_ATTR, E_INDEX, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NEG, E_NOT, E_AND, E_OR, E_BIN, E_COND, E_LIST, E_DICT,
} expr_kind;

typedef struct expr expr;
struct expr {
    expr_kind kind;
    int line;
    value lit;                /* LIT */
    str name;                 /* NAME, ATTR, FILTER, TEST name; BIN operator */
    expr *a, *b, *c;          /* operands: object / left / cond, ... */
    expr **args;              /* CALL, FILTER, TEST positional args; LIST items; DICT keys */
    int n_args;
    str *kw_names;            /* CALL, FILTER keyword args */
    expr **kw_vals;           /* ...; DICT values (n_args of them) */
    int n_kw;
    bool negate;              /* TEST: "is not"; BIN "in": "not in" */
};

typedef enum stmt_kind { S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SET_BLOCK, S_BLOCK } stmt_kind;

typedef struct stmt stmt;
typedef struct body { stmt **items; int n; } body;
struct stmt {
    stmt_kind kind;
    int line;
    str text;                 /* TEXT */
    expr *e;                  /* OUT, SET value, FOR iterable */
    expr **conds;             /* IF: n_branches conditions (NULL = else) */
    body *branches;
    int n_branches;
    str target, target2;      /* FOR loop variables (target2.p NULL when one);
                                 SET: name, and attribute for ns.attr */
    expr *filter;             /* FOR ... if filter */
    body b, else_b;           /* FOR, SET_BLOCK, BLOCK bodies */
};

/* ---- parser ------------------------------------------------------------------- */

typedef struct parser {
    failer *f;
    arena *a;
    token *toks;
    size_t pos;
    int depth;
} parser;

static token *peek(parser *P) { return &P->toks[P->pos]; }
static token *next(parser *P) { token *t = &P->toks[P->pos]; if (t->kind != T_EOF) P->pos++; return t; }
static bool is_op(token *t, const char *op) { return t->kind == T_OP && str_eq(t->s, op); }
static bool is_name(token *t, const char *name) { return t->kind == T_NAME && str_eq(t->s, name); }

static const char *tok_desc(token *t) {
    switch (t->kind) {
    case T_TEXT: return "text";
    case T_OUT: return "'{{'";
    case T_STMT: return "'{%'";
    case T_END: return "end of tag";
    case T_NAME: return "a name";
    case T_STR: return "a string";
    case T_INT: return "a number";
    case T_OP: return "an operator";
    default: return "end of template";
    }
}

static void expect_op(parser *P, const char *op) {
    token *t = next(P);
    if (!is_op(t, op)) die(P->f, "line %d: expected '%s', found %s", t->line, op, tok_desc(t));
}
static str expect_name(parser *P) {
    token *t = next(P);
    if (t->kind != T_NAME) die(P->f, "line %d: expected a name, found %s", t->line, tok_desc(t));
    return t->s;
}
static void expect_end(parser *P) {
    token *t = next(P);
    if (t->kind != T_END) die(P->f, "line %d: expected end of tag, found %s", t->line, tok_desc(t));
}

static void enter(parser *P) {
    if (++P->depth > MAX_PARSE_DEPTH) die(P->f, "line %d: template nested too deeply", peek(P)->line);
}

static expr *new_expr(parser *P, expr_kind kind) {
    expr *e = arena_alloc(P->a, sizeof *e);
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->line = peek(P)->line;
    return e;
}

static expr *parse_expr(parser *P);
static expr *parse_or(parser *P);
static expr *parse_unary(parser *P, bool with_filters);

/* Arguments of a call, after '(' : positional, then name=value. */
static void parse_args(parser *P, expr *e) {
    size_t cap = 0, kcap = 0, kvcap = 0;
    while (!is_op(peek(P), ")")) {
        token *t = peek(P);
        if (t->kind == T_NAME && is_op(&P->toks[P->pos + 1], "=")) {
            next(P);
            next(P);
            e->kw_names = arena_grow(P->a, e->kw_names, &kcap, (size_t)e->n_kw, (size_t)e->n_kw + 1, sizeof *e->kw_names);
            e->kw_vals = arena_grow(P->a, e->kw_vals, &kvcap, (size_t)e->n_kw, (size_t)e->n_kw + 1, sizeof *e->kw_vals);
            e->kw_names[e->n_kw] = t->s;
            e->kw_vals[e->n_kw++] = parse_expr(P);
        } else {
            e->args = arena_grow(P->a, e->args, &cap, (size_t)e->n_args, (size_t)e->n_args + 1, sizeof *e->args);
            e->args[e->n_args++] = parse_expr(P);
        }
        if (!is_op(peek(P), ",")) break;
        next(P);
    }
    expect_op(P, ")");
}

static expr *parse_primary(parser *P) {
    enter(P);
    token *t = next(P);
    expr *e;
    if (t->kind == T_STR) {
        e = new_expr(P, E_LIT);
        e->lit = (value){.t = V_STR, .s = t->s};
        /* Adjacent literals concatenate, as in Python. */
        if (peek(P)->kind == T_STR) {
            sbuf b = {.a = P->a};
            sb_put(&b, t->s.p, t->s.n);
            while (peek(P)->kind == T_STR) { token *u = next(P); sb_put(&b, u->s.p, u->s.n); }
            e->lit.s = sb_str(&b);
        }
    } else if (t->kind == T_INT) {
        e = new_expr(P, E_LIT);
        e->lit = (value){.t = V_INT, .i = t->ival};
    } else if (t->kind == T_NAME) {
        e = new_expr(P, E_LIT);
        if (str_eq(t->s, "true") || str_eq(t->s, "True")) e->lit = (value){.t = V_BOOL, .b = true};
        else if (str_eq(t->s, "false") || str_eq(t->s, "False")) e->lit = (value){.t = V_BOOL, .b = false};
        else if (str_eq(t->s, "none") || str_eq(t->s, "None")) e->lit = (value){.t = V_NONE};
        else { e->kind = E_NAME; e->name = t->s; }
    } else if (is_op(t, "(")) {
        e = parse_expr(P);
        if (is_op(peek(P), ",")) {   /* a tuple: treated as a list */
            expr *l = new_expr(P, E_LIST);
            size_t cap = 0;
            l->args = arena_grow(P->a, l->args, &cap, 0, 1, sizeof *l->args);
            l->args[l->n_args++] = e;
            while (is_op(peek(P), ",")) {
                next(P);
                if (is_op(peek(P), ")")) break;
                l->args = arena_grow(P->a, l->args, &cap, (size_t)l->n_args, (size_t)l->n_args + 1, sizeof *l->args);
                l->args[l->n_args++] = parse_expr(P);
            }
            e = l;
        }
        expect_op(P, ")");
    } else if (is_op(t, "[")) {
        e = new_expr(P, E_LIST);
        size_t cap = 0;
        while (!is_op(peek(P), "]")) {
            e->args = arena_grow(P->a, e->args, &cap, (size_t)e->n_args, (size_t)e->n_args + 1, sizeof *e->args);
            e->args[e->n_args++] = parse_expr(P);
            if (!is_op(peek(P), ",")) break;
            next(P);
        }
        expect_op(P, "]");
    } else if (is_op(t, "{")) {
        e = new_expr(P, E_DICT);
        size_t cap = 0, vcap = 0;
        while (!is_op(peek(P), "}")) {
            e->args = arena_grow(P->a, e->args, &cap, (size_t)e->n_args, (size_t)e->n_args + 1, sizeof *e->args);
            e->kw_vals = arena_grow(P->a, e->kw_vals, &vcap, (size_t)e->n_args, (size_t)e->n_args + 1, sizeof *e->kw_vals);
            e->args[e->n_args] = parse_expr(P);
            expect_op(P, ":");
            e->kw_vals[e->n_args++] = parse_expr(P);
            if (!is_op(peek(P), ",")) break;
            next(P);
        }
        expect_op(P, "}");
    } else {
        die(P->f, "line %d: expected an expression, found %s", t->line, tok_desc(t));
    }
    P->depth--;
    return e;
}

/* x.attr, x[i], x[a:b], x(args) */
static expr *parse_postfix(parser *P, expr *e) {
    for (;;) {
        token *t = peek(P);
        if (is_op(t, ".")) {
            next(P);
            expr *a = new_expr(P, E_ATTR);
            a->a = e;
            a->name = expect_name(P);
            e = a;
        } else if (is_op(t, "[")) {
            next(P);
            enter(P);
            expr *lo = NULL, *hi = NULL, *step = NULL;
            bool slice = false;
            if (!is_op(peek(P), ":")) lo = parse_expr(P);
            if (is_op(peek(P), ":")) {
                slice = true;
                next(P);
                if (!is_op(peek(P), "]") && !is_op(peek(P), ":")) hi = parse_expr(P);
                if (is_op(peek(P), ":")) {
                    next(P);
                    if (!is_op(peek(P), "]")) step = parse_expr(P);
                }
            }
            expect_op(P, "]");
            P->depth--;
            expr *x = new_expr(P, slice ? E_SLICE : E_INDEX);
            x->a = e;
            x->b = lo;
            if (slice) { x->args = arena_alloc(P->a, 2 * sizeof *x->args); x->args[0] = hi; x->args[1] = step; }
            e = x;
        } else if (is_op(t, "(")) {
            next(P);
            enter(P);
            expr *c = new_expr(P, E_CALL);
            c->a = e;
            parse_args(P, c);
            P->depth--;
            e = c;
        } else {
            return e;
        }
    }
}

/* x | filter(args), x is [not] test(args) */
static expr *parse_filters(parser *P, expr *e) {
    for (;;) {
        token *t = peek(P);
        if (is_op(t, "|")) {
            next(P);
            expr *f = new_expr(P, E_FILTER);
            f->a = e;
            f->name = expect_name(P);
            if (is_op(peek(P), "(")) { next(P); enter(P); parse_args(P, f); P->depth--; }
            e = f;
        } else if (is_name(t, "is")) {
            next(P);
            expr *x = new_expr(P, E_TEST);
            x->a = e;
            if (is_name(peek(P), "not")) { next(P); x->negate = true; }
            x->name = expect_name(P);
            token *u = peek(P);
            if (is_op(u, "(")) {
                next(P);
                enter(P);
                parse_args(P, x);
                P->depth--;
            } else if ((u->kind == T_NAME || u->kind == T_STR || u->kind == T_INT || is_op(u, "[") || is_op(u, "{")) &&
                       !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and") && !is_name(u, "if") &&
                       !is_name(u, "in") && !is_name(u, "is") && !is_name(u, "not")) {
                x->args = arena_alloc(P->a, sizeof *x->args);
                x->args[0] = parse_postfix(P, parse_primary(P));
                x->n_args = 1;
            }
            e = x;
        } else {
            return e;
        }
    }
}

static expr *parse_unary(parser *P, bool with_filters) {
    enter(P);
    expr *e;
    if (is_op(peek(P), "-") || is_op(peek(P), "+")) {
        bool neg = is_op(next(P), "-");
        expr *x = parse_unary(P, false);
        if (neg) { e = new_expr(P, E_NEG); e->a = x; } else { e = x; }
    } else {
        e = parse_postfix(P, parse_primary(P));
    }
    if (with_filters) e = parse_filters(P, e);
    P->depth--;
    return e;
}

static expr *binary(parser *P, expr_kind kind, const char *op, expr *a, expr *b) {
    expr *e = new_expr(P, kind);
    e->name = str_of(op);
    e->a = a;
    e->b = b;
    return e;
}

static expr *parse_math2(parser *P) {
    expr *e = parse_unary(P, true);
    for (;;) {
        token *t = peek(P);
        if (is_op(t, "*") || is_op(t, "//") || is_op(t, "%") || is_op(t, "/")) {
            if (is_op(t, "/")) die(P->f, "line %d: '/' (true division) is not supported; use '//'", t->line);
            const char *op = is_op(t, "*") ? "*" : is_op(t, "//") ? "//" : "%";
            next(P);
            e = binary(P, E_BIN, op, e, parse_unary(P, true));
        } else if (is_op(t, "**")) {
            die(P->f, "line %d: '**' is not supported", t->line);
        } else {
            return e;
        }
    }
}

static expr *parse_concat(parser *P) {
    expr *e = parse_math2(P);
    while (is_op(peek(P), "~")) { next(P); e = binary(P, E_BIN, "~", e, parse_math2(P)); }
    return e;
}

static expr *parse_math1(parser *P) {
    expr *e = parse_concat(P);
    for (;;) {
        token *t = peek(P);
        if (!is_op(t, "+") && !is_op(t, "-")) return e;
        const char *op = is_op(t, "+") ? "+" : "-";
        next(P);
        e = binary(P, E_BIN, op, e, parse_concat(P));
    }
}

/* Comparisons chain as in Python: a < b < c means a < b and b < c. */
static expr *parse_compare(parser *P) {
    expr *left = parse_math1(P), *result = NULL;
    static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
    for (;;) {
        token *t = peek(P);
        const char *op = NULL;
        bool negate = false;
        for (int i = 0; ops[i]; i++) if (is_op(t, ops[i])) op = ops[i];
        if (op) {
            next(P);
        } else if (is_name(t, "in")) {
            next(P);
            op = "in";
        } else if (is_name(t, "not") && is_name(&P->toks[P->pos + 1], "in")) {
            next(P);
            next(P);
            op = "in";
            negate = true;
        } else {
            return result ? result : left;
        }
        expr *right = parse_math1(P);
        expr *cmp = binary(P, E_BIN, op, left, right);
        cmp->negate = negate;
        result = result ? binary(P, E_AND, "and", result, cmp) : cmp;
        left = right;
    }
}

static expr *parse_not(parser *P) {
    if (!is_name(peek(P), "not")) return parse_compare(P);
    enter(P);
    next(P);
    expr *e = new_expr(P, E_NOT);
    e->a = parse_not(P);
    P->depth--;
    return e;
}

static expr *parse_and(parser *P) {
    expr *e = parse_not(P);
    while (is_name(peek(P), "and")) { next(P); e = binary(P, E_AND, "and", e, parse_not(P)); }
    return e;
}

static expr *parse_or(parser *P) {
    expr *e = parse_and(P);
    while (is_name(peek(P), "or")) { next(P); e = binary(P, E_OR, "or", e, parse_and(P)); }
    return e;
}

/* a if cond else b (the else part is optional: undefined) */
static expr *parse_expr(parser *P) {
    enter(P);
    expr *e = parse_or(P);
    while (is_name(peek(P), "if")) {
        next(P);
        expr *c = new_expr(P, E_COND);
        c->a = e;
        c->c = parse_or(P);
        if (is_name(peek(P), "else")) { next(P); c->b = parse_expr(P); }
        e = c;
    }
    P->depth--;
    return e;
}

static stmt *new_stmt(parser *P, stmt_kind kind, int line) {
    stmt *s = arena_alloc(P->a, sizeof *s);
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->line = line;
    return s;
}

/* Statements until a {% tag %} whose keyword is in enders (consumed, returned
 * in *ender) or, with enders NULL, the end of the template. */
static body parse_body(parser *P, const char *const *enders, str *ender) {
    enter(P);
    body b = {0};
    size_t cap = 0;
    for (;;) {
        token *t = next(P);
        stmt *s = NULL;
        if (t->kind == T_EOF) {
            if (enders) die(P->f, "line %d: missing {%% %s %%}", t->line, enders[0]);
            break;
        } else if (t->kind == T_TEXT) {
            s = new_stmt(P, S_TEXT, t->line);
            s->text = t->s;
        } else if (t->kind == T_OUT) {
            s = new_stmt(P, S_OUT, t->line);
            s->e = parse_expr(P);
            expect_end(P);
        } else if (t->kind == T_STMT) {
            str kw = expect_name(P);
            bool is_ender = false;
            for (int i = 0; enders && enders[i]; i++) is_ender |= str_eq(kw, enders[i]);
            if (is_ender) { *ender = kw; break; }
            if (str_eq(kw, "if")) {
                s = new_stmt(P, S_IF, t->line);
                size_t ccap = 0, bcap = 0;
                static const char *const if_enders[] = {"endif", "elif", "else", NULL};
                expr *cond = parse_expr(P);
                for (;;) {
                    expect_end(P);
                    str e;
                    body br = parse_body(P, cond ? if_enders : (const char *const[]){"endif", NULL}, &e);
                    s->conds = arena_grow(P->a, s->conds, &ccap, (size_t)s->n_branches, (size_t)s->n_branches + 1, sizeof *s->conds);
                    s->branches = arena_grow(P->a, s->branches, &bcap, (size_t)s->n_branches, (size_t)s->n_branches + 1, sizeof *s->branches);
                    s->conds[s->n_branches] = cond;
                    s->branches[s->n_branches++] = br;
                    if (str_eq(e, "endif")) break;
                    cond = str_eq(e, "elif") ? parse_expr(P) : NULL;
                }
                expect_end(P);
            } else if (str_eq(kw, "for")) {
                s = new_stmt(P, S_FOR, t->line);
                s->target = expect_name(P);
                if (is_op(peek(P), ",")) { next(P); s->target2 = expect_name(P); }
                if (!is_name(next(P), "in")) die(P->f, "line %d: expected 'in' in for loop", t->line);
                s->e = parse_or(P);
                if (is_name(peek(P), "if")) { next(P); s->filter = parse_or(P); }
                if (is_name(peek(P), "recursive")) die(P->f, "line %d: recursive loops are not supported", t->line);
                expect_end(P);
                str e;
                s->b = parse_body(P, (const char *const[]){"endfor", "else", NULL}, &e);
                if (str_eq(e, "else")) {
                    expect_end(P);
                    s->else_b = parse_body(P, (const char *const[]){"endfor", NULL}, &e);
                }
                expect_end(P);
            } else if (str_eq(kw, "set")) {
                s = new_stmt(P, S_SET, t->line);
                s->target = expect_name(P);
                if (is_op(peek(P), ".")) { next(P); s->target2 = expect_name(P); }
                if (is_op(peek(P), ",")) die(P->f, "line %d: tuple assignment is not supported", t->line);
                if (peek(P)->kind == T_END && !s->target2.p) {
                    next(P);
                    str e;
                    s->kind = S_SET_BLOCK;
                    s->b = parse_body(P, (const char *const[]){"endset", NULL}, &e);
                } else {
                    expect_op(P, "=");
                    s->e = parse_expr(P);
                }
                expect_end(P);
            } else if (str_eq(kw, "generation")) {
                /* Hugging Face's marker for assistant text; renders its body. */
                s = new_stmt(P, S_BLOCK, t->line);
                expect_end(P);
                str e;
                s->b = parse_body(P, (const char *const[]){"endgeneration", NULL}, &e);
                expect_end(P);
            } else {
                die(P->f, "line %d: unsupported tag {%% %.*s %%}", t->line, (int)(kw.n > 40 ? 40 : kw.n), kw.p);
            }
        } else {
            die(P->f, "line %d: unexpected %s", t->line, tok_desc(t));
        }
        b.items = arena_grow(P->a, b.items, &cap, (size_t)b.n, (size_t)b.n + 1, sizeof *b.items);
        b.items[b.n++] = s;
    }
    P->depth--;
    return b;
}

/* ---- values ------------------------------------------------------------------- */

typedef struct var {
    str name;
    value v;
} var;

typedef struct render {
    failer f;
    arena mem;
    char *out;                /* malloc'd result */
    size_t out_n, out_cap;
    long steps_left;
    int depth;
    var *vars;                /* innermost scope last */
    size_t n_vars, vars_cap;
    size_t scope_base;        /* first variable of the innermost scope */
    cJSON *json;              /* JSON data being converted, freed on failure */
} render;

static const value UNDEF = {.t = V_UNDEF};

static value v_bool(bool b) { return (value){.t = V_BOOL, .b = b}; }
static value v_int(int64_t i) { return (value){.t = V_INT, .i = i}; }
static value v_str(str s) { return (value){.t = V_STR, .s = s}; }
static value v_undef(str name) { return (value){.t = V_UNDEF, .s = name}; }

static value v_list(render *R, size_t cap) {
    vlist *l = arena_alloc(&R->mem, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->items = cap ? arena_alloc(&R->mem, cap * sizeof *l->items) : NULL;
    return (value){.t = V_LIST, .list = l};
}
static void list_push(render *R, vlist *l, value v) {
    l->items = arena_grow(&R->mem, l->items, &l->cap, l->n, l->n + 1, sizeof *l->items);
    l->items[l->n++] = v;
}

static value v_dict(render *R) {
    vdict *d = arena_alloc(&R->mem, sizeof *d);
    memset(d, 0, sizeof *d);
    return (value){.t = V_DICT, .dict = d};
}
static value *dict_find(vdict *d, str key) {
    for (size_t i = 0; i < d->n; i++) if (str_same(d->keys[i], key)) return &d->vals[i];
    return NULL;
}
static void dict_set(render *R, vdict *d, str key, value v) {
    value *slot = dict_find(d, key);
    if (slot) { *slot = v; return; }
    size_t kcap = d->cap;
    d->keys = arena_grow(&R->mem, d->keys, &kcap, d->n, d->n + 1, sizeof *d->keys);
    d->vals = arena_grow(&R->mem, d->vals, &d->cap, d->n, d->n + 1, sizeof *d->vals);
    d->keys[d->n] = key;
    d->vals[d->n++] = v;
}

static const char *type_name(vtype t) {
    static const char *const names[] = {"undefined", "none", "boolean", "integer", "string", "list", "dict", "float"};
    return names[t];
}

static bool truthy(value v) {
    switch (v.t) {
    case V_BOOL: return v.b;
    case V_INT: return v.i != 0;
    case V_FLOAT: return v.d != 0;
    case V_STR: return v.s.n > 0;
    case V_LIST: return v.list->n > 0;
    case V_DICT: return v.dict->n > 0;
    default: return false;
    }
}

static _Noreturn void undefined_error(render *R, int line, value v) {
    if (v.s.n) die(&R->f, "line %d: '%.*s' is undefined", line, (int)(v.s.n > 60 ? 60 : v.s.n), v.s.p);
    die(&R->f, "line %d: use of an undefined value", line);
}

/* Structural equality; level bounds the recursion, since a template can
 * build a cycle ({% set ns.self = ns %}). */
static bool value_eq_at(render *R, value a, value b, int level) {
    if (level > MAX_EVAL_DEPTH) die(&R->f, "value nested too deeply to compare (a cycle?)");
    if ((a.t == V_INT || a.t == V_BOOL) && (b.t == V_INT || b.t == V_BOOL))
        return (a.t == V_INT ? a.i : a.b) == (b.t == V_INT ? b.i : b.b);
    if ((a.t == V_FLOAT || b.t == V_FLOAT) && (a.t == V_INT || a.t == V_FLOAT) && (b.t == V_INT || b.t == V_FLOAT))
        return (a.t == V_INT ? (double)a.i : a.d) == (b.t == V_INT ? (double)b.i : b.d);
    if (a.t != b.t) return false;
    switch (a.t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return str_same(a.s, b.s);
    case V_LIST:
        if (a.list->n != b.list->n) return false;
        for (size_t i = 0; i < a.list->n; i++) if (!value_eq_at(R, a.list->items[i], b.list->items[i], level + 1)) return false;
        return true;
    case V_DICT:
        if (a.dict->n != b.dict->n) return false;
        for (size_t i = 0; i < a.dict->n; i++) {
            value *o = dict_find(b.dict, a.dict->keys[i]);
            if (!o || !value_eq_at(R, a.dict->vals[i], *o, level + 1)) return false;
        }
        return true;
    default: return false;
    }
}

static bool value_eq(render *R, value a, value b) { return value_eq_at(R, a, b, 0); }

/* Python's repr of a float (json.dumps writes the same): the shortest
 * digits that read back as d, positional for exponents -4..15, else
 * scientific; always a point or an exponent. */
static void put_float(sbuf *b, double d) {
    char num[40], digits[40];
    if (d != d) { sb_puts(b, "NaN"); return; }
    if (d > 1.7976931348623157e308 || d < -1.7976931348623157e308) { sb_puts(b, d > 0 ? "Infinity" : "-Infinity"); return; }
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, d);
        if (strtod(digits, NULL) == d) break;
    }
    snprintf(digits, sizeof digits, "%.*e", prec - 1, d);
    int exp = atoi(strchr(digits, 'e') + 1);
    if (exp < -4 || exp >= 16) {
        sb_puts(b, digits); /* "1.5e+20", "1e-05": C and Python agree */
        return;
    }
    int decimals = prec - 1 - exp;
    snprintf(num, sizeof num, "%.*f", decimals > 0 ? decimals : 0, d);
    sb_puts(b, num);
    if (decimals <= 0) sb_puts(b, ".0");
}

/* Python-style text of a value: what {{ }} and ~ produce. */

static void put_repr_str(sbuf *b, str s) {
    sb_put(b, "'", 1);
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        if (c == '\'' || c == '\\') { sb_put(b, "\\", 1); sb_put(b, &c, 1); }
        else if (c == '\n') sb_puts(b, "\\n");
        else sb_put(b, &c, 1);
    }
    sb_put(b, "'", 1);
}

static void put_value_at(render *R, sbuf *b, value v, bool quoted, int level) {
    char num[32];
    if (level > MAX_EVAL_DEPTH) die(&R->f, "value nested too deeply to print (a cycle?)");
    switch (v.t) {
    case V_UNDEF: break;
    case V_NONE: sb_puts(b, "None"); break;
    case V_BOOL: sb_puts(b, v.b ? "True" : "False"); break;
    case V_INT: snprintf(num, sizeof num, "%" PRId64, v.i); sb_puts(b, num); break;
    case V_FLOAT: put_float(b, v.d); break;
    case V_STR: if (quoted) put_repr_str(b, v.s); else sb_put(b, v.s.p, v.s.n); break;
    case V_LIST:
        sb_put(b, "[", 1);
        for (size_t i = 0; i < v.list->n; i++) { if (i) sb_puts(b, ", "); put_value_at(R, b, v.list->items[i], true, level + 1); }
        sb_put(b, "]", 1);
        break;
    case V_DICT:
        sb_put(b, "{", 1);
        for (size_t i = 0; i < v.dict->n; i++) {
            if (i) sb_puts(b, ", ");
            put_repr_str(b, v.dict->keys[i]);
            sb_puts(b, ": ");
            put_value_at(R, b, v.dict->vals[i], true, level + 1);
        }
        sb_put(b, "}", 1);
        break;
    }
}

static void put_value(render *R, sbuf *b, value v) { put_value_at(R, b, v, false, 0); }

static str to_str(render *R, value v) {
    if (v.t == V_STR) return v.s;
    sbuf b = {.a = &R->mem};
    put_value(R, &b, v);
    return sb_str(&b);
}

/* JSON as Hugging Face's tojson writes it (json.dumps, ensure_ascii=False). */
static void put_json(render *R, sbuf *b, value v, int indent, int level, int line) {
    if (level > MAX_EVAL_DEPTH) die(&R->f, "line %d: value nested too deeply for tojson", line);
    char num[32];
    switch (v.t) {
    case V_UNDEF: undefined_error(R, line, v);
    case V_NONE: sb_puts(b, "null"); break;
    case V_BOOL: sb_puts(b, v.b ? "true" : "false"); break;
    case V_INT: snprintf(num, sizeof num, "%" PRId64, v.i); sb_puts(b, num); break;
    case V_FLOAT: put_float(b, v.d); break;
    case V_STR:
        sb_put(b, "\"", 1);
        for (size_t i = 0; i < v.s.n; i++) {
            unsigned char c = (unsigned char)v.s.p[i];
            if (c == '"') sb_puts(b, "\\\"");
            else if (c == '\\') sb_puts(b, "\\\\");
            else if (c == '\n') sb_puts(b, "\\n");
            else if (c == '\r') sb_puts(b, "\\r");
            else if (c == '\t') sb_puts(b, "\\t");
            else if (c == '\b') sb_puts(b, "\\b");
            else if (c == '\f') sb_puts(b, "\\f");
            else if (c < 0x20) { snprintf(num, sizeof num, "\\u%04x", c); sb_puts(b, num); }
            else sb_put(b, (const char *)&c, 1);
        }
        sb_put(b, "\"", 1);
        break;
    case V_LIST: case V_DICT: {
        bool is_list = v.t == V_LIST;
        size_t n = is_list ? v.list->n : v.dict->n;
        sb_puts(b, is_list ? "[" : "{");
        for (size_t i = 0; i < n; i++) {
            if (i) sb_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) {
                sb_puts(b, "\n");
                for (int k = 0; k < indent * (level + 1); k++) sb_puts(b, " ");
            }
            if (is_list) {
                put_json(R, b, v.list->items[i], indent, level + 1, line);
            } else {
                put_json(R, b, v_str(v.dict->keys[i]), indent, level + 1, line);
                sb_puts(b, ": ");
                put_json(R, b, v.dict->vals[i], indent, level + 1, line);
            }
        }
        if (indent >= 0 && n) {
            sb_puts(b, "\n");
            for (int k = 0; k < indent * level; k++) sb_puts(b, " ");
        }
        sb_puts(b, is_list ? "]" : "}");
        break;
    }
    }
}

/* JSON data (tools, a message's tool_calls) as template values; an
 * integral number is an integer, as the JSON that clients send means it. */
static value from_json(render *R, const cJSON *j, int level) {
    if (level > MAX_EVAL_DEPTH) die(&R->f, "JSON data nested too deeply");
    if (cJSON_IsNull(j)) return (value){.t = V_NONE};
    if (cJSON_IsBool(j)) return v_bool(cJSON_IsTrue(j));
    if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        char *p = arena_alloc(&R->mem, n + 1);
        memcpy(p, j->valuestring, n + 1);
        return v_str((str){p, n});
    }
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == (double)(int64_t)d && d > -9.0e15 && d < 9.0e15) return v_int((int64_t)d);
        return (value){.t = V_FLOAT, .d = d};
    }
    if (cJSON_IsArray(j)) {
        value l = v_list(R, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *c = j->child; c; c = c->next) list_push(R, l.list, from_json(R, c, level + 1));
        return l;
    }
    if (cJSON_IsObject(j)) {
        value d = v_dict(R);
        for (const cJSON *c = j->child; c; c = c->next) {
            size_t n = strlen(c->string);
            char *k = arena_alloc(&R->mem, n + 1);
            memcpy(k, c->string, n + 1);
            dict_set(R, d.dict, (str){k, n}, from_json(R, c, level + 1));
        }
        return d;
    }
    die(&R->f, "unsupported JSON value");
}

/* Parses JSON text into a value (the parse tree is R->json meanwhile, so
 * that a die while converting still frees it). */
static value json_value(render *R, const char *text, const char *what) {
    R->json = cJSON_Parse(text);
    if (!R->json) die(&R->f, "%s is not valid JSON", what);
    value v = from_json(R, R->json, 0);
    cJSON_Delete(R->json);
    R->json = NULL;
    return v;
}

/* ---- variables ---------------------------------------------------------------- */

static value lookup(render *R, str name) {
    for (size_t i = R->n_vars; i-- > 0;)
        if (str_same(R->vars[i].name, name)) return R->vars[i].v;
    return v_undef(name);
}

/* Assign in the innermost scope: like Jinja, a set inside a loop body does
 * not change the variable outside it (hence namespace()). */
static void assign(render *R, str name, value v) {
    for (size_t i = R->n_vars; i-- > R->scope_base;)
        if (str_same(R->vars[i].name, name)) { R->vars[i].v = v; return; }
    R->vars = arena_grow(&R->mem, R->vars, &R->vars_cap, R->n_vars, R->n_vars + 1, sizeof *R->vars);
    R->vars[R->n_vars++] = (var){name, v};
}

/* ---- evaluation --------------------------------------------------------------- */

static value eval(render *R, const expr *e);

static void step(render *R, int line) {
    if (--R->steps_left < 0) die(&R->f, "line %d: template takes too many steps (more than %d)", line, MAX_STEPS);
}

static str trim_chars(str s, str chars, bool left, bool right) {
    #define IS_STRIP(c) (chars.p ? memchr(chars.p, (c), chars.n) != NULL : is_space(c))
    if (left) while (s.n && IS_STRIP(s.p[0])) { s.p++; s.n--; }
    if (right) while (s.n && IS_STRIP(s.p[s.n - 1])) s.n--;
    #undef IS_STRIP
    return s;
}

static str change_case(render *R, str s, int mode /* 0 upper, 1 lower, 2 capitalize, 3 title */) {
    char *p = arena_alloc(&R->mem, s.n + 1);
    bool word_start = true;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        bool upper = mode == 0 || ((mode == 2 && i == 0) || (mode == 3 && word_start));
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (upper && c >= 'a' && c <= 'z') c = (char)(c - 32);
        else if (!upper && c >= 'A' && c <= 'Z') c = (char)(c + 32);
        word_start = !alpha && !is_digit(c);
        p[i] = c;
    }
    return (str){p, s.n};
}

static str replace_all(render *R, str s, str old, str new_s) {
    if (old.n == 0) return s;
    sbuf b = {.a = &R->mem};
    size_t i = 0;
    while (i < s.n) {
        if (i + old.n <= s.n && memcmp(s.p + i, old.p, old.n) == 0) { sb_put(&b, new_s.p, new_s.n); i += old.n; }
        else sb_put(&b, s.p + i++, 1);
    }
    return sb_str(&b);
}

static str need_str(render *R, value v, int line, const char *what) {
    if (v.t == V_UNDEF) undefined_error(R, line, v);
    if (v.t != V_STR) die(&R->f, "line %d: %s needs a string, got %s", line, what, type_name(v.t));
    return v.s;
}
static int64_t need_int(render *R, value v, int line, const char *what) {
    if (v.t == V_UNDEF) undefined_error(R, line, v);
    if (v.t == V_BOOL) return v.b;
    if (v.t != V_INT) die(&R->f, "line %d: %s needs an integer, got %s", line, what, type_name(v.t));
    return v.i;
}

/* Elements a for loop or filter walks over: list items, dict keys, string
 * characters (UTF-8 sequences); undefined walks over nothing. */
static vlist *iterate(render *R, value v, int line) {
    if (v.t == V_LIST) return v.list;
    value l = v_list(R, 0);
    if (v.t == V_DICT) {
        for (size_t i = 0; i < v.dict->n; i++) list_push(R, l.list, v_str(v.dict->keys[i]));
    } else if (v.t == V_STR) {
        for (size_t i = 0; i < v.s.n;) {
            size_t len = 1;
            while (i + len < v.s.n && ((unsigned char)v.s.p[i + len] & 0xC0) == 0x80) len++;
            list_push(R, l.list, v_str((str){v.s.p + i, len}));
            i += len;
        }
    } else if (v.t != V_UNDEF) {
        die(&R->f, "line %d: cannot iterate over %s", line, type_name(v.t));
    }
    return l.list;
}

static value get_item(render *R, value obj, value key, int line) {
    if (obj.t == V_UNDEF) undefined_error(R, line, obj);
    if (obj.t == V_DICT) {
        if (key.t != V_STR) return UNDEF;
        value *v = dict_find(obj.dict, key.s);
        return v ? *v : v_undef(key.s);
    }
    if (obj.t == V_LIST || obj.t == V_STR) {
        if (key.t != V_INT) die(&R->f, "line %d: index must be an integer", line);
        int64_t n = obj.t == V_LIST ? (int64_t)obj.list->n : (int64_t)obj.s.n;
        int64_t i = key.i < 0 ? key.i + n : key.i;
        if (i < 0 || i >= n) return UNDEF;
        return obj.t == V_LIST ? obj.list->items[i] : v_str((str){obj.s.p + i, 1});
    }
    return UNDEF;
}

static value slice(render *R, value obj, value lo_v, value hi_v, value step_v, int line) {
    if (obj.t == V_UNDEF) undefined_error(R, line, obj);
    if (obj.t != V_LIST && obj.t != V_STR) die(&R->f, "line %d: cannot slice %s", line, type_name(obj.t));
    int64_t n = obj.t == V_LIST ? (int64_t)obj.list->n : (int64_t)obj.s.n;
    int64_t st = step_v.t == V_UNDEF || step_v.t == V_NONE ? 1 : need_int(R, step_v, line, "slice step");
    if (st == 0) die(&R->f, "line %d: slice step cannot be zero", line);
    int64_t lo, hi;
    /* Python's clamping rules for each direction. */
    if (lo_v.t == V_UNDEF || lo_v.t == V_NONE) lo = st > 0 ? 0 : n - 1;
    else { lo = need_int(R, lo_v, line, "slice"); if (lo < 0) lo += n; if (lo < 0) lo = st > 0 ? 0 : -1; if (lo >= n) lo = st > 0 ? n : n - 1; }
    if (hi_v.t == V_UNDEF || hi_v.t == V_NONE) hi = st > 0 ? n : -1;
    else { hi = need_int(R, hi_v, line, "slice"); if (hi < 0) hi += n; if (hi < 0) hi = st > 0 ? 0 : -1; if (hi >= n) hi = st > 0 ? n : n - 1; }
    if (obj.t == V_LIST) {
        value out = v_list(R, 0);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) list_push(R, out.list, obj.list->items[i]);
        return out;
    }
    sbuf b = {.a = &R->mem};
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) sb_put(&b, obj.s.p + i, 1);
    return v_str(sb_str(&b));
}

static bool contains(render *R, value hay, value needle, int line) {
    switch (hay.t) {
    case V_UNDEF: return false;
    case V_STR: {
        str n = need_str(R, needle, line, "'in' on a string");
        if (n.n == 0) return true;
        for (size_t i = 0; i + n.n <= hay.s.n; i++) if (memcmp(hay.s.p + i, n.p, n.n) == 0) return true;
        return false;
    }
    case V_LIST:
        for (size_t i = 0; i < hay.list->n; i++) if (value_eq(R, hay.list->items[i], needle)) return true;
        return false;
    case V_DICT: return needle.t == V_STR && dict_find(hay.dict, needle.s) != NULL;
    default: die(&R->f, "line %d: 'in' needs a string, list or dict, got %s", line, type_name(hay.t));
    }
}

/* Arguments of a call, filter or test, evaluated; positional after the
 * implicit first one (the filtered value), then keywords by name. */
typedef struct args {
    value pos[8];
    int n_pos;
    str kw_names[8];
    value kw[8];
    int n_kw;
} args;

static void eval_args(render *R, const expr *e, args *a) {
    if (e->n_args > 8 || e->n_kw > 8) die(&R->f, "line %d: too many arguments", e->line);
    a->n_pos = e->n_args;
    a->n_kw = e->n_kw;
    for (int i = 0; i < e->n_args; i++) a->pos[i] = eval(R, e->args[i]);
    for (int i = 0; i < e->n_kw; i++) { a->kw_names[i] = e->kw_names[i]; a->kw[i] = eval(R, e->kw_vals[i]); }
}

/* Positional argument i (-1: none), else keyword name, else UNDEF. */
static value arg(const args *a, int i, const char *name) {
    if (i >= 0 && i < a->n_pos) return a->pos[i];
    for (int k = 0; name && k < a->n_kw; k++) if (str_eq(a->kw_names[k], name)) return a->kw[k];
    return UNDEF;
}

static bool apply_test(render *R, str name, value v, const args *a, int line);

static value apply_filter(render *R, str name, value v, const args *a, int line) {
    #define IS(n) str_eq(name, n)
    if (IS("safe")) return v;
    if (IS("default") || IS("d")) {
        bool if_falsy = truthy(arg(a, 1, "boolean"));
        if (v.t == V_UNDEF || (if_falsy && !truthy(v))) { value d = arg(a, 0, "default_value"); return d.t == V_UNDEF ? v_str(str_of("")) : d; }
        return v;
    }
    /* Like Jinja, an undefined value reads as "" or as an empty sequence. */
    if (IS("trim")) { value c = arg(a, 0, "chars"); return v_str(trim_chars(to_str(R, v), c.t == V_STR ? c.s : (str){0}, true, true)); }
    if (IS("upper")) return v_str(change_case(R, to_str(R, v), 0));
    if (IS("lower")) return v_str(change_case(R, to_str(R, v), 1));
    if (IS("capitalize")) return v_str(change_case(R, change_case(R, to_str(R, v), 1), 2));
    if (IS("title")) return v_str(change_case(R, to_str(R, v), 3));
    if (IS("string")) return v_str(to_str(R, v));
    if (IS("length") || IS("count")) {
        if (v.t == V_STR) { int64_t n = 0; for (size_t i = 0; i < v.s.n; i++) n += ((unsigned char)v.s.p[i] & 0xC0) != 0x80; return v_int(n); }
        if (v.t == V_LIST) return v_int((int64_t)v.list->n);
        if (v.t == V_DICT) return v_int((int64_t)v.dict->n);
        if (v.t == V_UNDEF) return v_int(0);
        die(&R->f, "line %d: %s has no length", line, type_name(v.t));
    }
    if (IS("first") || IS("last")) {
        vlist *l = iterate(R, v, line);
        if (!l->n) return UNDEF;
        return IS("first") ? l->items[0] : l->items[l->n - 1];
    }
    if (IS("list")) { vlist *l = iterate(R, v, line); value out = v_list(R, l->n); for (size_t i = 0; i < l->n; i++) list_push(R, out.list, l->items[i]); return out; }
    if (IS("reverse")) {
        if (v.t == V_STR) { sbuf b = {.a = &R->mem}; for (size_t i = v.s.n; i-- > 0;) sb_put(&b, v.s.p + i, 1); return v_str(sb_str(&b)); }
        vlist *l = iterate(R, v, line);
        value out = v_list(R, l->n);
        for (size_t i = l->n; i-- > 0;) list_push(R, out.list, l->items[i]);
        return out;
    }
    if (IS("join")) {
        value sep = arg(a, 0, "d"), attr = arg(a, 1, "attribute");
        vlist *l = iterate(R, v, line);
        sbuf b = {.a = &R->mem};
        for (size_t i = 0; i < l->n; i++) {
            if (i && sep.t == V_STR) sb_put(&b, sep.s.p, sep.s.n);
            value item = attr.t == V_STR ? get_item(R, l->items[i], attr, line) : l->items[i];
            put_value(R, &b, item);
        }
        return v_str(sb_str(&b));
    }
    if (IS("replace")) {
        str s = to_str(R, v);
        return v_str(replace_all(R, s, need_str(R, arg(a, 0, "old"), line, "replace"), need_str(R, arg(a, 1, "new"), line, "replace")));
    }
    if (IS("int")) {
        if (v.t == V_INT || v.t == V_BOOL) return v_int(need_int(R, v, line, "int"));
        if (v.t == V_FLOAT) return v_int(v.d > -9.2e18 && v.d < 9.2e18 ? (int64_t)v.d : 0);
        if (v.t == V_STR) { char buf[32]; size_t n = v.s.n < 31 ? v.s.n : 31; memcpy(buf, v.s.p, n); buf[n] = 0; return v_int(strtoll(buf, NULL, 10)); }
        return v_int(0);
    }
    if (IS("abs")) { int64_t i = need_int(R, v, line, "abs"); return v_int(i < 0 ? -i : i); }
    if (IS("tojson")) {
        value ind = arg(a, 0, "indent");
        sbuf b = {.a = &R->mem};
        put_json(R, &b, v, ind.t == V_INT ? (int)(ind.i > 16 ? 16 : ind.i < 0 ? 0 : ind.i) : -1, 0, line);
        return v_str(sb_str(&b));
    }
    if (IS("items")) {
        if (v.t != V_DICT) die(&R->f, "line %d: items needs a dict", line);
        value out = v_list(R, v.dict->n);
        for (size_t i = 0; i < v.dict->n; i++) {
            value pair = v_list(R, 2);
            list_push(R, pair.list, v_str(v.dict->keys[i]));
            list_push(R, pair.list, v.dict->vals[i]);
            list_push(R, out.list, pair);
        }
        return out;
    }
    if (IS("selectattr") || IS("rejectattr") || IS("select") || IS("reject")) {
        bool attr = IS("selectattr") || IS("rejectattr"), keep_true = IS("selectattr") || IS("select");
        int k = attr ? 1 : 0;
        value key = attr ? arg(a, 0, NULL) : UNDEF;
        value test = arg(a, k, NULL);
        args targs = {.n_pos = a->n_pos > k + 1 ? a->n_pos - k - 1 : 0};
        for (int i = 0; i < targs.n_pos && i < 7; i++) targs.pos[i] = a->pos[k + 1 + i];
        vlist *l = iterate(R, v, line);
        value out = v_list(R, 0);
        for (size_t i = 0; i < l->n; i++) {
            value item = attr ? get_item(R, l->items[i], key, line) : l->items[i];
            bool ok = test.t == V_STR ? apply_test(R, test.s, item, &targs, line) : truthy(item);
            if (ok == keep_true) list_push(R, out.list, l->items[i]);
        }
        return out;
    }
    if (IS("map")) {
        value attr = arg(a, -1, "attribute"), fname = arg(a, 0, NULL);
        vlist *l = iterate(R, v, line);
        value out = v_list(R, l->n);
        args none = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (attr.t == V_STR) list_push(R, out.list, get_item(R, l->items[i], attr, line));
            else list_push(R, out.list, apply_filter(R, need_str(R, fname, line, "map"), l->items[i], &none, line));
        }
        return out;
    }
    die(&R->f, "line %d: unknown filter '%.*s'", line, (int)(name.n > 40 ? 40 : name.n), name.p);
    #undef IS
}

static bool apply_test(render *R, str name, value v, const args *a, int line) {
    #define IS(n) str_eq(name, n)
    if (IS("defined")) return v.t != V_UNDEF;
    if (IS("undefined")) return v.t == V_UNDEF;
    if (IS("none")) return v.t == V_NONE;
    if (IS("string")) return v.t == V_STR;
    if (IS("number")) return v.t == V_INT || v.t == V_FLOAT;
    if (IS("integer")) return v.t == V_INT;
    if (IS("float")) return v.t == V_FLOAT;
    if (IS("boolean")) return v.t == V_BOOL;
    if (IS("true")) return v.t == V_BOOL && v.b;
    if (IS("false")) return v.t == V_BOOL && !v.b;
    if (IS("mapping")) return v.t == V_DICT;
    if (IS("sequence")) return v.t == V_LIST || v.t == V_STR || v.t == V_DICT;
    if (IS("iterable")) return v.t == V_LIST || v.t == V_STR || v.t == V_DICT;
    if (IS("equalto") || IS("eq") || IS("==")) return value_eq(R, v, arg(a, 0, NULL));
    if (IS("ne") || IS("!=")) return !value_eq(R, v, arg(a, 0, NULL));
    if (IS("in")) return contains(R, arg(a, 0, NULL), v, line);
    if (IS("odd")) return need_int(R, v, line, "odd") % 2 != 0;
    if (IS("even")) return need_int(R, v, line, "even") % 2 == 0;
    if (IS("divisibleby")) { int64_t d = need_int(R, arg(a, 0, NULL), line, "divisibleby"); return d != 0 && need_int(R, v, line, "divisibleby") % d == 0; }
    if (IS("lower")) { str s = need_str(R, v, line, "lower"); for (size_t i = 0; i < s.n; i++) if (s.p[i] >= 'A' && s.p[i] <= 'Z') return false; return true; }
    if (IS("upper")) { str s = need_str(R, v, line, "upper"); for (size_t i = 0; i < s.n; i++) if (s.p[i] >= 'a' && s.p[i] <= 'z') return false; return true; }
    die(&R->f, "line %d: unknown test '%.*s'", line, (int)(name.n > 40 ? 40 : name.n), name.p);
    #undef IS
}

static bool has_prefix(str s, str p) { return p.n <= s.n && memcmp(s.p, p.p, p.n) == 0; }
static bool has_suffix(str s, str p) { return p.n <= s.n && memcmp(s.p + s.n - p.n, p.p, p.n) == 0; }

/* obj.name(args): the string and dict methods templates call. */
static value call_method(render *R, value obj, str name, const args *a, int line) {
    #define IS(n) str_eq(name, n)
    if (obj.t == V_UNDEF) undefined_error(R, line, obj);
    if (obj.t == V_STR) {
        str s = obj.s;
        value c = arg(a, 0, NULL);
        str chars = c.t == V_STR ? c.s : (str){0};
        if (IS("strip")) return v_str(trim_chars(s, chars, true, true));
        if (IS("lstrip")) return v_str(trim_chars(s, chars, true, false));
        if (IS("rstrip")) return v_str(trim_chars(s, chars, false, true));
        if (IS("upper")) return v_str(change_case(R, s, 0));
        if (IS("lower")) return v_str(change_case(R, s, 1));
        if (IS("title")) return v_str(change_case(R, s, 3));
        if (IS("capitalize")) return v_str(change_case(R, change_case(R, s, 1), 2));
        if (IS("startswith") || IS("endswith")) {
            bool start = IS("startswith");
            vlist *opts;
            if (c.t == V_LIST) opts = c.list;
            else { value one = v_list(R, 1); list_push(R, one.list, c); opts = one.list; }
            for (size_t i = 0; i < opts->n; i++) {
                str p = need_str(R, opts->items[i], line, start ? "startswith" : "endswith");
                if (start ? has_prefix(s, p) : has_suffix(s, p)) return v_bool(true);
            }
            return v_bool(false);
        }
        if (IS("replace")) return v_str(replace_all(R, s, need_str(R, c, line, "replace"), need_str(R, arg(a, 1, NULL), line, "replace")));
        if (IS("split")) {
            value out = v_list(R, 0);
            value maxv = arg(a, 1, "maxsplit");
            int64_t max_split = maxv.t == V_INT ? maxv.i : -1;
            if (c.t == V_STR && c.s.n) {
                size_t start = 0;
                for (size_t i = 0; i + c.s.n <= s.n;) {
                    if (max_split != 0 && memcmp(s.p + i, c.s.p, c.s.n) == 0) {
                        list_push(R, out.list, v_str((str){s.p + start, i - start}));
                        i += c.s.n;
                        start = i;
                        if (max_split > 0) max_split--;
                    } else {
                        i++;
                    }
                }
                list_push(R, out.list, v_str((str){s.p + start, s.n - start}));
            } else {             /* split on runs of whitespace */
                size_t i = 0;
                while (i < s.n) {
                    while (i < s.n && is_space(s.p[i])) i++;
                    if (i >= s.n) break;
                    size_t start = i;
                    if (max_split == 0) i = s.n;
                    else while (i < s.n && !is_space(s.p[i])) i++;
                    list_push(R, out.list, v_str(trim_chars((str){s.p + start, i - start}, (str){0}, false, true)));
                    if (max_split > 0) max_split--;
                }
            }
            return out;
        }
    } else if (obj.t == V_DICT) {
        if (IS("items")) return apply_filter(R, str_of("items"), obj, a, line);
        if (IS("keys") || IS("values")) {
            value out = v_list(R, obj.dict->n);
            for (size_t i = 0; i < obj.dict->n; i++) list_push(R, out.list, IS("keys") ? v_str(obj.dict->keys[i]) : obj.dict->vals[i]);
            return out;
        }
        if (IS("get")) {
            value *v = arg(a, 0, NULL).t == V_STR ? dict_find(obj.dict, a->pos[0].s) : NULL;
            if (v) return *v;
            value d = arg(a, 1, "default");
            return d.t == V_UNDEF ? (value){.t = V_NONE} : d;
        }
    }
    die(&R->f, "line %d: %s has no method '%.*s'", line, type_name(obj.t), (int)(name.n > 40 ? 40 : name.n), name.p);
    #undef IS
}

/* name(args): the global functions. */
static value call_function(render *R, str name, const args *a, int line) {
    if (str_eq(name, "raise_exception")) {
        value m = arg(a, 0, NULL);
        /* The prefix keeps the message non-empty even for raise_exception(''). */
        str s = m.t == V_STR ? m.s : str_of("(no message)");
        die(&R->f, "template raised an exception: %.*s", (int)(s.n > 400 ? 400 : s.n), s.p);
    }
    if (str_eq(name, "range")) {
        int64_t lo = 0, hi, st = 1;
        if (a->n_pos == 1) hi = need_int(R, a->pos[0], line, "range");
        else if (a->n_pos == 2 || a->n_pos == 3) {
            lo = need_int(R, a->pos[0], line, "range");
            hi = need_int(R, a->pos[1], line, "range");
            if (a->n_pos == 3) st = need_int(R, a->pos[2], line, "range");
        } else die(&R->f, "line %d: range takes 1 to 3 arguments", line);
        if (st == 0) die(&R->f, "line %d: range step cannot be zero", line);
        if (lo < -(INT64_C(1) << 62) || lo > (INT64_C(1) << 62) || hi < -(INT64_C(1) << 62) || hi > (INT64_C(1) << 62))
            die(&R->f, "line %d: range too large", line);
        int64_t count = st > 0 ? (hi > lo ? (hi - lo + st - 1) / st : 0) : (lo > hi ? (lo - hi - st - 1) / -st : 0);
        if (count > MAX_RANGE) die(&R->f, "line %d: range of %" PRId64 " elements is too large", line, count);
        value out = v_list(R, (size_t)count);
        for (int64_t i = 0; i < count; i++) list_push(R, out.list, v_int(lo + i * st));
        return out;
    }
    if (str_eq(name, "namespace") || str_eq(name, "dict")) {
        value d = v_dict(R);
        for (int i = 0; i < a->n_kw; i++) dict_set(R, d.dict, a->kw_names[i], a->kw[i]);
        return d;
    }
    value v = lookup(R, name);
    if (v.t == V_UNDEF) undefined_error(R, line, v);
    die(&R->f, "line %d: '%.*s' is not callable", line, (int)(name.n > 40 ? 40 : name.n), name.p);
}

static value arith(render *R, const expr *e, value a, value b) {
    int line = e->line;
    char op = e->name.p[0];
    bool two = e->name.n == 2;
    if (op == '~') {
        str x = to_str(R, a), y = to_str(R, b);
        sbuf s = {.a = &R->mem};
        sb_put(&s, x.p, x.n);
        sb_put(&s, y.p, y.n);
        return v_str(sb_str(&s));
    }
    if (a.t == V_UNDEF) undefined_error(R, line, a);
    if (b.t == V_UNDEF) undefined_error(R, line, b);
    if (op == '+' && a.t == V_STR && b.t == V_STR) {
        sbuf s = {.a = &R->mem};
        sb_put(&s, a.s.p, a.s.n);
        sb_put(&s, b.s.p, b.s.n);
        return v_str(sb_str(&s));
    }
    if (op == '+' && a.t == V_LIST && b.t == V_LIST) {
        value out = v_list(R, a.list->n + b.list->n);
        for (size_t i = 0; i < a.list->n; i++) list_push(R, out.list, a.list->items[i]);
        for (size_t i = 0; i < b.list->n; i++) list_push(R, out.list, b.list->items[i]);
        return out;
    }
    if (op == '*' && (a.t == V_STR || b.t == V_STR) && (a.t == V_INT || b.t == V_INT)) {
        str s = a.t == V_STR ? a.s : b.s;
        int64_t times = a.t == V_INT ? a.i : b.i;
        if (times <= 0 || s.n == 0) return v_str(str_of(""));
        if ((uint64_t)times > MAX_OUTPUT_BYTES / s.n) die(&R->f, "line %d: string repetition too large", line);
        sbuf out = {.a = &R->mem};
        for (int64_t i = 0; i < times; i++) sb_put(&out, s.p, s.n);
        return v_str(sb_str(&out));
    }
    if ((a.t != V_INT && a.t != V_BOOL) || (b.t != V_INT && b.t != V_BOOL))
        die(&R->f, "line %d: unsupported operand types for %.*s: %s and %s", line, (int)e->name.n, e->name.p, type_name(a.t), type_name(b.t));
    int64_t x = a.t == V_INT ? a.i : a.b, y = b.t == V_INT ? b.i : b.b, r;
    bool overflow = false;
    switch (op) {
    case '+': overflow = __builtin_add_overflow(x, y, &r); break;
    case '-': overflow = __builtin_sub_overflow(x, y, &r); break;
    case '*': overflow = __builtin_mul_overflow(x, y, &r); break;
    default:
        if (y == 0) die(&R->f, "line %d: division by zero", line);
        if (x == INT64_MIN && y == -1) { overflow = true; break; }
        if (two || op == '/') { r = x / y; if ((x % y != 0) && ((x < 0) != (y < 0))) r--; }  /* floor division */
        else { r = x % y; if (r != 0 && ((r < 0) != (y < 0))) r += y; }                    /* Python modulo */
    }
    if (overflow) die(&R->f, "line %d: integer overflow", line);
    return v_int(r);
}

static value compare(render *R, const expr *e, value a, value b) {
    str op = e->name;
    if (str_eq(op, "==")) return v_bool(value_eq(R, a, b));
    if (str_eq(op, "!=")) return v_bool(!value_eq(R, a, b));
    if (str_eq(op, "in")) return v_bool(contains(R, b, a, e->line) != e->negate);
    if (a.t == V_UNDEF) undefined_error(R, e->line, a);
    if (b.t == V_UNDEF) undefined_error(R, e->line, b);
    int c;
    if ((a.t == V_INT || a.t == V_BOOL) && (b.t == V_INT || b.t == V_BOOL)) {
        int64_t x = a.t == V_INT ? a.i : a.b, y = b.t == V_INT ? b.i : b.b;
        c = x < y ? -1 : x > y;
    } else if (a.t == V_STR && b.t == V_STR) {
        size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        c = n ? memcmp(a.s.p, b.s.p, n) : 0;
        if (c == 0) c = a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
    } else {
        die(&R->f, "line %d: cannot compare %s with %s", e->line, type_name(a.t), type_name(b.t));
    }
    if (str_eq(op, "<")) return v_bool(c < 0);
    if (str_eq(op, "<=")) return v_bool(c <= 0);
    if (str_eq(op, ">")) return v_bool(c > 0);
    return v_bool(c >= 0);
}

static value eval(render *R, const expr *e) {
    step(R, e->line);
    if (++R->depth > MAX_EVAL_DEPTH) die(&R->f, "line %d: expression nested too deeply", e->line);
    value v = UNDEF;
    args a;
    switch (e->kind) {
    case E_LIT: v = e->lit; break;
    case E_NAME: v = lookup(R, e->name); break;
    case E_ATTR: {
        value obj = eval(R, e->a);
        if (obj.t == V_UNDEF) undefined_error(R, e->line, obj);
        v = obj.t == V_DICT ? get_item(R, obj, v_str(e->name), e->line) : v_undef(e->name);
        break;
    }
    case E_INDEX: { value obj = eval(R, e->a); v = get_item(R, obj, eval(R, e->b), e->line); break; }
    case E_SLICE: {
        value obj = eval(R, e->a);
        value lo = e->b ? eval(R, e->b) : UNDEF, hi = e->args[0] ? eval(R, e->args[0]) : UNDEF, st = e->args[1] ? eval(R, e->args[1]) : UNDEF;
        v = slice(R, obj, lo, hi, st, e->line);
        break;
    }
    case E_CALL:
        eval_args(R, e, &a);
        if (e->a->kind == E_NAME) v = call_function(R, e->a->name, &a, e->line);
        else if (e->a->kind == E_ATTR) v = call_method(R, eval(R, e->a->a), e->a->name, &a, e->line);
        else die(&R->f, "line %d: expression is not callable", e->line);
        break;
    case E_FILTER: { value x = eval(R, e->a); eval_args(R, e, &a); v = apply_filter(R, e->name, x, &a, e->line); break; }
    case E_TEST: { value x = eval(R, e->a); eval_args(R, e, &a); v = v_bool(apply_test(R, e->name, x, &a, e->line) != e->negate); break; }
    case E_NEG: v = arith(R, &(expr){.kind = E_BIN, .name = str_of("-"), .line = e->line}, v_int(0), eval(R, e->a)); break;
    case E_NOT: v = v_bool(!truthy(eval(R, e->a))); break;
    case E_AND: v = eval(R, e->a); if (truthy(v)) v = eval(R, e->b); break;
    case E_OR: v = eval(R, e->a); if (!truthy(v)) v = eval(R, e->b); break;
    case E_BIN: {
        value x = eval(R, e->a), y = eval(R, e->b);
        char c = e->name.p[0];
        v = (c == '=' || c == '!' || c == '<' || c == '>' || c == 'i') ? compare(R, e, x, y) : arith(R, e, x, y);
        break;
    }
    case E_COND: v = truthy(eval(R, e->c)) ? eval(R, e->a) : e->b ? eval(R, e->b) : UNDEF; break;
    case E_LIST:
        v = v_list(R, (size_t)e->n_args);
        for (int i = 0; i < e->n_args; i++) list_push(R, v.list, eval(R, e->args[i]));
        break;
    case E_DICT:
        v = v_dict(R);
        for (int i = 0; i < e->n_args; i++) {
            value k = eval(R, e->args[i]);
            if (k.t != V_STR) die(&R->f, "line %d: dict keys must be strings", e->line);
            dict_set(R, v.dict, k.s, eval(R, e->kw_vals[i]));
        }
        break;
    }
    R->depth--;
    return v;
}

static void out_put(render *R, const char *p, size_t n) {
    if (n == 0) return;
    if (n > MAX_OUTPUT_BYTES - R->out_n) die(&R->f, "rendered prompt exceeds %u MiB", MAX_OUTPUT_BYTES >> 20);
    if (R->out_n + n + 1 > R->out_cap) {
        size_t cap = R->out_cap * 2;
        while (cap < R->out_n + n + 1) cap *= 2;
        char *p2 = realloc(R->out, cap);
        if (!p2) die(&R->f, "out of memory");
        R->out = p2;
        R->out_cap = cap;
    }
    memcpy(R->out + R->out_n, p, n);
    R->out_n += n;
}

static void exec_body(render *R, const body *b);

static void exec_for(render *R, const stmt *s) {
    vlist *items = iterate(R, eval(R, s->e), s->line);
    size_t base = R->scope_base, n_vars = R->n_vars;
    R->scope_base = R->n_vars;
    if (s->filter) {            /* loop.index etc. count only the kept items */
        value kept = v_list(R, 0);
        for (size_t i = 0; i < items->n; i++) {
            step(R, s->line);
            R->n_vars = R->scope_base;
            assign(R, s->target, items->items[i]);
            if (truthy(eval(R, s->filter))) list_push(R, kept.list, items->items[i]);
        }
        items = kept.list;
    }
    value loop = v_dict(R);
    for (size_t i = 0; i < items->n; i++) {
        step(R, s->line);
        R->n_vars = R->scope_base;   /* each iteration starts a fresh scope */
        value item = items->items[i];
        if (s->target2.p) {
            if (item.t != V_LIST || item.list->n != 2) die(&R->f, "line %d: cannot unpack %s into two names", s->line, type_name(item.t));
            assign(R, s->target, item.list->items[0]);
            assign(R, s->target2, item.list->items[1]);
        } else {
            assign(R, s->target, item);
        }
        int64_t n = (int64_t)items->n, k = (int64_t)i;
        dict_set(R, loop.dict, str_of("index0"), v_int(k));
        dict_set(R, loop.dict, str_of("index"), v_int(k + 1));
        dict_set(R, loop.dict, str_of("revindex0"), v_int(n - k - 1));
        dict_set(R, loop.dict, str_of("revindex"), v_int(n - k));
        dict_set(R, loop.dict, str_of("first"), v_bool(k == 0));
        dict_set(R, loop.dict, str_of("last"), v_bool(k == n - 1));
        dict_set(R, loop.dict, str_of("length"), v_int(n));
        dict_set(R, loop.dict, str_of("previtem"), k > 0 ? items->items[i - 1] : UNDEF);
        dict_set(R, loop.dict, str_of("nextitem"), k < n - 1 ? items->items[i + 1] : UNDEF);
        assign(R, str_of("loop"), loop);
        exec_body(R, &s->b);
    }
    R->n_vars = n_vars;
    R->scope_base = base;
    if (items->n == 0) exec_body(R, &s->else_b);
}

static void exec_stmt(render *R, const stmt *s) {
    step(R, s->line);
    switch (s->kind) {
    case S_TEXT: out_put(R, s->text.p, s->text.n); break;
    case S_OUT: {
        value v = eval(R, s->e);
        if (v.t == V_STR) out_put(R, v.s.p, v.s.n);
        else { str t = to_str(R, v); out_put(R, t.p, t.n); }
        break;
    }
    case S_IF:
        for (int i = 0; i < s->n_branches; i++)
            if (!s->conds[i] || truthy(eval(R, s->conds[i]))) { exec_body(R, &s->branches[i]); break; }
        break;
    case S_FOR: exec_for(R, s); break;
    case S_SET:
        if (s->target2.p) {
            value ns = lookup(R, s->target);
            if (ns.t != V_DICT) die(&R->f, "line %d: cannot set an attribute of %s", s->line, type_name(ns.t));
            dict_set(R, ns.dict, s->target2, eval(R, s->e));
        } else {
            assign(R, s->target, eval(R, s->e));
        }
        break;
    case S_SET_BLOCK: {
        /* Render the body into a string: swap in a fresh output buffer. */
        char *saved = R->out;
        size_t saved_n = R->out_n, saved_cap = R->out_cap;
        R->out = NULL;
        R->out_n = R->out_cap = 0;
        char *tmp = malloc(64);
        if (!tmp) die(&R->f, "out of memory");
        R->out = tmp;
        R->out_cap = 64;
        jmp_buf outer;
        memcpy(outer, R->f.jb, sizeof outer);
        if (setjmp(R->f.jb)) {     /* free the side buffer, then fail outward */
            free(R->out);
            R->out = saved;
            R->out_n = saved_n;
            R->out_cap = saved_cap;
            memcpy(R->f.jb, outer, sizeof outer);
            longjmp(R->f.jb, 1);
        }
        exec_body(R, &s->b);
        memcpy(R->f.jb, outer, sizeof outer);
        char *copy = arena_alloc(&R->mem, R->out_n + 1);
        memcpy(copy, R->out, R->out_n);
        str text = {copy, R->out_n};
        free(R->out);
        R->out = saved;
        R->out_n = saved_n;
        R->out_cap = saved_cap;
        assign(R, s->target, v_str(text));
        break;
    }
    case S_BLOCK: exec_body(R, &s->b); break;
    }
}

static void exec_body(render *R, const body *b) {
    if (++R->depth > MAX_EVAL_DEPTH) die(&R->f, "blocks nested too deeply");
    for (int i = 0; i < b->n; i++) exec_stmt(R, b->items[i]);
    R->depth--;
}

/* ---- built-in templates ----------------------------------------------------------- */

typedef struct builtin {
    const char *name;
    const char *source;
    const char *stop;         /* end-of-turn text; NULL = the EOS text */
} builtin;

static const builtin builtins[] = {
    {"chatml",
     "{%- for message in messages %}"
     "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
     "{%- endfor %}"
     "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
     "<|im_end|>"},
    /* Meta's Llama 2 chat format: the system prompt sits inside the first
     * [INST] between <<SYS>> markers. */
    {"llama2",
     "{%- if messages and messages[0]['role'] == 'system' %}"
     "{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}"
     "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
     "{%- for message in loop_messages %}"
     "{%- if loop.first and system_message is defined %}"
     "{%- set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
     "{%- else %}{%- set content = message['content'] %}{%- endif %}"
     "{%- if message['role'] == 'user' %}{{- bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
     "{%- elif message['role'] == 'assistant' %}{{- ' ' + content.strip() + ' ' + eos_token }}{%- endif %}"
     "{%- endfor %}",
     NULL},
    {"llama3",
     "{{- bos_token }}"
     "{%- for message in messages %}"
     "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
     "{%- endfor %}"
     "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}",
     "<|eot_id|>"},
    /* Mistral's published format, "<s>[INST] q [/INST] a</s>[INST] q2 [/INST]";
     * it has no system role, so a system prompt leads the first user turn. */
    {"mistral",
     "{%- if messages and messages[0]['role'] == 'system' %}"
     "{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}"
     "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
     "{{- bos_token }}"
     "{%- for message in loop_messages %}"
     "{%- if message['role'] == 'user' %}"
     "{%- if loop.first and system_message is defined %}{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}"
     "{%- else %}{{- '[INST] ' + message['content'] + ' [/INST]' }}{%- endif %}"
     "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}{%- endif %}"
     "{%- endfor %}",
     NULL},
    /* Gemma has no system role either: the system prompt opens the first
     * user turn, as Gemma 2 and 3's own templates do. */
    {"gemma",
     "{{- bos_token }}"
     "{%- if messages and messages[0]['role'] == 'system' %}"
     "{%- set first_prefix = messages[0]['content'] | trim + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
     "{%- else %}{%- set first_prefix = '' %}{%- set loop_messages = messages %}{%- endif %}"
     "{%- for message in loop_messages %}"
     "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
     "{{- '<start_of_turn>' + role + '\\n' + (first_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' }}"
     "{%- endfor %}"
     "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}",
     "<end_of_turn>"},
    {"phi3",
     "{%- for message in messages %}"
     "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
     "{%- endfor %}"
     "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- else %}{{- eos_token }}{%- endif %}",
     "<|end|>"},
    {"zephyr",
     "{%- for message in messages %}"
     "{{- '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
     "{%- endfor %}"
     "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}",
     NULL},
};

const char *const gl_chat_template_builtin_names[] = {"chatml", "llama2", "llama3", "mistral", "gemma", "phi3", "zephyr", NULL};

/* Which format a template text is, by the special tokens it writes. */
static const char *detect_family(const char *src) {
    if (strstr(src, "<|im_start|>")) return "chatml";
    if (strstr(src, "<|start_header_id|>")) return "llama3";
    if (strstr(src, "<start_of_turn>")) return "gemma";
    if (strstr(src, "<|assistant|>") && strstr(src, "<|end|>")) return "phi3";
    if (strstr(src, "<|assistant|>")) return "zephyr";
    if (strstr(src, "[INST]") && strstr(src, "<<SYS>>")) return "llama2";
    if (strstr(src, "[INST]")) return "mistral";
    return NULL;
}

static const builtin *find_builtin(const char *name) {
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (strcmp(builtins[i].name, name) == 0) return &builtins[i];
    return NULL;
}

/* ---- public API ------------------------------------------------------------------- */

struct gl_chat_template {
    arena mem;                /* parse tree */
    body root;
    char name[16];
    bool model_source;
    bool has_tools;           /* the source reads the variable `tools` */
    char *bos, *eos;
    const char *stops[1];
    int n_stops;
};

/* Parse src into t->root; false with err set on a syntax error. */
static bool parse_into(gl_chat_template *t, const char *src, gl_error *err) {
    size_t len = strlen(src);
    if (len > MAX_SOURCE_BYTES) return gl_error_set(err, "chat template is too long (%zu bytes)", len), false;
    /* Jinja drops one newline at the very end of a template. */
    if (len && src[len - 1] == '\n') len -= 1 + (len > 1 && src[len - 2] == '\r');
    else if (len && src[len - 1] == '\r') len--;
    failer f = {.err = err};
    arena_free(&t->mem);
    t->mem = (arena){.cap = MAX_SOURCE_BYTES * 64, .f = &f};
    lexer L = {.f = &f, .a = &t->mem, .src = src, .len = len, .line = 1};
    if (setjmp(f.jb)) {
        arena_free(&t->mem);
        return false;
    }
    lex(&L);
    t->has_tools = false;
    for (size_t i = 0; i < L.n; i++)
        if (L.toks[i].kind == T_NAME && str_eq(L.toks[i].s, "tools") &&
            !(i && L.toks[i - 1].kind == T_OP && str_eq(L.toks[i - 1].s, ".")))
            t->has_tools = true;
    parser P = {.f = &f, .a = &t->mem, .toks = L.toks};
    t->root = parse_body(&P, NULL, NULL);
    t->mem.f = NULL;          /* no more allocation after parsing */
    return true;
}

static char *dup_or_empty(const char *s) {
    size_t n = s ? strlen(s) : 0;
    char *p = malloc(n + 1);
    if (p) { if (n) memcpy(p, s, n); p[n] = 0; }
    return p;
}

gl_chat_template *gl_chat_template_create(const char *source, const char *override_name,
                                          const char *bos, const char *eos, gl_error *err) {
    gl_chat_template *t = calloc(1, sizeof *t);
    if (!t) return gl_error_set(err, "out of memory"), NULL;
    t->bos = dup_or_empty(bos);
    t->eos = dup_or_empty(eos);
    if (!t->bos || !t->eos) { gl_chat_template_free(t); return gl_error_set(err, "out of memory"), NULL; }

    const builtin *b = NULL;
    if (override_name && strcmp(override_name, "jinja") != 0) {
        b = find_builtin(override_name);
        if (!b) {
            gl_chat_template_free(t);
            gl_error_set(err, "unknown chat template '%.40s' (known: jinja, chatml, llama2, llama3, mistral, gemma, phi3, zephyr)", override_name);
            return NULL;
        }
    } else if (source && *source) {
        gl_error perr;
        if (parse_into(t, source, &perr)) {
            const char *family = detect_family(source);
            snprintf(t->name, sizeof t->name, "%s", family ? family : "jinja");
            t->model_source = true;
        } else {
            const char *family = override_name ? NULL : detect_family(source);
            if (!family) {
                gl_chat_template_free(t);
                gl_error_set(err, "chat template: %s", perr.message);
                return NULL;
            }
            b = find_builtin(family);
        }
    } else if (override_name) {
        gl_chat_template_free(t);
        gl_error_set(err, "the model has no chat template to use as 'jinja'");
        return NULL;
    } else {
        /* No template in the file (Gemma 3's GGUFs ship none): Gemma's BOS
         * text names its format, anything else gets ChatML. */
        b = find_builtin(strcmp(t->bos, "<bos>") == 0 ? "gemma" : "chatml");
    }
    if (b) {
        if (!parse_into(t, b->source, err)) { gl_chat_template_free(t); return NULL; }
        snprintf(t->name, sizeof t->name, "%s", b->name);
    }
    const builtin *fam = find_builtin(t->name);
    const char *stop = fam && fam->stop ? fam->stop : t->eos;
    if (stop && *stop) t->stops[t->n_stops++] = stop;
    return t;
}

void gl_chat_template_free(gl_chat_template *t) {
    if (!t) return;
    arena_free(&t->mem);
    free(t->bos);
    free(t->eos);
    free(t);
}

char *gl_chat_template_render(const gl_chat_template *t, const gl_chat_message *msgs, int n,
                              bool add_generation_prompt, gl_error *err) {
    return gl_chat_template_render_vars(t, msgs, n, add_generation_prompt, NULL, 0, err);
}

char *gl_chat_template_render_vars(const gl_chat_template *t, const gl_chat_message *msgs, int n,
                                   bool add_generation_prompt, const gl_chat_var *vars, int n_vars,
                                   gl_error *err) {
    if (n < 0 || (n > 0 && !msgs)) return gl_error_set(err, "invalid message list"), NULL;
    render *R = calloc(1, sizeof *R);
    if (!R) return gl_error_set(err, "out of memory"), NULL;
    R->f.err = err;
    R->mem = (arena){.cap = MAX_RENDER_MEMORY, .f = &R->f};
    R->steps_left = MAX_STEPS;
    R->out = malloc(256);
    R->out_cap = 256;
    char *volatile result = NULL;
    if (!R->out) { gl_error_set(err, "out of memory"); goto done; }
    if (setjmp(R->f.jb)) {
        free(R->out);
        goto done;
    }
    value messages = v_list(R, (size_t)n);
    for (int i = 0; i < n; i++) {
        value m = v_dict(R);
        dict_set(R, m.dict, str_of("role"), v_str(str_of(msgs[i].role)));
        dict_set(R, m.dict, str_of("content"), msgs[i].content ? v_str(str_of(msgs[i].content)) : (value){.t = V_NONE});
        if (msgs[i].fields) {
            value f = json_value(R, msgs[i].fields, "a message's fields");
            if (f.t != V_DICT) die(&R->f, "a message's fields must be a JSON object");
            for (size_t k = 0; k < f.dict->n; k++)
                if (!str_eq(f.dict->keys[k], "role") && !str_eq(f.dict->keys[k], "content"))
                    dict_set(R, m.dict, f.dict->keys[k], f.dict->vals[k]);
        }
        list_push(R, messages.list, m);
    }
    for (int i = 0; i < n_vars; i++) {
        const gl_chat_var *v = &vars[i];
        assign(R, str_of(v->name), v->type == GL_CHAT_VAR_BOOL ? v_bool(v->b)
                                 : v->type == GL_CHAT_VAR_INT  ? v_int(v->i)
                                 : v->type == GL_CHAT_VAR_STR  ? v_str(str_of(v->s))
                                 : v->type == GL_CHAT_VAR_JSON ? json_value(R, v->s, v->name)
                                                            : (value){.t = V_NONE});
    }
    assign(R, str_of("messages"), messages);
    assign(R, str_of("bos_token"), v_str(str_of(t->bos)));
    assign(R, str_of("eos_token"), v_str(str_of(t->eos)));
    assign(R, str_of("add_generation_prompt"), v_bool(add_generation_prompt));
    R->scope_base = R->n_vars;
    exec_body(R, &t->root);
    R->out[R->out_n] = 0;
    result = R->out;
done:
    cJSON_Delete(R->json);
    arena_free(&R->mem);
    free(R);
    return result;
}

const char *gl_chat_template_name(const gl_chat_template *t) { return t->name; }
bool gl_chat_template_is_model_source(const gl_chat_template *t) { return t->model_source; }
bool gl_chat_template_has_tools(const gl_chat_template *t) { return t->has_tools; }

const char *const *gl_chat_template_stop_strings(const gl_chat_template *t, int *n) {
    *n = t->n_stops;
    return t->stops;
}
