/* bench_amx_fold.c -- a timing prototype (not a test, not the engine's
 * numerics): Q4_K prompt rows on AMX as the engine runs them (simd_amx_k.h:
 * one tdpbssd of K = 32 per 32-element block and 16 x 16 outputs, one tile
 * store each, per-block float steps) against the scales folded into the
 * weights (w' = q * scale <= 945 in two byte planes, K = 64 per tdpbusd, a
 * whole super-block accumulated in the tile: two stores per super-block and
 * activation part, one float step per output and super-block).
 *
 * The fold needs one activation unit per 256 elements (the engine's K-quant
 * activations have one per 32-element block, so their sum over blocks is a
 * float one): per output and super-block
 *   S = sum_j scale_j * dot_j,  M = sum_j min_j * blocksum_j  (exact ints)
 *   acc += S * (d * unit);  acc -= M * (dmin * unit)
 * (16 bits: S of the coarse and residual parts apart, S = 256 Sc + Sr as a
 * float, M = 256 Mc + Mr exact). Minimums here: 8 bits as a third byte plane
 * (min_j per element) in the tile, 16 bits by vpdpwssd from the blocks'
 * integer sums. The folded kernels' outputs are checked against a float64
 * evaluation of that formula; today's scheme runs on random bytes, timing
 * only. 768 x 768 rows (3 super-blocks), 512 tokens, one thread, weights
 * unpacked beforehand (once per call and 16 rows in the engine) and
 * activations quantized beforehand.
 *
 *   bench_amx_fold [REPS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8"))), \
                             apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")
#endif

#define NB 3     /* super-blocks a row: 768 columns */
#define NROWT 48 /* row tiles: 768 rows */
#define NG 32    /* token groups: 512 tokens */

typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tilecfg;

/* one row tile's weights (the same for every row tile: timing) and all groups' activations */
static _Alignas(64) uint8_t wlo[NB][4][16][64], whi[NB][4][16][64], wm[NB][4][16][64]; /* [sb][64-chunk][row][elem] */
static _Alignas(64) int8_t acts[NG][NB][2][4][16][16][4]; /* [g][sb][coarse, res][64-chunk][quad][token][e] */
static _Alignas(64) int16_t isum[NG][NB][2][4][16][2];    /* [g][sb][coarse, res][pair][token][2]: blocks' int sums */
static _Alignas(64) int16_t mpair[NB][16][4][2];          /* [sb][row][pair][2]: the minimums as int16 pairs */
static _Alignas(64) float unit[NG][NB][16];               /* [g][sb][token] */
static _Alignas(64) float wd[NB][16], wdmin[NB][16];      /* [sb][row] */
static _Alignas(64) float out[NROWT][NG][16][16];         /* [row tile][g][row][token] */
/* today's scheme: random bytes */
static _Alignas(64) int8_t cq[NB][8][16][32], cact[NG][NB][2][8][8][64];
static _Alignas(64) float cws[NB][16][16], cad[NG][NB][16][16], cas[NG][NB][16][16];
/* the data behind the folded planes, for the check */
static uint8_t q[16][NB * 256], sc[16][NB][8], mn[16][NB][8];
static int8_t xc[NG * 16][NB * 256], xr[NG * 16][NB * 256];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void config(int ka, int b_rows) {
    _Alignas(64) tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.rows[i] = 16, c.colsb[i] = 64;
    c.colsb[0] = c.colsb[7] = (uint16_t)ka;
    c.rows[1] = c.rows[2] = (uint8_t)b_rows;
    __asm__ volatile("" : : "r"(&c) : "memory"); /* gcc may drop the stores otherwise */
    _tile_loadconfig(&c);
}

/* today's: per lane (32-element block) and super-block: A, B, dot, store; then per row the block's float steps */
static void today(int x8) {
    _Alignas(64) int32_t cb[NB][2][16][16];
    _Alignas(64) float res[8][16][16];
    config(32, 8);
    for (int rt = 0; rt < NROWT; rt++)
        for (int g = 0; g < NG; g++) {
            for (int i = 0; i < 8; i++) {
                for (int b = 0; b < NB; b++) {
                    _tile_loadd(0, cq[b][i], 32);
                    _tile_loadd(1, cact[g][b][0][i], 64);
                    if (b & 1) {
                        _tile_zero(5); _tile_dpbssd(5, 0, 1); _tile_stored(5, cb[b][0], 64);
                        if (!x8) { _tile_loadd(2, cact[g][b][1][i], 64); _tile_zero(6); _tile_dpbssd(6, 0, 2); _tile_stored(6, cb[b][1], 64); }
                    } else {
                        _tile_zero(3); _tile_dpbssd(3, 0, 1); _tile_stored(3, cb[b][0], 64);
                        if (!x8) { _tile_loadd(2, cact[g][b][1][i], 64); _tile_zero(4); _tile_dpbssd(4, 0, 2); _tile_stored(4, cb[b][1], 64); }
                    }
                }
                __m512 acc[16];
                for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
                for (int b = 0; b < NB; b++) {
                    const __m512 u = _mm512_load_ps(cad[g][b][2 * i]), s = _mm512_load_ps(cas[g][b][2 * i]);
#pragma GCC unroll 16
                    for (int r = 0; r < 16; r++) {
                        __m512i d = _mm512_load_si512(cb[b][0][r]);
                        if (!x8) d = _mm512_add_epi32(_mm512_slli_epi32(d, 8), _mm512_load_si512(cb[b][1][r]));
                        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(_mm512_set1_ps(cws[b][r][i]), u), acc[r]);
                        acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(cws[b][r][8 + i]), s, acc[r]);
                    }
                }
                for (int r = 0; r < 16; r++) _mm512_store_ps(res[i][r], acc[r]);
            }
            for (int r = 0; r < 16; r++) { /* the lanes' tree */
                __m512 a = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(res[0][r]), _mm512_load_ps(res[1][r])),
                                         _mm512_add_ps(_mm512_load_ps(res[2][r]), _mm512_load_ps(res[3][r])));
                __m512 c = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(res[4][r]), _mm512_load_ps(res[5][r])),
                                         _mm512_add_ps(_mm512_load_ps(res[6][r]), _mm512_load_ps(res[7][r])));
                _mm512_store_ps(out[rt][g][r], _mm512_add_ps(a, c));
            }
        }
    _tile_release();
}

/* folded: per super-block 4 chunks of 64 elements: B (coarse, residual), A lo, A hi (, A min), all accumulated */
static void fold(int x8) {
    _Alignas(64) int32_t cb[2][5][16][16];
    config(64, 16);
    for (int rt = 0; rt < NROWT; rt++)
        for (int g = 0; g < NG; g++) {
            __m512 acc[16];
            for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
            for (int b = 0; b < NB; b++) {
                int32_t(*c)[16][16] = cb[b & 1];
                _tile_zero(3); _tile_zero(4); _tile_zero(5);
                if (!x8) _tile_zero(6);
                for (int k = 0; k < 4; k++) {
                    _tile_loadd(1, acts[g][b][0][k], 64);
                    if (!x8) _tile_loadd(2, acts[g][b][1][k], 64);
                    _tile_loadd(0, wlo[b][k], 64);
                    _tile_dpbusd(3, 0, 1);
                    if (!x8) _tile_dpbusd(5, 0, 2);
                    _tile_loadd(7, whi[b][k], 64);
                    _tile_dpbusd(4, 7, 1);
                    if (!x8) _tile_dpbusd(6, 7, 2);
                    if (x8) { _tile_loadd(0, wm[b][k], 64); _tile_dpbusd(5, 0, 1); }
                }
                _tile_stored(3, c[0], 64); _tile_stored(4, c[1], 64); _tile_stored(5, c[2], 64);
                if (!x8) _tile_stored(6, c[3], 64);
                const __m512 u = _mm512_load_ps(unit[g][b]);
                __m512i pc[4], pr[4];
                for (int p = 0; p < 4 && !x8; p++)
                    pc[p] = _mm512_load_si512(isum[g][b][0][p]), pr[p] = _mm512_load_si512(isum[g][b][1][p]);
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) {
                    __m512i s = _mm512_add_epi32(_mm512_load_si512(c[0][r]), _mm512_slli_epi32(_mm512_load_si512(c[1][r]), 8));
                    __m512 v = _mm512_cvtepi32_ps(s);
                    __m512i m;
                    if (x8) {
                        m = _mm512_load_si512(c[2][r]);
                    } else {
                        __m512i sr = _mm512_add_epi32(_mm512_load_si512(c[2][r]), _mm512_slli_epi32(_mm512_load_si512(c[3][r]), 8));
                        v = _mm512_fmadd_ps(v, _mm512_set1_ps(256.0f), _mm512_cvtepi32_ps(sr));
                        __m512i mc = _mm512_setzero_si512(), mr = _mm512_setzero_si512();
                        for (int p = 0; p < 4; p++) {
                            int32_t pair;
                            memcpy(&pair, mpair[b][r][p], 4);
                            mc = _mm512_dpwssd_epi32(mc, _mm512_set1_epi32(pair), pc[p]);
                            mr = _mm512_dpwssd_epi32(mr, _mm512_set1_epi32(pair), pr[p]);
                        }
                        m = _mm512_add_epi32(_mm512_slli_epi32(mc, 8), mr);
                    }
                    acc[r] = _mm512_fmadd_ps(v, _mm512_mul_ps(_mm512_set1_ps(wd[b][r]), u), acc[r]);
                    acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(_mm512_set1_ps(wdmin[b][r]), u), acc[r]);
                }
            }
            for (int r = 0; r < 16; r++) _mm512_store_ps(out[rt][g][r], acc[r]);
        }
    _tile_release();
}

/* the formula in float64 for row tile 0, every group; the largest error relative to the row's scale */
static double check(int x8) {
    double worst = 0;
    for (int g = 0; g < NG; g++)
        for (int r = 0; r < 16; r++)
            for (int t = 0; t < 16; t++) {
                double ref = 0, mag = 0;
                for (int b = 0; b < NB; b++) {
                    double s = 0, m = 0;
                    for (int e = 0; e < 256; e++) {
                        const int j = e / 32, col = 256 * b + e;
                        const double x = x8 ? xc[16 * g + t][col] : 256.0 * xc[16 * g + t][col] + xr[16 * g + t][col];
                        s += (double)q[r][col] * sc[r][b][j] * x;
                        m += (double)mn[r][b][j] * x;
                    }
                    ref += s * wd[b][r] * unit[g][b][t] - m * wdmin[b][r] * unit[g][b][t];
                    mag += fabs(s * wd[b][r] * unit[g][b][t]) + fabs(m * wdmin[b][r] * unit[g][b][t]);
                }
                const double err = fabs(out[0][g][r][t] - ref) / (mag + 1e-30);
                if (err > worst) worst = err;
            }
    return worst;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (syscall(SYS_arch_prctl, 0x1023, 18)) { /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA */
        puts("bench_amx_fold: no AMX tile state");
        return 0;
    }
    srand(1);
    for (size_t i = 0; i < sizeof cq; i++) ((int8_t *)cq)[i] = (int8_t)(rand() & 15);
    for (size_t i = 0; i < sizeof cact; i++) ((int8_t *)cact)[i] = (int8_t)rand();
    for (size_t i = 0; i < sizeof cws / 4; i++) ((float *)cws)[i] = 0.01f;
    for (size_t i = 0; i < sizeof cad / 4; i++) ((float *)cad)[i] = 0.01f, ((float *)cas)[i] = 0.1f;
    /* Q4_K-like rows (the extremes included: q 15, scale 63) and signed activations */
    for (int r = 0; r < 16; r++) {
        for (int e = 0; e < NB * 256; e++) q[r][e] = (uint8_t)(r == 0 ? 15 : rand() & 15);
        for (int b = 0; b < NB; b++) {
            wd[b][r] = 1e-3f * (float)(1 + rand() % 100), wdmin[b][r] = 1e-3f * (float)(1 + rand() % 100);
            for (int j = 0; j < 8; j++) sc[r][b][j] = (uint8_t)(r == 0 ? 63 : rand() & 63), mn[r][b][j] = (uint8_t)(rand() & 63);
        }
    }
    for (int t = 0; t < NG * 16; t++)
        for (int e = 0; e < NB * 256; e++) xc[t][e] = (int8_t)(t == 0 ? 127 : rand()), xr[t][e] = (int8_t)rand();
    for (int g = 0; g < NG; g++)
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < 16; t++) unit[g][b][t] = 1e-4f * (float)(1 + rand() % 100);
    /* the planes: w' = q * scale, low byte and the rest; min per element; B tiles as [quad][token][e] */
    for (int r = 0; r < 16; r++)
        for (int b = 0; b < NB; b++)
            for (int e = 0; e < 256; e++) {
                const int w = q[r][256 * b + e] * sc[r][b][e / 32];
                wlo[b][e / 64][r][e % 64] = (uint8_t)(w & 255), whi[b][e / 64][r][e % 64] = (uint8_t)(w >> 8);
                wm[b][e / 64][r][e % 64] = mn[r][b][e / 32];
            }
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < 8; j++) mpair[b][r][j / 2][j % 2] = mn[r][b][j];
    for (int g = 0; g < NG; g++)
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < 16; t++)
                for (int e = 0; e < 256; e++) {
                    acts[g][b][0][e / 64][e % 64 / 4][t][e % 4] = xc[16 * g + t][256 * b + e];
                    acts[g][b][1][e / 64][e % 64 / 4][t][e % 4] = xr[16 * g + t][256 * b + e];
                }
    for (int g = 0; g < NG; g++)
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < 16; t++)
                for (int j = 0; j < 8; j++) {
                    int sc_ = 0, sr_ = 0;
                    for (int e = 0; e < 32; e++) sc_ += xc[16 * g + t][256 * b + 32 * j + e], sr_ += xr[16 * g + t][256 * b + 32 * j + e];
                    isum[g][b][0][j / 2][t][j % 2] = (int16_t)sc_, isum[g][b][1][j / 2][t][j % 2] = (int16_t)sr_;
                }
    const char *names[4] = {"today 16-bit", "today 8-bit", "folded 16-bit", "folded 8-bit"};
    double best[4] = {1e9, 1e9, 1e9, 1e9}, err[2];
    for (int x8 = 0; x8 < 2; x8++) fold(x8), err[x8] = check(x8);
    for (int rep = 0; rep < reps; rep++)
        for (int k = 0; k < 4; k++) {
            const double t0 = now();
            if (k < 2) today(k);
            else fold(k - 2);
            const double t = now() - t0;
            if (t < best[k]) best[k] = t;
        }
    const double macs = 768.0 * 768 * 512;
    for (int k = 0; k < 4; k++) {
        printf("%-14s %.3f ms  %6.1f GMAC/s", names[k], best[k] * 1e3, macs / best[k] * 1e-9);
        if (k >= 2) printf("  (vs float64 formula: worst relative error %.1e)", err[k - 2]);
        printf("\n");
    }
    return err[0] < 1e-5 && err[1] < 1e-5 ? 0 : 1;
}
#else
int main(void) {
    puts("bench_amx_fold: x86-64 only");
    return 0;
}
#endif
