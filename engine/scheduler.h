/* scheduler.h -- which sequences run in the next step, and how many tokens
 * each (the first of the step's three phases; engine.c runs the other two).
 *
 * Like vLLM's v1 scheduler there are no prefill and decode modes: a
 * sequence has num_computed_tokens (K/V in the cache) and n_tokens (prompt
 * plus generated), and each step hands out tokens under a budget: first one
 * token to every running sequence that is decoding (preempting the most
 * recently admitted ones when blocks run out), then prompt chunks to
 * running sequences still prefilling, then to waiting ones (admission, first
 * come first served). A decoding sequence's drafted tokens (speculative
 * decoding) ride along with its token from what the budget has left once
 * every decoding sequence has its one; a draft that does not fit is cut,
 * never another sequence's token. One exception puts newcomers first:
 * when the oldest waiting prompt has at most prefill_first_tokens left to
 * compute and a slot is free, it (and the short prompts behind it) runs in
 * a step of its own before the decodes, so its first token costs that short
 * step instead of a whole step of the running batch (vLLM v0 ran every
 * prefill first; here only short ones, and never two such steps in a row,
 * so the running streams lose at most every other step to newcomers).
 * The plan is made from request state and the KV
 * manager alone, so it can be tested without a model. */
#ifndef GL_SCHEDULER_H
#define GL_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "genloop.h"
#include "kv_manager.h"
#include "request.h"

typedef struct seq_queue {
    gl_seq *head, *tail;
    int n;
} seq_queue;

void queue_push(seq_queue *q, gl_seq *s);
gl_seq *queue_pop(seq_queue *q);

typedef struct sched_limits {
    int max_batch_tokens;     /* token budget of one step */
    int max_seqs;             /* sequences running at once */
    int max_logits;           /* logits rows of one step (sampling + prompt logprobs) */
    int prefill_first_tokens; /* a waiting prompt of at most this many tokens to compute runs
                                 before the decodes, in a step of its own (0: never) */
} sched_limits;

/* One sequence's share of a step. */
typedef struct sched_entry {
    gl_seq *seq;
    int first;                /* its first token's index in the batch */
    int n_tokens;             /* positions from seq->num_computed_tokens on */
    int logit_first;          /* its first logits row, or -1 when none */
    int sample_row;           /* logits row to sample from, or -1 mid-prompt */
    int n_draft;              /* drafted tokens verified: rows sample_row + 1.. are theirs */
} sched_entry;

typedef struct sched_plan {
    sched_entry *entries;     /* [max_seqs] in batch order */
    int n_entries;
    int n_tokens;             /* sum of entries' n_tokens */
    int n_logits;             /* logits rows asked for */
    int32_t *logit_tokens;    /* [max_logits] batch token index of each logits row */
    int n_admitted;           /* sequences moved from waiting to running */
    int n_preempted;          /* running sequences sent back to waiting */
} sched_plan;

typedef struct scheduler {
    sched_limits limits;
    kv_manager *kv;           /* not owned */
    bool prefix_caching;
    seq_queue waiting;        /* admission order; preempted ones go first */
    gl_seq **running;         /* [max_seqs], admission order */
    int n_running;
    sched_plan plan;          /* the latest plan; its entries live here */
    bool plan_was_short;      /* the latest plan was short prompts alone (the next one is not) */
    uint64_t n_preemptions;
    uint64_t prefix_queries;  /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_hits;     /* of which found */
} scheduler;

scheduler *sched_create(const sched_limits *limits, kv_manager *kv, bool prefix_caching);
/* Frees the scheduler and every sequence it holds. */
void sched_free(scheduler *sc);

/* Plans the next step; the plan lives until the next call. Blocks for the
 * planned tokens are allocated. */
const sched_plan *sched_schedule(scheduler *sc);
/* Takes s out of the running set (finished) or the waiting queue
 * (cancelled); the caller frees it. Returns false when s is in neither. */
bool sched_remove(scheduler *sc, gl_seq *s, bool *was_waiting);
/* The running or waiting sequence with this id, or NULL. */
gl_seq *sched_find(const scheduler *sc, uint64_t id);

#endif
