/* simd_body.h -- the x86 kernels, written once and compiled once per
 * instruction set: the including file defines SIMD_NAME (the suffix of every
 * function), TT (tokens per tile), SIMD_VNNI (1 to use vpdpbusd) and
 * SIMD_AVX512 (1 for the 512-bit forms), and sets the target before
 * including this file. Everything here is reached only through a kern_impl
 * that kernels.c picks after asking the CPU.
 *
 * Weights as the file has them: 256-bit vectors, one 32-element block of
 * 8-bit values to a register. Weights are turned into unsigned bytes (Q8_0
 * uses the sign trick instead) so one multiply-add instruction dots them with
 * the signed activation bytes; offsets (Q4_0's -8, Q4_1's minimum, ...) are
 * applied afterwards through the activation block sums. The AVX-512 build
 * also has tiles for packed weights (kern_pack, layout in simd.h): one block
 * per 32-bit lane of a 512-bit register, against 16-bit activations or, for
 * Q4_0, Q4_1 and Q8_0 when the pool asks for it, 8-bit ones.
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

/* Weights stream through once per decode step; the hardware prefetchers
 * alone reach about half of one core's memory bandwidth on them. Asking
 * 6 KiB or more ahead (prefetch_distance) for the lines of what is being
 * read now keeps enough misses in flight (measured on one large matrix:
 * 16 -> 25 GB/s on one core, 27 -> 50 GB/s on two; TinyLlama-shape Q4_0
 * decode: 51 -> 67 tok/s against 3 KiB).
 * Tiles of one or two tokens (decode) ask for L2 only: a prefetch into L1
 * holds one of its few miss buffers for the whole trip to memory, and with
 * them all taken the tile's own loads wait (one token against 65536 x 2048
 * Q4_0, 8-bit, alternated: one thread 13-18 -> 21-24 GB/s, two threads
 * 20-30 -> 35-46; TinyLlama-shape Q8_0 decode 20 -> 25-29 tok/s). Wider
 * tiles, compute-bound, keep L1 (their prefill lost 4% to L2).
 * Prefetches never fault, so running past the end of the weights is harmless. */
INLINE void prefetch_ahead(const uint8_t *p, int n_bytes, size_t ahead, const int NT) {
    for (int off = 0; off < n_bytes; off += 64) {
        if (NT <= 2) _mm_prefetch((const char *)p + ahead + off, _MM_HINT_T1);
        else _mm_prefetch((const char *)p + ahead + off, _MM_HINT_T0);
    }
}

/* A tile reads its NR rows side by side, so "6 KiB ahead" of one of them
 * can land in another row the tile is reading now (TinyLlama's 5632-column
 * rows are 3 KiB): ask for the same place in a later tile instead, the
 * first at least 6 KiB on (one token against 16384 x 5632 Q4_0 on two
 * threads, three alternated runs: 47, 35, 32 -> 58, 50, 59 GB/s). */
INLINE size_t prefetch_distance(int NR, size_t row_bytes) {
    size_t tile = (size_t)NR * row_bytes;
    return (6144 + tile - 1) / tile * tile;
}

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

/* Bytes of one block of a 32-element type, as a constant the compiler folds
 * into each tile (gl_type_get would be a call per tile). */
INLINE int block32_bytes(const int type) {
    return type == GL_TYPE_Q4_0 ? 18 : type == GL_TYPE_Q4_1 ? 20 : type == GL_TYPE_Q5_0 ? 22 : type == GL_TYPE_Q5_1 ? 24 : 34;
}

/* x8: the activations are a *_COARSE kind (simd.h): no residual dots, and
 * the coarse dot takes the coarse step (256 units) in its scale. */
INLINE void tile_q32_any(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int64_t n_cols,
                         const uint8_t *act, size_t act_stride, const int NR, const int NT, float *out,
                         size_t out_stride) {
    const size_t ahead = prefetch_distance(NR, row_bytes);
    const int bb = block32_bytes(type);
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
            if (b % 2 == 0) prefetch_ahead(blk, 2 * bb, ahead, NT);
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
            __m256i s = load256(a->q);
            if (x8) {
                const float unit = a->d * 256.0f;
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) {
                    __m256i dot = dot_u8s8(u[r], type == GL_TYPE_Q8_0 ? _mm256_sign_epi8(s, wq[r]) : s);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw[r] * unit), acc[r][t]);
                    if (has_min) accm[r][t] = fmaf(mw[r], a->s, accm[r][t]);
                }
                continue;
            }
            __m256i s2 = load256(a->q2);
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

INLINE void tile_q32(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                     size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_q32_any(type, false, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride);
}

INLINE void tile_q32_x8(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                        size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_q32_any(type, true, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride);
}

#if SIMD_AVX512
/* ---- packed Q4_0, Q4_1 and Q8_0 against kq16_chunk (layout in simd.h) ------------
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

/* dot[r][t] += u0[r] . x[t][v0] + u1[r] . x[t][v1] (the second into dot2
 * when split), x[t] the activation vectors of token t, 64 bytes each: 32
 * words of kq16_chunk, whose pairs of 16-bit products vpdpwssd sums into
 * each 32-bit lane, or (bytes) 64 signed bytes of kq8_chunk against
 * unsigned weight bytes, four products to a lane by vpdpbusd. */
INLINE void dot_pairs(const int NR, const int NT, __m512i dot[4][4], __m512i dot2[4][4], const __m512i u0[4],
                      const __m512i u1[4], const uint8_t *const x[4], int v0, int v1, const bool bytes) {
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        __m512i xl = _mm512_loadu_si512(x[t] + 64 * v0), xh = _mm512_loadu_si512(x[t] + 64 * v1);
        /* In registers, not folded into each row's multiply-add as a memory
         * operand: this core loads one 512-bit vector per cycle, so loading
         * them NR times was a bound (2048 x 2048 Q4_0, 64 tokens, one core:
         * 8-bit 103 -> 110 GMAC/s, 16-bit 63 -> 68). */
        if (NR > 1) __asm__("" : "+v"(xl), "+v"(xh));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m512i *d2 = SPLIT_DOTS(NR, NT) ? &dot2[r][t] : &dot[r][t];
            if (bytes) {
                dot[r][t] = _mm512_dpbusd_epi32(dot[r][t], u0[r], xl);
                *d2 = _mm512_dpbusd_epi32(*d2, u1[r], xh);
            } else {
                dot[r][t] = _mm512_dpwssd_epi32(dot[r][t], u0[r], xl);
                *d2 = _mm512_dpwssd_epi32(*d2, u1[r], xh);
            }
        }
    }
}

/* dot += dot2 where dot_pairs split them. */
INLINE void join_dots(const int NR, const int NT, __m512i dot[4][4], const __m512i dot2[4][4]) {
    if (!SPLIT_DOTS(NR, NT)) return;
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) dot[r][t] = _mm512_add_epi32(dot[r][t], dot2[r][t]);
}

INLINE __m512 chunk_f16(const uint8_t *p, int m) {
    __m256i h = m == 16 ? load256(p) : _mm256_maskz_loadu_epi16((__mmask16)((1u << m) - 1), p);
    return _mm512_cvtph_ps(h);
}

/* The weight offsets mw of a chunk's m blocks, from their scales dw: Q4_1's
 * minimums (stored after the scales), Q4_0's -8 dw, and for Q8_0, whose
 * bytes vpdpbusd takes offset by +128 (unsigned), -128 dw; the 16-bit
 * chunks take Q8_0's bytes signed and use none. */
INLINE __m512 chunk_offsets(const int type, const uint8_t *chunk, int m, __m512 dw) {
    if (type == GL_TYPE_Q4_1) return chunk_f16(chunk + 2 * m, m);
    return _mm512_mul_ps(dw, _mm512_set1_ps(type == GL_TYPE_Q8_0 ? -128.0f : -8.0f));
}

/* The sums of a, b, c and d in lanes 0, 4, 8 and 12, each by the tree
 * _mm512_reduce_add_ps uses (lane i + lane i + 8, then + 4, + 2, + 1), with
 * the shuffles shared: about a third of the instructions of four reduces,
 * and bit for bit their results (checked on 400k random sums). Packed tiles,
 * 64 tokens, one core: 1536 x 576 Q4_1 110 -> 116 GMAC/s, 2048 x 768 Q4_0
 * 129 -> 137. */
INLINE __m512 sum4_ps(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* A tile may cover one panel of a long row (see packed_chunk_panels): state
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
static uint16_t tail_words[2][KQ_SHORT_TAIL + 1][2][32];
static int32_t tail_blocks[KQ_SHORT_TAIL + 1][2][16];

__attribute__((constructor)) static void tail_tables(void) {
    for (int m = 1; m <= KQ_SHORT_TAIL; m++)
        for (int v = 0; v < 2; v++)
            for (int lane = 0; lane < 16; lane++) {
                int j = 0, e0 = 0;
                bool used = kq_tail_lane(m, v, lane, &j, &e0);
                tail_blocks[m][v][lane] = j;
                for (int q8 = 0; q8 < 2; q8++) {
                    /* elements 2g, 2g + 1 of block j are pair m g + j; Q4 keeps 16 + e in e's high nibble */
                    int g = (q8 ? e0 : e0 % 16) / 2;
                    tail_words[q8][m][v][2 * lane] = (uint16_t)(used ? m * g + j : 0);
                    tail_words[q8][m][v][2 * lane + 1] = (uint16_t)(used ? m * (g + 1) + j : 0);
                }
            }
}

INLINE __mmask64 first_bytes(int n) { return n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n > 0 ? n : 0)) - 1; }

/* acc[r][t] += the rows' short tail (m <= KQ_SHORT_TAIL blocks, row r's at
 * w + r row_bytes) against the tokens' kq16_tail (x16) or kq8_tail (token
 * t's at act + t act_stride): per lane the block's scales times its dot,
 * then each block's offset term once, in lane j. Q8_0's bytes take +128 here
 * at 16 bits too, and -128 dw s back. */
INLINE void add_short_tail(const int type, const bool x16, const int NR, const int NT, const uint8_t *w, size_t row_bytes,
                       const uint8_t *act, size_t act_stride, int m, size_t ahead, __m512 acc[4][4]) {
    const uint8_t *chunk[4], *tail[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        chunk[r] = w + (size_t)r * row_bytes;
        prefetch_ahead(chunk[r], m * block32_bytes(type), ahead, NT);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) tail[t] = act + (size_t)t * act_stride;
    const bool q8 = type == GL_TYPE_Q8_0;
    const int hdr = (type == GL_TYPE_Q4_1 ? 4 : 2) * m, n_vec = (m + 1) / 2;
    const __m512i m4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8((char)0x80);
    __m512i u[4][2];
    __m512 dw_lanes[4][2], mw[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        const __m512 dw = chunk_f16(chunk[r], m);
        mw[r] = chunk_offsets(type, chunk[r], m, dw);
        const uint8_t *quants = chunk[r] + hdr;
        const int n_bytes = (q8 ? 32 : 16) * m;
        const __m512i lo = _mm512_maskz_loadu_epi8(first_bytes(n_bytes), quants);
        const __m512i hi = q8 ? _mm512_maskz_loadu_epi8(first_bytes(n_bytes - 64), quants + 64) : lo;
        u[r][1] = _mm512_setzero_si512(); /* unused for m <= 2; set so no lane is ever undefined */
        dw_lanes[r][1] = _mm512_setzero_ps();
#pragma GCC unroll 2
        for (int v = 0; v == 0 || v < n_vec; v++) {
            const __m512i words = _mm512_loadu_si512(tail_words[q8][m][v]);
            if (q8) {
                u[r][v] = _mm512_xor_si512(_mm512_permutex2var_epi16(lo, words, hi), flip);
            } else {
                __m512i p = _mm512_permutexvar_epi16(words, lo);
                u[r][v] = _mm512_and_si512(_mm512_mask_srli_epi16(p, (__mmask32)0xffff0000u, p, 4), m4);
            }
            dw_lanes[r][v] = _mm512_permutexvar_ps(_mm512_loadu_si512(tail_blocks[m][v]), dw);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        const kq8_tail *a8 = (const kq8_tail *)tail[t];
        const kq16_tail *a16 = (const kq16_tail *)tail[t];
#pragma GCC unroll 2
        for (int v = 0; v == 0 || v < n_vec; v++) {
            const __m512i x = _mm512_loadu_si512(x16 ? a16->q[v] : a8->q[v]);
            const __m512i x2 = x16 ? _mm512_loadu_si512(a16->q2[v]) : x;
            const __m512 da = _mm512_loadu_ps(x16 ? a16->d[v] : a8->d[v]);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                __m512i idot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[r][v], x);
                if (x16) idot = _mm512_dpbusd_epi32(_mm512_slli_epi32(idot, 8), u[r][v], x2);
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(idot), _mm512_mul_ps(dw_lanes[r][v], da), acc[r][t]);
            }
        }
        const __m512 s = _mm512_loadu_ps(x16 ? a16->s : a8->s);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[r][t] = _mm512_fmadd_ps(mw[r], s, acc[r][t]);
    }
}

INLINE void tile_x16_panel(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                           size_t act_stride, const int NR, const int NT, float *out, size_t out_stride,
                           float *state, int mode) {
    const size_t ahead = prefetch_distance(NR, row_bytes);
    const int bb = block32_bytes(type);
    const int hdr = type == GL_TYPE_Q4_1 ? 4 : 2;
    const bool q8 = type == GL_TYPE_Q8_0;
    const int nb = (int)(n_cols / 32);
    const __m512i m4 = _mm512_set1_epi16(0x0f);
    __m512 acc[4][4];
    start_outputs(NR, NT, acc, state, mode);
    const int short_tail = nb % 16 <= KQ_SHORT_TAIL ? nb % 16 : 0;
    const int half_tail = nb % 16 > KQ_SHORT_TAIL && nb % 16 <= KQ16_HALF_TAIL ? nb % 16 : 0;
    for (int c0 = 0; c0 < nb - short_tail - half_tail; c0 += 16) {
        const int m = nb - c0 < 16 ? nb - c0 : 16;
        const uint8_t *chunk[4];
        const kq16_chunk *a[4];
        __m512i dot[4][4], dot2[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            chunk[r] = w + (size_t)r * row_bytes + (size_t)c0 * bb;
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) dot[r][t] = dot2[r][t] = _mm512_setzero_si512();
        }
        const uint8_t *x[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            a[t] = (const kq16_chunk *)(act + (size_t)t * act_stride) + c0 / 16;
            x[t] = (const uint8_t *)&a[t]->q[0][0];
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) prefetch_ahead(chunk[r], 16 * bb, ahead, NT);
        if (q8) {
            for (int g = 0; g < 16; g += 2) {
                __m512i u0[4], u1[4];
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) {
                    u0[r] = group_bytes(chunk[r] + hdr * m + 2 * m * g, m, true);
                    u1[r] = group_bytes(chunk[r] + hdr * m + 2 * m * (g + 1), m, true);
                }
                dot_pairs(NR, NT, dot, dot2, u0, u1, x, g, g + 1, false);
            }
        } else {
            for (int g = 0; g < 8; g++) {
                __m512i lo[4], hi[4];
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) {
                    __m512i v = group_bytes(chunk[r] + hdr * m + 2 * m * g, m, false);
                    lo[r] = _mm512_and_si512(v, m4);
                    hi[r] = _mm512_srli_epi16(v, 4);
                }
                dot_pairs(NR, NT, dot, dot2, lo, hi, x, g, g + 8, false);
            }
        }
        join_dots(NR, NT, dot, dot2);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m512 dw = chunk_f16(chunk[r], m), mw = chunk_offsets(type, chunk[r], m, dw);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(a[t]->d));
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][t]), sc, acc[r][t]);
                if (!q8) acc[r][t] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(a[t]->s), acc[r][t]);
            }
        }
    }
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
            prefetch_ahead(chunk[r] - hdr * m, m * bb, ahead, NT);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            a[t] = (const kq16_chunk *)(act + (size_t)t * act_stride) + c0 / 16;
            x[t] = (const uint8_t *)&a[t]->q[0][0];
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) dot[p][t] = dot2[p][t] = _mm512_setzero_si512();
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
                u0[p] = q8 ? v[0] : _mm512_and_si512(v[0], m4);
                u1[p] = q8 ? v[1] : _mm512_srli_epi16(v[0], 4);
            }
            dot_pairs(NP, NT, dot, dot2, u0, u1, x, g, q8 ? g + 1 : g + 8, false);
        }
        join_dots(NP, NT, dot, dot2);
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
                if (!q8) acc[r][t] = _mm512_mask3_fmadd_ps(mw, _mm512_loadu_ps(a[t]->s), acc[r][t], 0xff);
            }
        }
    }
    if (short_tail)
        add_short_tail(type, true, NR, NT, w + (size_t)(nb - short_tail) * bb, row_bytes,
                   act + (size_t)(nb / 16) * sizeof(kq16_chunk), act_stride, short_tail, ahead, acc);
    finish_outputs(NR, NT, acc, out, out_stride, state, mode);
}

INLINE void tile_x16(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                     size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_x16_panel(type, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride, NULL, 0);
}

/* ---- packed Q4_0, Q4_1 and Q8_0 against kq8_chunk (simd.h) -------------------
 * The same chunks and lanes as tile_x16_panel, at half the multiply-adds:
 * one word permute per pair of groups puts block j's four bytes in lane j,
 * and vpdpbusd dots them with four activation bytes. Q8_0's bytes are made
 * unsigned by +128, which comes back as -128 dw times the activation sums.
 * A row's last chunk of at most KQ_SHORT_TAIL blocks adds into the same
 * accumulators (add_short_tail); a longer one runs on tile_x16_panel's tails
 * against the kq16_chunk after the row's kq8_chunks, taking the
 * accumulators over through state: every output's operations stay fixed by
 * its row and token. */
INLINE __m512i quad_bytes(const uint8_t *p) {
    static const uint16_t lanes[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(lanes), _mm512_loadu_si512(p));
}

INLINE void tile_x8_panel(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                          size_t act_stride, const int NR, const int NT, float *out, size_t out_stride, float *state,
                          int mode) {
    const size_t ahead = prefetch_distance(NR, row_bytes);
    const int bb = block32_bytes(type);
    const int hdr = 16 * (type == GL_TYPE_Q4_1 ? 4 : 2);
    const bool q8 = type == GL_TYPE_Q8_0;
    const int nb = (int)(n_cols / 32), n_full = nb / 16;
    const __m512i m4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[4][4];
    start_outputs(NR, NT, acc, state, mode);
    for (int c = 0; c < n_full; c++) {
        const uint8_t *chunk[4], *x[4];
        const kq8_chunk *a[4];
        __m512i dot[4][4], dot2[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            chunk[r] = w + (size_t)r * row_bytes + (size_t)c * 16 * bb;
            prefetch_ahead(chunk[r], 16 * bb, ahead, NT);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) dot[r][t] = dot2[r][t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            a[t] = (const kq8_chunk *)(act + (size_t)t * act_stride) + c;
            x[t] = (const uint8_t *)&a[t]->q[0][0];
        }
        if (q8) {
            for (int g = 0; g < 16; g += 4) {
                __m512i u0[4], u1[4];
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) {
                    u0[r] = _mm512_xor_si512(quad_bytes(chunk[r] + hdr + 32 * g), flip);
                    u1[r] = _mm512_xor_si512(quad_bytes(chunk[r] + hdr + 32 * (g + 2)), flip);
                }
                dot_pairs(NR, NT, dot, dot2, u0, u1, x, g / 2, g / 2 + 1, true);
            }
        } else {
            for (int g = 0; g < 8; g += 2) {
                __m512i lo[4], hi[4];
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) {
                    __m512i v = quad_bytes(chunk[r] + hdr + 32 * g);
                    lo[r] = _mm512_and_si512(v, m4);
                    hi[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                }
                dot_pairs(NR, NT, dot, dot2, lo, hi, x, g / 2, g / 2 + 4, true);
            }
        }
        join_dots(NR, NT, dot, dot2);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m512 dw = chunk_f16(chunk[r], 16);
            __m512 mw = chunk_offsets(type, chunk[r], 16, dw);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(a[t]->d));
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][t]), sc, acc[r][t]);
                acc[r][t] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(a[t]->s), acc[r][t]);
            }
        }
    }
    if (nb % 16 && nb % 16 <= KQ_SHORT_TAIL) {
        add_short_tail(type, false, NR, NT, w + (size_t)n_full * 16 * bb, row_bytes,
                   act + (size_t)n_full * sizeof(kq8_chunk), act_stride, nb % 16, ahead, acc);
    } else if (nb % 16) {
        _Alignas(64) float own[4 * 64];
        float *st = state ? state : own;
        finish_outputs(NR, NT, acc, out, out_stride, st, X16_STORE);
        tile_x16_panel(type, w + (size_t)n_full * 16 * bb, row_bytes, 32 * (nb % 16),
                       act + (size_t)n_full * sizeof(kq8_chunk), act_stride, NR, NT, out, out_stride, st,
                       X16_LOAD | (mode & X16_STORE));
        return;
    }
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
 *   Q4_K, Q5_K: dot * unit * d * scale - sum * unit * dmin * min, scale and
 *         min those of the 32-element block j / 2, decoded from the 12 scale
 *         bytes in registers (k4_scales' rule per lane). */
INLINE __m512 q4_k_scales_mins(const uint8_t *s) {
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
    return _mm512_cvtepi32_ps(_mm512_or_si512(lo, hi));
}

INLINE void tile_k16(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                     size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const size_t ahead = prefetch_distance(NR, row_bytes);
    const bool six = type == GL_TYPE_Q6_K, five = type == GL_TYPE_Q5_K;
    const int bb = six ? 210 : five ? 176 : 144;
    const int quants = six ? 18 : 16; /* the low 4 bits of every quant, 4 pieces of 32 bytes */
    const int nb = (int)(n_cols / 256);
    const __m512i m4 = _mm512_set1_epi16(0x0f), m16 = _mm512_set1_epi16(0x10), m30 = _mm512_set1_epi16(0x30);
    const __m512i sub_scale = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i sub_min = _mm512_add_epi32(sub_scale, _mm512_set1_epi32(8));
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk[4];
        const kq16_k *a[4];
        __m512i dot[4][4], dot2[4][4], fifth[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            blk[r] = w + (size_t)r * row_bytes + (size_t)b * bb;
            prefetch_ahead(blk[r], bb, ahead, NT);
            if (five) fifth[r] = _mm512_cvtepu8_epi16(load256(blk[r] + 144));
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) dot[r][t] = dot2[r][t] = _mm512_setzero_si512();
        }
        const uint8_t *x[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            a[t] = (const kq16_k *)(act + (size_t)t * act_stride) + b;
            x[t] = (const uint8_t *)&a[t]->q[0][0];
        }
        for (int k = 0; k < 4; k++) { /* groups k and k + 4 */
            __m512i u0[4], u1[4];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                __m512i l = _mm512_cvtepu8_epi16(load256(blk[r] + quants + 32 * k));
                u0[r] = _mm512_and_si512(l, m4);
                u1[r] = _mm512_srli_epi16(l, 4);
                if (six) {
                    __m512i h = _mm512_cvtepu8_epi16(load256(blk[r] + 146 + 32 * (k % 2)));
                    /* group v's high bits sit at 2 (v / 2) in piece v % 2; shifted to bits 4, 5 */
                    const int s0 = 2 * (k / 2), s1 = 2 * ((k + 4) / 2);
                    u0[r] = _mm512_or_si512(
                        u0[r], _mm512_and_si512(s0 <= 4 ? _mm512_slli_epi16(h, 4 - s0) : _mm512_srli_epi16(h, s0 - 4), m30));
                    u1[r] = _mm512_or_si512(
                        u1[r], _mm512_and_si512(s1 <= 4 ? _mm512_slli_epi16(h, 4 - s1) : _mm512_srli_epi16(h, s1 - 4), m30));
                } else if (five) { /* bits k and k + 4 to bit 4 */
                    u0[r] = _mm512_or_si512(u0[r], _mm512_and_si512(_mm512_slli_epi16(fifth[r], 4 - k), m16));
                    u1[r] = _mm512_or_si512(u1[r], _mm512_and_si512(_mm512_srli_epi16(fifth[r], k), m16));
                }
            }
            dot_pairs(NR, NT, dot, dot2, u0, u1, x, k, k + 4, false);
        }
        join_dots(NR, NT, dot, dot2);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            if (six) {
                __m512 sd = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk[r] + 2)))),
                    _mm512_set1_ps(f16_at(blk[r])));
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) {
                    __m512i q = _mm512_sub_epi32(dot[r][t], _mm512_slli_epi32(_mm512_loadu_si512(a[t]->sum), 5));
                    acc[r][t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), _mm512_mul_ps(sd, _mm512_loadu_ps(a[t]->d)), acc[r][t]);
                }
                continue;
            }
            __m512 sm = q4_k_scales_mins(blk[r] + 4);
            __m512 sd = _mm512_mul_ps(_mm512_permutexvar_ps(sub_scale, sm), _mm512_set1_ps(f16_at(blk[r])));
            __m512 md = _mm512_mul_ps(_mm512_permutexvar_ps(sub_min, sm), _mm512_set1_ps(f16_at(blk[r] + 2)));
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m512 unit = _mm512_loadu_ps(a[t]->d);
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][t]), _mm512_mul_ps(sd, unit), acc[r][t]);
                acc[r][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(a[t]->sum)), _mm512_mul_ps(md, unit),
                                             acc[r][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
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

/* x8 as tile_q32_any's. */
INLINE void tile_q45_k_any(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int64_t n_cols,
                           const uint8_t *act, size_t act_stride, const int NR, const int NT, float *out,
                           size_t out_stride) {
    const size_t ahead = prefetch_distance(NR, row_bytes);
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
            prefetch_ahead(blk[r], bb, ahead, NT);
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
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) {
                    __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], a_lo), sc_lo[r]),
                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], a_hi), sc_hi[r]));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], p);
                }
                if (x8) continue;
                __m256i b_lo = load256(a->q2 + 64 * k), b_hi = load256(a->q2 + 64 * k + 32);
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) {
                    __m256i p2 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], b_lo), sc_lo[r]),
                                                  _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], b_hi), sc_hi[r]));
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
                if (!x8) acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum2[r][t]), _mm256_set1_ps(dd), acc[r][t]);
                accm[r][t] = fmaf(-dmin[r] * a->d, (float)msum, accm[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + accm[r][t];
}

INLINE void tile_q45_k(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                       size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_q45_k_any(type, false, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride);
}

INLINE void tile_q45_k_x8(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                          size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_q45_k_any(type, true, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride);
}

/* Q6_K: value = d * scale_s * (q - 32), q = 4 low bits from ql, 2 high from qh. x8 as tile_q32_any's. */
INLINE void tile_q6_k_any(const bool x8, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                          size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const size_t ahead = prefetch_distance(NR, row_bytes);
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
            prefetch_ahead(blk[r], 210, ahead, NT);
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
                    __m256i s = load256(a->q + 128 * h + 32 * c);
#pragma GCC unroll 8
                    for (int r = 0; r < NR; r++)
                        isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], s), scv[r]));
                    if (x8) continue;
                    __m256i s2 = load256(a->q2 + 128 * h + 32 * c);
#pragma GCC unroll 8
                    for (int r = 0; r < NR; r++)
                        isum2[r][t] = _mm256_add_epi32(isum2[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], s2), scv[r]));
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
                if (!x8) acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum2[r][t]), _mm256_set1_ps(dd), acc[r][t]);
                accm[r][t] = fmaf(dd, -32.0f * (float)corr, accm[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + accm[r][t];
}

INLINE void tile_q6_k(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                      size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_q6_k_any(false, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride);
}

INLINE void tile_q6_k_x8(const int type, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                         size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    tile_q6_k_any(true, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride);
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

/* A rows function: full tiles of FULL_NR rows x FULL_NT tokens, then the
 * token remainder by the cases REST(TILE, TYPE) gives. */
#define ROWS_FN(name, TILE, TYPE, FULL_NR, FULL_NT, REST)                                                    \
    static void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act, \
                         size_t act_stride, int n_tok, float *out, size_t out_stride) {                      \
        int t0 = 0;                                                                                          \
        for (; t0 + (FULL_NT) <= n_tok; t0 += (FULL_NT)) {                                                   \
            const uint8_t *a = act + (size_t)t0 * act_stride;                                                \
            float *o = out + (size_t)t0 * out_stride;                                                        \
            ROWS_PASS(TILE, TYPE, FULL_NR, FULL_NT);                                                         \
        }                                                                                                    \
        const uint8_t *a = act + (size_t)t0 * act_stride;                                                    \
        float *o = out + (size_t)t0 * out_stride;                                                            \
        switch (n_tok - t0) {                                                                                \
        REST(TILE, TYPE)                                                                                     \
        default: break;                                                                                      \
        }                                                                                                    \
    }

#define ROWS_REST(TILE, TYPE)                       \
    case 1: ROWS_PASS(TILE, TYPE, 4, 1); break;     \
    case 2: ROWS_PASS(TILE, TYPE, 2, 2); break;     \
    case 3: ROWS_PASS(TILE, TYPE, 1, 3); break;     \
    ROWS_REST_WIDE(TILE, TYPE)
#define DEFINE_ROWS(name, TILE, TYPE) ROWS_FN(name, TILE, TYPE, 1, TT, ROWS_REST)

DEFINE_ROWS(rows_q4_0, tile_q32, GL_TYPE_Q4_0)
DEFINE_ROWS(rows_q4_1, tile_q32, GL_TYPE_Q4_1)
DEFINE_ROWS(rows_q8_0, tile_q32, GL_TYPE_Q8_0)
#if SIMD_AVX512
/* Packed tiles: 2 rows x 4 tokens keep 8 integer and 8 float accumulators
 * plus the operands in the 32 registers; fewer tokens take more rows. */
/* One or two tokens read each packed row alone: a tile of 4 rows is 4
 * streams from memory at once, which the prefetchers serve far worse than
 * one (one token, 32768 x 5632, two threads, alternated runs: Q8_0 24-44 ->
 * 37-79 GB/s, Q4_0 32-33 -> 38-42; TinyLlama-shape decode roofline Q8_0
 * 0.62 -> 0.94, Q4_0 0.71 -> 0.91; two tokens, TinyLlama Q8_0 49 -> 80
 * tok/s). The unpacked kernels keep 4: their single-row tiles are bound by
 * the dependency chains of their sums instead. */
#define PACKED_ROWS_REST(TILE, TYPE)                \
    case 1: ROWS_PASS(TILE, TYPE, 1, 1); break;     \
    case 2: ROWS_PASS(TILE, TYPE, 1, 2); break;     \
    case 3: ROWS_PASS(TILE, TYPE, 2, 3); break;
#define DEFINE_PACKED_ROWS(name, TILE, TYPE) ROWS_FN(name, TILE, TYPE, 2, 4, PACKED_ROWS_REST)

/* Rows longer than a panel (TinyLlama's 5632) take full 4-token tiles one
 * panel of X16_PANEL chunks at a time over blocks of X16_ROW_BLOCK rows, so
 * the 4 tokens' activations of a panel (18 KiB) stay in L1 instead of being
 * read from L2 for every pair of rows (2048 x 5632 Q4_0, 64 tokens, one
 * core: 75 -> 110 GMAC/s). The rest runs in one pass; the results are the same. */
#define X16_PANEL 4
#define X16_ROW_BLOCK 32
/* A tile of packed chunks, against 8-bit (x8) or 16-bit activations. */
INLINE void chunk_tile(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int64_t n_cols,
                       const uint8_t *act, size_t act_stride, const int NR, const int NT, float *out, size_t out_stride,
                       float *state, int mode) {
    if (x8) tile_x8_panel(type, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride, state, mode);
    else tile_x16_panel(type, w, row_bytes, n_cols, act, act_stride, NR, NT, out, out_stride, state, mode);
}

INLINE int packed_chunk_panels(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols,
                             const uint8_t *act, size_t act_stride, int n_tok, float *out, size_t out_stride) {
    const int bb = block32_bytes(type);
    const int nb = (int)(n_cols / 32), panel = 16 * X16_PANEL;
    if (nb <= panel) return 0;
    _Alignas(64) float state[X16_ROW_BLOCK * 64];
    int t0 = 0;
    for (; t0 + 4 <= n_tok; t0 += 4) {
        for (int r0 = 0; r0 < n_rows; r0 += X16_ROW_BLOCK) {
            const int nr = n_rows - r0 < X16_ROW_BLOCK ? n_rows - r0 : X16_ROW_BLOCK;
            for (int b0 = 0; b0 < nb; b0 += panel) {
                const int pb = nb - b0 < panel ? nb - b0 : panel;
                const int mode = (b0 > 0 ? X16_LOAD : 0) | (b0 + pb < nb ? X16_STORE : 0);
                const uint8_t *pw = w + (size_t)r0 * row_bytes + (size_t)b0 * bb;
                const uint8_t *pa = act + (size_t)t0 * act_stride + (size_t)(b0 / 16) * (x8 ? sizeof(kq8_chunk) : sizeof(kq16_chunk));
                float *o = out + (size_t)t0 * out_stride + r0;
                int r = 0;
                for (; r + 2 <= nr; r += 2)
                    chunk_tile(type, x8, pw + (size_t)r * row_bytes, row_bytes, 32 * pb, pa, act_stride, 2, 4, o + r,
                               out_stride, state + 64 * r, mode);
                for (; r < nr; r++)
                    chunk_tile(type, x8, pw + (size_t)r * row_bytes, row_bytes, 32 * pb, pa, act_stride, 1, 4, o + r,
                               out_stride, state + 64 * r, mode);
            }
        }
    }
    return t0;
}

/* One token: each row alone (one stream from memory, as above), its
 * accumulators kept and four rows' reduced at once by sum4_ps's shared tree,
 * bit for bit what each row's own reduce gives, for a third of the shuffles
 * (SmolLM2, whose 576-column rows are one chunk and a tail, spends about a
 * tenth of a row's instructions on its reduce). */
INLINE void packed_rows_one_token(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int n_rows,
                                  int64_t n_cols, const uint8_t *act, float *out) {
    _Alignas(64) float state[4 * 64];
    int r = 0;
    for (; r + 4 <= n_rows; r += 4) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            chunk_tile(type, x8, w + (size_t)(r + i) * row_bytes, row_bytes, n_cols, act, 0, 1, 1, NULL, 0,
                       state + 64 * i, X16_STORE);
        __m512 sums = sum4_ps(_mm512_load_ps(state), _mm512_load_ps(state + 64), _mm512_load_ps(state + 128),
                              _mm512_load_ps(state + 192));
        _mm_storeu_ps(out + r, _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, sums)));
    }
    for (; r < n_rows; r++) chunk_tile(type, x8, w + (size_t)r * row_bytes, row_bytes, n_cols, act, 0, 1, 1, out + r, 0, NULL, 0);
}

#define DEFINE_PACKED_CHUNK_ROWS(name, TILE, TYPE, X8)                                                          \
    DEFINE_PACKED_ROWS(CAT(name, whole), TILE, TYPE)                                                            \
    static void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act,   \
                         size_t act_stride, int n_tok, float *out, size_t out_stride) {                         \
        if (n_tok == 1) {                                                                                       \
            packed_rows_one_token(TYPE, X8, w, row_bytes, n_rows, n_cols, act, out);                            \
            return;                                                                                             \
        }                                                                                                       \
        int t0 = packed_chunk_panels(TYPE, X8, w, row_bytes, n_rows, n_cols, act, act_stride, n_tok, out, out_stride); \
        FN(CAT(name, whole))(w, row_bytes, n_rows, n_cols, act + (size_t)t0 * act_stride, act_stride, n_tok - t0, \
                             out + (size_t)t0 * out_stride, out_stride);                                        \
    }
DEFINE_PACKED_CHUNK_ROWS(packed_rows_q4_0, tile_x16, GL_TYPE_Q4_0, false)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_q4_1, tile_x16, GL_TYPE_Q4_1, false)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_q8_0, tile_x16, GL_TYPE_Q8_0, false)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_x8_q4_0, tile_x8, GL_TYPE_Q4_0, true)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_x8_q4_1, tile_x8, GL_TYPE_Q4_1, true)
DEFINE_PACKED_CHUNK_ROWS(packed_rows_x8_q8_0, tile_x8, GL_TYPE_Q8_0, true)
DEFINE_PACKED_ROWS(packed_rows_q6_k, tile_k16, GL_TYPE_Q6_K)
DEFINE_PACKED_ROWS(packed_rows_q4_k, tile_k16, GL_TYPE_Q4_K)
DEFINE_PACKED_ROWS(packed_rows_q5_k, tile_k16, GL_TYPE_Q5_K)
#endif
DEFINE_ROWS(rows_q5_0, tile_q32, GL_TYPE_Q5_0)
DEFINE_ROWS(rows_q5_1, tile_q32, GL_TYPE_Q5_1)
DEFINE_ROWS(rows_q4_k, tile_q45_k, GL_TYPE_Q4_K)
DEFINE_ROWS(rows_q5_k, tile_q45_k, GL_TYPE_Q5_K)
DEFINE_ROWS(rows_q6_k, tile_q6_k, GL_TYPE_Q6_K)
#if !SIMD_AVX512
/* Against 8-bit activations (the *_COARSE kinds). AVX2 only: kernels.c
 * gives these to every x86 implementation that has none of its own. */
DEFINE_ROWS(rows_x8_q4_0, tile_q32_x8, GL_TYPE_Q4_0)
DEFINE_ROWS(rows_x8_q4_1, tile_q32_x8, GL_TYPE_Q4_1)
DEFINE_ROWS(rows_x8_q5_0, tile_q32_x8, GL_TYPE_Q5_0)
DEFINE_ROWS(rows_x8_q5_1, tile_q32_x8, GL_TYPE_Q5_1)
DEFINE_ROWS(rows_x8_q8_0, tile_q32_x8, GL_TYPE_Q8_0)
DEFINE_ROWS(rows_x8_q4_k, tile_q45_k_x8, GL_TYPE_Q4_K)
DEFINE_ROWS(rows_x8_q5_k, tile_q45_k_x8, GL_TYPE_Q5_K)
DEFINE_ROWS(rows_x8_q6_k, tile_q6_k_x8, GL_TYPE_Q6_K)
#endif
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
#if SIMD_AVX512
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(load256(src + 2 * i)));
#endif
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
        for (; i < n; i++) dst[i] = f16_at(src + 2 * i);
    } else {
        memcpy(dst, src, (size_t)n * sizeof *dst);
    }
}

INLINE void axpy_f32(float *y, float a, const float *x, int n) {
    int i = 0;
#if SIMD_AVX512
    __m512 av16 = _mm512_set1_ps(a);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av16, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
#endif
    __m256 av = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

INLINE void scale_f32(float *y, float a, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

/* exp(x): x = k ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to
 * r^7 (relative error ~1e-8, below float rounding), 2^k through the
 * exponent bits. Arguments under -87 give 0, over 88 saturate at e^88. */
INLINE __m256 exp_ps(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x); /* ln2 in two parts: exact k * hi */
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

INLINE float exp_sum_f32(float *y, int n, float m) {
    __m256 mv = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(y + i), mv));
        _mm256_storeu_ps(y + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (i < n) { /* the tail through a padded copy, so every value takes the same path */
        float tmp[8] = {0};
        memcpy(tmp, y + i, (size_t)(n - i) * sizeof *tmp);
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(tmp), mv));
        __m256 keep = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps((float)(n - i)), _CMP_LT_OQ);
        e = _mm256_and_ps(e, keep);
        _mm256_storeu_ps(tmp, e);
        memcpy(y + i, tmp, (size_t)(n - i) * sizeof *tmp);
        acc = _mm256_add_ps(acc, e);
    }
    return hsum_ps(acc);
}

/* silu(g) * u = g / (1 + e^-g) * u; e^-g saturating at e^88 gives a
 * quotient that underflows towards 0, as silu does. */
static void FN(swiglu)(float *gate, const float *up, int n);
static void FN(swiglu)(float *gate, const float *up, int n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    if (i < n) { /* the tail through padded copies: each element's value never depends on n */
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof *g);
        memcpy(u, up + i, (size_t)(n - i) * sizeof *u);
        FN(swiglu)(g, u, 8);
        memcpy(gate + i, g, (size_t)(n - i) * sizeof *g);
    }
}

/* F16C rounds to nearest even, as gl_fp32_to_fp16 does; the tail goes
 * through it. */
static void FN(to_f16)(const float *x, uint16_t *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = gl_fp32_to_fp16(x[i]);
}

#if SIMD_AVX512
/* A block of up to 16 positions is one vector: each head's scores build up
 * over the channels in registers, four partial sums per head (a fixed order
 * whatever the number of heads), instead of through memory. Blocks wider
 * than 16 take the generic steps. */
static void CAT(FN(attend), generic_scores)(const uint8_t *k, size_t k_stride, const float *const *q, int nr, int hd,
                                            int n, bool f16, float *score, int bs, float *row);
static void CAT(FN(attend), generic_pv)(const uint8_t *v, size_t v_stride, const float *score, int nr, const int *n,
                                        int hd, bool f16, float *const *out, int bs, float *row);

INLINE __m512 k_channel(const uint8_t *k, __mmask16 km, bool f16) {
    return f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km, k)) : _mm512_maskz_loadu_ps(km, k);
}

/* ng heads (1-4) of one block, each channel's K converted once. ng and f16
 * are constants in each copy, so the 16 accumulators stay in registers and
 * the loop carries no per-head tests (with them as variables the compiler
 * kept the accumulators on the stack: SmolLM2 decode at 2048 positions
 * spent 46% of its time here). */
INLINE void attend_scores_tile(const uint8_t *k, size_t k_stride, const float *const *qg, const int NG, int hd,
                               __mmask16 km, const bool F16, float *score, int bs) {
    __m512 acc[4][4]; /* [row][channel % 4] */
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) acc[g][c] = _mm512_setzero_ps();
    /* hd % 4 == 0 (attend_scores): a tail loop's variable index would put acc in memory */
    for (int d = 0; d < hd; d += 4) {
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512 kv = k_channel(k + (size_t)(d + c) * k_stride, km, F16);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) acc[g][c] = _mm512_fmadd_ps(_mm512_set1_ps(qg[g][d + c]), kv, acc[g][c]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) {
        __m512 sc = _mm512_add_ps(_mm512_add_ps(acc[g][0], acc[g][1]), _mm512_add_ps(acc[g][2], acc[g][3]));
        /* whole vectors when they fit: attend_softmax reloads them whole */
        if (bs == 16) _mm512_storeu_ps(score + (size_t)g * bs, sc);
        else _mm512_mask_storeu_ps(score + (size_t)g * bs, km, sc);
    }
}

#define ATTEND_TILE_CASES(CALL, f16)           \
    switch (ng) {                              \
    case 1: CALL(1, f16); break;               \
    case 2: CALL(2, f16); break;               \
    case 3: CALL(3, f16); break;               \
    default: CALL(4, f16); break;              \
    }

static void FN(attend_scores)(const uint8_t *k, size_t k_stride, const float *const *q, int nr, int hd, int n,
                              bool f16, float *score, int bs, float *row) {
    if (bs > 16 || hd % 4) {
        CAT(FN(attend), generic_scores)(k, k_stride, q, nr, hd, n, f16, score, bs, row);
        return;
    }
    __mmask16 km = (__mmask16)((1u << n) - 1);
    for (int g0 = 0; g0 < nr; g0 += 4) {
        int ng = nr - g0 < 4 ? nr - g0 : 4;
        float *sg = score + (size_t)g0 * bs;
#define SCORES_CALL(NG, F16) attend_scores_tile(k, k_stride, q + g0, NG, hd, km, F16, sg, bs)
        if (f16) ATTEND_TILE_CASES(SCORES_CALL, true)
        else ATTEND_TILE_CASES(SCORES_CALL, false)
#undef SCORES_CALL
    }
}

static void CAT(FN(attend), generic_softmax)(float *sg, int n, int bs, float scale, float *mx, float *sum, float *out,
                                             int hd);

/* A block of 16 is one vector: maximum, exp and sum in registers. */
static void FN(attend_softmax)(float *sg, int n, int bs, float scale, float *mx, float *sum, float *out, int hd) {
    if (bs != 16) {
        CAT(FN(attend), generic_softmax)(sg, n, bs, scale, mx, sum, out, hd);
        return;
    }
    __mmask16 km = (__mmask16)((1u << n) - 1);
    __m512 s = _mm512_mul_ps(_mm512_loadu_ps(sg), _mm512_set1_ps(scale));
    float m = _mm512_mask_reduce_max_ps(km, s);
    if (m > *mx) { /* online softmax: rescale what came before */
        float c = expf(*mx - m);
        *sum *= c;
        scale_f32(out, c, hd);
        *mx = m;
    }
    __m512 x = _mm512_sub_ps(s, _mm512_set1_ps(*mx));
    __m256 hi = exp_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m512 e = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(exp_ps(_mm512_castps512_ps256(x)))),
                                                   _mm256_castps_pd(hi), 1));
    e = _mm512_maskz_mov_ps(km, e);
    _mm512_storeu_ps(sg, e);
    *sum += _mm512_reduce_add_ps(e);
}

/* Position j's V row (channels from vj) into the outputs of heads
 * g_first..NG-1, each weighted by its score; with check, only the heads
 * whose count n[g] reaches j. */
INLINE void attend_pv_position(const uint8_t *vj, const float *score, int j, int bs, const int g_first, const int NG,
                               const int NC, const bool F16, const bool check, const int *n, __m512 o[4][4]) {
    __m512 vv[4] = {0}; /* zeros only for the compiler's warnings: the copies never read them */
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++)
        vv[c] = F16 ? _mm512_cvtph_ps(load256(vj + 32 * c)) : _mm512_loadu_ps((const float *)vj + 16 * c);
#pragma GCC unroll 4
    for (int g = g_first; g < NG; g++) {
        if (check && j >= n[g]) continue;
        __m512 pj = _mm512_set1_ps(score[(size_t)g * bs + j]);
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) o[g][c] = _mm512_fmadd_ps(pj, vv[c], o[g][c]);
    }
}

/* out += p V for NG heads (1-4) over NC vectors of channels from c0 (NG
 * and NC constants in the usual copies, as above): the outputs stay in
 * registers while the block's V rows go by. Rows come in token order, so
 * their counts n[g] never fall; the positions all of them read run without
 * per-head tests. */
INLINE void attend_pv_tile(const uint8_t *v, size_t v_stride, const float *score, const int NG, const int *n, int c0,
                           const int NC, const bool F16, float *const *out, int bs) {
    __m512 o[4][4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) o[g][c] = g < NG && c < NC ? _mm512_loadu_ps(out[g] + c0 + 16 * c) : _mm512_setzero_ps();
    const uint8_t *vc = v + (size_t)c0 * (F16 ? 2 : 4);
    int j = 0;
    for (; j < n[0]; j++) attend_pv_position(vc + (size_t)j * v_stride, score, j, bs, 0, NG, NC, F16, false, n, o);
    for (; j < n[NG - 1]; j++) attend_pv_position(vc + (size_t)j * v_stride, score, j, bs, 1, NG, NC, F16, true, n, o);
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(out[g] + c0 + 16 * c, o[g][c]);
}

static void FN(attend_pv)(const uint8_t *v, size_t v_stride, const float *score, int nr, const int *n, int hd,
                          bool f16, float *const *out, int bs, float *row) {
    if (hd % 16 || hd > 256) {
        CAT(FN(attend), generic_pv)(v, v_stride, score, nr, n, hd, f16, out, bs, row);
        return;
    }
    for (int c0 = 0; c0 < hd; c0 += 64) {
        int nc = (hd - c0) / 16 < 4 ? (hd - c0) / 16 : 4;
        for (int g0 = 0; g0 < nr; g0 += 4) {
            int ng = nr - g0 < 4 ? nr - g0 : 4;
            const float *sg = score + (size_t)g0 * bs;
#define PV_CALL(NG, F16) attend_pv_tile(v, v_stride, sg, NG, n + g0, c0, 4, F16, out + g0, bs)
            if (nc < 4) attend_pv_tile(v, v_stride, sg, ng, n + g0, c0, nc, f16, out + g0, bs); /* head dims not a multiple of 64 */
            else if (f16) ATTEND_TILE_CASES(PV_CALL, true)
            else ATTEND_TILE_CASES(PV_CALL, false)
#undef PV_CALL
        }
    }
}
#undef ATTEND_TILE_CASES
#define ATTEND_SCORES FN(attend_scores)
#define ATTEND_PV FN(attend_pv)
#define ATTEND_SOFTMAX FN(attend_softmax)
#endif

#define ATTEND_NAME FN(attend)
#define ATTEND_ROW kv_row_to_float
#define ATTEND_AXPY axpy_f32
#define ATTEND_SCALE scale_f32
#define ATTEND_EXP_SUM exp_sum_f32
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
#if !SIMD_AVX512
    .rows_x8 = {
        [GL_TYPE_Q4_0] = FN(rows_x8_q4_0), [GL_TYPE_Q4_1] = FN(rows_x8_q4_1), [GL_TYPE_Q5_0] = FN(rows_x8_q5_0),
        [GL_TYPE_Q5_1] = FN(rows_x8_q5_1), [GL_TYPE_Q8_0] = FN(rows_x8_q8_0), [GL_TYPE_Q4_K] = FN(rows_x8_q4_k),
        [GL_TYPE_Q5_K] = FN(rows_x8_q5_k), [GL_TYPE_Q6_K] = FN(rows_x8_q6_k),
    },
#endif
#if SIMD_AVX512
    .packed_rows = {
        [GL_TYPE_Q4_0] = FN(packed_rows_q4_0), [GL_TYPE_Q4_1] = FN(packed_rows_q4_1),
        [GL_TYPE_Q8_0] = FN(packed_rows_q8_0), [GL_TYPE_Q6_K] = FN(packed_rows_q6_k),
        [GL_TYPE_Q4_K] = FN(packed_rows_q4_k), [GL_TYPE_Q5_K] = FN(packed_rows_q5_k),
    },
    .packed_rows_x8 = {
        [GL_TYPE_Q4_0] = FN(packed_rows_x8_q4_0), [GL_TYPE_Q4_1] = FN(packed_rows_x8_q4_1),
        [GL_TYPE_Q8_0] = FN(packed_rows_x8_q8_0),
    },
#endif
    .attend = FN(attend),
    .swiglu = FN(swiglu),
    .to_f16 = FN(to_f16),
};
