/* test_kv_cache.c -- block pool: allocation, sharing, release, and storage. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "kernels.h"
#include "kv_cache.h"
#include "quant.h"
#include "testutil.h"

START_TEST(alloc_share_release) {
    gl_error err;
    gl_kv_cache *kv = kv_create(2, 2, 4, 4, 3, GL_KV_F16, &err);
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
        gl_kv_cache *kv = kv_create(3, 2, 4, 4, 5, f16 ? GL_KV_F16 : GL_KV_F32, &err);
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

/* Q8_0: each scale group's largest magnitude is code +-127, every value
 * comes back within half a step, and the pool takes 17/32 of F16's bytes
 * (head dim 64: a 2-byte scale per 32 codes). */
START_TEST(store_q8_0_round_trip) {
    gl_error err;
    int hd_list[] = {64, 8, 20};
    for (int c = 0; c < 3; c++) {
        int hd = hd_list[c], kv_dim = 2 * hd, bs = 4, qc = kv_q8_chunk(hd);
        ck_assert_int_eq(qc, hd == 64 ? 32 : hd == 8 ? 8 : 20);
        gl_kv_cache *kv = kv_create(3, 2, hd, bs, 5, GL_KV_Q8_0, &err);
        ck_assert_ptr_nonnull(kv);
        float k[128], v[128];
        for (int i = 0; i < kv_dim; i++) k[i] = sinf(0.7f * (float)i) * 3.0f, v[i] = cosf(1.3f * (float)i) - 0.2f;
        kv_store(kv, 2, 4, 3, k, v);
        const int8_t *kq = kv_k_block(kv, 2, 4), *vq = kv_v_block(kv, 2, 4);
        size_t sc = kern_kv_q8_scales(kv_dim, bs);
        const uint16_t *ks = (const uint16_t *)((const uint8_t *)kq + sc), *vs = (const uint16_t *)((const uint8_t *)vq + sc);
        int k_top[8] = {0}, v_top[8] = {0};
        for (int i = 0; i < kv_dim; i++) {
            float dk = gl_fp16_to_fp32(ks[(i / qc) * bs + 3]);
            int vrow = (i / hd) * bs + 3; /* V: [head][slot][head_dim] */
            float dv = gl_fp16_to_fp32(vs[vrow * (hd / qc) + i % hd / qc]);
            int ck = kq[i * bs + 3], cv = vq[vrow * hd + i % hd];
            ck_assert_float_le(fabsf(ck * dk - k[i]), 0.5f * dk + 1e-6f);
            ck_assert_float_le(fabsf(cv * dv - v[i]), 0.5f * dv + 1e-6f);
            if (abs(ck) == 127) k_top[i / qc] = 1;
            if (abs(cv) == 127) v_top[i / qc] = 1;
        }
        for (int g = 0; g < kv_dim / qc; g++) ck_assert(k_top[g] && v_top[g]);
        kv_free(kv);
    }
    ck_assert_uint_eq(kv_block_bytes(30, 192, 64, 16, GL_KV_Q8_0) * 32, kv_block_bytes(30, 192, 64, 16, GL_KV_F16) * 17);
    ck_assert_uint_eq(kv_block_bytes(30, 192, 64, 16, GL_KV_F32), 2 * kv_block_bytes(30, 192, 64, 16, GL_KV_F16));
}
END_TEST

START_TEST(invalid_shapes) {
    gl_error err;
    ck_assert_ptr_null(kv_create(0, 2, 4, 4, 5, GL_KV_F16, &err));
    ck_assert_ptr_null(kv_create(2, 2, 4, 4, 0, GL_KV_F16, &err));
    ck_assert_ptr_null(kv_create(2, 2, 0, 4, 5, GL_KV_F16, &err));
    ck_assert_ptr_null(kv_create(2, 2, 4, 4, 5, (gl_kv_type)7, &err));
}
END_TEST

START_TEST(prefix_cache_lookup_evict_collision) {
    gl_error err;
    gl_kv_cache *kv = kv_create(1, 1, 4, 4, 3, GL_KV_F32, &err);
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
    tcase_add_test(tc, store_q8_0_round_trip);
    tcase_add_test(tc, invalid_shapes);
    tcase_add_test(tc, prefix_cache_lookup_evict_collision);
    suite_add_tcase(s, tc);
    int failed = test_run_suite(s);
    return failed ? 1 : 0;
}
