/* api_responses.h -- OpenAI's Responses API as a translation onto chat
 * completions (api_chat.h): POST /v1/responses and GET /v1/responses/{id}.
 *
 * A request becomes a chat request: `instructions` a system message,
 * `input` (a string, or items: messages with input_text/output_text parts,
 * function_call and function_call_output) the messages after the stored
 * conversation of `previous_response_id`, max_output_tokens,
 * text.format, function tools, tool_choice and reasoning.effort chat's
 * fields; the rest of chat's samplers and extensions pass through. The
 * reply is a `response` object (reasoning, message and function_call
 * output items) or, streamed, the Responses event sequence. Responses are
 * kept (unless store: false) in a bounded in-memory store, oldest dropped
 * first, for previous_response_id and GET. Docs: docs/apis.md. */
#ifndef GL_API_RESPONSES_H
#define GL_API_RESPONSES_H

#include "http.h"

struct api_server;

void responses_handle(http_req *req, void *ctx);     /* POST /v1/responses; ctx: api_server */
void responses_handle_get(http_req *req, void *ctx); /* GET /v1/responses/{id} */
void responses_handle_delete(http_req *req, void *ctx); /* DELETE /v1/responses/{id} */
/* Frees the stored responses (api_free). */
void responses_store_free(struct api_server *a);

#endif
