/* kernels_avx512.h -- what the AVX-512 translation units share: the target
 * (AVX-512 VNNI and AMX), simd_body.h and simd_avx512.h set up for it, and
 * the functions each unit defines for the kern_impl table in
 * kernels_avx512.c. One unit held them all and took most of a sanitizer
 * build to compile; each part (SIMD_PART_*, simd_body.h) now has its own:
 *   kernels_avx512.c            the table, quantize_*, swiglu, geglu, to_f16,
 *                               attention; the CPU's and the OS's checks
 *   kernels_avx512_rows.c       rows_*_avx512: weights as the file has them
 *   kernels_avx512_packed.c        packed Q4_0, Q4_1, 16-bit activations
 *   kernels_avx512_packed_q5_0.c   packed Q5_0, 16-bit activations
 *   kernels_avx512_packed_q5_1.c   packed Q5_1, 16-bit activations
 *   kernels_avx512_packed_q8_0.c   packed Q8_0, 16-bit activations
 *   kernels_avx512_packed_x8.c     packed Q4_0, Q4_1, Q8_0, 8-bit activations
 *   kernels_avx512_packed_x8_q5.c  packed Q5_0, Q5_1, 8-bit activations
 *   kernels_avx512_packed_k.c      packed Q4_K, Q5_K, Q6_K at 16 and 8 bits
 *   kernels_avx512_amx.c           AMX prompt rows of the legacy types, 16 bits (simd_amx.h)
 *   kernels_avx512_amx_x8.c        the same at 8 bits
 *   kernels_avx512_amx_x12.c       Q4_0, Q4_1 at 12 bits
 *   kernels_avx512_amx_k.c         AMX prompt rows of the K-quants (simd_amx_k.h)
 * A unit sets SIMD_PARTS before including this header and pops clang's
 * target attribute at its end. scripts/build-times lists the slowest units. */
#ifndef GL_KERNELS_AVX512_H
#define GL_KERNELS_AVX512_H

#include "simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GENLOOP_NO_AVX512)
#define KERNELS_AVX512 1
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "quant.h"

/* Every function below is compiled for the target; gcc and clang spell it apart. */
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8"))), \
                             apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8")
#endif
#define SIMD_NAME avx512
#define SIMD_NAME_STR "avx512"
#define SIMD_VNNI 1
#define SIMD_AVX512 1
#define TT 8
#include "simd_body.h"
#include "simd_avx512.h"

/* The parts outside kernels_avx512.c, by their full names. */
typedef void avx512_rows_fn(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols, const uint8_t *act,
                            size_t act_stride, int n_tok, float *out, size_t out_stride);
typedef void avx512_amx_rows_fn(const gl_tensor *w, long r0, long r1, const uint8_t *act, size_t act_stride, int n_tok,
                                float *out, size_t out_stride, uint8_t *scratch);
/* kernels_avx512_rows.c */
SIMD_HIDDEN avx512_rows_fn rows_f32_avx512, rows_f16_avx512, rows_bf16_avx512, rows_q4_0_avx512, rows_q4_1_avx512,
    rows_q5_0_avx512, rows_q5_1_avx512, rows_q8_0_avx512, rows_q4_k_avx512, rows_q5_k_avx512, rows_q6_k_avx512;
/* kernels_avx512_packed.c, kernels_avx512_packed_q5_0.c, _q5_1.c, _q8_0.c */
SIMD_HIDDEN avx512_rows_fn packed_rows_q4_0_avx512, packed_rows_q4_1_avx512;
SIMD_HIDDEN avx512_rows_fn packed_rows_q5_0_avx512, packed_rows_q5_1_avx512, packed_rows_q8_0_avx512;
/* kernels_avx512_packed_x8.c, kernels_avx512_packed_x8_q5.c */
SIMD_HIDDEN avx512_rows_fn packed_rows_x8_q4_0_avx512, packed_rows_x8_q4_1_avx512, packed_rows_x8_q8_0_avx512;
SIMD_HIDDEN avx512_rows_fn packed_rows_x8_q5_0_avx512, packed_rows_x8_q5_1_avx512;
/* kernels_avx512_packed_k.c */
SIMD_HIDDEN avx512_rows_fn packed_rows_q4_k_avx512, packed_rows_q5_k_avx512, packed_rows_q6_k_avx512,
    packed_rows_x8_q4_k_avx512, packed_rows_x8_q5_k_avx512, packed_rows_x8_q6_k_avx512;
/* kernels_avx512_amx.c, kernels_avx512_amx_x8.c */
SIMD_HIDDEN avx512_amx_rows_fn amx_rows_q4_0_avx512, amx_rows_q4_1_avx512, amx_rows_q5_0_avx512, amx_rows_q5_1_avx512,
    amx_rows_q8_0_avx512;
SIMD_HIDDEN avx512_amx_rows_fn amx_rows_x8_q4_0_avx512, amx_rows_x8_q4_1_avx512, amx_rows_x8_q5_0_avx512,
    amx_rows_x8_q5_1_avx512, amx_rows_x8_q8_0_avx512;
/* kernels_avx512_amx_x12.c */
SIMD_HIDDEN avx512_amx_rows_fn amx_rows_x12_q4_0_avx512, amx_rows_x12_q4_1_avx512;
/* kernels_avx512_amx_k.c */
SIMD_HIDDEN avx512_amx_rows_fn amx_rows_q4_k_avx512, amx_rows_q5_k_avx512, amx_rows_q6_k_avx512,
    amx_rows_x8_q4_k_avx512, amx_rows_x8_q5_k_avx512, amx_rows_x8_q6_k_avx512;
#endif

#endif
