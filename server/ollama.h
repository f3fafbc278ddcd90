/* ollama.h -- the Ollama API (/api/chat, /api/generate, /api/tags,
 * /api/show, /api/ps, /api/version) as a translation onto the same engine
 * requests as the OpenAI endpoints: a chat or generate body becomes a chat
 * (or, raw, a completions) body, runs as that job, and its output is
 * written back as Ollama's NDJSON stream or single object. Ollama's
 * `options` map onto the sampler fields, also on /v1/chat/completions and
 * /v1/completions. docs/models-multi.md. */
#ifndef GL_OLLAMA_H
#define GL_OLLAMA_H

#include <cjson/cJSON.h>

#include "http.h"
#include "models.h"
#include "params.h"

/* Moves body's `options` onto the fields the OpenAI endpoints read
 * (num_predict -> max_tokens, repeat_penalty, stop, ...); num_ctx above the
 * model's context and options genloop has no counterpart for are a 400
 * naming options.KEY, as is an option given twice (also as a field).
 * Returns 0 or -1. */
int ollama_apply_options(cJSON *body, const models_entry *m, params_error *e);

/* The route handlers (ctx = api_server). */
void ollama_handle_chat(http_req *req, void *ctx);
void ollama_handle_generate(http_req *req, void *ctx);
void ollama_handle_tags(http_req *req, void *ctx);
void ollama_handle_show(http_req *req, void *ctx);
void ollama_handle_ps(http_req *req, void *ctx);
void ollama_handle_version(http_req *req, void *ctx);
void ollama_handle_unsupported(http_req *req, void *ctx); /* /api/embed, /api/pull, ...: 501 */

#endif
