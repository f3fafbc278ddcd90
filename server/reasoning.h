/* reasoning.h -- a reasoning model's thinking, apart from its answer
 * (docs/reasoning.md).
 *
 * The markers of the thinking block are found once per model: from the
 * chat template's text and the vocabulary (Qwen3's and DeepSeek-R1's
 * <think> and </think>, and others), or from a tag that opens a think
 * block at the end of the template's generation prompt. A request picks
 * the reasoning_format and budget; the splitter then takes the reply's
 * text as it streams and sends each byte to the reasoning or the content,
 * with the same rule the engine uses to count thinking tokens (engine
 * reasoning.h): a block at the very start of the output (after whitespace),
 * or from the first byte when the prompt opened it. */
#ifndef GL_SERVER_REASONING_H
#define GL_SERVER_REASONING_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "genloop.h"
#include "genloop_chat.h"
#include "jbuf.h"
#include "params.h"

#define REASONING_MARKER_MAX 48

typedef struct reasoning_markers {
    char open[REASONING_MARKER_MAX];  /* "" when the model shows no thinking block */
    char close[REASONING_MARKER_MAX];
} reasoning_markers;

typedef enum {
    REASONING_NONE,           /* the thinking stays in the content, as the model wrote it */
    REASONING_AUTO,           /* separated with the model's markers */
    REASONING_DEEPSEEK,       /* separated with <think> and </think> whatever the model says */
} reasoning_format;

/* "none", "auto", "deepseek"; false for anything else. */
bool reasoning_format_parse(const char *s, reasoning_format *out);

/* The model's markers, or empty ones. template_source is the model's chat
 * template text (may be NULL); t renders the generation prompt. */
void reasoning_find_markers(const gl_model *m, const char *template_source, const gl_chat_template *t,
                            reasoning_markers *out);

/* A request's reasoning settings. */
typedef struct reasoning_opts {
    reasoning_format format;
    int budget;               /* thinking tokens at most; -1 = no bound */
} reasoning_opts;

/* Reads reasoning_format and the budget (thinking_budget_tokens, or
 * llama.cpp's reasoning_budget_tokens) over the server's defaults. Returns
 * 0, or -1 with e filled (a budget for a model without markers is a 400). */
int reasoning_parse(const cJSON *body, reasoning_format default_format, int default_budget,
                    const reasoning_markers *mk, reasoning_opts *out, params_error *e);

/* The engine's view of a request whose rendered prompt is prompt: false
 * (nothing to do) when there are no markers. out points into mk. */
bool reasoning_request(const reasoning_markers *mk, const reasoning_opts *o, const char *prompt,
                       bool grammar_after, gl_reasoning *out);
/* The markers a request separates with: NULL for none. */
const reasoning_markers *reasoning_split_markers(const reasoning_markers *mk, reasoning_format f);

/* The streaming splitter: text deltas in, reasoning and content deltas out. */
typedef struct reasoning_split {
    const char *open, *close; /* not owned */
    size_t open_len, close_len;
    int state;                /* before the block, inside, after */
    char held[REASONING_MARKER_MAX + 256]; /* bytes that may still be (part of) a marker */
    size_t held_len;
    bool content_started;     /* whitespace after the block is dropped until the answer starts */
} reasoning_split;

/* opened: the prompt opened the block (the output starts inside it). */
void reasoning_split_init(reasoning_split *s, const reasoning_markers *mk, bool opened);
/* Appends p[0..n)'s thinking to reasoning and its answer to content. */
void reasoning_split_feed(reasoning_split *s, const char *p, size_t n, jbuf *reasoning, jbuf *content);
/* The reply ended: what was held goes where it belongs. */
void reasoning_split_finish(reasoning_split *s, jbuf *reasoning, jbuf *content);

#endif
