/* test_quant.c -- half/bfloat16 conversions, the type table, and the scalar
 * reference dequantizers: one hand-built block per type with expected values
 * worked out by hand, then random blocks checking vec_dot against to_float. */
#include "quant.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------- */

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Dequantize one block of type `type` into out (block_size floats). */
static void dequant(uint32_t type, const uint8_t *block, float *out) {
    const gl_type_traits *t = gl_type_get(type);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(t->to_float);
    t->to_float(block, out, t->block_size);
}

/* Asserts out[i] == want for every i in [from, to) except those listed in skip. */
static void expect_run(const float *out, int from, int to, float want, const int *skip, int n_skip) {
    for (int i = from; i < to; i++) {
        bool skipped = false;
        for (int k = 0; k < n_skip; k++) skipped |= skip[k] == i;
        if (!skipped) ck_assert_msg(out[i] == want, "element %d: got %g, want %g", i, out[i], want);
    }
}

#define EXPECT(out, i, want) ck_assert_msg((out)[i] == (want), "element %d: got %g, want %g", i, (out)[i], (double)(want))

/* ---- fp16 / bf16 ---------------------------------------------------------- */

/* Value of half bit pattern h computed from the IEEE definition in double. */
static double half_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0) v = ldexp(mant, -24);
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

START_TEST(fp16_to_fp32_all_values) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gl_fp16_to_fp32((uint16_t)h);
        double want = half_value((uint16_t)h);
        if (isnan(want)) {
            ck_assert_msg(isnan(f), "half %04x should be nan", h);
            ck_assert_int_eq(float_bits(f) >> 31, h >> 15);
            continue;
        }
        ck_assert_msg((double)f == want, "half %04x: got %a want %a", h, f, want);
        ck_assert_int_eq(float_bits(f) >> 31, h >> 15); /* keeps the sign of -0 */
        /* every finite half and infinity comes back unchanged */
        ck_assert_msg(gl_fp32_to_fp16(f) == h, "half %04x round trip gave %04x", h, gl_fp32_to_fp16(f));
    }
}
END_TEST

/* Round f to the nearest half value (ties to even) with double arithmetic:
 * halves are integer multiples of a power-of-two step that depends only on
 * the magnitude, so rounding is rint() of f / step. */
static double round_to_half(float f) {
    double a = fabs((double)f);
    int e;
    frexp(a, &e); /* a = m * 2^e, 0.5 <= m < 1 */
    int step_exp = (e - 1 < -14 ? -14 : e - 1) - 10;
    double r = ldexp(rint(ldexp(a, -step_exp)), step_exp); /* default mode: nearest even */
    if (r > 65504) r = INFINITY;
    return signbit(f) ? -r : r;
}

static void check_fp32_to_fp16(float f) {
    uint16_t h = gl_fp32_to_fp16(f);
    if (isnan(f)) {
        ck_assert_msg(isnan(gl_fp16_to_fp32(h)), "nan %08x did not stay nan", float_bits(f));
        return;
    }
    double want = round_to_half(f);
    double got = half_value(h);
    ck_assert_msg(got == want && signbit(got) == signbit(want), "f=%a (%08x): got %a (%04x) want %a", f,
                  float_bits(f), got, h, want);
}

START_TEST(fp32_to_fp16_rounding) {
    /* Around every half: the half itself, the exact midpoint to the next one
     * (a tie) and the floats just either side of that midpoint. */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (int sign = 0; sign < 2; sign++) {
            float lo = (float)half_value((uint16_t)h);
            float hi = h + 1 == 0x7c00 ? 65536.0f : (float)half_value((uint16_t)(h + 1)); /* past the max */
            float mid = (float)(((double)lo + hi) / 2); /* 12 significant bits: exact */
            if (sign) lo = -lo, mid = -mid;
            check_fp32_to_fp16(lo);
            check_fp32_to_fp16(mid);
            check_fp32_to_fp16(nextafterf(mid, 0));
            check_fp32_to_fp16(nextafterf(mid, INFINITY));
            check_fp32_to_fp16(nextafterf(mid, -INFINITY));
        }
    }
    /* A stride through every float bit pattern: all exponents, nan, inf. */
    for (uint64_t u = 0; u <= 0xffffffffu; u += 9973) check_fp32_to_fp16(bits_float((uint32_t)u));
    float specials[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e10f, INFINITY, -INFINITY,
                        5.9604645e-8f /* 2^-24 */, 2.9802322e-8f /* 2^-25: tie, rounds to 0 */,
                        2.9802326e-8f /* just above: 2^-24 */, 6.1035156e-5f /* smallest normal */};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) check_fp32_to_fp16(specials[i]);
    ck_assert_int_eq(gl_fp32_to_fp16(1.0f), 0x3c00);
    ck_assert_int_eq(gl_fp32_to_fp16(65520.0f), 0x7c00);
    ck_assert_int_eq(gl_fp32_to_fp16(2.9802322e-8f), 0x0000);
    ck_assert_int_eq(gl_fp32_to_fp16(-0.0f), 0x8000);
    ck_assert(isnan(gl_fp16_to_fp32(gl_fp32_to_fp16(NAN))));
}
END_TEST

START_TEST(bf16_conversions) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gl_bf16_to_fp32((uint16_t)h);
        ck_assert_int_eq(float_bits(f), h << 16); /* bf16 is the top half of a float */
        if (!isnan(f)) ck_assert_int_eq(gl_fp32_to_bf16(f), h);
        else ck_assert(isnan(gl_bf16_to_fp32(gl_fp32_to_bf16(f))));
    }
    ck_assert_int_eq(gl_fp32_to_bf16(bits_float(0x3f808000)), 0x3f80); /* tie, even stays */
    ck_assert_int_eq(gl_fp32_to_bf16(bits_float(0x3f818000)), 0x3f82); /* tie, odd rounds up */
    ck_assert_int_eq(gl_fp32_to_bf16(bits_float(0x3f808001)), 0x3f81); /* above the tie */
    ck_assert_int_eq(gl_fp32_to_bf16(bits_float(0x7f7fffff)), 0x7f80); /* FLT_MAX rounds to inf */
    /* a nan whose payload lives in the low half only must not become inf */
    ck_assert(isnan(gl_bf16_to_fp32(gl_fp32_to_bf16(bits_float(0x7f800001)))));
}
END_TEST

/* ---- type table ----------------------------------------------------------- */

START_TEST(type_table) {
    static const struct {
        uint32_t type;
        const char *name;
        int block_size, block_bytes;
        bool supported;
    } want[] = {
        {GL_TYPE_F32, "F32", 1, 4, true},      {GL_TYPE_F16, "F16", 1, 2, true},
        {GL_TYPE_BF16, "BF16", 1, 2, true},    {GL_TYPE_Q4_0, "Q4_0", 32, 18, true},
        {GL_TYPE_Q4_1, "Q4_1", 32, 20, true},  {GL_TYPE_Q5_0, "Q5_0", 32, 22, true},
        {GL_TYPE_Q5_1, "Q5_1", 32, 24, true},  {GL_TYPE_Q8_0, "Q8_0", 32, 34, true},
        {GL_TYPE_Q8_1, "Q8_1", 32, 36, false}, {GL_TYPE_Q2_K, "Q2_K", 256, 84, true},
        {GL_TYPE_Q3_K, "Q3_K", 256, 110, true}, {GL_TYPE_Q4_K, "Q4_K", 256, 144, true},
        {GL_TYPE_Q5_K, "Q5_K", 256, 176, true}, {GL_TYPE_Q6_K, "Q6_K", 256, 210, true},
        {GL_TYPE_Q8_K, "Q8_K", 256, 292, true}, {GL_TYPE_I8, "I8", 1, 1, false},
        {GL_TYPE_I32, "I32", 1, 4, false},     {GL_TYPE_F64, "F64", 1, 8, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const gl_type_traits *t = gl_type_get(want[i].type);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(t->name, want[i].name);
        ck_assert_int_eq(t->block_size, want[i].block_size);
        ck_assert_int_eq(t->block_bytes, want[i].block_bytes);
        ck_assert_int_eq(gl_type_supported(want[i].type), want[i].supported);
        ck_assert_int_eq(t->to_float != NULL, want[i].supported);
        ck_assert_int_eq(t->vec_dot != NULL, want[i].supported);
    }
    /* ids ggml removed or never had, and ids past the table */
    uint32_t unknown[] = {4, 5, 16, 17, 23, 29, 31, 39, 40, 41, 1000, 0xffffffffu};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        ck_assert_ptr_null(gl_type_get(unknown[i]));
        ck_assert(!gl_type_supported(unknown[i]));
        ck_assert_uint_eq(gl_type_row_bytes(unknown[i], 256), 0);
    }
}
END_TEST

START_TEST(row_bytes) {
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_F32, 7), 28);
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_F16, 7), 14);
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_BF16, 768), 1536);
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_Q4_0, 4096), 128 * 18);
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_Q8_0, 64), 68);
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_Q6_K, 512), 420);
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_Q4_K, 2048), 8 * 144);
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_Q4_0, 0), 0);
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_Q4_0, 33), 0);  /* not whole blocks */
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_Q2_K, 128), 0); /* half a super-block */
    ck_assert_uint_eq(gl_type_row_bytes(GL_TYPE_F32, -4), 0);
}
END_TEST

/* ---- hand-built blocks ---------------------------------------------------- */

/* f16 bit patterns used below, little-endian byte pairs:
 * 0x3c00 = 1.0, 0x3800 = 0.5, 0x3400 = 0.25, 0x3000 = 0.125, 0x4000 = 2.0,
 * 0xbc00 = -1.0. */

START_TEST(block_f16) {
    /* 0x3c00 = 1.0; 0xc000 = -2.0; 0x3500 = 2^-2 * (1 + 256/1024) = 0.3125;
     * 0x0001 = 2^-24 (smallest subnormal) */
    const uint8_t w[] = {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x35, 0x01, 0x00};
    float out[4];
    gl_type_get(GL_TYPE_F16)->to_float(w, out, 4);
    ck_assert(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.3125f && out[3] == ldexpf(1, -24));
    const float x[] = {2, 1, 4, 0};
    ck_assert(gl_type_get(GL_TYPE_F16)->vec_dot(w, x, 4) == 2 - 2 + 1.25f); /* 1.25 exact */
}
END_TEST

START_TEST(block_bf16) {
    /* 0x3f80 = 1.0; 0xc040 = -(1 + 0.5) * 2 = -3.0; 0x3e00 = 0.125 */
    const uint8_t w[] = {0x80, 0x3f, 0x40, 0xc0, 0x00, 0x3e};
    float out[3];
    gl_type_get(GL_TYPE_BF16)->to_float(w, out, 3);
    ck_assert(out[0] == 1.0f && out[1] == -3.0f && out[2] == 0.125f);
    const float x[] = {1, 1, 8};
    ck_assert(gl_type_get(GL_TYPE_BF16)->vec_dot(w, x, 3) == -1.0f);
}
END_TEST

START_TEST(block_q4_0) {
    /* d = 0.5; qs[j] = j | (15 - j) << 4, so element j (low nibble) is
     * (j - 8) * 0.5 and element 16 + j (high nibble) is (15 - j - 8) * 0.5. */
    const uint8_t b[18] = {0x00, 0x38, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87,
                           0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
    const float want[32] = {-4.0, -3.5, -3.0, -2.5, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0,
                            1.5,  2.0,  2.5,  3.0,  3.5,  3.5,  3.0,  2.5,  2.0, 1.5, 1.0,
                            0.5,  0.0,  -0.5, -1.0, -1.5, -2.0, -2.5, -3.0, -3.5, -4.0};
    float out[32];
    dequant(GL_TYPE_Q4_0, b, out);
    for (int i = 0; i < 32; i++) EXPECT(out, i, want[i]);
}
END_TEST

START_TEST(block_q4_1) {
    /* d = 0.25, m = -1.0. qs[0] = 0x21: element 0 = 1*0.25 - 1 = -0.75,
     * element 16 = 2*0.25 - 1 = -0.5. qs[15] = 0xf3: element 15 = 3*0.25 - 1
     * = -0.25, element 31 = 15*0.25 - 1 = 2.75. Every other quant is 0: -1. */
    uint8_t b[20] = {0x00, 0x34, 0x00, 0xbc};
    b[4 + 0] = 0x21;
    b[4 + 15] = 0xf3;
    float out[32];
    dequant(GL_TYPE_Q4_1, b, out);
    EXPECT(out, 0, -0.75f);
    EXPECT(out, 16, -0.5f);
    EXPECT(out, 15, -0.25f);
    EXPECT(out, 31, 2.75f);
    expect_run(out, 0, 32, -1.0f, (int[]){0, 15, 16, 31}, 4);
}
END_TEST

START_TEST(block_q5_0) {
    /* d = 1.0; qh = 0x80000001 (bits 0 and 31: the fifth bit of elements 0
     * and 31). qs[0] = 0x3f: element 0 = (15 | 16) - 16 = 15, element 16 =
     * 3 - 16 = -13. qs[15] = 0xa0: element 15 = 0 - 16 = -16, element 31 =
     * (10 | 16) - 16 = 10. All other quants are 0: -16. */
    uint8_t b[22] = {0x00, 0x3c, 0x01, 0x00, 0x00, 0x80};
    b[6 + 0] = 0x3f;
    b[6 + 15] = 0xa0;
    float out[32];
    dequant(GL_TYPE_Q5_0, b, out);
    EXPECT(out, 0, 15.0f);
    EXPECT(out, 16, -13.0f);
    EXPECT(out, 31, 10.0f);
    expect_run(out, 0, 32, -16.0f, (int[]){0, 16, 31}, 3);
}
END_TEST

START_TEST(block_q5_1) {
    /* d = 0.5, m = 2.0; qh = 0x00010000 (bit 16: the fifth bit of element
     * 16). qs[0] = 0x5a: element 0 = 10*0.5 + 2 = 7, element 16 = (5 | 16)
     * * 0.5 + 2 = 12.5. All other quants 0: 2.0. */
    uint8_t b[24] = {0x00, 0x38, 0x00, 0x40, 0x00, 0x00, 0x01, 0x00};
    b[8 + 0] = 0x5a;
    float out[32];
    dequant(GL_TYPE_Q5_1, b, out);
    EXPECT(out, 0, 7.0f);
    EXPECT(out, 16, 12.5f);
    expect_run(out, 0, 32, 2.0f, (int[]){0, 16}, 2);
}
END_TEST

START_TEST(block_q8_0) {
    /* d = 0.125; qs = 127, -128, -1, 8, then zeros:
     * 15.875, -16, -0.125, 1, 0... */
    uint8_t b[34] = {0x00, 0x30, 0x7f, 0x80, 0xff, 0x08};
    float out[32];
    dequant(GL_TYPE_Q8_0, b, out);
    EXPECT(out, 0, 15.875f);
    EXPECT(out, 1, -16.0f);
    EXPECT(out, 2, -0.125f);
    EXPECT(out, 3, 1.0f);
    expect_run(out, 4, 32, 0.0f, NULL, 0);
}
END_TEST

START_TEST(block_q2_k) {
    /* Layout: scales[16] @0, qs[64] @16, d @80, dmin @82. d = 1.0, dmin = 0.5.
     * scales[0] = 0x21 (scale 1, min 2), scales[5] = 0xf2 (scale 2, min 15),
     * scales[15] = 0x03 (scale 3, min 0); the rest 0, so those sub-blocks
     * are all 0. Element i has its 2 bits at 2*((i%128)/32) of
     * qs[32*(i/128) + i%32].
     *  - qs[0] = 0x03: element 0 = 1*3 - 0.5*2 = 2; rest of elements 0..15: -1
     *  - qs[16] = 0x20 (bits 4..5 = 2): element 80 (sub-block 5) =
     *    2*2 - 0.5*15 = -3.5; rest of 80..95: -7.5
     *  - qs[63] = 0xc0 (bits 6..7 = 3): element 128+96+31 = 255 = 3*3 - 0 = 9;
     *    rest of 240..255: 0 */
    uint8_t b[84] = {0};
    b[0] = 0x21;
    b[5] = 0xf2;
    b[15] = 0x03;
    b[16 + 0] = 0x03;
    b[16 + 16] = 0x20;
    b[16 + 63] = 0xc0;
    b[80] = 0x00, b[81] = 0x3c;
    b[82] = 0x00, b[83] = 0x38;
    float out[256];
    dequant(GL_TYPE_Q2_K, b, out);
    EXPECT(out, 0, 2.0f);
    expect_run(out, 1, 16, -1.0f, NULL, 0);
    EXPECT(out, 80, -3.5f);
    expect_run(out, 81, 96, -7.5f, NULL, 0);
    EXPECT(out, 255, 9.0f);
    expect_run(out, 16, 80, 0.0f, NULL, 0);
    expect_run(out, 96, 255, 0.0f, NULL, 0);
}
END_TEST

START_TEST(block_q3_k) {
    /* Layout: hmask[32] @0, qs[64] @32, scales[12] @96, d @108. d = 0.5.
     * Scale s = (low nibble | high 2 bits << 4) - 32, with the low nibble in
     * scales[s%8] (low for s<8, high for s>=8) and the 2 high bits at bit
     * 2*(s/4) of scales[8 + s%4]. scales[8..11] = 0xaa gives every scale
     * high bits 2, i.e. 32 - 32 = 0, except:
     *  - scales[0] = 0x01: scale 0 = (1 | 2<<4) - 32 = 1
     *  - scales[5] = 0x70 and scales[9] = 0x2a (bits 6..7 = 0):
     *    scale 13 = 7 - 32 = -25
     * q = 2 low bits - (hmask bit set ? 0 : 4).
     *  - qs[0] = 0x02, hmask[0] = 0x01: element 0 = 0.5*1*(2 - 0) = 1.0
     *  - hmask[1] = 0x01: element 1 = 0.5*1*(0 - 0) = 0
     *  - the rest of 0..15: 0.5*1*(0 - 4) = -2
     *  - element 223 = 128 + 64 + 31: low bits at bits 4..5 of qs[63] = 0x30
     *    (3), high bit at bit 6 of hmask[31] = 0x40: 0.5*-25*3 = -37.5
     *  - element 222: hmask[30] = 0x40, low bits 0: 0
     *  - the rest of 208..223 (sub-block 13): 0.5*-25*(0 - 4) = 50 */
    uint8_t b[110] = {0};
    b[0] = 0x01, b[1] = 0x01, b[30] = 0x40, b[31] = 0x40;
    b[32 + 0] = 0x02;
    b[32 + 63] = 0x30;
    b[96 + 0] = 0x01;
    b[96 + 5] = 0x70;
    b[96 + 8] = 0xaa, b[96 + 9] = 0x2a, b[96 + 10] = 0xaa, b[96 + 11] = 0xaa;
    b[108] = 0x00, b[109] = 0x38;
    float out[256];
    dequant(GL_TYPE_Q3_K, b, out);
    EXPECT(out, 0, 1.0f);
    EXPECT(out, 1, 0.0f);
    expect_run(out, 2, 16, -2.0f, NULL, 0);
    EXPECT(out, 222, 0.0f);
    EXPECT(out, 223, -37.5f);
    expect_run(out, 208, 222, 50.0f, NULL, 0);
    expect_run(out, 16, 208, 0.0f, NULL, 0);
    expect_run(out, 224, 256, 0.0f, NULL, 0);
}
END_TEST

START_TEST(block_q4_k) {
    /* Layout: d @0, dmin @2, scales[12] @4, qs[128] @16. d = 1.0, dmin = 0.25.
     * Sub-block s < 4: scale = scales[s] & 63, min = scales[s+4] & 63;
     * s >= 4: scale = (scales[s+4] & 15) | (scales[s-4] >> 6) << 4,
     *         min = (scales[s+4] >> 4) | (scales[s] >> 6) << 4.
     * scales[0] = 0x42, scales[4] = 0x83, scales[8] = 0x51:
     *  sub-block 0: scale 2, min 3;  sub-block 4: scale 1 | 1<<4 = 17,
     *  min 5 | 2<<4 = 37; all others 0.
     * Sub-block s is nibble s%2 of qs[32*(s/2) .. +31].
     *  - qs[0] = 0x0f: element 0 = 2*15 - 0.25*3 = 29.25; rest of 0..31: -0.75
     *  - qs[64+5] = 0x03: element 128+5 = 17*3 - 0.25*37 = 41.75;
     *    rest of 128..159: -9.25 */
    uint8_t b[144] = {0x00, 0x3c, 0x00, 0x34};
    b[4 + 0] = 0x42, b[4 + 4] = 0x83, b[4 + 8] = 0x51;
    b[16 + 0] = 0x0f;
    b[16 + 64 + 5] = 0x03;
    float out[256];
    dequant(GL_TYPE_Q4_K, b, out);
    EXPECT(out, 0, 29.25f);
    expect_run(out, 1, 32, -0.75f, NULL, 0);
    EXPECT(out, 133, 41.75f);
    expect_run(out, 128, 160, -9.25f, (int[]){133}, 1);
    expect_run(out, 32, 128, 0.0f, NULL, 0);
    expect_run(out, 160, 256, 0.0f, NULL, 0);
}
END_TEST

START_TEST(block_q5_k) {
    /* Layout: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48.
     * d = 0.5, dmin = 1.0. scales[3] = 0x04, scales[7] = 0x01: sub-block 3
     * scale 4, min 1. scales[11] = 0x23: sub-block 7 scale 3, min 2. Others 0.
     * The fifth bit of element l of sub-block s is bit s of qh[l].
     *  - sub-block 3 = elements 96..127, high nibbles of qs[32..63]:
     *    qs[32] = 0xa0, qh[0] = 0x08: element 96 = 0.5*4*(10|16) - 1 = 51;
     *    rest: -1
     *  - sub-block 7 = elements 224..255: qh[31] = 0x80: element 255 =
     *    0.5*3*16 - 2 = 22; rest: -2 */
    uint8_t b[176] = {0x00, 0x38, 0x00, 0x3c};
    b[4 + 3] = 0x04, b[4 + 7] = 0x01, b[4 + 11] = 0x23;
    b[16 + 0] = 0x08, b[16 + 31] = 0x80;
    b[48 + 32] = 0xa0;
    float out[256];
    dequant(GL_TYPE_Q5_K, b, out);
    EXPECT(out, 96, 51.0f);
    expect_run(out, 97, 128, -1.0f, NULL, 0);
    EXPECT(out, 255, 22.0f);
    expect_run(out, 224, 255, -2.0f, NULL, 0);
    expect_run(out, 0, 96, 0.0f, NULL, 0);
    expect_run(out, 128, 224, 0.0f, NULL, 0);
}
END_TEST

START_TEST(block_q6_k) {
    /* Layout: ql[128] @0, qh[64] @128, scales[16] (int8) @192, d @208.
     * d = 0.5, scales[0] = 2, scales[15] = -3 (0xfd), others 0.
     * Element 64n + k (k < 64) of half h: low nibble = nibble n of ql[64h + k];
     * element 32s + l: high 2 bits = bits 2s..2s+1 of qh[32h + l].
     *  - ql[0] = 0x05, qh[0] = 0x02: element 0 = 0.5*2*((5 | 2<<4) - 32) = 5;
     *    rest of 0..15: 0.5*2*(0 - 32) = -32
     *  - element 255 = half 1, 64*1 + 63: ql[127] = 0xf0 (high nibble 15),
     *    qh[63] = 0xc0 (bits 6..7 = 3): 0.5*-3*(63 - 32) = -46.5;
     *    rest of 240..255: 0.5*-3*(0 - 32) = 48 */
    uint8_t b[210] = {0};
    b[0] = 0x05, b[127] = 0xf0;
    b[128 + 0] = 0x02, b[128 + 63] = 0xc0;
    b[192 + 0] = 0x02, b[192 + 15] = 0xfd;
    b[208] = 0x00, b[209] = 0x38;
    float out[256];
    dequant(GL_TYPE_Q6_K, b, out);
    EXPECT(out, 0, 5.0f);
    expect_run(out, 1, 16, -32.0f, NULL, 0);
    EXPECT(out, 255, -46.5f);
    expect_run(out, 240, 255, 48.0f, NULL, 0);
    expect_run(out, 16, 240, 0.0f, NULL, 0);
}
END_TEST

START_TEST(block_q8_k) {
    /* Layout: d (f32) @0, qs[256] @4, bsums @260. d = 0.5 (0x3f000000).
     * qs[0] = -128: -64; qs[255] = 100: 50; the rest 0. */
    uint8_t b[292] = {0x00, 0x00, 0x00, 0x3f};
    b[4 + 0] = 0x80;
    b[4 + 255] = 100;
    float out[256];
    dequant(GL_TYPE_Q8_K, b, out);
    EXPECT(out, 0, -64.0f);
    EXPECT(out, 255, 50.0f);
    expect_run(out, 1, 255, 0.0f, NULL, 0);
}
END_TEST

/* ---- random blocks: vec_dot agrees with to_float -------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static float rng_float(void) { return (float)rng_u32() / 4294967296.0f * 2 - 1; } /* [-1, 1) */

static void put_f16(uint8_t *p, float f) {
    uint16_t h = gl_fp32_to_fp16(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

/* Random quant bytes with finite, moderate scale fields (random bytes there
 * could be inf or nan). Offsets of the f16 fields follow the layouts. */
static void random_row(uint32_t type, uint8_t *row, int64_t n) {
    const gl_type_traits *t = gl_type_get(type);
    int64_t n_blocks = n / t->block_size;
    for (int64_t i = 0; i < n_blocks * t->block_bytes; i++) row[i] = (uint8_t)rng_u32();
    for (int64_t k = 0; k < n_blocks; k++) {
        uint8_t *b = row + k * t->block_bytes;
        switch (type) {
        case GL_TYPE_F16: put_f16(b, rng_float() * 4); break;
        case GL_TYPE_BF16: {
            uint16_t h = gl_fp32_to_bf16(rng_float() * 4);
            b[0] = (uint8_t)h, b[1] = (uint8_t)(h >> 8);
            break;
        }
        case GL_TYPE_Q4_0: case GL_TYPE_Q5_0: case GL_TYPE_Q8_0: put_f16(b, rng_float() * 0.1f); break;
        case GL_TYPE_Q4_1: case GL_TYPE_Q5_1: case GL_TYPE_Q4_K: case GL_TYPE_Q5_K:
            put_f16(b, rng_float() * 0.1f), put_f16(b + 2, rng_float() * 0.1f);
            break;
        case GL_TYPE_Q2_K: put_f16(b + 80, rng_float() * 0.1f), put_f16(b + 82, rng_float() * 0.1f); break;
        case GL_TYPE_Q3_K: put_f16(b + 108, rng_float() * 0.1f); break;
        case GL_TYPE_Q6_K: put_f16(b + 208, rng_float() * 0.1f); break;
        case GL_TYPE_Q8_K: {
            float d = rng_float() * 0.01f;
            memcpy(b, &d, 4);
            break;
        }
        default: ck_abort_msg("no random blocks for type %u", type);
        }
    }
}

static const uint32_t computed_types[] = {GL_TYPE_F32,  GL_TYPE_F16,  GL_TYPE_BF16, GL_TYPE_Q4_0, GL_TYPE_Q4_1,
                                          GL_TYPE_Q5_0, GL_TYPE_Q5_1, GL_TYPE_Q8_0, GL_TYPE_Q2_K, GL_TYPE_Q3_K,
                                          GL_TYPE_Q4_K, GL_TYPE_Q5_K, GL_TYPE_Q6_K, GL_TYPE_Q8_K};

START_TEST(random_vec_dot) {
    enum { N = 1024 }; /* 4 super-blocks, 32 small blocks */
    uint32_t type = computed_types[_i];
    const gl_type_traits *t = gl_type_get(type);
    static uint8_t row[N * 4];
    float w[N], x[N];
    for (int trial = 0; trial < 20; trial++) {
        if (type == GL_TYPE_F32) for (int i = 0; i < N; i++) memcpy(row + 4 * i, &(float){rng_float()}, 4);
        else random_row(type, row, N);
        for (int i = 0; i < N; i++) x[i] = rng_float();
        t->to_float(row, w, N);
        double dot = 0, mag = 0;
        for (int i = 0; i < N; i++) {
            ck_assert_msg(isfinite(w[i]), "%s element %d not finite", t->name, i);
            dot += (double)w[i] * x[i];
            mag += fabs((double)w[i] * x[i]);
        }
        /* 1e-4 relative to the sum of |terms|, the scale float rounding
         * error grows with (the plain dot can cancel to near 0). */
        float got = t->vec_dot(row, x, N);
        ck_assert_msg(fabs(got - dot) <= 1e-4 * mag, "%s trial %d: vec_dot %g, dot(to_float) %g", t->name, trial,
                      got, dot);
        /* a row is independent blocks: dequantizing a later part alone agrees */
        float tail[N];
        int64_t skip = 2 * t->block_size;
        t->to_float(row + gl_type_row_bytes(type, skip), tail, N - skip);
        ck_assert(memcmp(tail, w + skip, sizeof(float) * (size_t)(N - skip)) == 0);
    }
}
END_TEST

static Suite *quant_suite(void) {
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_add_test(tc, fp16_to_fp32_all_values);
    tcase_add_test(tc, fp32_to_fp16_rounding);
    tcase_add_test(tc, bf16_conversions);
    tcase_add_test(tc, type_table);
    tcase_add_test(tc, row_bytes);
    tcase_add_test(tc, block_f16);
    tcase_add_test(tc, block_bf16);
    tcase_add_test(tc, block_q4_0);
    tcase_add_test(tc, block_q4_1);
    tcase_add_test(tc, block_q5_0);
    tcase_add_test(tc, block_q5_1);
    tcase_add_test(tc, block_q8_0);
    tcase_add_test(tc, block_q2_k);
    tcase_add_test(tc, block_q3_k);
    tcase_add_test(tc, block_q4_k);
    tcase_add_test(tc, block_q5_k);
    tcase_add_test(tc, block_q6_k);
    tcase_add_test(tc, block_q8_k);
    tcase_add_loop_test(tc, random_vec_dot, 0, (int)(sizeof computed_types / sizeof computed_types[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    int failed = test_run_suite(quant_suite());
    return failed ? 1 : 0;
}
