/* access.h -- the pieces of access control that need care: the API key
 * comparison (constant time), the Bearer header, and CORS origin matching.
 * The policy itself (which routes are open) is api_admit in api.c. */
#ifndef GL_ACCESS_H
#define GL_ACCESS_H

#include <stddef.h>

/* 1 when given[0..given_len) equals expected[0..expected_len). The work
 * depends only on expected_len (the server's own key): neither the first
 * differing byte nor the length the client sent shows in the timing.
 * given must have at least one readable byte (a NUL-terminated string). */
int access_key_equal(const char *expected, size_t expected_len, const char *given,
                     size_t given_len);

/* The token of an `Authorization: Bearer TOKEN` header value (scheme case
 * insensitive, surrounding blanks dropped), with its length in *len; NULL
 * when the header is missing or not Bearer. */
const char *access_bearer(const char *authorization, size_t *len);

/* What Access-Control-Allow-Origin should say for this Origin header, given
 * the comma list of allowed origins: "*" when the list has "*", the origin
 * itself when listed (case-insensitive), else NULL. */
const char *access_cors_match(const char *allowed_list, const char *origin);

#endif
