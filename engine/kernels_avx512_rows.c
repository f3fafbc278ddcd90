/* kernels_avx512_rows.c -- rows_{f32,f16,bf16,q4_0,q4_1,q5_0,q5_1,q8_0,q4_k,q5_k,q6_k}_avx512:
 * weights as the file has them (simd_body.h), for the kern_impl table in kernels_avx512.c (kernels_avx512.h says why apart). */
#define SIMD_PARTS SIMD_PART_ROWS
#include "kernels_avx512.h"

#if KERNELS_AVX512
#ifdef __clang__
#pragma clang attribute pop
#endif
#endif
