/* kv_cache.h -- the paged KV cache: one pool of fixed-size blocks shared by
 * every sequence, and the block manager that hands them out.
 *
 * A block holds K and V of block_size consecutive positions of one sequence
 * for every layer. A sequence owns a block table (block ids in position
 * order); attention reads through it. Blocks are reference-counted so several
 * sequences can share the blocks of a common prompt prefix. */
#ifndef GL_KV_CACHE_H
#define GL_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "genloop.h"

typedef struct gl_kv_cache {
    int n_layers;
    int kv_dim;               /* n_kv_heads * head_dim */
    int block_size;           /* positions per block */
    int n_blocks;             /* blocks in the pool */
    bool f16;                 /* K/V stored as IEEE half, else float */
    size_t elem_size;         /* 2 or 4 */
    uint8_t *k, *v;           /* [n_layers][n_blocks][block_size][kv_dim] */
    int *ref_count;           /* [n_blocks] sequences holding each block */
    int *free_blocks;         /* stack of free block ids */
    int n_free;
} gl_kv_cache;

gl_kv_cache *kv_new(int n_layers, int kv_dim, int block_size, int n_blocks, bool f16, gl_error *err);
void kv_free(gl_kv_cache *kv);
/* Bytes one block takes (K and V, all layers): for sizing the pool. */
size_t kv_block_bytes(int n_layers, int kv_dim, int block_size, bool f16);

/* Take a free block (ref count 1), or -1 when the pool is empty. */
int kv_alloc_block(gl_kv_cache *kv);
/* Another holder for a block in use. */
void kv_share_block(gl_kv_cache *kv, int block);
/* Drop one holder; the block is free when none is left. */
void kv_release_block(gl_kv_cache *kv, int block);
int kv_n_free(const gl_kv_cache *kv);

/* Address of the K (or V) row of one position: layer, block, slot in block. */
static inline void *kv_k_row(const gl_kv_cache *kv, int layer, int block, int slot) {
    size_t idx = (((size_t)layer * (size_t)kv->n_blocks + (size_t)block) * (size_t)kv->block_size + (size_t)slot);
    return kv->k + idx * (size_t)kv->kv_dim * kv->elem_size;
}
static inline void *kv_v_row(const gl_kv_cache *kv, int layer, int block, int slot) {
    size_t idx = (((size_t)layer * (size_t)kv->n_blocks + (size_t)block) * (size_t)kv->block_size + (size_t)slot);
    return kv->v + idx * (size_t)kv->kv_dim * kv->elem_size;
}

/* Store one position's K and V (kv_dim floats each), converting to the
 * cache's element type. */
void kv_store(gl_kv_cache *kv, int layer, int block, int slot, const float *k, const float *v);

#endif
