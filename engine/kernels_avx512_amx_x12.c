/* kernels_avx512_amx_x12.c -- amx_rows_x12_{q4_0,q4_1}_avx512: AMX prompt rows
 * against 12-bit activations (simd_amx.h), for the kern_impl table in kernels_avx512.c (kernels_avx512.h says why apart). */
#define SIMD_PARTS SIMD_PART_AMX_X12
#include "kernels_avx512.h"

#if KERNELS_AVX512
#include "simd_amx.h"
#ifdef __clang__
#pragma clang attribute pop
#endif
#endif
