/* no_simd.c -- the SIMD kernel entry points for a build whose compiler
 * cannot build kernels_avx2.c / kernels_avx512.c (see tests/fuzz/meson.build):
 * neither is available, so kernels.c runs its portable scalar code. */
#include "simd.h"

const kern_impl *kern_impl_avx2(void) { return NULL; }
const kern_impl *kern_impl_avx512(void) { return NULL; }
