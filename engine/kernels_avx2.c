/* kernels_avx2.c -- the kernels of simd_body.h for AVX2 + FMA + F16C (x86-64
 * from about 2013 on); integer dots through vpmaddubsw. */
#include "simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c")
#define SIMD_NAME avx2
#define SIMD_NAME_STR "avx2"
#define SIMD_VNNI 0
#define TT 4
#include "simd_body.h"

const kern_impl *kern_impl_avx2(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return &impl_avx2;
    return NULL;
}
#else
const kern_impl *kern_impl_avx2(void) { return NULL; }
#endif
