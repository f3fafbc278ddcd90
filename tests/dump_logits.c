/* dump_logits -- logits of every position of a token list, for comparison
 * with the independent numpy reference (tests/py/reference.py).
 *
 *   dump_logits [--decode] [--threads N] [--kv-f16] [--activation-bits 16|12|8] MODEL OUT.f32 id1 id2 ...
 *
 * Default: the whole list in one batched forward pass (prefill). --decode:
 * one token per forward pass, so every position reads earlier K/V from the
 * cache. Writes n_tokens x n_vocab little-endian float32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genloop.h"
#include "kernels.h"
#include "kv_cache.h"
#include "model.h"

int main(int argc, char **argv) {
    bool decode = false, kv_f16 = false;
    int n_threads = 2, act_bits = 16, a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "--decode")) decode = true;
        else if (!strcmp(argv[a], "--kv-f16")) kv_f16 = true;
        else if (!strcmp(argv[a], "--threads") && a + 1 < argc) n_threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--activation-bits") && a + 1 < argc) act_bits = atoi(argv[++a]);
        else {
            fprintf(stderr, "dump_logits: unknown option %s\n", argv[a]);
            return 2;
        }
    }
    if (argc - a < 3) {
        fprintf(stderr, "usage: dump_logits [--decode] [--threads N] [--kv-f16] [--activation-bits 16|12|8] MODEL OUT.f32 id...\n");
        return 2;
    }
    gl_error err;
    gl_model *m = gl_model_load(argv[a], &err);
    if (!m) {
        fprintf(stderr, "dump_logits: %s\n", err.message);
        return 1;
    }
    const char *out_path = argv[a + 1];
    int n = argc - a - 2;
    int32_t *ids = malloc((size_t)n * sizeof *ids), *positions = malloc((size_t)n * sizeof *positions);
    int32_t *seq = calloc((size_t)n, sizeof *seq), *rows = malloc((size_t)n * sizeof *rows);
    for (int i = 0; i < n; i++) {
        ids[i] = atoi(argv[a + 2 + i]);
        positions[i] = i;
        rows[i] = i;
    }
    const gl_config *c = &m->config;
    int block_size = 16, n_blocks = (n + block_size - 1) / block_size;
    gl_kv_cache *kv = kv_create(c->n_layers, c->n_kv_heads, c->head_dim, block_size, n_blocks, kv_f16 ? GL_KV_F16 : GL_KV_F32, &err);
    gl_run_state *rs = kv ? model_run_state_create(m, n, n, &err) : NULL;
    kern_pool *pool = kern_pool_create(n_threads);
    if (pool && kern_pool_set_act_bits(pool, act_bits)) {
        fprintf(stderr, "dump_logits: --activation-bits must be 8, 12 or 16\n");
        return 2;
    }
    float *logits = malloc((size_t)n * (size_t)c->n_vocab * sizeof *logits);
    int32_t *table = malloc((size_t)n_blocks * sizeof *table);
    if (!rs || !pool || !logits || !table || kern_pool_reserve(pool, (size_t)c->n_widest)) {
        fprintf(stderr, "dump_logits: %s\n", rs ? "out of memory" : err.message);
        return 1;
    }
    for (int b = 0; b < n_blocks; b++) table[b] = kv_alloc_block(kv);
    const int32_t *tables[1] = {table};
    int rc = 0;
    if (decode) {
        for (int i = 0; i < n && !rc; i++) {
            gl_batch b = {.n_tokens = 1, .tokens = ids + i, .positions = positions + i, .seq_of_token = seq,
                          .block_tables = tables, .n_logits = 1, .logit_tokens = rows};
            rc = model_forward(m, rs, pool, kv, &b, logits + (size_t)i * c->n_vocab, &err);
        }
    } else {
        gl_batch b = {.n_tokens = n, .tokens = ids, .positions = positions, .seq_of_token = seq,
                      .block_tables = tables, .n_logits = n, .logit_tokens = rows};
        rc = model_forward(m, rs, pool, kv, &b, logits, &err);
    }
    if (rc) {
        fprintf(stderr, "dump_logits: %s\n", err.message);
        return 1;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(logits, sizeof *logits, (size_t)n * c->n_vocab, f) != (size_t)n * c->n_vocab) {
        fprintf(stderr, "dump_logits: cannot write %s\n", out_path);
        return 1;
    }
    fclose(f);
    free(ids), free(positions), free(seq), free(rows), free(logits), free(table);
    model_run_state_free(rs);
    kv_free(kv);
    kern_pool_free(pool);
    gl_model_free(m);
    return 0;
}
