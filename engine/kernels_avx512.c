/* kernels_avx512.c -- the kernels of simd_body.h with AVX-512 VNNI (Ice Lake,
 * Zen 4 and later): vpdpbusd for the integer dots, 32 vector registers for
 * wider token tiles. */
#include "simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define SIMD_NAME avx512
#define SIMD_NAME_STR "avx512"
#define SIMD_VNNI 1
#define TT 8
#include "simd_body.h"

const kern_impl *kern_impl_avx512(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return &impl_avx512;
    return NULL;
}
#else
const kern_impl *kern_impl_avx512(void) { return NULL; }
#endif
