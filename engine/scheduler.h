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
 * never another sequence's token. The plan is made from request state and the KV
 * manager alone, so it can be tested without a model. */
#ifndef GL_SCHEDULER_H
#define GL_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "genloop.h"
#include "kv_manager.h"
#include "sampler.h"
#include "textstream.h"

/* One request: its tokens, its progress, and what its events need. */
typedef struct gl_seq {
    uint64_t id;
    void *user;               /* gl_request.user, passed back in events */
    int32_t *tokens;          /* prompt then generated, [cap_tokens] */
    int n_tokens;
    int cap_tokens;           /* = the sequence's token limit */
    int n_prompt;
    int num_computed_tokens;  /* positions whose K/V are in the cache */
    kv_seq kv;                /* its blocks (kv_manager.h) */
    int max_generated;        /* generated tokens at most */
    int n_generated;
    int n_cached;             /* prompt tokens served from the prefix cache */
    int prompt_logprobs;      /* -1: none, else top alternatives per prompt token */
    int prompt_logprobs_sent; /* prompt tokens already reported */
    bool ignore_eos;
    int min_tokens;           /* end-of-generation tokens banned below this many generated */
    bool no_prefix_cache;     /* this request does not read the prefix cache */
    bool prompt_progress;     /* report prefill progress */
    int n_draft;              /* drafted tokens at tokens[n_tokens..], run with the next one */
    int spec_len;             /* longest draft for this sequence; 0 = never drafts */
    double spec_accept;       /* recent per-token acceptance of its drafts (moving average) */
    int spec_idle;            /* steps in a row the rule gave it no draft */
    int spec_gap;             /* idle steps before it probes a drafted token */
    int n_draft_total;        /* tokens drafted for it so far */
    int n_accepted_total;     /* of which accepted */
    struct dm_seq *draft;     /* the draft model's cache for it (draft_model.h), or NULL */
    int progress_sent;        /* prompt tokens last reported as processed; -1 = none yet */
    gl_sampler *sampler;      /* NULL in scheduler tests */
    struct gr_matcher *grammar; /* NULL, or the constraint on the output (grammar.h) */
    struct rs_state *reasoning; /* NULL, or its thinking block (reasoning.h) */
    ts_stream *text;          /* stop strings and UTF-8 holdback; NULL in scheduler tests */
    int n_logprobs;           /* alternatives per generated token */
    bool logprobs;            /* report each generated token's logprob */
    double t_submit, t_scheduled, t_first_token;
    struct gl_seq *next;      /* in the incoming or waiting list */
} gl_seq;

/* A sequence of n_prompt prompt tokens and at most cap_tokens in all, with
 * its prompt block hashes computed; no sampler or text stream yet. Any
 * thread. NULL when out of memory. */
gl_seq *seq_create(const int32_t *prompt, int n_prompt, int cap_tokens, int block_size);
/* Frees s and gives its blocks back to m (NULL while it holds none). */
void seq_free(kv_manager *m, gl_seq *s);

/* Whether the logits row at pos yields a prompt logprob still to report:
 * it predicts prompt token pos + 1, which has not been reported yet. */
bool seq_wants_prompt_logprob(const gl_seq *s, int pos);

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
