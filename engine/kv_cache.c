/* kv_cache.c -- block pool and reference counts. */
#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "gl_error.h"
#include "quant.h"

size_t kv_block_bytes(int n_layers, int kv_dim, int block_size, bool f16) {
    return 2 * (size_t)n_layers * (size_t)kv_dim * (size_t)block_size * (f16 ? 2 : 4);
}

gl_kv_cache *kv_new(int n_layers, int kv_dim, int block_size, int n_blocks, bool f16, gl_error *err) {
    if (n_layers <= 0 || kv_dim <= 0 || block_size <= 0 || n_blocks <= 0) {
        gl_error_set(err, "KV cache: invalid shape (%d layers, %d dims, %d-token blocks, %d blocks)",
                     n_layers, kv_dim, block_size, n_blocks);
        return NULL;
    }
    gl_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->f16 = f16;
    kv->elem_size = f16 ? 2 : 4;
    size_t half = kv_block_bytes(n_layers, kv_dim, block_size, f16) / 2 * (size_t)n_blocks;
    kv->k = malloc(half);
    kv->v = malloc(half);
    kv->ref_count = calloc((size_t)n_blocks, sizeof *kv->ref_count);
    kv->free_blocks = malloc((size_t)n_blocks * sizeof *kv->free_blocks);
    if (!kv->k || !kv->v || !kv->ref_count || !kv->free_blocks) goto oom;
    /* Stack order: block 0 is handed out first. */
    for (int i = 0; i < n_blocks; i++) kv->free_blocks[i] = n_blocks - 1 - i;
    kv->n_free = n_blocks;
    return kv;
oom:
    kv_free(kv);
    gl_error_set(err, "KV cache: cannot allocate %d blocks of %zu bytes", n_blocks,
                 kv_block_bytes(n_layers, kv_dim, block_size, f16));
    return NULL;
}

void kv_free(gl_kv_cache *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv->ref_count);
    free(kv->free_blocks);
    free(kv);
}

int kv_alloc_block(gl_kv_cache *kv) {
    if (kv->n_free == 0) return -1;
    int b = kv->free_blocks[--kv->n_free];
    kv->ref_count[b] = 1;
    return b;
}

void kv_share_block(gl_kv_cache *kv, int block) { kv->ref_count[block]++; }

void kv_release_block(gl_kv_cache *kv, int block) {
    if (--kv->ref_count[block] == 0) kv->free_blocks[kv->n_free++] = block;
}

int kv_n_free(const gl_kv_cache *kv) { return kv->n_free; }

void kv_store(gl_kv_cache *kv, int layer, int block, int slot, const float *k, const float *v) {
    void *kd = kv_k_row(kv, layer, block, slot), *vd = kv_v_row(kv, layer, block, slot);
    if (!kv->f16) {
        memcpy(kd, k, (size_t)kv->kv_dim * 4);
        memcpy(vd, v, (size_t)kv->kv_dim * 4);
        return;
    }
    uint16_t *kh = kd, *vh = vd;
    for (int i = 0; i < kv->kv_dim; i++) {
        kh[i] = gl_fp32_to_fp16(k[i]);
        vh[i] = gl_fp32_to_fp16(v[i]);
    }
}
