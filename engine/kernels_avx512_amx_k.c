/* kernels_avx512_amx_k.c -- amx_rows_{q4_k,q5_k,q6_k}_avx512 and amx_rows_x8_{same}_avx512:
 * AMX prompt rows of the K-quants (simd_amx_k.h), for the kern_impl table in kernels_avx512.c (kernels_avx512.h says why apart). */
#define SIMD_PARTS SIMD_PART_AMX_K
#include "kernels_avx512.h"

#if KERNELS_AVX512
#include "simd_amx.h"
#include "simd_amx_k.h"
#ifdef __clang__
#pragma clang attribute pop
#endif
#endif
