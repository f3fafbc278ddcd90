/* kernels_avx512_packed_k.c -- packed_rows_{q4_k,q5_k,q6_k}_avx512 and packed_rows_x8_{same}_avx512:
 * packed K-quant tiles (simd_avx512.h), for the kern_impl table in kernels_avx512.c (kernels_avx512.h says why apart). */
#define SIMD_PARTS SIMD_PART_PACKED_K
#include "kernels_avx512.h"

#if KERNELS_AVX512
#ifdef __clang__
#pragma clang attribute pop
#endif
#endif
