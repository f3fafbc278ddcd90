#include "gl_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int gl_error_vset(gl_error *err, const char *fmt, va_list ap) {
    if (err) vsnprintf(err->message, sizeof err->message, fmt, ap);
    return -1;
}

int gl_error_set(gl_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gl_error_vset(err, fmt, ap);
    va_end(ap);
    return -1;
}

void gl_error_prefix(gl_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[256], old[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof old);
    int n = snprintf(err->message, sizeof err->message, "%s: ", prefix);
    if (n > 0 && (size_t)n < sizeof err->message) snprintf(err->message + n, sizeof err->message - (size_t)n, "%.*s", (int)(sizeof err->message - (size_t)n - 1), old);
}
