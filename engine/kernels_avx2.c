/* kernels_avx2.c -- the kernels of simd_body.h for AVX2 + FMA + F16C (x86-64
 * from about 2013 on); integer dots through vpmaddubsw. */
#include "simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant.h"

/* Every function below is compiled for the target; gcc and clang spell it apart. */
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#define SIMD_NAME avx2
#define SIMD_NAME_STR "avx2"
#define SIMD_VNNI 0
#define SIMD_AVX512 0
#define TT 4
#include "simd_body.h"
#include "simd_impl.h"
#ifdef __clang__
#pragma clang attribute pop
#endif

const kern_impl *kern_impl_avx2(void) { return kern_cpu_has_avx2_base() ? &impl_avx2 : NULL; }
#else
const kern_impl *kern_impl_avx2(void) { return NULL; }
#endif
