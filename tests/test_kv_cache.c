/* test_kv_cache.c -- block pool: allocation, sharing, release, and storage. */
#include <check.h>
#include <stdlib.h>

#include "kv_cache.h"
#include "quant.h"
#include "testutil.h"

START_TEST(alloc_share_release) {
    gl_error err;
    gl_kv_cache *kv = kv_create(2, 2, 4, 4, 3, true, &err);
    ck_assert_ptr_nonnull(kv);
    int a = kv_alloc_block(kv), b = kv_alloc_block(kv), c = kv_alloc_block(kv);
    ck_assert(a >= 0 && b >= 0 && c >= 0 && a != b && b != c && a != c);
    ck_assert_int_eq(kv_alloc_block(kv), -1);
    kv_share_block(kv, b);
    kv_release_block(kv, b);
    ck_assert_int_eq(kv_n_free(kv), 0); /* still held once */
    kv_release_block(kv, b);
    ck_assert_int_eq(kv_n_free(kv), 1);
    ck_assert_int_eq(kv_alloc_block(kv), b);
    kv_release_block(kv, a);
    kv_release_block(kv, b);
    kv_release_block(kv, c);
    ck_assert_int_eq(kv_n_free(kv), 3);
    kv_free(kv);
}
END_TEST

START_TEST(store_round_trip) {
    gl_error err;
    for (int f16 = 0; f16 < 2; f16++) {
        gl_kv_cache *kv = kv_create(3, 2, 4, 4, 5, f16, &err);
        float k[8], v[8];
        for (int i = 0; i < 8; i++) k[i] = 0.25f * (float)i, v[i] = -0.5f * (float)i;
        kv_store(kv, 2, 4, 3, k, v);
        for (int i = 0; i < 8; i++) {
            size_t at = (size_t)i * 4 + 3; /* K is channel-major: [kv_dim][block_size 4] */
            float kr = f16 ? gl_fp16_to_fp32(((uint16_t *)kv_k_block(kv, 2, 4))[at]) : ((float *)kv_k_block(kv, 2, 4))[at];
            size_t vat = ((size_t)(i / 4) * 4 + 3) * 4 + (size_t)(i % 4); /* V: [head][slot][head_dim 4] */
            float vr = f16 ? gl_fp16_to_fp32(((uint16_t *)kv_v_block(kv, 2, 4))[vat]) : ((float *)kv_v_block(kv, 2, 4))[vat];
            ck_assert_float_eq(kr, k[i]);
            ck_assert_float_eq(vr, v[i]);
        }
        kv_free(kv);
    }
}
END_TEST

START_TEST(invalid_shapes) {
    gl_error err;
    ck_assert_ptr_null(kv_create(0, 2, 4, 4, 5, true, &err));
    ck_assert_ptr_null(kv_create(2, 2, 4, 4, 0, true, &err));
    ck_assert_ptr_null(kv_create(2, 2, 0, 4, 5, true, &err));
}
END_TEST

START_TEST(prefix_cache_lookup_evict_collision) {
    gl_error err;
    gl_kv_cache *kv = kv_create(1, 1, 4, 4, 3, false, &err);
    int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {5, 6, 7, 8}, t3[4] = {1, 2, 3, 5};
    uint64_t h1 = kv_hash_block(0, t1, 4), h2 = kv_hash_block(h1, t2, 4);
    ck_assert(h1 != kv_hash_block(0, t3, 4));
    ck_assert(h2 != kv_hash_block(0, t2, 4)); /* the parent is part of the identity */
    int a = kv_alloc_block(kv), b = kv_alloc_block(kv);
    kv_register(kv, a, h1, 0, t1);
    kv_register(kv, b, h2, h1, t2);
    ck_assert_int_eq(kv_lookup(kv, h1, 0, t1), a);
    ck_assert_int_eq(kv_lookup(kv, h2, h1, t2), b);
    /* same hash, different tokens (a forced collision): not a hit */
    ck_assert_int_eq(kv_lookup(kv, h1, 0, t3), -1);
    ck_assert_int_eq(kv_lookup(kv, h2, 0, t2), -1);
    /* freed blocks stay cached, in LRU order: a freed first, evicted first */
    kv_release_block(kv, a);
    kv_release_block(kv, b);
    ck_assert_int_eq(kv_n_free(kv), 3);
    ck_assert_int_eq(kv_lookup(kv, h1, 0, t1), a);
    kv_share_block(kv, b); /* reuse a cached free block */
    ck_assert_int_eq(kv_n_free(kv), 2);
    int c = kv_alloc_block(kv); /* the never-used block goes first */
    ck_assert(c != a && c != b);
    int d = kv_alloc_block(kv); /* then a: evicted from the cache */
    ck_assert_int_eq(d, a);
    ck_assert_int_eq(kv_lookup(kv, h1, 0, t1), -1);
    ck_assert_int_eq(kv_lookup(kv, h2, h1, t2), b);
    ck_assert_int_eq(kv_alloc_block(kv), -1);
    kv_release_block(kv, b);
    kv_release_block(kv, c);
    kv_release_block(kv, d);
    ck_assert_int_eq(kv_n_free(kv), 3);
    kv_free(kv);
}
END_TEST

int main(void) {
    Suite *s = suite_create("kv_cache");
    TCase *tc = tcase_create("blocks");
    tcase_add_test(tc, alloc_share_release);
    tcase_add_test(tc, store_round_trip);
    tcase_add_test(tc, invalid_shapes);
    tcase_add_test(tc, prefix_cache_lookup_evict_collision);
    suite_add_tcase(s, tc);
    int failed = test_run_suite(s);
    return failed ? 1 : 0;
}
