/* routes.h -- the HTTP server's route table (method, path, handler, open).
 * Handlers get the api_server as ctx. */
#ifndef GL_ROUTES_H
#define GL_ROUTES_H

#include "http.h"

/* Every route; *n receives the count. */
const http_route *routes_all(int *n);

#endif
