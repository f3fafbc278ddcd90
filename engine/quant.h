/* quant.h -- GGML tensor types: sizes, half-precision conversion, and the
 * scalar reference dequantizers and dot products.
 *
 * The reference functions here are the ground truth: the fast kernels in
 * kernels.c must agree with them (tests compare the two). Weights are stored
 * row by row; a row of n elements is n / block_size blocks. */
#ifndef GL_QUANT_H
#define GL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Type ids exactly as GGUF stores them (ggml_type). */
typedef enum gl_type {
    GL_TYPE_F32 = 0,
    GL_TYPE_F16 = 1,
    GL_TYPE_Q4_0 = 2,
    GL_TYPE_Q4_1 = 3,
    GL_TYPE_Q5_0 = 6,
    GL_TYPE_Q5_1 = 7,
    GL_TYPE_Q8_0 = 8,
    GL_TYPE_Q8_1 = 9,
    GL_TYPE_Q2_K = 10,
    GL_TYPE_Q3_K = 11,
    GL_TYPE_Q4_K = 12,
    GL_TYPE_Q5_K = 13,
    GL_TYPE_Q6_K = 14,
    GL_TYPE_Q8_K = 15,
    GL_TYPE_I8 = 24,
    GL_TYPE_I16 = 25,
    GL_TYPE_I32 = 26,
    GL_TYPE_I64 = 27,
    GL_TYPE_F64 = 28,
    GL_TYPE_BF16 = 30,
    GL_TYPE_COUNT = 40, /* upper bound on ids we know the size of */
} gl_type;

typedef void (*gl_to_float_fn)(const void *src, float *dst, int64_t n);
typedef float (*gl_vec_dot_fn)(const void *w, const float *x, int64_t n);

typedef struct gl_type_traits {
    const char *name;          /* "Q4_K", as llama.cpp prints it */
    int block_size;            /* elements per block */
    int block_bytes;           /* bytes per block */
    gl_to_float_fn to_float;   /* dequantize n elements (n % block_size == 0); NULL if unsupported */
    gl_vec_dot_fn vec_dot;     /* sum_i w[i] * x[i] over n elements; NULL if unsupported */
} gl_type_traits;

/* Traits of a GGUF type id, or NULL when the id is unknown. A known type
 * whose to_float is NULL can be parsed but not computed with. */
const gl_type_traits *gl_type_get(uint32_t type);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size. */
size_t gl_type_row_bytes(uint32_t type, int64_t n);

/* True when tensors of this type can be used as weights (to_float and vec_dot). */
bool gl_type_supported(uint32_t type);

/* IEEE half and bfloat16 conversions (round to nearest even). */
float gl_fp16_to_fp32(uint16_t h);
uint16_t gl_fp32_to_fp16(float f);
float gl_bf16_to_fp32(uint16_t h);
uint16_t gl_fp32_to_bf16(float f);

#endif
