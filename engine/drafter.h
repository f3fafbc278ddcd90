/* drafter.h -- proposals for speculative decoding.
 *
 * A drafter guesses the tokens that follow a sequence; the engine runs the
 * guesses through the target model in the same step as the sequence's next
 * token and keeps the longest prefix the target's own sampling agrees with
 * (engine.c, verify_drafts). A proposal is deterministic here (a point mass),
 * so "sample from the target, accept while it equals the draft" is exactly
 * the speculative sampling rule and the output distribution is unchanged.
 *
 * The n-gram drafter (prompt lookup) finds the latest earlier occurrence of
 * the sequence's last n tokens (n from ngram_max down to ngram_min) in its
 * own prompt and output and proposes what followed it. */
#ifndef GL_DRAFTER_H
#define GL_DRAFTER_H

#include <stdint.h>

typedef struct drafter_params {
    int mode;                 /* GL_SPEC_NGRAM (genloop.h) */
    int ngram_min, ngram_max; /* suffix lengths tried, longest first */
} drafter_params;

typedef struct gl_drafter gl_drafter;

/* NULL when out of memory or mode is not a drafter. */
gl_drafter *drafter_create(const drafter_params *p);
void drafter_free(gl_drafter *d);

/* Writes at most max_draft tokens guessed to follow tokens[0..n_tokens) to
 * out; returns how many (0: no guess). */
int drafter_propose(const gl_drafter *d, const int32_t *tokens, int n_tokens, int max_draft, int32_t *out);

#endif
