/* kernels_avx512_packed_q5_0.c -- packed_rows_q5_0_avx512: packed tiles
 * against 16-bit activations (simd_avx512.h), for the kern_impl table in kernels_avx512.c (kernels_avx512.h says why apart). */
#define SIMD_PARTS SIMD_PART_PACKED_Q5_0
#include "kernels_avx512.h"

#if KERNELS_AVX512
#ifdef __clang__
#pragma clang attribute pop
#endif
#endif
