/* bench_attention.c -- decode attention timed in isolation (a benchmark, not
 * a test): N_SEQS sequences of CTX cached positions each (F16 K/V or KV_TYPE, blocks of
 * 16 placed at random in the pool, as a long-running server leaves them),
 * one new token per sequence, over N_LAYERS layers of their own cache so the
 * K/V comes from memory as in a real decode step. Prints the median time per
 * step and the K/V bytes read per second. N_SEQS "prompt" times a prompt
 * instead: one sequence's CTX tokens in one call (a prefill step), each
 * attending causally to the positions up to its own.
 *
 *   bench_attention N_HEADS N_KV_HEADS HEAD_DIM CTX N_LAYERS THREADS [N_SEQS|prompt] [REPS] [f16|q8_0|f32]
 *   (SmolLM2: 9 3 64; TinyLlama: 32 4 64) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels.h"
#include "kv_cache.h"
#include "quant.h"

#define BLOCK 16

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: bench_attention N_HEADS N_KV_HEADS HEAD_DIM CTX N_LAYERS THREADS [N_SEQS] [REPS] [KV_TYPE]\n");
        return 2;
    }
    int n_heads = atoi(argv[1]), n_kv = atoi(argv[2]), hd = atoi(argv[3]), ctx = atoi(argv[4]);
    int n_layers = atoi(argv[5]), threads = atoi(argv[6]);
    bool prompt = argc > 7 && !strcmp(argv[7], "prompt");
    int n_seqs = argc > 7 && !prompt ? atoi(argv[7]) : 1, reps = argc > 8 ? atoi(argv[8]) : 11;
    gl_kv_type type = GL_KV_F16;
    if (argc > 9 && !gl_kv_type_parse(argv[9], &type)) {
        fprintf(stderr, "bench_attention: KV_TYPE is f16, q8_0 or f32\n");
        return 2;
    }
    if (n_heads <= 0 || n_kv <= 0 || n_heads % n_kv || hd <= 0 || ctx <= 0 || n_layers <= 0 || threads <= 0 ||
        n_seqs <= 0 || reps <= 0) {
        fprintf(stderr, "bench_attention: bad arguments\n");
        return 2;
    }
    int kv_dim = n_kv * hd, blocks_per_seq = (ctx + BLOCK - 1) / BLOCK, n_blocks = blocks_per_seq * n_seqs;
    size_t stride = kv_block_bytes(1, kv_dim, hd, BLOCK, type) / 2, layer_bytes = (size_t)n_blocks * stride;
    uint8_t *k = malloc(layer_bytes * n_layers), *v = malloc(layer_bytes * n_layers);
    int n_tok = prompt ? ctx : n_seqs;
    float *q = malloc(sizeof(float) * n_tok * n_heads * hd), *out = malloc(sizeof(float) * n_tok * n_heads * hd);
    int32_t *table = malloc(sizeof(int32_t) * n_blocks), *positions = malloc(sizeof(int32_t) * n_tok);
    int32_t *seq_of = malloc(sizeof(int32_t) * n_tok);
    const int32_t **tables = malloc(sizeof *tables * n_seqs);
    double *ts = malloc(sizeof(double) * reps);
    if (!k || !v || !q || !out || !table || !positions || !seq_of || !tables || !ts) return 1;
    srand(1);
    /* F16 or F32 values in -0.5..0.5; Q8_0 codes with scales of 0.5 / 127 */
    size_t es = type == GL_KV_F32 ? 4 : type == GL_KV_F16 ? 2 : 1, n_values = layer_bytes * n_layers / es;
    uint16_t q8_scale = gl_fp32_to_fp16(0.5f / 127);
    for (size_t i = 0; i < n_values; i++) {
        for (int t = 0; t < 2; t++) {
            uint8_t *dst = (t ? v : k) + i * es;
            float x = (float)rand() / RAND_MAX - 0.5f;
            uint16_t h = gl_fp32_to_fp16(x);
            if (type == GL_KV_F32) memcpy(dst, &x, 4);
            else if (type == GL_KV_F16) memcpy(dst, &h, 2);
            else *dst = (uint8_t)(int8_t)(x * 254);
        }
    }
    if (type == GL_KV_Q8_0)
        for (size_t b = 0; b < (size_t)n_blocks * n_layers; b++)
            for (size_t off = kern_kv_q8_scales(kv_dim, BLOCK); off < stride; off += 2) {
                memcpy(k + b * stride + off, &q8_scale, 2);
                memcpy(v + b * stride + off, &q8_scale, 2);
            }
    for (int i = 0; i < n_tok * n_heads * hd; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < n_blocks; i++) table[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) { /* shuffled: blocks anywhere in the pool */
        int j = rand() % (i + 1), t = table[i];
        table[i] = table[j], table[j] = t;
    }
    for (int s = 0; s < n_seqs; s++) tables[s] = table + s * blocks_per_seq, positions[s] = ctx - 1, seq_of[s] = s;
    for (int t = 0; prompt && t < n_tok; t++) positions[t] = t, seq_of[t] = 0;
    kern_pool *p = kern_pool_create(threads);
    if (!p) return 1;
    kern_attn a = {.n_tokens = n_tok, .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .q = q, .out = out,
                   .positions = positions, .seq_of_token = seq_of, .block_tables = tables, .block_size = BLOCK,
                   .type = type, .q8_chunk = kv_q8_chunk(hd)};
    for (int r = -1; r < reps; r++) {
        double t0 = bench_now();
        for (int l = 0; l < n_layers; l++) {
            a.k = (const uint8_t *)k + layer_bytes * l;
            a.v = (const uint8_t *)v + layer_bytes * l;
            if (kern_attention(p, &a)) return 1;
        }
        if (r >= 0) ts[r] = bench_now() - t0;
    }
    double med = bench_median(ts, reps);
    if (prompt) {
        /* multiply-adds of q.k and p.v over the causal triangle */
        double flops = 4.0 * hd * n_heads * n_layers * ((double)ctx * (ctx + 1) / 2);
        printf("%s prompt attention %s %d/%d heads x %d, %d tokens, %d layers, %d threads: %.3f ms/step (best %.3f)  %.1f GFLOP/s\n",
               kern_backend(), gl_kv_type_name(type), n_heads, n_kv, hd, ctx, n_layers, threads, med * 1e3,
               ts[0] * 1e3, flops / med * 1e-9);
    } else {
        printf("%s attention %s %d/%d heads x %d, ctx %d, %d layers, %d seqs, %d threads: %.3f ms/step  %.1f GB/s K/V\n",
               kern_backend(), gl_kv_type_name(type), n_heads, n_kv, hd, ctx, n_layers, n_seqs, threads, med * 1e3,
               2.0 * layer_bytes * n_layers / med * 1e-9);
    }
    kern_pool_free(p);
    free(k), free(v), free(q), free(out), free(table), free(positions), free(seq_of), free(tables), free(ts);
    return 0;
}
