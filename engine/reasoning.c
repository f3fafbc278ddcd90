/* reasoning.c -- a small state machine per request: before the block (the
 * output may still spell the opening text), inside it (counting, watching
 * for the closing text), forcing the closing text, after it. */
#include "reasoning.h"

#include <stdlib.h>
#include <string.h>

#include "gl_error.h"

enum { RS_START, RS_THINK, RS_FORCE, RS_DONE };

#define RS_MAX_HEAD 256 /* bytes of leading whitespace and opening text looked at */

struct rs_state {
    char *open, *close;
    size_t open_len, close_len;
    int budget;               /* -1 = none */
    bool grammar_after;
    int32_t *open_ids, *close_ids;
    int n_open_ids, n_close_ids;
    int state;
    char head[RS_MAX_HEAD];   /* RS_START: the output so far */
    size_t head_len;
    int n_head_tokens;
    bool head_is_open_ids;    /* every token so far is the opening text's next token */
    char *tail;               /* RS_THINK: the block's last bytes, for the closing text */
    size_t tail_len, tail_cap;
    int n_inside;             /* tokens between the markers */
    int n_thinking;           /* tokens of the block, markers included */
    int force_pos;            /* RS_FORCE: close_ids forced so far */
};

void rs_free(rs_state *s) {
    if (!s) return;
    free(s->open);
    free(s->close);
    free(s->open_ids);
    free(s->close_ids);
    free(s->tail);
    free(s);
}

/* text's tokens, which must spell text again piece by piece. */
static int encode_exact(const gl_tokenizer *tok, const char *text, int32_t **ids, gl_error *err) {
    int n = tok_encode(tok, text, strlen(text), GL_TOKENIZE_PARSE_SPECIAL, ids, err);
    if (n <= 0) {
        if (n == 0) gl_error_set(err, "the reasoning marker '%.40s' has no tokens", text);
        return -1;
    }
    size_t at = 0, len = strlen(text);
    for (int i = 0; i < n; i++) {
        size_t pl = 0;
        const char *p = tok_piece(tok, (*ids)[i], &pl);
        if (!p || at + pl > len || memcmp(text + at, p, pl) != 0) {
            gl_error_set(err, "the reasoning marker '%.40s' does not tokenize to its own text", text);
            return -1;
        }
        at += pl;
    }
    if (at != len) {
        gl_error_set(err, "the reasoning marker '%.40s' does not tokenize to its own text", text);
        return -1;
    }
    return n;
}

static void enter_block(rs_state *s) {
    s->state = s->budget == 0 ? RS_FORCE : RS_THINK;
    s->force_pos = 0;
}

rs_state *rs_create(const gl_reasoning *r, const gl_tokenizer *tok, gl_error *err) {
    if (!r->open || !r->close || !r->open[0] || !r->close[0] || strlen(r->open) >= RS_MAX_HEAD) {
        gl_error_set(err, "the reasoning markers must be non-empty texts");
        return NULL;
    }
    rs_state *s = calloc(1, sizeof *s);
    if (!s || !(s->open = strdup(r->open)) || !(s->close = strdup(r->close))) {
        rs_free(s);
        gl_error_set(err, "out of memory");
        return NULL;
    }
    s->open_len = strlen(s->open);
    s->close_len = strlen(s->close);
    s->budget = r->budget < 0 ? -1 : r->budget;
    s->grammar_after = r->grammar_after;
    s->head_is_open_ids = true;
    s->n_open_ids = s->grammar_after && !r->opened ? encode_exact(tok, s->open, &s->open_ids, err) : 0;
    s->n_close_ids = s->budget >= 0 ? encode_exact(tok, s->close, &s->close_ids, err) : 0;
    if (s->n_open_ids < 0 || s->n_close_ids < 0) {
        rs_free(s);
        return NULL;
    }
    if (r->opened) enter_block(s);
    return s;
}

int32_t rs_forced(const rs_state *s) {
    return s->state == RS_FORCE ? s->close_ids[s->force_pos] : -1;
}

bool rs_grammar_masks(const rs_state *s, int32_t *keep) {
    *keep = -1;
    if (!s->grammar_after) return true;
    if (s->state == RS_START && s->head_is_open_ids && s->n_head_tokens < s->n_open_ids)
        *keep = s->open_ids[s->n_head_tokens];
    return s->state == RS_START || s->state == RS_DONE;
}

int rs_thinking_tokens(const rs_state *s) { return s->n_thinking; }

/* An incomplete UTF-8 character at the end of b[0..n). */
static bool ends_mid_char(const char *b, size_t n) {
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        unsigned char c = (unsigned char)b[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k;
    }
    return false;
}

/* Inside the block: the bytes join the tail; true when the closing text is
 * in it. The tail keeps the last close_len - 1 bytes (and at least 3 for
 * the UTF-8 check) between calls. */
static bool think_bytes(rs_state *s, const char *p, size_t n) {
    if (s->tail_len + n > s->tail_cap) {
        size_t cap = (s->tail_len + n) * 2 + 16;
        char *t = realloc(s->tail, cap);
        if (!t) return false; /* without memory the block just runs on */
        s->tail = t;
        s->tail_cap = cap;
    }
    memcpy(s->tail + s->tail_len, p, n);
    s->tail_len += n;
    for (size_t i = 0; i + s->close_len <= s->tail_len; i++)
        if (!memcmp(s->tail + i, s->close, s->close_len)) return true;
    size_t keep = s->close_len > 4 ? s->close_len - 1 : 4;
    if (s->tail_len > keep) {
        memmove(s->tail, s->tail + s->tail_len - keep, keep);
        s->tail_len = keep;
    }
    return false;
}

static int start_accept(rs_state *s, int32_t t, const char *piece, size_t n, const char **held,
                        size_t *held_len) {
    if (s->grammar_after && (s->n_head_tokens >= s->n_open_ids || t != s->open_ids[s->n_head_tokens]))
        s->head_is_open_ids = false;
    s->n_head_tokens++;
    size_t room = sizeof s->head - s->head_len;
    size_t take = n < room ? n : room;
    memcpy(s->head + s->head_len, piece, take);
    s->head_len += take;
    size_t ws = 0;
    while (ws < s->head_len && strchr(" \t\r\n", s->head[ws])) ws++;
    size_t have = s->head_len - ws;
    size_t cmp = have < s->open_len ? have : s->open_len;
    bool prefix = take == n && !memcmp(s->head + ws, s->open, cmp) && (!s->grammar_after || s->head_is_open_ids);
    if (prefix && have < s->open_len) return s->grammar_after ? 0 : 1; /* may still open */
    if (!prefix) {
        s->state = RS_DONE;
        *held = s->head;
        *held_len = s->head_len;
        return s->grammar_after ? 2 : 1;
    }
    s->n_thinking = s->n_head_tokens;
    enter_block(s);
    if (have > s->open_len && think_bytes(s, s->head + ws + s->open_len, have - s->open_len)) s->state = RS_DONE;
    return s->grammar_after ? 0 : 1;
}

int rs_accept(rs_state *s, int32_t t, const char *piece, size_t n, const char **held, size_t *held_len) {
    switch (s->state) {
    case RS_START:
        return start_accept(s, t, piece, n, held, held_len);
    case RS_THINK:
        s->n_thinking++;
        if (think_bytes(s, piece, n)) {
            s->state = RS_DONE;
        } else {
            s->n_inside++;
            if (s->budget >= 0 && s->n_inside >= s->budget && !ends_mid_char(s->tail, s->tail_len)) {
                s->state = RS_FORCE;
                s->force_pos = 0;
            }
        }
        return s->grammar_after ? 0 : 1;
    case RS_FORCE:
        s->n_thinking++;
        if (++s->force_pos == s->n_close_ids) s->state = RS_DONE;
        return s->grammar_after ? 0 : 1;
    default:
        return 1;
    }
}
