/* webui.h -- the web chat UI's files, embedded in the binary at build time
 * by scripts/embed-files.py (index.html, style.css, the scripts, and the
 * browser libraries and fonts under /lib/). */
#ifndef GL_WEBUI_H
#define GL_WEBUI_H

#include <stddef.h>

typedef struct webui_file {
    const char *path;         /* URL path: "/", "/index.html", "/app.js", ... */
    const char *content_type; /* e.g. "text/html; charset=utf-8" */
    const char *etag;         /* quoted hash of the data, for If-None-Match */
    const unsigned char *data;
    size_t len;               /* bytes, without the trailing NUL the array also holds */
} webui_file;

/* The file served at path (no query string), or NULL. */
const webui_file *webui_find(const char *path);

#endif
