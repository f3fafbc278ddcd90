/* utf8.h -- UTF-8 for text that goes back to clients: error messages
 * quote request bytes, and every response body must stay valid UTF-8. */
#ifndef GL_UTF8_H
#define GL_UTF8_H

#include <stddef.h>

/* Length (1..4) of the valid UTF-8 character at p, or 0 when the bytes
 * there are not one (bad lead, missing continuation, overlong, surrogate,
 * above U+10FFFF, or cut by end). */
int utf8_char_len(const char *p, const char *end);
/* How many bytes of s to keep to cut it at no more than max bytes without
 * splitting a character (strlen(s) when it fits). */
size_t utf8_cut(const char *s, size_t max);
/* Copies src[0..n) into dst (cap > 0 bytes, NUL-terminated) as valid
 * UTF-8: each byte that starts no valid character becomes U+FFFD, and
 * when dst is too small the copy ends before a whole character. */
void utf8_clean(char *dst, size_t cap, const char *src, size_t n);

#endif
