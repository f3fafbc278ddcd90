/* test_scheduler.c -- the step plan with no model: a tiny block pool, hand
 * made sequences, and a stand-in for the forward pass that marks planned
 * tokens computed and appends a token where the plan samples. */
#include <check.h>
#include <stdlib.h>

#include "kv_cache.h"
#include "kv_manager.h"
#include "scheduler.h"
#include "testutil.h"

#define BS 4 /* tokens per block */

typedef struct fixture {
    gl_kv_cache *pool;
    kv_manager *kvm;
    scheduler *sc;
} fixture;

static fixture setup(int n_blocks, int max_batch_tokens, int max_seqs, bool prefix_caching) {
    gl_error err;
    fixture f;
    f.pool = kv_create(1, 1, 1, BS, n_blocks, GL_KV_F32, &err);
    ck_assert_ptr_nonnull(f.pool);
    f.kvm = kv_manager_create(f.pool, prefix_caching);
    sched_limits lim = {.max_batch_tokens = max_batch_tokens, .max_seqs = max_seqs, .max_logits = max_seqs + 8};
    f.sc = sched_create(&lim, f.kvm, prefix_caching);
    ck_assert_ptr_nonnull(f.sc);
    return f;
}

static void teardown(fixture *f) {
    sched_free(f->sc);
    kv_manager_free(f->kvm);
    kv_free(f->pool);
}

/* A request with prompt tokens first, first+1, ... and room for n_gen more. */
static gl_seq *submit(fixture *f, uint64_t id, int n_prompt, int n_gen, int first) {
    int32_t prompt[256];
    for (int i = 0; i < n_prompt; i++) prompt[i] = first + i;
    gl_seq *s = seq_create(prompt, n_prompt, n_prompt + n_gen, BS);
    ck_assert_ptr_nonnull(s);
    s->id = id;
    queue_push(&f->sc->waiting, s);
    return s;
}

/* What update_from_output does to request state: advance, publish, append
 * a token where sampled, finish at the length limit. */
static void complete(fixture *f, const sched_plan *p) {
    for (int i = 0; i < p->n_entries; i++) {
        gl_seq *s = p->entries[i].seq;
        s->num_computed_tokens += p->entries[i].n_tokens;
        kv_publish_full_blocks(f->kvm, &s->kv, s->num_computed_tokens);
        if (p->entries[i].sample_row < 0) continue;
        s->tokens[s->n_tokens++] = 1000 + s->n_generated++;
        if (s->n_tokens >= s->cap_tokens) {
            bool was_waiting;
            ck_assert(sched_remove(f->sc, s, &was_waiting));
            seq_free(f->kvm, s);
        }
    }
}

/* Entry i of p runs n tokens of s. */
static void expect_entry(const sched_plan *p, int i, const gl_seq *s, int n) {
    ck_assert_int_gt(p->n_entries, i);
    ck_assert_ptr_eq(p->entries[i].seq, s);
    ck_assert_int_eq(p->entries[i].n_tokens, n);
}

static const sched_plan *step(fixture *f) {
    const sched_plan *p = sched_schedule(f->sc);
    complete(f, p);
    return p;
}

START_TEST(test_budget_and_chunked_prefill) {
    fixture f = setup(64, 8, 4, false);
    gl_seq *a = submit(&f, 1, 20, 5, 0);
    const sched_plan *p = sched_schedule(f.sc);
    ck_assert_int_eq(p->n_entries, 1);
    ck_assert_int_eq(p->n_tokens, 8);
    ck_assert_int_eq(p->entries[0].sample_row, -1); /* mid-prompt: no logits */
    ck_assert_int_eq(p->n_logits, 0);
    ck_assert_int_eq(p->n_admitted, 1);
    ck_assert_int_eq(a->kv.n_blocks, 2);
    complete(&f, p);
    p = step(&f);
    ck_assert_int_eq(p->n_tokens, 8);
    p = sched_schedule(f.sc);
    ck_assert_int_eq(p->n_tokens, 4); /* the prompt's rest, and its last row samples */
    ck_assert_int_eq(p->n_logits, 1);
    ck_assert_int_eq(p->entries[0].sample_row, 0);
    ck_assert_int_eq(p->logit_tokens[0], 3);
    complete(&f, p);
    p = step(&f);
    ck_assert_int_eq(p->n_tokens, 1); /* decoding */
    ck_assert_int_eq(a->num_computed_tokens, 21);
    teardown(&f);
}
END_TEST

START_TEST(test_decodes_before_prefills_before_admissions) {
    fixture f = setup(64, 10, 4, false);
    gl_seq *a = submit(&f, 1, 3, 10, 0), *b = submit(&f, 2, 3, 10, 100);
    step(&f); /* both prompts in one step */
    ck_assert_int_eq(f.sc->n_running, 2);
    gl_seq *c = submit(&f, 3, 30, 10, 200);
    const sched_plan *p = sched_schedule(f.sc);
    ck_assert_int_eq(p->n_entries, 3);
    expect_entry(p, 0, a, 1);
    expect_entry(p, 1, b, 1);
    expect_entry(p, 2, c, 8); /* what the budget leaves */
    ck_assert_int_eq(p->entries[2].first, 2);
    ck_assert_int_eq(p->n_tokens, 10);
    complete(&f, p);
    teardown(&f);
}
END_TEST

/* prefill_first_tokens: a short waiting prompt runs alone ahead of the
 * running decodes (and the short ones queued behind it with it), never in
 * two steps in a row; a longer one takes the ordinary plan; 0 turns it off. */
START_TEST(test_short_prompts_first) {
    fixture f = setup(64, 10, 4, false);
    f.sc->limits.prefill_first_tokens = 4;
    gl_seq *a = submit(&f, 1, 3, 10, 0);
    expect_entry(step(&f), 0, a, 3); /* nothing running: the ordinary plan */
    gl_seq *b = submit(&f, 2, 4, 10, 100), *c = submit(&f, 3, 2, 10, 200);
    const sched_plan *p = step(&f);
    ck_assert_int_eq(p->n_entries, 2); /* b and c alone, whole; a waits a step */
    expect_entry(p, 0, b, 4);
    expect_entry(p, 1, c, 2);
    ck_assert_int_ge(p->entries[0].sample_row, 0);
    gl_seq *d = submit(&f, 4, 2, 10, 300);
    p = step(&f); /* never twice in a row: the decodes, then d behind them */
    ck_assert_int_eq(p->n_entries, 4);
    expect_entry(p, 0, a, 1);
    expect_entry(p, 3, d, 2);
    teardown(&f);

    f = setup(64, 10, 4, false);
    f.sc->limits.prefill_first_tokens = 4;
    a = submit(&f, 1, 3, 10, 0);
    step(&f);
    b = submit(&f, 2, 5, 10, 100); /* longer than 4: behind the decode */
    p = step(&f);
    ck_assert_int_eq(p->n_entries, 2);
    expect_entry(p, 0, a, 1);
    expect_entry(p, 1, b, 5);
    teardown(&f);

    f = setup(64, 10, 4, false); /* off */
    a = submit(&f, 1, 3, 10, 0);
    step(&f);
    b = submit(&f, 2, 2, 10, 100);
    p = step(&f);
    ck_assert_int_eq(p->n_entries, 2);
    expect_entry(p, 0, a, 1);
    teardown(&f);
}
END_TEST

START_TEST(test_waiting_queue_and_max_seqs) {
    fixture f = setup(64, 64, 2, false);
    gl_seq *second = (submit(&f, 1, 4, 1, 0), submit(&f, 2, 4, 2, 10));
    gl_seq *c = submit(&f, 3, 4, 1, 20);
    const sched_plan *p = step(&f);
    ck_assert_int_eq(p->n_admitted, 2);
    ck_assert_int_eq(f.sc->waiting.n, 1);
    ck_assert_ptr_eq(f.sc->waiting.head, c);
    /* request 1 finished (one token), so 3 is admitted next to 2's decode */
    p = sched_schedule(f.sc);
    expect_entry(p, 0, second, 1);
    expect_entry(p, 1, c, 4);
    complete(&f, p);
    ck_assert_int_eq(f.sc->waiting.n, 0);
    teardown(&f);
}
END_TEST

START_TEST(test_preemption_takes_the_latest_admitted) {
    fixture f = setup(4, 64, 4, false); /* 16 positions */
    gl_seq *a = submit(&f, 1, 4, 20, 0);
    gl_seq *b = submit(&f, 2, 4, 20, 50);
    step(&f); /* prompts of 4 fill two blocks; each sampled a 5th token */
    ck_assert_int_eq(kv_manager_n_free(f.kvm), 2);
    step(&f); /* the 5th tokens need a block each */
    ck_assert_int_eq(kv_manager_n_free(f.kvm), 0);
    for (int i = 0; i < 3; i++) step(&f); /* fill positions up to 8 */
    const sched_plan *p = sched_schedule(f.sc); /* a needs a third block: none free */
    ck_assert_int_eq(p->n_preempted, 1);
    ck_assert_uint_eq(f.sc->n_preemptions, 1);
    expect_entry(p, 0, a, 1);
    /* b went back first in line and recomputes from position 0 in what is left */
    ck_assert_int_eq(b->num_computed_tokens, 0);
    expect_entry(p, 1, b, 4);
    ck_assert_int_eq(p->entries[1].sample_row, -1);
    ck_assert_int_eq(p->n_admitted, 1);
    teardown(&f);
}
END_TEST

START_TEST(test_prefix_hits) {
    fixture f = setup(64, 64, 4, true);
    gl_seq *a = submit(&f, 1, 12, 1, 0);
    ck_assert_int_eq(kv_get_computed_prefix(f.kvm, &a->kv, a->n_tokens), 0); /* an empty cache */
    step(&f); /* computes and publishes 3 blocks, then finishes */
    ck_assert_int_eq(f.sc->n_running, 0);
    gl_seq *b = submit(&f, 2, 14, 1, 0); /* same first 12 tokens */
    const sched_plan *p = sched_schedule(f.sc);
    ck_assert_int_eq(b->n_cached, 12);
    ck_assert_int_eq(p->entries[0].n_tokens, 2);
    ck_assert_uint_eq(f.sc->prefix_hits, 12);
    ck_assert_uint_eq(f.sc->prefix_queries, 12 + 14);
    complete(&f, p);
    /* an equal prompt recomputes its last block: the last token's logits are needed */
    gl_seq *c = submit(&f, 3, 12, 1, 0);
    p = sched_schedule(f.sc);
    ck_assert_int_eq(c->n_cached, 8);
    ck_assert_int_eq(p->entries[0].n_tokens, 4);
    complete(&f, p);
    teardown(&f);
}
END_TEST

START_TEST(test_waits_for_a_prefix_in_flight) {
    fixture f = setup(64, 10, 4, true);
    gl_seq *a = submit(&f, 1, 12, 4, 0), *b = submit(&f, 2, 12, 4, 0); /* one prompt, twice */
    /* a computes 10 positions; b, with budget left, waits for a's blocks
     * rather than computing them too */
    const sched_plan *p = step(&f);
    ck_assert_int_eq(p->n_entries, 1);
    ck_assert_ptr_eq(p->entries[0].seq, a);
    ck_assert_ptr_eq(f.sc->waiting.head, b);
    ck_assert_int_eq(b->kv.n_blocks, 0);
    p = sched_schedule(f.sc); /* a's first two blocks are published now */
    expect_entry(p, 1, b, 4);
    ck_assert_int_eq(b->n_cached, 8);
    complete(&f, p);
    teardown(&f);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_budget_and_chunked_prefill, test_decodes_before_prefills_before_admissions,
                            test_waiting_queue_and_max_seqs, test_preemption_takes_the_latest_admitted,
                            test_prefix_hits, test_waits_for_a_prefix_in_flight, test_short_prompts_first};
    return test_run_tests("scheduler", tests, (int)(sizeof tests / sizeof tests[0])) ? 1 : 0;
}
