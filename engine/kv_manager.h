/* kv_manager.h -- each sequence's KV blocks, between the scheduler and the
 * block pool (after vLLM's KVCacheManager).
 *
 * The scheduler thinks in tokens of whole sequences: how much of a prompt
 * the prefix cache already holds, whether n more positions fit, which
 * blocks became full and can be shared, and giving everything back. This
 * module turns those into block-pool calls (kv_cache.h) and keeps the per
 * sequence state they need: the block table attention reads through and
 * the prefix hash of every full block. */
#ifndef GL_KV_MANAGER_H
#define GL_KV_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "kv_cache.h"

typedef struct kv_manager kv_manager;
struct kv_disk;

/* One sequence's blocks. Read-only outside kv_manager.c. */
typedef struct kv_seq {
    const int32_t *tokens;    /* the sequence's token ids (owned by the sequence) */
    int n_prompt;             /* prompt tokens: their block hashes are known up front */
    int32_t *block_table;     /* [cap_blocks] pool block of each block_size positions */
    int n_blocks;             /* entries of block_table in use */
    uint64_t *block_hashes;   /* [cap_blocks] prefix hash of each full block */
    int n_published;          /* leading blocks published to the prefix cache */
    struct kv_seq *prev, *next; /* among the sequences holding blocks */
} kv_seq;

/* A manager over pool (not owned); prefix_caching off makes lookups find
 * nothing and publishing a no-op. */
kv_manager *kv_manager_create(gl_kv_cache *pool, bool prefix_caching);
void kv_manager_free(kv_manager *m);
/* Backs the prefix cache with a folder (kv_disk.h, not owned): published
 * blocks are saved to it, and a lookup that misses the pool reads the block
 * from it when it has one. */
void kv_manager_set_disk(kv_manager *m, struct kv_disk *disk);

/* Blocks for a sequence of at most cap_tokens tokens whose first n_prompt
 * are tokens[] (hashed now: admission compares them with the blocks other
 * sequences are computing). Holds no pool block yet. Any thread: touches
 * no manager state. Returns false when out of memory. */
bool kv_seq_init(kv_seq *ks, const int32_t *tokens, int n_prompt, int cap_tokens, int block_size);
/* Gives the blocks back and frees the tables. */
void kv_seq_release(kv_manager *m, kv_seq *ks);

/* Takes the cached blocks holding a prefix of the first n_tokens tokens of
 * ks (which holds no blocks) and returns the positions they cover; the last
 * token is always left to compute (its logits are needed). Returns -1,
 * holding nothing, when the next block is being computed by another
 * sequence right now: waiting a step for it beats computing it twice. */
int kv_get_computed_prefix(kv_manager *m, kv_seq *ks, int n_tokens);
/* Positions ks can take from n_computed on: its own unused slots plus every
 * free block. */
int kv_slots_available(const kv_manager *m, const kv_seq *ks, int n_computed);
/* Backs positions below end with blocks. Returns false, taking nothing,
 * when the pool has too few free blocks. */
bool kv_allocate_slots(kv_manager *m, kv_seq *ks, int end);
/* Publishes the blocks of ks that are full once n_computed positions are
 * in the cache, so later sequences with the same prefix reuse them. */
void kv_publish_full_blocks(kv_manager *m, kv_seq *ks, int n_computed);
/* Gives back the blocks of ks past those backing positions below end
 * (drafted positions rejected by speculative decoding); they were never
 * published, so the prefix cache is unaffected. */
void kv_trim_slots(kv_manager *m, kv_seq *ks, int end);
/* Gives every block of ks back (preemption, or an admission that did not
 * happen); ks can take blocks again later. */
void kv_free_blocks(kv_manager *m, kv_seq *ks);

int kv_manager_n_free(const kv_manager *m);  /* blocks not held by any sequence */
int kv_manager_block_size(const kv_manager *m);

#endif
