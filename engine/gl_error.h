/* gl_error.h -- error reporting shared by every engine module.
 *
 * Engine functions never exit() or print: they fill a gl_error and return a
 * failure value, and the caller (CLI, server) decides how to show it. */
#ifndef GL_ERROR_H
#define GL_ERROR_H

#include <stdarg.h>

#include "genloop.h" /* gl_error */

/* Format a message into err (err may be NULL). Always returns -1 so callers
 * can write `return gl_error_set(err, ...);`. */
int gl_error_set(gl_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* gl_error_set for a caller that takes its own variable arguments. */
int gl_error_vset(gl_error *err, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Prefix an existing message, e.g. with a file name: "model.gguf: <msg>". */
void gl_error_prefix(gl_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
