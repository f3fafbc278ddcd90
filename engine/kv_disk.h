/* kv_disk.h -- the prefix cache's second tier: full KV blocks kept in a
 * folder, so a restart (or a crash, or a model unload) does not throw away
 * every cached prompt.
 *
 * One file per block, named <identity>-<hash>.kvb after the block's chained
 * prefix hash (kv_cache.h), holding a header (magic, format version, the
 * model's identity, the KV shape and type, the block's hash, parent hash
 * and token ids, a checksum of all this and one of the payload) and the
 * block's K and V of every layer exactly as the pool stores them, so a
 * block read back is bit-identical to the one computed.
 *
 * Writes are off the engine thread: kv_disk_save copies the block into a
 * queue that a writer thread drains at once (a file appears within
 * milliseconds; the folder is synced every couple of seconds), and
 * kv_disk_free writes out everything still queued. Reads happen on the
 * engine thread at admission, on a miss of the in-memory prefix cache.
 * The folder has a size bound: the least recently written or read entries
 * are deleted first. A file that is corrupt, truncated, from another model
 * or KV layout, or unreadable is skipped with a log line on stderr and
 * deleted; it never fails a request. */
#ifndef GL_KV_DISK_H
#define GL_KV_DISK_H

#include <stdbool.h>
#include <stdint.h>

#include "gl_error.h"
#include "kv_cache.h"

typedef struct kv_disk kv_disk;
struct gl_model;

typedef struct kv_disk_stats {
    uint64_t n_loaded;        /* blocks read back into the pool */
    uint64_t n_written;       /* blocks written */
    uint64_t n_evicted;       /* files deleted for the size bound */
    uint64_t n_skipped;       /* files skipped as corrupt, truncated or foreign */
    uint64_t n_dropped;       /* blocks not written: the writer's queue was full */
    uint64_t bytes;           /* bytes of the folder's entries now */
    uint64_t n_entries;       /* entries in the folder now */
} kv_disk_stats;

/* The identity of what a model computes: a hash of the GGUF's header and
 * tensor metadata, its size and a sample of its tensor data, the kernel
 * backend and the activation precision. Blocks written under another
 * identity are never read. */
uint64_t kv_disk_identity(const struct gl_model *m, int activation_bits);

/* A cache over dir (created when missing) holding at most max_bytes of
 * entries for blocks shaped like pool's; scans the folder and starts the
 * writer. NULL with err set when the folder cannot be used. */
kv_disk *kv_disk_create(const char *dir, uint64_t max_bytes, const gl_kv_cache *pool, uint64_t identity,
                        gl_error *err);
/* Writes out everything queued, syncs the folder, stops the writer. */
void kv_disk_free(kv_disk *d);

/* Queues a copy of pool block `block`, a full block with this hash, parent
 * hash and tokens, for writing (nothing when the folder has it already).
 * Engine thread; copies, never waits for the disk. */
void kv_disk_save(kv_disk *d, const gl_kv_cache *pool, int block, uint64_t hash, uint64_t parent_hash,
                  const int32_t *tokens);
/* Reads the entry with this hash, parent and tokens into pool block
 * `block`. False (the block's contents undefined) when there is none or it
 * fails a check. Engine thread. */
bool kv_disk_load(kv_disk *d, gl_kv_cache *pool, int block, uint64_t hash, uint64_t parent_hash,
                  const int32_t *tokens);
/* Waits until every block queued so far is written and the folder synced. */
void kv_disk_flush(kv_disk *d);
void kv_disk_get_stats(kv_disk *d, kv_disk_stats *out);

#endif
