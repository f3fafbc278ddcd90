/* sampler.h -- turns a row of logits into the next token.
 *
 * The chain (docs/sampling.md): logit bias, repetition / presence /
 * frequency penalties over the recent history, DRY; then greedy if
 * temperature is 0, else top-n-sigma, top-k, temperature (or dynamic
 * temperature), typical-p, top-p, min-p, XTC and a draw from the
 * per-sampler RNG; with mirostat on, temperature and mirostat replace
 * everything after DRY. Log-probabilities reported are those of the model's
 * raw distribution (log-softmax of the logits before any processing). All
 * scratch memory is allocated by sampler_create: sampling never allocates. */
#ifndef GL_SAMPLER_H
#define GL_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "genloop.h"

typedef struct gl_sampler gl_sampler;

/* DRY's window when params.dry_penalty_last_n is -1 ("the context"):
 * request_create passes the context size instead. */
#define SAMPLER_DRY_DEFAULT_WINDOW 4096

/* Copies params (the logit bias array and the DRY breaker strings too).
 * NULL on allocation failure. */
gl_sampler *sampler_create(const gl_sampling_params *params, int n_vocab);
void sampler_free(gl_sampler *s);

/* The bytes token id adds to the text (NULL for none), for DRY's breakers. */
typedef const char *(*sampler_piece_fn)(const void *ctx, int32_t id, size_t *len);
/* Gives DRY the vocabulary's text (piece must stay valid while s lives):
 * tokens holding a breaker string become breakers, and a breaker spread
 * over several tokens is found in the text of the history. Without it
 * only tokens marked by sampler_set_breaker break a repeat. Scans the
 * vocabulary once; nothing when DRY is off. */
void sampler_set_text(gl_sampler *s, sampler_piece_fn piece, const void *ctx);
/* A DRY repeat never runs across this token, and it is never penalised. */
void sampler_set_breaker(gl_sampler *s, int32_t token);

/* Record a token in the penalty and DRY history (prompt tokens and
 * generated ones). */
void sampler_accept(gl_sampler *s, int32_t token);
/* Forget the history (used when a preempted request restarts); the RNG and
 * mirostat's state go on. */
void sampler_reset(gl_sampler *s);

/* Pick a token from logits[n_vocab], used as scratch: on return it holds the
 * biased and penalised logits (NaN read as -inf). Writes the chosen token's
 * raw log-probability to *logprob (may be NULL) and the params.n_logprobs
 * most likely tokens, best first, to top (capacity params.n_logprobs, which
 * sampler_create clamps to n_vocab; top may be NULL). Does not call
 * sampler_accept. */
int32_t sampler_sample(gl_sampler *s, float *logits, float *logprob, gl_top_logprob *top);
/* The first of the largest of logits[0..n): the greedy token. */
int32_t sampler_argmax(const float *logits, int n);

/* Log-softmax helper shared with prompt logprobs: fills top[0..n_top) with the
 * n_top best entries of logits (ties: lower id first; slots past n_vocab get
 * token -1) and returns log p(token). NaN counts as -inf. logits unchanged. */
float sampler_logprob(const float *logits, int n_vocab, int32_t token, gl_top_logprob *top, int n_top);

#endif
