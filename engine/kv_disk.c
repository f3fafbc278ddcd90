/* kv_disk.c -- KV blocks in a folder: the entry index, the writer thread,
 * reading back with every check. */
#include "kv_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"
#include "model.h"

#define KVD_VERSION 1
#define KVD_QUEUE_BYTES ((size_t)256 << 20) /* copies waiting for the writer at most */
#define KVD_SYNC_S 2                        /* a crash of the machine loses at most this much */

static const char kvd_magic[8] = "GLKVBLK";

/* The file's first bytes; then block_size token ids, then K and V of every
 * layer (block_stride bytes each, layer by layer, K first). */
typedef struct kvd_header {
    char magic[8];
    uint32_t version;
    uint32_t kv_type;         /* gl_kv_type */
    uint64_t identity;        /* kv_disk_identity of the model that computed it */
    uint32_t n_layers, kv_dim, head_dim, block_size;
    uint64_t block_stride;
    uint64_t hash, parent_hash; /* the block's prefix hash and its parent's */
    uint64_t payload_sum;     /* checksum of K and V */
    uint64_t header_sum;      /* checksum of the fields above and the tokens */
} kvd_header;

/* One file of the folder, in the index. */
typedef struct kvd_entry {
    uint64_t identity, hash;  /* from its name */
    uint64_t bytes;
    struct kvd_entry *older, *newer; /* age list: oldest is evicted first */
    struct kvd_entry *chain;  /* same bucket */
} kvd_entry;

/* A block copied for the writer. */
typedef struct kvd_job {
    struct kvd_job *next;
    kvd_header header;        /* sums filled in by the writer */
    uint8_t data[];           /* tokens, then K and V */
} kvd_job;

struct kv_disk {
    char *dir;
    int dir_fd;
    uint64_t max_bytes;
    uint64_t identity;
    kvd_header shape;         /* the fields every entry must match */
    size_t tokens_bytes, payload_bytes, file_bytes;
    uint8_t *scratch;         /* [tokens_bytes + payload_bytes] for reads (engine thread) */

    pthread_mutex_t mu;       /* everything below */
    pthread_cond_t work, done;
    kvd_entry **buckets;
    uint64_t n_buckets;       /* power of two */
    kvd_entry *oldest, *newest;
    kvd_job *q_head, *q_tail;
    size_t q_bytes;
    uint64_t n_queued, n_finished; /* jobs ever queued and ever handled, for flush */
    bool dirty;               /* files written since the last sync */
    double dirty_since;
    bool stop;
    kv_disk_stats stats;
    pthread_t writer;
    bool writer_started;
};

/* ---- checksums ------------------------------------------------------------------ */

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Four independent multiply-rotate lanes over 8-byte words: fast enough to
 * check a block as it is read, and any flipped or shifted byte changes it. */
static uint64_t checksum64(const void *p, size_t n, uint64_t seed) {
    const uint64_t p1 = 0x9e3779b185ebca87ull, p2 = 0xc2b2ae3d27d4eb4full, p3 = 0x165667b19e3779f9ull;
    const uint8_t *b = p;
    uint64_t lane[4] = {seed + p1 + p2, seed + p2, seed, seed - p1};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * l, 8);
            lane[l] = rotl64(lane[l] + w * p2, 31) * p1;
        }
    }
    uint64_t h = (uint64_t)n * p3;
    for (int l = 0; l < 4; l++) h = rotl64(h ^ lane[l], 27) * p1 + p3;
    for (; i < n; i++) h = rotl64(h ^ (b[i] * p3), 11) * p1;
    h ^= h >> 33;
    h *= p2;
    h ^= h >> 29;
    return h;
}

static uint64_t header_sum(const kvd_header *h, const void *tokens, size_t tokens_bytes) {
    return checksum64(tokens, tokens_bytes, checksum64(h, offsetof(kvd_header, header_sum), 0));
}

uint64_t kv_disk_identity(const gl_model *m, int activation_bits) {
    const gguf_file *f = m->file;
    size_t head = f->data_offset < f->map_size ? (size_t)f->data_offset : f->map_size;
    uint64_t id = checksum64(f->map, head, (uint64_t)f->map_size);
    size_t tail = f->map_size - head < ((size_t)1 << 20) ? f->map_size - head : (size_t)1 << 20;
    id = checksum64(f->map + f->map_size - tail, tail, id);
    const char *backend = kern_backend();
    id = checksum64(backend, strlen(backend), id);
    return checksum64(&activation_bits, sizeof activation_bits, id);
}

/* ---- the index (under mu) ----------------------------------------------------------- */

static uint64_t key_of(uint64_t identity, uint64_t hash) { return rotl64(identity, 17) ^ hash; }

static kvd_entry **bucket_of(kv_disk *d, uint64_t identity, uint64_t hash) {
    return &d->buckets[key_of(identity, hash) & (d->n_buckets - 1)];
}

static kvd_entry *index_find(kv_disk *d, uint64_t identity, uint64_t hash) {
    for (kvd_entry *e = *bucket_of(d, identity, hash); e; e = e->chain)
        if (e->identity == identity && e->hash == hash) return e;
    return NULL;
}

static void age_unlink(kv_disk *d, kvd_entry *e) {
    if (e->older) e->older->newer = e->newer;
    else d->oldest = e->newer;
    if (e->newer) e->newer->older = e->older;
    else d->newest = e->older;
    e->older = e->newer = NULL;
}

static void age_push_newest(kv_disk *d, kvd_entry *e) {
    e->older = d->newest;
    e->newer = NULL;
    if (d->newest) d->newest->newer = e;
    else d->oldest = e;
    d->newest = e;
}

static void grow_buckets(kv_disk *d) {
    uint64_t n = d->n_buckets * 2;
    kvd_entry **b = calloc(n, sizeof *b);
    if (!b) return; /* longer chains, still correct */
    for (uint64_t i = 0; i < d->n_buckets; i++) {
        for (kvd_entry *e = d->buckets[i], *next; e; e = next) {
            next = e->chain;
            kvd_entry **head = &b[key_of(e->identity, e->hash) & (n - 1)];
            e->chain = *head;
            *head = e;
        }
    }
    free(d->buckets);
    d->buckets = b;
    d->n_buckets = n;
}

/* Adds (or refreshes) an entry as the newest. */
static void index_add(kv_disk *d, uint64_t identity, uint64_t hash, uint64_t bytes) {
    kvd_entry *e = index_find(d, identity, hash);
    if (e) {
        d->stats.bytes -= e->bytes;
        age_unlink(d, e);
    } else {
        if (!(e = calloc(1, sizeof *e))) return; /* the file stays, unindexed until a restart */
        e->identity = identity;
        e->hash = hash;
        kvd_entry **head = bucket_of(d, identity, hash);
        e->chain = *head;
        *head = e;
        if (++d->stats.n_entries > d->n_buckets) grow_buckets(d);
    }
    e->bytes = bytes;
    d->stats.bytes += bytes;
    age_push_newest(d, e);
}

static void index_remove(kv_disk *d, kvd_entry *e) {
    for (kvd_entry **link = bucket_of(d, e->identity, e->hash); *link; link = &(*link)->chain) {
        if (*link == e) {
            *link = e->chain;
            break;
        }
    }
    age_unlink(d, e);
    d->stats.bytes -= e->bytes;
    d->stats.n_entries--;
    free(e);
}

static void entry_name(char *out, size_t n, uint64_t identity, uint64_t hash) {
    snprintf(out, n, "%016llx-%016llx.kvb", (unsigned long long)identity, (unsigned long long)hash);
}

/* Deletes the oldest entries until `incoming` more bytes fit the bound. */
static void evict_for(kv_disk *d, uint64_t incoming) {
    while (d->oldest && d->stats.bytes + incoming > d->max_bytes) {
        char name[64];
        entry_name(name, sizeof name, d->oldest->identity, d->oldest->hash);
        unlinkat(d->dir_fd, name, 0);
        index_remove(d, d->oldest);
        d->stats.n_evicted++;
    }
}

/* ---- the folder at start-up ------------------------------------------------------------ */

typedef struct found_file {
    uint64_t identity, hash, bytes;
    struct timespec mtime;
} found_file;

static int by_mtime(const void *a, const void *b) {
    const struct timespec *x = &((const found_file *)a)->mtime, *y = &((const found_file *)b)->mtime;
    if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? -1 : 1;
    return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

/* Temporary files of a writer that died mid-write: ".kvb.tmp.<pid>.<n>" of
 * a process that is gone. */
static bool stale_temp(const char *name) {
    const char *t = strstr(name, ".kvb.tmp.");
    if (name[0] != '.' || !t) return false;
    long pid = strtol(t + 9, NULL, 10);
    return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Indexes the folder's entries, oldest first (by modification time: reads
 * touch it), for every identity: they all count towards the bound. */
static bool scan_folder(kv_disk *d, gl_error *err) {
    int fd = dup(d->dir_fd);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0) close(fd);
        gl_error_set(err, "--kv-cache-dir %s: %s", d->dir, strerror(errno));
        return false;
    }
    found_file *found = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        unsigned long long identity, hash;
        char tail[8];
        if (stale_temp(de->d_name)) {
            unlinkat(d->dir_fd, de->d_name, 0);
            continue;
        }
        if (strlen(de->d_name) != 37 || sscanf(de->d_name, "%16llx-%16llx.%3s", &identity, &hash, tail) != 3 ||
            strcmp(tail, "kvb"))
            continue;
        struct stat st;
        if (fstatat(d->dir_fd, de->d_name, &st, 0) || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            found_file *more = realloc(found, cap * sizeof *found);
            if (!more) break;
            found = more;
        }
        found[n++] = (found_file){identity, hash, (uint64_t)st.st_size, st.st_mtim};
    }
    closedir(dir);
    if (n) qsort(found, n, sizeof *found, by_mtime);
    for (size_t i = 0; i < n; i++) index_add(d, found[i].identity, found[i].hash, found[i].bytes);
    free(found);
    evict_for(d, 0);
    return true;
}

/* ---- the writer thread -------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool write_all(int fd, const void *buf, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const uint8_t *)buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        done += (size_t)w;
    }
    return true;
}

/* Writes one block: a temporary file renamed into place, so a reader (or a
 * restart after a crash) sees a whole entry or none. */
static void write_job(kv_disk *d, kvd_job *job) {
    kvd_header *h = &job->header;
    pthread_mutex_lock(&d->mu);
    bool have = index_find(d, h->identity, h->hash) != NULL;
    pthread_mutex_unlock(&d->mu);
    if (have) return;
    h->payload_sum = checksum64(job->data + d->tokens_bytes, d->payload_bytes, 0);
    h->header_sum = header_sum(h, job->data, d->tokens_bytes);
    static unsigned long counter;
    char name[64], temp[96];
    entry_name(name, sizeof name, h->identity, h->hash);
    snprintf(temp, sizeof temp, ".%s.tmp.%ld.%lu", name, (long)getpid(), counter++);
    int fd = openat(d->dir_fd, temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write_all(fd, h, sizeof *h) && write_all(fd, job->data, d->tokens_bytes + d->payload_bytes);
    if (fd >= 0 && close(fd)) ok = false;
    int error = ok ? 0 : errno;
    pthread_mutex_lock(&d->mu);
    if (ok && d->file_bytes <= d->max_bytes) {
        evict_for(d, d->file_bytes);
        ok = renameat(d->dir_fd, temp, d->dir_fd, name) == 0;
        error = ok ? 0 : errno;
        if (ok) {
            index_add(d, h->identity, h->hash, d->file_bytes);
            d->stats.n_written++;
            if (!d->dirty) d->dirty_since = now_s();
            d->dirty = true;
        }
    } else {
        ok = false;
    }
    if (!ok) {
        if (d->stats.n_dropped++ == 0) /* one line, not one a block */
            fprintf(stderr, "genloop: kv-cache-dir %s: cannot write %s: %s (further failures are only counted)\n",
                    d->dir, name, d->file_bytes > d->max_bytes ? "larger than the size bound" : strerror(error));
        unlinkat(d->dir_fd, temp, 0);
    }
    pthread_mutex_unlock(&d->mu);
}

static void *writer_main(void *arg) {
    kv_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        if (!d->q_head && d->dirty && (d->stop || now_s() - d->dirty_since >= KVD_SYNC_S)) {
            d->dirty = false;
            pthread_mutex_unlock(&d->mu);
            syncfs(d->dir_fd);
            pthread_mutex_lock(&d->mu);
            continue;
        }
        if (!d->q_head) {
            if (d->stop) break;
            if (d->dirty) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += KVD_SYNC_S;
                pthread_cond_timedwait(&d->work, &d->mu, &until);
            } else {
                pthread_cond_wait(&d->work, &d->mu);
            }
            continue;
        }
        kvd_job *job = d->q_head;
        d->q_head = job->next;
        if (!d->q_head) d->q_tail = NULL;
        pthread_mutex_unlock(&d->mu);
        write_job(d, job);
        free(job);
        pthread_mutex_lock(&d->mu);
        d->q_bytes -= d->tokens_bytes + d->payload_bytes;
        d->n_finished++;
        pthread_cond_broadcast(&d->done);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

kv_disk *kv_disk_create(const char *dir, uint64_t max_bytes, const gl_kv_cache *pool, uint64_t identity,
                        gl_error *err) {
    if (mkdir(dir, 0755) && errno != EEXIST) {
        gl_error_set(err, "--kv-cache-dir %s: %s", dir, strerror(errno));
        return NULL;
    }
    kv_disk *d = calloc(1, sizeof *d);
    if (!d) goto oom;
    d->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->dir_fd < 0) {
        gl_error_set(err, "--kv-cache-dir %s: %s", dir, strerror(errno));
        free(d);
        return NULL;
    }
    d->dir = strdup(dir);
    d->max_bytes = max_bytes;
    d->identity = identity;
    memcpy(d->shape.magic, kvd_magic, sizeof kvd_magic);
    d->shape.version = KVD_VERSION;
    d->shape.kv_type = (uint32_t)pool->type;
    d->shape.identity = identity;
    d->shape.n_layers = (uint32_t)pool->n_layers;
    d->shape.kv_dim = (uint32_t)pool->kv_dim;
    d->shape.head_dim = (uint32_t)pool->head_dim;
    d->shape.block_size = (uint32_t)pool->block_size;
    d->shape.block_stride = pool->block_stride;
    d->tokens_bytes = (size_t)pool->block_size * sizeof(int32_t);
    d->payload_bytes = 2 * (size_t)pool->n_layers * pool->block_stride;
    d->file_bytes = sizeof(kvd_header) + d->tokens_bytes + d->payload_bytes;
    d->scratch = malloc(d->tokens_bytes + d->payload_bytes);
    d->n_buckets = 1024;
    d->buckets = calloc(d->n_buckets, sizeof *d->buckets);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->work, NULL);
    pthread_cond_init(&d->done, NULL);
    if (!d->dir || !d->scratch || !d->buckets) goto oom;
    if (!scan_folder(d, err)) goto fail;
    if (pthread_create(&d->writer, NULL, writer_main, d)) {
        gl_error_set(err, "--kv-cache-dir %s: cannot start the writer thread", dir);
        goto fail;
    }
    d->writer_started = true;
    return d;
oom:
    gl_error_set(err, "--kv-cache-dir %s: out of memory", dir);
fail:
    kv_disk_free(d);
    return NULL;
}

void kv_disk_free(kv_disk *d) {
    if (!d) return;
    if (d->writer_started) {
        pthread_mutex_lock(&d->mu);
        d->stop = true;
        pthread_cond_signal(&d->work);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->writer, NULL);
    }
    for (kvd_job *j = d->q_head, *next; j; j = next) {
        next = j->next;
        free(j);
    }
    while (d->oldest) index_remove(d, d->oldest);
    if (d->dir_fd >= 0) close(d->dir_fd);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->work);
    pthread_cond_destroy(&d->done);
    free(d->buckets);
    free(d->scratch);
    free(d->dir);
    free(d);
}

/* ---- saving and loading ------------------------------------------------------------------ */

void kv_disk_save(kv_disk *d, const gl_kv_cache *pool, int block, uint64_t hash, uint64_t parent_hash,
                  const int32_t *tokens) {
    size_t bytes = d->tokens_bytes + d->payload_bytes;
    pthread_mutex_lock(&d->mu);
    bool skip = index_find(d, d->identity, hash) != NULL;
    if (!skip && d->q_bytes + bytes > KVD_QUEUE_BYTES) {
        skip = true;
        d->stats.n_dropped++;
    }
    if (!skip) d->q_bytes += bytes; /* reserved now: the copy below runs unlocked */
    pthread_mutex_unlock(&d->mu);
    if (skip) return;
    kvd_job *job = malloc(sizeof *job + bytes);
    if (!job) {
        pthread_mutex_lock(&d->mu);
        d->q_bytes -= bytes;
        d->stats.n_dropped++;
        pthread_mutex_unlock(&d->mu);
        return;
    }
    job->next = NULL;
    job->header = d->shape;
    job->header.hash = hash;
    job->header.parent_hash = parent_hash;
    memcpy(job->data, tokens, d->tokens_bytes);
    uint8_t *out = job->data + d->tokens_bytes;
    for (int l = 0; l < pool->n_layers; l++, out += pool->block_stride)
        memcpy(out, kv_k_block(pool, l, block), pool->block_stride);
    for (int l = 0; l < pool->n_layers; l++, out += pool->block_stride)
        memcpy(out, kv_v_block(pool, l, block), pool->block_stride);
    pthread_mutex_lock(&d->mu);
    if (d->q_tail) d->q_tail->next = job;
    else d->q_head = job;
    d->q_tail = job;
    d->n_queued++;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->mu);
}

static bool read_all(int fd, void *buf, size_t n, off_t at) {
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, at + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        got += (size_t)r;
    }
    return true;
}

static const char kvd_collision[] = "hash collision";

/* Why the open file fails to be the entry asked for, or NULL when it is
 * (its tokens and K/V then in d->scratch). */
static const char *check_entry(kv_disk *d, int fd, uint64_t hash, uint64_t parent_hash, const int32_t *tokens) {
    struct stat st;
    if (fstat(fd, &st)) return strerror(errno);
    kvd_header h;
    if ((uint64_t)st.st_size < sizeof h || !read_all(fd, &h, sizeof h, 0)) return "truncated (no whole header)";
    if (memcmp(h.magic, kvd_magic, sizeof kvd_magic) || h.version != KVD_VERSION)
        return "not a genloop KV block file of this version";
    if (h.identity != d->shape.identity) return "written for another model (identity differs)";
    if (h.kv_type != d->shape.kv_type || h.n_layers != d->shape.n_layers || h.kv_dim != d->shape.kv_dim ||
        h.head_dim != d->shape.head_dim || h.block_size != d->shape.block_size ||
        h.block_stride != d->shape.block_stride)
        return "written for another KV layout (type, shape or block size differs)";
    if ((uint64_t)st.st_size != d->file_bytes) return "truncated or padded (wrong size)";
    if (!read_all(fd, d->scratch, d->tokens_bytes + d->payload_bytes, sizeof h)) return "truncated (short read)";
    if (header_sum(&h, d->scratch, d->tokens_bytes) != h.header_sum) return "corrupt header (checksum)";
    if (h.hash != hash) return "holds another block (renamed file)";
    if (h.parent_hash != parent_hash || memcmp(d->scratch, tokens, d->tokens_bytes))
        return kvd_collision; /* a sound entry for other tokens with the same hash */
    if (checksum64(d->scratch + d->tokens_bytes, d->payload_bytes, 0) != h.payload_sum)
        return "corrupt data (checksum)";
    return NULL;
}

bool kv_disk_load(kv_disk *d, gl_kv_cache *pool, int block, uint64_t hash, uint64_t parent_hash,
                  const int32_t *tokens) {
    pthread_mutex_lock(&d->mu);
    bool listed = index_find(d, d->identity, hash) != NULL;
    pthread_mutex_unlock(&d->mu);
    if (!listed) return false;
    char name[64];
    entry_name(name, sizeof name, d->identity, hash);
    int fd = openat(d->dir_fd, name, O_RDONLY | O_CLOEXEC);
    const char *fault = NULL;
    bool gone = fd < 0 && errno == ENOENT; /* deleted by hand or by another process: not a fault */
    if (fd < 0) fault = gone ? "gone" : strerror(errno);
    else fault = check_entry(d, fd, hash, parent_hash, tokens);
    if (fault == kvd_collision) { /* the entry stays for the tokens it holds */
        close(fd);
        return false;
    }
    if (!fault) futimens(fd, NULL); /* read: young again, across restarts too */
    if (fd >= 0) close(fd);
    pthread_mutex_lock(&d->mu);
    kvd_entry *e = index_find(d, d->identity, hash);
    if (fault) {
        if (!gone) {
            fprintf(stderr, "genloop: kv-cache-dir: skipping %s/%s: %s\n", d->dir, name, fault);
            d->stats.n_skipped++;
            unlinkat(d->dir_fd, name, 0);
        }
        if (e) index_remove(d, e);
    } else {
        if (e) {
            age_unlink(d, e);
            age_push_newest(d, e);
        }
        d->stats.n_loaded++;
    }
    pthread_mutex_unlock(&d->mu);
    if (fault) return false;
    const uint8_t *in = d->scratch + d->tokens_bytes;
    for (int l = 0; l < pool->n_layers; l++, in += pool->block_stride)
        memcpy(kv_k_block(pool, l, block), in, pool->block_stride);
    for (int l = 0; l < pool->n_layers; l++, in += pool->block_stride)
        memcpy(kv_v_block(pool, l, block), in, pool->block_stride);
    return true;
}

void kv_disk_flush(kv_disk *d) {
    pthread_mutex_lock(&d->mu);
    uint64_t target = d->n_queued;
    while (d->n_finished < target) pthread_cond_wait(&d->done, &d->mu);
    bool dirty = d->dirty;
    d->dirty = false;
    pthread_mutex_unlock(&d->mu);
    if (dirty) syncfs(d->dir_fd);
}

void kv_disk_get_stats(kv_disk *d, kv_disk_stats *out) {
    pthread_mutex_lock(&d->mu);
    *out = d->stats;
    pthread_mutex_unlock(&d->mu);
}
