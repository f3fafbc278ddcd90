/* jbuf.c */
#include "jbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

void jbuf_free(jbuf *b) { free(b->data); memset(b, 0, sizeof(*b)); }

void jbuf_clear(jbuf *b) {
    b->len = 0;
    if (b->data) b->data[0] = 0;
}

static int reserve(jbuf *b, size_t extra) {
    if (b->oom) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) { b->oom = true; return -1; }
    b->data = p;
    b->cap = cap;
    return 0;
}

void jbuf_raw(jbuf *b, const char *s, size_t n) {
    if (reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void jbuf_puts(jbuf *b, const char *s) { jbuf_raw(b, s, strlen(s)); }

void jbuf_printf(jbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void jbuf_str(jbuf *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    jbuf_raw(b, "\"", 1);
    while (p < end) {
        const unsigned char *run = p;
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
        if (p > run) jbuf_raw(b, (const char *)run, (size_t)(p - run));
        if (p >= end) break;
        unsigned c = *p;
        if (c == '"') { jbuf_raw(b, "\\\"", 2); p++; }
        else if (c == '\\') { jbuf_raw(b, "\\\\", 2); p++; }
        else if (c == '\n') { jbuf_raw(b, "\\n", 2); p++; }
        else if (c == '\r') { jbuf_raw(b, "\\r", 2); p++; }
        else if (c == '\t') { jbuf_raw(b, "\\t", 2); p++; }
        else if (c < 0x20) { jbuf_printf(b, "\\u%04x", c); p++; }
        else {
            int len = utf8_char_len((const char *)p, (const char *)end);
            if (len) { jbuf_raw(b, (const char *)p, (size_t)len); p += len; }
            else { jbuf_raw(b, "\xEF\xBF\xBD", 3); p++; }
        }
    }
    jbuf_raw(b, "\"", 1);
}

void jbuf_num(jbuf *b, double v) {
    if (!isfinite(v)) jbuf_puts(b, "null");
    else jbuf_printf(b, "%.9g", v);
}
