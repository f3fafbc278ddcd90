/* simd_body.h -- the x86 kernels both implementations share, written once
 * and compiled once per instruction set: the including file defines
 * SIMD_NAME (the suffix of every function: _avx2 or _avx512), TT (tokens
 * per tile), SIMD_VNNI (1 to use vpdpbusd) and SIMD_AVX512 (1 for the
 * 512-bit steps of the attention helpers), and sets the target before
 * including this file; then kernels_avx512.h adds simd_avx512.h, and the
 * units that hold the kern_impl table end with simd_impl.h (attention and
 * the table). Everything here
 * is reached only through a kern_impl that kernels.c picks after asking the
 * CPU. Each generated function's full names are in a comment beside it.
 *
 * Weights as the file has them: 256-bit vectors, one 32-element block of
 * 8-bit values to a register. Weights are turned into unsigned bytes (Q8_0
 * uses the sign trick instead) so one multiply-add instruction dots them with
 * the signed activation bytes; offsets (Q4_0's -8, Q4_1's minimum, ...) are
 * applied afterwards through the activation block sums.
 *
 * Batch invariance: a tile computes NR weight rows against NT tokens, but
 * each output has its own accumulators updated block by block in order, with
 * the same instructions whatever NR and NT are. Tiles only decide which
 * outputs share weight and activation loads, never an output's value. */
#ifndef GL_SIMD_BODY_H
#define GL_SIMD_BODY_H
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant.h"
#include "simd.h"

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, SIMD_NAME)
#define INLINE static inline __attribute__((always_inline))

/* Which generated functions this translation unit defines: kernels_avx2.c
 * all of them (SIMD_PARTS unset); kernels_avx512*.c one part each, so no
 * unit takes long to compile (under sanitizers the packed and AMX tiles took
 * most of a build in one). A part's functions are static where the kern_impl
 * table is (SIMD_PART_TABLE), else hidden and declared in kernels_avx512.h. */
#define SIMD_PART_TABLE 0x01      /* quantize_*, swiglu, geglu, to_f16, attention, the table (simd_impl.h) */
#define SIMD_PART_ROWS 0x02       /* rows_*: weights as the file has them */
#define SIMD_PART_PACKED 0x04     /* packed_rows_{q4_0,q4_1}: 16-bit activations */
#define SIMD_PART_PACKED_Q5_0 0x08 /* packed_rows_q5_0 */
#define SIMD_PART_PACKED_Q5_1 0x400 /* packed_rows_q5_1 */
#define SIMD_PART_PACKED_Q8_0 0x800 /* packed_rows_q8_0 */
#define SIMD_PART_PACKED_X8 0x10  /* packed_rows_x8_{q4_0,q4_1,q8_0}: 8-bit activations */
#define SIMD_PART_PACKED_X8_Q5 0x20 /* packed_rows_x8_{q5_0,q5_1} */
#define SIMD_PART_PACKED_K 0x40   /* packed_rows_{q4_k,q5_k,q6_k}, packed_rows_x8_{...} */
#define SIMD_PART_AMX 0x80        /* amx_rows_{q4_0,q4_1,q5_0,q5_1,q8_0} (simd_amx.h) */
#define SIMD_PART_AMX_X8 0x100    /* amx_rows_x8_{q4_0,q4_1,q5_0,q5_1,q8_0} */
#define SIMD_PART_AMX_K 0x200     /* amx_rows_{q4_k,q5_k,q6_k}, amx_rows_x8_{...} (simd_amx_k.h) */
#define SIMD_PART_AMX_X12 0x1000  /* amx_rows_x12_{q4_0,q4_1} */
#ifndef SIMD_PARTS
#define SIMD_PARTS 0x1fff
#endif
#define SIMD_EMITS(part) ((SIMD_PARTS) & SIMD_PART_##part)
#define SIMD_HIDDEN __attribute__((visibility("hidden")))
#if SIMD_EMITS(TABLE)
#define SIMD_DEF static
#else
#define SIMD_DEF SIMD_HIDDEN
#endif

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
 * ahead (prefetch_distance) for the lines of what is being read now keeps
 * enough misses in flight.
 * A decode tile of one row (one or two tokens, the packed kernels') asks
 * for each line twice: into L2 3 KiB ahead and into L1 1 KiB ahead, by
 * when the L2 request has landed, so the L1 one is a short trip and the
 * tile's own loads hit L1, when the weights stream from memory
 * (kern_weights_stream); from the L3 (SmolLM2, 0.1 GB) the second request
 * costs more than it saves (decode was clearly slower), and the one L2
 * request below serves. Its compute per byte (Q5_0, the K-quants) then
 * overlaps the stream better than with one request into L2 6 KiB ahead
 * (every type read faster streaming from memory, still short of what a
 * plain read of the same memory reaches). Other tiles of one or two tokens
 * (several rows side by side) ask for L2 only, 6 KiB or more ahead: an L1
 * request that misses to memory holds one of L1's few miss buffers for the
 * whole trip, and with them all taken the tile's own loads wait. Wider
 * tiles, compute-bound, keep L1 (their prefill was slower with L2).
 * Prefetches never fault, so running past the end of the weights is harmless. */
#define PF_DECODE_L1 1024 /* the pair's L1 distance; prefetch_distance gives it only to streamed decode rows */
/* One token's Q5 rows this short (Qwen2.5's 896 columns, 616 bytes) are
 * read two a tile when streamed too, with the single row's prefetch pair
 * (q5_prefetch_distance): the two rows lie end to end, one stream still,
 * and the tile shares the split activations' loads and a row's fixed costs
 * over Q5's dearer unpack (faster streamed, on one thread and two).
 * Q4_0's 1152-byte rows lost so (TinyLlama), Q8_0's 952 neither won nor
 * lost clearly. */
#define PF_PAIR_ROW_BYTES 1024
INLINE void prefetch_ahead(const uint8_t *p, int n_bytes, size_t ahead, const int NR, const int NT) {
    for (int off = 0; off < n_bytes; off += 64) {
        if (NR <= 2 && NT <= 2 && ahead == PF_DECODE_L1) {
            _mm_prefetch((const char *)p + ahead + off, _MM_HINT_T0);
            _mm_prefetch((const char *)p + 3 * ahead + off, _MM_HINT_T1);
        } else if (NT <= 2) {
            _mm_prefetch((const char *)p + ahead + off, _MM_HINT_T1);
        } else {
            _mm_prefetch((const char *)p + ahead + off, _MM_HINT_T0);
        }
    }
}

/* A tile reads its NR rows side by side, so "6 KiB ahead" of one of them
 * can land in another row the tile is reading now (TinyLlama's 5632-column
 * rows are 3 KiB): ask for the same place in a later tile instead, the
 * first at least 6 KiB on. A single row's stream is contiguous (the rows
 * follow each other), so a decode row's distance is exact. */
INLINE size_t prefetch_distance(int NR, int NT, size_t row_bytes) {
    if (NR == 1 && NT <= 2 && atomic_load_explicit(&kern_weights_stream, memory_order_relaxed)) return PF_DECODE_L1;
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
 * q = round(x / d) and q2 = round((x - d q) * 256 / d), both to nearest even
 * (12 bits: q2 = 16 round((x - d q) * 16 / d), simd.h). */

INLINE __m256i round_to_i32(__m256 x, __m256 id) {
    return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* 8 floats -> coarse and residual quants (as int32) and their 16-bit sum;
 * id2 = id * res, rmax and sh kq_res_max and kq_res_shift of res (simd.h). */
INLINE __m256i quant8(const float *x, __m256 d, __m256 id, __m256 id2, int rmax, int sh, __m256i *q, __m256i *q2) {
    __m256 xv = _mm256_loadu_ps(x);
    *q = round_to_i32(xv, id);
    __m256 r = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(*q), d, xv);
    *q2 = _mm256_max_epi32(_mm256_min_epi32(round_to_i32(r, id2), _mm256_set1_epi32(rmax)), _mm256_set1_epi32(-rmax));
    *q2 = _mm256_slli_epi32(*q2, sh);
    return _mm256_add_epi32(_mm256_slli_epi32(*q, 8), *q2);
}

INLINE void pack_store(int8_t *dst, __m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, p);
}

/* Quantize 32 floats with coarse scale d and res (KQ_RES16, KQ_RES12); sums of 256 q + q2 per 16. */
INLINE void quant32(const float *x, float d, int res, int8_t *q, int8_t *q2, int *sum_lo, int *sum_hi) {
    float idf = d != 0.0f ? 1.0f / d : 0.0f;
    __m256 dv = _mm256_set1_ps(d), id = _mm256_set1_ps(idf), id2 = _mm256_set1_ps(idf * (float)res);
    const int rmax = kq_res_max(res), sh = kq_res_shift(res);
    __m256i a[4], b[4], v[4];
    for (int i = 0; i < 4; i++) v[i] = quant8(x + 8 * i, dv, id, id2, rmax, sh, &a[i], &b[i]);
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

#if SIMD_EMITS(TABLE)
/* quantize_32_avx2, quantize_32_avx512 */
static void FN(quantize_32)(const float *x, kq8_32 *y, int64_t n, int res) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float d = hmax_ps(abs_max(x, 32)) / 127.0f, unit = d * (1.0f / 256.0f);
        int lo, hi;
        quant32(x, d, res, y[b].q, y[b].q2, &lo, &hi);
        y[b].d = unit;
        y[b].s = unit * (float)(lo + hi);
    }
}

/* quantize_256_avx2, quantize_256_avx512 */
static void FN(quantize_256)(const float *x, kq8_256 *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        float d = hmax_ps(abs_max(x, 256)) / 127.0f;
        for (int j = 0; j < 8; j++) {
            int lo, hi;
            quant32(x + 32 * j, d, KQ_RES16, y[b].q + 32 * j, y[b].q2 + 32 * j, &lo, &hi);
            y[b].bsums[2 * j] = lo;
            y[b].bsums[2 * j + 1] = hi;
        }
        y[b].d = d * (1.0f / 256.0f);
    }
}
#endif

/* ---- 32-element block types ----------------------------------------------------
 * row . x = sum_b [dw_b * da_b * dot(u_b, q_b) + mw_b * s_b]: u the weight
 * quants as unsigned bytes, mw the weight offset (Q4_0: -8 dw, Q4_1: m). */

/* Bytes of one block of a 32-element type, as a constant the compiler folds
 * into each tile (gl_type_get would be a call per tile). */
INLINE int block32_bytes(const int type) {
    return type == GL_TYPE_Q4_0 ? 18 : type == GL_TYPE_Q4_1 ? 20 : type == GL_TYPE_Q5_0 ? 22 : type == GL_TYPE_Q5_1 ? 24 : 34;
}

/* A tile's first argument: the weight type, with TILE_X8 when the
 * activations are a *_COARSE kind (simd.h): then there are no residual
 * dots, and the coarse dot takes the coarse step (256 units) in its scale. */
#define TILE_X8 0x100

INLINE void tile_q32(const int kind, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                     size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const int type = kind & ~TILE_X8;
    const bool x8 = kind & TILE_X8;
    const size_t ahead = prefetch_distance(NR, NT, row_bytes);
    const int bb = block32_bytes(type);
    const bool has_min = type != GL_TYPE_Q8_0;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    /* a block's scale steps go the NR rows a vector (lane r: row r), each
     * lane the scalar operation it replaces: dw and mw from one conversion,
     * dw * d in one multiply, fmaf(mw, s, accm) in one multiply-add */
    __m256 acc[4][TT];
    __m128 accm[TT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) {
        accm[t] = _mm_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) acc[r][t] = _mm256_setzero_ps();
    }
    int nb = (int)(n_cols / 32);
    for (int b = 0; b < nb; b++) {
        __m256i u[4], wq[4];
        uint16_t hd[4] = {0, 0, 0, 0}, hm[4] = {0, 0, 0, 0};
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + (size_t)r * row_bytes + (size_t)b * bb;
            if (b % 2 == 0) prefetch_ahead(blk, 2 * bb, ahead, NR, NT);
            memcpy(&hd[r], blk, 2);
            if (type == GL_TYPE_Q8_0) {
                wq[r] = load256(blk + 2);
                u[r] = _mm256_sign_epi8(wq[r], wq[r]);
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
            if (type == GL_TYPE_Q4_1 || type == GL_TYPE_Q5_1) memcpy(&hm[r], blk + 2, 2);
        }
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16((short)hd[0], (short)hd[1], (short)hd[2], (short)hd[3], 0, 0, 0, 0));
        const __m128 mw = type == GL_TYPE_Q4_0   ? _mm_mul_ps(_mm_set1_ps(-8.0f), dw)
                          : type == GL_TYPE_Q5_0 ? _mm_mul_ps(_mm_set1_ps(-16.0f), dw)
                                                 : _mm_cvtph_ps(_mm_setr_epi16((short)hm[0], (short)hm[1], (short)hm[2],
                                                                               (short)hm[3], 0, 0, 0, 0));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const kq8_32 *a = (const kq8_32 *)(act + (size_t)t * act_stride) + b;
            __m256i s = load256(a->q);
            const __m256 dd = _mm256_castps128_ps256(_mm_mul_ps(dw, _mm_set1_ps(x8 ? a->d * 256.0f : a->d)));
            if (has_min) accm[t] = _mm_fmadd_ps(mw, _mm_set1_ps(a->s), accm[t]);
            if (x8) {
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) {
                    __m256i dot = dot_u8s8(u[r], type == GL_TYPE_Q8_0 ? _mm256_sign_epi8(s, wq[r]) : s);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(r)),
                                                acc[r][t]);
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
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(r)),
                                            acc[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) {
        _Alignas(16) float m[4];
        _mm_store_ps(m, accm[t]);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + m[r];
    }
}



#if !SIMD_AVX512
/* ---- AVX2 prompts: 32-element blocks as 16-bit words ----------------------------
 * vpmaddubsw takes unsigned bytes against signed ones, so tile_q32 pays two
 * byte dots (vpmaddubsw and vpmaddwd each), a shift and an add a block and
 * output for a 16-bit activation 256 q + q2. A prompt instead turns a block
 * of rows into 16-bit words once, and a pass's tokens once a call: two
 * vpmaddwd and an add make the same integers. A block's words go in dword
 * order 0, 2, ..., 14, then 1, 3, ..., 15 (w16_order), so that lane k of
 * the pair's sum holds elements 4k..4k+3 as dot_u8s8's lane k does, and the
 * float steps are tile_q32's: the same bits as the decode tiles. */
#define W16_ROW_BYTES (96 << 10) /* a row block's words (L2) */
#define W16_ACT_BYTES (256 << 10) /* a pass's token words (L2) */
#define W16_MIN_TOKENS 8        /* fewer (a decode batch of 4 streamed from memory): the unpack costs more than it saves */
#define W16_NT 4                /* tokens a tile */

/* A block's natural words 0..15 (lo) and 16..31 (hi) into w16 order. */
INLINE void w16_order(__m256i lo, __m256i hi, __m256i *dst) {
    const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    lo = _mm256_permutevar8x32_epi32(lo, split);
    hi = _mm256_permutevar8x32_epi32(hi, split);
    dst[0] = _mm256_permute2x128_si256(lo, hi, 0x20);
    dst[1] = _mm256_permute2x128_si256(lo, hi, 0x31);
}

/* Weight block blk as words: tile_q32's unsigned quants u, or Q8_0's
 * signed values (its |w| . sign(x, w) is the same integer). */
INLINE void w16_weights(const int type, const uint8_t *blk, __m256i *dst) {
    if (type == GL_TYPE_Q8_0) {
        const __m256i v = load256(blk + 2);
        w16_order(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)),
                  dst);
        return;
    }
    const uint8_t *qs = blk + (type == GL_TYPE_Q4_0 ? 2 : type == GL_TYPE_Q4_1 ? 4 : type == GL_TYPE_Q5_0 ? 6 : 8);
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
    if (type == GL_TYPE_Q5_0 || type == GL_TYPE_Q5_1) {
        uint32_t qh;
        memcpy(&qh, blk + (type == GL_TYPE_Q5_0 ? 2 : 4), 4);
        u = _mm256_or_si256(u, expand_bits_0x10(qh));
    }
    w16_order(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(u)), _mm256_cvtepu8_epi16(_mm256_extracti128_si256(u, 1)), dst);
}

/* 32 activations as words 256 q + q2 (|.| <= 32639) in w16 order. */
INLINE void w16_words(const int8_t *q8, const int8_t *q28, __m256i *dst) {
    const __m256i q = load256(q8), q2 = load256(q28);
    const __m256i lo = _mm256_add_epi16(_mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)), 8),
                                        _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q2)));
    const __m256i hi = _mm256_add_epi16(_mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)), 8),
                                        _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q2, 1)));
    w16_order(lo, hi, dst);
}

#define W16K_VECS 16 /* word vectors a super-block */

/* Tokens t0..t1 - 1 of a pass as words (xs, vecs a token) and by block,
 * then token (tb a block): a block-32 type's s (in per_block), a K-quant's
 * d (per_block) and 16 block sums (bst). */
INLINE void w16_turn_tokens(const int type, const uint8_t *act, size_t act_stride, int t0, int t1, int nb, int vecs,
                            int tb, __m256i *xs, float *per_block, int32_t *bst) {
    const bool k = type == GL_TYPE_Q4_K || type == GL_TYPE_Q5_K;
    for (int t = t0; t < t1; t++)
        for (int b = 0; b < nb; b++) {
            const uint8_t *row = act + (size_t)t * act_stride;
            float *pb = &per_block[(size_t)b * tb + (t - t0)];
            if (!k) {
                const kq8_32 *a = (const kq8_32 *)row + b;
                w16_words(a->q, a->q2, &xs[(size_t)(t - t0) * vecs + 2 * b]);
                *pb = a->s;
                continue;
            }
            const kq8_256 *a = (const kq8_256 *)row + b;
            for (int j = 0; j < 8; j++) w16_words(a->q + 32 * j, a->q2 + 32 * j, &xs[(size_t)(t - t0) * vecs + W16K_VECS * b + 2 * j]);
            *pb = a->d;
            for (int i = 0; i < 16; i++) bst[((size_t)b * 16 + i) * tb + (t - t0)] = a->bsums[i];
        }
}

/* A tile's running sums between column panels (w16_rows). */
typedef struct w16_state {
    __m256 acc[2][W16_NT];
    __m128 accm[2];
} w16_state;

/* NR rows x W16_NT tokens as tile_q32 over blocks b0..b1 - 1: the rows'
 * words ww (row_vecs apart) and scales sc (dw, mw a block, row_vecs
 * apart), the tokens' words xw (row_vecs apart), kq8_32 rows (for d) and
 * sums s by block (st, s_stride apart). Sums start at zero (b0 == 0) or
 * from *state, and end in out (b1 == nb) or in *state. Each scale dw * d
 * is a multiply of two broadcasts, and the offset terms fmaf(mw, s, accm)
 * go four tokens a vector: the same operations on each output, with no
 * scalar state to spill. */
INLINE void tile_w16(const int type, const int NR, const __m256i *ww, int row_vecs, const float *sc, int b0, int b1,
                     int nb, const __m256i *xw, const uint8_t *act, size_t act_stride, const float *st, int s_stride,
                     w16_state *state, float *out, size_t out_stride) {
    const int sc_stride = 2 * nb;
    const int NT = W16_NT;
    const bool has_min = type != GL_TYPE_Q8_0;
    __m256 acc[2][W16_NT];
    __m128 accm[2];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        accm[r] = b0 ? state->accm[r] : _mm_setzero_ps();
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r][t] = b0 ? state->acc[r][t] : _mm256_setzero_ps();
    }
    for (int b = b0; b < b1; b++) {
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const kq8_32 *a = (const kq8_32 *)(act + (size_t)t * act_stride) + b;
            const __m256i x0 = _mm256_load_si256(&xw[(size_t)t * row_vecs + 2 * b]);
            const __m256i x1 = _mm256_load_si256(&xw[(size_t)t * row_vecs + 2 * b + 1]);
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) {
                const __m256i *wr = ww + (size_t)r * row_vecs + 2 * b;
                const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(_mm256_load_si256(wr), x0),
                                                     _mm256_madd_epi16(_mm256_load_si256(wr + 1), x1));
                const __m256 scale =
                    _mm256_mul_ps(_mm256_broadcast_ss(&sc[(size_t)r * sc_stride + 2 * b]), _mm256_broadcast_ss(&a->d));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r][t]);
            }
        }
        if (has_min) {
            const __m128 sv = _mm_load_ps(st + (size_t)b * s_stride);
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++)
                accm[r] = _mm_fmadd_ps(_mm_broadcast_ss(&sc[(size_t)r * sc_stride + 2 * b + 1]), sv, accm[r]);
        }
    }
    if (b1 < nb) {
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            state->accm[r] = accm[r];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) state->acc[r][t] = acc[r][t];
        }
        return;
    }
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) {
        _Alignas(16) float m[4];
        _mm_store_ps(m, accm[r]);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + m[t];
    }
}

#endif

/* ---- K-quants: 256-element super-blocks against kq8_256 --------------------------
 * Integer sums of scale * dot per sub-block stay exact in 32 bits; the
 * minimums come from the activation sums of 16. */

/* Q4_K/Q5_K: 6-bit scales and mins of the 8 sub-blocks, four at a time in
 * 32-bit words (byte by byte, GCC assembled them with shifts and ors, a
 * fifth of a decode's time). */
INLINE void k4_scales(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, top2 = 0x03030303u;
    const uint32_t sc_lo = u[0] & low6, mn_lo = u[1] & low6;
    const uint32_t sc_hi = (u[2] & low4) | ((u[0] >> 6) & top2) << 4;
    const uint32_t mn_hi = ((u[2] >> 4) & low4) | ((u[1] >> 6) & top2) << 4;
    memcpy(sc, &sc_lo, 4), memcpy(sc + 4, &sc_hi, 4);
    memcpy(mn, &mn_lo, 4), memcpy(mn + 4, &mn_hi, 4);
}

INLINE void tile_q45_k(const int kind, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                       size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const int type = kind & ~TILE_X8;
    const bool x8 = kind & TILE_X8;
    const size_t ahead = prefetch_distance(NR, NT, row_bytes);
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
            prefetch_ahead(blk[r], bb, ahead, NR, NT);
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
                __m256i b_lo = x8 ? a_lo : load256(a->q2 + 64 * k), b_hi = x8 ? a_hi : load256(a->q2 + 64 * k + 32);
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) {
                    __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], a_lo), sc_lo[r]),
                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], a_hi), sc_hi[r]));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], p);
                    if (x8) continue;
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
                if (x8) {
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_set1_ps(dd * 256.0f), acc[r][t]);
                } else {
                    /* 256 isum + isum2, each lane's exact S (|S| <= 32 * 31 * 63 * 32639 < 2^31), as w16_rows */
                    const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(isum[r][t], 8), isum2[r][t]);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(dd), acc[r][t]);
                }
                accm[r][t] = fmaf(-dmin[r] * a->d, (float)msum, accm[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + accm[r][t];
}


#if !SIMD_AVX512
/* AVX2 prompts of Q4_K and Q5_K from words, as w16_rows: a row's quants
 * times their sub-block scales (w' <= 31 x 63) as words in w16 order a
 * sub-block, a token's 256 q + q2 likewise, so that vpmaddwd pairs sum to
 * tile_q45_k's lanes of S = 256 isum + isum2; the minimums' sums M for two
 * rows and four tokens a vector (lane 4 r + t); tile_q45_k's float steps. */

/* A tile's super-block constants of a row pair: d, -dmin and each of the
 * 16 minimums (one per 16 quants) four times a row, rows in 128-bit halves. */
typedef struct w16k_pair {
    float d[2], neg_dmin[2];
    _Alignas(32) int32_t mins[16][8]; /* aligned loads */
} w16k_pair;

/* Row r's super-block blk as words (dst) and its half of a pair's constants. */
INLINE void w16k_weights(const int type, const uint8_t *blk, int half, __m256i *dst, w16k_pair *pair) {
    const bool five = type == GL_TYPE_Q5_K;
    uint8_t sc[8], mn[8];
    k4_scales(blk + 4, sc, mn);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10);
    for (int k = 0; k < 4; k++) {
        const __m256i raw = load256(blk + (five ? 48 : 16) + 32 * k);
        __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if (five) {
            const __m256i qh = load256(blk + 16);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k), 4), m16));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k + 1), 4), m16));
        }
        const __m256i s_lo = _mm256_set1_epi16(sc[2 * k]), s_hi = _mm256_set1_epi16(sc[2 * k + 1]);
        w16_order(_mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(lo)), s_lo),
                  _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(lo, 1)), s_lo), &dst[4 * k]);
        w16_order(_mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(hi)), s_hi),
                  _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(hi, 1)), s_hi), &dst[4 * k + 2]);
    }
    pair->d[half] = f16_at(blk);
    pair->neg_dmin[half] = -f16_at(blk + 2);
    for (int i = 0; i < 16; i++)
        for (int t = 0; t < 4; t++) pair->mins[i][4 * half + t] = mn[i / 2];
}

/* NR (1, 2) rows x W16_NT tokens over all nb super-blocks: the rows'
 * words ww (row_vecs apart) and constants pr (one a super-block), the
 * tokens' words xw (row_vecs apart), their d by super-block (dt, s_stride
 * apart) and block sums by super-block and sum (bst, s_stride apart). */
INLINE void tile_w16k(const int NR, const __m256i *ww, int row_vecs, const w16k_pair *pr, int nb, const __m256i *xw,
                      const float *dt, const int32_t *bst, int s_stride, float *out, size_t out_stride) {
    const int NT = W16_NT;
    __m256 acc[2][W16_NT];
    __m256 accm = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, pr++) {
        __m256i sum[2][W16_NT];
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) sum[r][t] = _mm256_setzero_si256();
        for (int v = 0; v < W16K_VECS; v += 2) {
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const __m256i *x = xw + (size_t)t * row_vecs + W16K_VECS * b + v;
                const __m256i x0 = _mm256_load_si256(x), x1 = _mm256_load_si256(x + 1);
#pragma GCC unroll 2
                for (int r = 0; r < NR; r++) {
                    const __m256i *w = ww + (size_t)r * row_vecs + W16K_VECS * b + v;
                    sum[r][t] = _mm256_add_epi32(sum[r][t], _mm256_add_epi32(_mm256_madd_epi16(_mm256_load_si256(w), x0),
                                                                             _mm256_madd_epi16(_mm256_load_si256(w + 1), x1)));
                }
            }
        }
        const float *d = dt + (size_t)b * s_stride;
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][t]),
                                            _mm256_mul_ps(_mm256_broadcast_ss(&pr->d[r]), _mm256_broadcast_ss(&d[t])), acc[r][t]);
        const int32_t *bs = bst + (size_t)b * 16 * s_stride;
        __m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(_mm256_load_si256((const __m256i *)pr->mins[i]),
                                                             _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(bs + (size_t)i * s_stride)))));
        const __m128 dv = _mm_load_ps(d);
        const __m256 md = _mm256_mul_ps(_mm256_set_m128(_mm_broadcast_ss(&pr->neg_dmin[1]), _mm_broadcast_ss(&pr->neg_dmin[0])),
                                        _mm256_set_m128(dv, dv));
        accm = _mm256_fmadd_ps(md, _mm256_cvtepi32_ps(msum), accm);
    }
    _Alignas(32) float m[8];
    _mm256_store_ps(m, accm);
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) out[(size_t)t * out_stride + (size_t)r] = hsum_ps(acc[r][t]) + m[4 * r + t];
}

/* A block of nr rows' tiles for tokens t0..t1 - 1 of a pass (block-32
 * types): panels of W16_PANEL blocks for W16_GROUPS token groups at a
 * time where rows are longer than 2 W16_PANEL blocks, so that a tile's
 * rows and tokens stay in L1 (a 2048-column tile's are 24 KiB). */
#define W16_PANEL 16
#define W16_GROUPS 4
INLINE void w16_q32_tiles(const int type, int nr, const __m256i *words, const float *sc, int nb, int vecs, int t0,
                          int t1, int tb, const __m256i *xs, const float *st, const uint8_t *act, size_t act_stride,
                          w16_state *state, float *out, size_t out_stride) {
    const int panel = nb > 2 * W16_PANEL ? W16_PANEL : nb;
    for (int g0 = t0; g0 < t1; g0 += W16_NT * W16_GROUPS) {
        const int g1 = g0 + W16_NT * W16_GROUPS < t1 ? g0 + W16_NT * W16_GROUPS : t1;
        for (int b0 = 0; b0 < nb; b0 += panel) {
            const int b1 = b0 + panel < nb ? b0 + panel : nb;
            for (int t = g0; t < g1; t += W16_NT) {
                const uint8_t *at = act + (size_t)t * act_stride;
                const __m256i *xt = xs + (size_t)(t - t0) * vecs;
                w16_state *gs = state + (t - g0) / W16_NT;
                float *o = out + (size_t)t * out_stride;
                int r = 0;
                for (; r + 2 <= nr; r += 2)
                    tile_w16(type, 2, words + (size_t)r * vecs, vecs, sc + (size_t)r * 2 * nb, b0, b1, nb, xt, at,
                             act_stride, st + (t - t0), tb, gs + (r / 2) * W16_GROUPS, o + r, out_stride);
                if (r < nr)
                    tile_w16(type, 1, words + (size_t)r * vecs, vecs, sc + (size_t)r * 2 * nb, b0, b1, nb, xt, at,
                             act_stride, st + (t - t0), tb, gs + (r / 2) * W16_GROUPS, o + r, out_stride);
            }
        }
    }
}

/* A prompt's whole W16_NT-token groups from words: passes of tokens (their
 * words in L2) and in them blocks of rows (theirs too, unpacked once a
 * pass). Returns the tokens done. */
INLINE int w16_rows(const int type, const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act,
                    size_t act_stride, int n_tok, float *out, size_t out_stride) {
    const bool k = type == GL_TYPE_Q4_K || type == GL_TYPE_Q5_K;
    const int nb = (int)(n_cols / (k ? 256 : 32)), bb = k ? (type == GL_TYPE_Q5_K ? 176 : 144) : block32_bytes(type);
    /* a row's or token's words one line more than its blocks: 4 KiB apart, six streams would share an L1 set */
    const int vpb = k ? W16K_VECS : 2, vecs = vpb * nb + 2;
    if (n_tok < W16_MIN_TOKENS || nb == 0 || (size_t)vecs * 32 * 4 > W16_ACT_BYTES) return 0;
    int rb = W16_ROW_BYTES / (32 * vecs) / (k ? 2 : 1) * (k ? 2 : 1); /* K: whole row pairs, as pairs[] holds */
    const int tb = W16_ACT_BYTES / (32 * vecs) / W16_NT * W16_NT;
    if (rb > n_rows) rb = n_rows;
    if (rb < 1) return 0;
    _Alignas(32) __m256i words[W16_ROW_BYTES / 32], xs[W16_ACT_BYTES / 32];
    _Alignas(32) float per_block[W16_ACT_BYTES / 64]; /* the pass's s (block-32) or d (K) by block, then token */
    _Alignas(32) union {
        struct {
            float sc[W16_ROW_BYTES / 32]; /* dw, mw of each block: 8 bytes to the words' 64 */
            w16_state state[(W16_ROW_BYTES / (64 * 2 * W16_PANEL) + 1) / 2 + 1][W16_GROUPS];
        } q32;
        struct {
            w16k_pair pairs[W16_ROW_BYTES / (2 * 512)]; /* a row pair's super-block: 1 KiB of words */
            int32_t bst[W16_ACT_BYTES / 512 * 16];      /* the pass's block sums by super-block, sum, token */
        } k;
    } u;
    const int n_done = n_tok / W16_NT * W16_NT;
    for (int t0 = 0; t0 < n_done; t0 += tb) {
        const int t1 = t0 + tb < n_done ? t0 + tb : n_done;
        w16_turn_tokens(type, act, act_stride, t0, t1, nb, vecs, tb, xs, per_block, k ? u.k.bst : NULL);
        for (int r0 = 0; r0 < n_rows; r0 += rb) {
            const int nr = n_rows - r0 < rb ? n_rows - r0 : rb;
            for (int r = 0; r < nr; r++)
                for (int b = 0; b < nb; b++) {
                    const uint8_t *blk = w + (size_t)(r0 + r) * row_bytes + (size_t)b * bb;
                    if (k) {
                        w16k_weights(type, blk, r % 2, &words[(size_t)r * vecs + vpb * b], &u.k.pairs[(size_t)(r / 2) * nb + b]);
                        continue;
                    }
                    const float dw = f16_at(blk);
                    w16_weights(type, blk, &words[(size_t)r * vecs + 2 * b]);
                    u.q32.sc[(size_t)r * 2 * nb + 2 * b] = dw;
                    u.q32.sc[(size_t)r * 2 * nb + 2 * b + 1] = type == GL_TYPE_Q4_0 ? -8.0f * dw
                                                             : type == GL_TYPE_Q5_0 ? -16.0f * dw
                                                             : type == GL_TYPE_Q8_0 ? 0.0f
                                                                                    : f16_at(blk + 2);
                }
            float *o = out + r0;
            if (!k) {
                w16_q32_tiles(type, nr, words, u.q32.sc, nb, vecs, t0, t1, tb, xs, per_block, act, act_stride,
                              &u.q32.state[0][0], o, out_stride);
                continue;
            }
            for (int t = t0; t < t1; t += W16_NT) {
                const __m256i *xt = xs + (size_t)(t - t0) * vecs;
                int r = 0;
                for (; r + 2 <= nr; r += 2)
                    tile_w16k(2, words + (size_t)r * vecs, vecs, u.k.pairs + (size_t)(r / 2) * nb, nb, xt,
                              per_block + (t - t0), u.k.bst + (t - t0), tb, o + (size_t)t * out_stride + r, out_stride);
                if (r < nr)
                    tile_w16k(1, words + (size_t)r * vecs, vecs, u.k.pairs + (size_t)(r / 2) * nb, nb, xt,
                              per_block + (t - t0), u.k.bst + (t - t0), tb, o + (size_t)t * out_stride + r, out_stride);
            }
        }
    }
    return n_done;
}
#endif

/* Q6_K: value = d * scale_s * (q - 32), q = 4 low bits from ql, 2 high from qh. */
INLINE void tile_q6_k(const int kind, const uint8_t *w, size_t row_bytes, int64_t n_cols, const uint8_t *act,
                      size_t act_stride, const int NR, const int NT, float *out, size_t out_stride) {
    const bool x8 = kind & TILE_X8;
    const size_t ahead = prefetch_distance(NR, NT, row_bytes);
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
            prefetch_ahead(blk[r], 210, ahead, NR, NT);
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
                    __m256i s = load256(a->q + 128 * h + 32 * c), s2 = x8 ? s : load256(a->q2 + 128 * h + 32 * c);
#pragma GCC unroll 8
                    for (int r = 0; r < NR; r++) {
                        isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], s), scv[r]));
                        if (x8) continue;
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
#define ROWS_FN(name, TILE, TYPE, FULL_NR, FULL_NT, REST) ROWS_FN_AS(SIMD_DEF, name, TILE, TYPE, FULL_NR, FULL_NT, REST)
#define ROWS_FN_AS(LINKAGE, name, TILE, TYPE, FULL_NR, FULL_NT, REST)                                        \
    LINKAGE void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act, \
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

#if SIMD_EMITS(ROWS)
#if SIMD_AVX512
#define DEFINE_ROWS_Q32(name, TYPE) DEFINE_ROWS(name, tile_q32, TYPE)
#else
/* A prompt's whole token groups from words (w16_rows), the rest as tile_q32. */
#define DEFINE_ROWS_WORDS(name, WORDS, TILE, TYPE)                                                              \
    ROWS_FN_AS(INLINE, CAT(name, tiles), TILE, TYPE, 1, TT, ROWS_REST)                                           \
    SIMD_DEF void FN(name)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act,   \
                           size_t act_stride, int n_tok, float *out, size_t out_stride) {                        \
        const int done = WORDS(TYPE, w, row_bytes, n_rows, n_cols, act, act_stride, n_tok, out, out_stride);     \
        FN(CAT(name, tiles))(w, row_bytes, n_rows, n_cols, act + (size_t)done * act_stride, act_stride,         \
                             n_tok - done, out + (size_t)done * out_stride, out_stride);                         \
    }
#define DEFINE_ROWS_Q32(name, TYPE) DEFINE_ROWS_WORDS(name, w16_rows, tile_q32, TYPE)
#endif
DEFINE_ROWS_Q32(rows_q4_0, GL_TYPE_Q4_0) /* rows_q4_0_avx2, rows_q4_0_avx512 */
DEFINE_ROWS_Q32(rows_q4_1, GL_TYPE_Q4_1) /* rows_q4_1_avx2, rows_q4_1_avx512 */
DEFINE_ROWS_Q32(rows_q8_0, GL_TYPE_Q8_0) /* rows_q8_0_avx2, rows_q8_0_avx512 */
DEFINE_ROWS_Q32(rows_q5_0, GL_TYPE_Q5_0) /* rows_q5_0_avx2, rows_q5_0_avx512 */
DEFINE_ROWS_Q32(rows_q5_1, GL_TYPE_Q5_1) /* rows_q5_1_avx2, rows_q5_1_avx512 */
#if SIMD_AVX512
DEFINE_ROWS(rows_q4_k, tile_q45_k, GL_TYPE_Q4_K) /* rows_q4_k_avx512 */
DEFINE_ROWS(rows_q5_k, tile_q45_k, GL_TYPE_Q5_K) /* rows_q5_k_avx512 */
#else
DEFINE_ROWS_WORDS(rows_q4_k, w16_rows, tile_q45_k, GL_TYPE_Q4_K) /* rows_q4_k_avx2 */
DEFINE_ROWS_WORDS(rows_q5_k, w16_rows, tile_q45_k, GL_TYPE_Q5_K) /* rows_q5_k_avx2 */
#endif
DEFINE_ROWS(rows_q6_k, tile_q6_k, GL_TYPE_Q6_K) /* rows_q6_k_avx2, rows_q6_k_avx512 */
#if !SIMD_AVX512
/* Against 8-bit activations (the *_COARSE kinds). AVX2 only: kernels.c
 * gives these to every x86 implementation that has none of its own. */
DEFINE_ROWS(rows_x8_q4_0, tile_q32, GL_TYPE_Q4_0 | TILE_X8) /* rows_x8_q4_0_avx2 */
DEFINE_ROWS(rows_x8_q4_1, tile_q32, GL_TYPE_Q4_1 | TILE_X8) /* rows_x8_q4_1_avx2 */
DEFINE_ROWS(rows_x8_q5_0, tile_q32, GL_TYPE_Q5_0 | TILE_X8) /* rows_x8_q5_0_avx2 */
DEFINE_ROWS(rows_x8_q5_1, tile_q32, GL_TYPE_Q5_1 | TILE_X8) /* rows_x8_q5_1_avx2 */
DEFINE_ROWS(rows_x8_q8_0, tile_q32, GL_TYPE_Q8_0 | TILE_X8) /* rows_x8_q8_0_avx2 */
DEFINE_ROWS(rows_x8_q4_k, tile_q45_k, GL_TYPE_Q4_K | TILE_X8) /* rows_x8_q4_k_avx2 */
DEFINE_ROWS(rows_x8_q5_k, tile_q45_k, GL_TYPE_Q5_K | TILE_X8) /* rows_x8_q5_k_avx2 */
DEFINE_ROWS(rows_x8_q6_k, tile_q6_k, GL_TYPE_Q6_K | TILE_X8) /* rows_x8_q6_k_avx2 */
#endif
DEFINE_ROWS(rows_f32, tile_float, GL_TYPE_F32) /* rows_f32_avx2, rows_f32_avx512 */
DEFINE_ROWS(rows_f16, tile_float, GL_TYPE_F16) /* rows_f16_avx2, rows_f16_avx512 */
DEFINE_ROWS(rows_bf16, tile_float, GL_TYPE_BF16) /* rows_bf16_avx2, rows_bf16_avx512 */
#endif

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

/* Q8_0 codes times their fp16 scales sc[i / per]: per is 1 (a K channel,
 * a scale per position) or the scale group (a V row). */
INLINE void kv_row_q8_to_float(const uint8_t *src, const uint16_t *sc, int per, float *dst, int n) {
    int i = 0;
    if (per == 1) {
        for (; i + 8 <= n; i += 8) {
            __m256 c = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(src + i))));
            __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + i)));
            _mm256_storeu_ps(dst + i, _mm256_mul_ps(c, d));
        }
    } else if (per % 8 == 0) {
        for (; i + 8 <= n; i += 8) {
            __m256 c = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(src + i))));
            _mm256_storeu_ps(dst + i, _mm256_mul_ps(c, _mm256_set1_ps(f16_at((const uint8_t *)(sc + i / per)))));
        }
    }
    for (; i < n; i++) dst[i] = (float)(int8_t)src[i] * f16_at((const uint8_t *)(sc + i / per));
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

/* e^r's Taylor coefficients to r^7, highest first, for Horner's order. */
static const float exp_taylor[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};

INLINE __m256 exp_taylor_ps(__m256 r) {
    __m256 p = _mm256_set1_ps(exp_taylor[0]);
    for (int i = 1; i < 8; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_taylor[i]));
    return p;
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
    __m256 p = exp_taylor_ps(r);
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

#if SIMD_EMITS(TABLE)
/* A gated unit's last n < 8 elements through padded copies, so each
 * element's value never depends on the call's length. */
static void FN(glu_tail)(void (*glu)(float *, const float *, int), float *gate, const float *up, int n) {
    if (n <= 0) return;
    float g[8] = {0}, u[8] = {0};
    memcpy(g, gate, (size_t)n * sizeof *g);
    memcpy(u, up, (size_t)n * sizeof *u);
    glu(g, u, 8);
    memcpy(gate, g, (size_t)n * sizeof *g);
}

/* silu(g) * u = g / (1 + e^-g) * u; e^-g saturating at e^88 gives a
 * quotient that underflows towards 0, as silu does. */
static void FN(swiglu)(float *gate, const float *up, int n); /* swiglu_avx2, swiglu_avx512 */
static void FN(swiglu)(float *gate, const float *up, int n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    FN(glu_tail)(FN(swiglu), gate + i, up + i, n - i);
}

/* gelu_tanh(g) * u as g * sigmoid(2 k (g + 0.044715 g^3)) * u: the same
 * function as 0.5 g (1 + tanh(...)) without tanh, and without its
 * cancellation for negative g. e^-a past exp_ps's saturation (a < -88) is
 * taken as inf, so such g give (-)0 as expf does; a g whose cube overflows
 * gives a = +-inf: g or 0, never NaN. */
#define GEGLU_C1 1.5957691216057308f   /* 2 sqrt(2 / pi) */
#define GEGLU_C3 0.07135481627260025f  /* 2 sqrt(2 / pi) 0.044715 */
#if SIMD_AVX512
/* exp_ps on 16 lanes in one pass: 2^k by vscalefps instead of exponent
 * bits, the same bits (the scaling is exact; a result under the normal
 * range rounds alike); arguments under -87 give exactly 0. */
INLINE __m512 exp16_ps(__m512 x) {
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(exp_taylor[0]);
    for (int i = 1; i < 8; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_taylor[i]));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(p, k));
}
#endif

static void FN(geglu)(float *gate, const float *up, int n); /* geglu_avx2, geglu_avx512 */
static void FN(geglu)(float *gate, const float *up, int n) {
    int i = 0;
#if SIMD_AVX512
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 a = _mm512_mul_ps(g, _mm512_fmadd_ps(_mm512_mul_ps(g, g), _mm512_set1_ps(GEGLU_C3), _mm512_set1_ps(GEGLU_C1)));
        __m512 e = exp16_ps(_mm512_sub_ps(_mm512_setzero_ps(), a));
        e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(a, _mm512_set1_ps(-88.0f), _CMP_LT_OQ), _mm512_set1_ps(INFINITY));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)),
                                                 _mm512_loadu_ps(up + i)));
    }
#endif
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 a = _mm256_mul_ps(g, _mm256_fmadd_ps(_mm256_mul_ps(g, g), _mm256_set1_ps(GEGLU_C3), _mm256_set1_ps(GEGLU_C1)));
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), a));
        e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(a, _mm256_set1_ps(-88.0f), _CMP_LT_OQ));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
                                                 _mm256_loadu_ps(up + i)));
    }
    FN(glu_tail)(FN(geglu), gate + i, up + i, n - i);
}

/* F16C rounds to nearest even, as gl_fp32_to_fp16 does; the tail goes
 * through it. */
static void FN(to_f16)(const float *x, uint16_t *y, int n) { /* to_f16_avx2, to_f16_avx512 */
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = gl_fp32_to_fp16(x[i]);
}
#endif

#endif
