/* kernels_avx512.c -- the kernels of simd_body.h with AVX-512 VNNI (Ice Lake,
 * Zen 4 and later): vpdpbusd for the integer dots on weights as the file has
 * them, 32 vector registers for wider token tiles, and those of
 * simd_avx512.h: the packed tiles (vpdpwssd, one block per 32-bit lane) for
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K, and for all of them
 * against 8-bit activations (vpdpbusd). */
#include "simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GENLOOP_NO_AVX512)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant.h"

/* Every function below is compiled for the target; gcc and clang spell it apart. */
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), \
                             apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif
#define SIMD_NAME avx512
#define SIMD_NAME_STR "avx512"
#define SIMD_VNNI 1
#define SIMD_AVX512 1
#define TT 8
#include "simd_body.h"
#include "simd_avx512.h"
#include "simd_impl.h"
#ifdef __clang__
#pragma clang attribute pop
#endif

const kern_impl *kern_impl_avx512(void) {
    if (kern_cpu_has_avx2_base() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return &impl_avx512;
    return NULL;
}
#else
const kern_impl *kern_impl_avx512(void) { return NULL; }
#endif
