/* test_kernels.c -- every fast kernel against the scalar reference.
 *
 * Matmul: random weight blocks of each type, odd row counts, many token
 * counts. A fast kernel quantizes activations to 8 bits, so it is checked
 * two ways: (1) against the exact dot product of the reference-dequantized
 * weights with the dequantized 8-bit activations (computed in double) to
 * float rounding, which catches any layout mistake; (2) against the float
 * activations within the rigorous bound of the activation rounding,
 * sum over blocks of d/2 * sum|w|. Batch invariance is checked bit for bit:
 * a token's outputs must not change with the number of tokens or rows in the
 * call, the thread count, or the attention work split. */
#include "kernels.h"
#include "kv_cache.h"
#include "quant.h"
#include "simd.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rnd_uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() & 0xffffff) / 16777216.0f; }

static void put_f16(uint8_t *p, float f) {
    uint16_t h = gl_fp32_to_fp16(f);
    memcpy(p, &h, 2);
}

static const uint32_t quant_types[] = {GL_TYPE_Q4_0, GL_TYPE_Q4_1, GL_TYPE_Q5_0, GL_TYPE_Q5_1,
                                       GL_TYPE_Q8_0, GL_TYPE_Q4_K, GL_TYPE_Q5_K, GL_TYPE_Q6_K};
static const uint32_t float_types[] = {GL_TYPE_F32, GL_TYPE_F16, GL_TYPE_BF16};

/* Random quant bytes with sane f16 scale fields (offsets per type). */
static void fill_weights(uint32_t type, uint8_t *buf, int64_t n_rows, int64_t n_cols) {
    const gl_type_traits *tt = gl_type_get(type);
    size_t row_bytes = gl_type_row_bytes(type, n_cols);
    size_t n_blocks = (size_t)n_rows * (size_t)(n_cols / tt->block_size);
    if (type == GL_TYPE_F32 || type == GL_TYPE_F16 || type == GL_TYPE_BF16) {
        for (int64_t i = 0; i < n_rows * n_cols; i++) {
            float f = rnd_uniform(-1, 1);
            if (type == GL_TYPE_F32) memcpy(buf + 4 * i, &f, 4);
            else if (type == GL_TYPE_F16) put_f16(buf + 2 * i, f);
            else {
                uint16_t b = gl_fp32_to_bf16(f);
                memcpy(buf + 2 * i, &b, 2);
            }
        }
        return;
    }
    for (size_t i = 0; i < (size_t)n_rows * row_bytes; i++) buf[i] = (uint8_t)rnd();
    int off[2] = {-1, -1};
    switch (type) {
    case GL_TYPE_Q4_1: case GL_TYPE_Q5_1: case GL_TYPE_Q4_K: case GL_TYPE_Q5_K: off[0] = 0; off[1] = 2; break;
    case GL_TYPE_Q6_K: off[0] = 208; break;
    default: off[0] = 0; break;
    }
    for (size_t b = 0; b < n_blocks; b++)
        for (int k = 0; k < 2; k++)
            if (off[k] >= 0) put_f16(buf + b * (size_t)tt->block_bytes + off[k], rnd_uniform(-0.05f, 0.05f));
}

static void fill_acts(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(-2, 2);
    /* A few spikes and an all-zero block, as real activations have. */
    if (n >= 64) {
        x[5] = 40.0f;
        memset(x + 32, 0, 32 * sizeof *x);
    }
}

/* Dequantized activations the way a fast kernel sees them. */
static void act_as_seen(kern_act_kind kind, const float *x, int64_t n, float *seen, float *half_step) {
    if (kind == KERN_ACT_F32) {
        memcpy(seen, x, (size_t)n * sizeof *x);
        for (int64_t i = 0; i < n; i++) half_step[i] = 0;
    } else if (kind == KERN_ACT_Q8_32 || kind == KERN_ACT_Q16_X16 || kind == KERN_ACT_Q8_X8 || kind == KERN_ACT_Q8_32_COARSE) {
        /* the 16-bit forms hold the same 32-element blocks, rearranged; the
         * 8-bit ones their coarse parts */
        kq8_32 *q = malloc((size_t)(n / 32) * sizeof *q);
        kern_quantize_32_ref(x, q, n, KQ_RES16);
        for (int64_t i = 0; i < n; i++) {
            bool coarse = kind == KERN_ACT_Q8_32_COARSE || kind == KERN_ACT_Q8_X8;
            seen[i] = q[i / 32].d * (256 * q[i / 32].q[i % 32] + (coarse ? 0 : q[i / 32].q2[i % 32]));
            half_step[i] = q[i / 32].d * (coarse ? 128 : 1); /* q2 may clip to 127 at a half step of q */
        }
        free(q);
    } else { /* the packed K-quants' forms (kq16_k, kq8_k) hold quantize_256's super-blocks, rearranged */
        kq8_256 *q = malloc((size_t)(n / 256) * sizeof *q);
        kern_quantize_256_ref(x, q, n);
        bool coarse = kind == KERN_ACT_Q8_256_COARSE || kind == KERN_ACT_Q8_K;
        for (int64_t i = 0; i < n; i++) {
            seen[i] = q[i / 256].d * (256 * q[i / 256].q[i % 256] + (coarse ? 0 : q[i / 256].q2[i % 256]));
            half_step[i] = q[i / 256].d * (coarse ? 128 : 1);
        }
        free(q);
    }
}

/* How a test runs a weight type: as the file has it, packed, or packed
 * against 8-bit activations, or as the file has it against 8-bit ones. */
typedef enum { PLAIN, PACKED, PACKED_X8, PLAIN_X8 } rows_form;
static const char *const form_name[] = {"", " packed", " packed x8", " x8"};

static kern_act_kind act_kind_for(uint32_t type, rows_form form) {
    if (form == PLAIN_X8) return kern_act_kind_of(type) == KERN_ACT_Q8_32 ? KERN_ACT_Q8_32_COARSE : KERN_ACT_Q8_256_COARSE;
    return form == PACKED_X8 ? kern_packed_x8_act_kind(type) : form == PACKED ? kern_packed_act_kind(type) : kern_act_kind_of(type);
}

/* Run impl's rows function on rows [r0, r1) for tokens [t0, t1); out is n_tok x n_rows.
 * With packed (kern_pack's copy of w) a packed rows function runs instead. */
static void run_rows(const kern_impl *impl, uint32_t type, const uint8_t *w, const uint8_t *packed, rows_form form,
                     int64_t n_rows, int64_t n_cols, const float *x, int n_tok, int r0, int r1, int t0, int t1,
                     float *out) {
    kern_act_kind kind = act_kind_for(type, form);
    size_t row_bytes = gl_type_row_bytes(type, n_cols);
    size_t stride = kind == KERN_ACT_Q8_32 || kind == KERN_ACT_Q8_32_COARSE ? (size_t)(n_cols / 32) * sizeof(kq8_32)
                    : kind == KERN_ACT_Q8_256 || kind == KERN_ACT_Q8_256_COARSE ? (size_t)(n_cols / 256) * sizeof(kq8_256)
                    : kind == KERN_ACT_Q16_X16 ? (size_t)kq16_chunks(n_cols) * sizeof(kq16_chunk)
                    : kind == KERN_ACT_Q16_K   ? (size_t)(n_cols / 256) * sizeof(kq16_k)
                    : kind == KERN_ACT_Q8_X8   ? kq8_x8_row_bytes(n_cols)
                    : kind == KERN_ACT_Q8_K    ? (size_t)(n_cols / 256) * sizeof(kq8_k)
                                                : (size_t)n_cols * sizeof(float);
    /* the call's tokens alone, as a matmul's buffer (room for Q4_K's turned groups after the rows) */
    const int nt = t1 - t0;
    size_t act_bytes = kern_k16_act_bytes(stride, n_cols, nt);
    uint8_t *act = aligned_alloc(64, (act_bytes + 63) & ~(size_t)63);
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (size_t)(t0 + t) * (size_t)n_cols;
        if (kind == KERN_ACT_Q8_32) {
            impl->quantize_32(xt, (kq8_32 *)(act + t * stride), n_cols, KQ_RES16);
        } else if (kind == KERN_ACT_Q8_32_COARSE) kern_quantize_32_coarse(impl, xt, (kq8_32 *)(act + t * stride), n_cols);
        else if (kind == KERN_ACT_Q8_256_COARSE) kern_quantize_256_coarse(impl, xt, (kq8_256 *)(act + t * stride), n_cols);
        else if (kind == KERN_ACT_Q16_X16) kern_quantize_x16(impl, xt, (kq16_chunk *)(act + t * stride), n_cols, KQ_RES16);
        else if (kind == KERN_ACT_Q16_K) kern_quantize_k16(impl, xt, (kq16_k *)(act + t * stride), n_cols);
        else if (kind == KERN_ACT_Q8_X8) kern_quantize_x8(impl, xt, act + t * stride, n_cols);
        else if (kind == KERN_ACT_Q8_K) kern_quantize_k8(impl, xt, (kq8_k *)(act + t * stride), n_cols);
        else if (kind == KERN_ACT_Q8_256) impl->quantize_256(xt, (kq8_256 *)(act + t * stride), n_cols);
        else memcpy(act + t * stride, xt, stride);
    }
    if (kind == KERN_ACT_Q16_K) kern_turn_k16(impl, act, nt, stride, n_cols);
    kern_rows_fn fn = form == PACKED_X8 ? impl->packed_rows_x8[type]
                      : form == PACKED  ? impl->packed_rows[type]
                      : form == PLAIN_X8 ? impl->rows_x8[type]
                                         : impl->rows[type];
    fn((packed ? packed : w) + (size_t)r0 * row_bytes, row_bytes, r1 - r0, n_cols, act, stride, nt,
       out + (size_t)t0 * (size_t)n_rows + r0, (size_t)n_rows);
    free(act);
}

static const kern_impl *impls[2];
static int n_impls;

static void find_impls(void) {
    n_impls = 0;
    if (kern_impl_avx2()) impls[n_impls++] = kern_impl_avx2();
    if (kern_impl_avx512()) impls[n_impls++] = kern_impl_avx512();
}

/* ---- activation quantizers ------------------------------------------------- */

START_TEST(quantizers_match_reference) {
    find_impls();
    enum { N = 1024 };
    float x[N];
    for (int round = 0; round < 20; round++) {
        fill_acts(x, N);
        if (round == 1) memset(x, 0, sizeof x);
        if (round == 2)
            for (int i = 0; i < N; i++) x[i] = (float)(i % 255 - 127) * 0.5f; /* exact .5 ties */
        kq8_32 r32[N / 32], s32[N / 32], r12[N / 32], s12[N / 32];
        kq8_256 r256[N / 256], s256[N / 256];
        kern_quantize_32_ref(x, r32, N, KQ_RES16);
        kern_quantize_32_ref(x, r12, N, KQ_RES12);
        kern_quantize_256_ref(x, r256, N);
        /* 12 bits: the coarse part is 16 bits' own, the residual r in [-7, 7] as 16 r, within a step
         * and a half of its grid (the clamp at 7 costs up to half a step more) */
        for (int i = 0; i < N; i++) {
            const kq8_32 *b = &r12[i / 32];
            ck_assert_int_eq(b->q[i % 32], r32[i / 32].q[i % 32]);
            ck_assert_msg(b->q2[i % 32] % 16 == 0 && abs(b->q2[i % 32]) <= 112, "12-bit residual %d", b->q2[i % 32]);
            ck_assert_float_le(fabsf(x[i] - b->d * (float)(256 * b->q[i % 32] + b->q2[i % 32])), b->d * 16.001f + 1e-30f);
        }
        for (int k = 0; k < n_impls; k++) {
            impls[k]->quantize_32(x, s32, N, KQ_RES16);
            impls[k]->quantize_32(x, s12, N, KQ_RES12);
            impls[k]->quantize_256(x, s256, N);
            ck_assert_msg(!memcmp(r32, s32, sizeof r32), "%s quantize_32 differs (round %d)", impls[k]->name, round);
            ck_assert_msg(!memcmp(r12, s12, sizeof r12), "%s quantize_32 at 12 bits differs (round %d)", impls[k]->name, round);
            ck_assert_msg(!memcmp(r256, s256, sizeof r256), "%s quantize_256 differs (round %d)", impls[k]->name, round);
            /* The one-pass packed activation rows give what quantize_32 and
             * the reshuffle give: whole chunks, then a row with a tail chunk. */
            kern_impl plain = *impls[k];
            plain.quantize_x16 = NULL;
            plain.quantize_x8 = NULL;
            plain.k16_layout = NULL;
            plain.quantize_256 = kern_quantize_256_ref; /* the K-quants' rows from the scalar units */
            static kq16_chunk c1[2], c2[2];
            static kq16_k k1[N / 256], k2[N / 256];
            static uint8_t b1[2 * sizeof(kq8_chunk)], b2[2 * sizeof(kq8_chunk)];
            static kq8_k e1[N / 256], e2[N / 256];
            for (int64_t n = N; n >= N - 128; n -= 128) {
                for (int res = KQ_RES12; res <= KQ_RES16; res *= 16) {
                    memset(c1, 0xa5, sizeof c1), memset(c2, 0x5a, sizeof c2);
                    kern_quantize_x16(impls[k], x, c1, n, res);
                    kern_quantize_x16(&plain, x, c2, n, res);
                    ck_assert_msg(!memcmp(c1, c2, (size_t)kq16_chunks(n) * sizeof *c1),
                                  "%s quantize_x16 of %d differs (res %d, round %d)", impls[k]->name, (int)n, res, round);
                }
                memset(b1, 0xa5, sizeof b1), memset(b2, 0x5a, sizeof b2);
                kern_quantize_x8(impls[k], x, b1, n);
                kern_quantize_x8(&plain, x, b2, n);
                ck_assert_msg(!memcmp(b1, b2, kq8_x8_row_bytes(n)), "%s quantize_x8 of %d differs (round %d)",
                              impls[k]->name, (int)n, round);
            }
            kern_quantize_k8(impls[k], x, e1, N);
            kern_quantize_k8(&plain, x, e2, N);
            ck_assert_msg(!memcmp(e1, e2, sizeof e1), "%s quantize_k8 differs (round %d)", impls[k]->name, round);
            kern_quantize_k16(impls[k], x, k1, N);
            kern_quantize_k16(&plain, x, k2, N);
            ck_assert_msg(!memcmp(k1, k2, sizeof k1), "%s quantize_k16 differs (round %d)", impls[k]->name, round);
        }
    }
}
END_TEST

/* The AMX form straight from the floats (quantize_amx) gives what the
 * per-token rows and their fill give, byte for byte: rows of whole chunks,
 * of a last chunk of m < 16 blocks, of a short tail, a group of 1..16
 * tokens; zeros, exact ties, tiny (subnormal units) and huge values. So
 * does the K-quants' form (quantize_qa) against its token-by-token fill. */
START_TEST(amx_form_matches_per_token_rows) {
    find_impls();
    static const int64_t cols[] = {32, 160, 256, 512, 576, 640, 768, 896, 1056, 2048, 2080, 2304};
    static const int nts[] = {1, 5, 15, 16};
    const int64_t max_n = 2304;
    float *x = malloc((size_t)16 * (size_t)max_n * sizeof *x);
    const size_t max_group = (size_t)(max_n / 256) * sizeof(kqa16_k);
    uint8_t *g1 = aligned_alloc(64, max_group), *g2 = aligned_alloc(64, max_group);
    uint8_t *rows = malloc((size_t)16 * (size_t)kq16_chunks(max_n) * sizeof(kq16_chunk));
    for (int k = 0; k < n_impls; k++) {
        if (!impls[k]->quantize_amx) continue;
        kern_impl plain = *impls[k];
        plain.quantize_amx = NULL;
        plain.quantize_qa = NULL;
        for (int round = 0; round < 5; round++) {
            fill_acts(x, 16 * max_n);
            for (int64_t i = 0; i < 16 * max_n; i++) {
                if (round == 1 && i % 97 < 40) x[i] = 0.0f;
                if (round == 2) x[i] = (float)(i % 255 - 127) * 0.5f;
                if (round == 3) x[i] *= 1e-36f; /* subnormal units (1/d stays finite) */
                if (round == 4) x[i] *= 1e30f;
            }
            for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++)
                for (size_t ni = 0; ni < sizeof nts / sizeof nts[0]; ni++)
                    for (int bits = 8; bits <= 16; bits += 4) {
                        const int64_t n = cols[ci];
                        const bool x16 = bits != 8;
                        const size_t bytes = kern_amx_group_bytes(n, x16), stride = (size_t)kq16_chunks(n) * sizeof(kq16_chunk);
                        memset(g1, 0, bytes), memset(g2, 0, bytes);
                        kern_quantize_amx(impls[k], x, n, nts[ni], g1, rows, stride, bits);
                        kern_quantize_amx(&plain, x, n, nts[ni], g2, rows, stride, bits);
                        ck_assert_msg(!memcmp(g1, g2, bytes), "%s quantize_amx of %d x %d (%d-bit) differs (round %d)",
                                      impls[k]->name, nts[ni], (int)n, bits, round);
                        if (n % 256 || !impls[k]->quantize_qa || bits == 12) continue;
                        const size_t qa_bytes = (size_t)(n / 256) * (x16 ? sizeof(kqa16_k) : sizeof(kqa8_k));
                        memset(g1, 0, qa_bytes), memset(g2, 0, qa_bytes);
                        kern_quantize_qa(impls[k], x, n, nts[ni], g1, !x16);
                        kern_quantize_qa(&plain, x, n, nts[ni], g2, !x16);
                        ck_assert_msg(!memcmp(g1, g2, qa_bytes), "%s quantize_qa of %d x %d (%d-bit) differs (round %d)",
                                      impls[k]->name, nts[ni], (int)n, x16 ? 16 : 8, round);
                    }
        }
    }
    free(x), free(g1), free(g2), free(rows);
}
END_TEST

/* ---- matmul kernels ------------------------------------------------------------ */

/* Packed forms go through kern_pack and the implementation's packed rows. */
static void check_type_as(const kern_impl *impl, uint32_t type, int64_t n_rows, int64_t n_cols, int n_tok,
                          rows_form form) {
    const bool packed = form == PACKED || form == PACKED_X8;
    const gl_type_traits *tt = gl_type_get(type);
    size_t row_bytes = gl_type_row_bytes(type, n_cols);
    uint8_t *w = malloc((size_t)n_rows * row_bytes);
    gl_tensor wt = {.type = type, .n_cols = n_cols, .n_rows = n_rows, .data = w, .n_bytes = n_rows * row_bytes};
    float *x = malloc((size_t)n_tok * (size_t)n_cols * sizeof *x);
    float *out = calloc((size_t)n_tok * (size_t)n_rows, sizeof *out);
    float *one = calloc((size_t)n_tok * (size_t)n_rows, sizeof *one);
    float *wrow = malloc((size_t)n_cols * sizeof *wrow), *seen = malloc((size_t)n_cols * sizeof *seen);
    float *half_step = malloc((size_t)n_cols * sizeof *half_step);
    fill_weights(type, w, n_rows, n_cols);
    fill_acts(x, (int64_t)n_tok * n_cols);
    if (packed) { /* kern_pack packs for the active implementation: make it the one under test */
        char active[16];
        snprintf(active, sizeof active, "%s", kern_backend());
        ck_assert_int_eq(kern_set_backend(impl->name), 0);
        ck_assert_int_eq(kern_pack(&wt), 0);
        ck_assert_int_eq(kern_set_backend(active), 0);
        ck_assert_ptr_nonnull(wt.packed);
    }
    const uint8_t *pw = wt.packed;

    run_rows(impl, type, w, pw, form, n_rows, n_cols, x, n_tok, 0, (int)n_rows, 0, n_tok, out);
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * (size_t)n_cols;
        act_as_seen(act_kind_for(type, form), xt, n_cols, seen, half_step);
        for (int64_t r = 0; r < n_rows; r++) {
            tt->to_float(w + (size_t)r * row_bytes, wrow, n_cols);
            double exact_seen = 0, exact = 0, mag = 0, bound = 0;
            for (int64_t i = 0; i < n_cols; i++) {
                exact_seen += (double)wrow[i] * seen[i];
                exact += (double)wrow[i] * xt[i];
                mag += fabs((double)wrow[i] * seen[i]);
                bound += fabs((double)wrow[i]) * half_step[i];
            }
            double got = out[(size_t)t * (size_t)n_rows + (size_t)r];
            ck_assert_msg(fabs(got - exact_seen) <= 2e-6 * mag + 1e-6,
                          "%s %s%s %lld x %lld, %d tokens, row %lld tok %d: got %.9g, exact %.9g (mag %g)",
                          impl->name, tt->name, form_name[form], (long long)n_rows, (long long)n_cols, n_tok,
                          (long long)r, t, got, exact_seen, mag);
            ck_assert_msg(fabs(got - exact) <= bound + 2e-6 * mag + 1e-6,
                          "%s %s row %lld tok %d: got %.9g, float reference %.9g, bound %g", impl->name, tt->name,
                          (long long)r, t, got, exact, bound);
        }
    }
    /* Invariance: each token alone, and rows in odd-sized pieces, give the same bits. */
    for (int t = 0; t < n_tok; t++) {
        for (int r0 = 0; r0 < n_rows;) {
            int r1 = r0 + 1 + (int)(rnd() % 6);
            if (r1 > n_rows) r1 = (int)n_rows;
            run_rows(impl, type, w, pw, form, n_rows, n_cols, x, n_tok, r0, r1, t, t + 1, one);
            r0 = r1;
        }
    }
    ck_assert_msg(!memcmp(out, one, (size_t)n_tok * (size_t)n_rows * sizeof *out),
                  "%s %s%s: result depends on the tile", impl->name, tt->name, form_name[form]);
    kern_unpack(&wt);
    free(w), free(x), free(out), free(one), free(wrow), free(seen), free(half_step);
}

static void check_type(const kern_impl *impl, uint32_t type, int64_t n_rows, int64_t n_cols, int n_tok) {
    check_type_as(impl, type, n_rows, n_cols, n_tok, PLAIN);
    if (impl->packed_rows[type]) check_type_as(impl, type, n_rows, n_cols, n_tok, PACKED);
    if (impl->packed_rows_x8[type]) check_type_as(impl, type, n_rows, n_cols, n_tok, PACKED_X8);
    if (impl->rows_x8[type]) check_type_as(impl, type, n_rows, n_cols, n_tok, PLAIN_X8);
}

START_TEST(quant_kernels_match_reference) {
    find_impls();
    if (n_impls == 0) return;
    static const int toks[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 17};
    for (int k = 0; k < n_impls; k++)
        for (size_t ti = 0; ti < sizeof quant_types / sizeof quant_types[0]; ti++) {
            uint32_t type = quant_types[ti];
            int64_t n_cols = gl_type_get(type)->block_size == 256 ? 768 : 544;
            for (size_t n = 0; n < sizeof toks / sizeof toks[0]; n++) check_type(impls[k], type, 13, n_cols, toks[n]);
            check_type(impls[k], type, 1, n_cols, 3);
            check_type(impls[k], type, 6, gl_type_get(type)->block_size, 2);
            /* 23 blocks: a 16-block chunk, then 7 whose scales span pieces */
            if (gl_type_get(type)->block_size == 32) {
                check_type(impls[k], type, 9, 23 * 32, 5);
                check_type(impls[k], type, 7, 32 * 32, 6); /* whole chunks only */
                /* last chunks of 4, 2 and 3 blocks (short tails, 3 with lanes that
                 * shift block from vector to vector), 8, 5, 12, 9 and 15 (masked chunks) */
                static const int tails[] = {20, 18, 19, 24, 21, 28, 25, 31};
                for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++)
                    check_type(impls[k], type, 5, tails[i] * 32, 6);
                /* rows longer than a panel (4-token tiles of packed weights go
                 * panel by panel over blocks of rows): 164 blocks in panels of 64,
                 * 64 and 36 (a short tail), over more rows than one block; 72
                 * blocks (a last panel of 8) */
                check_type(impls[k], type, 37, 164 * 32, 9);
                check_type(impls[k], type, 5, 72 * 32, 4);
            }
        }
}
END_TEST

START_TEST(float_kernels_match_reference) {
    find_impls();
    static const int cols[] = {1, 7, 8, 37, 64, 67, 600};
    for (int k = 0; k < n_impls; k++)
        for (size_t ti = 0; ti < sizeof float_types / sizeof float_types[0]; ti++)
            for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++)
                for (int n_tok = 1; n_tok <= 10; n_tok += 3) check_type(impls[k], float_types[ti], 11, cols[c], n_tok);
}
END_TEST

/* ---- kern_matmul through the pool ------------------------------------------------- */

/* A matrix of random weights of type (kern_unpack and free data after). */
static gl_tensor random_tensor(uint32_t type, int64_t n_rows, int64_t n_cols, uint8_t **data) {
    size_t row_bytes = gl_type_row_bytes(type, n_cols);
    *data = malloc((size_t)n_rows * row_bytes);
    fill_weights(type, *data, n_rows, n_cols);
    return (gl_tensor){.type = type, .n_cols = n_cols, .n_rows = n_rows, .data = *data,
                       .n_bytes = (uint64_t)n_rows * row_bytes};
}

/* The largest |a - b| over n, and the largest |ref|. */
static float max_diff(const float *ref, const float *b, size_t n, float *maxref) {
    float diff = 0;
    *maxref = 0;
    for (size_t i = 0; i < n; i++) {
        *maxref = fabsf(ref[i]) > *maxref ? fabsf(ref[i]) : *maxref;
        diff = fabsf(ref[i] - b[i]) > diff ? fabsf(ref[i] - b[i]) : diff;
    }
    return diff;
}

static void matmul_bits(const char *backend, int n_threads, int act_bits, const gl_tensor *w, const float *x,
                        int n_tok, float *out) {
    kern_pool *p = kern_pool_create(n_threads);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(kern_pool_set_act_bits(p, act_bits), 0);
    ck_assert_int_eq(kern_pool_reserve(p, (size_t)w->n_cols), 0);
    ck_assert_int_eq(kern_set_backend(backend), 0);
    kern_matmul(p, w, x, n_tok, out);
    kern_set_backend("auto");
    kern_pool_free(p);
}

static void matmul_with(const char *backend, int n_threads, const gl_tensor *w, const float *x, int n_tok, float *out) {
    matmul_bits(backend, n_threads, 16, w, x, n_tok, out);
}

/* Each token of x alone (on 1 or 2 threads by turns) gives the bits of
 * all, the batch's outputs. */
static void assert_alone_is_batch(const char *backend, int act_bits, const gl_tensor *w, const float *x, int n_tok,
                                  const float *all, const char *what) {
    float *one = malloc((size_t)w->n_rows * sizeof *one);
    for (int t = 0; t < n_tok; t++) {
        matmul_bits(backend, 1 + t % 2, act_bits, w, x + (size_t)t * (size_t)w->n_cols, 1, one);
        ck_assert_msg(!memcmp(one, all + (size_t)t * (size_t)w->n_rows, (size_t)w->n_rows * sizeof *one),
                      "%s: token %d alone differs from the batch", what, t);
    }
    free(one);
}

/* A packed random n_rows x n_cols tensor of type through the pool at
 * act_bits: each of n_tok tokens alone gives the batch's bits. */
/* Whether backend runs here; if not, the test's SKIP line says why. */
static bool backend_or_skip(const char *backend, const char *test, const char *why) {
    const bool ok = kern_set_backend(backend) == 0;
    kern_set_backend("auto");
    if (!ok) printf("SKIP %s: %s\n", test, why);
    return ok;
}

static void check_batch_invariant_on(const char *backend, uint32_t type, int act_bits, int64_t n_rows, int64_t n_cols,
                                     int n_tok) {
    uint8_t *data;
    gl_tensor w = random_tensor(type, n_rows, n_cols, &data);
    ck_assert_int_eq(kern_pack(&w), 0);
    float *x = malloc((size_t)n_tok * (size_t)n_cols * sizeof *x);
    fill_acts(x, (int64_t)n_tok * n_cols);
    float *all = malloc((size_t)n_tok * (size_t)n_rows * sizeof *all);
    matmul_bits(backend, 2, act_bits, &w, x, n_tok, all);
    char what[80];
    snprintf(what, sizeof what, "%s %s %lld columns %d-bit", backend, gl_type_get(type)->name, (long long)n_cols,
             act_bits);
    assert_alone_is_batch(backend, act_bits, &w, x, n_tok, all, what);
    kern_unpack(&w);
    free(data), free(x), free(all);
}

static void check_packed_batch_invariant(uint32_t type, int act_bits, int64_t n_rows, int64_t n_cols, int n_tok) {
    check_batch_invariant_on("auto", type, act_bits, n_rows, n_cols, n_tok);
}

START_TEST(matmul_is_batch_and_thread_invariant) {
    for (size_t ti = 0; ti < 4; ti++) {
        uint32_t type = (uint32_t[]){GL_TYPE_Q4_1, GL_TYPE_Q8_0, GL_TYPE_Q6_K, GL_TYPE_F16}[ti];
        int64_t n_rows = 301, n_cols = 512;
        int n_tok = 19;
        uint8_t *data;
        gl_tensor w = random_tensor(type, n_rows, n_cols, &data);
        ck_assert_int_eq(kern_pack(&w), 0); /* as the model loader does */
        float *x = malloc((size_t)n_tok * (size_t)n_cols * sizeof *x);
        fill_acts(x, (int64_t)n_tok * n_cols);
        x[5] = 0.5f; /* no spike: the bound below is a plain relative one */
        float *all = malloc((size_t)n_tok * (size_t)n_rows * sizeof *all);
        float *one = malloc((size_t)n_rows * sizeof *one), *ref = malloc((size_t)n_tok * (size_t)n_rows * sizeof *ref);
        const char *backends[] = {"auto", "avx2", "scalar"};
        for (int b = 0; b < 3; b++) {
            bool ok = kern_set_backend(backends[b]) == 0;
            kern_set_backend("auto");
            if (!ok) continue;
            matmul_with(backends[b], 2, &w, x, n_tok, all);
            for (int t = 0; t < n_tok; t++) {
                matmul_with(backends[b], 1 + t % 2, &w, x + (size_t)t * (size_t)n_cols, 1, one);
                ck_assert_msg(!memcmp(one, all + (size_t)t * (size_t)n_rows, (size_t)n_rows * sizeof *one),
                              "%s %s: token %d alone differs from the batch", backends[b], gl_type_get(type)->name, t);
            }
            if (b == 2) memcpy(ref, all, (size_t)n_tok * (size_t)n_rows * sizeof *ref);
        }
        /* Fast vs scalar path: within the activation-rounding tolerance. */
        matmul_with("auto", 2, &w, x, n_tok, all);
        float maxref, maxdiff = max_diff(ref, all, (size_t)n_tok * (size_t)n_rows, &maxref);
        ck_assert_msg(maxdiff <= 1e-4f * maxref, "%s: fast vs scalar max diff %g of %g", gl_type_get(type)->name,
                      maxdiff, maxref);
        kern_unpack(&w);
        free(data), free(x), free(all), free(one), free(ref);
    }
}
END_TEST

/* A decode call's rows go out by segments, one per thread, with steals
 * from a segment's end (claim_in_segments): on any pool every row is
 * computed once, to the one-thread bits, whatever the row count (segments
 * of no rows, of a few, uneven ones), whether workers come or not (a pool
 * of more threads than this host's cores leaves some late), and past
 * MATMUL_MAX_SEGS threads (16), where the guided hand-out serves. */
START_TEST(decode_segments_cover_every_row_once) {
    const int64_t rows[] = {1, 3, 5, 37, 301, 4099};
    const int threads[] = {2, 3, 16, 17};
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
        uint8_t *data;
        gl_tensor w = random_tensor(GL_TYPE_Q4_0, rows[ri], 256, &data);
        ck_assert_int_eq(kern_pack(&w), 0);
        float x[2 * 256], ref[2 * 4099], out[2 * 4099];
        fill_acts(x, 2 * 256);
        for (int n_tok = 1; n_tok <= 2; n_tok++) {
            matmul_with("auto", 1, &w, x, n_tok, ref);
            for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++)
                for (int rep = 0; rep < 3; rep++) {
                    for (size_t i = 0; i < (size_t)n_tok * (size_t)rows[ri]; i++) out[i] = NAN;
                    matmul_with("auto", threads[ti], &w, x, n_tok, out);
                    ck_assert_msg(!memcmp(out, ref, (size_t)n_tok * (size_t)rows[ri] * sizeof *out),
                                  "%lld rows, %d tokens, %d threads: differs from one thread", (long long)rows[ri],
                                  n_tok, threads[ti]);
                }
        }
        kern_unpack(&w);
        free(data);
    }
}
END_TEST

/* A decode token's 16-bit dots against Q5 weights take split bytes
 * (split_x16_chunk in simd_avx512.h): still the batch's bits, over full
 * chunks, a last chunk of 12 blocks, a half tail (8) and a short tail (2). */
START_TEST(matmul_decode_split_is_batch_invariant) {
    const uint32_t types[] = {GL_TYPE_Q4_0, GL_TYPE_Q4_1, GL_TYPE_Q5_0, GL_TYPE_Q5_1};
    const int64_t cols[] = {896, 4864, 576, 1024};
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t ci = 0; ci < 4; ci++) check_packed_batch_invariant(types[ti], 16, 37, cols[ci], 5);
}
END_TEST

/* Decode rows take the L1 + L2 prefetch pair once the noted weights
 * outgrow a third of the last-level cache, and drop it when they are freed;
 * either way a token alone gives the batch's bits. */
START_TEST(decode_prefetch_follows_weight_stream) {
    const long long big = 1LL << 40;
    ck_assert(!atomic_load(&kern_weights_stream));
    kern_note_weights(big);
    ck_assert(atomic_load(&kern_weights_stream));
    const uint32_t types[] = {GL_TYPE_Q4_0, GL_TYPE_Q5_0, GL_TYPE_Q8_0, GL_TYPE_Q4_K, GL_TYPE_Q6_K};
    for (size_t ti = 0; ti < 5; ti++) {
        check_packed_batch_invariant(types[ti], 16, 37, 1024, 5);
        check_packed_batch_invariant(types[ti], 8, 37, 1024, 5);
    }
    kern_note_weights(-big);
    ck_assert(!atomic_load(&kern_weights_stream));
}
END_TEST

/* One token runs two rows a tile from the caches and one row a tile (four
 * rows' shared reduce) when the weights are noted as streaming
 * (packed_rows_one_token, the K-quants' one-token pass), but Q5 rows of at
 * most PF_PAIR_ROW_BYTES (all of these) two a tile streaming too, an odd last row
 * alone: either way a token alone gives the batch's bits for every row
 * count, through short tails (640 columns: 4 blocks, 576: 2), a last chunk
 * of 12 blocks (896), a half tail (768), at 16 and 8 bits. */
START_TEST(decode_two_row_tiles_are_batch_invariant) {
    const uint32_t types[] = {GL_TYPE_Q4_0, GL_TYPE_Q4_1, GL_TYPE_Q5_0, GL_TYPE_Q5_1,
                              GL_TYPE_Q8_0, GL_TYPE_Q4_K, GL_TYPE_Q5_K, GL_TYPE_Q6_K};
    /* K-quants: odd and even counts of super-blocks (a streamed Q4_K row takes them two at a time) */
    const int64_t cols[] = {640, 576, 896, 768}, k_cols[] = {768, 1280, 1024};
    const int64_t rows[] = {1, 2, 3, 5, 38};
    for (int stream = 0; stream < 2; stream++) {
        if (stream) kern_note_weights(1LL << 40);
        for (size_t ti = 0; ti < 8; ti++) {
            const bool k = gl_type_get(types[ti])->block_size == 256;
            for (size_t ci = 0; ci < (k ? 3 : 4); ci++)
                for (size_t ri = 0; ri < 5; ri++)
                    for (int bits = 8; bits <= 16; bits += 4)
                        check_packed_batch_invariant(types[ti], bits, rows[ri], k ? k_cols[ci] : cols[ci], 3);
        }
        if (stream) kern_note_weights(-(1LL << 40));
    }
    ck_assert(!atomic_load(&kern_weights_stream));
}
END_TEST

/* At 16 bits Q4_0's and Q5_0's offset goes into the integer dot: each
 * output of a one-chunk row is exactly sum over blocks j of
 * float(sum (q - 8) a) * (dw * da), each product rounded once, summed by
 * the lanes' tree (lane i + lane i + 8, then + 4, + 2, + 1), on every path:
 * one token (Q5_0's split), VNNI tiles, AMX (40 tokens). */
START_TEST(offset_folds_into_integer_dot) {
    const uint32_t types[] = {GL_TYPE_Q4_0, GL_TYPE_Q5_0};
    const int64_t n_rows = 5, n_cols = 512;
    const int n_tok = 40, counts[] = {1, 8, 40};
    for (size_t ti = 0; ti < 2; ti++) {
        const uint32_t type = types[ti];
        const size_t row_bytes = gl_type_row_bytes(type, n_cols), bb = row_bytes / 16;
        uint8_t *data;
        gl_tensor w = random_tensor(type, n_rows, n_cols, &data);
        uint8_t *raw = malloc((size_t)n_rows * row_bytes);
        memcpy(raw, data, (size_t)n_rows * row_bytes);
        ck_assert_int_eq(kern_pack(&w), 0);
        float *x = malloc((size_t)n_tok * (size_t)n_cols * sizeof *x);
        fill_acts(x, (int64_t)n_tok * n_cols);
        float *want = malloc((size_t)n_tok * (size_t)n_rows * sizeof *want);
        float *got = malloc((size_t)n_tok * (size_t)n_rows * sizeof *got);
        for (int t = 0; t < n_tok; t++) {
            kq16_chunk ch;
            kern_quantize_x16(kern_impl_active(), x + (size_t)t * (size_t)n_cols, &ch, n_cols, KQ_RES16);
            for (int64_t r = 0; r < n_rows; r++) {
                volatile float lane[16];
                for (int j = 0; j < 16; j++) {
                    const uint8_t *blk = raw + (size_t)r * row_bytes + (size_t)j * bb;
                    uint16_t h;
                    uint32_t qh = 0;
                    memcpy(&h, blk, 2);
                    const uint8_t *qs = blk + (type == GL_TYPE_Q5_0 ? 6 : 2);
                    if (type == GL_TYPE_Q5_0) memcpy(&qh, blk + 2, 4);
                    int32_t dot = 0;
                    for (int e = 0; e < 32; e++) {
                        int q = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
                        q = type == GL_TYPE_Q5_0 ? (q | (int)((qh >> e) & 1) << 4) - 16 : q - 8;
                        dot += q * ch.q[e / 2][2 * j + e % 2];
                    }
                    const float sc = gl_fp16_to_fp32(h) * ch.d[j];
                    lane[j] = (float)dot * sc;
                }
                volatile float s8[8], s4[4], s2[2];
                for (int i = 0; i < 8; i++) s8[i] = lane[i] + lane[i + 8];
                for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
                for (int i = 0; i < 2; i++) s2[i] = s4[i] + s4[i + 2];
                want[(size_t)t * (size_t)n_rows + (size_t)r] = s2[0] + s2[1];
            }
        }
        for (int k = 0; k < 3; k++) {
            matmul_bits("auto", 1, 16, &w, x, counts[k], got);
            for (int i = 0; i < counts[k] * (int)n_rows; i++)
                ck_assert_msg(got[i] == want[i], "%s %d tokens, output %d: %.9g, folded offset gives %.9g",
                              gl_type_get(type)->name, counts[k], i, (double)got[i], (double)want[i]);
        }
        kern_unpack(&w);
        free(data), free(raw), free(x), free(want), free(got);
    }
}
END_TEST

/* 8-bit activations through the pool, packed or not: a token alone gives
 * the batch's bits on one or two threads, and the result stays within the
 * coarse rounding of the scalar path's. Row lengths of 20 and 28 blocks are
 * Gemma 3's and Qwen2.5's. */

START_TEST(matmul_x8_is_batch_and_thread_invariant) {
    static const uint32_t types[] = {GL_TYPE_Q5_0, GL_TYPE_Q5_1, GL_TYPE_Q4_0, GL_TYPE_Q8_0, GL_TYPE_Q4_K, GL_TYPE_Q6_K,
                                     GL_TYPE_Q5_K};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int pack = 0; pack < 2; pack++) {
            uint32_t type = types[ti];
            int64_t n_rows = 203, n_cols = gl_type_get(type)->block_size == 256 ? 768 : ti % 2 ? 896 : 640;
            int n_tok = 11;
            uint8_t *data;
            gl_tensor w = random_tensor(type, n_rows, n_cols, &data);
            if (pack) ck_assert_int_eq(kern_pack(&w), 0);
            float *x = malloc((size_t)n_tok * (size_t)n_cols * sizeof *x);
            fill_acts(x, (int64_t)n_tok * n_cols);
            x[5] = 0.5f;
            float *all = malloc((size_t)n_tok * (size_t)n_rows * sizeof *all), *one = malloc((size_t)n_rows * sizeof *one);
            float *ref = malloc((size_t)n_tok * (size_t)n_rows * sizeof *ref);
            matmul_bits("scalar", 1, 8, &w, x, n_tok, ref);
            matmul_bits("auto", 2, 8, &w, x, n_tok, all);
            for (int t = 0; t < n_tok; t++) {
                matmul_bits("auto", 1 + t % 2, 8, &w, x + (size_t)t * (size_t)n_cols, 1, one);
                ck_assert_msg(!memcmp(one, all + (size_t)t * (size_t)n_rows, (size_t)n_rows * sizeof *one),
                              "%s 8-bit: token %d alone differs from the batch", gl_type_get(type)->name, t);
            }
            float maxref, maxdiff = max_diff(ref, all, (size_t)n_tok * (size_t)n_rows, &maxref);
            ck_assert_msg(maxdiff <= 2e-2f * maxref, "%s 8-bit: fast vs scalar max diff %g of %g",
                          gl_type_get(type)->name, maxdiff, maxref);
            kern_unpack(&w);
            free(data), free(x), free(all), free(one), free(ref);
        }
}
END_TEST

/* ---- AMX K-quant rows ------------------------------------------------------------
 * Prompt-sized calls of packed Q4_K, Q5_K and Q6_K take AMX, smaller ones
 * the VNNI tiles: both must give the same bits, or a sequence's logits
 * would depend on how many tokens shared its call. */

/* AMX rows vs the avx512 packed rows on the same packed weights and
 * activations, memcmp-equal; also for a row range that starts off the
 * 16-row tiles. */
static void amx_case(uint32_t type, bool x8, int64_t n_rows, int64_t n_cols, int n_tok) {
    const kern_impl *vnni = kern_impl_avx512();
    const kern_impl *amx_impl = kern_impl_amx();
    kern_amx_rows_fn amx = x8 ? amx_impl->amx_rows_x8[type] : amx_impl->amx_rows[type];
    ck_assert_ptr_nonnull(amx);
    size_t row_bytes = gl_type_row_bytes(type, n_cols);
    uint8_t *w = malloc((size_t)n_rows * row_bytes);
    gl_tensor wt = {.type = type, .n_cols = n_cols, .n_rows = n_rows, .data = w, .n_bytes = n_rows * row_bytes};
    fill_weights(type, w, n_rows, n_cols);
    ck_assert_int_eq(kern_set_backend("avx512"), 0);
    ck_assert_int_eq(kern_pack(&wt), 0);
    kern_set_backend("auto");
    ck_assert_ptr_nonnull(wt.packed);
    float *x = malloc((size_t)n_tok * (size_t)n_cols * sizeof *x);
    fill_acts(x, (int64_t)n_tok * n_cols);
    const int64_t nb = n_cols / 256;
    size_t vs = (size_t)nb * (x8 ? sizeof(kq8_k) : sizeof(kq16_k));
    size_t as = (size_t)nb * (x8 ? sizeof(kqa8_k) : sizeof(kqa16_k)) / KQA_GROUP;
    int n_groups = (n_tok + KQA_GROUP - 1) / KQA_GROUP;
    size_t av_bytes = kern_k16_act_bytes(vs, n_cols, n_tok);
    uint8_t *av = aligned_alloc(64, (av_bytes + 63) & ~(size_t)63), *aa = calloc((size_t)n_groups * KQA_GROUP, as);
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (size_t)t * (size_t)n_cols;
        if (x8) kern_quantize_k8(vnni, xt, (kq8_k *)(av + (size_t)t * vs), n_cols);
        else kern_quantize_k16(vnni, xt, (kq16_k *)(av + (size_t)t * vs), n_cols);
    }
    if (!x8) kern_turn_k16(vnni, av, n_tok, vs, n_cols);
    for (int t = 0; t < n_tok; t += KQA_GROUP)
        kern_quantize_qa(vnni, x + (size_t)t * (size_t)n_cols, n_cols, n_tok - t < KQA_GROUP ? n_tok - t : KQA_GROUP,
                         aa + (size_t)t * as, x8);
    size_t n_out = (size_t)n_tok * (size_t)n_rows;
    float *ov = malloc(n_out * sizeof *ov), *oa = malloc(n_out * sizeof *oa);
    memset(ov, 0xff, n_out * sizeof *ov);
    memset(oa, 0xee, n_out * sizeof *oa);
    kern_rows_fn fv = x8 ? vnni->packed_rows_x8[type] : vnni->packed_rows[type];
    fv(wt.packed, row_bytes, (int)n_rows, n_cols, av, vs, n_tok, ov, (size_t)n_rows);
    uint8_t *scratch = malloc(KERN_AMX_SCRATCH(n_cols));
    amx(&wt, 0, n_rows, aa, as, n_tok, oa, (size_t)n_rows, scratch);
    for (size_t i = 0; i < n_out; i++)
        ck_assert_msg(!memcmp(&ov[i], &oa[i], sizeof *ov), "%s%s %lld x %lld, %d tokens: token %zu row %zu: amx %.9g, vnni %.9g",
                      gl_type_get(type)->name, x8 ? " x8" : "", (long long)n_rows, (long long)n_cols, n_tok,
                      i / (size_t)n_rows, i % (size_t)n_rows, oa[i], ov[i]);
    if (n_rows > 3) { /* rows 3.. alone */
        memset(oa, 0xee, n_out * sizeof *oa);
        amx(&wt, 3, n_rows, aa, as, n_tok, oa, (size_t)n_rows, scratch);
        for (int t = 0; t < n_tok; t++)
            ck_assert_msg(!memcmp(ov + (size_t)t * n_rows + 3, oa + (size_t)t * n_rows + 3, (size_t)(n_rows - 3) * sizeof *ov),
                          "%s%s: rows from 3 differ (token %d)", gl_type_get(type)->name, x8 ? " x8" : "", t);
    }
    kern_unpack(&wt);
    free(w), free(x), free(av), free(aa), free(ov), free(oa), free(scratch);
}

START_TEST(amx_k_rows_match_vnni) {
    if (!kern_impl_amx()) {
        printf("SKIP amx_k_rows_match_vnni: no AMX on this CPU/OS (or GENLOOP_AMX=0)\n");
        return;
    }
    static const uint32_t types[] = {GL_TYPE_Q4_K, GL_TYPE_Q5_K, GL_TYPE_Q6_K};
    for (size_t ti = 0; ti < 3; ti++)
        for (int x8 = 0; x8 < 2; x8++) {
            for (int n_tok = 1; n_tok <= 40; n_tok++) amx_case(types[ti], x8, 37, n_tok % 2 ? 768 : 256, n_tok);
            /* up to 22 super-blocks: more than a step's chunk (AMX_CHUNK); 1280 the longest rows of the
             * short kernel at 8 bits, the long kernel's at 16 */
            static const int64_t cols[] = {1280, 2048, 4352, 5632};
            static const int toks[] = {15, 16, 17, 64, 100};
            for (size_t c = 0; c < 4; c++)
                for (size_t n = 0; n < 5; n++) amx_case(types[ti], x8, c == 2 ? 16 : 21, cols[c], toks[n]);
            amx_case(types[ti], x8, 5, 512, 33);
            amx_case(types[ti], x8, 5, 1024, 1); /* a one-token row alone: Q4_K's super-blocks two at a time */
        }
    /* Q4_K's passes (simd_amx_k.h, amx_q4k_rows): 19 row tiles, the last of 12 rows, in passes of 8; a
     * pass of one row tile (36 super-blocks); more token groups than the block sums' room (42 > 40) */
    for (int x8 = 0; x8 < 2; x8++) {
        amx_case(GL_TYPE_Q4_K, x8, 300, 768, 40);
        amx_case(GL_TYPE_Q4_K, x8, 21, 9216, 20);
    }
    amx_case(GL_TYPE_Q4_K, false, 17, 9216, 660);
}
END_TEST

/* Through the pool: a prompt-sized call (AMX where there is) gives each
 * token the bits it gets alone (VNNI), at both activation widths. */
START_TEST(matmul_k_prompt_is_batch_invariant) {
    static const uint32_t types[] = {GL_TYPE_Q4_K, GL_TYPE_Q5_K, GL_TYPE_Q6_K};
    for (size_t ti = 0; ti < 3; ti++) {
        check_packed_batch_invariant(types[ti], 8, 150, 1280, 37);
        check_packed_batch_invariant(types[ti], 12, 150, 1280, 37); /* the K-quants' 16-bit tiles */
        check_packed_batch_invariant(types[ti], 16, 150, 5120, 150); /* 16-bit 5120: token blocks of 112 */
    }
    /* Q4_K's VNNI prompt paths: 16-token groups (q4_k_tok_rows; 4-row tiles and the last 1 or 3 rows),
     * then 2 x 8 tiles by panels (prompt_panels), then the rest; rows past KQT_MAX_SB super-blocks 2 x 8 alone */
    check_packed_batch_invariant(GL_TYPE_Q4_K, 16, 151, 1280, 28);
    check_packed_batch_invariant(GL_TYPE_Q4_K, 16, 149, 6400, 21);
    check_packed_batch_invariant(GL_TYPE_Q4_K, 8, 151, 1280, 28);
}
END_TEST

/* 16-bit Q5 and long-row Q6_K prompts on VNNI unpack row blocks into
 * words once (words_rows): Q5 rows of whole chunks, of a padded last chunk
 * (896), of a half tail (768) and of short tails (640 as words; 608 and 544
 * odd), Q6_K rows of 19 super-blocks; 4-row tiles with 1 or 3 rows left,
 * token blocks (4864 columns: 32 tokens a block; 640: 128) with 1 or 2
 * tokens left.
 * Each token alone gives the batch's bits. */
START_TEST(matmul_words_prompt_is_batch_invariant) {
    static const int64_t cols[] = {640, 896, 768, 2048, 608, 544, 4864};
    for (int ti = 0; ti < 2; ti++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++)
            check_packed_batch_invariant(ti ? GL_TYPE_Q5_1 : GL_TYPE_Q5_0, 16, ci % 2 ? 39 : 37, cols[ci],
                                         ci == 6 ? 150 : 17 + (int)ci);
    check_packed_batch_invariant(GL_TYPE_Q6_K, 16, 39, 4864, 70);
    check_packed_batch_invariant(GL_TYPE_Q6_K, 16, 37, 4864, 17);
    check_packed_batch_invariant(GL_TYPE_Q5_1, 16, 39, 640, 150); /* short tails turned in two token blocks */
}
END_TEST

/* AVX2 prompts of block-32 types turn row blocks and token passes into
 * 16-bit words (w16_rows) from 8 tokens on; a token alone runs tile_q32.
 * Both widths, short rows (one block, 5, SmolLM2's 18) and long ones
 * (TinyLlama's 176 blocks: 20-token passes, so 70 tokens take four), odd
 * row counts (a last single-row tile), tokens past whole groups; Q4_K and
 * Q5_K of 1 to 22 super-blocks likewise (11: a row block of 16 rows). */
START_TEST(avx2_words_prompt_is_batch_invariant) {
    if (!backend_or_skip("avx2", "avx2_words_prompt_is_batch_invariant", "no AVX2 on this CPU")) return;
    static const uint32_t types[] = {GL_TYPE_Q4_0, GL_TYPE_Q4_1, GL_TYPE_Q5_0, GL_TYPE_Q5_1, GL_TYPE_Q8_0};
    static const int64_t cols[] = {32, 160, 576, 2048, 5632};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
            const int bits = ti < 2 && ci % 2 ? 12 : 16;
            check_batch_invariant_on("avx2", types[ti], bits, ci % 2 ? 37 : 40, cols[ci], ci == 4 ? 70 : ci ? 16 + (int)ci : 9);
        }
    static const int64_t k_cols[] = {256, 768, 2048, 2816, 5632};
    for (int ti = 0; ti < 2; ti++)
        for (size_t ci = 0; ci < sizeof k_cols / sizeof k_cols[0]; ci++)
            check_batch_invariant_on("avx2", ti ? GL_TYPE_Q5_K : GL_TYPE_Q4_K, 16, ci % 2 ? 37 : 40, k_cols[ci],
                                     ci == 4 ? 70 : 17 + (int)ci);
}
END_TEST

/* The AMX prompt tiles give the avx512 VNNI tiles' bits exactly, for every
 * block-32 type at both activation widths: rows of whole chunks, of a last
 * chunk of m < 16 blocks, of a half tail (x16: 5-8 blocks) and of a short
 * tail (<= 4: SmolLM2's 576, Gemma's 640), token counts around the
 * thresholds (16-bit Q4_0, Q4_1, Q8_0: 14, Q5_0: 16; 8-bit Q4_0, Q4_1, Q8_0:
 * 16; else 32) and past whole groups,
 * row counts no multiple of 16 (whole 16-row tiles of Q4_0, Q4_1, Q8_0 take amx_unpack_16). */
START_TEST(amx_matches_avx512_bit_for_bit) {
    if (!backend_or_skip("amx", "amx_matches_avx512_bit_for_bit", "no AMX on this CPU/OS (or GENLOOP_AMX=0)")) return;
    static const uint32_t types[] = {GL_TYPE_Q4_0, GL_TYPE_Q4_1, GL_TYPE_Q5_0, GL_TYPE_Q5_1, GL_TYPE_Q8_0};
    static const int64_t cols[] = {576, 640, 896, 768, 2048, 4864, 5632, 1056, 608, 64, 288};
    /* 300 tokens of 4864 and 5632 columns go in token blocks (kernels.c amx_token_block) */
    static const int toks[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 14, 15, 16, 17, 18, 20, 23, 24, 25, 31, 32, 33, 35, 40, 64, 100, 300};
    const int max_tok = 300;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
            const uint32_t type = types[ti];
            const int64_t n_cols = cols[ci], n_rows = ci % 2 ? 37 : 53;
            uint8_t *data;
            gl_tensor w = random_tensor(type, n_rows, n_cols, &data);
            ck_assert_int_eq(kern_pack(&w), 0);
            ck_assert_ptr_nonnull(w.packed);
            float *x = malloc((size_t)max_tok * (size_t)n_cols * sizeof *x);
            fill_acts(x, (int64_t)max_tok * n_cols);
            float *a = malloc((size_t)max_tok * (size_t)n_rows * sizeof *a);
            float *v = malloc((size_t)max_tok * (size_t)n_rows * sizeof *v);
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++)
                for (int bits = 8; bits <= 16; bits += 4) {
                    const int n_tok = toks[k];
                    matmul_bits("amx", 2, bits, &w, x, n_tok, a);
                    matmul_bits("avx512", 1, bits, &w, x, n_tok, v);
                    ck_assert_msg(!memcmp(a, v, (size_t)n_tok * (size_t)n_rows * sizeof *a),
                                  "%s %lld cols, %d tokens, %d-bit: AMX differs from avx512", gl_type_get(type)->name,
                                  (long long)n_cols, n_tok, bits);
                }
            kern_unpack(&w);
            free(data), free(x), free(a), free(v);
        }
}
END_TEST

/* 12-bit activations (Q4_0 and Q4_1 alone) on every backend: outputs within
 * the 12-bit grid's error of the 16-bit ones (one step is 1/2032 of a
 * block's largest magnitude, the random dots add a few), not the same bits
 * (the setting did take effect), and those of other types unchanged. */
START_TEST(twelve_bits_close_to_sixteen) {
    static const uint32_t types[] = {GL_TYPE_Q4_0, GL_TYPE_Q4_1, GL_TYPE_Q8_0};
    static const char *const backends[] = {"auto", "avx512", "avx2"};
    const int64_t n_rows = 67, n_cols = 1024;
    for (size_t ti = 0; ti < 3; ti++)
        for (int n_tok = 1; n_tok <= 64; n_tok += 63) {
            uint8_t *data;
            gl_tensor w = random_tensor(types[ti], n_rows, n_cols, &data);
            ck_assert_int_eq(kern_pack(&w), 0);
            float *x = malloc((size_t)n_tok * (size_t)n_cols * sizeof *x);
            fill_acts(x, (int64_t)n_tok * n_cols);
            x[5] = 0.5f;
            const size_t n_out = (size_t)n_tok * (size_t)n_rows;
            float *o16 = malloc(n_out * sizeof *o16), *o12 = malloc(n_out * sizeof *o12);
            for (int b = 0; b < 3; b++) {
                bool ok = kern_set_backend(backends[b]) == 0;
                kern_set_backend("auto");
                if (!ok) continue;
                matmul_bits(backends[b], 2, 16, &w, x, n_tok, o16);
                matmul_bits(backends[b], 2, 12, &w, x, n_tok, o12);
                float maxref, diff = max_diff(o16, o12, n_out, &maxref);
                if (types[ti] == GL_TYPE_Q8_0) {
                    ck_assert_msg(diff == 0.0f, "%s Q8_0 changed at 12 bits", backends[b]);
                    continue;
                }
                ck_assert_msg(diff > 0.0f && diff <= 2e-3f * maxref, "%s %s %d tokens: 12 bits off 16 by %g of %g",
                              backends[b], gl_type_get(types[ti])->name, n_tok, (double)diff, (double)maxref);
            }
            kern_unpack(&w);
            free(data), free(x), free(o16), free(o12);
        }
}
END_TEST

/* Matrices packed side by side into one kern_weights_alloc buffer (as the
 * model loader packs them) give kern_pack's bits; and decode's tiles of
 * one and two tokens (their multiply-adds spread over more accumulators)
 * give, token for token, what a token alone gives, at 16 and 8 bits. */
START_TEST(pack_into_shared_buffer_and_decode_tiles) {
    static const uint32_t types[] = {GL_TYPE_Q4_0, GL_TYPE_Q5_0, GL_TYPE_Q8_0, GL_TYPE_Q4_K, GL_TYPE_Q6_K, GL_TYPE_Q5_K};
    uint8_t *data;
    gl_tensor f = random_tensor(GL_TYPE_F32, 4, 64, &data);
    ck_assert_uint_eq(kern_pack_bytes(&f), 0); /* nothing to pack */
    free(data);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t type = types[ti];
        int64_t n_rows = 67, n_cols = gl_type_get(type)->block_size == 256 ? 768 : ti % 2 ? 896 : 640;
        gl_tensor a = random_tensor(type, n_rows, n_cols, &data), b = a;
        ck_assert_int_eq(kern_pack(&a), 0);
        size_t n = kern_pack_bytes(&b);
        if (!a.packed) { /* no packed form under this CPU's kernels */
            ck_assert_uint_eq(n, 0);
            free(data);
            continue;
        }
        ck_assert_uint_eq(kern_pack_bytes(&a), 0); /* already packed */
        ck_assert_uint_eq(n, (size_t)a.n_bytes);
        uint8_t *buf = kern_weights_alloc(64 + n);
        ck_assert_ptr_nonnull(buf);
        ck_assert_uint_eq((uintptr_t)buf % 64, 0);
        kern_pack_into(&b, buf + 64);
        ck_assert_ptr_eq(b.packed, buf + 64);
        ck_assert_msg(!memcmp(a.packed, b.packed, n), "%s: kern_pack_into differs from kern_pack", gl_type_get(type)->name);
        float *x = malloc(2 * (size_t)n_cols * sizeof *x);
        fill_acts(x, 2 * n_cols);
        float two[2][67], one[67], other[67];
        for (int bits = 16; bits >= 8; bits -= 8) {
            matmul_bits("auto", 2, bits, &b, x, 2, &two[0][0]);
            for (int t = 0; t < 2; t++) {
                matmul_bits("auto", 1, bits, &b, x + (size_t)t * (size_t)n_cols, 1, one);
                matmul_bits("auto", 2, bits, &a, x + (size_t)t * (size_t)n_cols, 1, other);
                ck_assert_msg(!memcmp(one, two[t], sizeof one), "%s %d-bit: token %d alone differs from the pair",
                              gl_type_get(type)->name, bits, t);
                ck_assert_msg(!memcmp(one, other, sizeof one), "%s %d-bit: shared buffer differs from kern_pack",
                              gl_type_get(type)->name, bits);
            }
        }
        kern_unpack(&a);
        free(buf), free(data), free(x);
    }
}
END_TEST

/* kern_matmul_n gives what one kern_matmul per matrix gives, bit for bit,
 * also when the matrices differ in type (some then run apart). */
START_TEST(matmul_n_matches_single_matmuls) {
    static const uint32_t types[][3] = {
        {GL_TYPE_Q4_0, GL_TYPE_Q4_0, GL_TYPE_Q4_0},
        {GL_TYPE_Q4_1, GL_TYPE_Q6_K, GL_TYPE_Q4_1},
        {GL_TYPE_Q8_0, GL_TYPE_Q4_0, GL_TYPE_F16},
        {GL_TYPE_Q5_0, GL_TYPE_Q5_0, GL_TYPE_Q8_0},
        {GL_TYPE_Q5_0, GL_TYPE_Q4_K, GL_TYPE_Q5_0},
    };
    static const int64_t rows[3] = {37, 8, 130};
    const int64_t n_cols = 768;
    const int n_tok = 6;
    float *x = malloc((size_t)n_tok * n_cols * sizeof *x);
    fill_acts(x, n_tok * n_cols);
    kern_pool *p = kern_pool_create(2);
    ck_assert_int_eq(kern_pool_reserve(p, (size_t)n_cols), 0);
    for (size_t k = 0; k < 3 * sizeof types / sizeof types[0]; k++) {
        /* each case at 16-bit activations, then at 8, then at 12 (Q4_0 and Q4_1 apart from the others) */
        const size_t n_cases = sizeof types / sizeof types[0];
        ck_assert_int_eq(kern_pool_set_act_bits(p, k < n_cases ? 16 : k < 2 * n_cases ? 8 : 12), 0);
        const uint32_t *type = types[k % n_cases];
        gl_tensor w[3];
        uint8_t *data[3];
        float *together[3], *apart[3];
        for (int i = 0; i < 3; i++) {
            size_t row_bytes = gl_type_row_bytes(type[i], n_cols);
            data[i] = malloc((size_t)rows[i] * row_bytes);
            fill_weights(type[i], data[i], rows[i], n_cols);
            w[i] = (gl_tensor){.type = type[i], .n_cols = n_cols, .n_rows = rows[i], .data = data[i],
                               .n_bytes = (uint64_t)rows[i] * row_bytes};
            ck_assert_int_eq(kern_pack(&w[i]), 0);
            together[i] = malloc((size_t)n_tok * rows[i] * sizeof(float));
            apart[i] = malloc((size_t)n_tok * rows[i] * sizeof(float));
            kern_matmul(p, &w[i], x, n_tok, apart[i]);
        }
        kern_matmul_n(p, 3, (const gl_tensor *[]){&w[0], &w[1], &w[2]}, x, n_tok, together);
        for (int i = 0; i < 3; i++) {
            ck_assert_msg(!memcmp(together[i], apart[i], (size_t)n_tok * rows[i] * sizeof(float)),
                          "case %zu matrix %d: kern_matmul_n differs from kern_matmul", k, i);
            kern_unpack(&w[i]);
            free(data[i]), free(together[i]), free(apart[i]);
        }
    }
    kern_pool_free(p);
    free(x);
}
END_TEST

/* swiglu: close to the formula, and each element's value independent of how many share the call. */
START_TEST(swiglu_matches_reference) {
    find_impls();
    enum { N = 37 };
    float g[N], u[N];
    for (int i = 0; i < N; i++) g[i] = rnd_uniform(-30, 30), u[i] = rnd_uniform(-2, 2);
    g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f;
    for (int k = 0; k < n_impls; k++) {
        float all[N];
        memcpy(all, g, sizeof all);
        impls[k]->swiglu(all, u, N);
        for (int i = 0; i < N; i++) {
            double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            ck_assert_msg(fabs(all[i] - want) <= 1e-6 * (1 + fabs(want)), "%s swiglu %d: %g vs %g", impls[k]->name, i,
                          all[i], want);
            float one = g[i];
            impls[k]->swiglu(&one, &u[i], 1);
            ck_assert_msg(!memcmp(&one, &all[i], sizeof one), "%s swiglu %d depends on n", impls[k]->name, i);
        }
    }
}
END_TEST

/* geglu: every implementation (the scalar one through kern_geglu) against
 * gelu_tanh in double, in both forms: 0.5 x (1 + tanh(c)) with libm's tanh
 * (which cancels to 0 for x under about -6) and its equal x / (1 + e^-2c),
 * over small to overflowing inputs,
 * never NaN, each element's value independent of how many share the call;
 * and within rounding of the float libm form the kernels replaced. */
START_TEST(geglu_matches_reference) {
    find_impls();
    enum { N = 4003 };
    static float g[N], u[N], all[N];
    for (int i = 0; i < N; i++) g[i] = rnd_uniform(-12, 12), u[i] = rnd_uniform(-2, 2);
    for (int i = 0; i < 200; i++) g[i] = rnd_uniform(-1, 1) * powf(10.0f, (float)(i % 40) - 5);
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1e13f, -1e13f, 3e38f, -3e38f, 5.5f, -5.5f};
    memcpy(g + 200, special, sizeof special);
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) u[200 + i] = 0.5f; /* products stay finite */
    kern_pool *p = kern_pool_create(2);
    for (int k = -1; k < n_impls; k++) {
        const char *name = k < 0 ? "scalar" : impls[k]->name;
        memcpy(all, g, sizeof all);
        if (k < 0) {
            ck_assert_int_eq(kern_set_backend("scalar"), 0);
            kern_geglu(p, all, u, N);
            kern_set_backend("auto");
        } else {
            impls[k]->geglu(all, u, N);
        }
        for (int i = 0; i < N; i++) {
            double x = g[i], c = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            double want = x / (1.0 + exp(-2 * c)) * u[i];
            double want_tanh = 0.5 * x * (1.0 + tanh(c)) * u[i];
            float t = g[i];
            float libm = 0.5f * t * (1.0f + tanhf(0.7978845608028654f * (t + 0.044715f * t * t * t))) * u[i];
            ck_assert_msg(!isnan(all[i]), "%s geglu %d: NaN for %g", name, i, g[i]);
            /* float rounding of the argument costs |c| ulps of the result */
            double tol = 1e-6 * fabs(want) * (1 + fabs(c)) + 1e-30;
            ck_assert_msg(fabs(all[i] - want) <= tol, "%s geglu %d (g %g): %.9g vs %.9g", name, i, g[i], all[i], want);
            ck_assert_msg(fabs(all[i] - want_tanh) <= tol + 1e-15 * fabs(x * u[i]), "%s geglu %d: %g vs tanh form %g",
                          name, i, all[i], want_tanh);
            ck_assert_msg(fabs(all[i] - libm) <= 1e-6 * (1 + fabs(libm)), "%s geglu %d: %g vs libm's %g", name, i, all[i],
                          libm);
            if (k < 0) continue;
            float one = g[i];
            impls[k]->geglu(&one, &u[i], 1);
            ck_assert_msg(!memcmp(&one, &all[i], sizeof one), "%s geglu %d depends on n", name, i);
        }
    }
    kern_pool_free(p);
}
END_TEST

/* The cache's F16 conversion gives gl_fp32_to_fp16's bits: random values,
 * ties, subnormals, overflow and the largest finite halves. */
START_TEST(to_f16_matches_reference) {
    find_impls();
    enum { N = 203 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = rnd_uniform(-4, 4) * powf(2.0f, (float)(i % 40) - 20);
    const float special[] = {0.0f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f,
                             -1e9f, 5.96e-8f, 2.98e-8f, 3e-5f, -6.1e-5f, INFINITY, -INFINITY};
    memcpy(x, special, sizeof special);
    for (int k = 0; k < n_impls; k++) {
        uint16_t y[N];
        impls[k]->to_f16(x, y, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(y[i] == gl_fp32_to_fp16(x[i]), "%s to_f16(%g) = %04x, want %04x", impls[k]->name, x[i],
                          y[i], gl_fp32_to_fp16(x[i]));
    }
}
END_TEST

START_TEST(backend_selection) {
    ck_assert_int_eq(kern_set_backend("scalar"), 0);
    ck_assert_str_eq(kern_backend(), "scalar");
    ck_assert_int_eq(kern_set_backend("no-such-thing"), -1);
    ck_assert_str_eq(kern_backend(), "scalar");
    ck_assert_int_eq(kern_set_backend("auto"), 0);
    find_impls();
    /* auto: amx where the CPU and OS allow it, else the widest SIMD */
    if (kern_impl_amx()) ck_assert_str_eq(kern_backend(), "amx");
    else if (n_impls) ck_assert_str_eq(kern_backend(), impls[n_impls - 1]->name);
    ck_assert_int_eq(kern_set_backend("amx"), kern_impl_amx() ? 0 : -1);
    kern_set_backend("auto");
}
END_TEST

/* ---- attention ------------------------------------------------------------------- */

typedef struct attn_fixture {
    int n_heads, n_kv_heads, head_dim, block_size, n_blocks, n_seqs;
    gl_kv_type type;
    int qc;                   /* Q8_0 scale group (kv_q8_chunk) */
    size_t stride;            /* bytes of one block's K (or V) */
    uint8_t *k, *v;
    int32_t *tables[3];
} attn_fixture;

static void attn_setup(attn_fixture *f) {
    int kv_dim = f->n_kv_heads * f->head_dim;
    size_t per_block = (size_t)f->block_size * (size_t)kv_dim;
    f->qc = kv_q8_chunk(f->head_dim);
    f->stride = f->type == GL_KV_Q8_0 ? kern_kv_q8_scales(kv_dim, f->block_size) + 2 * per_block / (size_t)f->qc
                : per_block * (f->type == GL_KV_F16 ? 2 : 4);
    f->k = malloc((size_t)f->n_blocks * f->stride);
    f->v = malloc((size_t)f->n_blocks * f->stride);
    if (f->type == GL_KV_Q8_0) {
        /* random codes (-127..127) and scales, so K values lie within +-3 and V within +-1 */
        for (size_t i = 0; i < (size_t)f->n_blocks * f->stride; i++) {
            f->k[i] = (uint8_t)(int8_t)((int)(rnd() % 255) - 127);
            f->v[i] = (uint8_t)(int8_t)((int)(rnd() % 255) - 127);
        }
        size_t sc = kern_kv_q8_scales(kv_dim, f->block_size);
        for (int b = 0; b < f->n_blocks; b++)
            for (size_t i = 0; i < per_block / (size_t)f->qc; i++) {
                put_f16(f->k + (size_t)b * f->stride + sc + 2 * i, rnd_uniform(0, 3.0f / 127));
                put_f16(f->v + (size_t)b * f->stride + sc + 2 * i, rnd_uniform(0, 1.0f / 127));
            }
    } else {
        size_t es = f->type == GL_KV_F16 ? 2 : 4, n = (size_t)f->n_blocks * per_block;
        for (size_t i = 0; i < n; i++) {
            float kv[2] = {rnd_uniform(-3, 3), rnd_uniform(-1, 1)};
            for (int j = 0; j < 2; j++) {
                uint8_t *dst = (j ? f->v : f->k) + i * es;
                if (f->type == GL_KV_F16) put_f16(dst, kv[j]);
                else memcpy(dst, &kv[j], 4);
            }
        }
    }
    /* Each sequence owns a shuffled third of the blocks. */
    int per = f->n_blocks / f->n_seqs;
    for (int s = 0; s < f->n_seqs; s++) {
        f->tables[s] = malloc((size_t)per * sizeof(int32_t));
        for (int i = 0; i < per; i++) f->tables[s][i] = s + f->n_seqs * i;
        for (int i = per - 1; i > 0; i--) {
            int j = (int)(rnd() % (uint32_t)(i + 1)), tmp = f->tables[s][i];
            f->tables[s][i] = f->tables[s][j];
            f->tables[s][j] = tmp;
        }
    }
}

/* Channel i of a cached position: K is channel-major within a block, V
 * position-major within each head's part of the block; Q8_0 codes are
 * laid out the same, their scales after them (kern_kv_q8_scales). */
static float kv_value(const attn_fixture *f, const uint8_t *base, int block, int slot, int i) {
    size_t kv_dim = (size_t)(f->n_kv_heads * f->head_dim), bs = (size_t)f->block_size, hd = (size_t)f->head_dim;
    bool is_k = base == f->k;
    size_t idx = is_k ? (size_t)i * bs + (size_t)slot : ((size_t)i / hd * bs + (size_t)slot) * hd + (size_t)i % hd;
    const uint8_t *blk = base + (size_t)block * f->stride;
    if (f->type == GL_KV_Q8_0) {
        size_t qc = (size_t)f->qc;
        size_t si = is_k ? (size_t)i / qc * bs + (size_t)slot
                         : ((size_t)i / hd * bs + (size_t)slot) * (hd / qc) + (size_t)i % hd / qc;
        uint16_t h;
        memcpy(&h, blk + kern_kv_q8_scales((int)kv_dim, (int)bs) + 2 * si, 2);
        return (float)(int8_t)blk[idx] * gl_fp16_to_fp32(h);
    }
    if (f->type == GL_KV_F16) {
        uint16_t h;
        memcpy(&h, blk + 2 * idx, 2);
        return gl_fp16_to_fp32(h);
    }
    float v;
    memcpy(&v, blk + 4 * idx, 4);
    return v;
}

/* blocks_per_seq past 16 gives contexts of several attention segments
 * (kern_attend_segment): seq 0's chunk then crosses from one to the next,
 * and a token alone on two threads has its segments split over them. */
static void attention_run_case(gl_kv_type type, int n_heads, int n_kv_heads, int head_dim, int blocks_per_seq, int run);
static void attention_case(gl_kv_type type, int n_heads, int n_kv_heads, int head_dim, int blocks_per_seq) {
    attention_run_case(type, n_heads, n_kv_heads, head_dim, blocks_per_seq, 11);
}

/* run: seq 0's chunk, the batch's first tokens (16 or more: a prompt's
 * tiles of 16 tokens). */
static void attention_run_case(gl_kv_type type, int n_heads, int n_kv_heads, int head_dim, int blocks_per_seq, int run) {
    attn_fixture f = {.n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim, .block_size = 16,
                      .n_blocks = 3 * blocks_per_seq, .n_seqs = 3, .type = type};
    attn_setup(&f);
    /* Prompt chunks (runs of one sequence at consecutive positions, which
     * share K/V blocks in tiles of the batch) among single decode tokens:
     * seq 0 at 20..30 across a block boundary (250..260 across a segment
     * boundary; run tokens from there), seq 2 at 0..8, seq 1 apart. */
    int T = run + 13;
    int32_t positions[64], seq_of_token[64];
    ck_assert_int_le(T, 64);
    int chunk0 = blocks_per_seq > 17 ? 250 : 20;
    for (int t = 0; t < T; t++) {
        seq_of_token[t] = t < run ? 0 : t > run && t <= run + 9 ? 2 : 1;
        positions[t] = t < run ? chunk0 + t
                       : t > run && t <= run + 9 ? t - run - 1
                                                 : (int32_t)(rnd() % (uint32_t)(blocks_per_seq * 16 - 1)) + 1;
    }
    int D = n_heads * head_dim;
    float *q = malloc((size_t)T * D * sizeof *q), *out = malloc((size_t)T * D * sizeof *out);
    float *ref = malloc((size_t)T * D * sizeof *ref), *one = malloc((size_t)D * sizeof *one);
    for (int i = 0; i < T * D; i++) q[i] = rnd_uniform(-1, 1);
    kern_attn a = {.n_tokens = T, .n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim, .q = q,
                   .out = out, .positions = positions, .seq_of_token = seq_of_token,
                   .block_tables = (const int32_t *const *)f.tables, .k = f.k, .v = f.v, .block_size = 16, .type = type, .q8_chunk = f.qc};
    const char *backends[] = {"scalar", "avx2", "auto"};
    for (int b = 0; b < 3; b++) {
        if (kern_set_backend(backends[b])) continue;
        kern_pool *p = kern_pool_create(2);
        a.out = out;
        a.n_tokens = T;
        ck_assert_int_eq(kern_attention(p, &a), 0);
        /* Straightforward softmax in double. */
        int group = n_heads / n_kv_heads;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                int kvh = h / group, pos = positions[t];
                double *s = malloc((size_t)(pos + 1) * sizeof *s), mx = -INFINITY, sum = 0;
                for (int j = 0; j <= pos; j++) {
                    int blk = f.tables[seq_of_token[t]][j / 16];
                    double d = 0;
                    for (int i = 0; i < head_dim; i++)
                        d += (double)q[t * D + h * head_dim + i] * kv_value(&f, f.k, blk, j % 16, kvh * head_dim + i);
                    s[j] = d / sqrt((double)head_dim);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j <= pos; j++) sum += (s[j] = exp(s[j] - mx));
                for (int i = 0; i < head_dim; i++) {
                    double o = 0;
                    for (int j = 0; j <= pos; j++)
                        o += s[j] * kv_value(&f, f.v, f.tables[seq_of_token[t]][j / 16], j % 16, kvh * head_dim + i);
                    o /= sum;
                    float got = out[t * D + h * head_dim + i];
                    ck_assert_msg(fabs(got - o) <= 1e-5 * (1 + fabs(o)), "%s attention t%d h%d i%d: %g vs %g",
                                  kern_backend(), t, h, i, got, o);
                }
                free(s);
            }
        /* A token alone (single-head work units) gives the batch's bits. */
        memcpy(ref, out, (size_t)T * D * sizeof *ref);
        for (int t = 0; t < T; t++) {
            kern_attn one_tok = a;
            one_tok.n_tokens = 1;
            one_tok.q = q + (size_t)t * D;
            one_tok.out = one;
            one_tok.positions = positions + t;
            one_tok.seq_of_token = seq_of_token + t;
            ck_assert_int_eq(kern_attention(p, &one_tok), 0);
            ck_assert_msg(!memcmp(one, ref + (size_t)t * D, (size_t)D * sizeof *one), "%s: token %d alone differs",
                          kern_backend(), t);
        }
        kern_pool_free(p);
    }
    kern_set_backend("auto");
    free(q), free(out), free(ref), free(one), free(f.k), free(f.v);
    for (int s = 0; s < 3; s++) free(f.tables[s]);
}

START_TEST(attention_matches_reference) {
    attention_case(GL_KV_F16, 9, 3, 64, 10);
    attention_case(GL_KV_F32, 9, 3, 64, 10);
    attention_case(GL_KV_F16, 8, 8, 8, 10);   /* stories260K-like: head_dim 8 */
    attention_case(GL_KV_F16, 4, 1, 20, 10);  /* head_dim with a tail */
    attention_case(GL_KV_F16, 16, 2, 96, 10); /* 8 heads to a group, channels in 64 + 32 */
    attention_case(GL_KV_F32, 8, 1, 128, 10);
    attention_case(GL_KV_F16, 9, 3, 64, 40);  /* SmolLM2's heads over up to 640 positions: 3 segments */
    attention_case(GL_KV_F32, 4, 2, 32, 40);
    /* a prompt run first: tiles of 16 tokens, 16 rows of single heads and 64 of 4-head groups */
    attention_run_case(GL_KV_F16, 12, 12, 64, 10, 21);
    attention_run_case(GL_KV_F16, 8, 2, 64, 40, 21);
    attention_run_case(GL_KV_F32, 14, 2, 64, 10, 21);
}
END_TEST

/* Q8_0 K/V (codes and fp16 scales) against the same double reference: the
 * AVX-512 tiles (scale groups of 32 and 16), the generic steps (groups of
 * 8 and 20, and blocks wider than 16 are not used here), every head dim. */
START_TEST(attention_q8_0_matches_reference) {
    attention_case(GL_KV_Q8_0, 9, 3, 64, 10);  /* SmolLM2 */
    attention_case(GL_KV_Q8_0, 8, 8, 8, 10);   /* stories260K-like: one scale per head row of 8 */
    attention_case(GL_KV_Q8_0, 4, 1, 20, 10);  /* scale group 20: generic steps */
    attention_case(GL_KV_Q8_0, 16, 2, 96, 10); /* channels in 64 + 32 */
    attention_case(GL_KV_Q8_0, 8, 1, 128, 10);
    attention_case(GL_KV_Q8_0, 4, 2, 256, 10); /* gemma3's head dim */
    attention_case(GL_KV_Q8_0, 4, 2, 48, 10);  /* scale group 24 */
    attention_case(GL_KV_Q8_0, 9, 3, 64, 40);  /* 3 segments */
    attention_run_case(GL_KV_Q8_0, 8, 2, 64, 10, 21); /* 64 rows: K/V as floats once for the tiles */
}
END_TEST

static Suite *kernels_suite(void) {
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, quantizers_match_reference);
    tcase_add_test(tc, amx_form_matches_per_token_rows);
    tcase_add_test(tc, quant_kernels_match_reference);
    tcase_add_test(tc, float_kernels_match_reference);
    tcase_add_test(tc, matmul_is_batch_and_thread_invariant);
    tcase_add_test(tc, decode_segments_cover_every_row_once);
    tcase_add_test(tc, matmul_decode_split_is_batch_invariant);
    tcase_add_test(tc, decode_two_row_tiles_are_batch_invariant);
    tcase_add_test(tc, offset_folds_into_integer_dot);
    tcase_add_test(tc, decode_prefetch_follows_weight_stream);
    tcase_add_test(tc, matmul_x8_is_batch_and_thread_invariant);
    tcase_add_test(tc, matmul_n_matches_single_matmuls);
    tcase_add_test(tc, amx_k_rows_match_vnni);
    tcase_add_test(tc, matmul_k_prompt_is_batch_invariant);
    tcase_add_test(tc, matmul_words_prompt_is_batch_invariant);
    tcase_add_test(tc, avx2_words_prompt_is_batch_invariant);
    tcase_add_test(tc, amx_matches_avx512_bit_for_bit);
    tcase_add_test(tc, twelve_bits_close_to_sixteen);
    tcase_add_test(tc, pack_into_shared_buffer_and_decode_tiles);
    tcase_add_test(tc, swiglu_matches_reference);
    tcase_add_test(tc, geglu_matches_reference);
    tcase_add_test(tc, to_f16_matches_reference);
    tcase_add_test(tc, backend_selection);
    tcase_add_test(tc, attention_matches_reference);
    tcase_add_test(tc, attention_q8_0_matches_reference);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(kernels_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
