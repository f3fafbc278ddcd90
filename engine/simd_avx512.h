/* simd_avx512.h -- the AVX-512 VNNI kernels, included only by
 * kernels_avx512.h after simd_body.h (whose helpers, tiles and row macros
 * they use), so by every kernels_avx512*.c unit, each defining its part
 * (SIMD_PART_*): the packed tiles (kern_pack, layouts in simd.h) with one
 * block or sub-block per 32-bit lane of a 512-bit register, against 16-bit
 * or 8-bit activations; their rows functions; and attention's block tiles.
 *
 * The functions it defines, as a profile names them:
 *   packed_rows_{q4_0,q4_1,q5_0,q5_1,q8_0}_avx512, packed_rows_x8_{same}_avx512
 *   (each with a *_whole_avx512 helper for the token tiles after the panels),
 *   packed_rows_{q4_k,q5_k,q6_k}_avx512, packed_rows_x8_{q4_k,q5_k,q6_k}_avx512,
 *   attend_scores_avx512,
 *   attend_softmax_avx512, attend_pv_avx512. */
#ifndef GL_SIMD_AVX512_H
#define GL_SIMD_AVX512_H
#if !SIMD_AVX512
#error "simd_avx512.h is for the kernels_avx512*.c units"
#endif
/* ---- packed Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 against kq16_chunk (simd.h) --------
 * Lane j of every vector belongs to block j of the chunk, so vpdpwssd
 * accumulates each block's exact integer dot in its own lane; per chunk and
 * output the 16 dots become floats once and take their scales in one
 * multiply-add: acc += dot * (dw * da), then acc += mw * s for the weight
 * offset (Q4_0: -8 dw, Q8_0: none, Q4_1: its minimum). One output's float
 * operations run in chunk order with the same instructions whatever the tile. */

/* Group g of a chunk of m blocks as 32 words: 2 bytes per block. */
INLINE __m512i group_bytes(const uint8_t *p, int m, bool sign) {
    if (m == 16) return sign ? _mm512_cvtepi8_epi16(load256(p)) : _mm512_cvtepu8_epi16(load256(p));
    __mmask32 k = (__mmask32)((1u << (2 * m)) - 1);
    __m256i v = _mm256_maskz_loadu_epi8(k, p);
    return sign ? _mm512_cvtepi8_epi16(v) : _mm512_cvtepu8_epi16(v);
}

/* Integer sums are exact in any order, so a tile with few outputs gives
 * each output two accumulators (dot and dot2, added at the end): half as
 * long a chain of dependent multiply-adds, which is what limits the small
 * tiles of one or two tokens. */
#define SPLIT_DOTS(NR, NT) ((NR) * (NT) <= 4)
/* A tile of one row and one or two tokens (decode) has one or two outputs:
 * two chains each still leave the row's 8 or 16 multiply-adds a chunk
 * waiting on each other's latency (5 cycles) rather than on the ports, and
 * the memory stream waiting on them. Such a tile spreads call i of a chunk
 * over the unused rows' accumulators too (dot[i % DOT_SLOTS][t]), which
 * join_dots sums back: integer sums, exact in any order. */
#define DOT_SLOTS(NR, NT, ROWS) ((NR) == 1 && (NT) <= 2 ? ((NT) == 1 ? (ROWS) : (ROWS) / 2) : 1)

/* dot[r][t] += u0[r] . x[t][v0] + u1[r] . x[t][v1] (the second into dot2
 * when split), x[t] the activation vectors of token t, 64 bytes each: 32
 * words of kq16_chunk, whose pairs of 16-bit products vpdpwssd sums into
 * each 32-bit lane, or (bytes) 64 signed bytes of kq8_chunk against
 * unsigned weight bytes, four products to a lane by vpdpbusd. One body for
 * the tiles' two accumulator shapes: dot_pairs (up to 4 x 4) and, for the
 * K-quants' prompt tiles, k_dot_pairs (up to 2 x K_TILE_NT). The loads stay
 * in registers, not folded into each row's multiply-add as a memory
 * operand: a core may load only one 512-bit vector per cycle, so loading
 * them NR times is a bound. */
#define DEFINE_DOT_PAIRS(name, ROWS, COLS)                                                                           \
    INLINE void name(const int NR, const int NT, __m512i dot[ROWS][COLS], __m512i dot2[ROWS][COLS],                 \
                     const __m512i u0[ROWS], const __m512i u1[ROWS], const uint8_t *const x[COLS], int v0, int v1,  \
                     const bool bytes, int call) {                                                                 \
        const int slot = call % DOT_SLOTS(NR, NT, ROWS);                                                           \
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {                                                     \
            __m512i xl = _mm512_loadu_si512(x[t] + 64 * v0), xh = _mm512_loadu_si512(x[t] + 64 * v1);              \
            if (NR > 1) __asm__("" : "+v"(xl), "+v"(xh));                                                          \
            _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                                 \
                __m512i *d = &dot[r + slot][t];                                                                    \
                __m512i *d2 = SPLIT_DOTS(NR, NT) ? &dot2[r + slot][t] : d;                                         \
                if (bytes) {                                                                                       \
                    *d = _mm512_dpbusd_epi32(*d, u0[r], xl);                                                       \
                    *d2 = _mm512_dpbusd_epi32(*d2, u1[r], xh);                                                     \
                } else {                                                                                           \
                    *d = _mm512_dpwssd_epi32(*d, u0[r], xl);                                                       \
                    *d2 = _mm512_dpwssd_epi32(*d2, u1[r], xh);                                                     \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }                                                                                                              \
    /* The extra accumulators of DOT_SLOTS, zeroed (slot 0 is the tile's own). */                                  \
    INLINE void CAT(name, slots)(const int NR, const int NT, __m512i dot[ROWS][COLS], __m512i dot2[ROWS][COLS]) {   \
        for (int s = 1; s < DOT_SLOTS(NR, NT, ROWS); s++)                                                          \
            for (int t = 0; t < NT; t++) dot[s][t] = dot2[s][t] = _mm512_setzero_si512();                          \
    }                                                                                                              \
    /* dot += dot2 where the pairs split them, and the slots into dot[0]: a tree, for the latency. */              \
    INLINE void CAT(name, join)(const int NR, const int NT, __m512i dot[ROWS][COLS], const __m512i dot2[ROWS][COLS]) { \
        if (!SPLIT_DOTS(NR, NT)) return;                                                                           \
        _Pragma("GCC unroll 4") for (int r = 0; r < ROWS; r++)                                                     \
            _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++)                                                   \
                if (r < NR || r < DOT_SLOTS(NR, NT, ROWS)) dot[r][t] = _mm512_add_epi32(dot[r][t], dot2[r][t]);    \
        _Pragma("GCC unroll 2") for (int t = 0; t < NT; t++) {                                                     \
            if (DOT_SLOTS(NR, NT, ROWS) == 4) {                                                                    \
                dot[0][t] = _mm512_add_epi32(dot[0][t], dot[2][t]);                                                \
                dot[1][t] = _mm512_add_epi32(dot[1][t], dot[3][t]);                                                \
            }                                                                                                      \
            if (DOT_SLOTS(NR, NT, ROWS) >= 2) dot[0][t] = _mm512_add_epi32(dot[0][t], dot[1][t]);                  \
        }                                                                                                          \
    }
DEFINE_DOT_PAIRS(dot_pairs, 4, 4)

INLINE __m512 chunk_f16(const uint8_t *p, int m) {
    __m256i h = m == 16 ? load256(p) : _mm256_maskz_loadu_epi16((__mmask16)((1u << m) - 1), p);
    return _mm512_cvtph_ps(h);
}

/* The weight offsets mw of a chunk's m blocks, from their scales dw: Q4_1's
 * and Q5_1's minimums (stored after the scales), Q4_0's -8 dw, Q5_0's -16 dw,
 * and for Q8_0, whose bytes vpdpbusd takes offset by +128 (unsigned), -128
 * dw; the 16-bit chunks take Q8_0's bytes signed and use none. */
INLINE __m512 chunk_offsets(const int type, const uint8_t *chunk, int m, __m512 dw) {
    if (type == GL_TYPE_Q4_1 || type == GL_TYPE_Q5_1) return chunk_f16(chunk + 2 * m, m);
    return _mm512_mul_ps(dw, _mm512_set1_ps(type == GL_TYPE_Q8_0 ? -128.0f : type == GL_TYPE_Q5_0 ? -16.0f : -8.0f));
}

INLINE bool is_q5(const int type) { return type == GL_TYPE_Q5_0 || type == GL_TYPE_Q5_1; }

/* prefetch_distance, but a streamed one-token pair of short Q5 rows (PF_PAIR_ROW_BYTES)
 * gets the single row's pair: its two rows are one stream. */
INLINE size_t q5_prefetch_distance(const int type, int NR, int NT, size_t row_bytes) {
    if (is_q5(type) && NR == 2 && NT == 1 && row_bytes <= PF_PAIR_ROW_BYTES &&
        atomic_load_explicit(&kern_weights_stream, memory_order_relaxed))
        return PF_DECODE_L1;
    return prefetch_distance(NR, NT, row_bytes);
}

/* Q4_0 and Q5_0 take their offset (-8, -16) in integer: sum((q - 8) a) is
 * exact in int32 (and in float: |dot| < 2^24), so each block's dot starts
 * at -8 (-16) times the activations' integer block sum and needs no float
 * offset term (one rounding fewer, and one multiply-add fewer per block). */
INLINE bool folds_offset(const int type) { return type == GL_TYPE_Q4_0 || type == GL_TYPE_Q5_0; }
INLINE int offset_shift(const int type) { return type == GL_TYPE_Q5_0 ? 4 : 3; }
/* Dots that are signed sums (these offsets, and Q8_0's +128 where vpdpbusd
 * needs its bytes unsigned, taken in integer): no float offset term */
INLINE bool signed_dots(const int type) { return type == GL_TYPE_Q8_0 || folds_offset(type); }

/* Where a chunk's dots start, from its off (-8 times the block sums): Q4_0
 * there, Q5_0 twice it, and at 8 bits Q8_0 (+128 on its bytes) 16 times it. */
INLINE __m512i chunk_dot_start(const int type, const bool x8, const int32_t *block_off) {
    if (!folds_offset(type) && !(x8 && type == GL_TYPE_Q8_0)) return _mm512_setzero_si512();
    const __m512i off = _mm512_loadu_si512(block_off);
    return type == GL_TYPE_Q4_0 ? off : _mm512_slli_epi32(off, type == GL_TYPE_Q5_0 ? 1 : 4);
}

/* Bytes per block before a packed chunk's quants: its scale, Q4_1's and
 * Q5_1's minimum, Q5's fifth bits (4 bytes). */
INLINE int chunk_hdr(const int type) {
    return (type == GL_TYPE_Q4_1 || type == GL_TYPE_Q5_1 ? 4 : 2) + (is_q5(type) ? 4 : 0);
}

/* Q5's fifth bits (simd.h): byte b of block j holds, in bit p, element
 * 4 p + b's and in bit 4 + p element 16 + 4 p + b's. Lane j of fb has block
 * j's four bytes. The 16-bit tiles want group g's bits (elements 2 g + e,
 * 16 + 2 g + e, e = 0, 1) in words 2 j + e: bytes 2 (g % 2) + e, bit g / 2
 * and 4 + g / 2. fifth_words spreads bytes 0, 1 (even groups) and 2, 3 (odd
 * ones) to words (high bytes zero); fifth_nibbles and with_fifth then take
 * each group's bits. */
INLINE void fifth_words(__m512i fb, __m512i *even, __m512i *odd) {
    const __m512i ie = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13, -128));
    const __m512i io = _mm512_broadcast_i32x4(_mm_setr_epi8(2, -128, 3, -128, 6, -128, 7, -128, 10, -128, 11, -128, 14, -128, 15, -128));
    *even = _mm512_shuffle_epi8(fb, ie);
    *odd = _mm512_shuffle_epi8(fb, io);
}

/* The fifth bits' two nibbles, each alone in its byte (bits 4..7 zero):
 * lo's bit p is the low nibble's, hi's bit p the high one's (element
 * 4 p + b and 16 + 4 p + b in the x8 form). */
INLINE void fifth_nibbles(__m512i f, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    *lo = _mm512_and_si512(f, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(f, 4), m4);
}

/* q's nibble (q & m4, m4 the bytes' or words' 0x0f) with bit p of each
 * byte of nib (fifth_nibbles) as its bit 4: one table look-up puts the bit
 * at 4 with nothing else in the byte, one ternary-logic op merges it, where
 * a shift, two ANDs and an OR did. */
INLINE __m512i with_fifth(__m512i q, __m512i nib, int p, __m512i m4) {
    static const uint8_t at4[4][16] = {
        {0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16},
        {0, 0, 16, 16, 0, 0, 16, 16, 0, 0, 16, 16, 0, 0, 16, 16},
        {0, 0, 0, 0, 16, 16, 16, 16, 0, 0, 0, 0, 16, 16, 16, 16},
        {0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16},
    };
    const __m512i bit = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)at4[p])), nib);
    return _mm512_ternarylogic_epi32(q, bit, m4, 0xec); /* (q & m4) | bit */
}

/* The 16-bit tiles' fifth-bit nibbles of blocks' fifth bits fb (a block's
 * four bytes a lane): even groups' low and high, then odd ones'. */
INLINE void fifth_group_nibbles(__m512i fb, __m512i fn[4]) {
    __m512i fe, fo;
    fifth_words(fb, &fe, &fo);
    fifth_nibbles(fe, &fn[0], &fn[1]);
    fifth_nibbles(fo, &fn[2], &fn[3]);
}

/* Group g's words (v its 32 zero-extended bytes) with their fifth bits:
 * elements 2g + e into *lo, 16 + 2g + e into *hi. */
INLINE void q5_group_words(__m512i v, const __m512i fn[4], int g, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi16(0x0f);
    *lo = with_fifth(v, fn[2 * (g % 2)], g / 2, m4);
    *hi = with_fifth(_mm512_srli_epi16(v, 4), fn[2 * (g % 2) + 1], g / 2, m4);
}

/* The sums of a, b, c and d in lanes 0, 4, 8 and 12, each by the tree
 * _mm512_reduce_add_ps uses (lane i + lane i + 8, then + 4, + 2, + 1), with
 * the shuffles shared: about a third of the instructions of four reduces,
 * and bit for bit their results (checked on 400k random sums). */
/* sum4_ps's first two rounds: 128-bit lane k holds input k's four
 * partial sums P, (q0 + q2) + (q1 + q3) of its 128-bit quarters q. */
INLINE __m512 sum4_quarters(__m512 lo_ab, __m512 hi_ab, __m512 lo_cd, __m512 hi_cd) {
    const __m512 ab = _mm512_add_ps(lo_ab, hi_ab), cd = _mm512_add_ps(lo_cd, hi_cd);
    return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}

INLINE __m512 sum4_partials(__m512 a, __m512 b, __m512 c, __m512 d) {
    /* quarters a0 a1 b0 b1 and a2 a3 b2 b3, c's and d's alike (sum4_quarters) */
    return sum4_quarters(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)),
                         _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
}

INLINE __m512 sum4_ps(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 t = sum4_partials(a, b, c, d);
    /* then (P0 + P2) + (P1 + P3) */
    t = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* A 4-token tile's outputs from its rows' partials (sum4_partials, zero
 * past NR): sum4_ps's tree for all of them at once, (P0 + P2) + (P1 + P3)
 * of the four rows by unpacks, which leave token t's rows in 128-bit lane
 * t, a store each. */
INLINE void finish_partials(const int NR, const __m512 part[4], float *out, size_t out_stride) {
    const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(part[0], part[1]), _mm512_unpackhi_ps(part[0], part[1]));
    const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(part[2], part[3]), _mm512_unpackhi_ps(part[2], part[3]));
    const __m512 lo = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23)));
    const __m512 hi = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23)));
    const __m512 sums = _mm512_add_ps(lo, hi);
    const __mmask8 rows = (__mmask8)((1u << NR) - 1);
    _mm_mask_storeu_ps(out, rows, _mm512_castps512_ps128(sums));
    _mm_mask_storeu_ps(out + out_stride, rows, _mm512_extractf32x4_ps(sums, 1));
    _mm_mask_storeu_ps(out + 2 * out_stride, rows, _mm512_extractf32x4_ps(sums, 2));
    _mm_mask_storeu_ps(out + 3 * out_stride, rows, _mm512_extractf32x4_ps(sums, 3));
}

/* A tile may cover one panel of a long row (see prompt_panels): state
 * then holds its accumulators between panels, 64 floats per row, 16 per
 * token, loaded at the start (X16_LOAD) and stored instead of summed at the
 * end (X16_STORE). Each lane sees the same operations in the same order as
 * in one pass over the row, so panels never change a result. */
#define X16_LOAD 1
#define X16_STORE 2

/* A tile's start: its accumulators from state (X16_LOAD) or zero. */
INLINE void start_outputs(const int NR, const int NT, __m512 acc[4][4], const float *state, int mode) {
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
            acc[r][t] = mode & X16_LOAD ? _mm512_load_ps(state + 64 * r + 16 * t) : _mm512_setzero_ps();
}

/* A tile's end: its accumulators into state (X16_STORE), or each output's
 * sum into out, four outputs at a time, each by the same tree whatever
 * shares it. */
INLINE void finish_outputs(const int NR, const int NT, __m512 acc[4][4], float *out, size_t out_stride, float *state,
                           int mode) {
    if (mode & X16_STORE) {
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) _mm512_store_ps(state + 64 * r + 16 * t, acc[r][t]);
        return;
    }
    if (NT == 4) {
        __m512 part[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            part[r] = r < NR ? sum4_partials(acc[r][0], acc[r][1], acc[r][2], acc[r][3]) : _mm512_setzero_ps();
        finish_partials(NR, part, out, out_stride);
        return;
    }
    __m512 v[16];
    float sums[16];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) v[r * NT + t] = acc[r][t];
#pragma GCC unroll 4
    for (int i = 0; i < NR * NT; i += 4) {
#pragma GCC unroll 3
        for (int j = NR * NT - i; j < 4; j++) v[i + j] = _mm512_setzero_ps();
        _mm512_storeu_ps(sums, sum4_ps(v[i], v[i + 1], v[i + 2], v[i + 3]));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            if (i + j < NR * NT) out[(size_t)((i + j) % NT) * out_stride + (size_t)((i + j) / NT)] = sums[4 * j];
    }
}

/* The word permutes and block lanes of a short tail of m blocks, from
 * kq_tail_lane: [q8][m][v] picks, for each lane, the two packed pairs
 * (words) of its block that carry its four elements -- low and high nibbles
 * of the same words for Q4, out of the tail's 8 m words; for Q8_0 words of
 * its 16 m, through a permute of two vectors. Built once at load. */
SIMD_HIDDEN extern uint16_t kq_tail_words[2][KQ_SHORT_TAIL + 1][2][32];
SIMD_HIDDEN extern int32_t kq_tail_blocks[KQ_SHORT_TAIL + 1][2][16];
/* For Q5: which bit of each of the lane's four fifth-bit bytes is its
 * element's (e0 = 4 p + 16 h: bit p + 4 h), per word. */
SIMD_HIDDEN extern uint16_t kq_tail_fifth[KQ_SHORT_TAIL + 1][2][32];

#if SIMD_EMITS(TABLE)
uint16_t kq_tail_words[2][KQ_SHORT_TAIL + 1][2][32];
int32_t kq_tail_blocks[KQ_SHORT_TAIL + 1][2][16];
uint16_t kq_tail_fifth[KQ_SHORT_TAIL + 1][2][32];

__attribute__((constructor)) static void tail_tables(void) {
    for (int m = 1; m <= KQ_SHORT_TAIL; m++)
        for (int v = 0; v < 2; v++)
            for (int lane = 0; lane < 16; lane++) {
                int j = 0, e0 = 0;
                bool used = kq_tail_lane(m, v, lane, &j, &e0);
                kq_tail_blocks[m][v][lane] = j;
                kq_tail_fifth[m][v][2 * lane] = kq_tail_fifth[m][v][2 * lane + 1] = (uint16_t)(e0 % 16 / 4 + e0 / 16 * 4);
                for (int q8 = 0; q8 < 2; q8++) {
                    /* elements 2g, 2g + 1 of block j are pair m g + j; Q4 keeps 16 + e in e's high nibble */
                    int g = (q8 ? e0 : e0 % 16) / 2;
                    kq_tail_words[q8][m][v][2 * lane] = (uint16_t)(used ? m * g + j : 0);
                    kq_tail_words[q8][m][v][2 * lane + 1] = (uint16_t)(used ? m * (g + 1) + j : 0);
                }
            }
}
#endif

/* Vector v of an even short tail's Q4/Q5 weights (pack_tail_lanes' lane
 * order), one unsigned byte an element: the nibbles, and Q5's fifth bits
 * (a 64-bit mask a vector, before the quants) as 16. */
INLINE __m512i short_tail_bytes(const uint8_t *quants, int m, int v, bool five) {
    const __m256i b = load256(quants + 32 * v);
    const __m512i u = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1),
                                       _mm512_set1_epi8(0x0f));
    if (!five) return u;
    uint64_t k;
    memcpy(&k, quants - 4 * m + 8 * v, 8);
    return _mm512_mask_add_epi8(u, _cvtu64_mask64(k), u, _mm512_set1_epi8(0x10));
}

INLINE __mmask64 first_bytes(int n) { return n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n > 0 ? n : 0)) - 1; }

/* acc[r][t] += the rows' short tail (m <= KQ_SHORT_TAIL blocks, row r's at
 * w + r row_bytes) against the tokens' kq16_tail (x16) or kq8_tail (token
 * t's at act + t act_stride): each block's exact dot gathered from its lanes
 * in integer into lane j, then the float steps a chunk takes for block j
 * (x16_chunk's or x8_chunk's), lanes past m untouched. Q8_0's bytes take
 * +128 here at 16 bits too; the tail's off takes it back before the dot
 * turns float, so 16-bit Q8_0 has a chunk's signed dot and no offset term. */
INLINE void add_short_tail(const int type, const bool x16, const int NR, const int NT, const uint8_t *w, size_t row_bytes,
                       const uint8_t *act, size_t act_stride, int m, size_t ahead, __m512 acc[4][4]) {
    const uint8_t *chunk[4], *tail[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        chunk[r] = w + (size_t)r * row_bytes;
        prefetch_ahead(chunk[r], m * block32_bytes(type), ahead, NR, NT);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) tail[t] = act + (size_t)t * act_stride;
    const bool q8 = type == GL_TYPE_Q8_0, five = is_q5(type);
    const int hdr = chunk_hdr(type) * m, n_vec = kq_tail_vectors(m);
    const __mmask16 km = (__mmask16)((1u << m) - 1);
    const __m512i m4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8((char)0x80);
    __m512i u[4][2];
    __m512 dw[4], mw[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        dw[r] = chunk_f16(chunk[r], m);
        mw[r] = chunk_offsets(type, chunk[r], m, dw[r]);
        const uint8_t *quants = chunk[r] + hdr;
        u[r][1] = _mm512_setzero_si512(); /* unused for m <= 2; set so no lane is ever undefined */
        if (m % 2 == 0) { /* packed in lane order (pack_tail_lanes) */
#pragma GCC unroll 2
            for (int v = 0; v < n_vec; v++) {
                if (q8) {
                    u[r][v] = _mm512_xor_si512(_mm512_loadu_si512(quants + 64 * v), flip);
                    continue;
                }
                u[r][v] = short_tail_bytes(quants, m, v, five);
            }
            continue;
        }
        const int n_bytes = (q8 ? 32 : 16) * m;
        const __m512i lo = _mm512_maskz_loadu_epi8(first_bytes(n_bytes), quants);
        const __m512i hi = q8 ? _mm512_maskz_loadu_epi8(first_bytes(n_bytes - 64), quants + 64) : lo;
#pragma GCC unroll 2
        for (int v = 0; v < n_vec; v++) {
            const __m512i words = _mm512_loadu_si512(kq_tail_words[q8][m][v]);
            if (q8) {
                u[r][v] = _mm512_xor_si512(_mm512_permutex2var_epi16(lo, words, hi), flip);
            } else {
                __m512i p = _mm512_permutexvar_epi16(words, lo);
                u[r][v] = _mm512_and_si512(_mm512_mask_srli_epi16(p, (__mmask32)0xffff0000u, p, 4), m4);
                if (five) { /* lane L's block's fifth bits, each byte's to bit 0 by kq_tail_fifth, then to bit 4 */
                    const __m512i fb = _mm512_maskz_loadu_epi32((__mmask16)((1u << m) - 1), quants - 4 * m);
                    const __m512i f = _mm512_permutexvar_epi32(_mm512_loadu_si512(kq_tail_blocks[m][v]), fb);
                    const __m512i b0 = _mm512_srlv_epi16(f, _mm512_loadu_si512(kq_tail_fifth[m][v]));
                    u[r][v] = _mm512_or_si512(u[r][v], _mm512_and_si512(_mm512_slli_epi16(b0, 4), _mm512_set1_epi8(0x10)));
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        const kq8_tail *a8 = (const kq8_tail *)tail[t];
        const kq16_tail *a16 = (const kq16_tail *)tail[t];
        __m512i x[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}, x2[2] = {x[0], x[1]};
#pragma GCC unroll 2
        for (int v = 0; v < n_vec; v++) {
            x[v] = _mm512_loadu_si512(x16 ? a16->q[v] : a8->q[v]);
            x2[v] = x16 ? _mm512_loadu_si512(a16->q2[v]) : x[v];
        }
        const __m512 da = _mm512_loadu_ps(x16 ? a16->d : a8->d), s = _mm512_loadu_ps(x16 ? a16->s : a8->s);
        /* off is -128 times each lane's sum: Q4_0's and Q5_0's -8 and -16 times it by an exact shift
         * (Q8_0's 16-bit dots take it too: their tail bytes go +128 through vpdpbusd as the 8-bit ones) */
        const int32_t *lane_off = x16 ? a16->off : a8->off;
        const __m512i off = q8                 ? _mm512_loadu_si512(lane_off)
                            : folds_offset(type) ? _mm512_srai_epi32(_mm512_loadu_si512(lane_off), 7 - offset_shift(type))
                                                 : _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m512i idot = _mm512_dpbusd_epi32(x16 ? _mm512_setzero_si512() : off, u[r][0], x[0]);
            if (n_vec > 1) idot = _mm512_dpbusd_epi32(idot, u[r][1], x[1]);
            if (x16) {
                idot = _mm512_slli_epi32(idot, 8);
                idot = _mm512_add_epi32(idot, off);
                idot = _mm512_dpbusd_epi32(idot, u[r][0], x2[0]);
                if (n_vec > 1) idot = _mm512_dpbusd_epi32(idot, u[r][1], x2[1]);
            }
            /* block j's lanes are j mod M: + lane L + 8, + 4 (and + 2 for M = 2) */
            idot = _mm512_add_epi32(idot, _mm512_shuffle_i32x4(idot, idot, _MM_SHUFFLE(1, 0, 3, 2)));
            idot = _mm512_add_epi32(idot, _mm512_shuffle_i32x4(idot, idot, _MM_SHUFFLE(2, 3, 0, 1)));
            if (kq_tail_stride(m) == 2) idot = _mm512_add_epi32(idot, _mm512_shuffle_epi32(idot, _MM_PERM_BADC));
            acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(idot), _mm512_mul_ps(dw[r], da), acc[r][t], km);
            if (!signed_dots(type)) acc[r][t] = _mm512_mask3_fmadd_ps(mw[r], s, acc[r][t], km);
        }
    }
}

INLINE __m512i quad_bytes(const uint8_t *p) {
    static const uint16_t lanes[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(lanes), _mm512_loadu_si512(p));
}

/* The same for a chunk of m < 16 blocks, whose groups are 2m bytes apart:
 * lanes from quad_lanes(m). Lanes past m take whatever words, against zero
 * activations. */
INLINE __m512i quad_lanes(int m) {
    static const uint16_t lanes[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_mask_sub_epi16(_mm512_loadu_si512(lanes), (__mmask32)0xaaaaaaaau, _mm512_loadu_si512(lanes),
                                 _mm512_set1_epi16((short)(16 - m)));
}

INLINE __m512i quad_bytes_m(const uint8_t *p, int m, __m512i lanes) {
    if (m == 16) return quad_bytes(p);
    return _mm512_permutexvar_epi16(lanes, _mm512_maskz_loadu_epi8(first_bytes(4 * m), p));
}

/* One token's kq16_chunk split (decode, packed_rows_one_token): 256 q + q2
 * as its coarse and residual bytes in kq8_chunk's lanes, q[v][4j + e] and
 * q2[v][4j + e] element 4v + e of block j, so vpdpbusd (64 products)
 * against the x8 tiles' unsigned weight bytes gives dot(w, q) and
 * dot(w, q2), and 256 dot(w, q) + dot(w, q2) is vpdpwssd's dot exactly:
 * the same int32 for the same float steps, from a cheaper byte unpack. */
typedef struct kq16_split {
    int8_t q[8][64];
    int8_t q2[8][64];
} kq16_split;

/* Dword j: the low bytes of words 2j, 2j + 1 of x, then those of y. */
INLINE __m512i low_bytes_pairs(__m512i x, __m512i y) {
    const __m512i lx = _mm512_mask_blend_epi8((__mmask64)0x2222222222222222ull, x, _mm512_srli_epi32(x, 8));
    const __m512i ly = _mm512_mask_blend_epi8((__mmask64)0x2222222222222222ull, y, _mm512_srli_epi32(y, 8));
    return _mm512_mask_blend_epi16((__mmask32)0xaaaaaaaau, lx, _mm512_slli_epi32(ly, 16));
}

/* Any 256 q + q2 with |q2| <= 127: q2 is the word's low byte read signed,
 * q = (word - q2) / 256. */
INLINE void split_x16_chunk(const kq16_chunk *a, kq16_split *s) {
    for (int u = 0; u < 8; u++) {
        const __m512i A = _mm512_loadu_si512(a->q[2 * u]), B = _mm512_loadu_si512(a->q[2 * u + 1]);
        const __m512i hA = _mm512_srai_epi16(_mm512_sub_epi16(A, _mm512_srai_epi16(_mm512_slli_epi16(A, 8), 8)), 8);
        const __m512i hB = _mm512_srai_epi16(_mm512_sub_epi16(B, _mm512_srai_epi16(_mm512_slli_epi16(B, 8), 8)), 8);
        _mm512_storeu_si512(s->q2[u], low_bytes_pairs(A, B));
        _mm512_storeu_si512(s->q[u], low_bytes_pairs(hA, hB));
    }
}

/* The dots of NR rows (1 or 2) of a chunk of m blocks (Q4 or Q5) against a
 * kq16_split, into d[r]: x8_chunk's weight bytes, each vector twice; two
 * rows share each activation load. One row spreads its 16 multiply-adds
 * over 8 accumulators, two rows over 4 each (the chains' latency). */
INLINE void split_chunk_dots(const int type, const uint8_t *const chunk[2], const int NR, const int m,
                             const kq16_split *s, __m512i d[2]) {
    const bool five = is_q5(type);
    const int hdr = chunk_hdr(type) * m;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i lanes = m == 16 ? _mm512_setzero_si512() : quad_lanes(m);
    __m512i dq[2][4], dr[2][4], flo[2] = {m4, m4}, fhi[2] = {m4, m4};
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        for (int i = 0; i < 4; i++) dq[r][i] = dr[r][i] = _mm512_setzero_si512();
        if (five)
            fifth_nibbles(m == 16 ? _mm512_loadu_si512(chunk[r] + hdr - 64)
                                  : _mm512_maskz_loadu_epi32((__mmask16)((1u << m) - 1), chunk[r] + hdr - 4 * m),
                          &flo[r], &fhi[r]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 8; g += 2) {
        const int i = g / 2, k = NR == 1 ? 2 * (i & 1) : 0;
        const __m512i xq0 = _mm512_loadu_si512(s->q[i]), xq1 = _mm512_loadu_si512(s->q[i + 4]);
        const __m512i xr0 = _mm512_loadu_si512(s->q2[i]), xr1 = _mm512_loadu_si512(s->q2[i + 4]);
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            __m512i v = quad_bytes_m(chunk[r] + hdr + 2 * m * g, m, lanes);
            __m512i lo = five ? with_fifth(v, flo[r], g / 2, m4) : _mm512_and_si512(v, m4);
            __m512i hi = five ? with_fifth(_mm512_srli_epi16(v, 4), fhi[r], g / 2, m4)
                              : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            dq[r][k] = _mm512_dpbusd_epi32(dq[r][k], lo, xq0);
            dq[r][k + 1] = _mm512_dpbusd_epi32(dq[r][k + 1], hi, xq1);
            dr[r][k] = _mm512_dpbusd_epi32(dr[r][k], lo, xr0);
            dr[r][k + 1] = _mm512_dpbusd_epi32(dr[r][k + 1], hi, xr1);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        __m512i q = _mm512_add_epi32(dq[r][0], dq[r][1]), rr = _mm512_add_epi32(dr[r][0], dr[r][1]);
        if (NR == 1) {
            q = _mm512_add_epi32(q, _mm512_add_epi32(dq[r][2], dq[r][3]));
            rr = _mm512_add_epi32(rr, _mm512_add_epi32(dr[r][2], dr[r][3]));
        }
        d[r] = _mm512_add_epi32(_mm512_slli_epi32(q, 8), rr);
    }
}

/* A chunk's exact dots (dot[r][t], block j in lane j) into the outputs:
 * each lane's float steps, the same in every 16-bit tile. */
INLINE void x16_chunk_scale(const int type, const int NR, const int NT, const uint8_t *const chunk[4],
                            const kq16_chunk *const a[4], const int m, __m512i dot[4][4], __m512 acc[4][4]) {
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        __m512 dw = chunk_f16(chunk[r], m), mw = chunk_offsets(type, chunk[r], m, dw);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(a[t]->d));
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][t]), sc, acc[r][t]);
            if (!signed_dots(type)) acc[r][t] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(a[t]->s), acc[r][t]);
        }
    }
}

/* One chunk of m blocks (16 but for a row's last) of tile_x16_panel into
 * acc: a function of m so that the full chunks' copy has it constant (their
 * loads unmasked, their lane picks fixed). */
INLINE void x16_chunk(const int type, const uint8_t *w, size_t row_bytes, const uint8_t *act, size_t act_stride,
                      const int NR, const int NT, const int c0, const int m, size_t ahead, const kq16_split *split,
                      __m512 acc[4][4]) {
    const int bb = block32_bytes(type);
    const int hdr = chunk_hdr(type);
    const bool q8 = type == GL_TYPE_Q8_0, five = is_q5(type);
    const __m512i m4 = _mm512_set1_epi16(0x0f);
    const uint8_t *chunk[4];
    const kq16_chunk *a[4];
    __m512i dot[4][4], dot2[4][4], start[4];
    const uint8_t *x[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        a[t] = (const kq16_chunk *)(act + (size_t)t * act_stride) + c0 / 16;
        x[t] = (const uint8_t *)&a[t]->q[0][0];
        start[t] = chunk_dot_start(type, false, a[t]->off);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        chunk[r] = w + (size_t)r * row_bytes + (size_t)c0 * bb;
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) dot[r][t] = start[t], dot2[r][t] = _mm512_setzero_si512();
    }
    dot_pairs_slots(NR, NT, dot, dot2);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) prefetch_ahead(chunk[r], 16 * bb, ahead, NR, NT);
    if (split) {
        __m512i d[2];
        split_chunk_dots(type, chunk, NR, m, split + c0 / 16, d);
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) dot[r][0] = _mm512_add_epi32(dot[r][0], d[r]);
    } else if (q8) {
        for (int g = 0; g < 16; g += 2) {
            __m512i u0[4], u1[4];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                u0[r] = group_bytes(chunk[r] + hdr * m + 2 * m * g, m, true);
                u1[r] = group_bytes(chunk[r] + hdr * m + 2 * m * (g + 1), m, true);
            }
            dot_pairs(NR, NT, dot, dot2, u0, u1, x, g, g + 1, false, g / 2);
        }
    } else {
        __m512i fn[4][4]; /* even groups' low and high nibbles, then odd ones' */
        if (five)
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                fifth_group_nibbles(_mm512_maskz_loadu_epi32((__mmask16)((1u << m) - 1), chunk[r] + (hdr - 4) * m), fn[r]);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i lo[4], hi[4];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                __m512i v = group_bytes(chunk[r] + hdr * m + 2 * m * g, m, false);
                if (five) {
                    q5_group_words(v, fn[r], g, &lo[r], &hi[r]);
                } else {
                    lo[r] = _mm512_and_si512(v, m4);
                    hi[r] = _mm512_srli_epi16(v, 4);
                }
            }
            dot_pairs(NR, NT, dot, dot2, lo, hi, x, g, g + 8, false, g);
        }
    }
    if (!split) dot_pairs_join(NR, NT, dot, dot2);
    x16_chunk_scale(type, NR, NT, chunk, a, m, dot, acc);
}

/* The blocks of a row of nb that go in chunks: all but a short or half tail. */
INLINE int x16_main_blocks(int nb) { return nb % 16 <= KQ16_HALF_TAIL ? nb - nb % 16 : nb; }

/* A row's short or half tail (the blocks past x16_main_blocks) into acc. */
INLINE void x16_tails(const int type, const uint8_t *w, size_t row_bytes, int nb, const uint8_t *act,
                      size_t act_stride, const int NR, const int NT, size_t ahead, __m512 acc[4][4]) {
    const int bb = block32_bytes(type);
    const int hdr = chunk_hdr(type);
    const bool q8 = type == GL_TYPE_Q8_0, five = is_q5(type);
    const __m512i m4 = _mm512_set1_epi16(0x0f);
    const int short_tail = nb % 16 <= KQ_SHORT_TAIL ? nb % 16 : 0;
    const int half_tail = nb % 16 > KQ_SHORT_TAIL && nb % 16 <= KQ16_HALF_TAIL ? nb % 16 : 0;
    /* A half tail: rows 2p and 2p + 1 share vectors (simd.h), so pair p
     * takes the place of a row in dot_pairs, half the multiply-adds of one
     * vector per row. Each row's dots then move to lanes 0..7 and take their
     * scales there, the same operations whether the row has a partner in the
     * tile or not. */
    if (half_tail) {
        const int m = half_tail, c0 = nb - m, NP = (NR + 1) / 2;
        const __mmask16 k = (__mmask16)((1u << (2 * m)) - 1);
        const uint8_t *chunk[4];
        const kq16_chunk *a[4];
        const uint8_t *x[4];
        __m512i dot[4][4], dot2[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            chunk[r] = w + (size_t)r * row_bytes + (size_t)c0 * bb + hdr * m;
            prefetch_ahead(chunk[r] - hdr * m, m * bb, ahead, NR, NT);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            a[t] = (const kq16_chunk *)(act + (size_t)t * act_stride) + c0 / 16;
            x[t] = (const uint8_t *)&a[t]->q[0][0];
            const __m512i start = chunk_dot_start(type, false, a[t]->off); /* lane 8 + j repeats lane j, as the pairs */
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) dot[p][t] = start, dot2[p][t] = _mm512_setzero_si512();
        }
        __m512i fn[4][4];
        dot_pairs_slots(NP, NT, dot, dot2);
        if (five)
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) {
                const __mmask8 km = (__mmask8)((1u << m) - 1);
                __m256i lo = _mm256_maskz_loadu_epi32(km, chunk[2 * p] - 4 * m);
                __m256i hi = 2 * p + 1 < NR ? _mm256_maskz_loadu_epi32(km, chunk[2 * p + 1] - 4 * m) : _mm256_setzero_si256();
                fifth_group_nibbles(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), fn[p]);
            }
        for (int g = 0; g < (q8 ? 16 : 8); g += q8 ? 2 : 1) {
            __m512i u0[4], u1[4];
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) {
                __m512i v[2];
                for (int i = 0; i < (q8 ? 2 : 1); i++) {
                    __m128i lo = _mm_maskz_loadu_epi8(k, chunk[2 * p] + 2 * m * (g + i));
                    __m256i both = 2 * p + 1 < NR
                                       ? _mm256_inserti128_si256(_mm256_castsi128_si256(lo),
                                                                 _mm_maskz_loadu_epi8(k, chunk[2 * p + 1] + 2 * m * (g + i)), 1)
                                       : _mm256_zextsi128_si256(lo);
                    v[i] = q8 ? _mm512_cvtepi8_epi16(both) : _mm512_cvtepu8_epi16(both);
                }
                u0[p] = q8 ? v[0] : five ? with_fifth(v[0], fn[p][2 * (g % 2)], g / 2, m4) : _mm512_and_si512(v[0], m4);
                u1[p] = q8     ? v[1]
                        : five ? with_fifth(_mm512_srli_epi16(v[0], 4), fn[p][2 * (g % 2) + 1], g / 2, m4)
                               : _mm512_srli_epi16(v[0], 4);
            }
            dot_pairs(NP, NT, dot, dot2, u0, u1, x, g, q8 ? g + 1 : g + 8, false, q8 ? g / 2 : g);
        }
        dot_pairs_join(NP, NT, dot, dot2);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *scales = chunk[r] - hdr * m;
            __m512 dw = chunk_f16(scales, m), mw = chunk_offsets(type, scales, m, dw);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m512 d = _mm512_cvtepi32_ps(dot[r / 2][t]);
                if (r % 2) d = _mm512_shuffle_f32x4(d, d, 0xee);
                __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(a[t]->d));
                acc[r][t] = _mm512_mask3_fmadd_ps(d, sc, acc[r][t], 0xff);
                if (!signed_dots(type)) acc[r][t] = _mm512_mask3_fmadd_ps(mw, _mm512_loadu_ps(a[t]->s), acc[r][t], 0xff);
            }
        }
    }
    if (short_tail)
        add_short_tail(type, true, NR, NT, w + (size_t)(nb - short_tail) * bb, row_bytes,
                   act + (size_t)(nb / 16) * sizeof(kq16_chunk), act_stride, short_tail, ahead, acc);
}

INLINE void tile_x16_panel(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                           size_t act_stride, const int NR, const int NT, float *out, size_t out_stride,
                           float *state, int mode, const kq16_split *split) {
    const size_t ahead = q5_prefetch_distance(type, NR, NT, row_bytes);
    const int nb = (int)(n_cols / 32);
    __m512 acc[4][4];
    start_outputs(NR, NT, acc, state, mode);
    const int n_main = x16_main_blocks(nb);
    int c0 = 0;
    for (; c0 + 16 <= n_main; c0 += 16) x16_chunk(type, w, row_bytes, act, act_stride, NR, NT, c0, 16, ahead, split, acc);
    if (c0 < n_main) x16_chunk(type, w, row_bytes, act, act_stride, NR, NT, c0, n_main - c0, ahead, split, acc);
    x16_tails(type, w, row_bytes, nb, act, act_stride, NR, NT, ahead, acc);
    finish_outputs(NR, NT, acc, out, out_stride, state, mode);
}

INLINE void tile_x16(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                     size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_x16_panel(type, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride, NULL, 0, NULL);
}

/* ---- 16-bit Q5 and Q6_K prompts from words unpacked once -------------------------
 * Merging each fifth bit into its word (with_fifth) costs a 2 x 4 tile about
 * as many shuffle-class operations as its multiply-adds leave room for, and
 * Q6_K's high bits as many again. A prompt instead unpacks a block of rows
 * once into words, in the layout of the activations (Q5: word 2j + e of
 * vector v is element 2v + e of block j; Q6_K: of sub-block j), and runs
 * 4 x 4 tiles of plain loads and vpdpwssd over a block of tokens against
 * them (words_rows). The dots are the same integers, the float steps
 * x16_chunk_scale's or tile_kq's, the tails tile_x16_panel's: the same
 * bits. */
#define WORDS_SCRATCH (64 << 10)      /* bytes of words a row block may take (L2) */
#define WORDS_ACT_BYTES (384 << 10)   /* activation bytes a token block may take (L2) */
#define WORDS_MIN_TOKENS 16
#define WORDS_BLOCK_TOKENS 32         /* a token block's tokens at least: the unpack's share */
#define WORDS_TAIL_TOKENS 128         /* a token block's tokens at most where short tails are turned (q5w_turn_tail) */
/* Q6_K rows shorter than this many super-blocks pay for their unpack from
 * WORDS_Q6_K_SHORT_TOKENS tokens on (the commit that set these has the
 * numbers) */
#define WORDS_Q6_K_LONG_SB 16
#define WORDS_Q6_K_SHORT_TOKENS 32

/* dot[r][t] += the NV word vectors at w[r] . token t's at x[t] (64 bytes
 * apart): each activation a register across the NR rows, not NR memory
 * operands (dot_pairs says why; GCC folds them unless told). */
INLINE void words_dots(const int NR, const int NV, const __m512i *const w[4], const uint8_t *const x[4],
                       __m512i dot[4][4]) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; v++) {
        __m512i u[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) u[r] = _mm512_load_si512(&w[r][v]);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            __m512i xv = _mm512_loadu_si512(x[t] + 64 * v);
            __asm__("" : "+v"(xv));
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) dot[r][t] = _mm512_dpwssd_epi32(dot[r][t], u[r], xv);
        }
    }
}

/* Row w's first n_main blocks as words, 16 vectors a chunk (lanes past a
 * padded chunk's m zero). */
INLINE void q5w_unpack(const int type, const uint8_t *w, int n_main, __m512i *words) {
    const int bb = block32_bytes(type), hdr = chunk_hdr(type);
    for (int c0 = 0; c0 < n_main; c0 += 16, words += 16) {
        const int m = n_main - c0 < 16 ? n_main - c0 : 16;
        const uint8_t *chunk = w + (size_t)c0 * bb;
        __m512i fn[4];
        fifth_group_nibbles(_mm512_maskz_loadu_epi32((__mmask16)((1u << m) - 1), chunk + (hdr - 4) * m), fn);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            q5_group_words(group_bytes(chunk + hdr * m + 2 * m * g, m, false), fn, g, &words[g], &words[g + 8]);
    }
}

/* A short tail of 4 blocks (Gemma's 640 columns) as words too, four tokens
 * at once: lane 4 t + j of a vector is token t's block j. A row's tail
 * words repeat dword v of its blocks 0..3 for the four tokens (vector v),
 * a token quad's turned tails hold dword v of each token's four blocks, so
 * 16 vpdpwssd a row leave each (token, block) pair's exact dot in a lane
 * of its own, with no lane sums, and a row's float steps take its four
 * tokens' lanes 0..3 in one vector. The packed bytes and the kq16_tail
 * activations share one order (tail lane L, four elements of block L % 4
 * each), whose words one dword permute, the same for both, moves so that
 * 128-bit lane j holds block j alone (vector k, lane 4 j + i: dword 4 k + i
 * of block j). */
#define Q5W_TAIL 4
#define Q5W_ROW_VECS 18 /* a row's tail: 16 word vectors, then its blocks' dw and mw */
INLINE __m512i q5w_tail_lanes(void) { /* natural dword lanes 2j, 2j + 1, 2j + 8, 2j + 9 to 4j .. 4j + 3 */
    return _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
}

/* Four tokens' tails as the tiles take them (lane 4 t + j: token t, block j). */
typedef struct q5w_tail_quad {
    int32_t x[16][16]; /* dword v (words 256 q + q2) */
    int32_t start[16]; /* the dots' start: Q5_0's -16 times the block's sum, else 0 */
    float d[16];       /* kq16_tail's d and s */
    float s[16];
} q5w_tail_quad;

/* Words k (0..3) of a tail, natural lanes, into dst[(4 k + i) stride + j]:
 * dword 4 k + i of block j (q5w_tail_lanes' order, then by dword). */
INLINE void q5w_tail_by_dword(__m512i words, int k, int32_t *dst, int stride) {
    _Alignas(64) int32_t lane[16];
    _mm512_store_si512(lane, _mm512_permutexvar_epi32(q5w_tail_lanes(), words));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) dst[(4 * k + i) * stride + j] = lane[4 * j + i];
}

/* A row's tail rt from its packed short tail: its words, then chunk_f16's
 * and chunk_offsets' scales, each repeated for the four tokens. */
INLINE void q5w_unpack_tail(const int type, const uint8_t *tail, __m512i *rt) {
    const uint8_t *quants = tail + chunk_hdr(type) * Q5W_TAIL;
    _Alignas(64) int32_t x[16][4];
#pragma GCC unroll 2
    for (int v = 0; v < 2; v++) {
        const __m512i u = short_tail_bytes(quants, Q5W_TAIL, v, true);
        q5w_tail_by_dword(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(u)), 2 * v, &x[0][0], 4);
        q5w_tail_by_dword(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(u, 1)), 2 * v + 1, &x[0][0], 4);
    }
    for (int v = 0; v < 16; v++) _mm512_store_si512(&rt[v], _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)x[v])));
    const __m512 d = chunk_f16(tail, Q5W_TAIL);
    _mm512_store_si512(&rt[16], _mm512_castps_si512(_mm512_broadcast_f32x4(_mm512_castps512_ps128(d))));
    _mm512_store_si512(&rt[17], _mm512_castps_si512(
                                    _mm512_broadcast_f32x4(_mm512_castps512_ps128(chunk_offsets(type, tail, Q5W_TAIL, d)))));
}

/* Token t (0..3) of a quad from its kq16_tail: the words 256 q + q2 in
 * the rows' order, and the dots' start (add_short_tail's off, summed over
 * each block's lanes). */
INLINE void q5w_turn_tail(const int type, const kq16_tail *a, int t, q5w_tail_quad *quad) {
#pragma GCC unroll 2
    for (int v = 0; v < 2; v++) {
        const __m512i q = _mm512_loadu_si512(a->q[v]), q2 = _mm512_loadu_si512(a->q2[v]);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i qh = h ? _mm512_extracti64x4_epi64(q, 1) : _mm512_castsi512_si256(q);
            const __m256i q2h = h ? _mm512_extracti64x4_epi64(q2, 1) : _mm512_castsi512_si256(q2);
            const __m512i w = _mm512_add_epi16(_mm512_slli_epi16(_mm512_cvtepi8_epi16(qh), 8), _mm512_cvtepi8_epi16(q2h));
            q5w_tail_by_dword(w, 2 * v + h, &quad->x[0][4 * t], 16);
        }
    }
    __m512i off = _mm512_setzero_si512();
    if (folds_offset(type)) {
        off = _mm512_srai_epi32(_mm512_loadu_si512(a->off), 7 - offset_shift(type));
        off = _mm512_add_epi32(off, _mm512_shuffle_i32x4(off, off, _MM_SHUFFLE(1, 0, 3, 2))); /* lane L + 8 */
        off = _mm512_add_epi32(off, _mm512_shuffle_i32x4(off, off, _MM_SHUFFLE(2, 3, 0, 1))); /* + 4: block j in lane j */
    }
    _mm_storeu_si128((__m128i *)&quad->start[4 * t], _mm512_castsi512_si128(off));
    memcpy(&quad->d[4 * t], a->d, 4 * sizeof(float));
    memcpy(&quad->s[4 * t], a->s, 4 * sizeof(float));
}

/* The NR rows' tails (rt, Q5W_ROW_VECS vectors a row) against a token
 * quad's turned tails, added into acc as the last step of a tile, which it
 * finishes (finish_outputs): add_short_tail's integer dots, and its float
 * steps for block j in lane j of each output, here for a row's four
 * tokens' lanes 0..3 in one vector (lane 4 t + j), gathered from and put
 * back into the quarters sum4_partials takes, so that no lane sees another
 * operation than in finish_outputs. */
INLINE void q5w_finish_tail(const int type, const int NR, const __m512i *rt, const q5w_tail_quad *quad,
                            __m512 acc[4][4], float *out, size_t out_stride) {
    __m512i dot[4][2]; /* two chains a row: 16 deep, four rows would wait on the multiply-add's latency */
    const __m512i start = _mm512_load_si512(quad->start);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) dot[r][0] = start, dot[r][1] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int v = 0; v < 16; v++) {
        __m512i xv = _mm512_load_si512(quad->x[v]);
        __asm__("" : "+v"(xv)); /* a register for the NR rows, not NR memory operands (dot_pairs says why) */
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            dot[r][v & 1] = _mm512_dpwssd_epi32(dot[r][v & 1], _mm512_load_si512(&rt[Q5W_ROW_VECS * r + v]), xv);
    }
    const __m512 da = _mm512_load_ps(quad->d);
    __m512 part[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r >= NR) {
            part[r] = _mm512_setzero_ps();
            continue;
        }
        const __m512i *w = rt + Q5W_ROW_VECS * r;
        __m512 lo01 = _mm512_shuffle_f32x4(acc[r][0], acc[r][1], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 lo23 = _mm512_shuffle_f32x4(acc[r][2], acc[r][3], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi01 = _mm512_shuffle_f32x4(acc[r][0], acc[r][1], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512 hi23 = _mm512_shuffle_f32x4(acc[r][2], acc[r][3], _MM_SHUFFLE(3, 2, 3, 2));
        __m512 g = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0)); /* token t's lanes 0..3 in quarter t */
        const __m512 dw = _mm512_castsi512_ps(_mm512_load_si512(&w[16]));
        g = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dot[r][0], dot[r][1])), _mm512_mul_ps(dw, da), g);
        if (!signed_dots(type)) g = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_load_si512(&w[17])), _mm512_load_ps(quad->s), g);
        lo01 = _mm512_mask_shuffle_f32x4(lo01, 0x0f0f, g, g, _MM_SHUFFLE(0, 1, 0, 0)); /* quarters 0, 1 of g back */
        lo23 = _mm512_mask_shuffle_f32x4(lo23, 0x0f0f, g, g, _MM_SHUFFLE(0, 3, 0, 2));
        part[r] = sum4_quarters(lo01, hi01, lo23, hi23);
    }
    finish_partials(NR, part, out, out_stride);
}

/* NR rows (words a row row_vecs vectors apart; w their packed rows) x 4
 * tokens, as tile_x16_panel; a short tail of 4 blocks from the rows'
 * tails rt and the tokens' turned quad. */
INLINE void q5w_tile(const int type, const int NR, const __m512i *words, int row_vecs, const uint8_t *w,
                     size_t row_bytes, int nb, const uint8_t *act, size_t act_stride, const __m512i *rt,
                     const q5w_tail_quad *quad, float *out, size_t out_stride) {
    const int NT = 4, bb = block32_bytes(type), n_main = x16_main_blocks(nb);
    __m512 acc[4][4];
    start_outputs(NR, NT, acc, NULL, 0);
    for (int c0 = 0; c0 < n_main; c0 += 16) {
        const int m = n_main - c0 < 16 ? n_main - c0 : 16;
        const uint8_t *chunk[4], *x[4];
        const kq16_chunk *a[4];
        __m512i dot[4][4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            a[t] = (const kq16_chunk *)(act + (size_t)t * act_stride) + c0 / 16;
            x[t] = (const uint8_t *)&a[t]->q[0][0];
            const __m512i start = chunk_dot_start(type, false, a[t]->off);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) dot[r][t] = start;
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) chunk[r] = w + (size_t)r * row_bytes + (size_t)c0 * bb;
        const __m512i *cw[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) cw[r] = words + (size_t)r * row_vecs + c0;
        words_dots(NR, 16, cw, x, dot);
        x16_chunk_scale(type, NR, NT, chunk, a, m, dot, acc);
    }
    if (quad) {
        q5w_finish_tail(type, NR, rt, quad, acc, out, out_stride);
        return;
    }
    x16_tails(type, w, row_bytes, nb, act, act_stride, NR, NT, 0, acc);
    finish_outputs(NR, NT, acc, out, out_stride, NULL, 0);
}

/* ---- packed Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 against kq8_chunk (simd.h) ---------
 * The same chunks and lanes as tile_x16_panel, at half the multiply-adds:
 * one word permute per pair of groups puts block j's four bytes in lane j,
 * and vpdpbusd dots them with four activation bytes. Q8_0's bytes are made
 * unsigned by +128, which comes back as -128 dw times the activation sums.
 * A row's last chunk of m < 16 blocks runs the same way (its groups 2m
 * bytes apart, its lanes past m against zero activations), but a short
 * tail (m <= KQ_SHORT_TAIL), which add_short_tail adds into the same
 * accumulators: every output's operations stay fixed by its row and token. */
/* One chunk of m blocks (m == 16 but for a row's last) into acc. */
INLINE void x8_chunk(const int type, const int NR, const int NT, const uint8_t *const chunk[4],
                     const kq8_chunk *const a[4], const int m, __m512 acc[4][4]) {
    const bool q8 = type == GL_TYPE_Q8_0, five = is_q5(type);
    const int hdr = chunk_hdr(type) * m;
    const __m512i m4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8((char)0x80);
    const __m512i lanes = m == 16 ? _mm512_setzero_si512() : quad_lanes(m);
    const uint8_t *x[4];
    __m512i dot[4][4], dot2[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) dot[r][t] = chunk_dot_start(type, true, a[t]->off), dot2[r][t] = _mm512_setzero_si512();
    dot_pairs_slots(NR, NT, dot, dot2);
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) x[t] = (const uint8_t *)&a[t]->q[0][0];
    if (q8) {
        for (int g = 0; g < 16; g += 4) {
            __m512i u0[4], u1[4];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                u0[r] = _mm512_xor_si512(quad_bytes_m(chunk[r] + hdr + 2 * m * g, m, lanes), flip);
                u1[r] = _mm512_xor_si512(quad_bytes_m(chunk[r] + hdr + 2 * m * (g + 2), m, lanes), flip);
            }
            dot_pairs(NR, NT, dot, dot2, u0, u1, x, g / 2, g / 2 + 1, true, g / 4);
        }
    } else {
        /* Q5's fifth bits: byte b of lane j is block j's byte b, element 4 p + b's
         * bit at p (groups 2 p, 2 p + 1), element 16 + 4 p + b's at 4 + p */
        __m512i flo[4], fhi[4];
        if (five)
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                fifth_nibbles(m == 16 ? _mm512_loadu_si512(chunk[r] + hdr - 64)
                                      : _mm512_maskz_loadu_epi32((__mmask16)((1u << m) - 1), chunk[r] + hdr - 4 * m),
                              &flo[r], &fhi[r]);
#pragma GCC unroll 4
        for (int g = 0; g < 8; g += 2) {
            __m512i lo[4], hi[4];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                __m512i v = quad_bytes_m(chunk[r] + hdr + 2 * m * g, m, lanes);
                lo[r] = five ? with_fifth(v, flo[r], g / 2, m4) : _mm512_and_si512(v, m4);
                hi[r] = five ? with_fifth(_mm512_srli_epi16(v, 4), fhi[r], g / 2, m4)
                             : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
            dot_pairs(NR, NT, dot, dot2, lo, hi, x, g / 2, g / 2 + 4, true, g / 2);
        }
    }
    dot_pairs_join(NR, NT, dot, dot2);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        __m512 dw = chunk_f16(chunk[r], m);
        __m512 mw = chunk_offsets(type, chunk[r], m, dw);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(a[t]->d));
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][t]), sc, acc[r][t]);
            if (!signed_dots(type)) acc[r][t] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(a[t]->s), acc[r][t]);
        }
    }
}

INLINE void tile_x8_panel(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                          size_t act_stride, const int NR, const int NT, float *out, size_t out_stride, float *state,
                          int mode) {
    const size_t ahead = q5_prefetch_distance(type, NR, NT, row_bytes);
    const int bb = block32_bytes(type);
    const int nb = (int)(n_cols / 32), n_full = nb / 16, last = nb % 16 > KQ_SHORT_TAIL ? nb % 16 : 0;
    __m512 acc[4][4];
    start_outputs(NR, NT, acc, state, mode);
    for (int c = 0; c < n_full + (last > 0); c++) {
        const uint8_t *chunk[4];
        const kq8_chunk *a[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            chunk[r] = w + (size_t)r * row_bytes + (size_t)c * 16 * bb;
            prefetch_ahead(chunk[r], 16 * bb, ahead, NR, NT);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) a[t] = (const kq8_chunk *)(act + (size_t)t * act_stride) + c;
        if (c < n_full) x8_chunk(type, NR, NT, chunk, a, 16, acc);
        else x8_chunk(type, NR, NT, chunk, a, last, acc);
    }
    if (nb % 16 && nb % 16 <= KQ_SHORT_TAIL)
        add_short_tail(type, false, NR, NT, w + (size_t)n_full * 16 * bb, row_bytes,
                   act + (size_t)n_full * sizeof(kq8_chunk), act_stride, nb % 16, ahead, acc);
    finish_outputs(NR, NT, acc, out, out_stride, state, mode);
}

INLINE void tile_x8(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                    size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_x8_panel(type, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride, NULL, 0);
}

/* Packed K-quants against kq16_k: lane j of a vector is sub-block j (16
 * elements) of the super-block, so 8 vpdpwssd give the 16 exact sub-block
 * dots of the quants q (simd.h has the layouts). Then per lane:
 *   Q6_K: (dot - 32 sum) * unit * d * scale_j, the -32 as 32 times the
 *         activation sums;
 *   Q5_K: per 32-element block i, in lane 2 i, (dot of sub-blocks
 *         2 i and 2 i + 1) * unit * d * scale - sum * unit * dmin * min,
 *         scale and min block i's, decoded from the 12 scale bytes in
 *         registers (k4_scales' rule per lane); odd lanes stay 0. Half the
 *         float steps would do, but the point is AMX (simd_amx_k.h), which
 *         replays these: there it halves the tile work too.
 *   Q4_K: the super-block's exact integers S = sum of scale_j * dot_j and
 *         M = sum of min_j * sum_j, then two float steps per output
 *         (q4_k_sums): what its AMX rows get from their scale-folded
 *         planes, a whole super-block per tile store. */
INLINE __m512i q4_k_scales_mins_epi32(const uint8_t *s) {
    /* lanes 0..7: scale 0..7, lanes 8..15: min 0..7 */
    const __m128i bytes = _mm_maskz_loadu_epi8(0x0fff, s);
    const __m128i idx_lo = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11);
    const __m128i idx_hi = _mm_setr_epi8(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7);
    __m512i lo = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, idx_lo));
    __m512i hi = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, idx_hi));
    lo = _mm512_and_si512(_mm512_srlv_epi32(lo, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4)),
                          _mm512_setr_epi32(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    hi = _mm512_and_si512(_mm512_srli_epi32(hi, 2),
                          _mm512_setr_epi32(0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48));
    return _mm512_or_si512(lo, hi);
}

/* Two blocks' scales (s0's in lanes 0..7, s1's in 8..15) into *sc and
 * their minimums likewise into *mn: q4_k_scales_mins_epi32's rule on bytes,
 * one block a 128-bit lane, for the cost of one. */
INLINE void q4_k_scales_mins_x2(const uint8_t *s0, const uint8_t *s1, __m512i *sc, __m512i *mn) {
    const __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_maskz_loadu_epi8(0x0fff, s0)),
                                                  _mm_maskz_loadu_epi8(0x0fff, s1), 1);
    const __m256i idx_lo = _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11,
                                            0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11);
    const __m256i idx_hi = _mm256_setr_epi8(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7,
                                            0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7);
    const __m256i keep_lo = _mm256_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15,
                                             63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    const __m256i keep_hi = _mm256_setr_epi8(0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48,
                                             0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48);
    __m256i lo = _mm256_shuffle_epi8(bytes, idx_lo);
    lo = _mm256_mask_srli_epi16(lo, (__mmask16)0xc0c0, lo, 4); /* bytes 12..15 of a lane: the high nibbles */
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(_mm256_shuffle_epi8(bytes, idx_hi), 2), keep_hi);
    const __m256i v = _mm256_or_si256(_mm256_and_si256(lo, keep_lo), hi); /* a lane: scales 0..7, minimums 0..7 */
    *sc = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(_mm256_permute4x64_epi64(v, _MM_SHUFFLE(3, 1, 2, 0))));
    *mn = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(_mm256_permute4x64_epi64(v, _MM_SHUFFLE(2, 0, 3, 1))));
}

/* Against kq8_k (x8) the same lanes take four elements each: one word
 * permute (quad_bytes) of pieces 2 i, 2 i + 1 gives vectors i and i + 2 of
 * the quants' low 4 bits, and of Q6_K's two pieces of high bits those of all
 * four vectors; Q5_K's fifth bits come by a word permute that puts the two
 * bytes of lane j's sub-block in both halves of the lane. Then vpdpbusd, 4
 * of them a super-block against 8 vpdpwssd, and the same scales (the units
 * those of the coarse part).
 *
 * Prompts run these tiles 1 row x 8 tokens (K_TILE_NT): a row's quants and
 * scales are unpacked once for 8 tokens, where 2 x 4 did it for 4, and past
 * the dots the per-output work is the least the float scales allow: Q6_K's
 * dots start from the activations' -32 sums (a load, no arithmetic), Q4_K's
 * and Q5_K's minimums take the activations' float sums in one multiply-add.
 * Every output's operations are the same whatever the tile. */
#define K_TILE_NT 8

DEFINE_DOT_PAIRS(k_dot_pairs, 2, K_TILE_NT)

/* Q4_K's two super-block products (blk0 against a0 with dots d0, blk1, a1,
 * d1: two rows, two tokens or two super-blocks of one row; the same twice
 * for one) packed into one vector: lanes 8 o + k take 32-element block k's
 * dot (sub-blocks 2 k, 2 k + 1 share a scale and a minimum) times its
 * scale, and its activation sum times its minimum. Three such vectors (S's
 * high and low 16 bits at 16 bits, where S may pass 32 bits, S alone at 8;
 * -M) are summed by one transposed tree; S = high * 65536 + low in one fused
 * multiply-add, exactly (high < 2^17, low < 2^19) and rounded once, as the
 * AMX rows' (amx_q4k_floats). Product o's S, -M, d * unit and dmin * unit in lane
 * 4 o of *sf, *mf, *du and *dmu. */
INLINE void q4_k_two(const bool x8, const uint8_t *blk0, const uint8_t *blk1, const uint8_t *a0, const uint8_t *a1,
                     __m512i d0, __m512i d1, size_t a_d, __m256 *sf, __m256 *mf, __m256 *du, __m256 *dmu) {
    const size_t a_nbs = x8 ? offsetof(kq8_k, nbs) : offsetof(kq16_k, nbs);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512i sc, mn;
    q4_k_scales_mins_x2(blk0 + 4, blk1 + 4, &sc, &mn);
    const __m512i pairs = _mm512_add_epi32(_mm512_permutex2var_epi32(d0, even, d1), _mm512_permutex2var_epi32(d0, odd, d1));
    const __m512i nbs = _mm512_mask_loadu_epi32(_mm512_loadu_si512(a0 + a_nbs), 0xff00, a1 + a_nbs);
    const __m512i m = _mm512_mullo_epi32(nbs, mn);
    const __m512i p = _mm512_mullo_epi32(pairs, sc);
    __m512i v0, v1, v2;
    if (x8) v0 = p, v1 = m, v2 = _mm512_setzero_si512();
    else v0 = _mm512_srai_epi32(p, 16), v1 = _mm512_and_si512(p, _mm512_set1_epi32(0xffff)), v2 = m;
    /* 128-bit chunk c: dword i = the sum of v_i's lanes in chunk c */
    const __m512i w0 = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
    const __m512i w1 = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v2), _mm512_unpackhi_epi32(v2, v2));
    const __m512i y = _mm512_add_epi32(_mm512_unpacklo_epi64(w0, w1), _mm512_unpackhi_epi64(w0, w1));
    /* product 0's sums (chunks 0 + 1) in lanes 0..3, product 1's (2 + 3) in 4..7 */
    const __m256i z = _mm512_castsi512_si256(_mm512_add_epi32(_mm512_shuffle_i32x4(y, y, _MM_SHUFFLE(3, 1, 2, 0)),
                                                              _mm512_shuffle_i32x4(y, y, _MM_SHUFFLE(2, 0, 3, 1))));
    const __m256 f = _mm256_cvtepi32_ps(z);
    if (x8) {
        *sf = f;
        *mf = _mm256_permute_ps(f, _MM_SHUFFLE(1, 1, 1, 1));
    } else {
        *sf = _mm256_fmadd_ps(f, _mm256_set1_ps(65536.0f), _mm256_permute_ps(f, _MM_SHUFFLE(1, 1, 1, 1)));
        *mf = _mm256_permute_ps(f, _MM_SHUFFLE(2, 2, 2, 2));
    }
    int32_t h0, h1;
    memcpy(&h0, blk0, 4);
    memcpy(&h1, blk1, 4);
    /* the unit fills every lane of a's d: product 1's by a masked load */
    const __m256 u = _mm256_mask_loadu_ps(_mm256_loadu_ps((const float *)(a0 + a_d)), 0xf0, (const float *)(a1 + a_d));
    /* d * unit, dmin * unit of product 0 in lanes 0, 1, of product 1 in 4, 5 */
    *du = _mm256_mul_ps(_mm256_cvtph_ps(_mm_setr_epi32(h0, 0, h1, 0)), u);
    *dmu = _mm256_permute_ps(*du, _MM_SHUFFLE(1, 1, 1, 1));
}

/* Q4_K's super-block for a tile's n = NR x NT outputs (simd.h, kq16_k): per
 * output the exact integers S = sum of scale_j * dot_j and M = sum of min_j
 * * sum_j, then acc += S * (d * unit), acc -= M * (dmin * unit), the AMX
 * rows' two float steps (simd_amx_k.h). One or two outputs (a decode's):
 * q4_k_two, output o in lane 4 o of accs[0]. */
INLINE __m512 q4_k_sums(const bool x8, const int NR, const int NT, const uint8_t *const blk[2], const uint8_t *const a[K_TILE_NT],
                        size_t a_d, __m512i dot[2][K_TILE_NT], __m512 acc,
                        __m512 accs[2]) {
    const int n = NR * NT;
    const size_t a_nbs = x8 ? offsetof(kq8_k, nbs) : offsetof(kq16_k, nbs);
    if (n <= 2) {
        const int r1 = n == 2 && NR == 2 ? 1 : 0, t1 = n == 2 && NT == 2 ? 1 : 0;
        __m256 sf, mf, du, dmu;
        q4_k_two(x8, blk[0], blk[r1], a[0], a[t1], dot[0][0], dot[r1][t1], a_d, &sf, &mf, &du, &dmu);
        __m256 acc2 = _mm512_castps512_ps256(accs[0]);
        acc2 = _mm256_fmadd_ps(sf, du, acc2);
        acc2 = _mm256_fmadd_ps(mf, dmu, acc2);
        accs[0] = _mm512_castps256_ps512(acc2);
        return acc;
    }
    /* Three to eight outputs: pairs of them (2 g, 2 g + 1; an odd count's
     * last pair takes its output twice) packed as above, four pairs' high,
     * low (16 bits) or S (8), then minimums, summed by one transposed tree:
     * lane l < 8 holds output 2 l (l < 4) or 2 (l - 4) + 1, accq likewise,
     * put in order at the end (q4_k_order). */
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512i v[16];
    /* the scales and minimums of rows (0, 0), (0, 1), (1, 1) in a pair's
     * lanes; d and dmin of lane l's row, the unit of its token (every lane
     * of a[t]'s d holds it: one masked load a lane) */
    __m512i scp[3], mnp[3];
    q4_k_scales_mins_x2(blk[0] + 4, blk[0] + 4, &scp[0], &mnp[0]);
    if (NR == 2) {
        q4_k_scales_mins_x2(blk[0] + 4, blk[1] + 4, &scp[1], &mnp[1]);
        q4_k_scales_mins_x2(blk[1] + 4, blk[1] + 4, &scp[2], &mnp[2]);
    }
    __m256 dd[2];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        int32_t halves;
        memcpy(&halves, blk[r], 4);
        dd[r] = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128(halves)));
    }
    __m256 uv = _mm256_setzero_ps();
    unsigned row1 = 0; /* lanes whose output is in row 1 */
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const int o0 = 2 * g < n ? 2 * g : n - 1, o1 = 2 * g + 1 < n ? 2 * g + 1 : o0;
        const int ra = o0 / NT, ta = o0 % NT, rb = o1 / NT, tb = o1 % NT;
        if (2 * g >= n) {
            v[g] = v[4 + g] = v[8 + g] = _mm512_setzero_si512();
        } else {
            const __m512i sc = scp[ra + rb], mn = mnp[ra + rb];
            const __m512i da = dot[ra][ta], db = dot[rb][tb];
            const __m512i pairs = _mm512_add_epi32(_mm512_permutex2var_epi32(da, even, db), _mm512_permutex2var_epi32(da, odd, db));
            const __m512i nbs = _mm512_mask_loadu_epi32(_mm512_loadu_si512(a[ta] + a_nbs), 0xff00, a[tb] + a_nbs);
            const __m512i p = _mm512_mullo_epi32(pairs, sc), m = _mm512_mullo_epi32(nbs, mn);
            if (x8) {
                v[g] = p, v[4 + g] = m, v[8 + g] = _mm512_setzero_si512();
            } else {
                v[g] = _mm512_srai_epi32(p, 16), v[4 + g] = _mm512_and_si512(p, _mm512_set1_epi32(0xffff));
                v[8 + g] = m;
            }
        }
        uv = _mm256_mask_loadu_ps(uv, (__mmask8)(1u << g), (const float *)(a[ta] + a_d));
        uv = _mm256_mask_loadu_ps(uv, (__mmask8)(1u << (4 + g)), (const float *)(a[tb] + a_d));
        row1 |= (unsigned)ra << g | (unsigned)rb << (4 + g);
    }
    const __m256 dl = NR == 2 ? _mm256_mask_broadcastss_ps(_mm256_broadcastss_ps(_mm256_castps256_ps128(dd[0])), (__mmask8)row1,
                                                            _mm256_castps256_ps128(dd[1]))
                              : _mm256_broadcastss_ps(_mm256_castps256_ps128(dd[0]));
    const __m256 dm0 = _mm256_permutexvar_ps(_mm256_set1_epi32(1), dd[0]);
    const __m256 dml = NR == 2 ? _mm256_mask_permutexvar_ps(dm0, (__mmask8)row1, _mm256_set1_epi32(1), dd[1]) : dm0;
    /* x[k]'s 128-bit chunk c, dword i: the sum of v[4 k + i]'s lanes in chunk c */
    __m512i x[3];
    for (int k = 0; k < (x8 ? 2 : 3); k++) {
        const __m512i w0 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[4 * k], v[4 * k + 1]), _mm512_unpackhi_epi32(v[4 * k], v[4 * k + 1]));
        const __m512i w1 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[4 * k + 2], v[4 * k + 3]), _mm512_unpackhi_epi32(v[4 * k + 2], v[4 * k + 3]));
        x[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(w0, w1), _mm512_unpackhi_epi64(w0, w1));
    }
    /* chunks 0 + 1 (each pair's first output) and 2 + 3 (its second) */
    const __m512i z0 = _mm512_add_epi32(_mm512_shuffle_i32x4(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_i32x4(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 f0 = _mm512_cvtepi32_ps(z0);
    const __m512 hi = _mm512_shuffle_f32x4(f0, f0, _MM_SHUFFLE(3, 2, 3, 2));
    __m512 sf, mf;
    if (x8) {
        sf = f0, mf = hi;
    } else {
        const __m512i z1 = _mm512_add_epi32(_mm512_shuffle_i32x4(x[2], x[2], _MM_SHUFFLE(2, 0, 2, 0)),
                                            _mm512_shuffle_i32x4(x[2], x[2], _MM_SHUFFLE(3, 1, 3, 1)));
        sf = _mm512_fmadd_ps(f0, _mm512_set1_ps(65536.0f), hi);
        mf = _mm512_cvtepi32_ps(z1);
    }
    const __m512 du = _mm512_zextps256_ps512(_mm256_mul_ps(dl, uv));
    const __m512 dmu = _mm512_zextps256_ps512(_mm256_mul_ps(dml, uv));
    acc = _mm512_fmadd_ps(sf, du, acc);
    return _mm512_fmadd_ps(mf, dmu, acc);
}

/* A Q6_K super-block's 16 sub-block scales times its d (packed: d, then
 * the int8 scales), the float steps' sd on every path. */
INLINE __m512 q6_k_sub_scales(const uint8_t *blk) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)))),
                         _mm512_set1_ps(f16_at(blk)));
}

/* A packed Q6_K super-block's groups k and k + 4 (k < 4) as words, 6-bit
 * quants: the low 4 bits' nibbles, the high 2 bits (group v's at 2 (v / 2)
 * in piece v % 2) moved to bits 4, 5. */
INLINE void q6_k_group_words(const uint8_t *blk, int k, __m512i *u0, __m512i *u1) {
    const __m512i m4 = _mm512_set1_epi16(0x0f), m30 = _mm512_set1_epi16(0x30);
    const __m512i l = _mm512_cvtepu8_epi16(load256(blk + 18 + 32 * k));
    const __m512i h = _mm512_cvtepu8_epi16(load256(blk + 146 + 32 * (k % 2)));
    const int s0 = 2 * (k / 2), s1 = 2 * ((k + 4) / 2);
    const __m512i h0 = s0 <= 4 ? _mm512_slli_epi16(h, 4 - s0) : _mm512_srli_epi16(h, s0 - 4);
    const __m512i h1 = s1 <= 4 ? _mm512_slli_epi16(h, 4 - s1) : _mm512_srli_epi16(h, s1 - 4);
    *u0 = _mm512_ternarylogic_epi32(_mm512_and_si512(l, m4), h0, m30, 0xf8); /* a | (b & c) */
    *u1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), h1, m30, 0xf8);
}

/* state and mode as a packed tile's (X16_LOAD, X16_STORE), Q4_K's prompt tiles
 * only (prompt_panels): each row's accq, 16 floats a row. */
INLINE void tile_kq_panel(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int64_t n_cols,
                          const uint8_t *act, size_t act_stride, const int NR, const int NT, float *out,
                          size_t out_stride, float *state, int mode) {
    const size_t ahead = prefetch_distance(NR, NT, row_bytes);
    const bool six = type == GL_TYPE_Q6_K, five = type == GL_TYPE_Q5_K, q4 = type == GL_TYPE_Q4_K;
    const int bb = six ? 210 : five ? 176 : 144;
    const int quants = six ? 18 : 16; /* the low 4 bits of every quant, 4 pieces of 32 bytes */
    /* Q4_K's outputs in q4_k_sums' lane order: a 2 x 8 tile's row r in accq[r], any
     * other tile's (at most 8) all in accq[0] */
    __m512 accq[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    if (mode & X16_LOAD) accq[0] = _mm512_load_ps(state), accq[1] = _mm512_load_ps(state + 16);
    __m512 accs[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}; /* or, one or two of them, in lane 0 here */
    const int nb = (int)(n_cols / 256);
    const size_t a_bytes = x8 ? sizeof(kq8_k) : sizeof(kq16_k);
    const size_t a_d = x8 ? offsetof(kq8_k, d) : offsetof(kq16_k, d);
    const size_t a_off = x8 ? offsetof(kq8_k, off) : offsetof(kq16_k, off);
    const size_t a_s = x8 ? offsetof(kq8_k, s) : offsetof(kq16_k, s);
    const __m512i m4 = _mm512_set1_epi16(0x0f), m16 = _mm512_set1_epi16(0x10);
    const __m512i sub_scale = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i sub_min = _mm512_add_epi32(sub_scale, _mm512_set1_epi32(8));
    const __m512i d_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i b4 = _mm512_set1_epi8(0x0f), b16 = _mm512_set1_epi8(0x10), b30 = _mm512_set1_epi8(0x30);
    __m512 acc[2][K_TILE_NT];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    const uint8_t *pend_blk = NULL, *pend_a = NULL; /* Q4_K, one output: the super-block before, waiting */
    __m512i pend_dot = _mm512_setzero_si512();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk[2], *a[K_TILE_NT];
        __m512i dot[2][K_TILE_NT], dot2[2][K_TILE_NT], fifth[2];
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) a[t] = act + (size_t)t * act_stride + (size_t)b * a_bytes;
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            blk[r] = w + (size_t)r * row_bytes + (size_t)b * bb;
            prefetch_ahead(blk[r], bb, ahead, NR, NT);
            if (five && !x8) fifth[r] = _mm512_cvtepu8_epi16(load256(blk[r] + 144));
            if (five && x8) { /* lane j: bytes 2 j, 2 j + 1 twice, the second pair's bits one further down */
                static const uint16_t twice[32] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7,
                                                   8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15};
                __m512i f = _mm512_permutexvar_epi16(_mm512_loadu_si512(twice), _mm512_castsi256_si512(load256(blk[r] + 144)));
                fifth[r] = _mm512_mask_srli_epi16(f, (__mmask32)0xaaaaaaaau, f, 1);
            }
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                dot[r][t] = six ? _mm512_loadu_si512(a[t] + a_off) : _mm512_setzero_si512();
                dot2[r][t] = _mm512_setzero_si512();
            }
        }
        k_dot_pairs_slots(NR, NT, dot, dot2);
        const uint8_t *x[K_TILE_NT];
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) x[t] = a[t]; /* q[][] comes first in both forms */
        if (x8) {
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) { /* pieces 2 i, 2 i + 1: vectors i, i + 2 */
                __m512i u0[2], u1[2];
#pragma GCC unroll 2
                for (int r = 0; r < NR; r++) {
                    __m512i l = quad_bytes(blk[r] + quants + 64 * i);
                    u0[r] = _mm512_and_si512(l, b4);
                    u1[r] = _mm512_and_si512(_mm512_srli_epi16(l, 4), b4);
                    if (six) { /* vector u's high bits at 2 u, to bits 4, 5 */
                        __m512i h = quad_bytes(blk[r] + 146);
                        u0[r] = _mm512_or_si512(u0[r], _mm512_and_si512(_mm512_slli_epi16(h, 4 - 2 * i), b30));
                        u1[r] = _mm512_or_si512(u1[r], _mm512_and_si512(_mm512_srli_epi16(h, 2 * i), b30));
                    } else if (five) { /* vector u's at 2 u */
                        __m512i f = _mm512_srli_epi16(fifth[r], 2 * i);
                        u0[r] = _mm512_or_si512(u0[r], _mm512_and_si512(_mm512_slli_epi16(f, 4), b16));
                        u1[r] = _mm512_or_si512(u1[r], _mm512_and_si512(f, b16));
                    }
                }
                k_dot_pairs(NR, NT, dot, dot2, u0, u1, x, i, i + 2, true, i);
            }
        } else
        for (int k = 0; k < 4; k++) { /* groups k and k + 4 */
            __m512i u0[2], u1[2];
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) {
                if (six) {
                    q6_k_group_words(blk[r], k, &u0[r], &u1[r]);
                    continue;
                }
                __m512i l = _mm512_cvtepu8_epi16(load256(blk[r] + quants + 32 * k));
                u0[r] = _mm512_and_si512(l, m4);
                u1[r] = _mm512_srli_epi16(l, 4);
                if (five) { /* bits k and k + 4 to bit 4 */
                    u0[r] = _mm512_or_si512(u0[r], _mm512_and_si512(_mm512_slli_epi16(fifth[r], 4 - k), m16));
                    u1[r] = _mm512_or_si512(u1[r], _mm512_and_si512(_mm512_srli_epi16(fifth[r], k), m16));
                }
            }
            k_dot_pairs(NR, NT, dot, dot2, u0, u1, x, k, k + 4, false, k);
        }
        k_dot_pairs_join(NR, NT, dot, dot2);
        if (q4 && NR * NT == 1 && !pend_blk && b + 1 < nb) { /* one output: two super-blocks a q4_k_two */
            pend_blk = blk[0], pend_a = a[0], pend_dot = dot[0][0];
            continue;
        }
        if (q4 && NR * NT == 1 && pend_blk) {
            __m256 sf, mf, du, dmu;
            q4_k_two(x8, pend_blk, blk[0], pend_a, a[0], pend_dot, dot[0][0], a_d, &sf, &mf, &du, &dmu);
            __m128 acc1 = _mm512_castps512_ps128(accs[0]);
            acc1 = _mm_fmadd_ps(_mm256_castps256_ps128(sf), _mm256_castps256_ps128(du), acc1);
            acc1 = _mm_fmadd_ps(_mm256_castps256_ps128(mf), _mm256_castps256_ps128(dmu), acc1);
            acc1 = _mm_fmadd_ps(_mm256_extractf128_ps(sf, 1), _mm256_extractf128_ps(du, 1), acc1);
            acc1 = _mm_fmadd_ps(_mm256_extractf128_ps(mf, 1), _mm256_extractf128_ps(dmu, 1), acc1);
            accs[0] = _mm512_castps128_ps512(acc1);
            pend_blk = NULL;
            continue;
        }
        if (q4 && NR * NT > K_TILE_NT) { /* 2 x 8: each row's 8 outputs a q4_k_sums */
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) accq[r] = q4_k_sums(x8, 1, NT, blk + r, a, a_d, dot + r, accq[r], accs);
            continue;
        }
        if (q4) {
            accq[0] = q4_k_sums(x8, NR, NT, blk, a, a_d, dot, accq[0], accs);
            continue;
        }
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            if (six) {
                const __m512 sd = q6_k_sub_scales(blk[r]);
#pragma GCC unroll 8
                for (int t = 0; t < NT; t++)
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][t]),
                                                _mm512_mul_ps(sd, _mm512_loadu_ps((const float *)(a[t] + a_d))), acc[r][t]);
                continue;
            }
            /* d under the scales, dmin under the minimums: one multiply, the same products */
            int32_t halves;
            memcpy(&halves, blk[r], 4);
            const __m512 d_dmin =
                _mm512_permutexvar_ps(d_lanes, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(halves))));
            const __m512 sm = _mm512_mul_ps(_mm512_cvtepi32_ps(q4_k_scales_mins_epi32(blk[r] + 4)), d_dmin);
            const __m512 sd = _mm512_permutexvar_ps(sub_scale, sm), md = _mm512_permutexvar_ps(sub_min, sm);
            /* a 32-element block's two sub-blocks share scale, minimum and unit: their dots add up
             * (exactly) in the even lane, which alone takes the float steps; the odd lanes stay 0 */
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                __m512 unit = _mm512_loadu_ps((const float *)(a[t] + a_d));
                __m512i pair = _mm512_add_epi32(dot[r][t], _mm512_shuffle_epi32(dot[r][t], _MM_PERM_CDAB));
                acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(pair), _mm512_mul_ps(sd, unit), acc[r][t], 0x5555);
                acc[r][t] = _mm512_mask3_fnmadd_ps(md, _mm512_loadu_ps((const float *)(a[t] + a_s)), acc[r][t], 0x5555);
            }
        }
    }
    if (q4 && (mode & X16_STORE)) {
        _mm512_store_ps(state, accq[0]);
        _mm512_store_ps(state + 16, accq[1]);
        return;
    }
    if (q4) {
        _Alignas(64) float o[16];
        /* lane l < 4: output 2 l, 4 <= l < 8: output 2 (l - 4) + 1 (q4_k_sums) */
        const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 0, 0, 0, 0, 0, 0, 0, 0);
        const int per = NR * NT > K_TILE_NT ? NT : NR * NT; /* outputs an accq holds */
        for (int q = 0; q < (NR * NT > K_TILE_NT ? NR : 1); q++) {
            _mm512_store_ps(o, _mm512_permutexvar_ps(order, accq[q]));
            if (NR * NT <= 2) _mm512_store_ps(o, _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), accs[0]));
#pragma GCC unroll 8
            for (int i = 0; i < per; i++) {
                const int k = q * per + i, r = k / NT, t = k % NT;
                out[(size_t)t * out_stride + (size_t)r] = o[i];
            }
        }
        return;
    }
    /* Four outputs' sums at a time by sum4_ps, each by the tree of its own
     * reduce (the short rows of small models spend a fifth of a tile on
     * reduces one by one). */
    __m512 v[2 * K_TILE_NT + 3];
    float sums[16];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) v[r * NT + t] = acc[r][t];
#pragma GCC unroll 3
    for (int i = NR * NT; i < NR * NT + 3; i++) v[i] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int i = 0; i < NR * NT; i += 4) {
        _mm512_storeu_ps(sums, sum4_ps(v[i], v[i + 1], v[i + 2], v[i + 3]));
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            if (i + j < NR * NT) out[(size_t)((i + j) % NT) * out_stride + (size_t)((i + j) / NT)] = sums[4 * j];
    }
}

INLINE void tile_kq(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int64_t n_cols,
                    const uint8_t *act, size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_kq_panel(type, x8, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride, NULL, 0);
}

/* Q4_K's prompt panels (prompt_panels): at 8 bits (at 16, a call's last
 * 8-15 tokens and rows past KQT_MAX_SB) a row pair's 8 tokens read 3-6 KiB
 * of activations a super-block, from L2 row after row (8 tokens of 2048
 * columns pass L1), one load per two dots; a panel of KQ_PANEL
 * super-blocks keeps them (24 KiB) in L1. */
#define KQ_PANEL 4
#define KQ_ROW_BLOCK 32

/* Q4_K prompts at 16 bits, 16 tokens a vector. The sub-block lanes above
 * leave each output and super-block a 16-lane sum, split in high and low
 * halves, pair permutes and scale multiplies: as many vector operations as
 * the dots. Here lane t is token t: the quantize step turned 16 tokens'
 * activations (kq16_kt, simd.h), a row's quants take their scales as words
 * (w' = q x scale, at most 945), and each dword of w' is a broadcast
 * operand of one vpdpwssd for 16 tokens. S comes out in lanes: four
 * accumulators of four sub-blocks each (|sum| < 64 x 945 x 32639 < 2^31),
 * whose high and low 16 bits are summed apart and joined as q4_k_sums'
 * (high x 65536 + low in one fused multiply-add is S rounded once); M is
 * the same integer as there; the float steps are the same, in the same
 * order. */
#define KQT_PASS_SB 48 /* super-blocks of turned activations a pass takes for each row block (8.6 KiB each, in L2) */
#define KQT_PASS_MIN_GROUPS 4 /* but at least this many groups: rows of 17-24 super-blocks made w' every 2 (4 take up to 825 KiB) */
#define KQT_ROWS 4

/* A row's super-block as the tiles take it: w' in kq16_k's dword order,
 * and its minimums (lanes 8..15) as words m, 256 m: one vpdpwssd against
 * kq16_kt's nbs words gives m x nbs. */
typedef struct q4_k_wt {
    int32_t q[128];
    int32_t mins[16];
} q4_k_wt;

/* Super-block blk's w' and minimums into *wt. */
INLINE void q4_k_scale_words(const uint8_t *blk, q4_k_wt *wt) {
    const __m512i m4 = _mm512_set1_epi16(0x0f);
    const __m512i sub_scale = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    __m512i sc, mn;
    q4_k_scales_mins_x2(blk + 4, blk + 4, &sc, &mn);
    _mm512_store_si512(wt->mins, _mm512_or_si512(mn, _mm512_slli_epi32(mn, 24)));
    const __m512i sj = _mm512_permutexvar_epi32(sub_scale, sc);
    const __m512i scw = _mm512_or_si512(sj, _mm512_slli_epi32(sj, 16));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) { /* groups k and k + 4 */
        const __m512i l = _mm512_cvtepu8_epi16(load256(blk + 16 + 32 * k));
        _mm512_store_si512(wt->q + 16 * k, _mm512_mullo_epi16(_mm512_and_si512(l, m4), scw));
        _mm512_store_si512(wt->q + 16 * (k + 4), _mm512_mullo_epi16(_mm512_srli_epi16(l, 4), scw));
    }
}

/* NR (1..KQT_ROWS) rows x 16 tokens: row r's super-block b as wt[r nb + b]
 * (w its packed rows, for d and dmin), the tokens' turned activations at a
 * (nb of them). Token t, row r into out[t out_stride + r]. */
INLINE void q4_k_tok_tile(const int NR, const q4_k_wt *wt, const uint8_t *w, size_t row_bytes, int nb, const kq16_kt *a,
                          float *out, size_t out_stride) {
    __m512 accq[KQT_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) accq[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++, a++) {
        __m512 d[KQT_ROWS], dmin[KQT_ROWS];
        const q4_k_wt *wr[KQT_ROWS];
        __m512i sum[KQT_ROWS][4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            int32_t halves;
            memcpy(&halves, w + (size_t)r * row_bytes + (size_t)b * 144, 4);
            const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(halves));
            d[r] = _mm512_broadcastss_ps(dd), dmin[r] = _mm512_broadcastss_ps(_mm_movehdup_ps(dd));
            wr[r] = wt + (size_t)r * nb + b;
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) sum[r][q] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++)
#pragma GCC unroll 16
            for (int jj = 0; jj < 16; jj++) { /* sub-blocks 0, 4, 8, 12, 1, ...: 16 chains in flight, not 4 */
                const int j = 4 * (jj % 4) + jj / 4;
                const __m512i x = _mm512_loadu_si512(a->q[16 * v + j]);
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) {
                    /* w' broadcast by a load of its own: as vpdpwssd's embedded-broadcast
                     * operand (the compiler's choice) Zen 4 ran it at a third of the rate */
                    __m512i wb;
                    __asm__("vpbroadcastd %[w], %[b]" : [b] "=v"(wb) : [w] "m"(wr[r]->q[16 * v + j]));
                    sum[r][j / 4] = _mm512_dpwssd_epi32(sum[r][j / 4], x, wb);
                }
            }
        const __m512 unit = _mm512_loadu_ps(a->unit);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            /* S = high x 65536 + low, the sums' high and low 16 bits summed */
            __m512i hi = _mm512_srai_epi32(sum[r][0], 16), lo = _mm512_and_si512(sum[r][0], _mm512_set1_epi32(0xffff));
#pragma GCC unroll 3
            for (int q = 1; q < 4; q++) {
                hi = _mm512_add_epi32(hi, _mm512_srai_epi32(sum[r][q], 16));
                lo = _mm512_add_epi32(lo, _mm512_and_si512(sum[r][q], _mm512_set1_epi32(0xffff)));
            }
            const __m512 sf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_set1_ps(65536.0f), _mm512_cvtepi32_ps(lo));
            __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m512i mb;
                __asm__("vpbroadcastd %[w], %[b]" : [b] "=v"(mb) : [w] "m"(wr[r]->mins[8 + k]));
                m = _mm512_dpwssd_epi32(m, _mm512_loadu_si512(a->nbs[k]), mb);
            }
            const __m512 du = _mm512_mul_ps(d[r], unit), dmu = _mm512_mul_ps(dmin[r], unit);
            accq[r] = _mm512_fmadd_ps(sf, du, accq[r]);
            accq[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), dmu, accq[r]);
        }
    }
    _Alignas(64) float o[16];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        _mm512_store_ps(o, accq[r]);
        for (int t = 0; t < KQT_TOKENS; t++) out[(size_t)t * out_stride + (size_t)r] = o[t];
    }
}

/* Whole 16-token groups of a call (16-bit activations, rows of at most
 * KQT_MAX_SB super-blocks; the groups turned after the rows, simd.h) as
 * above: KQT_PASS_SB super-blocks of them (KQT_PASS_MIN_GROUPS groups at
 * least) at a time, and for them each
 * block of KQT_ROWS rows made into w' once. Returns the tokens done. */
INLINE int q4_k_tok_rows(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act,
                         size_t act_stride, int n_tok, float *out, size_t out_stride) {
    if (!kern_k16_turned(n_cols, n_tok)) return 0;
    const int nb = (int)(n_cols / 256), n_groups = n_tok / KQT_TOKENS;
    const int pass_groups = KQT_PASS_SB / nb < KQT_PASS_MIN_GROUPS ? KQT_PASS_MIN_GROUPS : KQT_PASS_SB / nb;
    const kq16_kt *turned = (const kq16_kt *)kern_amx_region(act, n_tok, act_stride);
    _Alignas(64) q4_k_wt wt[KQT_ROWS * KQT_MAX_SB];
    for (int g0 = 0; g0 < n_groups; g0 += pass_groups) {
        const int ng = n_groups - g0 < pass_groups ? n_groups - g0 : pass_groups;
        for (int r = 0; r < n_rows; r += KQT_ROWS) {
            const int nr = n_rows - r < KQT_ROWS ? n_rows - r : KQT_ROWS;
            for (int i = 0; i < nr; i++)
                for (int b = 0; b < nb; b++) q4_k_scale_words(w + (size_t)(r + i) * row_bytes + (size_t)b * 144, wt + (size_t)i * nb + b);
            for (int g = g0; g < g0 + ng; g++) {
#define KQT_TILE(NR)                                                                                                    \
    q4_k_tok_tile(NR, wt, w + (size_t)r * row_bytes, row_bytes, nb, turned + (size_t)g * nb,                           \
                  out + (size_t)g * KQT_TOKENS * out_stride + (size_t)r, out_stride)
                switch (nr) {
                case 4: KQT_TILE(4); break;
                case 3: KQT_TILE(3); break;
                case 2: KQT_TILE(2); break;
                default: KQT_TILE(1); break;
                }
#undef KQT_TILE
            }
        }
    }
    return n_groups * KQT_TOKENS;
}

/* Q6_K's super-blocks of row w as words, 8 vectors each (tile_kq's
 * unpack), then its sub-blocks' scales d x scale (tile_kq's sd): a tile
 * takes them for 4 tokens, where making them took a fifth of its float
 * steps. */
#define Q6W_SB_VECS 9
INLINE void q6w_unpack(const uint8_t *w, int nb, __m512i *words) {
    for (int b = 0; b < nb; b++, words += Q6W_SB_VECS) {
        const uint8_t *blk = w + (size_t)b * 210;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) q6_k_group_words(blk, k, &words[k], &words[k + 4]);
        _mm512_store_si512(&words[8], _mm512_castps_si512(q6_k_sub_scales(blk)));
    }
}

/* NR rows of Q6_K (words and scales a row row_vecs vectors apart) x 4
 * tokens, with tile_kq's integer dots and float steps. */
INLINE void q6w_tile(const int NR, const __m512i *words, int row_vecs, int nb, const uint8_t *act, size_t act_stride,
                     float *out, size_t out_stride) {
    const int NT = 4;
    __m512 acc[4][4];
    start_outputs(NR, NT, acc, NULL, 0);
    for (int b = 0; b < nb; b++) {
        const kq16_k *a[4];
        const uint8_t *x[4];
        const __m512i *wb[4];
        __m512i dot[4][4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            a[t] = (const kq16_k *)(act + (size_t)t * act_stride) + b;
            x[t] = (const uint8_t *)a[t]->q;
            const __m512i start = _mm512_loadu_si512(a[t]->off); /* the -32, as tile_kq */
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) dot[r][t] = start;
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) wb[r] = words + (size_t)r * row_vecs + Q6W_SB_VECS * b;
        words_dots(NR, 8, wb, x, dot);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const __m512 sd = _mm512_castsi512_ps(_mm512_load_si512(&wb[r][8]));
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++)
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][t]), _mm512_mul_ps(sd, _mm512_loadu_ps(a[t]->d)), acc[r][t]);
        }
    }
    finish_outputs(NR, NT, acc, out, out_stride, NULL, 0);
}

/* Whole 4-token groups of a 16-bit Q5 or Q6_K call as above: by blocks of
 * tokens (their activations in L2) and in them of rows (their words in L2),
 * each row block unpacked once a token block. Returns the tokens done. */
INLINE int words_rows(const int type, const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols,
                      const uint8_t *act, size_t act_stride, int n_tok, float *out, size_t out_stride) {
    const bool six = type == GL_TYPE_Q6_K;
    const int nb = (int)(n_cols / (six ? 256 : 32)), n_main = six ? nb : x16_main_blocks(nb);
    const bool tail4 = !six && nb % 16 == Q5W_TAIL;
    const int row_vecs = six ? Q6W_SB_VECS * nb : (n_main + 15) / 16 * 16;
    if (n_tok < WORDS_MIN_TOKENS || n_main == 0 || 64 * 4 * row_vecs > WORDS_SCRATCH || act_stride == 0) return 0;
    if (six && nb < WORDS_Q6_K_LONG_SB && n_tok < WORDS_Q6_K_SHORT_TOKENS) return 0;
    const int rb = WORDS_SCRATCH / (64 * row_vecs) / 4 * 4;
    int tb = (int)(WORDS_ACT_BYTES / act_stride) / 4 * 4;
    if (tb < WORDS_BLOCK_TOKENS) tb = WORDS_BLOCK_TOKENS;
    if (tail4 && tb > WORDS_TAIL_TOKENS) tb = WORDS_TAIL_TOKENS;
    _Alignas(64) __m512i words[WORDS_SCRATCH / 64], tails[WORDS_SCRATCH / (64 * 16) * Q5W_ROW_VECS];
    _Alignas(64) q5w_tail_quad quads[WORDS_TAIL_TOKENS / 4];
    const int n_done = n_tok / 4 * 4;
    for (int t0 = 0; t0 < n_done; t0 += tb) {
        const int t1 = t0 + tb < n_done ? t0 + tb : n_done;
        if (tail4) /* the block's tails turned once, for every row block */
            for (int t = t0; t < t1; t++)
                q5w_turn_tail(type, (const kq16_tail *)(act + (size_t)t * act_stride + (size_t)(nb / 16) * sizeof(kq16_chunk)),
                              t % 4, quads + (t - t0) / 4);
        for (int r0 = 0; r0 < n_rows; r0 += rb) {
            const int nr = n_rows - r0 < rb ? n_rows - r0 : rb;
            const uint8_t *wr = w + (size_t)r0 * row_bytes;
            for (int r = 0; r < nr; r++) {
                if (six) {
                    q6w_unpack(wr + (size_t)r * row_bytes, nb, words + (size_t)r * row_vecs);
                    continue;
                }
                q5w_unpack(type, wr + (size_t)r * row_bytes, n_main, words + (size_t)r * row_vecs);
                if (tail4)
                    q5w_unpack_tail(type, wr + (size_t)r * row_bytes + (size_t)n_main * block32_bytes(type),
                                    tails + (size_t)r * Q5W_ROW_VECS);
            }
            for (int t = t0; t < t1; t += 4) {
                const uint8_t *at = act + (size_t)t * act_stride;
                float *o = out + (size_t)t * out_stride + r0;
                int r = 0;
#define WORDS_TILE(NR)                                                                                                   \
    do {                                                                                                                 \
        if (six)                                                                                                         \
            q6w_tile(NR, words + (size_t)r * row_vecs, row_vecs, nb, at, act_stride, o + r, out_stride);                 \
        else                                                                                                             \
            q5w_tile(type, NR, words + (size_t)r * row_vecs, row_vecs, wr + (size_t)r * row_bytes, row_bytes, nb, at,    \
                     act_stride, tails + (size_t)r * Q5W_ROW_VECS, tail4 ? quads + (t - t0) / 4 : NULL, o + r,        \
                     out_stride);                                                                                        \
    } while (0)
                for (; r + 4 <= nr; r += 4) WORDS_TILE(4);
                switch (nr - r) {
                case 1: WORDS_TILE(1); break;
                case 2: WORDS_TILE(2); break;
                case 3: WORDS_TILE(3); break;
                default: break;
                }
#undef WORDS_TILE
            }
        }
    }
    return n_done;
}

INLINE void tile_k16(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                     size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_kq(type, false, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride);
}

INLINE void tile_k8(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                    size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_kq(type, true, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride);
}

/* Packed tiles: 2 rows x 4 tokens keep 8 integer and 8 float accumulators
 * plus the operands in the 32 registers; fewer tokens take more rows. */
/* One or two tokens read each packed row alone: a tile of 4 rows is 4
 * streams from memory at once, which the prefetchers serve far worse than
 * one. The unpacked kernels keep 4: their single-row tiles are bound by
 * the dependency chains of their sums instead. */
#define PACKED_ROWS_REST(TILE, TYPE)                \
    case 1: ROWS_PASS(TILE, TYPE, 1, 1); break;     \
    case 2: ROWS_PASS(TILE, TYPE, 1, 2); break;     \
    case 3: ROWS_PASS(TILE, TYPE, 2, 3); break;
#define DEFINE_PACKED_ROWS(name, TILE, TYPE) ROWS_FN_AS(static, name, TILE, TYPE, 2, 4, PACKED_ROWS_REST)

/* Rows longer than a panel (TinyLlama's 5632) take full 4-token tiles one
 * panel of X16_PANEL chunks at a time over blocks of X16_ROW_BLOCK rows, so
 * the 4 tokens' activations of a panel (18 KiB) stay in L1 instead of being
 * read from L2 for every pair of rows. The rest runs in one pass; the
 * results are the same. */
#define X16_PANEL 4
#define X16_ROW_BLOCK 32
/* A tile of packed chunks, against 8-bit (x8) or 16-bit activations (a
 * single token's may come split as well: tile_x16_panel). */
INLINE void chunk_tile(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int64_t n_cols,
                       const uint8_t *act, size_t act_stride, const int NR, const int NT, float *out, size_t out_stride,
                       float *state, int mode, const kq16_split *split) {
    if (x8) tile_x8_panel(type, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride, state, mode);
    else tile_x16_panel(type, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride, state, mode, split);
}

/* Full tiles of a long row one panel at a time over blocks of rows: packed
 * block-32 rows 4 tokens a tile, X16_PANEL chunks a panel; Q4_K 8 tokens
 * (K_TILE_NT), KQ_PANEL super-blocks. The accumulators carry over in state,
 * the same operations in the same order. Returns the tokens done. */
INLINE int prompt_panels(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols,
                         const uint8_t *act, size_t act_stride, int n_tok, float *out, size_t out_stride) {
    const bool k = type == GL_TYPE_Q4_K;
    const int NT = k ? K_TILE_NT : 4, unit = k ? 256 : 512; /* columns of a super-block, a chunk */
    const int panel = unit * (k ? KQ_PANEL : X16_PANEL), row_block = k ? KQ_ROW_BLOCK : X16_ROW_BLOCK;
    const int state_row = k ? 16 : 64; /* floats of a row's accumulators */
    const size_t w_unit = k ? 144 : 16 * (size_t)block32_bytes(type);
    const size_t a_unit = k ? (x8 ? sizeof(kq8_k) : sizeof(kq16_k)) : (x8 ? sizeof(kq8_chunk) : sizeof(kq16_chunk));
    if (n_cols <= panel) return 0;
    _Alignas(64) float state[X16_ROW_BLOCK * 64 > KQ_ROW_BLOCK * 16 ? X16_ROW_BLOCK * 64 : KQ_ROW_BLOCK * 16];
    int t0 = 0;
    for (; t0 + NT <= n_tok; t0 += NT)
        for (int r0 = 0; r0 < n_rows; r0 += row_block) {
            const int nr = n_rows - r0 < row_block ? n_rows - r0 : row_block;
            for (int64_t c0 = 0; c0 < n_cols; c0 += panel) {
                const int64_t pc = n_cols - c0 < panel ? n_cols - c0 : panel;
                const int mode = (c0 > 0 ? X16_LOAD : 0) | (c0 + pc < n_cols ? X16_STORE : 0);
                const uint8_t *pw = w + (size_t)r0 * row_bytes + (size_t)(c0 / unit) * w_unit;
                const uint8_t *pa = act + (size_t)t0 * act_stride + (size_t)(c0 / unit) * a_unit;
                float *o = out + (size_t)t0 * out_stride + r0;
#define PANEL_TILE(NR)                                                                                                  \
    do {                                                                                                                \
        if (k)                                                                                                          \
            tile_kq_panel(type, x8, pw + (size_t)r * row_bytes, row_bytes, pc, pa, act_stride, NR, K_TILE_NT, o + r,    \
                          out_stride, state + state_row * r, mode);                                                     \
        else                                                                                                            \
            chunk_tile(type, x8, pw + (size_t)r * row_bytes, row_bytes, pc, pa, act_stride, NR, 4, o + r, out_stride,   \
                       state + state_row * r, mode, NULL);                                                              \
    } while (0)
                int r = 0;
                for (; r + 2 <= nr; r += 2) PANEL_TILE(2);
                for (; r < nr; r++) PANEL_TILE(1);
#undef PANEL_TILE
            }
        }
    return t0;
}

/* One token. From the caches (kern_weights_stream false) two rows a tile,
 * sharing the activations' loads (one row a tile was clearly slower from
 * L2, and so was a small model's decode). Streaming, each row alone (one
 * stream from memory, with the decode prefetch pair): two rows of
 * TinyLlama's 3 KiB rows lost decode speed, their 3 KiB-ahead requests
 * landing in the row beside; but
 * short Q5 rows (PF_PAIR_ROW_BYTES) and Q4_K rows pair streaming too.
 * Alone, four rows' accumulators are reduced at once by sum4_ps's shared
 * tree, bit for bit each row's own reduce. Each output's operations are
 * those of any tile. */
#define SPLIT_MAX_CHUNKS 64
/* The one rule for two rows a one-token tile (packed and K-quant rows). */
INLINE bool one_token_row_pairs(const int type, size_t row_bytes) {
    if (!atomic_load_explicit(&kern_weights_stream, memory_order_relaxed)) return true;
    return type == GL_TYPE_Q4_K || (is_q5(type) && row_bytes <= PF_PAIR_ROW_BYTES);
}
INLINE void packed_rows_one_token(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int n_rows,
                                  int64_t n_cols, const uint8_t *act, float *out) {
    _Alignas(64) float state[4 * 64];
    /* 16-bit activations against Q5 weights: the chunks split once (split_x16_chunk); Q4's
     * word unpack is cheap enough that twice the byte dots lose (bench_matmul q4_0, q4_1) */
    _Alignas(64) kq16_split split[SPLIT_MAX_CHUNKS];
    const int nb = (int)(n_cols / 32), n_split = nb % 16 > KQ16_HALF_TAIL ? (nb + 15) / 16 : nb / 16;
    const bool use_split = !x8 && is_q5(type) && n_split <= SPLIT_MAX_CHUNKS && n_split > 0;
    const kq16_split *sp = use_split ? split : NULL;
    if (use_split)
        for (int c = 0; c < n_split; c++) split_x16_chunk((const kq16_chunk *)act + c, &split[c]);
    int r = 0;
    if (one_token_row_pairs(type, row_bytes))
        for (; r + 2 <= n_rows; r += 2)
            chunk_tile(type, x8, w + (size_t)r * row_bytes, row_bytes, n_cols, act, 0, 2, 1, out + r, 0, NULL, 0, sp);
    for (; r + 4 <= n_rows; r += 4) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            chunk_tile(type, x8, w + (size_t)(r + i) * row_bytes, row_bytes, n_cols, act, 0, 1, 1, NULL, 0,
                       state + 64 * i, X16_STORE, sp);
        __m512 sums = sum4_ps(_mm512_load_ps(state), _mm512_load_ps(state + 64), _mm512_load_ps(state + 128),
                              _mm512_load_ps(state + 192));
        _mm_storeu_ps(out + r, _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, sums)));
    }
    for (; r < n_rows; r++)
        chunk_tile(type, x8, w + (size_t)r * row_bytes, row_bytes, n_cols, act, 0, 1, 1, out + r, 0, NULL, 0, sp);
}

#define DEFINE_PACKED_CHUNK_ROWS(name, TILE, TYPE, X8)                                                          \
    DEFINE_PACKED_ROWS(CAT(name, whole), TILE, TYPE)                                                            \
    SIMD_DEF void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act,   \
                         size_t act_stride, int n_tok, float *out, size_t out_stride) {                         \
        if (n_tok == 1) {                                                                                       \
            packed_rows_one_token(TYPE, X8, w, row_bytes, n_rows, n_cols, act, out);                            \
            return;                                                                                             \
        }                                                                                                       \
        int t0 = !X8 && is_q5(TYPE) ? words_rows(TYPE, w, row_bytes, n_rows, n_cols, act, act_stride, n_tok, out, out_stride) : 0; \
        t0 += prompt_panels(TYPE, X8, w, row_bytes, n_rows, n_cols, act + (size_t)t0 * act_stride, act_stride, n_tok - t0, \
                                  out + (size_t)t0 * out_stride, out_stride);                                   \
        FN(CAT(name, whole))(w, row_bytes, n_rows, n_cols, act + (size_t)t0 * act_stride, act_stride, n_tok - t0, \
                             out + (size_t)t0 * out_stride, out_stride);                                        \
    }
#if SIMD_EMITS(PACKED)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_q4_0, tile_x16, GL_TYPE_Q4_0, false) /* packed_rows_q4_0_avx512, packed_rows_q4_0_whole_avx512 */
DEFINE_PACKED_CHUNK_ROWS(packed_rows_q4_1, tile_x16, GL_TYPE_Q4_1, false) /* packed_rows_q4_1_avx512, packed_rows_q4_1_whole_avx512 */
#endif
#if SIMD_EMITS(PACKED_Q8_0)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_q8_0, tile_x16, GL_TYPE_Q8_0, false) /* packed_rows_q8_0_avx512, packed_rows_q8_0_whole_avx512 */
#endif
#if SIMD_EMITS(PACKED_Q5_0)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_q5_0, tile_x16, GL_TYPE_Q5_0, false) /* packed_rows_q5_0_avx512, packed_rows_q5_0_whole_avx512 */
#endif
#if SIMD_EMITS(PACKED_Q5_1)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_q5_1, tile_x16, GL_TYPE_Q5_1, false) /* packed_rows_q5_1_avx512, packed_rows_q5_1_whole_avx512 */
#endif
#if SIMD_EMITS(PACKED_X8)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_x8_q4_0, tile_x8, GL_TYPE_Q4_0, true) /* packed_rows_x8_q4_0_avx512, packed_rows_x8_q4_0_whole_avx512 */
DEFINE_PACKED_CHUNK_ROWS(packed_rows_x8_q4_1, tile_x8, GL_TYPE_Q4_1, true) /* packed_rows_x8_q4_1_avx512, packed_rows_x8_q4_1_whole_avx512 */
DEFINE_PACKED_CHUNK_ROWS(packed_rows_x8_q8_0, tile_x8, GL_TYPE_Q8_0, true) /* packed_rows_x8_q8_0_avx512, packed_rows_x8_q8_0_whole_avx512 */
#endif
#if SIMD_EMITS(PACKED_X8_Q5)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_x8_q5_0, tile_x8, GL_TYPE_Q5_0, true) /* packed_rows_x8_q5_0_avx512, packed_rows_x8_q5_0_whole_avx512 */
DEFINE_PACKED_CHUNK_ROWS(packed_rows_x8_q5_1, tile_x8, GL_TYPE_Q5_1, true) /* packed_rows_x8_q5_1_avx512, packed_rows_x8_q5_1_whole_avx512 */
#endif
/* K-quant rows: 1 x K_TILE_NT prompt tiles (8-bit Q5_K), 2 x 4 where two
 * rows sharing each activation load beat one row's unpack over 8 tokens
 * (Q6_K, 16-bit Q5_K), Q4_K its own below; one token two rows a tile from the
 * caches, one streaming (as packed_rows_one_token, and for its reasons),
 * two one row, 3 and 4 two rows. Q4_K two rows streaming too: its
 * super-blocks' sums go two outputs a tree (q4_k_two), a row alone pairs
 * its own super-blocks, so two rows a tile are faster streaming as well, at
 * both widths (bench_matmul q4_k with BENCH_STREAM=1). */
#define PACKED_K_ROWS_REST(TILE, TYPE)                                                      \
    case 1:                                                                                 \
        if (one_token_row_pairs(TYPE, row_bytes)) ROWS_PASS(TILE, TYPE, 2, 1);              \
        else ROWS_PASS(TILE, TYPE, 1, 1);                                                   \
        break;                                                                              \
    case 2: ROWS_PASS(TILE, TYPE, 1, 2); break;     \
    case 3: ROWS_PASS(TILE, TYPE, 2, 3); break;     \
    case 4: ROWS_PASS(TILE, TYPE, 2, 4); break;     \
    case 5: ROWS_PASS(TILE, TYPE, 1, 5); break;     \
    case 6: ROWS_PASS(TILE, TYPE, 1, 6); break;     \
    case 7: ROWS_PASS(TILE, TYPE, 1, 7); break;
#define DEFINE_PACKED_K_ROWS(name, TILE, TYPE) ROWS_FN(name, TILE, TYPE, 1, K_TILE_NT, PACKED_K_ROWS_REST)
#define DEFINE_PACKED_K_ROWS_2X4(name, TILE, TYPE) ROWS_FN(name, TILE, TYPE, 2, 4, PACKED_K_ROWS_REST)
/* Q4_K: 2 x 8 tiles (two rows share each activation load; q4_k_sums a row),
 * by panels where rows are long (prompt_panels). */
#define DEFINE_PACKED_Q4_K_ROWS(name, TILE, X8)                                                               \
    ROWS_FN_AS(static, CAT(name, whole), TILE, GL_TYPE_Q4_K, 2, K_TILE_NT, PACKED_K_ROWS_REST)                \
    SIMD_DEF void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act, \
                         size_t act_stride, int n_tok, float *out, size_t out_stride) {                       \
        int t0 = X8 ? 0 : q4_k_tok_rows(w, row_bytes, n_rows, n_cols, act, act_stride, n_tok, out, out_stride); \
        t0 += prompt_panels(GL_TYPE_Q4_K, X8, w, row_bytes, n_rows, n_cols, act + (size_t)t0 * act_stride, act_stride, n_tok - t0, \
                          out + (size_t)t0 * out_stride, out_stride);                                        \
        FN(CAT(name, whole))(w, row_bytes, n_rows, n_cols, act + (size_t)t0 * act_stride, act_stride, n_tok - t0, \
                             out + (size_t)t0 * out_stride, out_stride);                                      \
    }
/* 16-bit Q6_K: whole 4-token groups from words (words_rows), then 2 x 4. */
#define DEFINE_PACKED_Q6_K_ROWS(name, TILE)                                                                   \
    ROWS_FN_AS(static, CAT(name, whole), TILE, GL_TYPE_Q6_K, 2, 4, PACKED_K_ROWS_REST)                      \
    SIMD_DEF void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act, \
                         size_t act_stride, int n_tok, float *out, size_t out_stride) {                       \
        int t0 = words_rows(GL_TYPE_Q6_K, w, row_bytes, n_rows, n_cols, act, act_stride, n_tok, out, out_stride); \
        FN(CAT(name, whole))(w, row_bytes, n_rows, n_cols, act + (size_t)t0 * act_stride, act_stride, n_tok - t0, \
                             out + (size_t)t0 * out_stride, out_stride);                                      \
    }
#if SIMD_EMITS(PACKED_K)
DEFINE_PACKED_Q6_K_ROWS(packed_rows_q6_k, tile_k16) /* packed_rows_q6_k_avx512, packed_rows_q6_k_whole_avx512 */
DEFINE_PACKED_Q4_K_ROWS(packed_rows_q4_k, tile_k16, false) /* packed_rows_q4_k_avx512, packed_rows_q4_k_whole_avx512 */
DEFINE_PACKED_K_ROWS_2X4(packed_rows_q5_k, tile_k16, GL_TYPE_Q5_K) /* packed_rows_q5_k_avx512 */
DEFINE_PACKED_K_ROWS_2X4(packed_rows_x8_q6_k, tile_k8, GL_TYPE_Q6_K) /* packed_rows_x8_q6_k_avx512 */
DEFINE_PACKED_Q4_K_ROWS(packed_rows_x8_q4_k, tile_k8, true) /* packed_rows_x8_q4_k_avx512, packed_rows_x8_q4_k_whole_avx512 */
DEFINE_PACKED_K_ROWS(packed_rows_x8_q5_k, tile_k8, GL_TYPE_Q5_K) /* packed_rows_x8_q5_k_avx512 */
#endif

#if SIMD_EMITS(TABLE)
/* r[i] lane j into r[j] lane i: a 16 x 16 dword transpose. */
INLINE void transpose16_epi32(__m512i r[16]) {
    __m512i t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* then r[4 g + e], 128-bit chunk c: element 4 c + e of rows 4 g .. 4 g + 3 */
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) t[e] = r[e], t[4 + e] = r[4 + e], t[8 + e] = r[8 + e], t[12 + e] = r[12 + e];
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        const __m512i ab_lo = _mm512_shuffle_i32x4(t[e], t[4 + e], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i ab_hi = _mm512_shuffle_i32x4(t[e], t[4 + e], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i cd_lo = _mm512_shuffle_i32x4(t[8 + e], t[12 + e], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i cd_hi = _mm512_shuffle_i32x4(t[8 + e], t[12 + e], _MM_SHUFFLE(3, 2, 3, 2));
        r[e] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(2, 0, 2, 0));
        r[4 + e] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(3, 1, 3, 1));
        r[8 + e] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(2, 0, 2, 0));
        r[12 + e] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* kern_impl.k16_layout: kern_quantize_k16's loop in vectors. Element
 * 16 j + 2 v + e is word e of dword 8 j + v in element order, and dword j
 * of q[v] in kq16_k's: a 16 x 8 dword transpose, by gathers. */
static void FN(k16_layout)(const kq8_256 *a, kq16_k *y) {
    _Alignas(64) int16_t e[256]; /* 256 q + q2, element order */
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m512i q = _mm512_cvtepi8_epi16(load256(a->q + 32 * c)), q2 = _mm512_cvtepi8_epi16(load256(a->q2 + 32 * c));
        _mm512_store_si512(e + 32 * c, _mm512_add_epi16(_mm512_slli_epi16(q, 8), q2));
    }
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(8));
    __m512i sum = _mm512_setzero_si512(); /* lane j: sub-block j's */
#pragma GCC unroll 8
    for (int v = 0; v < 8; v++) {
        const __m512i w = _mm512_i32gather_epi32(_mm512_add_epi32(rows, _mm512_set1_epi32(v)), e, 4);
        _mm512_storeu_si512(y->q[v], w);
        sum = _mm512_add_epi32(sum, _mm512_madd_epi16(w, _mm512_set1_epi16(1)));
    }
    const __m512 d = _mm512_set1_ps(a->d);
    _mm512_storeu_ps(y->d, d);
    _mm512_storeu_si512(y->off, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-32)));
    /* even j: the 32-element block's sum, sub-blocks j and j + 1 */
    const __m512i pair = _mm512_add_epi32(
        sum, _mm512_permutexvar_epi32(_mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15), sum));
    _mm512_storeu_ps(y->s, _mm512_maskz_mul_ps(0x5555, d, _mm512_cvtepi32_ps(pair)));
    _mm512_storeu_si512(y->nbs, _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14),
                                                          _mm512_sub_epi32(_mm512_setzero_si512(), pair)));
}

/* kern_impl.turn_k16: 16 tokens' kq16_k rows (act_stride apart) of nb super-blocks into at. */
static void FN(turn_k16)(const uint8_t *act, size_t act_stride, int nb, kq16_kt *at) {
    const __m512i tok = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)act_stride));
    for (int b = 0; b < nb; b++) {
        const uint8_t *base = act + (size_t)b * sizeof(kq16_k);
        __m512i r[16];
        for (int v = 0; v < 8; v++) {
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) r[t] = _mm512_loadu_si512(base + (size_t)t * act_stride + offsetof(kq16_k, q) + 64 * v);
            transpose16_epi32(r);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) _mm512_storeu_si512(at[b].q[16 * v + j], r[j]);
        }
#pragma GCC unroll 16
        for (int t = 0; t < 16; t++) r[t] = _mm512_loadu_si512(base + (size_t)t * act_stride + offsetof(kq16_k, nbs));
        transpose16_epi32(r);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) /* words nbs & 255, nbs >> 8 (q4_k_wt's minimums) */
            _mm512_storeu_si512(at[b].nbs[k], _mm512_or_si512(_mm512_and_si512(r[k], _mm512_set1_epi32(0xff)),
                                                               _mm512_slli_epi32(_mm512_srai_epi32(r[k], 8), 16)));
        _mm512_storeu_ps(at[b].unit, _mm512_i32gather_ps(tok, base + offsetof(kq16_k, d), 1));
    }
}

/* ---- activation rows for the packed tiles, in one pass ---------------------------
 * quantize_32's arithmetic on 16 lanes, the same bits (its operations are
 * elementwise; the maximum and the integer sums are exact in any order),
 * with each block's 256 q + q2 going as 16-bit pairs straight into the lanes
 * the tiles read, instead of through kq8_32 rows and a scalar reshuffle. */

/* One 32-element block: its 16 pairs (elements 2p, 2p + 1 in dword p), its
 * unit, and the sums of 256 q + q2 over its two halves. */
/* 32 floats against the step d (quant8's operations): their coarse codes, and the residual
 * ones (as q2 holds them, res: KQ_RES16 or KQ_RES12) where q2 is not NULL. */
INLINE void quant_with(const float *x, float d, int res, __m512i q[2], __m512i *q2) {
    float idf = d != 0.0f ? 1.0f / d : 0.0f;
    __m512 dv = _mm512_set1_ps(d), id = _mm512_set1_ps(idf), id2 = _mm512_set1_ps(idf * (float)res);
    const int rmax = kq_res_max(res);
    for (int h = 0; h < 2; h++) {
        __m512 xv = _mm512_loadu_ps(x + 16 * h);
        q[h] = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(xv, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        if (!q2) continue;
        __m512 r = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(q[h]), dv, xv);
        q2[h] = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(r, id2), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        q2[h] = _mm512_max_epi32(_mm512_min_epi32(q2[h], _mm512_set1_epi32(rmax)), _mm512_set1_epi32(-rmax));
        q2[h] = _mm512_slli_epi32(q2[h], kq_res_shift(res));
    }
}

/* The largest magnitude of n floats (n % 16 == 0) over 127: quantize_32's and quantize_256's step. */
INLINE float quant_step(const float *x, int n) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    return _mm512_reduce_max_ps(m) / 127.0f;
}

/* Its coarse parts q[h] and residuals q2[h] by half, and its unit. */
INLINE void quant_parts(const float *x, int res, float *unit, __m512i q[2], __m512i q2[2]) {
    const float d = quant_step(x, 32);
    quant_with(x, d, res, q, q2);
    *unit = d * (1.0f / 256.0f);
}

INLINE __m512i quant_pairs(const float *x, int res, float *unit, int *sum_lo, int *sum_hi) {
    __m512i q[2], q2[2], v[2];
    quant_parts(x, res, unit, q, q2);
    for (int h = 0; h < 2; h++) v[h] = _mm512_add_epi32(_mm512_slli_epi32(q[h], 8), q2[h]);
    *sum_lo = _mm512_reduce_add_epi32(v[0]);
    *sum_hi = _mm512_reduce_add_epi32(v[1]);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(v[0])), _mm512_cvtepi32_epi16(v[1]), 1);
}

/* quantize_x16_avx512: one whole kq16_chunk (16 blocks): dword lane j of
 * vector v is block j's pair v, a 16 x 16 transpose by gathers. */
static void FN(quantize_x16)(const float *x, kq16_chunk *ch, int res) {
    int32_t pairs[16][16];
    for (int j = 0; j < 16; j++) {
        int lo, hi;
        _mm512_storeu_si512(pairs[j], quant_pairs(x + 32 * j, res, &ch->d[j], &lo, &hi));
        ch->s[j] = ch->d[j] * (float)(lo + hi);
        ch->off[j] = -8 * (lo + hi);
    }
    const __m512i idx = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    for (int v = 0; v < 16; v++)
        _mm512_storeu_si512(ch->q[v], _mm512_i32gather_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(v)), &pairs[0][0], 4));
}

/* One 32-element block's coarse part alone (the q of quant_pairs): its 32
 * codes, its unit (that of kq8_32) and the sums of q over its two halves. */
INLINE void quant_coarse_parts(const float *x, float *unit, __m512i q[2]) {
    const float d = quant_step(x, 32);
    quant_with(x, d, KQ_RES16, q, NULL);
    *unit = d * (1.0f / 256.0f);
}

/* The 32 codes of two halves of 16 dwords as bytes, in order. */
INLINE __m256i codes_epi8(const __m512i q[2]) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(q[0])), _mm512_cvtepi32_epi8(q[1]), 1);
}

INLINE __m256i quant_coarse(const float *x, float *unit, int *sum_lo, int *sum_hi) {
    __m512i q[2];
    quant_coarse_parts(x, unit, q);
    *sum_lo = _mm512_reduce_add_epi32(q[0]);
    *sum_hi = _mm512_reduce_add_epi32(q[1]);
    return codes_epi8(q);
}

/* quantize_x8_avx512: one whole kq8_chunk: dword lane j of vector v is
 * block j's elements 4 v .. 4 v + 3. */
static void FN(quantize_x8)(const float *x, kq8_chunk *ch) {
    int32_t quads[16][8];
    for (int j = 0; j < 16; j++) {
        float unit;
        int lo, hi;
        _mm256_storeu_si256((__m256i *)quads[j], quant_coarse(x + 32 * j, &unit, &lo, &hi));
        ch->d[j] = unit * 256.0f;
        ch->s[j] = ch->d[j] * (float)(lo + hi);
        ch->off[j] = -8 * (lo + hi);
    }
    const __m512i idx = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
    for (int v = 0; v < 8; v++)
        _mm512_storeu_si512(ch->q[v], _mm512_i32gather_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(v)), &quads[0][0], 4));
}

/* ---- the AMX form (simd.h) straight from the floats ------------------------------
 * Up to 16 tokens' block b at a time, each token's codes as 8 dwords of
 * quads (quant_pairs' and quant_coarse's bits, their units and sums), turned
 * by a 16 x 8 dword transpose into the record's 64-byte lines, so each
 * line of the region is written once and whole. */

/* m[t][v] (16 x 8 dwords, 8 vectors of two tokens) into out[v] = m[0..15][v]:
 * three rounds of even/odd splits, each trading one bit of the token for one of v. */
INLINE void transpose_16x8(const int32_t *m, __m512i out[8]) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int i = 0; i < 8; i++) out[i] = _mm512_load_si512(m + 16 * i);
#pragma GCC unroll 3
    for (int bit = 1; bit < 8; bit <<= 1)
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            if (i & bit) continue;
            __m512i a = out[i], b = out[i | bit];
            out[i] = _mm512_permutex2var_epi32(a, even, b);
            out[i | bit] = _mm512_permutex2var_epi32(a, odd, b);
        }
}

/* One token's 32-element block against the step d: its codes as 8 dwords
 * (qc) and, at 16 and 12 bits, its residual codes (rc: q2, at 12 bits r =
 * q2 / 16); the sum of its 256 q + q2 (8 bits: of its q), as quant_pairs'
 * and quant_coarse's halves add up. */
INLINE int quant_block_codes(const float *x, float d, const int bits, int32_t qc[8], int32_t rc[8]) {
    __m512i q[2], q2[2];
    quant_with(x, d, kq_res_of_bits(bits), q, bits != 8 ? q2 : NULL);
    _mm256_store_si256((__m256i *)qc, codes_epi8(q));
    if (bits == 8) return _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
    if (bits == 12) {
        const __m512i r[2] = {_mm512_srai_epi32(q2[0], 4), _mm512_srai_epi32(q2[1], 4)};
        _mm256_store_si256((__m256i *)rc, codes_epi8(r));
    } else {
        _mm256_store_si256((__m256i *)rc, codes_epi8(q2));
    }
    return _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(q[0], 8), q2[0]),
                                                    _mm512_add_epi32(_mm512_slli_epi32(q[1], 8), q2[1])));
}

/* quantize_amx_avx512: tokens 0..nt-1 (x rows x_stride floats apart) into
 * blocks 0..na-1 of one group: kamx16_blk (bits 16 or 12) or kamx8_blk;
 * tokens nt..15 zero. */
static void FN(quantize_amx)(const float *x, size_t x_stride, int nt, int64_t na, uint8_t *group, int bits) {
    const bool x16 = bits != 8;
    _Alignas(64) int32_t qt[16][8], q2t[16][8];
    _Alignas(64) float dt[16], st[16];
    memset(qt, 0, sizeof qt), memset(q2t, 0, sizeof q2t), memset(dt, 0, sizeof dt), memset(st, 0, sizeof st);
    for (int64_t b = 0; b < na; b++) {
        for (int t = 0; t < nt; t++) {
            const float *xb = x + (size_t)t * x_stride + 32 * b;
            const float d = quant_step(xb, 32), unit = d * (1.0f / 256.0f);
            const int sum = quant_block_codes(xb, d, bits, qt[t], q2t[t]);
            dt[t] = x16 ? unit : unit * 256.0f;
            st[t] = dt[t] * (float)sum;
        }
        __m512i q[8];
        transpose_16x8(&qt[0][0], q);
        float *d, *s;
        if (x16) {
            kamx16_blk *rec = (kamx16_blk *)group + b;
            __m512i q2[8];
            transpose_16x8(&q2t[0][0], q2);
            for (int v = 0; v < 8; v++) _mm512_storeu_si512(rec->q[v], q[v]), _mm512_storeu_si512(rec->q2[v], q2[v]);
            d = rec->d, s = rec->s;
        } else {
            kamx8_blk *rec = (kamx8_blk *)group + b;
            for (int v = 0; v < 8; v++) _mm512_storeu_si512(rec->q[v], q[v]);
            d = rec->d, s = rec->s;
        }
        _mm512_storeu_ps(d, _mm512_load_ps(dt));
        _mm512_storeu_ps(s, _mm512_load_ps(st));
    }
}

/* quantize_qa_avx512: tokens 0..nt-1 (x rows x_stride floats apart) into one
 * group of the K-quants' AMX form (kqa16_k, or kqa8_k with x8) of n_sb
 * super-blocks, kern_quantize_qa's bits: a super-block's step from its
 * largest magnitude (quantize_256's), each 32-element block's codes by
 * quant_block_codes against it. A block's 8 dwords of codes a token, transposed,
 * are the 8 lines of its two sub-blocks; tokens nt..15 zero. */
static void FN(quantize_qa)(const float *x, size_t x_stride, int nt, int64_t n_sb, uint8_t *group, bool x8) {
    _Alignas(64) int32_t qt[8][16][8], q2t[8][16][8];
    _Alignas(64) float dt[16], st[8][16];
    memset(qt, 0, sizeof qt), memset(q2t, 0, sizeof q2t), memset(dt, 0, sizeof dt), memset(st, 0, sizeof st);
    for (int64_t b = 0; b < n_sb; b++) {
        for (int t = 0; t < nt; t++) {
            const float *xs = x + (size_t)t * x_stride + 256 * b;
            const float d = quant_step(xs, 256), unit = d * (1.0f / 256.0f);
            dt[t] = x8 ? unit * 256.0f : unit;
            for (int i = 0; i < 8; i++)
                st[i][t] = dt[t] * (float)quant_block_codes(xs + 32 * i, d, x8 ? 8 : 16, qt[i][t], q2t[i][t]);
        }
        kqa16_k *y16 = (kqa16_k *)group + b;
        kqa8_k *y8 = (kqa8_k *)group + b;
        for (int i = 0; i < 8; i++) {
            __m512i q[8];
            transpose_16x8(&qt[i][0][0], q);
            int8_t *lines = x8 ? &y8->q[2 * i][0][0][0] : &y16->q[2 * i][0][0][0];
            for (int v = 0; v < 8; v++) _mm512_storeu_si512(lines + 64 * v, q[v]);
            if (!x8) {
                transpose_16x8(&q2t[i][0][0], q);
                for (int v = 0; v < 8; v++) _mm512_storeu_si512(&y16->q2[2 * i][0][0][0] + 64 * v, q[v]);
            }
            float (*dv)[16] = x8 ? y8->d : y16->d, (*sv)[16] = x8 ? y8->s : y16->s;
            _mm512_storeu_ps(dv[2 * i], _mm512_load_ps(dt));
            _mm512_storeu_ps(dv[2 * i + 1], _mm512_load_ps(dt));
            _mm512_storeu_ps(sv[2 * i], _mm512_load_ps(st[i]));
            _mm512_storeu_ps(sv[2 * i + 1], _mm512_setzero_ps());
        }
    }
}

/* A block of up to 16 positions is one vector: each head's scores build up
 * over the channels in registers, four partial sums per head (a fixed order
 * whatever the number of heads), instead of through memory. Blocks wider
 * than 16 take the generic steps. */
static void CAT(FN(attend), generic_scores)(const uint8_t *k, const uint16_t *ks, size_t k_stride, const float *const *q,
                                            int nr, int hd, int n, gl_kv_type type, int qc, float *score, int ss, int bs,
                                            float *row);
static void CAT(FN(attend), generic_pv)(const uint8_t *v, const uint16_t *vs, size_t v_stride, const float *score, int ss,
                                        int nr, const int *n, int hd, gl_kv_type type, int qc, float *const *out, float *row);

/* KT, the element type, is a constant in each copy of the tiles below. */
INLINE __m512 k_channel(const uint8_t *k, __mmask16 km, const gl_kv_type KT, __m512 scale) {
    if (KT == GL_KV_Q8_0) return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(km, k))), scale);
    return KT == GL_KV_F16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km, k)) : _mm512_maskz_loadu_ps(km, k);
}

/* ng heads (1-4) of one block, each channel's K converted once. ng and the
 * element type are constants in each copy, so the 16 accumulators stay in
 * registers and the loop carries no per-head tests (with them as variables
 * the compiler keeps the accumulators on the stack). Q8_0 codes become
 * values (code times its position's scale) before the multiply-adds, as in
 * the generic steps. */
INLINE void attend_scores_tile(const uint8_t *k, const uint16_t *ks, size_t k_stride, const float *const *qg,
                               const int NG, int hd, int qc, __mmask16 km, const gl_kv_type KT, float *score, int ss,
                               int bs) {
    __m512 acc[4][4]; /* [row][channel % 4] */
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) acc[g][c] = _mm512_setzero_ps();
    __m512 sv = _mm512_setzero_ps();
    /* hd % 4 == 0 and qc % 4 == 0 (attend_scores): a tail loop's variable index would put acc in memory */
    for (int d = 0; d < hd; d += 4) {
        if (KT == GL_KV_Q8_0 && d % qc == 0)
            sv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km, ks + (size_t)(d / qc) * bs));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512 kv = k_channel(k + (size_t)(d + c) * k_stride, km, KT, sv);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) acc[g][c] = _mm512_fmadd_ps(_mm512_set1_ps(qg[g][d + c]), kv, acc[g][c]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) {
        __m512 sc = _mm512_add_ps(_mm512_add_ps(acc[g][0], acc[g][1]), _mm512_add_ps(acc[g][2], acc[g][3]));
        /* whole vectors when they fit (a block of 16 never crosses a row's end) */
        if (bs == 16) _mm512_storeu_ps(score + (size_t)g * ss, sc);
        else _mm512_mask_storeu_ps(score + (size_t)g * ss, km, sc);
    }
}

/* NG heads (5-8) of one block: the same sums as attend_scores_tile (four
 * partial sums per head, channels d % 4, added (0 + 1) + (2 + 3)), but the
 * partial sums of channels 0 and 1 run first and those of 2 and 3 after,
 * so 8 heads' chains fit the registers at once with K's channels converted
 * straight from the cache, each once for all the heads. */
INLINE void attend_scores_tile8(const uint8_t *k, const uint16_t *ks, size_t k_stride, const float *const *qg,
                                const int NG, int hd, int qc, __mmask16 km, const gl_kv_type KT, float *score, int ss,
                                int bs) {
    __m512 s01[8], a[8][2];
#pragma GCC unroll 2
    for (int half = 0; half < 2; half++) {
#pragma GCC unroll 8
        for (int g = 0; g < NG; g++) a[g][0] = a[g][1] = _mm512_setzero_ps();
        __m512 sv = _mm512_setzero_ps();
        for (int d = 2 * half; d < hd; d += 4) {
            if (KT == GL_KV_Q8_0 && (d - 2 * half) % qc == 0)
                sv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km, ks + (size_t)(d / qc) * bs));
            __m512 k0 = k_channel(k + (size_t)d * k_stride, km, KT, sv);
            __m512 k1 = k_channel(k + (size_t)(d + 1) * k_stride, km, KT, sv);
#pragma GCC unroll 8
            for (int g = 0; g < NG; g++) {
                a[g][0] = _mm512_fmadd_ps(_mm512_set1_ps(qg[g][d]), k0, a[g][0]);
                a[g][1] = _mm512_fmadd_ps(_mm512_set1_ps(qg[g][d + 1]), k1, a[g][1]);
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < NG; g++) {
            __m512 p = _mm512_add_ps(a[g][0], a[g][1]);
            if (half == 0) {
                s01[g] = p;
            } else {
                __m512 sc = _mm512_add_ps(s01[g], p);
                if (bs == 16) _mm512_storeu_ps(score + (size_t)g * ss, sc);
                else _mm512_mask_storeu_ps(score + (size_t)g * ss, km, sc);
            }
        }
    }
}

#define ATTEND_TILE_CASES(CALL, KT)            \
    switch (ng) {                              \
    case 1: CALL(1, KT); break;                \
    case 2: CALL(2, KT); break;                \
    case 3: CALL(3, KT); break;                \
    case 4: CALL(4, KT); break;                \
    case 5: CALL(5, KT); break;                \
    case 6: CALL(6, KT); break;                \
    case 7: CALL(7, KT); break;                \
    default: CALL(8, KT); break;               \
    }
#define ATTEND_TYPE_CASES(CALL)                                          \
    switch (type) {                                                      \
    case GL_KV_F16: ATTEND_TILE_CASES(CALL, GL_KV_F16) break;            \
    case GL_KV_Q8_0: ATTEND_TILE_CASES(CALL, GL_KV_Q8_0) break;          \
    default: ATTEND_TILE_CASES(CALL, GL_KV_F32) break;                   \
    }

/* attend_scores_avx512: tiles of up to 8 heads, each converting K's F16
 * channels itself (cheaper than a float copy read by every tile, even for
 * 8 tiles); Q8_0 past two tiles is converted to floats once (the same
 * values the tiles would make), and every tile reads those. */
static void FN(attend_scores)(const uint8_t *k, const uint16_t *ks, size_t k_stride, const float *const *q, int nr,
                              int hd, int n, gl_kv_type type, int qc, float *score, int ss, int bs, float *row) {
    if (bs > 16 || hd % 4 || (type == GL_KV_Q8_0 && qc % 4)) {
        CAT(FN(attend), generic_scores)(k, ks, k_stride, q, nr, hd, n, type, qc, score, ss, bs, row);
        return;
    }
    __mmask16 km = (__mmask16)((1u << n) - 1);
    if (type == GL_KV_Q8_0 && nr > 16) {
        __m512 sv = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++) {
            if (type == GL_KV_Q8_0) {
                if (d % qc == 0) sv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km, ks + (size_t)(d / qc) * bs));
                _mm512_storeu_ps(row + 16 * d, k_channel(k + (size_t)d * k_stride, km, GL_KV_Q8_0, sv));
            } else {
                _mm512_storeu_ps(row + 16 * d, k_channel(k + (size_t)d * k_stride, km, GL_KV_F16, sv));
            }
        }
        k = (const uint8_t *)row, k_stride = 64, type = GL_KV_F32;
    }
    for (int g0 = 0; g0 < nr; g0 += 8) {
        int ng = nr - g0 < 8 ? nr - g0 : 8;
        float *sg = score + (size_t)g0 * ss;
#define SCORES_CALL(NG, KT)                                                                                  \
    if (NG <= 4) attend_scores_tile(k, ks, k_stride, q + g0, NG <= 4 ? NG : 4, hd, qc, km, KT, sg, ss, bs); \
    else attend_scores_tile8(k, ks, k_stride, q + g0, NG, hd, qc, km, KT, sg, ss, bs)
        ATTEND_TYPE_CASES(SCORES_CALL)
#undef SCORES_CALL
    }
}

/* attend_softmax_avx512: a row's segment in vectors aligned to the
 * segment's start (lanes outside b0..b1-1 left out), so a position's lane
 * depends on the position alone; the maximum before scaling (scale > 0
 * keeps it the maximum after, to the bit), the sum in one vector. */
static void FN(attend_softmax)(float *s, int b0, int b1, float scale, float *mx, float *sum) {
    __m512 m = _mm512_set1_ps(-INFINITY), acc = _mm512_setzero_ps(), sv = _mm512_set1_ps(scale);
    for (int i = b0 / 16 * 16; i < b1; i += 16) {
        __mmask16 km = (__mmask16)(0xffffu << (b0 > i ? b0 - i : 0)) & (__mmask16)(b1 - i >= 16 ? 0xffffu : (1u << (b1 - i)) - 1);
        m = _mm512_mask_max_ps(m, km, m, _mm512_maskz_loadu_ps(km, s + i));
    }
    float mr = _mm512_reduce_max_ps(m) * scale;
    __m512 mv = _mm512_set1_ps(mr);
    for (int i = b0 / 16 * 16; i < b1; i += 16) {
        __mmask16 km = (__mmask16)(0xffffu << (b0 > i ? b0 - i : 0)) & (__mmask16)(b1 - i >= 16 ? 0xffffu : (1u << (b1 - i)) - 1);
        __m512 e = _mm512_maskz_mov_ps(km, exp16_ps(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(km, s + i), sv), mv)));
        _mm512_mask_storeu_ps(s + i, km, e);
        acc = _mm512_add_ps(acc, e);
    }
    *mx = mr;
    *sum = _mm512_reduce_add_ps(acc);
}

/* Position j's V row (channels from vj; Q8_0 scales of this tile's channels
 * from sj) into the outputs of heads g_first..NG-1, each weighted by its
 * score; with check, only the heads whose count n[g] reaches j. */
INLINE void attend_pv_position(const uint8_t *vj, const uint16_t *sj, int qc, const float *score, int j, int ss,
                               const int g_first, const int NG, const int NC, const gl_kv_type KT, const bool check,
                               const int *n, __m512 o[8][4]) {
    __m512 vv[4] = {0}; /* zeros only for the compiler's warnings: the copies never read them */
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) {
        if (KT == GL_KV_Q8_0)
            vv[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(vj + 16 * c)))),
                                  _mm512_set1_ps(f16_at((const uint8_t *)(sj + 16 * c / qc))));
        else if (KT == GL_KV_F16) vv[c] = _mm512_cvtph_ps(load256(vj + 32 * c));
        else vv[c] = _mm512_loadu_ps((const float *)vj + 16 * c);
    }
#pragma GCC unroll 8
    for (int g = g_first; g < NG; g++) {
        if (check && j >= n[g]) continue;
        __m512 pj = _mm512_set1_ps(score[(size_t)g * ss + j]);
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) o[g][c] = _mm512_fmadd_ps(pj, vv[c], o[g][c]);
    }
}

/* out += p V for NG heads (1-8) over NC vectors of channels from c0 (NG,
 * NC and the element type constants in the usual copies, as above; NG * NC
 * at most 16): the
 * outputs stay in registers while the block's V rows go by. Rows come in
 * token order, so their counts n[g] never fall; the positions all of them
 * read run without per-head tests. */
INLINE void attend_pv_tile(const uint8_t *v, const uint16_t *vs, size_t v_stride, const float *score, int ss,
                           const int NG, const int *n, int hd, int qc, int c0, const int NC, const gl_kv_type KT,
                           float *const *out) {
    __m512 o[8][4];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) o[g][c] = g < NG && c < NC ? _mm512_loadu_ps(out[g] + c0 + 16 * c) : _mm512_setzero_ps();
    const uint8_t *vc = v + (size_t)c0 * (KT == GL_KV_F32 ? 4 : KT == GL_KV_F16 ? 2 : 1);
    int spr = KT == GL_KV_Q8_0 ? hd / qc : 0; /* scales per V row */
    const uint16_t *sc = KT == GL_KV_Q8_0 ? vs + c0 / qc : vs;
    int j = 0;
    for (; j < n[0]; j++)
        attend_pv_position(vc + (size_t)j * v_stride, sc + (size_t)j * spr, qc, score, j, ss, 0, NG, NC, KT, false, n, o);
    for (; j < n[NG - 1]; j++)
        attend_pv_position(vc + (size_t)j * v_stride, sc + (size_t)j * spr, qc, score, j, ss, 1, NG, NC, KT, true, n, o);
#pragma GCC unroll 8
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(out[g] + c0 + 16 * c, o[g][c]);
}

#define SCORE_SS16 256 /* kern_attend_score_stride(16); attend_pv checks ss against it */

/* attend_pv_avx512: up to 4 heads take 64 channels a tile, up to 8 take
 * 32, each tile converting its F16 V rows itself; Q8_0 past two tiles is
 * converted to floats once (the values the tiles would make), and every
 * tile reads those. */
INLINE void FN(attend_pv)(const uint8_t *v, const uint16_t *vs, size_t v_stride, const float *score, int ss, int nr,
                          const int *n, int hd, gl_kv_type type, int qc, float *const *out, float *row) {
    if (hd % 16 || hd > 256 || (type == GL_KV_Q8_0 && qc % 16)) {
        CAT(FN(attend), generic_pv)(v, vs, v_stride, score, ss, nr, n, hd, type, qc, out, row);
        return;
    }
    if (type == GL_KV_Q8_0 && nr > 16) {
        for (int j = 0; j < n[nr - 1]; j++) {
            const uint8_t *vj = v + (size_t)j * v_stride;
            for (int c = 0; c < hd; c += 16) {
                __m512 x = type == GL_KV_F16 ? _mm512_cvtph_ps(load256(vj + 2 * c))
                           : _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(vj + c)))),
                                           _mm512_set1_ps(f16_at((const uint8_t *)(vs + (size_t)j * (hd / qc) + c / qc))));
                _mm512_storeu_ps(row + (size_t)j * hd + c, x);
            }
        }
        v = (const uint8_t *)row, v_stride = (size_t)hd * 4, type = GL_KV_F32;
    }
    int rows = nr > 4 ? 8 : 4, chunks = nr > 4 ? 2 : 4; /* a tile's heads and vectors of channels */
    for (int c0 = 0; c0 < hd; c0 += 16 * chunks) {
        int nc = (hd - c0) / 16 < chunks ? (hd - c0) / 16 : chunks;
        for (int g0 = 0; g0 < nr; g0 += rows) {
            int ng = nr - g0 < rows ? nr - g0 : rows;
            const float *sg = score + (size_t)g0 * ss;
            /* the score stride a constant (that of blocks of 16), so each
             * head's scores are one displacement from a shared pointer
             * rather than an offset the loop reloads from the stack */
#define PV_CALL4(NG, KT) attend_pv_tile(v, vs, v_stride, sg, SCORE_SS16, NG <= 4 ? NG : 4, n + g0, hd, qc, c0, 4, KT, out + g0)
#define PV_CALL2(NG, KT) attend_pv_tile(v, vs, v_stride, sg, SCORE_SS16, NG, n + g0, hd, qc, c0, 2, KT, out + g0)
            if (nc < chunks || ss != SCORE_SS16) /* the channels' tail, other block sizes */
                attend_pv_tile(v, vs, v_stride, sg, ss, ng, n + g0, hd, qc, c0, nc, type, out + g0);
            else if (chunks == 4) ATTEND_TYPE_CASES(PV_CALL4)
            else ATTEND_TYPE_CASES(PV_CALL2)
#undef PV_CALL4
#undef PV_CALL2
        }
    }
}
#undef ATTEND_TILE_CASES
#undef ATTEND_TYPE_CASES
#undef SCORE_SS16
#define ATTEND_SCORES FN(attend_scores)
#define ATTEND_PV FN(attend_pv)
#define ATTEND_SOFTMAX FN(attend_softmax)
#endif

#endif
