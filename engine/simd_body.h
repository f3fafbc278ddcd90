/* simd_body.h -- the x86 kernels, written once and compiled once per
 * instruction set: the including file defines SIMD_NAME (the suffix of every
 * function), TT (tokens per tile), SIMD_VNNI (1 to use vpdpbusd) and
 * SIMD_AVX512 (1 for the 512-bit forms), and sets the target before
 * including this file. Everything here is reached only through a kern_impl
 * that kernels.c picks after asking the CPU.
 *
 * The vectors are 256 bits wide, one 32-element block of 8-bit values to a
 * register, except in the 512-bit Q4_0/Q4_1/Q8_0 tiles of the AVX-512
 * build. Weights are turned into unsigned bytes (Q8_0 uses the sign trick
 * instead) so one multiply-add instruction dots them with the signed
 * activation bytes; offsets (Q4_0's -8, Q4_1's minimum, ...) are applied
 * afterwards through the activation block sums.
 *
 * Batch invariance: a tile computes NR weight rows against NT tokens, but
 * each output has its own accumulators updated block by block in order, with
 * the same instructions whatever NR and NT are. Tiles only decide which
 * outputs share weight and activation loads, never an output's value. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant.h"
#include "simd.h"

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, SIMD_NAME)
#define INLINE static inline __attribute__((always_inline))

/* ---- helpers ------------------------------------------------------------------ */

INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

INLINE float hmax_ps(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INLINE __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* Sum of u[i] * s[i] over each group of 4 bytes: u unsigned, s signed. The
 * AVX2 form goes through 16-bit pairs, which cannot saturate here because
 * every caller keeps u <= 128 and |s| <= 127. */
INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
#if SIMD_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* 32 bits -> 32 bytes, byte j = 0x10 when bit j is set: the fifth bit of Q5. */
INLINE __m256i expand_bits_0x10(uint32_t bits) {
    const __m256i pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), pick);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* ---- activation quantization ---------------------------------------------------
 * Must match kern_quantize_*_ref bit for bit: with d = amax / 127,
 * q = round(x / d) and q2 = round((x - d q) * 256 / d), both to nearest even. */

INLINE __m256i round_to_i32(__m256 x, __m256 id) {
    return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* 8 floats -> coarse and residual quants (as int32) and their 16-bit sum. */
INLINE __m256i quant8(const float *x, __m256 d, __m256 id, __m256 id2, __m256i *q, __m256i *q2) {
    __m256 xv = _mm256_loadu_ps(x);
    *q = round_to_i32(xv, id);
    __m256 r = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(*q), d, xv);
    *q2 = _mm256_max_epi32(_mm256_min_epi32(round_to_i32(r, id2), _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
    return _mm256_add_epi32(_mm256_slli_epi32(*q, 8), *q2);
}

INLINE void pack_store(int8_t *dst, __m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, p);
}

/* Quantize 32 floats with coarse scale d; sums of 256 q + q2 per 16. */
INLINE void quant32(const float *x, float d, int8_t *q, int8_t *q2, int *sum_lo, int *sum_hi) {
    float idf = d != 0.0f ? 1.0f / d : 0.0f;
    __m256 dv = _mm256_set1_ps(d), id = _mm256_set1_ps(idf), id2 = _mm256_set1_ps(idf * 256.0f);
    __m256i a[4], b[4], v[4];
    for (int i = 0; i < 4; i++) v[i] = quant8(x + 8 * i, dv, id, id2, &a[i], &b[i]);
    *sum_lo = hsum_epi32(_mm256_add_epi32(v[0], v[1]));
    *sum_hi = hsum_epi32(_mm256_add_epi32(v[2], v[3]));
    pack_store(q, a[0], a[1], a[2], a[3]);
    pack_store(q2, b[0], b[1], b[2], b[3]);
}

INLINE __m256 abs_max(const float *x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    return m;
}

static void FN(quantize_32)(const float *x, kq8_32 *y, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float d = hmax_ps(abs_max(x, 32)) / 127.0f, unit = d * (1.0f / 256.0f);
        int lo, hi;
        quant32(x, d, y[b].q, y[b].q2, &lo, &hi);
        y[b].d = unit;
        y[b].s = unit * (float)(lo + hi);
    }
}

static void FN(quantize_256)(const float *x, kq8_256 *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        float d = hmax_ps(abs_max(x, 256)) / 127.0f;
        for (int j = 0; j < 8; j++) {
            int lo, hi;
            quant32(x + 32 * j, d, y[b].q + 32 * j, y[b].q2 + 32 * j, &lo, &hi);
            y[b].bsums[2 * j] = lo;
            y[b].bsums[2 * j + 1] = hi;
        }
        y[b].d = d * (1.0f / 256.0f);
    }
}

/* ---- 32-element block types ----------------------------------------------------
 * row . x = sum_b [dw_b * da_b * dot(u_b, q_b) + mw_b * s_b]: u the weight
 * quants as unsigned bytes, mw the weight offset (Q4_0: -8 dw, Q4_1: m). */

INLINE void tile_q32(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                     size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const int bb = type == GL_TYPE_Q4_0 ? 18 : type == GL_TYPE_Q4_1 ? 20 : type == GL_TYPE_Q5_0 ? 22
                 : type == GL_TYPE_Q5_1 ? 24 : 34;
    const bool has_min = type != GL_TYPE_Q8_0;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[4][TT];
    float accm[4][TT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            acc[r][t] = _mm256_setzero_ps();
            accm[r][t] = 0;
        }
    int nb = (int)(n_cols / 32);
    for (int b = 0; b < nb; b++) {
        __m256i u[4], wq[4];
        float dw[4], mw[4];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + (size_t)r * row_bytes + (size_t)b * bb;
            dw[r] = f16_at(blk);
            if (type == GL_TYPE_Q8_0) {
                wq[r] = load256(blk + 2);
                u[r] = _mm256_sign_epi8(wq[r], wq[r]);
                mw[r] = 0;
                continue;
            }
            const uint8_t *qs = blk + (type == GL_TYPE_Q4_0 ? 2 : type == GL_TYPE_Q4_1 ? 4 : type == GL_TYPE_Q5_0 ? 6 : 8);
            __m128i raw = _mm_loadu_si128((const __m128i *)qs);
            u[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
            if (type == GL_TYPE_Q5_0 || type == GL_TYPE_Q5_1) {
                uint32_t qh;
                memcpy(&qh, blk + (type == GL_TYPE_Q5_0 ? 2 : 4), 4);
                u[r] = _mm256_or_si256(u[r], expand_bits_0x10(qh));
            }
            mw[r] = type == GL_TYPE_Q4_0 ? -8.0f * dw[r] : type == GL_TYPE_Q5_0 ? -16.0f * dw[r] : f16_at(blk + 2);
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const kq8_32 *a = (const kq8_32 *)(act + (size_t)t * act_stride) + b;
            __m256i s = load256(a->q), s2 = load256(a->q2);
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) {
                /* 256 * dot(q) + dot(q2) fits int32: |dot| <= 128 * 127 * 32. */
                __m256i dot = type == GL_TYPE_Q8_0
                                  ? _mm256_add_epi32(_mm256_slli_epi32(dot_u8s8(u[r], _mm256_sign_epi8(s, wq[r])), 8),
                                                     dot_u8s8(u[r], _mm256_sign_epi8(s2, wq[r])))
                                  : _mm256_add_epi32(_mm256_slli_epi32(dot_u8s8(u[r], s), 8), dot_u8s8(u[r], s2));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw[r] * a->d), acc[r][t]);
                if (has_min) accm[r][t] = fmaf(mw[r], a->s, accm[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + accm[r][t];
}

#if SIMD_AVX512
/* ---- 512-bit form for Q4_0, Q4_1 and Q8_0 -----------------------------------------
 * Two blocks per register: a pair's dot lands in 16 int32 lanes, 0..7 for
 * block b and 8..15 for block b + 1. Scales come sixteen blocks at a time:
 * the weights' F16 words picked out of the chunk's 64-byte pieces with
 * vpermw (vpgatherdd is several times slower on Zen) and converted in one
 * go, the activations' from the lists after their blocks (kq8_32_index). So
 * the weight offsets enter as one vector multiply-add per 16 blocks instead
 * of a scalar one per block, and one output's sum runs in a fixed order of
 * 16-block chunks and block pairs whatever the tile. Q8_0 has no vpsignb at 512 bits: its weights
 * get 128 added to become unsigned, and 128 * sum(activations), taken once
 * per activation pair and shared by every row, is subtracted in integer. */

/* Blocks b and b + 1 (or b alone when !two, the rest zero) as unsigned
 * bytes in the order the activations have them: 32 of b, then 32 of b + 1. */
INLINE __m512i pair_weights(const int type, const uint8_t *blk, int bb, bool two) {
    if (type == GL_TYPE_Q8_0) {
        __m512i v = _mm512_zextsi256_si512(load256(blk + 2));
        if (two) v = _mm512_inserti64x4(v, load256(blk + bb + 2), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    const int qo = type == GL_TYPE_Q4_0 ? 2 : 4;
    /* 128-bit lanes [qs_b, qs_b, qs_b1, qs_b1], then low nibbles of lanes 0 and
     * 2, high nibbles of 1 and 3: elements 0..15 and 16..31 of each block. */
    __m512i v = _mm512_maskz_broadcast_i32x4(0x00ff, _mm_loadu_si128((const __m128i *)(blk + qo)));
    if (two) v = _mm512_mask_broadcast_i32x4(v, 0xff00, _mm_loadu_si128((const __m128i *)(blk + bb + qo)));
    const long long by4 = 0x0004000400040004; /* srlv counts per 16-bit word */
    const __m512i shift = _mm512_set_epi64(by4, by4, 0, 0, by4, by4, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(0x0f));
}

/* The q (or q2) bytes of activation blocks a[0] and a[1]. */
INLINE __m512i pair_act(const kq8_32 *a, bool two, bool residual) {
    __m512i v = _mm512_zextsi256_si512(load256(residual ? a[0].q2 : a[0].q));
    if (two) v = _mm512_inserti64x4(v, load256(residual ? a[1].q2 : a[1].q), 1);
    return v;
}

/* Word j of the 32 lanes picked by in_piece from the 64-byte pieces of a
 * chunk of n_bytes, lanes of piece j chosen by mine[j]. Reads stay inside
 * the chunk: a last partial piece is the chunk's final 64 bytes, its
 * indices moved up to match (a chunk under 64 bytes goes through a copy). */
INLINE __m512i chunk_words(const uint8_t *blk, int n_bytes, __m512i in_piece, const __mmask32 *mine) {
    __m512i words = _mm512_setzero_si512();
    int full = n_bytes / 64, left = n_bytes % 64;
    for (int j = 0; j < full; j++)
        words = _mm512_mask_permutexvar_epi16(words, mine[j], in_piece, _mm512_loadu_si512(blk + 64 * j));
    if (left == 0) return words;
    if (full == 0) {
        uint8_t copy[64] = {0};
        memcpy(copy, blk, (size_t)n_bytes);
        return _mm512_mask_permutexvar_epi16(words, mine[0], in_piece, _mm512_loadu_si512(copy));
    }
    __m512i moved = _mm512_add_epi16(in_piece, _mm512_set1_epi16((short)((64 - left) / 2)));
    return _mm512_mask_permutexvar_epi16(words, mine[full], moved, _mm512_loadu_si512(blk + n_bytes - 64));
}

INLINE void tile_q32x2(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                       size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const int bb = type == GL_TYPE_Q4_0 ? 18 : type == GL_TYPE_Q4_1 ? 20 : 34;
    const bool q8 = type == GL_TYPE_Q8_0;
    const int nb = (int)(n_cols / 32);
    /* Word lane L < 16 takes block L's scale, 16 + L its Q4_1 min: word
     * (L % 16) * bb / 2 + L / 16 of the chunk, in its 64-byte piece L_piece. */
    static const uint16_t lanes[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                       16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    const __m512i lane = _mm512_loadu_si512(lanes);
    const __m512i word = _mm512_add_epi16(_mm512_mullo_epi16(_mm512_and_si512(lane, _mm512_set1_epi16(15)),
                                                             _mm512_set1_epi16((short)(bb / 2))),
                                          _mm512_srli_epi16(lane, 4));
    const __m512i in_piece = _mm512_and_si512(word, _mm512_set1_epi16(31)), piece = _mm512_srli_epi16(word, 5);
    const int n_pieces = (16 * bb + 63) / 64;
    __mmask32 mine[9];
    for (int j = 0; j < n_pieces; j++) mine[j] = _mm512_cmpeq_epi16_mask(piece, _mm512_set1_epi16((short)j));
    const __m512i pair_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc[8][TT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    for (int c0 = 0; c0 < nb; c0 += 16) {
        int nc = nb - c0 < 16 ? nb - c0 : 16;
        __mmask32 valid_words = (__mmask32)((1u << nc) - 1) * 0x10001u;
        __m512 dw[8], mw[8], da[TT], sa[TT];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            __m512i words = chunk_words(w + (size_t)r * row_bytes + (size_t)c0 * bb, nc * bb, in_piece, mine);
            words = _mm512_maskz_mov_epi16(valid_words, words); /* no scales of blocks past the row */
            dw[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(words));
            mw[r] = type == GL_TYPE_Q4_1 ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(words, 1))
                                         : _mm512_mul_ps(dw[r], _mm512_set1_ps(-8.0f));
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const float *ds = kq8_32_scales(act + (size_t)t * act_stride, nb);
            da[t] = _mm512_loadu_ps(ds + c0); /* zero past the last block */
            sa[t] = _mm512_loadu_ps(ds + kq8_32_padded(nb) + c0);
        }
        __m512 sc[8][TT];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                sc[r][t] = _mm512_mul_ps(dw[r], da[t]);
                if (!q8) acc[r][t] = _mm512_fmadd_ps(mw[r], sa[t], acc[r][t]);
            }
        for (int p = 0; 2 * p < nc; p++) {
            int b = c0 + 2 * p;
            bool two = 2 * p + 1 < nc;
            __m512i idx = _mm512_add_epi32(pair_lanes, _mm512_set1_epi32(2 * p));
            __m512i u[8];
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) u[r] = pair_weights(type, w + (size_t)r * row_bytes + (size_t)b * bb, bb, two);
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const kq8_32 *a = (const kq8_32 *)(act + (size_t)t * act_stride) + b;
                __m512i s = pair_act(a, two, false), s2 = pair_act(a, two, true);
                __m512i base = _mm512_setzero_si512(), base2 = _mm512_setzero_si512();
                if (q8) { /* -128 * sums of 4, for the 128 added to the weights */
                    const __m512i m80 = _mm512_set1_epi8((char)0x80);
                    base = _mm512_sub_epi32(base, _mm512_dpbusd_epi32(_mm512_setzero_si512(), m80, s));
                    base2 = _mm512_sub_epi32(base2, _mm512_dpbusd_epi32(_mm512_setzero_si512(), m80, s2));
                }
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) {
                    /* |256 * dot(q) + dot(q2)| <= 257 * 255 * 127 * 4 per lane: fits int32. */
                    __m512i dot = _mm512_slli_epi32(_mm512_dpbusd_epi32(base, u[r], s), 8);
                    dot = _mm512_dpbusd_epi32(_mm512_add_epi32(dot, base2), u[r], s2);
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx, sc[r][t]), acc[r][t]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = _mm512_reduce_add_ps(acc[r][t]);
}
#endif

/* ---- K-quants: 256-element super-blocks against kq8_256 --------------------------
 * Integer sums of scale * dot per sub-block stay exact in 32 bits; the
 * minimums come from the activation sums of 16. */

/* Q4_K/Q5_K: 6-bit scales and mins of the 8 sub-blocks. */
INLINE void k4_scales(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0xf) | (s[j] >> 6) << 4);
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
    }
}

INLINE void tile_q45_k(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                       size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const bool five = type == GL_TYPE_Q5_K;
    const int bb = five ? 176 : 144;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10);
    __m256 acc[4][TT];
    float accm[4][TT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            acc[r][t] = _mm256_setzero_ps();
            accm[r][t] = 0;
        }
    int nb = (int)(n_cols / 256);
    for (int b = 0; b < nb; b++) {
        __m256i isum[4][TT], isum2[4][TT]; /* dots with q and with q2 */
        uint8_t sc[4][8], mn[4][8];
        const uint8_t *blk[4];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            blk[r] = w + (size_t)r * row_bytes + (size_t)b * bb;
            k4_scales(blk[r] + 4, sc[r], mn[r]);
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) isum[r][t] = isum2[r][t] = _mm256_setzero_si256();
        }
        for (int k = 0; k < 4; k++) {
            __m256i lo[4], hi[4], sc_lo[4], sc_hi[4];
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) {
                const uint8_t *qs = blk[r] + (five ? 48 : 16);
                __m256i raw = load256(qs + 32 * k);
                lo[r] = _mm256_and_si256(raw, m4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                if (five) {
                    __m256i qh = load256(blk[r] + 16);
                    lo[r] = _mm256_or_si256(lo[r], _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k), 4), m16));
                    hi[r] = _mm256_or_si256(hi[r], _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k + 1), 4), m16));
                }
                sc_lo[r] = _mm256_set1_epi16(sc[r][2 * k]);
                sc_hi[r] = _mm256_set1_epi16(sc[r][2 * k + 1]);
            }
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const kq8_256 *a = (const kq8_256 *)(act + (size_t)t * act_stride) + b;
                __m256i a_lo = load256(a->q + 64 * k), a_hi = load256(a->q + 64 * k + 32);
                __m256i b_lo = load256(a->q2 + 64 * k), b_hi = load256(a->q2 + 64 * k + 32);
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) {
                    __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], a_lo), sc_lo[r]),
                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], a_hi), sc_hi[r]));
                    __m256i p2 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], b_lo), sc_lo[r]),
                                                  _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], b_hi), sc_hi[r]));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], p);
                    isum2[r][t] = _mm256_add_epi32(isum2[r][t], p2);
                }
            }
        }
        __m256i mins_lo[4], mins_hi[4];
        float d[4], dmin[4];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            __m128i m8 = _mm_loadl_epi64((const __m128i *)mn[r]);
            __m128i m16 = _mm_unpacklo_epi8(m8, m8); /* each min twice: one per 16 */
            mins_lo[r] = _mm256_cvtepu8_epi32(m16);
            mins_hi[r] = _mm256_cvtepu8_epi32(_mm_srli_si128(m16, 8));
            d[r] = f16_at(blk[r]);
            dmin[r] = f16_at(blk[r] + 2);
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const kq8_256 *a = (const kq8_256 *)(act + (size_t)t * act_stride) + b;
            __m256i bs_lo = load256(a->bsums), bs_hi = load256(a->bsums + 8);
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) {
                /* |msum| <= 16 * 63 * 16 * (256 * 127 + 127): fits int32. */
                int msum = hsum_epi32(_mm256_add_epi32(_mm256_mullo_epi32(bs_lo, mins_lo[r]),
                                                       _mm256_mullo_epi32(bs_hi, mins_hi[r])));
                float dd = d[r] * a->d;
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_set1_ps(dd * 256.0f), acc[r][t]);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum2[r][t]), _mm256_set1_ps(dd), acc[r][t]);
                accm[r][t] = fmaf(-dmin[r] * a->d, (float)msum, accm[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + accm[r][t];
}

/* Q6_K: value = d * scale_s * (q - 32), q = 4 low bits from ql, 2 high from qh. */
INLINE void tile_q6_k(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                      size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[4][TT];
    float accm[4][TT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            acc[r][t] = _mm256_setzero_ps();
            accm[r][t] = 0;
        }
    int nb = (int)(n_cols / 256);
    for (int b = 0; b < nb; b++) {
        __m256i isum[4][TT], isum2[4][TT];
        const uint8_t *blk[4];
        const int8_t *scales[4];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            blk[r] = w + (size_t)r * row_bytes + (size_t)b * 210;
            scales[r] = (const int8_t *)blk[r] + 192;
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++) isum[r][t] = isum2[r][t] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 4; c++) {
                __m256i u[4], scv[4];
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) {
                    __m256i ql = load256(blk[r] + 64 * h + 32 * (c & 1));
                    __m256i qh = load256(blk[r] + 128 + 32 * h);
                    __m256i lo = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (c >> 1)), m4);
                    __m256i hi = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c), 4), m30);
                    u[r] = _mm256_or_si256(lo, hi);
                    int s = 8 * h + 2 * c;
                    scv[r] = _mm256_set_m128i(_mm_set1_epi16(scales[r][s + 1]), _mm_set1_epi16(scales[r][s]));
                }
#pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    const kq8_256 *a = (const kq8_256 *)(act + (size_t)t * act_stride) + b;
                    __m256i s = load256(a->q + 128 * h + 32 * c), s2 = load256(a->q2 + 128 * h + 32 * c);
#pragma GCC unroll 8
                    for (int r = 0; r < NR; r++) {
                        isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], s), scv[r]));
                        isum2[r][t] = _mm256_add_epi32(isum2[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], s2), scv[r]));
                    }
                }
            }
        __m256i sc_lo[4], sc_hi[4];
        float d[4];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            __m128i s8 = _mm_loadu_si128((const __m128i *)scales[r]);
            sc_lo[r] = _mm256_cvtepi8_epi32(s8);
            sc_hi[r] = _mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8));
            d[r] = f16_at(blk[r] + 208);
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const kq8_256 *a = (const kq8_256 *)(act + (size_t)t * act_stride) + b;
            __m256i bs_lo = load256(a->bsums), bs_hi = load256(a->bsums + 8);
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) {
                /* |corr| <= 16 * 128 * 16 * (256 * 127 + 127) < 2^31 */
                int corr = hsum_epi32(_mm256_add_epi32(_mm256_mullo_epi32(bs_lo, sc_lo[r]),
                                                       _mm256_mullo_epi32(bs_hi, sc_hi[r])));
                float dd = d[r] * a->d;
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_set1_ps(dd * 256.0f), acc[r][t]);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum2[r][t]), _mm256_set1_ps(dd), acc[r][t]);
                accm[r][t] = fmaf(dd, -32.0f * (float)corr, accm[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + accm[r][t];
    (void)type;
}

/* ---- float weights against float activations ------------------------------------ */

INLINE __m256 load8_weights(const int type, const uint8_t *p) {
    if (type == GL_TYPE_F32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (type == GL_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* BF16 */
}

INLINE float weight_at(const int type, const uint8_t *p) {
    if (type == GL_TYPE_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (type == GL_TYPE_F16) return f16_at(p);
    uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

INLINE void tile_float(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                       size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const int es = type == GL_TYPE_F32 ? 4 : 2;
    __m256 acc[4][TT];
    float tail[4][TT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            acc[r][t] = _mm256_setzero_ps();
            tail[r][t] = 0;
        }
    int64_t n8 = n_cols & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8) {
        __m256 wv[4];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) wv[r] = load8_weights(type, w + (size_t)r * row_bytes + (size_t)i * es);
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            __m256 x = _mm256_loadu_ps((const float *)(act + (size_t)t * act_stride) + i);
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], x, acc[r][t]);
        }
    }
    for (int64_t i = n8; i < n_cols; i++)
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            float wi = weight_at(type, w + (size_t)r * row_bytes + (size_t)i * es);
#pragma GCC unroll 8
            for (int t = 0; t < NT; t++)
                tail[r][t] = fmaf(wi, ((const float *)(act + (size_t)t * act_stride))[i], tail[r][t]);
        }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + tail[r][t];
}

/* ---- row loops -------------------------------------------------------------------
 * Full tiles of TT tokens one row at a time; a leftover of fewer tokens takes
 * several rows at once instead, so there are always independent chains. */

#define ROWS_PASS(TILE, TYPE, NR, NT)                                                                    \
    do {                                                                                                 \
        int r = 0;                                                                                       \
        for (; r + (NR) <= n_rows; r += (NR))                                                            \
            TILE(TYPE, w + (size_t)r * row_bytes, row_bytes, n_cols, a, act_stride, NR, NT, o + r, out_stride); \
        for (; r < n_rows; r++)                                                                          \
            TILE(TYPE, w + (size_t)r * row_bytes, row_bytes, n_cols, a, act_stride, 1, NT, o + r, out_stride); \
    } while (0)

#if TT > 4
#define ROWS_REST_WIDE(TILE, TYPE)                  \
    case 4: ROWS_PASS(TILE, TYPE, 1, 4); break;     \
    case 5: ROWS_PASS(TILE, TYPE, 1, 5); break;     \
    case 6: ROWS_PASS(TILE, TYPE, 1, 6); break;     \
    case 7: ROWS_PASS(TILE, TYPE, 1, 7); break;
#else
#define ROWS_REST_WIDE(TILE, TYPE)
#endif

#define DEFINE_ROWS(name, TILE, TYPE)                                                                        \
    static void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act, \
                         size_t act_stride, int n_tok, float *out, size_t out_stride) {                      \
        int t0 = 0;                                                                                          \
        for (; t0 + TT <= n_tok; t0 += TT) {                                                                 \
            const uint8_t *a = act + (size_t)t0 * act_stride;                                                \
            float *o = out + (size_t)t0 * out_stride;                                                        \
            ROWS_PASS(TILE, TYPE, 1, TT);                                                                    \
        }                                                                                                    \
        const uint8_t *a = act + (size_t)t0 * act_stride;                                                    \
        float *o = out + (size_t)t0 * out_stride;                                                            \
        switch (n_tok - t0) {                                                                                \
        case 1: ROWS_PASS(TILE, TYPE, 4, 1); break;                                                          \
        case 2: ROWS_PASS(TILE, TYPE, 2, 2); break;                                                          \
        case 3: ROWS_PASS(TILE, TYPE, 1, 3); break;                                                          \
        ROWS_REST_WIDE(TILE, TYPE)                                                                           \
        default: break;                                                                                      \
        }                                                                                                    \
    }

#if SIMD_AVX512
/* The 512-bit tiles hold NR x NT accumulators plus as many scale vectors:
 * 8 outputs per tile fit the 32 registers with room for the operands. */
#define DEFINE_ROWS_X2(name, TYPE)                                                                           \
    static void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act, \
                         size_t act_stride, int n_tok, float *out, size_t out_stride) {                      \
        int t0 = 0;                                                                                          \
        for (; t0 + 4 <= n_tok; t0 += 4) {                                                                   \
            const uint8_t *a = act + (size_t)t0 * act_stride;                                                \
            float *o = out + (size_t)t0 * out_stride;                                                        \
            ROWS_PASS(tile_q32x2, TYPE, 2, 4);                                                               \
        }                                                                                                    \
        const uint8_t *a = act + (size_t)t0 * act_stride;                                                    \
        float *o = out + (size_t)t0 * out_stride;                                                            \
        switch (n_tok - t0) {                                                                                \
        case 1: ROWS_PASS(tile_q32x2, TYPE, 4, 1); break;                                                    \
        case 2: ROWS_PASS(tile_q32x2, TYPE, 4, 2); break;                                                    \
        case 3: ROWS_PASS(tile_q32x2, TYPE, 2, 3); break;                                                    \
        default: break;                                                                                      \
        }                                                                                                    \
    }
DEFINE_ROWS_X2(rows_q4_0, GL_TYPE_Q4_0)
DEFINE_ROWS_X2(rows_q4_1, GL_TYPE_Q4_1)
DEFINE_ROWS_X2(rows_q8_0, GL_TYPE_Q8_0)
#else
DEFINE_ROWS(rows_q4_0, tile_q32, GL_TYPE_Q4_0)
DEFINE_ROWS(rows_q4_1, tile_q32, GL_TYPE_Q4_1)
DEFINE_ROWS(rows_q8_0, tile_q32, GL_TYPE_Q8_0)
#endif
DEFINE_ROWS(rows_q5_0, tile_q32, GL_TYPE_Q5_0)
DEFINE_ROWS(rows_q5_1, tile_q32, GL_TYPE_Q5_1)
DEFINE_ROWS(rows_q4_k, tile_q45_k, GL_TYPE_Q4_K)
DEFINE_ROWS(rows_q5_k, tile_q45_k, GL_TYPE_Q5_K)
DEFINE_ROWS(rows_q6_k, tile_q6_k, GL_TYPE_Q6_K)
DEFINE_ROWS(rows_f32, tile_float, GL_TYPE_F32)
DEFINE_ROWS(rows_f16, tile_float, GL_TYPE_F16)
DEFINE_ROWS(rows_bf16, tile_float, GL_TYPE_BF16)

/* ---- attention ---------------------------------------------------------------------
 * Query heads h0..h0+nh-1 (one KV group) of one token, over the cache block by
 * block: the K rows of a block are converted once and scored against every
 * head, the softmax is rescaled once per block, then each V row is converted
 * once and added to every head. Block boundaries are absolute positions, so
 * a head's result never depends on which other heads or tokens share the work. */

INLINE void kv_row_to_float(const uint8_t *src, float *dst, int n, bool f16) {
    int i = 0;
    if (f16) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
        for (; i < n; i++) dst[i] = f16_at(src + 2 * i);
    } else {
        memcpy(dst, src, (size_t)n * sizeof *dst);
    }
}

INLINE float dot_f32(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    if (i + 8 <= n) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        i += 8;
    }
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

INLINE void axpy_f32(float *y, float a, const float *x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

INLINE void scale_f32(float *y, float a, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

#define ATTEND_NAME FN(attend)
#define ATTEND_ROW kv_row_to_float
#define ATTEND_DOT dot_f32
#define ATTEND_AXPY axpy_f32
#define ATTEND_SCALE scale_f32
#include "attend_body.h"

/* ---- the table ------------------------------------------------------------------ */

static const kern_impl FN(impl) = {
    .name = SIMD_NAME_STR,
    .quantize_32 = FN(quantize_32),
    .quantize_256 = FN(quantize_256),
    .rows = {
        [GL_TYPE_F32] = FN(rows_f32), [GL_TYPE_F16] = FN(rows_f16), [GL_TYPE_BF16] = FN(rows_bf16),
        [GL_TYPE_Q4_0] = FN(rows_q4_0), [GL_TYPE_Q4_1] = FN(rows_q4_1), [GL_TYPE_Q5_0] = FN(rows_q5_0),
        [GL_TYPE_Q5_1] = FN(rows_q5_1), [GL_TYPE_Q8_0] = FN(rows_q8_0), [GL_TYPE_Q4_K] = FN(rows_q4_k),
        [GL_TYPE_Q5_K] = FN(rows_q5_k), [GL_TYPE_Q6_K] = FN(rows_q6_k),
    },
    .attend = FN(attend),
};
