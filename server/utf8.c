/* utf8.c */
#include "utf8.h"

#include <string.h>

int utf8_char_len(const char *s, const char *end) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
          : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || end - s < n) return 0;
    unsigned cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    static const unsigned min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

size_t utf8_cut(const char *s, size_t max) {
    size_t len = strnlen(s, max + 1);
    if (len <= max) return len;
    /* s[max] is the first byte left out: back up over continuation bytes
     * to the start of the character it belongs to (at most 3). */
    size_t cut = max;
    while (cut > 0 && max - cut < 3 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
    return ((unsigned char)s[cut] & 0xC0) == 0x80 ? max : cut;
}

void utf8_clean(char *dst, size_t cap, const char *src, size_t n) {
    static const char replacement[] = "\xEF\xBF\xBD";
    const char *p = src, *end = src + n;
    size_t used = 0;
    while (p < end) {
        int len = utf8_char_len(p, end);
        const char *piece = len ? p : replacement;
        size_t piece_len = len ? (size_t)len : 3;
        if (used + piece_len >= cap) break;
        memcpy(dst + used, piece, piece_len);
        used += piece_len;
        p += len ? len : 1;
    }
    dst[used] = 0;
}
