/* kernels_avx512.c -- the kernels of simd_body.h with AVX-512 VNNI (Ice Lake,
 * Zen 4 and later): vpdpbusd for the integer dots on weights as the file has
 * them, 32 vector registers for wider token tiles, and those of
 * simd_avx512.h: the packed tiles (vpdpwssd, one block per 32-bit lane) for
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K, and for all of them
 * against 8-bit activations (vpdpbusd). This unit holds the kern_impl table
 * (simd_impl.h) and the CPU checks; the tiles are compiled in the units
 * kernels_avx512.h lists. */
#define SIMD_PARTS SIMD_PART_TABLE
#include "kernels_avx512.h"

#if KERNELS_AVX512
#include "simd_impl.h"
#ifdef __clang__
#pragma clang attribute pop
#endif

const kern_impl *kern_impl_avx512(void) {
    if (kern_cpu_has_avx2_base() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return &impl_avx512;
    return NULL;
}

/* ---- AMX: the CPU's word (cpuid), the OS's (XCR0, arch_prctl), ours (GENLOOP_AMX) ---- */

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static kern_impl impl_amx;
static bool amx_ok;

static void amx_init(void) {
    const char *env = getenv("GENLOOP_AMX");
    if ((env && !strcmp(env, "0")) || !kern_impl_avx512()) return;
    unsigned a, b, c, d;
    /* leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8; leaf 1: ECX bit 27 OSXSAVE */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return; /* XTILECFG, XTILEDATA */
    /* Linux hands out the tile state only on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return;
    impl_amx = impl_avx512;
    impl_amx.name = "amx";
    impl_amx.amx_rows[GL_TYPE_Q4_0] = FN(amx_rows_q4_0);
    impl_amx.amx_rows[GL_TYPE_Q4_1] = FN(amx_rows_q4_1);
    impl_amx.amx_rows[GL_TYPE_Q5_0] = FN(amx_rows_q5_0);
    impl_amx.amx_rows[GL_TYPE_Q5_1] = FN(amx_rows_q5_1);
    impl_amx.amx_rows[GL_TYPE_Q8_0] = FN(amx_rows_q8_0);
    impl_amx.amx_rows_x8[GL_TYPE_Q4_0] = FN(amx_rows_x8_q4_0);
    impl_amx.amx_rows_x8[GL_TYPE_Q4_1] = FN(amx_rows_x8_q4_1);
    impl_amx.amx_rows_x8[GL_TYPE_Q5_0] = FN(amx_rows_x8_q5_0);
    impl_amx.amx_rows_x8[GL_TYPE_Q5_1] = FN(amx_rows_x8_q5_1);
    impl_amx.amx_rows_x8[GL_TYPE_Q8_0] = FN(amx_rows_x8_q8_0);
    impl_amx.amx_rows_x12[GL_TYPE_Q4_0] = FN(amx_rows_x12_q4_0);
    impl_amx.amx_rows_x12[GL_TYPE_Q4_1] = FN(amx_rows_x12_q4_1);
    impl_amx.amx_rows[GL_TYPE_Q4_K] = FN(amx_rows_q4_k);
    impl_amx.amx_rows[GL_TYPE_Q5_K] = FN(amx_rows_q5_k);
    impl_amx.amx_rows[GL_TYPE_Q6_K] = FN(amx_rows_q6_k);
    impl_amx.amx_rows_x8[GL_TYPE_Q4_K] = FN(amx_rows_x8_q4_k);
    impl_amx.amx_rows_x8[GL_TYPE_Q5_K] = FN(amx_rows_x8_q5_k);
    impl_amx.amx_rows_x8[GL_TYPE_Q6_K] = FN(amx_rows_x8_q6_k);
    amx_ok = true;
}

const kern_impl *kern_impl_amx(void) {
    pthread_once(&amx_once, amx_init);
    return amx_ok ? &impl_amx : NULL;
}
#else
const kern_impl *kern_impl_avx512(void) { return NULL; }
const kern_impl *kern_impl_amx(void) { return NULL; }
#endif
