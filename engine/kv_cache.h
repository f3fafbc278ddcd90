/* kv_cache.h -- the paged KV cache: one pool of fixed-size blocks shared by
 * every sequence. Sequences take and give back blocks through
 * kv_manager.h, which sits on top of this pool.
 *
 * A block holds K and V of block_size consecutive positions of one sequence
 * for every layer. A sequence has a block table (block ids in position
 * order, kept by kv_manager.c); attention reads through it. Blocks are reference-counted so several
 * sequences can share the blocks of a common prompt prefix.
 *
 * Prefix caching: a full block is identified by the hash of (its parent
 * block's hash, its token ids), so equal hashes mean equal prefixes. Freed
 * blocks keep their contents and stay findable in a hash map; they wait in
 * an LRU free queue and are evicted (unregistered) only when the pool needs
 * a fresh block. */
#ifndef GL_KV_CACHE_H
#define GL_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "genloop.h"

typedef struct gl_kv_cache {
    int n_layers;
    int kv_dim;               /* n_kv_heads * head_dim */
    int head_dim;             /* channels of one KV head */
    int block_size;           /* positions per block */
    int n_blocks;             /* blocks in the pool */
    gl_kv_type type;          /* element type of K and V */
    size_t elem_size;         /* bytes of one value: 4, 2, or 1 (Q8_0, scales apart) */
    int q8_chunk;             /* Q8_0: channels of a head sharing one scale (kv_q8_chunk) */
    size_t block_stride;      /* bytes of one block's K (or V) of one layer, scales included */
    uint8_t *k, *v;           /* [n_layers][n_blocks] blocks of block_stride bytes (kv_k_block, kv_v_block) */
    int *ref_count;           /* [n_blocks] sequences holding each block */
    int *free_prev, *free_next; /* [n_blocks] LRU free queue links, -1 = none */
    int free_head, free_tail; /* oldest and newest free block, -1 when empty */
    int n_free;               /* blocks with ref_count 0 (cached or not) */
    bool *cached;             /* [n_blocks] registered in the hash map */
    uint64_t *hash;           /* [n_blocks] block hash when cached */
    uint64_t *parent_hash;    /* [n_blocks] parent's hash, to tell collisions apart */
    int32_t *block_tokens;    /* [n_blocks][block_size] token ids when cached */
    int *bucket;              /* [n_buckets] first block of each hash chain, -1 */
    int *chain_next;          /* [n_blocks] next block in the same chain */
    int n_buckets;            /* power of two */
} gl_kv_cache;

gl_kv_cache *kv_create(int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks, gl_kv_type type,
                       gl_error *err);
void kv_free(gl_kv_cache *kv);
/* Bytes one block takes (K and V, all layers): for sizing the pool. */
size_t kv_block_bytes(int n_layers, int kv_dim, int head_dim, int block_size, gl_kv_type type);
/* Q8_0 scale groups: 32 channels of a head, or for a head dim that is not a
 * multiple of 32 (tiny test models) its largest divisor below 32. */
int kv_q8_chunk(int head_dim);

/* Take the least recently freed block (ref count 1), evicting it from the
 * prefix cache; -1 when every block is in use. */
int kv_alloc_block(gl_kv_cache *kv);
/* Another holder for a block: in use, or cached in the free queue. */
void kv_share_block(gl_kv_cache *kv, int block);
/* Drop one holder; at zero the block joins the free queue (still cached). */
void kv_release_block(gl_kv_cache *kv, int block);
int kv_n_free(const gl_kv_cache *kv);

/* Hash of a full block given its parent's hash (0 for the first block). */
uint64_t kv_hash_block(uint64_t parent_hash, const int32_t *tokens, int n);
/* The cached block with this hash, parent and tokens, or -1. */
int kv_lookup(const gl_kv_cache *kv, uint64_t hash, uint64_t parent_hash, const int32_t *tokens);
/* Publish a full, computed block for reuse (no-op when an equal block is
 * already published). */
void kv_register(gl_kv_cache *kv, int block, uint64_t hash, uint64_t parent_hash, const int32_t *tokens);

/* K of one block of one layer, channel-major: [kv_dim][block_size], so that
 * attention scores a block's positions with one vector per channel. Q8_0
 * follows the int8 values with their fp16 scales, [kv_dim / q8_chunk][block_size]:
 * a scale group's scales of a block's positions are one vector too. */
static inline void *kv_k_block(const gl_kv_cache *kv, int layer, int block) {
    return kv->k + ((size_t)layer * (size_t)kv->n_blocks + (size_t)block) * kv->block_stride;
}
/* V of one block of one layer, head by head: [n_kv_heads][block_size][head_dim],
 * so that a KV group's V rows of a block are one contiguous run, which
 * attention reads (and prefetches) as such. Q8_0 follows the int8 values
 * with their fp16 scales, [n_kv_heads][block_size][head_dim / q8_chunk]. */
static inline void *kv_v_block(const gl_kv_cache *kv, int layer, int block) {
    return kv->v + ((size_t)layer * (size_t)kv->n_blocks + (size_t)block) * kv->block_stride;
}

/* Store one position's K and V (kv_dim floats each), converting to the
 * cache's element type (Q8_0: each scale group's largest magnitude maps to 127). */
void kv_store(gl_kv_cache *kv, int layer, int block, int slot, const float *k, const float *v);

#endif
