/* simd_amx_k.h -- packed Q4_K, Q5_K and Q6_K prompt rows on AMX (Sapphire
 * Rapids and later). Q4_K folds its scales into the weights (amx_q4k_rows
 * below); for Q5_K and Q6_K tdpbssd gives the exact integer dots of 16 rows'
 * sub-block j with 16 tokens at once (K = 16, one sub-block: a quarter of
 * the unit's peak, still ~7x vpdpbusd), and the float steps after it are the
 * VNNI tiles' (simd_avx512.h, tile_kq) with the accumulators transposed:
 * where tile_kq keeps per output a vector over the 16 sub-blocks, these keep
 * per row and sub-block a vector over the 16 tokens, and replay per lane the
 * same multiply, fused multiply-adds and final tree of sum4_ps as vertical
 * adds. So every output equals the VNNI tiles' bit for bit, and a sequence's
 * logits do not depend on whether its call ran here or there.
 *
 * Weights: a row group's super-blocks are unpacked once into signed bytes
 * in element order (Q6_K's -32 and Q5_K's fifth bits applied), which the A
 * tile reads 16 bytes a row (stride 256). Activations come as kqa16_k /
 * kqa8_k (simd.h), whose sub-block j of 16 tokens is one B tile. 16-bit
 * activations take two tdpbssd, the coarse part's dots shifted up 8 bits
 * and the residual's added: exactly the 16-bit products vpdpwssd sums.
 * Included only by kernels_avx512_amx_k.c, after simd_amx.h (amx_tilecfg). */
#ifndef GL_SIMD_AMX_K_H
#define GL_SIMD_AMX_K_H

/* Tiles, for dots over k elements (16: Q6_K's sub-blocks; 32: Q4_K's and
 * Q5_K's blocks): 0 and 7 the weights (16 rows x k bytes) of even and odd
 * super-blocks, 1 and 2 the coarse and residual activations (k / 4 x 64
 * bytes: 16 tokens x 4 bytes; at 8 bits those of even and odd super-blocks),
 * 3 and 4 their dots (16 rows x 16 tokens) for even super-blocks, 5 and 6
 * for odd ones. */
static void amx_k_config(int k) {
    _Alignas(64) amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = c.rows[7] = 16, c.colsb[0] = c.colsb[7] = (uint16_t)k;
    c.rows[1] = c.rows[2] = (uint8_t)(k / 4), c.colsb[1] = c.colsb[2] = 64;
    for (int i = 3; i < 7; i++) c.rows[i] = 16, c.colsb[i] = 64;
    AMX_LOAD_CONFIG(&c);
}

/* Row r's super-block blk (kern_pack's layout, simd.h) into signed bytes
 * in element order, in the A tiles of 16 rows' sub-blocks (Q6_K: sub-block
 * j of row r at dst + 256 j + 16 r) or 32-element blocks (Q4_K, Q5_K: block
 * i of row r at dst + 512 i + 32 r; dst here is row r's), and its scales
 * into sc: Q6_K's d * scale by
 * sub-block; Q4_K's and Q5_K's d * scale in lanes 0..7 and dmin * min in
 * 8..15 by 32-element block. The same products as tile_kq's. */
INLINE void unpack_super_block(const int type, const uint8_t *blk, int8_t *dst, float *sc) {
    const bool six = type == GL_TYPE_Q6_K, five = type == GL_TYPE_Q5_K;
    const uint8_t *quants = blk + (six ? 18 : 16);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i l01 = _mm512_loadu_si512(quants), l23 = _mm512_loadu_si512(quants + 64);
    /* v[m], byte 32 h + 2 j + e: group 2 m + h, element 16 j + 4 m + 2 h + e */
    __m512i v[4] = {_mm512_and_si512(l01, m4), _mm512_and_si512(l23, m4),
                    _mm512_and_si512(_mm512_srli_epi16(l01, 4), m4), _mm512_and_si512(_mm512_srli_epi16(l23, 4), m4)};
    if (six) { /* group k + 2 i's high bits at 2 i of piece k's byte: to bits 4, 5 */
        const __m512i h = _mm512_loadu_si512(blk + 146), m30 = _mm512_set1_epi8(0x30), b32 = _mm512_set1_epi8(32);
        v[0] = _mm512_or_si512(v[0], _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
        v[1] = _mm512_or_si512(v[1], _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
        v[2] = _mm512_or_si512(v[2], _mm512_and_si512(h, m30));
        v[3] = _mm512_or_si512(v[3], _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
        for (int m = 0; m < 4; m++) v[m] = _mm512_sub_epi8(v[m], b32);
    } else if (five) { /* bit g of byte b is group g's: both halves of a vector, shifted by 2 m and 2 m + 1 */
        const __m512i f = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 144)));
        const __m512i m16 = _mm512_set1_epi8(0x10);
        for (int m = 0; m < 4; m++) {
            const __m512i cnt = _mm512_mask_set1_epi16(_mm512_set1_epi16((short)(2 * m)), (__mmask32)0xffff0000u,
                                                       (short)(2 * m + 1));
            v[m] = _mm512_or_si512(v[m], _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(f, cnt), 4), m16));
        }
    }
    /* dword j of p[m]: elements 4 m .. 4 m + 3 of sub-block j */
    static const uint16_t pairs[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(pairs);
    __m512i p[4];
    for (int m = 0; m < 4; m++) p[m] = _mm512_permutexvar_epi16(idx, v[m]);
    /* a 4 x 16 transpose of dwords: sub-block j's 16 bytes together */
    const __m512i a = _mm512_unpacklo_epi32(p[0], p[1]), b = _mm512_unpackhi_epi32(p[0], p[1]);
    const __m512i c = _mm512_unpacklo_epi32(p[2], p[3]), d = _mm512_unpackhi_epi32(p[2], p[3]);
    const __m512i e0 = _mm512_unpacklo_epi64(a, c), e1 = _mm512_unpackhi_epi64(a, c); /* lane l: sub-blocks 4 l, 4 l + 1 */
    const __m512i e2 = _mm512_unpacklo_epi64(b, d), e3 = _mm512_unpackhi_epi64(b, d); /* 4 l + 2, 4 l + 3 */
    const __m512i t0 = _mm512_shuffle_i64x2(e0, e1, _MM_SHUFFLE(1, 0, 1, 0)), t1 = _mm512_shuffle_i64x2(e2, e3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i t2 = _mm512_shuffle_i64x2(e0, e1, _MM_SHUFFLE(3, 2, 3, 2)), t3 = _mm512_shuffle_i64x2(e2, e3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i o[4] = {_mm512_shuffle_i64x2(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i64x2(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)),
                          _mm512_shuffle_i64x2(t2, t3, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i64x2(t2, t3, _MM_SHUFFLE(3, 1, 3, 1))};
#define SUB(j) (dst + (six ? 256 * (j) : 512 * ((j) / 2) + 16 * ((j) % 2)))
    for (int k = 0; k < 4; k++) { /* o[k]: sub-blocks 4 k .. 4 k + 3 */
        _mm_store_si128((__m128i *)SUB(4 * k), _mm512_castsi512_si128(o[k]));
        _mm_store_si128((__m128i *)SUB(4 * k + 1), _mm512_extracti32x4_epi32(o[k], 1));
        _mm_store_si128((__m128i *)SUB(4 * k + 2), _mm512_extracti32x4_epi32(o[k], 2));
        _mm_store_si128((__m128i *)SUB(4 * k + 3), _mm512_extracti32x4_epi32(o[k], 3));
    }
#undef SUB
    if (six) {
        _mm512_store_ps(sc, q6_k_sub_scales(blk));
        return;
    }
    /* the 12 scale bytes: scale i and min i (6 bits) of block i < 4 in bytes i and 4 + i; of i >= 4 in byte
     * 8 + i - 4's nibbles with the top bits of bytes i - 4 and i */
    int scales[16];
    const uint8_t *q = blk + 4;
    for (int i = 0; i < 8; i++) {
        if (i < 4) {
            scales[i] = q[i] & 63;
            scales[8 + i] = q[i + 4] & 63;
        } else {
            scales[i] = (q[i + 4] & 0xf) | ((q[i - 4] >> 6) << 4);
            scales[8 + i] = (q[i + 4] >> 4) | ((q[i] >> 6) << 4);
        }
    }
    const __m512 d_dmin = _mm512_mask_blend_ps((__mmask16)0xff00, _mm512_set1_ps(_cvtsh_ss(*(const uint16_t *)blk)),
                                               _mm512_set1_ps(_cvtsh_ss(*(const uint16_t *)(blk + 2))));
    _mm512_store_ps(sc, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(scales)), d_dmin));
}

/* Super-blocks whose dots one step takes before its float steps: their
 * tile results (2 KiB a row tile at 16 bits) stay in L1 for the float steps. */
#define AMX_CHUNK 4

/* One step's dots: lane i (the VNNI tiles' lane j) of super-blocks b0..b0+n-1
 * of a token group (ga), for nt (1 or 2) row tiles whose unpacked weights
 * are wq_bytes apart, into cb[tile][b - b0][coarse, residual][row][token].
 * Each activation tile serves both row tiles: the group's activations are
 * read once for 32 rows. */
INLINE void amx_k_dots(const bool x8, const int k, const int i, const int j, const int8_t *wq, size_t wq_bytes,
                       const int nt, const uint8_t *ga, size_t a_bytes, int b0, int n, int32_t (*cb)[AMX_CHUNK][2][16][16]) {
    /* tiles: A0, A1 the row tiles' weights, B, B2 the coarse and residual activations, C0, C0r and C1, C1r
     * the row tiles' dots with them. Consecutive super-blocks take different tiles where 8 allow it, so
     * one's loads need not wait for the other's multiplies. */
#define AMX_MUL(A, B, B2, C, C2)                                                                                \
    do {                                                                                                    \
        _tile_zero(C);                                                                                      \
        _tile_dpbssd(C, A, B);                                                                              \
        if (!x8) {                                                                                          \
            _tile_zero(C2);                                                                                 \
            _tile_dpbssd(C2, A, B2);                                                                        \
        }                                                                                                   \
    } while (0)
#define AMX_ISSUE(b, A, B, B2, C, C2)                                                                           \
    do {                                                                                                    \
        const uint8_t *a = ga + (size_t)(b0 + (b)) * a_bytes;                                               \
        _tile_loadd(A, wq + (size_t)(b0 + (b)) * 4096 + 16 * k * i, k);                                     \
        _tile_loadd(B, a + 256 * j, 64);                                                                    \
        if (!x8) _tile_loadd(B2, a + 4096 + 256 * j, 64);                                                   \
        AMX_MUL(A, B, B2, C, C2);                                                                           \
    } while (0)
#define AMX_STORE(t, b, C, C2)                                                                                  \
    do {                                                                                                    \
        _tile_stored(C, cb[t][b][0], 64);                                                                   \
        if (!x8) _tile_stored(C2, cb[t][b][1], 64);                                                         \
    } while (0)
#define AMX_DOTS(b, A0, A1, B, B2, C0, C0r, C1, C1r)                                                            \
    do {                                                                                                    \
        AMX_ISSUE(b, A0, B, B2, C0, C0r);                                                                   \
        if (nt > 1) {                                                                                       \
            _tile_loadd(A1, wq + wq_bytes + (size_t)(b0 + (b)) * 4096 + 16 * k * i, k);                     \
            AMX_MUL(A1, B, B2, C1, C1r);                                                                    \
        }                                                                                                   \
        AMX_STORE(0, b, C0, C0r);                                                                           \
        if (nt > 1) AMX_STORE(1, b, C1, C1r);                                                               \
    } while (0)
    if (nt > 1) {
        for (int b = 0; b < n; b++) {
            if (!x8 || b % 2 == 0) AMX_DOTS(b, 0, 7, 1, 2, 3, 4, 5, 6);
            else AMX_DOTS(b, 0, 7, 2, 2, 4, 4, 6, 6);
        }
        return;
    }
    /* one row tile: super-block b + 1's loads and multiplies go before b's stores, which would otherwise
     * wait for b's multiply with nothing behind them (the tile unit keeps program order) */
    AMX_ISSUE(0, 0, 1, 2, 3, 4);
    for (int b = 0; b < n; b += 2) {
        if (b + 1 < n) {
            if (x8) AMX_ISSUE(b + 1, 7, 2, 2, 5, 5);
            else AMX_ISSUE(b + 1, 7, 1, 2, 5, 6);
        }
        AMX_STORE(0, b, 3, 4);
        if (b + 1 < n) {
            if (b + 2 < n) AMX_ISSUE(b + 2, 0, 1, 2, 3, 4);
            AMX_STORE(0, b + 1, 5, 6);
        }
    }
#undef AMX_MUL
#undef AMX_ISSUE
#undef AMX_STORE
#undef AMX_DOTS
}

/* One step's float steps: lane i (lane j, scales' lane i) of super-blocks
 * b0..b0+n-1 from their dots in cb into acc (a vector over tokens per row),
 * in the VNNI tiles' order. */
INLINE void amx_k_floats(const bool six, const bool x8, const int i, const int j, const float (*ws)[16][16],
                         const uint8_t *ga, size_t a_bytes, size_t a_d, size_t a_s, int b0, int n,
                         const int32_t (*cb)[2][16][16], __m512 acc[16]) {
    for (int b = 0; b < n; b++) {
        const uint8_t *a = ga + (size_t)(b0 + b) * a_bytes;
        const __m512 unit = _mm512_loadu_ps((const float *)(a + a_d) + 16 * j);
        const __m512 s = _mm512_loadu_ps((const float *)(a + a_s) + 16 * j);
        const float(*w)[16] = ws[b0 + b];
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) {
            __m512i idot = _mm512_load_si512(cb[b][0][r]);
            if (!x8) idot = _mm512_add_epi32(_mm512_slli_epi32(idot, 8), _mm512_load_si512(cb[b][1][r]));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(idot), _mm512_mul_ps(_mm512_set1_ps(w[r][i]), unit), acc[r]);
            if (!six) acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(w[r][8 + i]), s, acc[r]);
        }
    }
}

/* One row tile's outputs for a token group: each of its nr rows' 16 lanes
 * (res[sub-block][row][token]; Q4_K's and Q5_K's in the even lanes) by the
 * reduce tree, then the rows x tokens transposed into out (token t's at
 * out + t out_stride). */
INLINE void amx_k_store(const bool six, const float (*res)[16][16], int nr, int n_tok, float *out, size_t out_stride) {
    __m512 sums[16];
    for (int r = 0; r < 16; r++) {
        __m512 x[16];
        for (int j = 0; j < 16; j++) x[j] = r < nr && (six || j % 2 == 0) ? _mm512_load_ps(res[j][r]) : _mm512_setzero_ps();
        sums[r] = lanes_tree(x);
    }
    amx_transpose16(sums);
    const __mmask16 km = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < n_tok && t < KQA_GROUP; t++) _mm512_mask_storeu_ps(out + (size_t)t * out_stride, km, sums[t]);
}

/* What both row kernels need of a call's type and rows. */
typedef struct amx_k_geom {
    bool six;                 /* Q6_K: 16-element sub-blocks, no minimums */
    int bb;                   /* bytes of a super-block */
    int nb;                   /* super-blocks of a row */
    size_t g_bytes;           /* bytes of a token group's activations */
    size_t a_bytes;           /* of one super-block's in a group (kqa8_k or kqa16_k) */
    size_t a_d, a_s;          /* where its units and sums start in it */
} amx_k_geom;

static inline amx_k_geom amx_k_geom_of(int type, bool x8, int64_t n_cols, size_t act_stride) {
    const bool six = type == GL_TYPE_Q6_K;
    return (amx_k_geom){.six = six,
                        .bb = six ? 210 : type == GL_TYPE_Q5_K ? 176 : 144,
                        .nb = (int)(n_cols / 256),
                        .g_bytes = KQA_GROUP * act_stride,
                        .a_bytes = x8 ? sizeof(kqa8_k) : sizeof(kqa16_k),
                        .a_d = x8 ? offsetof(kqa8_k, d) : offsetof(kqa16_k, d),
                        .a_s = x8 ? offsetof(kqa8_k, s) : offsetof(kqa16_k, s)};
}

/* Rows of at most AMX_SHORT super-blocks whose token group's activations
 * fit L1 (768 columns: small models' q, k, v, o, gate and up): one row tile
 * at a time, all its dots of a lane before their float steps, the panel on
 * the stack. (The steps of amx_k_rows below ran slower here, 8-bit
 * Q4_K / Q5_K most, for reasons not found.) */
#define AMX_SHORT_BYTES 32768
#define AMX_SHORT (AMX_SHORT_BYTES / (int)sizeof(kqa8_k))
INLINE void amx_k_rows_short(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols,
                     const uint8_t *act, size_t act_stride, int n_tok, float *out, size_t out_stride) {
    const amx_k_geom sh = amx_k_geom_of(type, x8, n_cols, act_stride);
    const bool six = sh.six;
    const int bb = sh.bb, nb = sh.nb;
    const size_t g_bytes = sh.g_bytes, a_bytes = sh.a_bytes, a_d = sh.a_d, a_s = sh.a_s;
    _Alignas(64) int8_t wq[AMX_SHORT][4096]; /* by super-block: the A tiles, as unpack_super_block leaves them */
    _Alignas(64) float ws[AMX_SHORT][16][16];
    _Alignas(64) int32_t cb[AMX_SHORT][2][16][16]; /* [super-block][coarse, residual][row][token] */
    _Alignas(64) float res[16][16][16];    /* [sub-block][row][token] */
    const int k = six ? 16 : 32, n_lanes = 256 / k; /* elements per dot; dots per super-block */
    amx_k_config(k);
    for (int r0 = 0; r0 < n_rows; r0 += 16) {
        const int nr = n_rows - r0 < 16 ? n_rows - r0 : 16;
        for (int b = 0; b < nb; b++)
            for (int r = 0; r < 16; r++) {
                if (r < nr) {
                    unpack_super_block(type, w + (size_t)(r0 + r) * row_bytes + (size_t)b * bb, wq[b] + k * r, ws[b][r]);
                } else {
                    for (int i = 0; i < n_lanes; i++) memset(wq[b] + 16 * k * i + k * r, 0, (size_t)k);
                    memset(ws[b][r], 0, sizeof ws[b][r]);
                }
            }
        for (int g = 0; g * KQA_GROUP < n_tok; g++) {
            const uint8_t *ga = act + (size_t)g * g_bytes;
            for (int i = 0; i < n_lanes; i++) {
                const int j = six ? i : 2 * i; /* the VNNI tiles' lane */
                /* all the panel's dots first (tiles 3, 4 and 5, 6 in turn), so the tile unit runs ahead
                 * of the float steps, which wait only for their own super-block's */
#define AMX_DOTS(b, C, C2)                                                                                        \
    do {                                                                                                        \
        const uint8_t *a_ = ga + (size_t)(b) * a_bytes;                                                           \
        _tile_loadd(0, wq[b] + 16 * k * i, k);                                                                  \
        _tile_loadd(1, a_ + 256 * j, 64);                                                                       \
        _tile_zero(C);                                                                                          \
        _tile_dpbssd(C, 0, 1);                                                                                  \
        _tile_stored(C, cb[b][0], 64);                                                                          \
        if (!x8) {                                                                                              \
            _tile_loadd(2, a_ + 4096 + 256 * j, 64);                                                            \
            _tile_zero(C2);                                                                                     \
            _tile_dpbssd(C2, 0, 2);                                                                             \
            _tile_stored(C2, cb[b][1], 64);                                                                     \
        }                                                                                                       \
    } while (0)
                for (int b = 0; b < nb; b += 2) {
                    AMX_DOTS(b, 3, 4);
                    if (b + 1 < nb) AMX_DOTS(b + 1, 5, 6);
                }
#undef AMX_DOTS
                __m512 acc[16];
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
                amx_k_floats(six, x8, i, j, (const float(*)[16][16])ws, ga, a_bytes, a_d, a_s, 0, nb,
                             (const int32_t(*)[2][16][16])cb, acc);
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) _mm512_store_ps(res[j][r], acc[r]);
            }
            amx_k_store(six, (const float(*)[16][16])res, nr, n_tok - g * KQA_GROUP, out + (size_t)g * KQA_GROUP * out_stride + r0,
                        out_stride);
        }
    }
    _tile_release();
}

/* ---- Q4_K with the scales folded into the weights --------------------------------
 * The activations' one unit per super-block (simd.h, kq16_k) lets a row's
 * super-block take one exact integer per token, S = sum of scale_j * dot_j,
 * and one for the minimums, M = sum of min_j * sum_j: the A tiles hold
 * w' = q * scale_j (<= 945) as two byte planes (low byte, high 0..3),
 * multiplied by tdpbusd 64 elements at a time and accumulated in the tile
 * over the whole super-block, then stored once. M takes no tile: the
 * blocks' activation sums (sum_j, per token) are taken once per call and
 * token group, as 16-bit pairs, and each row's M is four vpdpwssd of them
 * with its minimums' pairs (eight at 16 bits: coarse and residual apart).
 * Per output and super-block the VNNI tiles' (tile_kq) two float steps:
 * acc += S * (d * unit), acc -= M * (dmin * unit). 16 bits: S passes 32
 * bits at the extremes (945 * 32767 * 256), so it is put together from the
 * coarse and residual parts' dots as 65536 A + C, two exact floats joined
 * by one fused multiply-add: rounded once, as tile_kq's (q4_k_two). */

/* bytes of a super-block's two planes for 16 rows: [plane][64-element chunk][row][64] */
#define AMX_Q4K_PLANES 8192
/* and of its d, dmin ([2][row] floats) and minimums' pairs ([pair][row] int32) */
#define AMX_Q4K_ROWINFO 384
/* bytes of a token group's block sums a super-block: [part][pair][token] int32 (two int16) */
#define AMX_Q4K_BS(x8) ((x8) ? 256 : 512)

/* Rows r0..r0+nr-1's super-block b into planes, their d and dmin into dd[0][row], dd[1][row],
 * minimums min_{2p} | min_{2p+1} << 16 into mp[p][row]. */
INLINE void amx_q4k_unpack(const uint8_t *w, size_t row_bytes, int nr, int b, uint8_t *planes, float dd[2][16],
                           int32_t mp[4][16]) {
    _Alignas(64) int8_t q[8][16][32]; /* [block][row][element]: unpack_super_block's A tiles */
    _Alignas(64) float unused[16];
    for (int r = 0; r < 16; r++) {
        if (r >= nr) {
            for (int p = 0; p < 2; p++)
                for (int k = 0; k < 4; k++) memset(planes + 4096 * p + 1024 * k + 64 * r, 0, 64);
            dd[0][r] = dd[1][r] = 0;
            for (int p = 0; p < 4; p++) mp[p][r] = 0;
            continue;
        }
        const uint8_t *blk = w + (size_t)r * row_bytes + (size_t)b * 144;
        unpack_super_block(GL_TYPE_Q4_K, blk, &q[0][0][0] + 32 * r, unused);
        dd[0][r] = _cvtsh_ss(*(const uint16_t *)blk), dd[1][r] = _cvtsh_ss(*(const uint16_t *)(blk + 2));
        const uint8_t *sb = blk + 4; /* unpack_super_block's decoding of the 12 scale bytes */
        int mn[8];
        for (int i = 0; i < 8; i++) {
            const int sc = i < 4 ? sb[i] & 63 : (sb[i + 4] & 0xf) | ((sb[i - 4] >> 6) << 4);
            mn[i] = i < 4 ? sb[i + 4] & 63 : (sb[i + 4] >> 4) | ((sb[i] >> 6) << 4);
            const __m512i wp = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)q[i][r])),
                                                  _mm512_set1_epi16((short)sc));
            uint8_t *at = planes + 1024 * (i / 2) + 64 * r + 32 * (i % 2);
            _mm256_storeu_si256((__m256i *)at, _mm512_cvtepi16_epi8(wp));
            _mm256_storeu_si256((__m256i *)(at + 4096), _mm512_cvtepi16_epi8(_mm512_srli_epi16(wp, 8)));
        }
        for (int p = 0; p < 4; p++) mp[p][r] = mn[2 * p] | mn[2 * p + 1] << 16;
    }
}

/* A token group's super-block a (kqa8_k or kqa16_k): each 32-element block's sum per token, of the coarse
 * part (and the residual's at 16 bits), as int16 pairs of blocks 2 p, 2 p + 1 into bs[part][p][token]. */
INLINE void amx_q4k_block_sums(const bool x8, const uint8_t *a, int32_t *bs) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int part = 0; part < (x8 ? 1 : 2); part++)
        for (int p = 0; p < 4; p++) {
            const int8_t *q = (const int8_t *)a + 4096 * part + 1024 * p; /* chunk p: [v][t][e], v < 8 block 2p */
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int v = 0; v < 8; v++) {
                s0 = _mm512_dpbusd_epi32(s0, ones, _mm512_load_si512(q + 64 * v));
                s1 = _mm512_dpbusd_epi32(s1, ones, _mm512_load_si512(q + 64 * (v + 8)));
            }
            _mm512_store_si512(bs + 16 * (4 * part + p),
                               _mm512_or_si512(_mm512_and_si512(s0, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(s1, 16)));
        }
}

/* Super-block b's tile work for one token group (a: its activations) against its planes p: the sums into
 * cb[tile][row][token] (8 bits: low and high plane, in tiles 3, 4 or, odd, 5, 6; 16 bits: high x coarse,
 * low x coarse + high x residual, low x residual). */
INLINE void amx_q4k_dots(const bool x8, const bool odd, const uint8_t *a, const uint8_t *p, int32_t (*cb)[16][16]) {
    if (x8) {
#define Q4K_X8(C0, C1)                                                                                          \
    do {                                                                                                    \
        _tile_zero(C0);                                                                                     \
        _tile_zero(C1);                                                                                     \
        for (int k = 0; k < 4; k++) {                                                                       \
            _tile_loadd(1, a + 1024 * k, 64);                                                               \
            _tile_loadd(0, p + 1024 * k, 64);                                                               \
            _tile_dpbusd(C0, 0, 1);                                                                         \
            _tile_loadd(7, p + 4096 + 1024 * k, 64);                                                        \
            _tile_dpbusd(C1, 7, 1);                                                                         \
        }                                                                                                   \
        _tile_stored(C0, cb[0], 64);                                                                        \
        _tile_stored(C1, cb[1], 64);                                                                        \
    } while (0)
        if (odd) Q4K_X8(5, 6);
        else Q4K_X8(3, 4);
#undef Q4K_X8
        return;
    }
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    for (int k = 0; k < 4; k++) {
        _tile_loadd(1, a + 1024 * k, 64);
        _tile_loadd(2, a + 4096 + 1024 * k, 64);
        _tile_loadd(0, p + 1024 * k, 64);
        _tile_dpbusd(4, 0, 1);
        _tile_dpbusd(5, 0, 2);
        _tile_loadd(7, p + 4096 + 1024 * k, 64);
        _tile_dpbusd(3, 7, 1);
        _tile_dpbusd(4, 7, 2);
    }
    _tile_stored(3, cb[0], 64);
    _tile_stored(4, cb[1], 64);
    _tile_stored(5, cb[2], 64);
}

/* Super-block b's float steps for one token group into acc[row] (vector over tokens), in tile_kq's order:
 * its sums cb (amx_q4k_dots), its row info ib and the group's block sums bs and units u of it. */
INLINE void amx_q4k_floats(const bool x8, const uint8_t *ib, const int32_t *bs, const __m512 u, const int32_t (*cb)[16][16],
                           __m512 acc[16]) {
    const float(*dd)[16] = (const float(*)[16])ib;
    const int32_t(*mp)[16] = (const int32_t(*)[16])(ib + 128);
    const __m512i bc0 = _mm512_load_si512(bs), bc1 = _mm512_load_si512(bs + 16);
    const __m512i bc2 = _mm512_load_si512(bs + 32), bc3 = _mm512_load_si512(bs + 48);
#pragma GCC unroll 4
    for (int r = 0; r < 16; r++) {
        __m512 v;
        __m512i m = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bc0, _mm512_set1_epi32(mp[0][r]));
        m = _mm512_dpwssd_epi32(m, bc1, _mm512_set1_epi32(mp[1][r]));
        m = _mm512_dpwssd_epi32(m, bc2, _mm512_set1_epi32(mp[2][r]));
        m = _mm512_dpwssd_epi32(m, bc3, _mm512_set1_epi32(mp[3][r]));
        if (x8) {
            v = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(cb[0][r]), _mm512_slli_epi32(_mm512_load_si512(cb[1][r]), 8)));
        } else {
            /* S = 256 hi + lo (past 32 bits) as 65536 A + C, A < 2^17 and 0 <= C < 2^16 exact floats: one fused
             * multiply-add rounds S once, as q4_k_two does */
            const __m512i hi = _mm512_add_epi32(_mm512_load_si512(cb[1][r]), _mm512_slli_epi32(_mm512_load_si512(cb[0][r]), 8));
            const __m512i t = _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(0xff)), 8),
                                               _mm512_load_si512(cb[2][r]));
            const __m512i ah = _mm512_add_epi32(_mm512_srai_epi32(hi, 8), _mm512_srai_epi32(t, 16));
            v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ah), _mm512_set1_ps(65536.0f),
                                _mm512_cvtepi32_ps(_mm512_and_si512(t, _mm512_set1_epi32(0xffff))));
            __m512i mr = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_load_si512(bs + 64), _mm512_set1_epi32(mp[0][r]));
            mr = _mm512_dpwssd_epi32(mr, _mm512_load_si512(bs + 80), _mm512_set1_epi32(mp[1][r]));
            mr = _mm512_dpwssd_epi32(mr, _mm512_load_si512(bs + 96), _mm512_set1_epi32(mp[2][r]));
            mr = _mm512_dpwssd_epi32(mr, _mm512_load_si512(bs + 112), _mm512_set1_epi32(mp[3][r]));
            m = _mm512_add_epi32(_mm512_slli_epi32(m, 8), mr);
        }
        acc[r] = _mm512_fmadd_ps(v, _mm512_mul_ps(_mm512_set1_ps(dd[0][r]), u), acc[r]);
        acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(_mm512_set1_ps(dd[1][r]), u), acc[r]);
    }
}

/* Row tiles whose planes one pass unpacks, at most (and at most AMX_Q4K_PASS_BYTES of planes): a pass runs
 * each token group over all its row tiles, so a token's outputs are written AMX_Q4K_PASS_TILES * 64 bytes
 * in a row. One row tile at a time, a row tile's 16 outputs of every token in turn (a cache line each,
 * a row of the output apart) were a large share of a long prompt's call (bench_matmul q4_k). */
#define AMX_Q4K_PASS_TILES 8
#define AMX_Q4K_PASS_BYTES (256 << 10)

/* scratch: KERN_AMX_SCRATCH(n_cols) bytes: a pass's planes and row info, the rest for the token groups'
 * block sums (as many groups at a time as fit). The (group, row tile, super-block) steps run
 * software-pipelined: a step's tile work is issued before the float steps of the step before it, so the
 * tile unit and the vector units overlap. */
INLINE void amx_q4k_rows(const bool x8, const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act,
                         size_t act_stride, int n_tok, float *out, size_t out_stride, uint8_t *scratch) {
    const amx_k_geom sh = amx_k_geom_of(GL_TYPE_Q4_K, x8, n_cols, act_stride);
    const int nb = sh.nb;
    const size_t g_bytes = sh.g_bytes, a_bytes = sh.a_bytes, a_d = sh.a_d;
    int pass = AMX_Q4K_PASS_BYTES / (nb * AMX_Q4K_PLANES); /* row tiles a pass */
    pass = pass < 1 ? 1 : pass > AMX_Q4K_PASS_TILES ? AMX_Q4K_PASS_TILES : pass;
    const size_t tile_planes = (size_t)nb * AMX_Q4K_PLANES, tile_info = (size_t)nb * AMX_Q4K_ROWINFO;
    uint8_t *planes = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); /* [row tile][super-block][AMX_Q4K_PLANES] */
    uint8_t *info = planes + (size_t)pass * tile_planes;                        /* [row tile][super-block][AMX_Q4K_ROWINFO] */
    int32_t *bsums = (int32_t *)(info + (size_t)pass * tile_info);              /* [group][super-block][AMX_Q4K_BS] */
    const size_t used = (size_t)((uint8_t *)bsums - scratch), bs_group = (size_t)nb * AMX_Q4K_BS(x8);
    const int n_groups = (n_tok + KQA_GROUP - 1) / KQA_GROUP;
    int cap = (int)((KERN_AMX_SCRATCH(n_cols) - used) / bs_group);
    if (cap < 1) cap = 1;
    _Alignas(64) int32_t cb[2][3][16][16]; /* two steps' sums: [step parity][tile][row][token] */
    _Alignas(64) amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.rows[i] = 16, c.colsb[i] = 64;
    AMX_LOAD_CONFIG(&c);
    for (int g0 = 0; g0 < n_groups; g0 += cap) {
        const int g1 = n_groups - g0 < cap ? n_groups : g0 + cap;
        for (int g = g0; g < g1; g++)
            for (int b = 0; b < nb; b++)
                amx_q4k_block_sums(x8, act + (size_t)g * g_bytes + (size_t)b * a_bytes,
                                   bsums + ((size_t)(g - g0) * nb + b) * (AMX_Q4K_BS(x8) / 4));
        for (int p0 = 0; p0 < n_rows; p0 += 16 * pass) {
            const int n_t = (n_rows - p0 + 15) / 16 < pass ? (n_rows - p0 + 15) / 16 : pass;
            for (int t = 0; t < n_t; t++) {
                const int r0 = p0 + 16 * t, nr = n_rows - r0 < 16 ? n_rows - r0 : 16;
                for (int b = 0; b < nb; b++) {
                    uint8_t *ib = info + t * tile_info + (size_t)b * AMX_Q4K_ROWINFO;
                    amx_q4k_unpack(w + (size_t)r0 * row_bytes, row_bytes, nr, b, planes + t * tile_planes + (size_t)b * AMX_Q4K_PLANES,
                                   (float(*)[16])ib, (int32_t(*)[16])(ib + 128));
                }
            }
            __m512 acc[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
            const int n_steps = (g1 - g0) * n_t * nb;
            amx_q4k_dots(x8, false, act + (size_t)g0 * g_bytes, planes, cb[0]);
            for (int s = 0, g = g0, t = 0, b = 0; s < n_steps; s++) {
                if (s + 1 < n_steps) { /* the next step: super-block, then row tile, then group */
                    int b_ = b + 1, t_ = t, g_ = g;
                    if (b_ == nb) b_ = 0, t_++;
                    if (t_ == n_t) t_ = 0, g_++;
                    amx_q4k_dots(x8, (s + 1) & 1, act + (size_t)g_ * g_bytes + (size_t)b_ * a_bytes,
                                 planes + t_ * tile_planes + (size_t)b_ * AMX_Q4K_PLANES, cb[(s + 1) & 1]);
                }
                const uint8_t *a = act + (size_t)g * g_bytes + (size_t)b * a_bytes;
                amx_q4k_floats(x8, info + t * tile_info + (size_t)b * AMX_Q4K_ROWINFO,
                               bsums + ((size_t)(g - g0) * nb + b) * (AMX_Q4K_BS(x8) / 4),
                               _mm512_loadu_ps((const float *)(a + a_d)), (const int32_t(*)[16][16])cb[s & 1], acc);
                if (++b == nb) {
                    const int r0 = p0 + 16 * t, nr = n_rows - r0 < 16 ? n_rows - r0 : 16;
                    amx_transpose16(acc);
                    const __mmask16 km = (__mmask16)((1u << nr) - 1);
                    float *o = out + (size_t)g * KQA_GROUP * out_stride + r0;
                    for (int u = 0; u < n_tok - g * KQA_GROUP && u < KQA_GROUP; u++)
                        _mm512_mask_storeu_ps(o + (size_t)u * out_stride, km, acc[u]);
#pragma GCC unroll 16
                    for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
                    b = 0;
                    if (++t == n_t) t = 0, g++;
                }
            }
        }
    }
    _tile_release();
}

/* scratch: KERN_AMX_SCRATCH(n_cols) bytes, where two row tiles' super-blocks
 * are unpacked once (20 bytes a column each) for all groups of tokens, so
 * long rows (past 16 super-blocks) are no longer unpacked per group. */
INLINE void amx_k_rows(const int type, const bool x8, const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols,
                     const uint8_t *act, size_t act_stride, int n_tok, float *out, size_t out_stride, uint8_t *scratch) {
    const amx_k_geom sh = amx_k_geom_of(type, x8, n_cols, act_stride);
    const bool six = sh.six;
    const int bb = sh.bb, nb = sh.nb;
    const size_t g_bytes = sh.g_bytes, a_bytes = sh.a_bytes, a_d = sh.a_d, a_s = sh.a_s;
    const size_t wq_bytes = (size_t)nb * 4096;
    int8_t *wq = (int8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);  /* [tile][super-block]: the A tiles */
    float(*ws)[16][16] = (float(*)[16][16])(wq + 2 * wq_bytes);           /* [tile][super-block][row][lane] */
    _Alignas(64) int32_t cb[2][AMX_CHUNK][2][16][16]; /* a step's dots: [tile][super-block][coarse, residual][row][token] */
    _Alignas(64) float res[2][16][16][16];               /* [tile][sub-block][row][token] */
    if (type == GL_TYPE_Q4_K) {
        amx_q4k_rows(x8, w, row_bytes, n_rows, n_cols, act, act_stride, n_tok, out, out_stride, scratch);
        return;
    }
    if (nb <= AMX_SHORT && nb * a_bytes <= AMX_SHORT_BYTES) {
        amx_k_rows_short(type, x8, w, row_bytes, n_rows, n_cols, act, act_stride, n_tok, out, out_stride);
        return;
    }
    const int k = six ? 16 : 32, n_lanes = 256 / k; /* elements per dot; dots per super-block */
    const int n_chunks = (nb + AMX_CHUNK - 1) / AMX_CHUNK, n_steps = n_lanes * n_chunks;
    amx_k_config(k);
    /* two row tiles share each activation tile: a group's activations outgrow L1 here */
    for (int r0 = 0; r0 < n_rows; r0 += 32) {
        const int nr = n_rows - r0 < 32 ? n_rows - r0 : 32, nt = nr > 16 ? 2 : 1;
        for (int b = 0; b < nb * nt; b++)
            for (int r = 0; r < 16; r++) {
                const int row = 16 * (b / nb) + r; /* of the 32 */
                int8_t *dst = wq + (size_t)b * 4096;
                if (row < nr) {
                    unpack_super_block(type, w + (size_t)(r0 + row) * row_bytes + (size_t)(b % nb) * bb, dst + k * r, ws[b][r]);
                } else {
                    for (int i = 0; i < n_lanes; i++) memset(dst + 16 * k * i + k * r, 0, (size_t)k);
                    memset(ws[b][r], 0, sizeof ws[b][r]);
                }
            }
        for (int g = 0; g * KQA_GROUP < n_tok; g++) {
            const uint8_t *ga = act + (size_t)g * g_bytes;
            /* steps (lane, chunk of super-blocks) in order: a step's dots, then their float steps (the next
             * step's dots issued first gained nothing measurable) */
#define STEP_DOTS(u)                                                                                            \
    do {                                                                                                    \
        const int i_ = (u) / n_chunks, b0_ = (u) % n_chunks * AMX_CHUNK;                                      \
        amx_k_dots(x8, k, i_, six ? i_ : 2 * i_, wq, wq_bytes, nt, ga, a_bytes, b0_,                         \
                   nb - b0_ < AMX_CHUNK ? nb - b0_ : AMX_CHUNK, cb);                               \
    } while (0)
            for (int u = 0; u < n_steps; u++) {
                STEP_DOTS(u);
                const int i = u / n_chunks, c = u % n_chunks, b0 = c * AMX_CHUNK, j = six ? i : 2 * i;
                for (int t = 0; t < nt; t++) {
                    __m512 acc[16];
#pragma GCC unroll 16
                    for (int r = 0; r < 16; r++) acc[r] = c ? _mm512_load_ps(res[t][j][r]) : _mm512_setzero_ps();
                    amx_k_floats(six, x8, i, j, ws + (size_t)t * nb, ga, a_bytes, a_d, a_s, b0,
                                 nb - b0 < AMX_CHUNK ? nb - b0 : AMX_CHUNK, (const int32_t(*)[2][16][16])cb[t], acc);
#pragma GCC unroll 16
                    for (int r = 0; r < 16; r++) _mm512_store_ps(res[t][j][r], acc[r]);
                }
            }
#undef STEP_DOTS
            for (int t = 0; t < nt; t++)
                amx_k_store(six, (const float(*)[16][16])res[t], nr - 16 * t < 16 ? nr - 16 * t : 16, n_tok - g * KQA_GROUP,
                            out + (size_t)g * KQA_GROUP * out_stride + r0 + 16 * t, out_stride);
        }
    }
    _tile_release();
}

/* kern_amx_rows_fn: rows r0..r1-1 of w's packed copy. */
#define DEFINE_AMX_K_ROWS(name, TYPE, X8)                                                                                  \
    SIMD_DEF void FN(name)(const gl_tensor *w, long r0, long r1, const uint8_t *act, size_t act_stride, int n_tok,  \
                     float *out, size_t out_stride, uint8_t *scratch) {                                         \
            const size_t row_bytes = gl_type_row_bytes(TYPE, w->n_cols);                                            \
        amx_k_rows(TYPE, X8, (const uint8_t *)w->packed + (size_t)r0 * row_bytes, row_bytes, (int)(r1 - r0),      \
                 w->n_cols, act, act_stride, n_tok, out + r0, out_stride, scratch);                                    \
    }
DEFINE_AMX_K_ROWS(amx_rows_q4_k, GL_TYPE_Q4_K, false) /* amx_rows_q4_k_avx512 */
DEFINE_AMX_K_ROWS(amx_rows_q5_k, GL_TYPE_Q5_K, false) /* amx_rows_q5_k_avx512 */
DEFINE_AMX_K_ROWS(amx_rows_q6_k, GL_TYPE_Q6_K, false) /* amx_rows_q6_k_avx512 */
DEFINE_AMX_K_ROWS(amx_rows_x8_q4_k, GL_TYPE_Q4_K, true) /* amx_rows_x8_q4_k_avx512 */
DEFINE_AMX_K_ROWS(amx_rows_x8_q5_k, GL_TYPE_Q5_K, true) /* amx_rows_x8_q5_k_avx512 */
DEFINE_AMX_K_ROWS(amx_rows_x8_q6_k, GL_TYPE_Q6_K, true) /* amx_rows_x8_q6_k_avx512 */

#endif
