/* kv_cache.c -- block pool, reference counts, LRU free queue, prefix hash map. */
#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "gl_error.h"
#include "kernels.h"
#include "quant.h"

size_t kv_block_bytes(int n_layers, int kv_dim, int block_size, bool f16) {
    return 2 * (size_t)n_layers * (size_t)kv_dim * (size_t)block_size * (f16 ? 2 : 4);
}

/* ---- free queue ------------------------------------------------------------ */

static void free_push_back(gl_kv_cache *kv, int b) {
    kv->free_prev[b] = kv->free_tail;
    kv->free_next[b] = -1;
    if (kv->free_tail >= 0) kv->free_next[kv->free_tail] = b;
    else kv->free_head = b;
    kv->free_tail = b;
    kv->n_free++;
}

static void free_remove(gl_kv_cache *kv, int b) {
    int p = kv->free_prev[b], n = kv->free_next[b];
    if (p >= 0) kv->free_next[p] = n;
    else kv->free_head = n;
    if (n >= 0) kv->free_prev[n] = p;
    else kv->free_tail = p;
    kv->free_prev[b] = kv->free_next[b] = -1;
    kv->n_free--;
}

/* ---- hash map ---------------------------------------------------------------- */

static int *bucket_of(const gl_kv_cache *kv, uint64_t hash) {
    return &kv->bucket[hash & (uint64_t)(kv->n_buckets - 1)];
}

static void unregister(gl_kv_cache *kv, int b) {
    if (!kv->cached[b]) return;
    for (int *link = bucket_of(kv, kv->hash[b]); *link >= 0; link = &kv->chain_next[*link]) {
        if (*link == b) {
            *link = kv->chain_next[b];
            break;
        }
    }
    kv->cached[b] = false;
}

uint64_t kv_hash_block(uint64_t parent_hash, const int32_t *tokens, int n) {
    /* splitmix64 finaliser over a running state: cheap and well mixed */
    uint64_t h = parent_hash ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h ^= h >> 30;
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 27;
        h *= 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return h ? h : 1; /* 0 is "no parent" */
}

int kv_lookup(const gl_kv_cache *kv, uint64_t hash, uint64_t parent_hash, const int32_t *tokens) {
    for (int b = *bucket_of(kv, hash); b >= 0; b = kv->chain_next[b]) {
        if (kv->hash[b] == hash && kv->parent_hash[b] == parent_hash &&
            memcmp(kv->block_tokens + (size_t)b * (size_t)kv->block_size, tokens,
                   (size_t)kv->block_size * sizeof *tokens) == 0)
            return b;
    }
    return -1;
}

void kv_register(gl_kv_cache *kv, int b, uint64_t hash, uint64_t parent_hash, const int32_t *tokens) {
    if (kv->cached[b] || kv_lookup(kv, hash, parent_hash, tokens) >= 0) return;
    kv->cached[b] = true;
    kv->hash[b] = hash;
    kv->parent_hash[b] = parent_hash;
    memcpy(kv->block_tokens + (size_t)b * (size_t)kv->block_size, tokens, (size_t)kv->block_size * sizeof *tokens);
    int *head = bucket_of(kv, hash);
    kv->chain_next[b] = *head;
    *head = b;
}

/* ---- pool ---------------------------------------------------------------------- */

/* Write every page (volatile: a compiler may turn malloc + memset(0) into
 * calloc, which leaves the pages untouched). */
static void touch_pages(uint8_t *p, size_t n) {
    volatile uint8_t *v = p;
    for (size_t i = 0; i < n; i += 4096) v[i] = 0;
}

gl_kv_cache *kv_create(int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks, bool f16, gl_error *err) {
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || block_size <= 0 || n_blocks <= 0) {
        gl_error_set(err, "KV cache: invalid shape (%d layers, %d heads of %d, %d-token blocks, %d blocks)",
                     n_layers, n_kv_heads, head_dim, block_size, n_blocks);
        return NULL;
    }
    int kv_dim = n_kv_heads * head_dim;
    gl_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->head_dim = head_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->f16 = f16;
    kv->elem_size = f16 ? 2 : 4;
    kv->n_buckets = 1;
    while (kv->n_buckets < 2 * n_blocks) kv->n_buckets *= 2;
    size_t half = kv_block_bytes(n_layers, kv_dim, block_size, f16) / 2 * (size_t)n_blocks;
    size_t nb = (size_t)n_blocks;
    kv->k = malloc(half);
    kv->v = malloc(half);
    kv->ref_count = calloc(nb, sizeof *kv->ref_count);
    kv->free_prev = malloc(nb * sizeof *kv->free_prev);
    kv->free_next = malloc(nb * sizeof *kv->free_next);
    kv->cached = calloc(nb, sizeof *kv->cached);
    kv->hash = calloc(nb, sizeof *kv->hash);
    kv->parent_hash = calloc(nb, sizeof *kv->parent_hash);
    kv->block_tokens = malloc(nb * (size_t)block_size * sizeof *kv->block_tokens);
    kv->chain_next = malloc(nb * sizeof *kv->chain_next);
    kv->bucket = malloc((size_t)kv->n_buckets * sizeof *kv->bucket);
    if (!kv->k || !kv->v || !kv->ref_count || !kv->free_prev || !kv->free_next || !kv->cached || !kv->hash ||
        !kv->parent_hash || !kv->block_tokens || !kv->chain_next || !kv->bucket)
        goto oom;
    /* Touch the whole pool now: memory is committed at start-up (an
     * over-sized pool fails here, not mid-request), and no page faults land
     * on the decode path as the LRU queue cycles through every block. */
    touch_pages(kv->k, half);
    touch_pages(kv->v, half);
    for (int i = 0; i < kv->n_buckets; i++) kv->bucket[i] = -1;
    kv->free_head = kv->free_tail = -1;
    for (int b = 0; b < n_blocks; b++) free_push_back(kv, b);
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
    free(kv->free_prev);
    free(kv->free_next);
    free(kv->cached);
    free(kv->hash);
    free(kv->parent_hash);
    free(kv->block_tokens);
    free(kv->chain_next);
    free(kv->bucket);
    free(kv);
}

int kv_alloc_block(gl_kv_cache *kv) {
    int b = kv->free_head;
    if (b < 0) return -1;
    free_remove(kv, b);
    unregister(kv, b); /* evict: its contents are about to be overwritten */
    kv->ref_count[b] = 1;
    return b;
}

void kv_share_block(gl_kv_cache *kv, int block) {
    if (kv->ref_count[block]++ == 0) free_remove(kv, block);
}

void kv_release_block(gl_kv_cache *kv, int block) {
    if (--kv->ref_count[block] == 0) free_push_back(kv, block);
}

int kv_n_free(const gl_kv_cache *kv) { return kv->n_free; }

void kv_store(gl_kv_cache *kv, int layer, int block, int slot, const float *k, const float *v) {
    uint8_t *kd = (uint8_t *)kv_k_block(kv, layer, block) + (size_t)slot * kv->elem_size;
    size_t k_stride = (size_t)kv->block_size * kv->elem_size; /* K is channel-major */
    /* V head by head: head h's row of this slot */
    uint8_t *vd = (uint8_t *)kv_v_block(kv, layer, block) + (size_t)slot * (size_t)kv->head_dim * kv->elem_size;
    size_t v_head = (size_t)kv->block_size * (size_t)kv->head_dim * kv->elem_size;
    for (int h = 0; h < kv->kv_dim / kv->head_dim; h++) {
        const float *vh = v + (size_t)h * (size_t)kv->head_dim;
        if (kv->f16) kern_to_f16(vh, (uint16_t *)(vd + (size_t)h * v_head), kv->head_dim);
        else memcpy(vd + (size_t)h * v_head, vh, (size_t)kv->head_dim * 4);
    }
    if (!kv->f16) {
        for (int i = 0; i < kv->kv_dim; i++) memcpy(kd + (size_t)i * k_stride, &k[i], 4);
        return;
    }
    uint16_t kh[256];
    for (int i0 = 0; i0 < kv->kv_dim; i0 += 256) {
        int n = kv->kv_dim - i0 < 256 ? kv->kv_dim - i0 : 256;
        kern_to_f16(k + i0, kh, n);
        for (int i = 0; i < n; i++) memcpy(kd + (size_t)(i0 + i) * k_stride, &kh[i], 2);
    }
}
