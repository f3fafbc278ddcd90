/* kv_manager.c -- sequences' block tables and block hashes over the pool. */
#include "kv_manager.h"

#include <stdlib.h>

#include "kv_disk.h"

struct kv_manager {
    gl_kv_cache *pool;
    bool prefix_caching;
    kv_disk *disk;            /* the prefix cache's folder, or NULL */
    kv_seq *holding;          /* sequences holding blocks (for in-flight checks) */
};

kv_manager *kv_manager_create(gl_kv_cache *pool, bool prefix_caching) {
    kv_manager *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->pool = pool;
    m->prefix_caching = prefix_caching;
    return m;
}

void kv_manager_free(kv_manager *m) { free(m); }

void kv_manager_set_disk(kv_manager *m, kv_disk *disk) { m->disk = disk; }

int kv_manager_n_free(const kv_manager *m) { return kv_n_free(m->pool); }
int kv_manager_block_size(const kv_manager *m) { return m->pool->block_size; }

/* ---- the list of sequences holding blocks ------------------------------------- */

static bool holds_blocks(const kv_manager *m, const kv_seq *ks) { return ks->prev || m->holding == ks; }

static void link_holder(kv_manager *m, kv_seq *ks) {
    if (holds_blocks(m, ks)) return;
    ks->prev = NULL;
    ks->next = m->holding;
    if (m->holding) m->holding->prev = ks;
    m->holding = ks;
}

static void unlink_holder(kv_manager *m, kv_seq *ks) {
    if (!holds_blocks(m, ks)) return;
    if (ks->prev) ks->prev->next = ks->next;
    else m->holding = ks->next;
    if (ks->next) ks->next->prev = ks->prev;
    ks->prev = ks->next = NULL;
}

/* ---- per sequence ----------------------------------------------------------------- */

bool kv_seq_init(kv_seq *ks, const int32_t *tokens, int n_prompt, int cap_tokens, int block_size) {
    int cap_blocks = (cap_tokens + block_size - 1) / block_size;
    *ks = (kv_seq){.tokens = tokens, .n_prompt = n_prompt};
    ks->block_table = malloc((size_t)cap_blocks * sizeof *ks->block_table);
    ks->block_hashes = malloc((size_t)cap_blocks * sizeof *ks->block_hashes);
    if (!ks->block_table || !ks->block_hashes) return false;
    for (int i = 0; i < n_prompt / block_size; i++)
        ks->block_hashes[i] = kv_hash_block(i ? ks->block_hashes[i - 1] : 0, tokens + (size_t)i * (size_t)block_size,
                                            block_size);
    return true;
}

void kv_free_blocks(kv_manager *m, kv_seq *ks) {
    for (int b = 0; b < ks->n_blocks; b++) kv_release_block(m->pool, ks->block_table[b]);
    ks->n_blocks = 0;
    ks->n_published = 0;
    unlink_holder(m, ks);
}

void kv_trim_slots(kv_manager *m, kv_seq *ks, int end) {
    int keep = (end + m->pool->block_size - 1) / m->pool->block_size;
    if (keep < ks->n_published) keep = ks->n_published;
    while (ks->n_blocks > keep) kv_release_block(m->pool, ks->block_table[--ks->n_blocks]);
    if (ks->n_blocks == 0) unlink_holder(m, ks);
}

void kv_seq_release(kv_manager *m, kv_seq *ks) {
    if (m) kv_free_blocks(m, ks);
    free(ks->block_table);
    free(ks->block_hashes);
    ks->block_table = NULL;
    ks->block_hashes = NULL;
}

/* Hash of block i: precomputed for the prompt, computed for blocks holding
 * generated tokens (their predecessors are hashed already). */
static uint64_t block_hash(const kv_manager *m, kv_seq *ks, int i) {
    int bs = m->pool->block_size;
    if (i >= ks->n_prompt / bs)
        ks->block_hashes[i] = kv_hash_block(i ? ks->block_hashes[i - 1] : 0, ks->tokens + (size_t)i * (size_t)bs, bs);
    return ks->block_hashes[i];
}

/* A fresh pool block holding the disk's copy of this block, published in
 * the prefix cache; -1 when the disk has none or the pool no free block. */
static int load_from_disk(kv_manager *m, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    if (!m->disk || kv_n_free(m->pool) == 0) return -1;
    int b = kv_alloc_block(m->pool);
    if (!kv_disk_load(m->disk, m->pool, b, hash, parent, tokens)) {
        kv_release_block(m->pool, b);
        return -1;
    }
    kv_register(m->pool, b, hash, parent, tokens);
    return b;
}

/* True when another sequence is computing prompt block i with this hash. */
static bool block_in_flight(const kv_manager *m, const kv_seq *self, int i, uint64_t hash) {
    int bs = m->pool->block_size;
    for (const kv_seq *o = m->holding; o; o = o->next)
        if (o != self && o->n_published <= i && i < o->n_prompt / bs && o->block_hashes[i] == hash) return true;
    return false;
}

int kv_get_computed_prefix(kv_manager *m, kv_seq *ks, int n_tokens) {
    if (!m->prefix_caching) return 0;
    int bs = m->pool->block_size;
    int max_blocks = (n_tokens - 1) / bs;
    while (ks->n_blocks < max_blocks) {
        int i = ks->n_blocks;
        uint64_t parent = i ? ks->block_hashes[i - 1] : 0, h = block_hash(m, ks, i);
        int b = kv_lookup(m->pool, h, parent, ks->tokens + (size_t)i * (size_t)bs);
        if (b < 0) {
            if (block_in_flight(m, ks, i, h)) {
                kv_free_blocks(m, ks);
                return -1;
            }
            if ((b = load_from_disk(m, h, parent, ks->tokens + (size_t)i * (size_t)bs)) < 0) break;
        } else {
            kv_share_block(m->pool, b);
        }
        ks->block_table[ks->n_blocks++] = b;
        link_holder(m, ks);
    }
    ks->n_published = ks->n_blocks;
    return ks->n_blocks * bs;
}

int kv_slots_available(const kv_manager *m, const kv_seq *ks, int n_computed) {
    int bs = m->pool->block_size;
    return ks->n_blocks * bs - n_computed + kv_n_free(m->pool) * bs;
}

bool kv_allocate_slots(kv_manager *m, kv_seq *ks, int end) {
    int need = (end + m->pool->block_size - 1) / m->pool->block_size - ks->n_blocks;
    if (need > kv_n_free(m->pool)) return false;
    for (; need > 0; need--) ks->block_table[ks->n_blocks++] = kv_alloc_block(m->pool);
    if (ks->n_blocks > 0) link_holder(m, ks);
    return true;
}

void kv_publish_full_blocks(kv_manager *m, kv_seq *ks, int n_computed) {
    if (!m->prefix_caching) return;
    int bs = m->pool->block_size;
    while ((ks->n_published + 1) * bs <= n_computed) {
        int i = ks->n_published;
        uint64_t h = block_hash(m, ks, i);
        uint64_t parent = i ? ks->block_hashes[i - 1] : 0;
        kv_register(m->pool, ks->block_table[i], h, parent, ks->tokens + (size_t)i * (size_t)bs);
        if (m->disk) kv_disk_save(m->disk, m->pool, ks->block_table[i], h, parent, ks->tokens + (size_t)i * (size_t)bs);
        ks->n_published++;
    }
}
