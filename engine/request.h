/* request.h -- one request's record (gl_seq) from submission to its
 * FINISHED event: its tokens and progress, and what serves it -- its
 * sampler, grammar matcher, text stream (stop strings), KV blocks and
 * speculation's part. Created and torn down here alone; the scheduler
 * plans with it, engine.c runs its stages, two of which live here as one
 * function each: the constraint stage (request_constrain) and the stop rule
 * (request_stop). */
#ifndef GL_REQUEST_H
#define GL_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "genloop.h"
#include "kv_manager.h"
#include "spec.h"

struct gl_sampler;
struct gr_matcher;
struct gr_vocab;
struct gl_tokenizer;
struct rs_state;
struct ts_stream;

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
    spec_seq spec;            /* speculative decoding's part: its drafts and their learning (spec.h) */
    int progress_sent;        /* prompt tokens last reported as processed; -1 = none yet */
    struct gl_sampler *sampler; /* NULL in scheduler tests */
    struct gr_matcher *grammar; /* NULL, or the constraint on the output (grammar.h) */
    struct rs_state *reasoning; /* NULL, or its thinking block (reasoning.h) */
    struct ts_stream *text;   /* stop strings and UTF-8 holdback; NULL in scheduler tests */
    int n_logprobs;           /* alternatives per generated token */
    bool logprobs;            /* report each generated token's logprob */
    double t_submit, t_scheduled, t_first_token;
    struct gl_seq *next;      /* in the incoming or waiting list */
} gl_seq;

/* A request's record for req: its prompt (cap_tokens in all), sampler,
 * text stream, when req has a grammar a matcher over vocab, when it has a
 * thinking block its state over tokenizer; its
 * speculation part from sp (NULL: none). Any thread. NULL with err set
 * (out of memory, or the grammar's own error). */
gl_seq *request_create(const gl_request *req, int cap_tokens, int block_size, int n_vocab, const struct gr_vocab *vocab,
                       const struct gl_tokenizer *tokenizer, const gl_spec *sp, gl_error *err);
/* A sequence of n_prompt prompt tokens and at most cap_tokens in all, with
 * its prompt block hashes computed; no sampler or text stream yet. Any
 * thread. NULL when out of memory. */
gl_seq *seq_create(const int32_t *prompt, int n_prompt, int cap_tokens, int block_size);
/* Frees s with its sampler, matcher and text stream, and gives its blocks
 * back to m (NULL while it holds none). */
void seq_free(kv_manager *m, gl_seq *s);
/* seq_free after speculation's state for s went back to sp (a finished
 * request; the scheduler's last ones leave theirs to spec_free). */
void request_free(kv_manager *m, gl_spec *sp, gl_seq *s);

/* Whether the logits row at pos yields a prompt logprob still to report:
 * it predicts prompt token pos + 1, which has not been reported yet. */
bool seq_wants_prompt_logprob(const gl_seq *s, int pos);

/* The constraint stage, on r's logits row before sampling. *forced
 * receives the token the thinking budget forces (the row is left alone),
 * else -1 and the row gets the grammar's mask (a grammar_after grammar once
 * the thinking block is over), then end-of-generation tokens (eog_ids)
 * banned while fewer than min_tokens are generated. The logit bias is the
 * sampler's first step (sampler.h), where logprobs can still report the
 * unbiased values. NULL, or why no token can follow (the grammar allows
 * none). */
const char *request_constrain(gl_seq *r, float *row, const int32_t *eog_ids, int n_eog, int32_t *forced);
/* The stop rule for r's sampled token. Before it is appended (appended
 * false): an end-of-generation token (is_eog) ends r unless ignored
 * (ignore_eos, no grammar masking). After (its text streamed): a stop string in
 * the text (stop_string), a grammar that is done, then the length limits.
 * GL_FINISH_NONE while r goes on. */
gl_finish_reason request_stop(const gl_seq *r, bool is_eog, bool appended, bool stop_string);

#endif
