/* test_drafter.c -- n-gram proposals, and drafted tokens in the step plan
 * (budget, logits rows, blocks, rollback) with no model. */
#include <check.h>
#include <stdlib.h>

#include "drafter.h"
#include "kv_cache.h"
#include "kv_manager.h"
#include "scheduler.h"
#include "spec_rule.h"
#include "testutil.h"

static gl_drafter *ngram(int lo, int hi) {
    drafter_params p = {.mode = GL_SPEC_NGRAM, .ngram_min = lo, .ngram_max = hi};
    gl_drafter *d = drafter_create(&p);
    ck_assert_ptr_nonnull(d);
    return d;
}

START_TEST(test_ngram_latest_longest_match) {
    gl_drafter *d = ngram(1, 3);
    int32_t out[16];
    /* "5 6 7" occurs twice; the latest one (followed by 9 9) wins */
    int32_t t1[] = {5, 6, 7, 8, 8, 5, 6, 7, 9, 9, 1, 6, 7};
    ck_assert_int_eq(drafter_propose(d, t1, 13, 4, out), 4);
    ck_assert_int_eq(out[0], 9);
    ck_assert_int_eq(out[1], 9);
    ck_assert_int_eq(out[2], 1);
    ck_assert_int_eq(out[3], 6);
    /* max_draft caps, and the continuation stops at the end of the sequence */
    ck_assert_int_eq(drafter_propose(d, t1, 13, 1, out), 1);
    int32_t t2[] = {1, 2, 3, 4, 3, 4};
    ck_assert_int_eq(drafter_propose(d, t2, 6, 8, out), 2); /* "3 4" -> 3 4 */
    ck_assert_int_eq(out[0], 3);
    /* a longer suffix match beats a later shorter one: "1 2" -> 3, not "2" -> 5 */
    int32_t t3[] = {1, 2, 3, 0, 2, 5, 1, 2};
    ck_assert_int_eq(drafter_propose(d, t3, 8, 1, out), 1);
    ck_assert_int_eq(out[0], 3);
    /* nothing repeats: no draft; max_draft 0: no draft */
    int32_t t4[] = {1, 2, 3, 4};
    ck_assert_int_eq(drafter_propose(d, t4, 4, 8, out), 0);
    ck_assert_int_eq(drafter_propose(d, t1, 13, 0, out), 0);
    drafter_free(d);
    /* ngram_min 2: a single repeated token is not enough */
    d = ngram(2, 2);
    int32_t t5[] = {7, 1, 2, 7};
    ck_assert_int_eq(drafter_propose(d, t5, 4, 8, out), 0);
    drafter_free(d);
    drafter_params bad = {.mode = GL_SPEC_NGRAM, .ngram_min = 3, .ngram_max = 2};
    ck_assert_ptr_null(drafter_create(&bad));
    bad = (drafter_params){.mode = GL_SPEC_OFF, .ngram_min = 1, .ngram_max = 2};
    ck_assert_ptr_null(drafter_create(&bad));
}
END_TEST

#define BS 4

/* Two decoding sequences with drafts of 6 under a budget of 8: the first
 * gets 1 + 6, the second its 1 token; drafted rows are logits rows. */
START_TEST(test_drafts_ride_under_the_budget) {
    gl_error err;
    gl_kv_cache *pool = kv_create(1, 1, 1, BS, 32, false, &err);
    kv_manager *kvm = kv_manager_create(pool, true);
    sched_limits lim = {.max_batch_tokens = 8, .max_seqs = 4, .max_logits = 4 + 16};
    scheduler *sc = sched_create(&lim, kvm, false);
    int32_t prompt[] = {1, 2, 3, 4, 5};
    gl_seq *s[2];
    for (int i = 0; i < 2; i++) {
        s[i] = seq_create(prompt, 5, 40, BS);
        s[i]->id = (uint64_t)i + 1;
        queue_push(&sc->waiting, s[i]);
    }
    const sched_plan *p;
    for (int step = 0; step < 4 && (s[0]->num_computed_tokens < 5 || s[1]->num_computed_tokens < 5); step++) {
        p = sched_schedule(sc); /* the prompts, in chunks */
        for (int i = 0; i < p->n_entries; i++) p->entries[i].seq->num_computed_tokens += p->entries[i].n_tokens;
    }
    /* both computed their prompts: append a sampled token and a 6-token draft */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(s[i]->num_computed_tokens, 5);
        s[i]->tokens[s[i]->n_tokens++] = 9;
        for (int j = 0; j < 6; j++) s[i]->tokens[s[i]->n_tokens + j] = 20 + j;
        s[i]->spec.n_draft = 6;
    }
    p = sched_schedule(sc);
    ck_assert_int_eq(p->n_entries, 2);
    ck_assert_int_eq(p->n_tokens, 8);
    ck_assert_int_eq(p->entries[0].n_tokens, 7);
    ck_assert_int_eq(p->entries[0].n_draft, 6);
    ck_assert_int_eq(p->entries[1].n_tokens, 1);
    ck_assert_int_eq(p->entries[1].n_draft, 0);
    ck_assert_int_eq(p->n_logits, 8); /* 1 + 6 rows and 1 */
    ck_assert_int_eq(p->entries[0].sample_row, 0);
    ck_assert_int_eq(p->entries[1].sample_row, 7);
    /* s0 holds blocks for 12 positions: 3; 2 drafts accepted -> positions
     * below 9 computed, 9 tokens known: blocks past them go back */
    ck_assert_int_eq(s[0]->kv.n_blocks, 3);
    int free_before = kv_manager_n_free(kvm);
    s[0]->num_computed_tokens = 8;
    s[0]->n_tokens = 9;
    s[0]->spec.n_draft = 0;
    kv_publish_full_blocks(kvm, &s[0]->kv, s[0]->num_computed_tokens);
    kv_trim_slots(kvm, &s[0]->kv, s[0]->n_tokens);
    ck_assert_int_eq(s[0]->kv.n_blocks, 3); /* 9 positions need 3 blocks */
    kv_trim_slots(kvm, &s[0]->kv, 8);
    ck_assert_int_eq(s[0]->kv.n_blocks, 2);
    ck_assert_int_eq(kv_manager_n_free(kvm), free_before + 1);
    ck_assert_int_eq(s[0]->kv.n_published, 2);
    kv_trim_slots(kvm, &s[0]->kv, 0); /* never below the published blocks */
    ck_assert_int_eq(s[0]->kv.n_blocks, 2);
    sched_free(sc);
    ck_assert_int_eq(kv_manager_n_free(kvm), 32);
    kv_manager_free(kvm);
    kv_free(pool);
}
END_TEST

/* A draft never takes the block another decoding sequence needs. */
START_TEST(test_draft_leaves_blocks_for_others) {
    gl_error err;
    gl_kv_cache *pool = kv_create(1, 1, 1, BS, 4, false, &err);
    kv_manager *kvm = kv_manager_create(pool, false);
    sched_limits lim = {.max_batch_tokens = 64, .max_seqs = 4, .max_logits = 4 + 16};
    scheduler *sc = sched_create(&lim, kvm, false);
    int32_t prompt[] = {1, 2, 3, 4};
    gl_seq *s[2];
    for (int i = 0; i < 2; i++) {
        s[i] = seq_create(prompt, 4, 16, BS);
        s[i]->id = (uint64_t)i + 1;
        queue_push(&sc->waiting, s[i]);
    }
    const sched_plan *p = sched_schedule(sc);
    ck_assert_int_eq(p->n_tokens, 8);
    for (int i = 0; i < 2; i++) {
        s[i]->num_computed_tokens = 4;
        s[i]->tokens[s[i]->n_tokens++] = 9;
        for (int j = 0; j < 4; j++) s[i]->tokens[s[i]->n_tokens + j] = 20 + j;
        s[i]->spec.n_draft = 4;
    }
    /* 2 blocks free: s0's token and draft (positions 4..8) would take both,
     * leaving s1 none: the draft is dropped instead of preempting s1 */
    p = sched_schedule(sc);
    ck_assert_int_eq(p->n_preempted, 0);
    ck_assert_int_eq(p->n_entries, 2);
    ck_assert_int_eq(p->entries[0].n_draft, 0);
    ck_assert_int_eq(p->entries[1].n_draft, 0);
    ck_assert_int_eq(p->n_tokens, 2);
    sched_free(sc);
    kv_manager_free(kvm);
    kv_free(pool);
}
END_TEST

/* A cost table from f(w) for widths 1..max. */
static void costs_from(spec_costs *c, int max, double (*f)(int)) {
    ck_assert(spec_costs_init(c, max));
    for (int w = 1; w <= max; w++) spec_costs_learn(c, w, f(w));
}
static double memory_bound(int w) { return 10e-3 + 0.1e-3 * w; }   /* weights dominate */
static double compute_bound(int w) { return 2e-3 * w; }            /* every token costs the same */
static double tiles_of_4(int w) { return 10e-3 * ((w + 3) / 4); }  /* a tile of 4 tokens costs as 1 */

START_TEST(test_rule_prices_drafts_by_width) {
    spec_costs c;
    int cap[16], k[16], pick[128];
    double a[16], scratch[16];
    for (int i = 0; i < 16; i++) cap[i] = 8, a[i] = 0.9;
    /* memory-bound single stream: the whole draft */
    costs_from(&c, 256, memory_bound);
    ck_assert_int_eq(spec_choose(&c, 1, 1, cap, a, 128, k, scratch, pick), 8);
    ck_assert_int_eq(k[0], 8);
    /* ...but not drafts nobody accepts */
    double low[1] = {0.02};
    ck_assert_int_eq(spec_choose(&c, 1, 1, cap, low, 128, k, scratch, pick), 0);
    spec_costs_free(&c);
    /* compute-bound: a drafted token costs a full token and is worth less,
     * at 1 stream and at 16 */
    costs_from(&c, 256, compute_bound);
    ck_assert_int_eq(spec_choose(&c, 1, 1, cap, a, 128, k, scratch, pick), 0);
    ck_assert_int_eq(spec_choose(&c, 16, 16, cap, a, 128, k, scratch, pick), 0);
    for (int i = 0; i < 16; i++) ck_assert_int_eq(k[i], 0);
    spec_costs_free(&c);
    /* token tiles of 4: fill the tile, never open the next one; the best
     * sequence drafts first */
    costs_from(&c, 256, tiles_of_4);
    a[1] = 0.5;
    ck_assert_int_eq(spec_choose(&c, 2, 2, cap, a, 128, k, scratch, pick), 2);
    ck_assert_int_eq(k[0], 2);
    ck_assert_int_eq(k[1], 0);
    ck_assert_int_eq(spec_choose(&c, 16, 16, cap, a, 128, k, scratch, pick), 0);
    /* a draft model that costs a target step per drafted token: no drafts
     * even when all are accepted */
    double one[1] = {1.0};
    ck_assert_int_eq(spec_choose(&c, 1, 1, cap, one, 128, k, scratch, pick), 3);
    spec_costs_learn_draft(&c, 1, 10e-3);
    ck_assert_int_eq(spec_choose(&c, 1, 1, cap, one, 128, k, scratch, pick), 0);
    spec_costs_free(&c);
}
END_TEST

START_TEST(test_rule_learns_unseen_widths) {
    spec_costs c;
    int cap[1] = {8}, k[1], pick[8];
    double a[1] = {0.9}, scratch[1];
    ck_assert(spec_costs_init(&c, 64));
    /* nothing measured: no drafts (the step measures its width) */
    ck_assert_int_eq(spec_choose(&c, 1, 1, cap, a, 8, k, scratch, pick), 0);
    ck_assert(spec_costs_width(&c, 3) == 0);
    /* one width known: wider ones are guessed cheap, so the rule tries them */
    spec_costs_learn(&c, 1, 10e-3);
    ck_assert_int_eq(spec_choose(&c, 1, 1, cap, a, 8, k, scratch, pick), 8);
    /* once width 9 is seen costing 9 steps, widths between interpolate and
     * drafting stops */
    spec_costs_learn(&c, 9, 90e-3);
    ck_assert(spec_costs_width(&c, 5) > 49e-3 && spec_costs_width(&c, 5) < 51e-3);
    ck_assert_int_eq(spec_choose(&c, 1, 1, cap, a, 8, k, scratch, pick), 0);
    /* one stalled step moves the estimate by at most a fifth of itself */
    spec_costs_learn(&c, 1, 1.0);
    ck_assert(spec_costs_width(&c, 1) < 12.1e-3);
    /* out of range: ignored, priced 0 */
    spec_costs_learn(&c, 65, 1.0);
    ck_assert(spec_costs_width(&c, 65) == 0 && spec_costs_width(&c, 0) == 0);
    spec_costs_free(&c);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_ngram_latest_longest_match, test_drafts_ride_under_the_budget,
                            test_draft_leaves_blocks_for_others, test_rule_prices_drafts_by_width,
                            test_rule_learns_unseen_widths};
    return test_run_tests("drafter", tests, (int)(sizeof tests / sizeof tests[0])) ? 1 : 0;
}
