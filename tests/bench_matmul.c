/* bench_matmul.c -- one matrix multiply shape, timed in isolation (a
 * benchmark, not a test): random weights of TYPE, ROWS x COLS, against
 * N_TOK tokens, on THREADS threads; prints the median time, the multiply-adds
 * per second and the weight bytes per second, and on one thread the median
 * CPU time of the call too (steadier than the wall clock on a loaded host).
 * BENCH_ACT_BITS=8 asks for 8-bit activations. BENCH_STREAM=1 (0) says the
 * weights stream from memory (stay in cache) as a model of more (less) than
 * a third of the L3 would (kern_note_weights: decode's prefetch); unset, as
 * this matrix alone.
 *
 *   bench_matmul TYPE ROWS COLS N_TOK THREADS [REPS]
 *   TYPE: q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k f16 bf16
 *
 * BENCH_COPIES=N cycles the calls through N packed copies of the matrix, so
 * that with N copies larger than the last-level cache each call really
 * streams its weights from memory, as a decode step does.
 *
 * The weights are kern_pack'ed unless BENCH_UNPACKED is set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels.h"
#include "quant.h"

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench_matmul TYPE ROWS COLS N_TOK THREADS [REPS]\n");
        return 2;
    }
    static const struct { const char *name; uint32_t type; int scale_at[2]; } types[] = {
        {"q4_0", GL_TYPE_Q4_0, {0, -1}}, {"q4_1", GL_TYPE_Q4_1, {0, 2}}, {"q5_0", GL_TYPE_Q5_0, {0, -1}},
        {"q5_1", GL_TYPE_Q5_1, {0, 2}},  {"q8_0", GL_TYPE_Q8_0, {0, -1}}, {"q4_k", GL_TYPE_Q4_K, {0, 2}},
        {"q5_k", GL_TYPE_Q5_K, {0, 2}},  {"q6_k", GL_TYPE_Q6_K, {208, -1}}, {"f16", GL_TYPE_F16, {-1, -1}},
        {"bf16", GL_TYPE_BF16, {-1, -1}},
    };
    int ti = -1;
    for (int i = 0; i < (int)(sizeof types / sizeof types[0]); i++)
        if (!strcmp(argv[1], types[i].name)) ti = i;
    if (ti < 0) { fprintf(stderr, "bench_matmul: unknown type %s\n", argv[1]); return 2; }
    int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
    int n_tok = atoi(argv[4]), threads = atoi(argv[5]), reps = argc > 6 ? atoi(argv[6]) : 21;
    uint32_t type = types[ti].type;
    size_t row_bytes = gl_type_row_bytes(type, cols), block_bytes = (size_t)gl_type_get(type)->block_bytes;
    size_t n_bytes = row_bytes * (size_t)rows;
    uint8_t *w = malloc(n_bytes);
    float *x = malloc(sizeof(float) * (size_t)cols * n_tok), *out = malloc(sizeof(float) * (size_t)rows * n_tok);
    srand(1);
    for (size_t i = 0; i < n_bytes; i++) w[i] = (uint8_t)rand();
    /* Float weights: random values in [-0.5, 0.5), never NaN or infinite. */
    for (size_t i = 0; block_bytes == 2 && i < n_bytes / 2; i++) {
        float f = (float)rand() / RAND_MAX - 0.5f;
        uint16_t h = type == GL_TYPE_F16 ? gl_fp32_to_fp16(f) : gl_fp32_to_bf16(f);
        memcpy(w + 2 * i, &h, 2);
    }
    /* Finite, modest F16 scales (0x2c00 = 1/16) so the sums stay ordinary. */
    for (size_t b = 0; b < n_bytes / block_bytes; b++)
        for (int k = 0; k < 2; k++)
            if (types[ti].scale_at[k] >= 0) {
                w[b * block_bytes + types[ti].scale_at[k]] = 0x00;
                w[b * block_bytes + types[ti].scale_at[k] + 1] = 0x2c;
            }
    for (size_t i = 0; i < (size_t)cols * n_tok; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    gl_tensor t = {.type = type, .n_cols = cols, .n_rows = rows, .data = w, .n_bytes = n_bytes};
    int n_copies = getenv("BENCH_COPIES") ? atoi(getenv("BENCH_COPIES")) : 1;
    if (n_copies < 1) n_copies = 1;
    gl_tensor *copies = malloc(sizeof *copies * (size_t)n_copies);
    if (!copies) return 1;
    for (int c = 0; c < n_copies; c++) {
        copies[c] = t;
        if (!getenv("BENCH_UNPACKED") && kern_pack(&copies[c])) return 1;
    }
    const char *stream = getenv("BENCH_STREAM");
    long long noted = stream ? (atoi(stream) ? 1LL << 46 : 0) : (long long)n_bytes;
    kern_note_weights(noted);
    kern_pool *p = kern_pool_create(threads);
    if (p && getenv("BENCH_ACT_BITS")) kern_pool_set_act_bits(p, atoi(getenv("BENCH_ACT_BITS")));
    if (!p || kern_pool_reserve(p, (size_t)cols) || kern_pool_reserve_tokens(p, n_tok, cols)) return 1;
    double *ts = malloc(sizeof(double) * reps), *cpu = malloc(sizeof(double) * reps);
    kern_matmul(p, &copies[0], x, n_tok, out);
    for (int r = 0; r < reps; r++) {
        const gl_tensor *tc = &copies[(r + 1) % n_copies];
        struct timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        double t0 = bench_now();
        kern_matmul(p, tc, x, n_tok, out);
        ts[r] = bench_now() - t0;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        cpu[r] = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
    }
    double med = bench_median(ts, reps), med_cpu = bench_median(cpu, reps);
    printf("%s %s %lldx%lld tok %d thr %d: %.3f ms  %.1f GMAC/s  %.1f GB/s weights", kern_backend(), argv[1],
           (long long)rows, (long long)cols, n_tok, threads, med * 1e3, rows * cols * (double)n_tok / med * 1e-9,
           n_bytes / med * 1e-9);
    if (threads == 1) printf("  (cpu %.3f ms, %.1f GMAC/s)", med_cpu * 1e3, rows * cols * (double)n_tok / med_cpu * 1e-9);
    printf("\n");
    kern_pool_free(p);
    kern_note_weights(-noted);
    for (int c = 0; c < n_copies; c++) kern_unpack(&copies[c]);
    free(copies);
    free(ts); free(cpu); free(w); free(x); free(out);
    return 0;
}
