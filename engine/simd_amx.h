/* simd_amx.h -- the AMX prompt tiles of packed Q4_0, Q4_1, Q5_0, Q5_1 and
 * Q8_0 (simd.h says when they run and how others plug in), included by
 * kernels_avx512_amx*.c after simd_avx512.h (kernels_avx512.h), whose
 * tiles they must match bit for bit.
 *
 * The VNNI tiles keep, per output, 16 float lanes (lane j: block j of every
 * 16-block chunk) and per chunk add, lane-wise, dot * (dw * da) and then
 * mw * s; finish_outputs sums the lanes by sum4_ps's tree. Here one tile
 * multiply gives a block's exact int32 dots for 16 rows x 16 tokens (the
 * weights, unpacked once per 16 rows to their natural element order, as A;
 * the activations' AMX form as B), and the same float operations run on
 * transposed accumulators: for row r and lane j a vector over the 16 tokens.
 * The lanes' tree then is vertical adds in the same order. A short tail's
 * blocks are ordinary blocks here: add_short_tail gives each its exact dot
 * and a chunk's float steps in lane j, so its Q8_0, Q4_0 and Q5_0 take the
 * signed dots (Q8_0's +128 and Q4_0's / Q5_0's offsets taken in integer)
 * and no offset term, as a chunk's.
 *
 * The float work per block and output is VNNI's own (the bits ask for it),
 * so AMX saves the integer dots only (Q8_0's, Q4_0's and Q5_0's offsets are
 * in their signed weight bytes, which tdpbssd takes as they are); the weights' unpacking, once per 16
 * rows and call, is why short calls (under KERN_AMX_MIN_TOKENS; 16-bit Q5_0:
 * KERN_AMX_Q5_0_MIN_TOKENS; Q4_0, Q4_1, Q8_0: KERN_AMX_UNPACK16_MIN_TOKENS) stay
 * on VNNI. */
#ifndef GL_SIMD_AMX_H
#define GL_SIMD_AMX_H

/* At 12 bits (KERN_ACT_AMX_X12, Q4_0 and Q4_1 alone: simd.h) a block is
 * one tile multiply: A = [16 w | w] (K = 64; 16 w fits a byte, Q4_0's
 * signed, Q4_1's unsigned) against B = [q | r], the record's two halves,
 * which is one 16-row tile; the dot is sum w (16 q + r), 16 times less than
 * the 16-bit dot of 256 q + 16 r, so one shift gives the VNNI rows' exact
 * integer. */
INLINE bool amx_fuses_12(const int type, const int bits) {
    return bits == 12 && (type == GL_TYPE_Q4_0 || type == GL_TYPE_Q4_1);
}

typedef struct amx_tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

/* ldtilecfg of cfg. GCC 12 does not see _tile_loadconfig read its operand
 * and may drop the stores that fill it (llama.cpp's AMX path dies of that:
 * a config with only the palette set, then a fault at the first tile
 * load); the empty asm that takes cfg's address keeps them. */
#define AMX_LOAD_CONFIG(cfg)                                                                                    \
    do {                                                                                                        \
        __asm__ volatile("" : : "r"(cfg) : "memory");                                                          \
        _tile_loadconfig(cfg);                                                                                  \
    } while (0)

/* Two slots of tiles, so one block's tile work runs while the float work
 * of the one before goes on: slot s has C tiles 2s, 2s + 1 (16 bits: the
 * coarse and residual dots; 8 bits: each of the four C tiles takes an
 * item), A tile 4 + s (16 rows x one block), and B tiles 6 and 7 (a
 * block's 8 quads of 16 tokens: 16 bits, the coarse and the residual
 * bytes; 8 bits, slot s's). */
#if SIMD_EMITS(AMX) || SIMD_EMITS(AMX_X8) || SIMD_EMITS(AMX_X12)
/* fused (amx_fuses_12): A and B tiles of K = 64, four C tiles an item each as at 8 bits */
static void amx_config(const bool fused) {
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 4; i++) cfg.rows[i] = 16, cfg.colsb[i] = 64;
    for (int i = 4; i < 6; i++) cfg.rows[i] = 16, cfg.colsb[i] = fused ? 64 : 32;
    for (int i = 6; i < 8; i++) cfg.rows[i] = fused ? 16 : 8, cfg.colsb[i] = 64;
    AMX_LOAD_CONFIG(&cfg);
}
#endif

/* One raw block (the file's layout) as 32 bytes in element order: Q8_0
 * as it is, Q4_0 and Q5_0 signed (q - 8, q - 16: folds_offset), Q4_1
 * and Q5_1 unsigned; its scale, and Q4_1's and Q5_1's minimum (the other
 * types' offsets are in their signed bytes: 0). */
INLINE void amx_unpack_block(const int type, const uint8_t *blk, int8_t *dst, float *dw, float *mw) {
    const float d = f16_at(blk);
    *dw = d;
    if (type == GL_TYPE_Q8_0) {
        _mm256_storeu_si256((__m256i *)dst, load256(blk + 2));
        *mw = 0;
        return;
    }
    const bool has_min = type == GL_TYPE_Q4_1 || type == GL_TYPE_Q5_1;
    const int qs = (has_min ? 4 : 2) + (is_q5(type) ? 4 : 0);
    const __m128i q = _mm_loadu_si128((const __m128i *)(blk + qs)), m4 = _mm_set1_epi8(0x0f);
    __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
    if (is_q5(type)) {
        uint32_t qh;
        memcpy(&qh, blk + qs - 4, 4);
        v = _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(0x10));
    }
    if (folds_offset(type)) v = _mm256_sub_epi8(v, _mm256_set1_epi8(type == GL_TYPE_Q5_0 ? 16 : 8));
    _mm256_storeu_si256((__m256i *)dst, v);
    *mw = has_min ? f16_at(blk + 2) : 0;
}

/* amx_unpack_rows of 16 whole Q4_0, Q4_1 or Q8_0 rows, block by block: one
 * gather takes the 16 rows' scales (and Q4_1's minimums: the same 32 bits),
 * one F16 conversion for all; each pair of rows' Q4 quants (16 bytes a row)
 * is broadcast to [r, r, r + 1, r + 1], shifted by 0 or 4 bits per lane and
 * masked, and a pair of Q8_0 rows is two 32-byte loads: two A tile rows in
 * one 64-byte store. The same bytes, scales and minimums as
 * amx_unpack_block (Q4_0's and Q8_0's offsets are in the signed bytes), in
 * a fraction of the work: at 16 tokens the block-by-block unpacking was
 * most of the call (bench_matmul q4_0, q4_1, q8_0). */
/* Byte-wise 16 w of w (w in [-8, 15]): the bits shifted across a byte's edge are masked off. */
INLINE __m512i amx_times16(__m512i w) { return _mm512_and_si512(_mm512_slli_epi16(w, 4), _mm512_set1_epi8((char)0xf0)); }

/* fused: a block's tile rows are [16 w | w] (64 bytes, 1024 a block; amx_fuses_12). */
INLINE void amx_unpack_16(const int type, const bool fused, const uint8_t *data, size_t row_bytes, long rt, int64_t nb,
                          int8_t *a, float *dw, float *mw) {
    const uint8_t *base = data + (size_t)rt * row_bytes;
    const int bb = block32_bytes(type), qs = type == GL_TYPE_Q4_1 ? 4 : 2;
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)row_bytes));
    const long long k4 = 0x0004000400040004LL; /* every word of 128-bit lanes 1 and 3: the high nibbles */
    const __m512i shift = _mm512_set_epi64(k4, k4, 0, 0, k4, k4, 0, 0), m4 = _mm512_set1_epi8(0x0f);
    const __m512i off = _mm512_set1_epi8(type == GL_TYPE_Q4_0 ? 8 : 0);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = base + (size_t)b * (size_t)bb;
        const __m512i h = _mm512_i32gather_epi32(rows, blk, 1);
        _mm512_store_ps(dw + 16 * b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
        _mm512_store_ps(mw + 16 * b, type == GL_TYPE_Q4_1 ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)))
                                                          : _mm512_setzero_ps());
        const uint8_t *q = blk + qs;
        int8_t *dst = a + (fused ? 1024 : 512) * b;
        if (type == GL_TYPE_Q8_0) {
#pragma GCC unroll 2
            for (int r = 0; r < 16; r += 2, q += 2 * row_bytes, dst += 64)
                _mm512_store_si512(dst, _mm512_inserti64x4(_mm512_castsi256_si512(load256(q)), load256(q + row_bytes), 1));
            continue;
        }
#pragma GCC unroll 2
        for (int r = 0; r < 16; r += 2, q += 2 * row_bytes, dst += 64) {
            __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)q));
            v = _mm512_mask_broadcast_i32x4(v, 0xff00, _mm_loadu_si128((const __m128i *)(q + row_bytes)));
            v = _mm512_sub_epi8(_mm512_and_si512(_mm512_srlv_epi16(v, shift), m4), off);
            if (fused) { /* rows r and r + 1: [16 w_r | w_r], [16 w_r+1 | w_r+1] */
                const __m512i v16 = amx_times16(v);
                _mm512_store_si512(dst, _mm512_shuffle_i64x2(v16, v, _MM_SHUFFLE(1, 0, 1, 0)));
                _mm512_store_si512(dst + 64, _mm512_shuffle_i64x2(v16, v, _MM_SHUFFLE(3, 2, 3, 2)));
                dst += 64;
                continue;
            }
            _mm512_store_si512(dst, v);
        }
    }
}

/* Rows rt..rt+nr-1 (nr <= 16; rows past them zero) into A tiles, block b's at
 * a + 512 b (fused: [16 w | w] rows at a + 1024 b), and their scales and offsets [b][16]. */
INLINE void amx_unpack_rows(const int type, const bool fused, const uint8_t *data, size_t row_bytes, long rt, int nr,
                            int64_t nb, int8_t *a, float *dw, float *mw) {
    const int bb = block32_bytes(type);
    if (kern_amx_unpacks_16((uint32_t)type) && nr == 16 && (size_t)15 * row_bytes <= INT32_MAX) {
        amx_unpack_16(type, fused, data, row_bytes, rt, nb, a, dw, mw);
        return;
    }
    if (fused) { /* [16 w | w] a row, from the block's own unpacking */
        for (int r = 0; r < 16; r++)
            for (int64_t b = 0; b < nb; b++) {
                int8_t *dst = a + 1024 * b + 64 * r;
                if (r >= nr) {
                    memset(dst, 0, 64);
                    dw[16 * b + r] = mw[16 * b + r] = 0;
                    continue;
                }
                amx_unpack_block(type, data + (size_t)(rt + r) * row_bytes + (size_t)b * bb, dst + 32, &dw[16 * b + r],
                                 &mw[16 * b + r]);
                const __m256i w = _mm256_loadu_si256((const __m256i *)(dst + 32));
                _mm256_storeu_si256((__m256i *)dst, _mm512_castsi512_si256(amx_times16(_mm512_castsi256_si512(w))));
            }
        return;
    }
    for (int r = 0; r < 16; r++) {
        if (r >= nr) {
            for (int64_t b = 0; b < nb; b++) {
                memset(a + 512 * b + 32 * r, 0, 32);
                dw[16 * b + r] = mw[16 * b + r] = 0;
            }
            continue;
        }
        const uint8_t *row = data + (size_t)(rt + r) * row_bytes;
        for (int64_t b = 0; b < nb; b++)
            amx_unpack_block(type, row + (size_t)b * bb, a + 512 * b + 32 * r, &dw[16 * b + r], &mw[16 * b + r]);
    }
}

/* Block b's float operations on lane j's accumulators of 16 rows, as the
 * VNNI tiles do them for block j of a chunk: Q8_0, Q4_0 and Q5_0 have
 * signed dots (sgn) and no offset term. The integer dot from the C tiles
 * at bits: 16, c 256 + c2; 12 (fused), c 16; 8, c. */
INLINE void amx_block_floats(const int type, const int bits, const float *dwv, const float *mwv, const uint8_t *x,
                             int64_t b, const int32_t *c, __m512 acc[16]) {
    const bool sgn = signed_dots(type), x16 = bits != 8, fused = amx_fuses_12(type, bits);
    const __m512 da = _mm512_loadu_ps((const float *)(x + (x16 ? 1024 : 512)));
    const __m512 s = _mm512_loadu_ps((const float *)(x + (x16 ? 1024 : 512) + 64));
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        __m512i dot = _mm512_load_si512(c + 16 * r);
        if (fused) dot = _mm512_slli_epi32(dot, 4);
        else if (x16) dot = _mm512_add_epi32(_mm512_slli_epi32(dot, 8), _mm512_load_si512(c + 256 + 16 * r));
        const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(dwv[16 * b + r]), da);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[r]);
        if (!sgn) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(mwv[16 * b + r]), s, acc[r]);
    }
}

/* Item k + AMX_PREFETCH's B lines (past the group's last item, the next
 * group's first ones), when a call's B tiles outgrow L2 (2 MiB here; next
 * non-NULL): the items stride 16 records through the group, which no hardware
 * prefetcher follows, and the AMX unit stalls on every tile load that
 * misses. (The A tiles of 16 rows stay in L1/L2; prefetching them, or
 * B tiles that L2 holds, costs more load slots than it saves.) */
#define AMX_PREFETCH 4
#define AMX_PREFETCH_BYTES (2u << 20)
INLINE void amx_prefetch(const uint8_t *grp, const uint8_t *next, size_t rec, const int16_t *items, int n_items, int k) {
    if (!next) return;
    k += AMX_PREFETCH;
    if (k >= n_items) {
        if (k - n_items >= n_items) return;
        grp = next, k -= n_items;
    }
    const char *bk = (const char *)(grp + (size_t)items[k] * rec);
    for (size_t o = 0; o < rec; o += 64) _mm_prefetch(bk + o, _MM_HINT_T0);
}

/* The accumulators of all 16 lanes of 16 rows over a group of 16 tokens,
 * to acct[r][j][t]: lane j's blocks j, j + 16, ... in chunk order, the
 * blocks of all lanes one after another (items), each one's tile work
 * issued an item ahead of its float work. */
INLINE void amx_group(const int type, const int bits, const int8_t *a, const float *dwv, const float *mwv,
                      const uint8_t *grp, const uint8_t *next, const int16_t *items, int n_items, int32_t *c,
                      float *acct) {
    const bool sgn = signed_dots(type); /* signed weight bytes */
    const bool x16 = bits != 8, fused = amx_fuses_12(type, bits);
    const size_t rec = x16 ? sizeof(kamx16_blk) : sizeof(kamx8_blk);
    const size_t a_blk = fused ? 1024 : 512, a_stride = fused ? 64 : 32; /* an A tile: 16 rows of K = 64 or 32 */
    __m512 acc[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
    if (!x16 || fused) {
        /* one C tile an item, four of them: items issued three ahead, A and B tiles by turns, a C tile
         * stored two dots after its own (a store right behind its dot waits out the dot's latency, and
         * the tile work after it with it) */
#define AMX_DOT8(CQ, TA, TB, k)                                                                                  \
    do {                                                                                                        \
        _tile_loadd(TA, a + a_blk * (size_t)items[k], a_stride);                                                \
        _tile_loadd(TB, grp + (size_t)items[k] * rec, 64);                                                      \
        _tile_zero(CQ);                                                                                         \
        if (sgn) _tile_dpbssd(CQ, TA, TB);                                                                      \
        else _tile_dpbusd(CQ, TA, TB);                                                                          \
    } while (0)
        AMX_DOT8(0, 4, 6, 0);
        if (n_items > 1) AMX_DOT8(1, 5, 7, 1);
        if (n_items > 2) AMX_DOT8(2, 4, 6, 2);
        _tile_stored(0, c, 64);
        for (int k = 0; k < n_items; k += 4) {
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const int kk = k + i;
                if (kk >= n_items) break;
                if (kk + 3 < n_items) {
                    if (i == 0) AMX_DOT8(3, 5, 7, kk + 3);
                    else if (i == 1) AMX_DOT8(0, 4, 6, kk + 3);
                    else if (i == 2) AMX_DOT8(1, 5, 7, kk + 3);
                    else AMX_DOT8(2, 4, 6, kk + 3);
                }
                if (kk + 1 < n_items) {
                    if (i == 0) _tile_stored(1, c + 256, 64);
                    else if (i == 1) _tile_stored(2, c + 512, 64);
                    else if (i == 2) _tile_stored(3, c + 768, 64);
                    else _tile_stored(0, c, 64);
                }
                const int b = items[kk];
                amx_prefetch(grp, next, rec, items, n_items, kk);
                amx_block_floats(type, bits, dwv, mwv, grp + (size_t)b * rec, b, c + 256 * i, acc);
                if (kk + 1 == n_items || items[kk + 1] % 16 != b % 16) {
#pragma GCC unroll 16
                    for (int r = 0; r < 16; r++) {
                        _mm512_store_ps(acct + 256 * r + 16 * (b % 16), acc[r]);
                        acc[r] = _mm512_setzero_ps();
                    }
                }
            }
        }
#undef AMX_DOT8
        return;
    }
    /* item k's dots in slot k % 2 (C tiles 2 s, 2 s + 1, A tile 4 + s; B tiles 6 and 7 for the
     * coarse and residual bytes): issued a step ahead, stored only after the next item's dots are
     * issued (a store right behind its own dot waits out the dot's latency, and the tile
     * instructions after it with it), to c + 512 (k % 4), and their floats AMX_LAG steps after
     * that (the vector loads then find the stored lines settled: a little faster than one step) */
#define AMX_DOTS16(CQ, CR, TA, k)                                                                                \
    do {                                                                                                        \
        const uint8_t *x_ = grp + (size_t)items[k] * rec;                                                       \
        _tile_loadd(TA, a + 512 * (size_t)items[k], 32);                                                        \
        _tile_loadd(6, x_, 64);                                                                                 \
        _tile_loadd(7, x_ + 512, 64);                                                                           \
        _tile_zero(CQ);                                                                                         \
        _tile_zero(CR);                                                                                         \
        if (sgn) {                                                                                              \
            _tile_dpbssd(CQ, TA, 6);                                                                            \
            _tile_dpbssd(CR, TA, 7);                                                                            \
        } else {                                                                                                \
            _tile_dpbusd(CQ, TA, 6);                                                                            \
            _tile_dpbusd(CR, TA, 7);                                                                            \
        }                                                                                                       \
    } while (0)
#define AMX_STORE16(CQ, CR, k)                                                                                   \
    do {                                                                                                        \
        _tile_stored(CQ, c + 512 * ((k) % 4), 64);                                                              \
        _tile_stored(CR, c + 512 * ((k) % 4) + 256, 64);                                                        \
    } while (0)
#define AMX_LAG 2
    AMX_DOTS16(0, 1, 4, 0);
    for (int k = 0; k < n_items + AMX_LAG; k += 2) {
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            const int kk = k + i;
            if (kk >= n_items + AMX_LAG) break;
            if (kk < n_items) {
                if (kk + 1 < n_items) {
                    if (i == 0) AMX_DOTS16(2, 3, 5, kk + 1);
                    else AMX_DOTS16(0, 1, 4, kk + 1);
                }
                if (i == 0) AMX_STORE16(0, 1, kk);
                else AMX_STORE16(2, 3, kk);
            }
            if (kk < AMX_LAG) continue;
            const int b = items[kk - AMX_LAG];
            amx_prefetch(grp, next, rec, items, n_items, kk - AMX_LAG);
            amx_block_floats(type, bits, dwv, mwv, grp + (size_t)b * rec, b, c + 512 * ((kk - AMX_LAG) % 4), acc);
            /* a lane's last block: its accumulators out, the next lane's start */
            if (kk - AMX_LAG + 1 == n_items || items[kk - AMX_LAG + 1] % 16 != b % 16) {
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) {
                    _mm512_store_ps(acct + 256 * r + 16 * (b % 16), acc[r]);
                    acc[r] = _mm512_setzero_ps();
                }
            }
        }
    }
#undef AMX_DOTS16
#undef AMX_STORE16
#undef AMX_LAG
}

/* The sums of sub-blocks 0..15 by the tree of _mm512_reduce_add_ps (lane
 * i + lane i + 8, then + 4, + 2, + 1), which sum4_ps replays: a
 * row's lanes, one vector over the tokens each, summed as the VNNI tiles sum them. */
INLINE __m512 lanes_tree(const __m512 x[16]) {
    __m512 s8[8], s4[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) s8[i] = _mm512_add_ps(x[i], x[i + 8]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) s4[i] = _mm512_add_ps(s8[i], s8[i + 4]);
    return _mm512_add_ps(_mm512_add_ps(s4[0], s4[2]), _mm512_add_ps(s4[1], s4[3]));
}

/* v[r][t] to v[t][r], 16 x 16, by swapping one bit of r with the same bit
 * of t per stage (vpermt2ps): a token's 16 outputs then go out in one store,
 * not 16 scalar ones. */
INLINE void amx_transpose16(__m512 v[16]) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const int bit = 1 << k;
        _Alignas(64) int32_t lo[16], hi[16];
        for (int t = 0; t < 16; t++) {
            lo[t] = t & bit ? 16 + (t & ~bit) : t;
            hi[t] = t & bit ? 16 + t : t | bit;
        }
        const __m512i il = _mm512_load_si512(lo), ih = _mm512_load_si512(hi);
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) {
            if (r & bit) continue;
            const __m512 a = v[r], b = v[r | bit];
            v[r] = _mm512_permutex2var_ps(a, il, b);
            v[r | bit] = _mm512_permutex2var_ps(a, ih, b);
        }
    }
}

#if SIMD_EMITS(AMX) || SIMD_EMITS(AMX_X8) || SIMD_EMITS(AMX_X12)
/* Rows r0..r1-1 (see kern_amx_rows_fn) at bits 16, 12 or 8. Scratch: the transposed
 * accumulators, C, the rows' scales and offsets, their A tiles, the items. */
INLINE void amx_rows(const int type, const int bits, const gl_tensor *w, long r0, long r1, const uint8_t *act,
                     size_t act_stride, int n_tok, float *out, size_t out_stride, uint8_t *scratch) {
    const int64_t n_cols = w->n_cols, nb = n_cols / 32;
    const int bb = block32_bytes(type);
    const bool fused = amx_fuses_12(type, bits);
    const size_t row_bytes = (size_t)(nb * bb), group_bytes = kern_amx_group_bytes(n_cols, bits != 8);
    const uint8_t *region = kern_amx_region(act, n_tok, act_stride);
    uint8_t *base = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *acct = (float *)base;            /* [16 rows][16 lanes][16 tokens] */
    int32_t *c = (int32_t *)(acct + 4096);  /* [4 items][2][16][16] */
    float *dwv = (float *)(c + 2048), *mwv = dwv + 16 * nb;
    int8_t *a = (int8_t *)(mwv + 16 * nb);  /* [nb][16 rows][32] (fused: [64]) */
    int16_t *items = (int16_t *)(a + (fused ? 1024 : 512) * nb);
    int n_items = 0;
    for (int j = 0; j < 16; j++)
        for (int64_t b = j; b < nb; b += 16) items[n_items++] = (int16_t)b;
    const bool big = (size_t)((n_tok + 15) / 16) * group_bytes > AMX_PREFETCH_BYTES;
    amx_config(fused);
    for (long rt = r0; rt < r1; rt += 16) {
        const int nr = r1 - rt < 16 ? (int)(r1 - rt) : 16;
        amx_unpack_rows(type, fused, w->data, row_bytes, rt, nr, nb, a, dwv, mwv);
        for (int t0 = 0; t0 < n_tok; t0 += 16) {
            const int nt = n_tok - t0 < 16 ? n_tok - t0 : 16;
            const uint8_t *grp = region + (size_t)(t0 / 16) * group_bytes;
            if (nb < 16) memset(acct, 0, 4096 * sizeof *acct); /* lanes no block reaches */
            const uint8_t *next = !big ? NULL : t0 + 16 < n_tok ? grp + group_bytes : region;
            amx_group(type, bits, a, dwv, mwv, grp, next, items, n_items, c, acct);
            __m512 sums[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) {
                __m512 lanes[16];
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) lanes[j] = _mm512_load_ps(acct + 256 * r + 16 * j);
                sums[r] = lanes_tree(lanes);
            }
            amx_transpose16(sums);
            const __mmask16 rows = (__mmask16)((1u << nr) - 1);
            for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * out_stride + (size_t)rt, rows, sums[t]);
        }
    }
    _tile_release();
}

#define DEFINE_AMX_ROWS(name, TYPE, BITS)                                                                         \
    SIMD_DEF void FN(name)(const gl_tensor *w, long r0, long r1, const uint8_t *act, size_t act_stride, int n_tok, \
                         float *out, size_t out_stride, uint8_t *scratch) {                                        \
        amx_rows(TYPE, BITS, w, r0, r1, act, act_stride, n_tok, out, out_stride, scratch);                         \
    }
#if SIMD_EMITS(AMX)
DEFINE_AMX_ROWS(amx_rows_q4_0, GL_TYPE_Q4_0, 16) /* amx_rows_q4_0_avx512 */
DEFINE_AMX_ROWS(amx_rows_q4_1, GL_TYPE_Q4_1, 16) /* amx_rows_q4_1_avx512 */
DEFINE_AMX_ROWS(amx_rows_q5_0, GL_TYPE_Q5_0, 16) /* amx_rows_q5_0_avx512 */
DEFINE_AMX_ROWS(amx_rows_q5_1, GL_TYPE_Q5_1, 16) /* amx_rows_q5_1_avx512 */
DEFINE_AMX_ROWS(amx_rows_q8_0, GL_TYPE_Q8_0, 16) /* amx_rows_q8_0_avx512 */
#endif
#if SIMD_EMITS(AMX_X8)
DEFINE_AMX_ROWS(amx_rows_x8_q4_0, GL_TYPE_Q4_0, 8) /* amx_rows_x8_q4_0_avx512 */
DEFINE_AMX_ROWS(amx_rows_x8_q4_1, GL_TYPE_Q4_1, 8) /* amx_rows_x8_q4_1_avx512 */
DEFINE_AMX_ROWS(amx_rows_x8_q5_0, GL_TYPE_Q5_0, 8) /* amx_rows_x8_q5_0_avx512 */
DEFINE_AMX_ROWS(amx_rows_x8_q5_1, GL_TYPE_Q5_1, 8) /* amx_rows_x8_q5_1_avx512 */
DEFINE_AMX_ROWS(amx_rows_x8_q8_0, GL_TYPE_Q8_0, 8) /* amx_rows_x8_q8_0_avx512 */
#endif
#if SIMD_EMITS(AMX_X12)
DEFINE_AMX_ROWS(amx_rows_x12_q4_0, GL_TYPE_Q4_0, 12) /* amx_rows_x12_q4_0_avx512 */
DEFINE_AMX_ROWS(amx_rows_x12_q4_1, GL_TYPE_Q4_1, 12) /* amx_rows_x12_q4_1_avx512 */
DEFINE_AMX_ROWS(amx_rows_x12_q5_0, GL_TYPE_Q5_0, 12) /* amx_rows_x12_q5_0_avx512 */
DEFINE_AMX_ROWS(amx_rows_x12_q5_1, GL_TYPE_Q5_1, 12) /* amx_rows_x12_q5_1_avx512 */
DEFINE_AMX_ROWS(amx_rows_x12_q8_0, GL_TYPE_Q8_0, 12) /* amx_rows_x12_q8_0_avx512 */
#endif
#endif

#endif
