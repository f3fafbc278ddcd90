/* quant.c -- GGML type table and scalar reference dequantizers / dot
 * products. Block layouts follow ggml's (see the README's format notes). */
#include "quant.h"

#include <math.h>
#include <string.h>

float gl_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) {
                mant <<= 1;
                exp--;
            }
            mant &= 0x3ff;
            bits = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t gl_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* result is subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;
        uint32_t mant = (absx & 0x7fffff) | 0x800000;
        int shift = (int)(113 - (absx >> 23)) + 13; /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float gl_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t gl_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* ---- reference dequantizers and dot products ------------------------------
 *
 * Each block type is a struct of bytes only, so it can be read at any
 * alignment; multi-byte fields are little-endian, as GGUF stores them. Every
 * type has one dequant_block_* function that turns one block into floats; the
 * row-level to_float and vec_dot are built from it, so the two can never
 * disagree about the layout. */

#define QK 32   /* elements per block of the legacy types */
#define QK_K 256 /* elements per super-block of the K-quants */

static float read_f16(const uint8_t p[2]) { return gl_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8)); }
static float read_bf16(const uint8_t p[2]) { return gl_bf16_to_fp32((uint16_t)(p[0] | p[1] << 8)); }
static float read_f32(const uint8_t p[4]) {
    uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* value = (q - 8) * d; q is the low nibble of qs[j] for j < 16, the high
 * nibble of qs[j - 16] for j >= 16. */
typedef struct {
    uint8_t d[2];      /* f16 scale */
    uint8_t qs[QK / 2]; /* 4-bit quants */
} block_q4_0;

/* value = q * d + m */
typedef struct {
    uint8_t d[2], m[2]; /* f16 scale and minimum */
    uint8_t qs[QK / 2];
} block_q4_1;

/* value = (q - 16) * d; bit j of qh is the fifth bit of element j */
typedef struct {
    uint8_t d[2];
    uint8_t qh[4]; /* u32, little-endian */
    uint8_t qs[QK / 2];
} block_q5_0;

/* value = q * d + m */
typedef struct {
    uint8_t d[2], m[2];
    uint8_t qh[4];
    uint8_t qs[QK / 2];
} block_q5_1;

/* value = q * d */
typedef struct {
    uint8_t d[2];
    int8_t qs[QK];
} block_q8_0;

/* 16 sub-blocks of 16: value = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4) */
typedef struct {
    uint8_t scales[QK_K / 16]; /* 4-bit scale (low) and min (high) per sub-block */
    uint8_t qs[QK_K / 4];      /* 2-bit quants */
    uint8_t d[2], dmin[2];     /* f16 super-block scales */
} block_q2_k;

/* 16 sub-blocks of 16: value = d * (scale6 - 32) * (q2 - (hbit ? 0 : 4)) */
typedef struct {
    uint8_t hmask[QK_K / 8]; /* high bit of each quant */
    uint8_t qs[QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];      /* 16 6-bit scales */
    uint8_t d[2];
} block_q3_k;

/* 8 sub-blocks of 32: value = d * scale6 * q - dmin * min6 */
typedef struct {
    uint8_t d[2], dmin[2];
    uint8_t scales[12]; /* 8 6-bit scales and 8 6-bit mins */
    uint8_t qs[QK_K / 2];
} block_q4_k;

/* as Q4_K with a fifth bit per quant */
typedef struct {
    uint8_t d[2], dmin[2];
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_k;

/* 16 sub-blocks of 16: value = d * scales[s] * (q - 32), q 6 bits */
typedef struct {
    uint8_t ql[QK_K / 2]; /* low 4 bits */
    uint8_t qh[QK_K / 4]; /* high 2 bits */
    int8_t scales[QK_K / 16];
    uint8_t d[2];
} block_q6_k;

/* value = d * q; bsums (sums of 16 quants) serve fast dot products only */
typedef struct {
    uint8_t d[4]; /* f32 */
    int8_t qs[QK_K];
    uint8_t bsums[QK_K / 16 * 2]; /* int16 */
} block_q8_k;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(block_q2_k) == 84, "q2_k layout");
_Static_assert(sizeof(block_q3_k) == 110, "q3_k layout");
_Static_assert(sizeof(block_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(block_q5_k) == 176, "q5_k layout");
_Static_assert(sizeof(block_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(block_q8_k) == 292, "q8_k layout");

static void dequant_block_f16(const void *src, float *y) { y[0] = read_f16(src); }
static void dequant_block_bf16(const void *src, float *y) { y[0] = read_bf16(src); }

static void dequant_block_q4_0(const void *src, float *y) {
    const block_q4_0 *b = src;
    float d = read_f16(b->d);
    for (int j = 0; j < QK / 2; j++) {
        y[j] = ((b->qs[j] & 0xf) - 8) * d;
        y[j + QK / 2] = ((b->qs[j] >> 4) - 8) * d;
    }
}

static void dequant_block_q4_1(const void *src, float *y) {
    const block_q4_1 *b = src;
    float d = read_f16(b->d), m = read_f16(b->m);
    for (int j = 0; j < QK / 2; j++) {
        y[j] = (b->qs[j] & 0xf) * d + m;
        y[j + QK / 2] = (b->qs[j] >> 4) * d + m;
    }
}

static uint32_t read_u32(const uint8_t p[4]) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void dequant_block_q5_0(const void *src, float *y) {
    const block_q5_0 *b = src;
    float d = read_f16(b->d);
    uint32_t qh = read_u32(b->qh);
    for (int j = 0; j < QK / 2; j++) {
        int lo = (b->qs[j] & 0xf) | ((qh >> j) & 1) << 4;
        int hi = (b->qs[j] >> 4) | ((qh >> (j + QK / 2)) & 1) << 4;
        y[j] = (lo - 16) * d;
        y[j + QK / 2] = (hi - 16) * d;
    }
}

static void dequant_block_q5_1(const void *src, float *y) {
    const block_q5_1 *b = src;
    float d = read_f16(b->d), m = read_f16(b->m);
    uint32_t qh = read_u32(b->qh);
    for (int j = 0; j < QK / 2; j++) {
        int lo = (b->qs[j] & 0xf) | ((qh >> j) & 1) << 4;
        int hi = (b->qs[j] >> 4) | ((qh >> (j + QK / 2)) & 1) << 4;
        y[j] = lo * d + m;
        y[j + QK / 2] = hi * d + m;
    }
}

static void dequant_block_q8_0(const void *src, float *y) {
    const block_q8_0 *b = src;
    float d = read_f16(b->d);
    for (int j = 0; j < QK; j++) y[j] = b->qs[j] * d;
}

/* The 2-bit quants of a 128-element half are packed four to a byte: element
 * 32*s + l of half h is bits 2s..2s+1 of qs[32*h + l]. Q3_K shares this. */
static void dequant_block_q2_k(const void *src, float *y) {
    const block_q2_k *b = src;
    float d = read_f16(b->d), dmin = read_f16(b->dmin);
    for (int i = 0; i < QK_K; i++) {
        int half = i / 128, shift = (i % 128) / 32, l = i % 32;
        int q = (b->qs[32 * half + l] >> (2 * shift)) & 3;
        uint8_t sc = b->scales[i / 16];
        y[i] = d * (sc & 0xf) * q - dmin * (sc >> 4);
    }
}

/* Scale s (6 bits): low 4 bits in the low (s < 8) or high (s >= 8) nibble of
 * scales[s % 8]; high 2 bits at bit 2*(s/4) of scales[8 + s % 4]. */
static int q3_k_scale(const uint8_t scales[12], int s) {
    int lo = s < 8 ? scales[s] & 0xf : scales[s - 8] >> 4;
    int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo | hi << 4) - 32;
}

static void dequant_block_q3_k(const void *src, float *y) {
    const block_q3_k *b = src;
    float d = read_f16(b->d);
    for (int i = 0; i < QK_K; i++) {
        int half = i / 128, shift = (i % 128) / 32, l = i % 32;
        int q = (b->qs[32 * half + l] >> (2 * shift)) & 3;
        bool hbit = (b->hmask[l] >> (i / 32)) & 1; /* bit i/32 of hmask[i % 32] */
        y[i] = d * q3_k_scale(b->scales, i / 16) * (q - (hbit ? 0 : 4));
    }
}

/* Scale and min of sub-block s of Q4_K/Q5_K: for s < 4 the low 6 bits of
 * scales[s] / scales[s + 4]; for s >= 4 a nibble of scales[s + 4] plus the
 * top 2 bits of scales[s - 4] / scales[s]. */
static void k4_scale_min(const uint8_t scales[12], int s, int *sc, int *mn) {
    if (s < 4) {
        *sc = scales[s] & 63;
        *mn = scales[s + 4] & 63;
    } else {
        *sc = (scales[s + 4] & 0xf) | (scales[s - 4] >> 6) << 4;
        *mn = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4;
    }
}

/* Sub-block s (32 elements) is the low (s even) or high (s odd) nibbles of
 * qs[32*(s/2) .. 32*(s/2)+31]. */
static void dequant_block_q4_k(const void *src, float *y) {
    const block_q4_k *b = src;
    float d = read_f16(b->d), dmin = read_f16(b->dmin);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k4_scale_min(b->scales, s, &sc, &mn);
        const uint8_t *qs = b->qs + 32 * (s / 2);
        for (int l = 0; l < 32; l++) {
            int q = (qs[l] >> (4 * (s % 2))) & 0xf;
            y[32 * s + l] = d * sc * q - dmin * mn;
        }
    }
}

/* As Q4_K; the fifth bit of element l of sub-block s is bit s of qh[l]. */
static void dequant_block_q5_k(const void *src, float *y) {
    const block_q5_k *b = src;
    float d = read_f16(b->d), dmin = read_f16(b->dmin);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k4_scale_min(b->scales, s, &sc, &mn);
        const uint8_t *qs = b->qs + 32 * (s / 2);
        for (int l = 0; l < 32; l++) {
            int q = ((qs[l] >> (4 * (s % 2))) & 0xf) | ((b->qh[l] >> s) & 1) << 4;
            y[32 * s + l] = d * sc * q - dmin * mn;
        }
    }
}

/* Each 128-element half h has 64 bytes of ql and 32 of qh. Element
 * 64*n + k of the half (n = 0, 1; k < 64) has its low nibble in nibble n of
 * ql[64*h + k]; element 32*s + l has its high 2 bits at bit 2s of qh[32*h + l]. */
static void dequant_block_q6_k(const void *src, float *y) {
    const block_q6_k *b = src;
    float d = read_f16(b->d);
    for (int i = 0; i < QK_K; i++) {
        int half = i / 128, r = i % 128;
        int lo = (b->ql[64 * half + r % 64] >> (4 * (r / 64))) & 0xf;
        int hi = (b->qh[32 * half + r % 32] >> (2 * (r / 32))) & 3;
        y[i] = d * b->scales[i / 16] * ((lo | hi << 4) - 32);
    }
}

static void dequant_block_q8_k(const void *src, float *y) {
    const block_q8_k *b = src;
    float d = read_f32(b->d);
    for (int i = 0; i < QK_K; i++) y[i] = d * b->qs[i];
}

/* Row functions from a block dequantizer: to_float writes block after block;
 * vec_dot dequantizes one block at a time into a block-sized buffer and
 * accumulates its dot product in float. */
#define ROW_FUNCS(name, block_size, block_bytes)                                   \
    static void name##_to_float(const void *src, float *dst, int64_t n) {           \
        const uint8_t *p = src;                                                     \
        for (int64_t i = 0; i < n; i += (block_size), p += (block_bytes))           \
            dequant_block_##name(p, dst + i);                                       \
    }                                                                               \
    static float name##_vec_dot(const void *w, const float *x, int64_t n) {         \
        const uint8_t *p = w;                                                       \
        float block[block_size];                                                    \
        float sum = 0;                                                              \
        for (int64_t i = 0; i < n; i += (block_size), p += (block_bytes)) {         \
            dequant_block_##name(p, block);                                         \
            for (int j = 0; j < (block_size); j++) sum += block[j] * x[i + j];      \
        }                                                                           \
        return sum;                                                                 \
    }

ROW_FUNCS(f16, 1, 2)
ROW_FUNCS(bf16, 1, 2)
ROW_FUNCS(q4_0, QK, 18)
ROW_FUNCS(q4_1, QK, 20)
ROW_FUNCS(q5_0, QK, 22)
ROW_FUNCS(q5_1, QK, 24)
ROW_FUNCS(q8_0, QK, 34)
ROW_FUNCS(q2_k, QK_K, 84)
ROW_FUNCS(q3_k, QK_K, 110)
ROW_FUNCS(q4_k, QK_K, 144)
ROW_FUNCS(q5_k, QK_K, 176)
ROW_FUNCS(q6_k, QK_K, 210)
ROW_FUNCS(q8_k, QK_K, 292)

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static float f32_vec_dot(const void *w, const float *x, int64_t n) {
    const float *a = w;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * x[i];
    return s;
}

static const gl_type_traits type_table[GL_TYPE_COUNT] = {
    [GL_TYPE_F32] = {"F32", 1, 4, f32_to_float, f32_vec_dot},
    [GL_TYPE_F16] = {"F16", 1, 2, f16_to_float, f16_vec_dot},
    [GL_TYPE_Q4_0] = {"Q4_0", QK, 18, q4_0_to_float, q4_0_vec_dot},
    [GL_TYPE_Q4_1] = {"Q4_1", QK, 20, q4_1_to_float, q4_1_vec_dot},
    [GL_TYPE_Q5_0] = {"Q5_0", QK, 22, q5_0_to_float, q5_0_vec_dot},
    [GL_TYPE_Q5_1] = {"Q5_1", QK, 24, q5_1_to_float, q5_1_vec_dot},
    [GL_TYPE_Q8_0] = {"Q8_0", QK, 34, q8_0_to_float, q8_0_vec_dot},
    [GL_TYPE_Q8_1] = {"Q8_1", QK, 36, NULL, NULL},
    [GL_TYPE_Q2_K] = {"Q2_K", QK_K, 84, q2_k_to_float, q2_k_vec_dot},
    [GL_TYPE_Q3_K] = {"Q3_K", QK_K, 110, q3_k_to_float, q3_k_vec_dot},
    [GL_TYPE_Q4_K] = {"Q4_K", QK_K, 144, q4_k_to_float, q4_k_vec_dot},
    [GL_TYPE_Q5_K] = {"Q5_K", QK_K, 176, q5_k_to_float, q5_k_vec_dot},
    [GL_TYPE_Q6_K] = {"Q6_K", QK_K, 210, q6_k_to_float, q6_k_vec_dot},
    [GL_TYPE_Q8_K] = {"Q8_K", QK_K, 292, q8_k_to_float, q8_k_vec_dot},
    [GL_TYPE_I8] = {"I8", 1, 1, NULL, NULL},
    [GL_TYPE_I16] = {"I16", 1, 2, NULL, NULL},
    [GL_TYPE_I32] = {"I32", 1, 4, NULL, NULL},
    [GL_TYPE_I64] = {"I64", 1, 8, NULL, NULL},
    [GL_TYPE_F64] = {"F64", 1, 8, NULL, NULL},
    [GL_TYPE_BF16] = {"BF16", 1, 2, bf16_to_float, bf16_vec_dot},
};

const gl_type_traits *gl_type_get(uint32_t type) {
    if (type >= GL_TYPE_COUNT || type_table[type].name == NULL) return NULL;
    return &type_table[type];
}

size_t gl_type_row_bytes(uint32_t type, int64_t n) {
    const gl_type_traits *t = gl_type_get(type);
    if (!t || n < 0 || n % t->block_size) return 0;
    return (size_t)(n / t->block_size) * (size_t)t->block_bytes;
}

bool gl_type_supported(uint32_t type) {
    const gl_type_traits *t = gl_type_get(type);
    return t && t->to_float && t->vec_dot;
}
