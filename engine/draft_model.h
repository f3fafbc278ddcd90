/* draft_model.h -- speculative decoding's proposals from a draft model.
 *
 * A (smaller) model with the target's vocabulary proposes its own greedy
 * continuation: the argmax token, k times. A proposal is a point mass, so the
 * engine's verification ("sample from the target, accept while it equals the
 * draft", drafter.h) stays the exact speculative sampling rule.
 *
 * The draft model has its own paged KV pool (no prefix cache). Each sequence's
 * draft state remembers the tokens its cache holds; a proposal first drops
 * the positions that no longer match the sequence (rejected drafts, anything
 * that changed), feeds the tokens it has not seen in chunks, then runs k - 1
 * single-token steps. Drafting runs sequence by sequence before the target's
 * step, on the engine's compute threads. */
#ifndef GL_DRAFT_MODEL_H
#define GL_DRAFT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "genloop.h"
#include "kernels.h"

typedef struct dm_drafter dm_drafter;
typedef struct dm_seq dm_seq; /* one sequence's draft cache */

/* NULL with err set when draft's vocabulary differs from target's (size, token
 * texts, BOS/EOS) or memory runs out. The pool holds pool_tokens positions in
 * blocks of block_size; chunk bounds one forward pass. pool must have room
 * for draft's widest row and chunk tokens. draft is not owned. */
dm_drafter *dm_create(const gl_model *draft, const gl_model *target, kern_pool *pool, int chunk, int pool_tokens,
                      int block_size, gl_kv_type kv_type, gl_error *err);
/* Frees every sequence state too. */
void dm_free(dm_drafter *d);

/* Writes at most max_draft tokens proposed to follow tokens[0..n_tokens) to
 * out; returns how many (0 when the draft pool is full). *s is the
 * sequence's state, created on first use (cap_tokens: the sequence's limit). */
int dm_propose(dm_drafter *d, dm_seq **s, const int32_t *tokens, int n_tokens, int cap_tokens, int max_draft,
               int32_t *out);
/* Frees a sequence's state and its blocks (finished or preempted); NULL-safe. */
void dm_seq_release(dm_drafter *d, dm_seq **s);

int dm_blocks_used(const dm_drafter *d);

#endif
