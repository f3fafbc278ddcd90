/* api_completions.h -- POST /v1/completions (OpenAI legacy Completions API).
 *
 * Accepted: model, prompt (string, strings, token ids, arrays of ids),
 * max_tokens, temperature, top_p, n, best_of (== n), stream, stream_options,
 * logprobs (0..5), echo, stop, presence_penalty, frequency_penalty,
 * logit_bias, seed, user, suffix (null only); extensions top_k, min_p,
 * repetition_penalty, ignore_eos. Anything else is a 400 naming the field. Responses
 * carry a `timings` object besides `usage`. */
#ifndef GL_API_COMPLETIONS_H
#define GL_API_COMPLETIONS_H

#include "http.h"

void completions_handle(http_req *req, void *ctx); /* ctx: api_server */
/* For APIs translated onto completions (ollama.h: a raw /api/generate). */
struct job_ops;
const struct job_ops *completions_job_ops(void);

#endif
