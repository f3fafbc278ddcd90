/* access.c -- key comparison, Bearer parsing, origin matching. */
#include "access.h"

#include <strings.h>

int access_key_equal(const char *expected, size_t expected_len, const char *given,
                     size_t given_len) {
    /* volatile: keep the compiler from turning the loop into an early-exit memcmp */
    volatile size_t diff = expected_len ^ given_len;
    for (size_t i = 0; i < expected_len; i++) {
        size_t at = i < given_len ? i : 0;  /* a short key is compared against its first byte */
        diff |= (unsigned char)(expected[i] ^ given[at]);
    }
    return diff == 0;
}

static int blank(char c) { return c == ' ' || c == '\t'; }

const char *access_bearer(const char *authorization, size_t *len) {
    if (!authorization) return NULL;
    const char *p = authorization;
    while (blank(*p)) p++;
    if (strncasecmp(p, "Bearer", 6) != 0 || !blank(p[6])) return NULL;
    p += 6;
    while (blank(*p)) p++;
    size_t n = 0;
    while (p[n]) n++;
    while (n > 0 && blank(p[n - 1])) n--;
    if (n == 0) return NULL;
    *len = n;
    return p;
}

const char *access_cors_match(const char *list, const char *origin) {
    if (!origin || !origin[0]) return NULL;
    size_t origin_len = 0;
    while (origin[origin_len]) origin_len++;
    for (const char *item = list; *item;) {
        size_t n = 0;
        while (item[n] && item[n] != ',') n++;
        if (n == 1 && item[0] == '*') return "*";
        if (n == origin_len && strncasecmp(item, origin, n) == 0) return origin;
        item += n;
        if (*item == ',') item++;
    }
    return NULL;
}
