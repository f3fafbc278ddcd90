/* reasoning.c -- markers, request fields and the splitter. */
#include "reasoning.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool reasoning_format_parse(const char *s, reasoning_format *out) {
    static const char *const names[] = { "none", "auto", "deepseek" };
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (reasoning_format)i;
            return true;
        }
    return false;
}

/* ---- markers --------------------------------------------------------------------- */

/* Pairs known from reasoning models' templates and vocabularies. */
static const char *const known_pairs[][2] = {
    { "<think>", "</think>" },                       /* Qwen3, QwQ, DeepSeek-R1 and its distills */
    { "<|START_THINKING|>", "<|END_THINKING|>" },    /* Command R7B */
    { "<thinking>", "</thinking>" },
    { "<seed:think>", "</seed:think>" },             /* Seed-OSS */
    { "\xe2\x97\x81think\xe2\x96\xb7", "\xe2\x97\x81/think\xe2\x96\xb7" }, /* Kimi: ◁think▷ */
};
#define N_PAIRS (sizeof known_pairs / sizeof known_pairs[0])

/* The text is one token of the vocabulary. */
static bool is_one_token(const gl_model *m, const char *text) {
    int32_t *ids = NULL;
    gl_error err;
    int n = gl_tokenize(m, text, strlen(text), GL_TOKENIZE_PARSE_SPECIAL, &ids, &err);
    bool one = n == 1 && !strcmp(gl_token_text(m, ids[0]), text);
    free(ids);
    return one;
}

static void set_markers(reasoning_markers *out, const char *open, const char *close) {
    snprintf(out->open, sizeof out->open, "%s", open);
    snprintf(out->close, sizeof out->close, "%s", close);
}

/* The generic rule: the generation prompt (what add_generation_prompt
 * adds) ends with a tag that names thinking, <X>, which </X> closes. */
static bool from_generation_prompt(const gl_chat_template *t, reasoning_markers *out) {
    gl_chat_message msg = { "user", "x", NULL };
    gl_error err;
    char *with = gl_chat_template_render(t, &msg, 1, true, &err);
    char *without = with ? gl_chat_template_render(t, &msg, 1, false, &err) : NULL;
    bool found = false;
    if (with && without && !strncmp(with, without, strlen(without))) {
        char *gen = with + strlen(without);
        size_t n = strlen(gen);
        while (n > 0 && isspace((unsigned char)gen[n - 1])) n--;
        gen[n] = 0;
        char *lt = n > 0 && gen[n - 1] == '>' ? strrchr(gen, '<') : NULL;
        size_t tag_len = lt ? (size_t)(gen + n - lt) : 0;
        if (lt && lt[1] != '/' && tag_len + 2 < REASONING_MARKER_MAX) {
            char lower[REASONING_MARKER_MAX];
            for (size_t i = 0; i <= tag_len; i++) lower[i] = (char)tolower((unsigned char)lt[i]);
            if (strstr(lower, "think") || strstr(lower, "reason")) {
                char close[REASONING_MARKER_MAX];
                snprintf(close, sizeof close, "</%s", lt + 1);
                set_markers(out, lt, close);
                found = true;
            }
        }
    }
    free(with);
    free(without);
    return found;
}

void reasoning_find_markers(const gl_model *m, const char *source, const gl_chat_template *t,
                            reasoning_markers *out) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; source && i < N_PAIRS; i++)
        if (strstr(source, known_pairs[i][0]) && strstr(source, known_pairs[i][1])) {
            set_markers(out, known_pairs[i][0], known_pairs[i][1]);
            return;
        }
    for (size_t i = 0; i < N_PAIRS; i++)
        if (is_one_token(m, known_pairs[i][0]) && is_one_token(m, known_pairs[i][1])) {
            set_markers(out, known_pairs[i][0], known_pairs[i][1]);
            return;
        }
    if (t) from_generation_prompt(t, out);
}

/* ---- request fields ---------------------------------------------------------------- */

static const cJSON *given(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int reasoning_parse(const cJSON *body, reasoning_format default_format, int default_budget,
                    const reasoning_markers *mk, reasoning_opts *o, params_error *e) {
    o->format = default_format;
    o->budget = -1;
    const cJSON *f = given(body, "reasoning_format");
    if (f && (!cJSON_IsString(f) || !reasoning_format_parse(f->valuestring, &o->format)))
        return params_fail(e, 400, "reasoning_format", "invalid_value",
                           "'reasoning_format' must be 'none', 'auto' or 'deepseek'");
    int budget = -1, alias = -1;
    if (params_get_int(body, "thinking_budget_tokens", -1, 1 << 24, &budget, e) ||
        params_get_int(body, "reasoning_budget_tokens", -1, 1 << 24, &alias, e))
        return -1;
    if (given(body, "thinking_budget_tokens") && given(body, "reasoning_budget_tokens") && budget != alias)
        return params_fail(e, 400, "reasoning_budget_tokens", "invalid_value",
                           "give 'thinking_budget_tokens' or 'reasoning_budget_tokens', not both");
    if (budget < 0) budget = alias;
    bool asked = budget >= 0;
    if (budget < 0) budget = default_budget; /* -1 in the request: the server's default */
    bool has_markers = o->format == REASONING_DEEPSEEK || mk->open[0];
    if (asked && !has_markers)
        return params_fail(e, 400, given(body, "thinking_budget_tokens") ? "thinking_budget_tokens"
                                                                         : "reasoning_budget_tokens",
                           "invalid_value",
                           "this model's chat template shows no thinking block to bound "
                           "(reasoning_format 'deepseek' assumes <think>...</think>)");
    o->budget = has_markers ? budget : -1;
    return 0;
}

static const reasoning_markers deepseek_markers = { "<think>", "</think>" };

static const reasoning_markers *request_markers(const reasoning_markers *mk, reasoning_format f) {
    if (f == REASONING_DEEPSEEK) return &deepseek_markers;
    return mk->open[0] ? mk : NULL;
}

const reasoning_markers *reasoning_split_markers(const reasoning_markers *mk, reasoning_format f) {
    return f == REASONING_NONE ? NULL : request_markers(mk, f);
}

bool reasoning_request(const reasoning_markers *mk, const reasoning_opts *o, const char *prompt,
                       bool grammar_after, gl_reasoning *out) {
    const reasoning_markers *use = request_markers(mk, o->format);
    if (!use) return false;
    size_t n = strlen(prompt), len = strlen(use->open);
    while (n > 0 && isspace((unsigned char)prompt[n - 1])) n--;
    *out = (gl_reasoning){ .open = use->open, .close = use->close, .budget = o->budget,
                           .opened = n >= len && !memcmp(prompt + n - len, use->open, len),
                           .grammar_after = grammar_after };
    return true;
}

/* ---- the splitter ---------------------------------------------------------------- */

enum { SPLIT_START, SPLIT_INSIDE, SPLIT_AFTER };

void reasoning_split_init(reasoning_split *s, const reasoning_markers *mk, bool opened) {
    memset(s, 0, sizeof *s);
    s->open = mk->open;
    s->close = mk->close;
    s->open_len = strlen(mk->open);
    s->close_len = strlen(mk->close);
    s->state = opened ? SPLIT_INSIDE : SPLIT_START;
}

/* Whitespace that starts a part (the thinking, the answer) is dropped. */
static void put(reasoning_split *s, jbuf *out, const char *p, size_t n) {
    while (!s->content_started && n > 0 && isspace((unsigned char)*p)) p++, n--;
    if (n == 0) return;
    s->content_started = true;
    jbuf_raw(out, p, n);
}

/* The longest suffix of b[0..n) that starts the marker. */
static size_t partial_suffix(const char *b, size_t n, const char *marker, size_t len) {
    for (size_t k = len - 1 < n ? len - 1 : n; k > 0; k--)
        if (!memcmp(b + n - k, marker, k)) return k;
    return 0;
}

static void feed_held(reasoning_split *s, jbuf *reasoning, jbuf *content);

static void after_block(reasoning_split *s, size_t from, jbuf *reasoning, jbuf *content) {
    size_t rest = s->held_len - from;
    memmove(s->held, s->held + from, rest);
    s->held_len = rest;
    s->content_started = false;
    feed_held(s, reasoning, content);
}

/* Moves what can be decided from held[] to the outputs. */
static void feed_held(reasoning_split *s, jbuf *reasoning, jbuf *content) {
    if (s->state == SPLIT_START) {
        size_t ws = 0;
        while (ws < s->held_len && isspace((unsigned char)s->held[ws])) ws++;
        size_t have = s->held_len - ws, cmp = have < s->open_len ? have : s->open_len;
        bool prefix = !memcmp(s->held + ws, s->open, cmp) && s->held_len < sizeof s->held;
        if (prefix && have < s->open_len) return;
        if (!prefix) {
            s->state = SPLIT_AFTER;
            s->content_started = true; /* no block: the reply as written */
            jbuf_raw(content, s->held, s->held_len);
            s->held_len = 0;
            return;
        }
        s->state = SPLIT_INSIDE;
        after_block(s, ws + s->open_len, reasoning, content);
        return;
    }
    if (s->state == SPLIT_INSIDE) {
        for (size_t i = 0; i + s->close_len <= s->held_len; i++)
            if (!memcmp(s->held + i, s->close, s->close_len)) {
                put(s, reasoning, s->held, i);
                s->state = SPLIT_AFTER;
                after_block(s, i + s->close_len, reasoning, content);
                return;
            }
        size_t keep = partial_suffix(s->held, s->held_len, s->close, s->close_len);
        put(s, reasoning, s->held, s->held_len - keep);
        memmove(s->held, s->held + s->held_len - keep, keep);
        s->held_len = keep;
        return;
    }
    put(s, content, s->held, s->held_len);
    s->held_len = 0;
}

void reasoning_split_feed(reasoning_split *s, const char *p, size_t n, jbuf *reasoning, jbuf *content) {
    if (s->state == SPLIT_AFTER && s->content_started) {
        jbuf_raw(content, p, n);
        return;
    }
    while (n > 0) {
        size_t take = sizeof s->held - s->held_len;
        if (take > n) take = n;
        memcpy(s->held + s->held_len, p, take);
        s->held_len += take;
        p += take;
        n -= take;
        feed_held(s, reasoning, content);
    }
}

void reasoning_split_finish(reasoning_split *s, jbuf *reasoning, jbuf *content) {
    if (s->state == SPLIT_INSIDE) put(s, reasoning, s->held, s->held_len);
    else if (s->state == SPLIT_START) jbuf_raw(content, s->held, s->held_len);
    else put(s, content, s->held, s->held_len);
    s->held_len = 0;
}
