/* spec.h -- speculative decoding, owned here the way kv_manager.c owns
 * blocks: the drafters behind one proposer interface (the n-gram drafter,
 * drafter.h, and the draft model, draft_model.h), the draft-length rule's
 * learned costs (spec_rule.h) and its scratch, and each sequence's part
 * (spec_seq, embedded in the request record).
 *
 * The engine calls it in two places: spec_after_step once a step's tokens
 * are sampled (learn the step's cost, give back preempted sequences' draft
 * state, choose the next step's draft lengths and propose the drafts into
 * each sequence's tokens past n_tokens), and spec_learn once a sequence's
 * drafts were verified (engine.c, verify_drafts: how many were accepted).
 * A proposal is a point mass, so "sample from the target, accept while it
 * equals the draft" is exactly the speculative sampling rule. */
#ifndef GL_SPEC_H
#define GL_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "genloop.h"
#include "kernels.h"

struct gl_seq;
struct scheduler;
struct sched_plan;

/* A sequence's part: embedded in gl_seq (its field spec). */
typedef struct spec_seq {
    int n_draft;              /* drafted tokens at tokens[n_tokens..], run with the next one */
    int len;                  /* longest draft for this sequence; 0 = never drafts */
    double accept;            /* recent per-token acceptance of its drafts (moving average) */
    int idle;                 /* steps in a row the rule gave it no draft */
    int gap;                  /* idle steps before it probes a drafted token */
    int n_draft_total;        /* tokens drafted for it so far */
    int n_accepted_total;     /* of which accepted */
    void *state;              /* the proposer's own state for it (the draft model's cache), or NULL */
} spec_seq;

/* What proposes drafts. */
typedef struct spec_proposer {
    void *self;
    /* true: cheap (the n-gram drafter), asked before the rule so only real drafts compete for the
       rows; false: asked after it for the chosen lengths, its time per drafted token learned */
    bool before_rule;
    /* At most k tokens guessed to follow tokens[0..n_tokens) into out; how many (0: no guess).
       cap_tokens: the sequence's limit. */
    int (*propose)(void *self, spec_seq *s, const int32_t *tokens, int n_tokens, int cap_tokens, int k,
                   int32_t *out);
    /* tokens[0..n_tokens) are now the sequence's, its drafts verified; NULL when nothing is learned
       (the draft model drops positions that no longer match at its next proposal) */
    void (*accepted)(void *self, spec_seq *s, const int32_t *tokens, int n_tokens);
    /* Forgets s's state (finished or preempted: its positions are rolled back); NULL when none */
    void (*rollback)(void *self, spec_seq *s);
    int (*blocks_used)(const void *self); /* state's KV blocks held, or NULL */
    void (*free)(void *self);
} spec_proposer;

typedef struct gl_spec gl_spec;

/* Drafted tokens one step carries at most (logits rows set aside for
 * them), under the engine's parameters; 0 when speculation is off. */
int spec_draft_rows(const gl_engine_params *p);

/* The engine's speculation: NULL when p->spec_mode is off, and NULL with
 * err set on a bad draft model or no memory. The draft model is
 * loaded here, and pool reserved for its rows; its KV pool holds
 * pool_tokens positions in blocks of p->block_size. */
gl_spec *spec_create(const gl_engine_params *p, const gl_model *target, kern_pool *pool, int pool_tokens,
                     gl_error *err);
/* Speculation with any proposer (copied; freed with the gl_spec): max_seqs
 * sequences, steps of at most max_step_tokens, draft_rows as above, each
 * sequence at most max_tokens drafted; fixed: always the longest draft. */
gl_spec *spec_create_with(const spec_proposer *pr, int max_seqs, int max_step_tokens, int draft_rows, int max_tokens,
                          bool fixed);
/* After the scheduler's sequences are freed: the proposer's states go too. NULL-safe. */
void spec_free(gl_spec *sp);

/* A new sequence's part; it never drafts when sp is NULL or !wanted. */
void spec_seq_init(const gl_spec *sp, spec_seq *s, bool wanted);
/* Gives back the proposer's state of a finished sequence. NULL-safe. */
void spec_seq_release(gl_spec *sp, spec_seq *s);

/* After a step: plan was sched's latest; ran: its forward pass ran (and
 * took seconds, sampling included). Then the next step's drafts. */
void spec_after_step(gl_spec *sp, struct scheduler *sc, const struct sched_plan *plan, bool ran, double seconds);
/* k drafted tokens of s were verified, the first accepted of them taken;
 * tokens[0..n_tokens) are the sequence's now. Counts into stats. */
void spec_learn(gl_spec *sp, spec_seq *s, int k, int accepted, const int32_t *tokens, int n_tokens,
                gl_engine_stats *stats);

int spec_blocks_used(const gl_spec *sp);

#endif
