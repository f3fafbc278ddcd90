/* kv_cache.c -- block pool, reference counts, LRU free queue, prefix hash map. */
#include "kv_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gl_error.h"
#include "kernels.h"
#include "quant.h"

int kv_q8_chunk(int head_dim) {
    int c = 32;
    while (c > 1 && head_dim % c) c--;
    return c;
}

/* One block's K (or V) of one layer. */
static size_t block_stride(int kv_dim, int head_dim, int block_size, gl_kv_type type) {
    size_t n = (size_t)kv_dim * (size_t)block_size;
    switch (type) {
    case GL_KV_F32: return 4 * n;
    case GL_KV_Q8_0: return kern_kv_q8_scales(kv_dim, block_size) + 2 * n / (size_t)kv_q8_chunk(head_dim);
    default: return 2 * n;
    }
}

size_t kv_block_bytes(int n_layers, int kv_dim, int head_dim, int block_size, gl_kv_type type) {
    return 2 * (size_t)n_layers * block_stride(kv_dim, head_dim, block_size, type);
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

gl_kv_cache *kv_create(int n_layers, int n_kv_heads, int head_dim, int block_size, int n_blocks, gl_kv_type type,
                       gl_error *err) {
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || block_size <= 0 || n_blocks <= 0 ||
        (unsigned)type > GL_KV_F32) {
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
    kv->type = type;
    kv->elem_size = type == GL_KV_F32 ? 4 : type == GL_KV_F16 ? 2 : 1;
    kv->q8_chunk = kv_q8_chunk(head_dim);
    kv->block_stride = block_stride(kv_dim, head_dim, block_size, type);
    kv->n_buckets = 1;
    while (kv->n_buckets < 2 * n_blocks) kv->n_buckets *= 2;
    size_t half = kv->block_stride * (size_t)n_layers * (size_t)n_blocks;
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
                 kv_block_bytes(n_layers, kv_dim, head_dim, block_size, type));
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

/* n values into int8 codes at q[i * q_stride] with one fp16 scale: the
 * largest magnitude becomes +-127. The codes divide by the scale as stored,
 * so dequantising (code * scale) rounds each value to its nearest code. */
static uint16_t quantize_q8(const float *x, int n, int8_t *q, size_t q_stride) {
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    uint16_t h = gl_fp32_to_fp16(amax / 127.0f);
    float d = gl_fp16_to_fp32(h), id = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) {
        float c = roundf(x[i] * id);
        q[(size_t)i * q_stride] = (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
    }
    return h;
}

static void store_q8(gl_kv_cache *kv, int layer, int block, int slot, const float *k, const float *v) {
    int hd = kv->head_dim, qc = kv->q8_chunk, bs = kv->block_size;
    size_t n = kern_kv_q8_scales(kv->kv_dim, bs);
    int8_t *kq = (int8_t *)kv_k_block(kv, layer, block), *vq = (int8_t *)kv_v_block(kv, layer, block);
    uint16_t *ks = (uint16_t *)((uint8_t *)kq + n), *vs = (uint16_t *)((uint8_t *)vq + n);
    for (int c = 0; c < kv->kv_dim / qc; c++) { /* K channel-major: codes bs apart */
        uint16_t s = quantize_q8(k + (size_t)c * qc, qc, kq + (size_t)c * qc * bs + slot, (size_t)bs);
        ks[(size_t)c * bs + slot] = s;
    }
    for (int h = 0; h < kv->kv_dim / hd; h++) {
        int8_t *row = vq + ((size_t)h * bs + slot) * hd;
        uint16_t *rs = vs + ((size_t)h * bs + slot) * (hd / qc);
        for (int c = 0; c < hd / qc; c++) rs[c] = quantize_q8(v + (size_t)h * hd + c * qc, qc, row + c * qc, 1);
    }
}

void kv_store(gl_kv_cache *kv, int layer, int block, int slot, const float *k, const float *v) {
    if (kv->type == GL_KV_Q8_0) {
        store_q8(kv, layer, block, slot, k, v);
        return;
    }
    bool f16 = kv->type == GL_KV_F16;
    uint8_t *kd = (uint8_t *)kv_k_block(kv, layer, block) + (size_t)slot * kv->elem_size;
    size_t k_stride = (size_t)kv->block_size * kv->elem_size; /* K is channel-major */
    /* V head by head: head h's row of this slot */
    uint8_t *vd = (uint8_t *)kv_v_block(kv, layer, block) + (size_t)slot * (size_t)kv->head_dim * kv->elem_size;
    size_t v_head = (size_t)kv->block_size * (size_t)kv->head_dim * kv->elem_size;
    for (int h = 0; h < kv->kv_dim / kv->head_dim; h++) {
        const float *vh = v + (size_t)h * (size_t)kv->head_dim;
        if (f16) kern_to_f16(vh, (uint16_t *)(vd + (size_t)h * v_head), kv->head_dim);
        else memcpy(vd + (size_t)h * v_head, vh, (size_t)kv->head_dim * 4);
    }
    if (!f16) {
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
