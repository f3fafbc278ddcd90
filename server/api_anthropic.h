/* api_anthropic.h -- Anthropic's Messages API as a translation onto chat
 * completions (api_chat.h): POST /v1/messages and
 * /v1/messages/count_tokens.
 *
 * A request becomes a chat request: `system` a system message; `messages`
 * with text, tool_use (the assistant's tool_calls) and tool_result (tool
 * messages) blocks; max_tokens (required), stop_sequences, tools
 * (input_schema), tool_choice (auto, any, tool, none) and thinking
 * (enable_thinking and a thinking budget) chat's fields; temperature,
 * top_p, top_k and chat's extensions pass through. The reply is a
 * `message` with thinking, text and tool_use blocks or, streamed,
 * Anthropic's event sequence. Errors on these paths, the API key's 401
 * included, take Anthropic's shape. Docs: docs/apis.md. */
#ifndef GL_API_ANTHROPIC_H
#define GL_API_ANTHROPIC_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "http.h"
#include "params.h"

void anthropic_handle(http_req *req, void *ctx);       /* POST /v1/messages; ctx: api_server */
void anthropic_handle_count(http_req *req, void *ctx); /* POST /v1/messages/count_tokens */

/* Whether a request path is this API's (its errors take its shape). */
bool anthropic_path(const char *path);
/* {"type": "error", "error": {"type": ..., "message": ...}} for e. */
cJSON *anthropic_error_json(const params_error *e);

#endif
