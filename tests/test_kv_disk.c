/* test_kv_disk.c -- the prefix cache's folder: blocks written and read back
 * bit-identical across instances, bad files skipped, the size bound. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv_cache.h"
#include "kv_disk.h"
#include "testutil.h"

#define ID 0x1234abcdull
#define BS 4

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/test_kv_disk.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[512];
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, ".."))) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static int n_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) n += strstr(de->d_name, ".kvb") != NULL;
    if (d) closedir(d);
    return n;
}

static gl_kv_cache *pool_create(gl_kv_type type) {
    gl_error err;
    gl_kv_cache *kv = kv_create(2, 2, 4, BS, 8, type, &err);
    ck_assert_ptr_nonnull(kv);
    return kv;
}

/* Block b's K and V of every layer set to a pattern of seed. */
static void fill(gl_kv_cache *kv, int b, int seed) {
    for (int l = 0; l < kv->n_layers; l++) {
        uint8_t *k = kv_k_block(kv, l, b), *v = kv_v_block(kv, l, b);
        for (size_t i = 0; i < kv->block_stride; i++) {
            k[i] = (uint8_t)(seed * 31 + l * 7 + (int)i);
            v[i] = (uint8_t)(seed * 17 + l * 5 + 3 * (int)i);
        }
    }
}

static bool same_block(const gl_kv_cache *a, int ba, const gl_kv_cache *b, int bb) {
    for (int l = 0; l < a->n_layers; l++)
        if (memcmp(kv_k_block(a, l, ba), kv_k_block(b, l, bb), a->block_stride) ||
            memcmp(kv_v_block(a, l, ba), kv_v_block(b, l, bb), a->block_stride))
            return false;
    return true;
}

/* The chain of block hashes of tokens 0..4n-1 (token i = i + seed). */
static void chain(int n, int seed, int32_t tokens[][BS], uint64_t *hashes) {
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < BS; j++) tokens[i][j] = i * BS + j + seed;
        hashes[i] = kv_hash_block(i ? hashes[i - 1] : 0, tokens[i], BS);
    }
}

static kv_disk *open_disk(const gl_kv_cache *pool, uint64_t max_bytes, uint64_t id) {
    gl_error err;
    kv_disk *d = kv_disk_create(dir, max_bytes, pool, id, &err);
    ck_assert_msg(d != NULL, "%s", err.message);
    return d;
}

static void entry_path(char *out, size_t n, uint64_t id, uint64_t hash) {
    snprintf(out, n, "%s/%016llx-%016llx.kvb", dir, (unsigned long long)id, (unsigned long long)hash);
}

START_TEST(round_trip_across_instances) {
    make_dir();
    gl_kv_cache *a = pool_create(GL_KV_F16), *b = pool_create(GL_KV_F16);
    int32_t tok[3][BS];
    uint64_t h[3];
    chain(3, 100, tok, h);
    kv_disk *d = open_disk(a, 1 << 20, ID);
    for (int i = 0; i < 3; i++) {
        fill(a, i, i + 1);
        kv_disk_save(d, a, i, h[i], i ? h[i - 1] : 0, tok[i]);
    }
    kv_disk_save(d, a, 0, h[0], 0, tok[0]); /* again: written once */
    kv_disk_free(d);                         /* a stop writes everything out */
    ck_assert_int_eq(n_files(), 3);

    d = open_disk(b, 1 << 20, ID);           /* a restart */
    kv_disk_stats st;
    kv_disk_get_stats(d, &st);
    ck_assert_int_eq((int)st.n_entries, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert(kv_disk_load(d, b, 7 - i, h[i], i ? h[i - 1] : 0, tok[i]));
        ck_assert(same_block(a, i, b, 7 - i));
    }
    int32_t other[BS] = {1, 2, 3, 4};
    ck_assert(!kv_disk_load(d, b, 0, h[1], h[0], other)); /* same hash, other tokens */
    ck_assert(!kv_disk_load(d, b, 0, 12345, 0, tok[0]));  /* never written */
    kv_disk_get_stats(d, &st);
    ck_assert_int_eq((int)st.n_loaded, 3);
    kv_disk_free(d);

    d = open_disk(b, 1 << 20, ID + 1);       /* another model: finds nothing */
    ck_assert(!kv_disk_load(d, b, 0, h[0], 0, tok[0]));
    kv_disk_free(d);
    ck_assert_int_eq(n_files(), 3);          /* and deletes nothing */
    kv_free(a);
    kv_free(b);
    remove_dir();
}
END_TEST

/* Writes one entry (block 0, seed 1) and returns the file's path. */
static void write_one(gl_kv_cache *pool, int32_t tok[][BS], uint64_t *h, char *path, size_t n) {
    chain(1, 7, tok, h);
    kv_disk *d = open_disk(pool, 1 << 20, ID);
    fill(pool, 0, 1);
    kv_disk_save(d, pool, 0, h[0], 0, tok[0]);
    kv_disk_free(d);
    entry_path(path, n, ID, h[0]);
}

static void expect_skipped(gl_kv_cache *pool, gl_kv_type type, int32_t tok[][BS], uint64_t *h, const char *path) {
    gl_kv_cache *other = type == pool->type ? pool : pool_create(type);
    kv_disk *d = open_disk(other, 1 << 20, ID);
    ck_assert(!kv_disk_load(d, other, 3, h[0], 0, tok[0]));
    kv_disk_stats st;
    kv_disk_get_stats(d, &st);
    ck_assert_int_eq((int)st.n_skipped, 1);
    ck_assert_int_eq((int)st.n_entries, 0);
    kv_disk_free(d);
    ck_assert_int_eq(access(path, F_OK), -1); /* deleted, so it is not tried again */
    if (other != pool) kv_free(other);
}

START_TEST(bad_files_skipped) {
    make_dir();
    gl_kv_cache *pool = pool_create(GL_KV_F16);
    int32_t tok[1][BS];
    uint64_t h[1];
    char path[512];
    struct stat st;

    /* a flipped byte in K/V */
    write_one(pool, tok, h, path, sizeof path);
    ck_assert_int_eq(stat(path, &st), 0);
    FILE *f = fopen(path, "r+b");
    fseek(f, st.st_size - 5, SEEK_SET);
    int c = fgetc(f);
    fseek(f, st.st_size - 5, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    expect_skipped(pool, GL_KV_F16, tok, h, path);

    /* truncated mid-payload, and to nothing */
    for (int len = 0; len < 2; len++) {
        write_one(pool, tok, h, path, sizeof path);
        ck_assert_int_eq(truncate(path, len ? 100 : 0), 0);
        expect_skipped(pool, GL_KV_F16, tok, h, path);
    }

    /* not a KV block file at all */
    f = fopen(path, "wb");
    fputs("this is not a KV block, just a file with the right name\n", f);
    fclose(f);
    expect_skipped(pool, GL_KV_F16, tok, h, path);

    /* written by another model, renamed to this model's name */
    chain(1, 7, tok, h);
    kv_disk *d = open_disk(pool, 1 << 20, ID + 1);
    kv_disk_save(d, pool, 0, h[0], 0, tok[0]);
    kv_disk_free(d);
    char foreign[512];
    entry_path(foreign, sizeof foreign, ID + 1, h[0]);
    ck_assert_int_eq(rename(foreign, path), 0);
    expect_skipped(pool, GL_KV_F16, tok, h, path);

    /* the same model with another KV type */
    write_one(pool, tok, h, path, sizeof path);
    expect_skipped(pool, GL_KV_F32, tok, h, path);

    kv_free(pool);
    remove_dir();
}
END_TEST

START_TEST(size_bound_evicts_oldest) {
    make_dir();
    gl_kv_cache *pool = pool_create(GL_KV_F16);
    int32_t tok[6][BS];
    uint64_t h[6];
    chain(6, 0, tok, h);
    /* one entry's size: write one and look */
    kv_disk *d = open_disk(pool, 1 << 20, ID);
    fill(pool, 0, 0);
    kv_disk_save(d, pool, 0, h[0], 0, tok[0]);
    kv_disk_flush(d);
    kv_disk_stats st;
    kv_disk_get_stats(d, &st);
    uint64_t entry = st.bytes;
    ck_assert(entry > 0);
    kv_disk_free(d);

    d = open_disk(pool, 3 * entry, ID);      /* room for three */
    for (int i = 1; i < 3; i++) {
        fill(pool, i, i);
        kv_disk_save(d, pool, i, h[i], h[i - 1], tok[i]);
        kv_disk_flush(d);
    }
    ck_assert(kv_disk_load(d, pool, 5, h[0], 0, tok[0])); /* read: 0 is young again */
    for (int i = 3; i < 5; i++) {
        fill(pool, i, i);
        kv_disk_save(d, pool, i, h[i], h[i - 1], tok[i]);
        kv_disk_flush(d);
    }
    kv_disk_get_stats(d, &st);
    ck_assert_int_eq((int)st.n_entries, 3);
    ck_assert_int_eq((int)st.n_evicted, 2);
    ck_assert(st.bytes <= 3 * entry);
    ck_assert_int_eq(n_files(), 3);
    ck_assert(!kv_disk_load(d, pool, 5, h[1], h[0], tok[1])); /* the oldest two went */
    ck_assert(!kv_disk_load(d, pool, 5, h[2], h[1], tok[2]));
    ck_assert(kv_disk_load(d, pool, 5, h[0], 0, tok[0]));
    ck_assert(kv_disk_load(d, pool, 5, h[4], h[3], tok[4]));
    kv_disk_free(d);

    /* a smaller bound at a restart evicts down to it, oldest first (file times) */
    sleep(1);
    d = open_disk(pool, 1 << 20, ID);
    ck_assert(kv_disk_load(d, pool, 5, h[3], h[2], tok[3])); /* 3 becomes the newest */
    kv_disk_free(d);
    d = open_disk(pool, entry, ID);
    kv_disk_get_stats(d, &st);
    ck_assert_int_eq((int)st.n_entries, 1);
    ck_assert(kv_disk_load(d, pool, 5, h[3], h[2], tok[3]));
    kv_disk_free(d);

    d = open_disk(pool, entry - 1, ID);      /* nothing fits: writes are dropped, counted */
    kv_disk_save(d, pool, 5, h[5], h[4], tok[5]);
    kv_disk_flush(d);
    kv_disk_get_stats(d, &st);
    ck_assert_int_eq((int)st.n_entries, 0);
    ck_assert_int_eq((int)st.n_dropped, 1);
    kv_disk_free(d);
    kv_free(pool);
    remove_dir();
}
END_TEST

START_TEST(unusable_folder) {
    gl_kv_cache *pool = pool_create(GL_KV_F16);
    gl_error err;
    ck_assert_ptr_null(kv_disk_create("/proc/version/sub", 1 << 20, pool, ID, &err));
    ck_assert(strstr(err.message, "/proc/version/sub") != NULL);
    kv_free(pool);
}
END_TEST

int main(void) {
    Suite *s = suite_create("kv_disk");
    TCase *tc = tcase_create("folder");
    tcase_add_test(tc, round_trip_across_instances);
    tcase_add_test(tc, bad_files_skipped);
    tcase_add_test(tc, size_bound_evicts_oldest);
    tcase_add_test(tc, unusable_folder);
    suite_add_tcase(s, tc);
    return test_run_suite(s) ? 1 : 0;
}
