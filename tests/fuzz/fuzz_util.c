/* fuzz_util.c -- test data lookup for the fuzz targets. */
#include "fuzz_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FUZZ_SOURCE_ROOT
#define FUZZ_SOURCE_ROOT "."
#endif

static char *existing(const char *dir, const char *rel) {
    char *path = NULL;
    if (asprintf(&path, "%s/%s", dir, rel) < 0) return NULL;
    if (access(path, R_OK) == 0) return path;
    free(path);
    return NULL;
}

char *fuzz_testdata(const char *relative) {
    const char *dir = getenv("GENLOOP_TESTDATA");
    if (dir && *dir) return existing(dir, relative);
    return existing(FUZZ_SOURCE_ROOT "/../shared/testdata", relative);
}

char *fuzz_smollm_path(void) {
    const char *env = getenv("GENLOOP_MODEL");
    if (env && *env) return access(env, R_OK) == 0 ? strdup(env) : NULL;
    return existing(FUZZ_SOURCE_ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

void fuzz_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

bool fuzz_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        unsigned long cp, min;
        if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; min = 0x10000; }
        else return false;
        if (len - i <= need) return false;
        for (size_t k = 1; k <= need; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += need + 1;
    }
    return true;
}
