/* jbuf.h -- a growable text buffer with JSON writers, for responses and
 * SSE chunks built without a DOM (no allocation once it has grown). */
#ifndef GL_JBUF_H
#define GL_JBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct jbuf {
    char *data;              /* NUL-terminated when non-NULL */
    size_t len, cap;
    bool oom;                /* an append failed; contents are truncated */
} jbuf;

void jbuf_free(jbuf *b);
void jbuf_clear(jbuf *b);                        /* keeps capacity */
void jbuf_raw(jbuf *b, const char *s, size_t n);
void jbuf_puts(jbuf *b, const char *s);
void jbuf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s[0..n) as a JSON string literal; invalid UTF-8 becomes U+FFFD. */
void jbuf_str(jbuf *b, const char *s, size_t n);
/* A number, or null when not finite (JSON has no NaN/Inf). */
void jbuf_num(jbuf *b, double v);

#endif
