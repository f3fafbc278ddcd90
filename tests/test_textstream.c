/* test_textstream.c -- UTF-8 holding, stop strings, and random splits
 * against naive references. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textstream.h"
#include "testutil.h"

#define FFFD "\xEF\xBF\xBD"

/* ---- helpers -------------------------------------------------------------- */

/* Everything a stream released, and how it ended. */
typedef struct collected {
    char text[8192];
    size_t len;
    bool stopped;
    int stop_push; /* index of the push that reported the stop, -1 if none */
} collected;

static void add(collected *c, const char *out, size_t n) {
    ck_assert_uint_le(c->len + n, sizeof c->text);
    memcpy(c->text + c->len, out, n);
    c->len += n;
}

/* True when s[0..n) is valid UTF-8 made of whole characters. */
static bool whole_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)s[i];
        size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

/* Push text cut at the given offsets (ascending), then finish. Every
 * released piece must be whole UTF-8. */
static void run_split(const char *const *stops, int n_stops, const char *text, size_t len,
                      const size_t *cuts, int n_cuts, collected *c) {
    memset(c, 0, sizeof *c);
    c->stop_push = -1;
    ts_stream *s = ts_create(stops, n_stops);
    ck_assert_ptr_nonnull(s);
    size_t from = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        const char *out;
        size_t out_len;
        bool stopped = ts_push(s, text + from, to - from, &out, &out_len);
        ck_assert(whole_utf8(out, out_len));
        add(c, out, out_len);
        if (stopped && !c->stopped) {
            c->stopped = true;
            c->stop_push = i;
        }
        if (c->stopped && c->stop_push < i) ck_assert_uint_eq(out_len, 0);
        from = to;
    }
    const char *out;
    size_t out_len;
    ts_finish(s, &out, &out_len);
    if (c->stopped) ck_assert_uint_eq(out_len, 0);
    add(c, out, out_len);
    ck_assert_uint_eq(ts_released(s), c->len);
    ts_free(s);
}

/* One push; returns the released text as a NUL-terminated static string. */
static const char *push(ts_stream *s, const char *bytes, bool *stopped) {
    static char buf[1024];
    const char *out;
    size_t n;
    bool st = ts_push(s, bytes, strlen(bytes), &out, &n);
    if (stopped) *stopped = st;
    else ck_assert(!st);
    memcpy(buf, out, n);
    buf[n] = 0;
    return buf;
}

static const char *finish(ts_stream *s) {
    static char buf[1024];
    const char *out;
    size_t n;
    ts_finish(s, &out, &n);
    memcpy(buf, out, n);
    buf[n] = 0;
    return buf;
}

static uint64_t test_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) { /* xorshift64 */
    test_rng ^= test_rng << 13;
    test_rng ^= test_rng >> 7;
    test_rng ^= test_rng << 17;
    return (uint32_t)((test_rng >> 32) % n);
}

/* ---- tests ---------------------------------------------------------------- */

START_TEST(test_multibyte_split_everywhere) {
    const char *chars[] = {"\xC3\xA9" /* é */, "\xE4\xB8\xAD" /* 中 */, "\xF0\x9F\xA6\x99" /* 🦙 */};
    for (int k = 0; k < 3; k++) {
        char text[16];
        size_t len = (size_t)snprintf(text, sizeof text, "a%sb%s", chars[k], chars[k]);
        /* every single cut, and every pair of cuts */
        for (size_t i = 0; i <= len; i++) {
            for (size_t j = i; j <= len; j++) {
                size_t cuts[2] = {i, j};
                collected c;
                run_split(NULL, 0, text, len, cuts, 2, &c);
                ck_assert_uint_eq(c.len, len);
                ck_assert(memcmp(c.text, text, len) == 0);
            }
        }
        /* byte by byte: nothing comes out until the character is whole */
        ts_stream *s = ts_create(NULL, 0);
        size_t n = strlen(chars[k]);
        for (size_t i = 0; i + 1 < n; i++) {
            const char *out;
            size_t out_len;
            ck_assert(!ts_push(s, chars[k] + i, 1, &out, &out_len));
            ck_assert_uint_eq(out_len, 0);
        }
        const char *out;
        size_t out_len;
        ck_assert(!ts_push(s, chars[k] + n - 1, 1, &out, &out_len));
        ck_assert_uint_eq(out_len, n);
        ck_assert(memcmp(out, chars[k], n) == 0);
        ts_free(s);
    }
}
END_TEST

START_TEST(test_stop_spanning_three_pushes) {
    const char *stops[] = {"STOP"};
    ts_stream *s = ts_create(stops, 1);
    ck_assert_str_eq(push(s, "abc ST", NULL), "abc ");
    ck_assert_str_eq(push(s, "O", NULL), "");
    bool stopped;
    ck_assert_str_eq(push(s, "P and more", &stopped), "");
    ck_assert(stopped);
    ck_assert_uint_eq(ts_released(s), 4);
    ck_assert_str_eq(push(s, "ignored", &stopped), ""); /* finished: input ignored */
    ck_assert(stopped);
    ck_assert_str_eq(finish(s), "");
    ts_free(s);

    /* text before the stop inside the completing push is released */
    s = ts_create(stops, 1);
    ck_assert_str_eq(push(s, "x S", NULL), "x ");
    ck_assert_str_eq(push(s, "T", NULL), "");
    ck_assert_str_eq(push(s, "OPtail", &stopped), "");
    ck_assert(stopped);
    ts_free(s);
    s = ts_create(stops, 1);
    ck_assert_str_eq(push(s, "one two STOP three", &stopped), "one two ");
    ck_assert(stopped);
    ts_free(s);
}
END_TEST

START_TEST(test_stop_at_start) {
    const char *stops[] = {"STOP", "\n\n"};
    bool stopped;
    ts_stream *s = ts_create(stops, 2);
    ck_assert_int_eq(ts_stop_matched(s), -1);
    ck_assert_str_eq(push(s, "STOPxyz", &stopped), "");
    ck_assert(stopped);
    ck_assert_int_eq(ts_stop_matched(s), 0); /* which stop ended it (Anthropic's stop_sequence) */
    ck_assert_uint_eq(ts_released(s), 0);
    ts_free(s);

    s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "\n", NULL), "");
    ck_assert_str_eq(push(s, "\n", &stopped), "");
    ck_assert(stopped);
    ck_assert_int_eq(ts_stop_matched(s), 1);
    ts_free(s);
}
END_TEST

START_TEST(test_earliest_stop_wins) {
    const char *stops[] = {"bc", "abcd"};
    bool stopped;
    /* "a" is held for "abcd"; in the next push "bc" completes at 1 and
     * "abcd" at 0: the earlier start wins */
    ts_stream *s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "xa", NULL), "x");
    ck_assert_str_eq(push(s, "bcd", &stopped), "");
    ck_assert(stopped);
    ck_assert_uint_eq(ts_released(s), 1);
    ts_free(s);

    /* both inside one push */
    s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "xxabcdyy", &stopped), "xx");
    ck_assert(stopped);
    ts_free(s);

    /* when "bc" completes a push earlier, it stops there */
    s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "xa", NULL), "x");
    ck_assert_str_eq(push(s, "bc", &stopped), "a");
    ck_assert(stopped);
    ts_free(s);

    /* order in the list does not matter */
    const char *reversed[] = {"abcd", "bc"};
    s = ts_create(reversed, 2);
    ck_assert_str_eq(push(s, "zabcd", &stopped), "z");
    ck_assert(stopped);
    ts_free(s);
}
END_TEST

START_TEST(test_partial_stop_released) {
    const char *stops[] = {"Hello"};
    ts_stream *s = ts_create(stops, 1);
    ck_assert_str_eq(push(s, "Hel", NULL), "");
    ck_assert_str_eq(push(s, "p", NULL), "Help");
    ck_assert_str_eq(push(s, " HelHel", NULL), " Hel"); /* only the last "Hel" can still start it */
    ck_assert_str_eq(push(s, "lHe", NULL), "Hell");
    ck_assert_str_eq(finish(s), "He");
    ck_assert_uint_eq(ts_released(s), strlen("Help HelHellHe"));
    ts_free(s);

    /* a stop that overlaps itself */
    const char *stops2[] = {"aab"};
    s = ts_create(stops2, 1);
    ck_assert_str_eq(push(s, "a", NULL), "");
    ck_assert_str_eq(push(s, "a", NULL), "");
    ck_assert_str_eq(push(s, "a", NULL), "a");
    bool stopped;
    ck_assert_str_eq(push(s, "b", &stopped), "");
    ck_assert(stopped);
    ts_free(s);
}
END_TEST

START_TEST(test_finish_releases_held) {
    const char *stops[] = {"Hello", "</s>"};
    ts_stream *s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "say Hel", NULL), "say ");
    ck_assert_str_eq(finish(s), "Hel");
    ck_assert_uint_eq(ts_released(s), 7);
    ts_free(s);

    /* a partial character at the end becomes U+FFFD */
    s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "a\xE4\xB8", NULL), "a");
    ck_assert_str_eq(finish(s), FFFD);
    ts_free(s);

    /* both at once: held stop prefix, then a partial character */
    s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "x</\xF0\x9F", NULL), "x");
    ck_assert_str_eq(finish(s), "</" FFFD);
    ts_free(s);
}
END_TEST

START_TEST(test_invalid_utf8) {
    struct {
        const char *in, *want;
    } cases[] = {
        {"\xFF", FFFD},
        {"a\x80z", "a" FFFD "z"},                       /* lone continuation */
        {"\xE4\xB8" "A", FFFD "A"},                     /* truncated, then ASCII */
        {"\xF0\x9F\xA6" "\xF0\x9F\xA6\x99", FFFD "\xF0\x9F\xA6\x99"},
        {"\xC0\xAF", FFFD FFFD},                        /* overlong lead */
        {"\xE0\x80\x80", FFFD FFFD FFFD},               /* overlong 3-byte */
        {"\xED\xA0\x80", FFFD FFFD FFFD},               /* surrogate */
        {"\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD},      /* above U+10FFFF */
        {"\xF5\xFE\xFF", FFFD FFFD FFFD},
        {"\xC3\xA9\xC3", "\xC3\xA9"},                   /* the tail waits */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ts_stream *s = ts_create(NULL, 0);
        ck_assert_msg(strcmp(push(s, cases[k].in, NULL), cases[k].want) == 0, "case %zu", k);
        ts_free(s);
    }
    /* never stalls: a stream of garbage comes out as it goes */
    ts_stream *s = ts_create(NULL, 0);
    for (int i = 0; i < 100; i++) ck_assert_str_eq(push(s, "\xFF", NULL), FFFD);
    ck_assert_str_eq(push(s, "\xE4", NULL), "");
    ck_assert_str_eq(push(s, "\xB8", NULL), "");
    ck_assert_str_eq(push(s, "!", NULL), FFFD "!");
    ts_free(s);
}
END_TEST

START_TEST(test_no_stops_pass_through) {
    const char *stops[] = {"", NULL}; /* empty and missing stops are ignored */
    ts_stream *s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "Hello", NULL), "Hello");
    ck_assert_str_eq(push(s, ", ", NULL), ", ");
    ck_assert_str_eq(push(s, "", NULL), "");
    ck_assert_str_eq(push(s, "world\n\n", NULL), "world\n\n");
    ck_assert_str_eq(finish(s), "");
    ck_assert_uint_eq(ts_released(s), 14);
    ts_free(s);

    /* bytes 0 pass through too; a piece far larger than the buffer */
    s = ts_create(NULL, 0);
    const char *out;
    size_t n;
    ck_assert(!ts_push(s, "a\0b", 3, &out, &n));
    ck_assert_uint_eq(n, 3);
    ck_assert(memcmp(out, "a\0b", 3) == 0);
    static char big[5000];
    memset(big, 'x', sizeof big);
    ck_assert(!ts_push(s, big, sizeof big, &out, &n));
    ck_assert_uint_eq(n, sizeof big);
    ts_free(s);
}
END_TEST

START_TEST(test_multibyte_stop) {
    const char *stops[] = {"\xE4\xB8\xAD\xE6\x96\x87" /* 中文 */, "\xF0\x9F\xA6\x99!" /* 🦙! */};
    const char *text = "ab\xE4\xB8\xAD\xE4\xB8\xAD\xE6\x96\x87xyz";
    size_t len = strlen(text);
    for (size_t i = 0; i <= len; i++) {
        for (size_t j = i; j <= len; j++) {
            size_t cuts[2] = {i, j};
            collected c;
            run_split(stops, 2, text, len, cuts, 2, &c);
            ck_assert(c.stopped);
            ck_assert_uint_eq(c.len, 5);
            ck_assert(memcmp(c.text, "ab\xE4\xB8\xAD", 5) == 0);
        }
    }
    bool stopped;
    ts_stream *s = ts_create(stops, 2);
    ck_assert_str_eq(push(s, "\xF0\x9F\xA6\x99\xF0\x9F", NULL), ""); /* could start "🦙!" */
    ck_assert_str_eq(push(s, "\xA6\x99", NULL), "\xF0\x9F\xA6\x99");
    ck_assert_str_eq(push(s, "?", NULL), "\xF0\x9F\xA6\x99?");
    ck_assert_str_eq(push(s, "\xF0\x9F\xA6\x99!", &stopped), "");
    ck_assert(stopped);
    ts_free(s);
}
END_TEST

/* ---- property tests ------------------------------------------------------- */

/* Naive reference: after each push, the whole text so far; the first push
 * after which a stop occurs cuts at its earliest occurrence. */
static size_t reference_cut(const char *text, const size_t *ends, int n_pushes, const char *const *stops,
                            int n_stops, bool *stopped) {
    for (int i = 0; i < n_pushes; i++) {
        size_t best = SIZE_MAX;
        for (int k = 0; k < n_stops; k++) {
            size_t n = strlen(stops[k]);
            for (size_t at = 0; at + n <= ends[i] && at < best; at++)
                if (memcmp(text + at, stops[k], n) == 0) best = at;
        }
        if (best != SIZE_MAX) {
            *stopped = true;
            return best;
        }
    }
    *stopped = false;
    return ends[n_pushes - 1];
}

START_TEST(test_random_splits_match_reference) {
    const char *alphabet[] = {"a", "b", "c", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\xA6\x99"};
    int n_stopped = 0;
    for (int round = 0; round < 5000; round++) {
        char text[256];
        size_t len = 0;
        int n_chars = (int)rnd(40);
        for (int i = 0; i < n_chars; i++) {
            const char *ch = alphabet[rnd(6)];
            memcpy(text + len, ch, strlen(ch));
            len += strlen(ch);
        }
        char stop_buf[3][16];
        const char *stops[3];
        int n_stops = (int)rnd(4);
        for (int k = 0; k < n_stops; k++) {
            size_t n = 0;
            int chars = 1 + (int)rnd(3);
            for (int i = 0; i < chars; i++) {
                const char *ch = alphabet[rnd(round % 2 ? 3 : 6)]; /* ASCII-only stops match more */
                memcpy(stop_buf[k] + n, ch, strlen(ch));
                n += strlen(ch);
            }
            stop_buf[k][n] = 0;
            stops[k] = stop_buf[k];
        }
        size_t cuts[64], ends[65];
        int n_cuts = 0;
        for (size_t at = 1; at < len; at++)
            if (rnd(3) == 0) cuts[n_cuts++] = at;
        for (int i = 0; i < n_cuts; i++) ends[i] = cuts[i];
        ends[n_cuts] = len;

        bool want_stop;
        size_t want = reference_cut(text, ends, n_cuts + 1, stops, n_stops, &want_stop);
        collected c;
        run_split(stops, n_stops, text, len, cuts, n_cuts, &c);
        ck_assert_msg(c.stopped == want_stop, "round %d", round);
        ck_assert_msg(c.len == want && memcmp(c.text, text, want) == 0, "round %d: released %zu bytes, want %zu",
                      round, c.len, want);
        n_stopped += want_stop;
    }
    ck_assert_int_gt(n_stopped, 1000); /* the stops did fire often */
}
END_TEST

/* Reference decoder for arbitrary bytes: valid characters copied, each
 * maximal invalid subpart replaced by one U+FFFD (Unicode 3.9, Table 3-7). */
static size_t reference_decode(const unsigned char *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char b = in[i];
        int len = 0;
        unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (b < 0x80) len = 1;
        else if (b >= 0xC2 && b <= 0xDF) len = 2;
        else if (b == 0xE0) len = 3, lo = 0xA0;
        else if (b >= 0xE1 && b <= 0xEC) len = 3;
        else if (b == 0xED) len = 3, hi = 0x9F;
        else if (b >= 0xEE && b <= 0xEF) len = 3;
        else if (b == 0xF0) len = 4, lo = 0x90;
        else if (b >= 0xF1 && b <= 0xF3) len = 4;
        else if (b == 0xF4) len = 4, hi = 0x8F;
        if (len == 0) {
            memcpy(out + o, FFFD, 3), o += 3, i++;
            continue;
        }
        int good = 1;
        while (good < len && i + good < n) {
            unsigned char c = in[i + good];
            bool ok = good == 1 ? c >= lo && c <= hi : c >= 0x80 && c <= 0xBF;
            if (!ok) break;
            good++;
        }
        if (good == len) {
            memcpy(out + o, in + i, (size_t)len), o += (size_t)len;
        } else {
            memcpy(out + o, FFFD, 3), o += 3;
        }
        i += (size_t)good;
    }
    return o;
}

START_TEST(test_random_bytes_never_stall) {
    const unsigned char pool[] = {'a', 'z', 0x80, 0xA0, 0xBF, 0xC0, 0xC3, 0xA9, 0xE0, 0xE4, 0xB8,
                                  0xAD, 0xED, 0x9F, 0xF0, 0x9F, 0x90, 0xF4, 0x8F, 0xF5, 0xFF};
    for (int round = 0; round < 3000; round++) {
        unsigned char text[64];
        size_t len = rnd(60);
        for (size_t i = 0; i < len; i++) text[i] = pool[rnd(sizeof pool)];
        size_t cuts[64];
        int n_cuts = 0;
        for (size_t at = 1; at < len; at++)
            if (rnd(2) == 0) cuts[n_cuts++] = at;
        char want[256];
        size_t want_len = reference_decode(text, len, want);
        collected c;
        run_split(NULL, 0, (const char *)text, len, cuts, n_cuts, &c);
        ck_assert_msg(c.len == want_len && memcmp(c.text, want, want_len) == 0, "round %d", round);
        ck_assert(whole_utf8(c.text, c.len));
    }
}
END_TEST

static Suite *textstream_suite(void) {
    Suite *s = suite_create("textstream");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_multibyte_split_everywhere);
    tcase_add_test(tc, test_stop_spanning_three_pushes);
    tcase_add_test(tc, test_stop_at_start);
    tcase_add_test(tc, test_earliest_stop_wins);
    tcase_add_test(tc, test_partial_stop_released);
    tcase_add_test(tc, test_finish_releases_held);
    tcase_add_test(tc, test_invalid_utf8);
    tcase_add_test(tc, test_no_stops_pass_through);
    tcase_add_test(tc, test_multibyte_stop);
    tcase_add_test(tc, test_random_splits_match_reference);
    tcase_add_test(tc, test_random_bytes_never_stall);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    int failed = test_run_suite(textstream_suite());
    return failed ? 1 : 0;
}
