/* routes.c -- the route table: every endpoint, and whether it is open
 * (no API key needed). */
#include "routes.h"

#include "api.h"
#include "api_anthropic.h"
#include "api_chat.h"
#include "api_completions.h"
#include "api_responses.h"
#include "ollama.h"
#include "static.h"

static const http_route routes[] = {
    /* open: no API key needed */
    { "GET", "/health", api_handle_health, true },
    { "HEAD", "/health", api_handle_health, true },
    { "GET", "/v1/models", api_handle_models, false },
    { "GET", "/v1/models/*", api_handle_model, false },
    { "POST", "/v1/completions", completions_handle, false },
    { "POST", "/v1/chat/completions", chat_handle, false },
    { "POST", "/v1/responses", responses_handle, false },
    { "GET", "/v1/responses/*", responses_handle_get, false },
    { "DELETE", "/v1/responses/*", responses_handle_delete, false },
    { "POST", "/v1/messages", anthropic_handle, false },
    { "POST", "/v1/messages/count_tokens", anthropic_handle_count, false },
    /* the web chat UI; public like /health */
    { "GET", "/", static_handle, true },
    { "GET", "/index.html", static_handle, true },
    { "GET", "/style.css", static_handle, true },
    { "GET", "/app.js", static_handle, true },
    { "HEAD", "/", static_handle, true },
    { "HEAD", "/index.html", static_handle, true },
    { "HEAD", "/style.css", static_handle, true },
    { "HEAD", "/app.js", static_handle, true },
    { "GET", "/favicon.svg", static_handle, true },
    { "GET", "/favicon.ico", static_handle, true },
    { "GET", "/markdown.js", static_handle, true },
    { "HEAD", "/markdown.js", static_handle, true },
    { "GET", "/lib/*", static_handle, true },   /* Markdown, sanitizer, highlighting, math, fonts */
    { "HEAD", "/lib/*", static_handle, true },
    { "POST", "/tokenize", api_handle_tokenize, false },
    { "POST", "/detokenize", api_handle_detokenize, false },
    { "GET", "/metrics", api_handle_metrics, false },
    /* the Ollama API (ollama.h) */
    { "POST", "/api/chat", ollama_handle_chat, false },
    { "POST", "/api/generate", ollama_handle_generate, false },
    { "GET", "/api/tags", ollama_handle_tags, false },
    { "POST", "/api/show", ollama_handle_show, false },
    { "GET", "/api/ps", ollama_handle_ps, false },
    { "GET", "/api/version", ollama_handle_version, false },
    { "HEAD", "/api/version", ollama_handle_version, false },
    { "POST", "/api/embed", ollama_handle_unsupported, false },
    { "POST", "/api/embeddings", ollama_handle_unsupported, false },
    { "POST", "/api/pull", ollama_handle_unsupported, false },
    { "POST", "/api/push", ollama_handle_unsupported, false },
    { "POST", "/api/create", ollama_handle_unsupported, false },
    { "POST", "/api/copy", ollama_handle_unsupported, false },
    { "DELETE", "/api/delete", ollama_handle_unsupported, false },
    /* not supported: a 404 that says so; a trailing star matches any rest of the path */
    { "POST", "/v1/embeddings", api_handle_unsupported, true },
    { "POST", "/v1/responses/*", api_handle_unsupported, true },
    { "POST", "/v1/audio/*", api_handle_unsupported, true },
    { "POST", "/v1/images/*", api_handle_unsupported, true },
    { "POST", "/v1/moderations", api_handle_unsupported, true },
    { "POST", "/v1/edits", api_handle_unsupported, true },
};

const http_route *routes_all(int *n) {
    *n = (int)(sizeof routes / sizeof routes[0]);
    return routes;
}
