/* kernels_avx512_packed_x8.c -- packed_rows_x8_{q4_0,q4_1,q8_0}_avx512: packed tiles
 * against 8-bit activations (simd_avx512.h), for the kern_impl table in kernels_avx512.c (kernels_avx512.h says why apart). */
#define SIMD_PARTS SIMD_PART_PACKED_X8
#include "kernels_avx512.h"

#if KERNELS_AVX512
#ifdef __clang__
#pragma clang attribute pop
#endif
#endif
