/* request.c -- one request's record (request.h): what serves it, created
 * and freed together, and the two stages that belong to it alone. */
#include "request.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gl_error.h"
#include "grammar.h"
#include "reasoning.h"
#include "sampler.h"
#include "textstream.h"
#include "tokenizer.h"

gl_seq *seq_create(const int32_t *prompt, int n_prompt, int cap_tokens, int block_size) {
    gl_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->tokens = malloc((size_t)cap_tokens * sizeof *s->tokens);
    if (!s->tokens) goto oom;
    memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof *s->tokens);
    s->n_tokens = s->n_prompt = n_prompt;
    s->cap_tokens = cap_tokens;
    s->max_generated = cap_tokens - n_prompt;
    s->prompt_logprobs = -1;
    if (!kv_seq_init(&s->kv, s->tokens, n_prompt, cap_tokens, block_size)) goto oom;
    return s;
oom:
    seq_free(NULL, s);
    return NULL;
}

void seq_free(kv_manager *m, gl_seq *s) {
    if (!s) return;
    kv_seq_release(m, &s->kv);
    sampler_free(s->sampler);
    gr_matcher_free(s->grammar);
    rs_free(s->reasoning);
    ts_free(s->text);
    free(s->tokens);
    free(s);
}

bool seq_wants_prompt_logprob(const gl_seq *s, int pos) {
    return s->prompt_logprobs >= 0 && pos + 1 < s->n_prompt && pos + 1 >= s->prompt_logprobs_sent;
}

/* The sampler's view of the vocabulary's text (DRY's sequence breakers). */
static const char *token_piece(const void *tokenizer, int32_t id, size_t *len) {
    return tok_piece(tokenizer, id, len);
}

gl_seq *request_create(const gl_request *req, int cap_tokens, int block_size, int n_vocab, const gr_vocab *vocab,
                       const gl_tokenizer *tokenizer, const gl_spec *sp, gl_error *err) {
    gl_seq *s = seq_create(req->prompt, req->n_prompt, cap_tokens, block_size);
    if (!s) goto oom;
    /* the history never outgrows the context: windows past it (or -1) are the context */
    gl_sampling_params sampling = req->sampling;
    if (sampling.dry_penalty_last_n < 0 || sampling.dry_penalty_last_n > cap_tokens)
        sampling.dry_penalty_last_n = cap_tokens;
    if (sampling.penalty_last_n > cap_tokens) sampling.penalty_last_n = cap_tokens;
    s->sampler = sampler_create(&sampling, n_vocab);
    if (s->sampler && tokenizer) sampler_set_text(s->sampler, token_piece, tokenizer);
    /* a constrained answer ends with its structure; a stop string would cut it */
    s->text = req->grammar ? ts_create(NULL, 0) : ts_create(req->stop, req->n_stop);
    if (!s->sampler || !s->text) goto oom;
    if ((req->grammar && !(s->grammar = gr_matcher_create(req->grammar, vocab, err))) ||
        (req->reasoning && !(s->reasoning = rs_create(req->reasoning, tokenizer, err)))) {
        seq_free(NULL, s);
        return NULL;
    }
    for (int i = 0; i < req->n_prompt; i++) sampler_accept(s->sampler, req->prompt[i]);
    s->user = req->user;
    s->ignore_eos = req->ignore_eos;
    s->min_tokens = req->min_tokens;
    s->no_prefix_cache = req->no_prefix_cache;
    s->prompt_progress = req->prompt_progress;
    spec_seq_init(sp, &s->spec, !req->no_speculation);
    s->progress_sent = -1;
    s->prompt_logprobs = req->prompt_logprobs;
    s->n_logprobs = req->sampling.n_logprobs;
    s->logprobs = req->sampling.logprobs;
    return s;
oom:
    seq_free(NULL, s);
    gl_error_set(err, "out of memory");
    return NULL;
}

void request_free(kv_manager *m, gl_spec *sp, gl_seq *s) {
    if (!s) return;
    spec_seq_release(sp, &s->spec);
    seq_free(m, s);
}

/* Whether the grammar masks r's next token: a grammar_after grammar waits
 * for the thinking block to end. *keep: a token the mask must leave allowed. */
static bool grammar_masks(const gl_seq *r, int32_t *keep) {
    *keep = -1;
    return r->grammar && (!r->reasoning || rs_grammar_masks(r->reasoning, keep));
}

const char *request_constrain(gl_seq *r, float *row, const int32_t *eog_ids, int n_eog, int32_t *forced) {
    *forced = r->reasoning ? rs_forced(r->reasoning) : -1;
    if (*forced >= 0) return NULL;
    int32_t keep;
    if (grammar_masks(r, &keep)) {
        float kept = keep >= 0 ? row[keep] : 0;
        if (gr_matcher_mask(r->grammar, row) == 0 && keep < 0) return "the grammar allows no token here";
        if (keep >= 0) row[keep] = kept;
    }
    if (r->n_generated < r->min_tokens && !r->ignore_eos)
        for (int i = 0; i < n_eog; i++) row[eog_ids[i]] = -INFINITY;
    return NULL;
}

gl_finish_reason request_stop(const gl_seq *r, bool is_eog, bool appended, bool stop_string) {
    int32_t keep;
    if (!appended) return is_eog && (!r->ignore_eos || grammar_masks(r, &keep)) ? GL_FINISH_STOP : GL_FINISH_NONE;
    if (stop_string || (r->grammar && gr_matcher_is_done(r->grammar))) return GL_FINISH_STOP;
    if (r->n_generated >= r->max_generated || r->n_tokens >= r->cap_tokens) return GL_FINISH_LENGTH;
    return GL_FINISH_NONE;
}
