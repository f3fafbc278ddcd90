/* api_chat.h -- POST /v1/chat/completions (OpenAI Chat Completions API).
 *
 * The conversation is rendered with the model's chat template (built once
 * at model load by chat_setup) and then generated like a completion.
 *
 * Accepted: model, messages (system/developer, user, assistant; content a
 * string or an array of {type:"text", text} parts), max_tokens,
 * max_completion_tokens, temperature, top_p, n, stop, seed, presence_penalty,
 * frequency_penalty, logit_bias, logprobs, top_logprobs, stream,
 * stream_options, user, response_format {"type":"text"}; extensions top_k,
 * min_p, repetition_penalty, ignore_eos. Tools, functions, other response formats,
 * audio, modalities and non-text content parts are a 400 naming the field,
 * as is anything unknown. Responses carry `timings` besides `usage`. */
#ifndef GL_API_CHAT_H
#define GL_API_CHAT_H

#include "http.h"

struct api_server;

/* At model load: build the chat template from the model's metadata and the
 * chat_template setting, and log which one is used. A model whose template
 * cannot be used only gets a warning; chat requests then fail clearly. */
void chat_setup(struct api_server *a);
void chat_teardown(struct api_server *a);

void chat_handle(http_req *req, void *ctx); /* ctx: api_server */

#endif
