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

/* ---- reference dequantizers and dot products ------------------------------ */

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static float f32_vec_dot(const void *w, const float *x, int64_t n) {
    const float *a = w;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * x[i];
    return s;
}

static const gl_type_traits type_table[GL_TYPE_COUNT] = {
    [GL_TYPE_F32] = {"F32", 1, 4, f32_to_float, f32_vec_dot},
    [GL_TYPE_F16] = {"F16", 1, 2, NULL, NULL},
    [GL_TYPE_Q4_0] = {"Q4_0", 32, 18, NULL, NULL},
    [GL_TYPE_Q4_1] = {"Q4_1", 32, 20, NULL, NULL},
    [GL_TYPE_Q5_0] = {"Q5_0", 32, 22, NULL, NULL},
    [GL_TYPE_Q5_1] = {"Q5_1", 32, 24, NULL, NULL},
    [GL_TYPE_Q8_0] = {"Q8_0", 32, 34, NULL, NULL},
    [GL_TYPE_Q8_1] = {"Q8_1", 32, 36, NULL, NULL},
    [GL_TYPE_Q2_K] = {"Q2_K", 256, 84, NULL, NULL},
    [GL_TYPE_Q3_K] = {"Q3_K", 256, 110, NULL, NULL},
    [GL_TYPE_Q4_K] = {"Q4_K", 256, 144, NULL, NULL},
    [GL_TYPE_Q5_K] = {"Q5_K", 256, 176, NULL, NULL},
    [GL_TYPE_Q6_K] = {"Q6_K", 256, 210, NULL, NULL},
    [GL_TYPE_Q8_K] = {"Q8_K", 256, 292, NULL, NULL},
    [GL_TYPE_I8] = {"I8", 1, 1, NULL, NULL},
    [GL_TYPE_I16] = {"I16", 1, 2, NULL, NULL},
    [GL_TYPE_I32] = {"I32", 1, 4, NULL, NULL},
    [GL_TYPE_I64] = {"I64", 1, 8, NULL, NULL},
    [GL_TYPE_F64] = {"F64", 1, 8, NULL, NULL},
    [GL_TYPE_BF16] = {"BF16", 1, 2, NULL, NULL},
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
