/* static.h -- GET/HEAD of the web chat UI's embedded files (server/webui).
 *
 * Public (no API key) and available while the model loads, so the page can
 * show that the server is loading. */
#ifndef GL_STATIC_H
#define GL_STATIC_H

#include "http.h"

/* 200 with the file at the request's path, or 404 through the server's
 * error reply. */
void static_handle(http_req *req, void *ctx); /* ctx: api_server */

#endif
