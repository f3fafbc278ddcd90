/* textstream.c -- token pieces in, client-safe text out.
 *
 * Incoming bytes go through a UTF-8 decoder first: complete characters are
 * appended to text[], a partial one waits in tail[], and bytes that can never
 * form a character become U+FFFD. Stop strings are then matched on text[],
 * which therefore only ever holds valid UTF-8. text[0..len) is everything
 * not yet released; after a push, text[0..released_len) is the part handed
 * out, kept until the next call so the caller's pointer stays valid. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "textstream.h"

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

struct ts_stream {
    char **stops;          /* non-empty stop strings */
    size_t *stop_len;
    int n_stops;

    char *text;            /* unreleased valid UTF-8, then room to grow */
    size_t len, cap;
    size_t handed_out;     /* text[0..handed_out) went out with the last call */

    unsigned char tail[4]; /* bytes of an incomplete character */
    int tail_len, tail_need;

    size_t released;       /* total bytes released */
    bool done;             /* a stop matched, ts_finish ran, or memory ran out */
    int stop_hit;          /* the stop string that matched, -1 while none */
};

ts_stream *ts_create(const char *const *stops, int n_stops) {
    ts_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->stop_hit = -1;
    if (n_stops > 0) {
        s->stops = calloc((size_t)n_stops, sizeof *s->stops);
        s->stop_len = calloc((size_t)n_stops, sizeof *s->stop_len);
        if (!s->stops || !s->stop_len) goto fail;
    }
    for (int i = 0; i < n_stops; i++) {
        size_t n = stops[i] ? strlen(stops[i]) : 0;
        if (n == 0) continue;
        s->stops[s->n_stops] = malloc(n);
        if (!s->stops[s->n_stops]) goto fail;
        memcpy(s->stops[s->n_stops], stops[i], n);
        s->stop_len[s->n_stops++] = n;
    }
    s->cap = 256;
    s->text = malloc(s->cap);
    if (!s->text) goto fail;
    return s;
fail:
    ts_free(s);
    return NULL;
}

void ts_free(ts_stream *s) {
    if (!s) return;
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s->stops);
    free(s->stop_len);
    free(s->text);
    free(s);
}

size_t ts_released(const ts_stream *s) { return s->released; }

/* ---- UTF-8 decoding ------------------------------------------------------- */

static void put(ts_stream *s, const void *bytes, size_t n) {
    memcpy(s->text + s->len, bytes, n);
    s->len += n;
}

/* Bytes that follow a lead byte, or -1 when b cannot start a character. */
static int continuation_count(unsigned char b) {
    if (b < 0x80) return 0;
    if (b >= 0xC2 && b <= 0xDF) return 1;
    if (b >= 0xE0 && b <= 0xEF) return 2;
    if (b >= 0xF0 && b <= 0xF4) return 3;
    return -1; /* continuation byte, overlong lead C0/C1, or beyond U+10FFFF */
}

/* Whether b may come next after the partial character in tail. The second
 * byte's range depends on the lead (no overlongs, surrogates or > U+10FFFF). */
static bool continues(const ts_stream *s, unsigned char b) {
    if (s->tail_len == 1) {
        switch (s->tail[0]) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        }
    }
    return b >= 0x80 && b <= 0xBF;
}

static void decode(ts_stream *s, const unsigned char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char b = bytes[i];
        if (s->tail_len > 0) {
            if (continues(s, b)) {
                s->tail[s->tail_len++] = b;
                if (s->tail_len == s->tail_need) {
                    put(s, s->tail, (size_t)s->tail_len);
                    s->tail_len = 0;
                }
                continue;
            }
            /* the partial character can never complete: one U+FFFD for it,
             * then b starts afresh */
            put(s, REPLACEMENT, 3);
            s->tail_len = 0;
        }
        int need = continuation_count(b);
        if (need == 0) {
            s->text[s->len++] = (char)b;
        } else if (need < 0) {
            put(s, REPLACEMENT, 3);
        } else {
            s->tail[0] = b;
            s->tail_len = 1;
            s->tail_need = need + 1;
        }
    }
}

/* ---- stop strings --------------------------------------------------------- */

static bool match_at(const char *text, size_t len, size_t at, const char *stop, size_t n) {
    return at + n <= len && memcmp(text + at, stop, n) == 0;
}

/* Offset of the earliest occurrence of any stop string in text[0..len), or
 * len when there is none. Text held back is shorter than the longest stop,
 * so this scans little more than the new piece. */
static size_t find_stop(const ts_stream *s, int *which) {
    for (size_t at = 0; at < s->len; at++)
        for (int k = 0; k < s->n_stops; k++)
            if (match_at(s->text, s->len, at, s->stops[k], s->stop_len[k])) {
                *which = k;
                return at;
            }
    return s->len;
}

/* Length of the longest suffix of text that is a proper prefix of a stop
 * string: the bytes that must wait for more input. */
static size_t stop_prefix_suffix(const ts_stream *s) {
    size_t best = 0;
    for (int k = 0; k < s->n_stops; k++) {
        size_t n = s->stop_len[k] - 1;
        if (n > s->len) n = s->len;
        for (; n > best; n--) {
            if (memcmp(s->text + s->len - n, s->stops[k], n) == 0) {
                best = n;
                break;
            }
        }
    }
    return best;
}

/* ---- pushing and finishing ------------------------------------------------ */

/* Drop what the last call handed out. */
static void compact(ts_stream *s) {
    if (s->handed_out == 0) return;
    memmove(s->text, s->text + s->handed_out, s->len - s->handed_out);
    s->len -= s->handed_out;
    s->handed_out = 0;
}

static bool reserve(ts_stream *s, size_t extra) {
    if (s->len + extra <= s->cap) return true;
    size_t cap = s->cap * 2;
    while (cap < s->len + extra) cap *= 2;
    char *text = realloc(s->text, cap);
    if (!text) return false;
    s->text = text;
    s->cap = cap;
    return true;
}

/* Hand out text[0..n). */
static void release(ts_stream *s, size_t n, const char **out, size_t *out_len) {
    s->handed_out = n;
    s->released += n;
    *out = s->text;
    *out_len = n;
}

/* After new text arrived: stop at a match, else release all but a possible
 * stop prefix. Returns true when a stop matched. */
static bool scan(ts_stream *s, bool final, const char **out, size_t *out_len) {
    size_t stop = find_stop(s, &s->stop_hit);
    if (stop < s->len) {
        s->len = stop;
        s->done = true;
        release(s, stop, out, out_len);
        return true;
    }
    size_t n = s->len - (final ? 0 : stop_prefix_suffix(s));
    /* text is valid UTF-8, so never cut a character even if a stop string
     * given to us was not */
    while (n > 0 && n < s->len && ((unsigned char)s->text[n] & 0xC0) == 0x80) n--;
    release(s, n, out, out_len);
    return false;
}

bool ts_push(ts_stream *s, const char *bytes, size_t n, const char **out, size_t *out_len) {
    *out = s->text;
    *out_len = 0;
    compact(s);
    if (s->done) return true;
    /* worst case every byte, and the waiting tail, becomes U+FFFD */
    if (!reserve(s, 3 * (n + 1))) {
        s->done = true; /* no way to report it: end the stream, like a stop */
        return true;
    }
    decode(s, (const unsigned char *)bytes, n);
    return scan(s, false, out, out_len);
}

int ts_stop_matched(const ts_stream *s) {
    return s ? s->stop_hit : -1;
}

void ts_finish(ts_stream *s, const char **out, size_t *out_len) {
    *out = s->text;
    *out_len = 0;
    compact(s);
    if (s->done) return;
    s->done = true;
    if (s->tail_len > 0) {
        s->tail_len = 0;
        if (!reserve(s, 3)) return;
        put(s, REPLACEMENT, 3);
    }
    scan(s, true, out, out_len);
}
