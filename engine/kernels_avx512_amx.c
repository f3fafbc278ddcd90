/* kernels_avx512_amx.c -- amx_rows_{q4_0,q4_1,q5_0,q5_1,q8_0}_avx512: AMX prompt rows
 * against 16-bit activations (simd_amx.h), for the kern_impl table in kernels_avx512.c (kernels_avx512.h says why apart). */
#define SIMD_PARTS SIMD_PART_AMX
#include "kernels_avx512.h"

#if KERNELS_AVX512
#include "simd_amx.h"
#ifdef __clang__
#pragma clang attribute pop
#endif
#endif
