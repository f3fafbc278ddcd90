/* test_spec.c -- speculative decoding's proposer interface (spec.h) with a
 * stub proposer and no model: who is asked when, what lands in the
 * sequences, what is learned from a verification, and the rollback. */
#include <check.h>
#include <stdlib.h>

#include "kv_cache.h"
#include "kv_manager.h"
#include "scheduler.h"
#include "spec.h"
#include "testutil.h"

#define BS 4

/* Proposes 100, 101, ... and counts the calls; its per-sequence state is a
 * marker set on the first proposal. */
typedef struct stub {
    int n_propose, n_accepted, n_rollback, n_free;
    int last_k, last_accepted_tokens;
} stub;
static int marker;

static int stub_propose(void *self, spec_seq *s, const int32_t *tokens, int n_tokens, int cap_tokens, int k,
                        int32_t *out) {
    stub *st = self;
    st->n_propose++;
    st->last_k = k;
    s->state = &marker;
    for (int j = 0; j < k; j++) out[j] = 100 + j;
    return k;
}
static void stub_accepted(void *self, spec_seq *s, const int32_t *tokens, int n_tokens) {
    stub *st = self;
    st->n_accepted++;
    st->last_accepted_tokens = n_tokens;
}
static void stub_rollback(void *self, spec_seq *s) {
    ((stub *)self)->n_rollback++;
    s->state = NULL;
}
static void stub_free(void *self) { ((stub *)self)->n_free++; }

typedef struct fixture {
    gl_kv_cache *pool;
    kv_manager *kvm;
    scheduler *sc;
    gl_seq *s[2];
    const sched_plan *plan;
} fixture;

/* Two sequences past their prompts, each with one sampled token to run. */
static void setup(fixture *f) {
    gl_error err;
    f->pool = kv_create(1, 1, 1, BS, 32, false, &err);
    f->kvm = kv_manager_create(f->pool, false);
    sched_limits lim = {.max_batch_tokens = 16, .max_seqs = 4, .max_logits = 4 + 16};
    f->sc = sched_create(&lim, f->kvm, false);
    int32_t prompt[] = {1, 2, 3, 4, 5};
    for (int i = 0; i < 2; i++) {
        f->s[i] = seq_create(prompt, 5, 40, BS);
        f->s[i]->id = (uint64_t)i + 1;
        queue_push(&f->sc->waiting, f->s[i]);
    }
    f->plan = sched_schedule(f->sc);
    for (int i = 0; i < f->plan->n_entries; i++) f->plan->entries[i].seq->num_computed_tokens += f->plan->entries[i].n_tokens;
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(f->s[i]->num_computed_tokens, 5);
        f->s[i]->tokens[f->s[i]->n_tokens++] = 9;
    }
}

static void teardown(fixture *f) {
    sched_free(f->sc);
    kv_manager_free(f->kvm);
    kv_free(f->pool);
}

static void check_proposer(bool before_rule) {
    fixture f;
    setup(&f);
    stub st = {0};
    spec_proposer pr = {.self = &st, .before_rule = before_rule, .propose = stub_propose, .accepted = stub_accepted,
                        .rollback = stub_rollback, .free = stub_free};
    gl_spec *sp = spec_create_with(&pr, 4, 16, 16, 4, true);
    ck_assert_ptr_nonnull(sp);
    spec_seq_init(sp, &f.s[0]->spec, true);
    spec_seq_init(sp, &f.s[1]->spec, false); /* opted out: never asked */
    ck_assert_int_eq(f.s[0]->spec.len, 4);
    ck_assert_int_eq(f.s[1]->spec.len, 0);

    spec_after_step(sp, f.sc, f.plan, true, 1e-3);
    ck_assert_int_eq(st.n_propose, 1);
    ck_assert_int_eq(st.last_k, 4);
    ck_assert_int_eq(f.s[0]->spec.n_draft, 4);
    ck_assert_int_eq(f.s[1]->spec.n_draft, 0);
    for (int j = 0; j < 4; j++) ck_assert_int_eq(f.s[0]->tokens[f.s[0]->n_tokens + j], 100 + j);
    ck_assert_ptr_eq(f.s[0]->spec.state, &marker);

    /* two of the four accepted: the acceptance average moves over the three
     * positions tested, the totals and the engine's counters count them */
    gl_engine_stats stats = {0};
    spec_learn(sp, &f.s[0]->spec, 4, 2, f.s[0]->tokens, 8, &stats);
    double a = 0.7;
    for (int j = 0; j < 3; j++) a = 0.85 * a + 0.15 * (j < 2);
    ck_assert_double_eq_tol(f.s[0]->spec.accept, a, 1e-12);
    ck_assert_int_eq(f.s[0]->spec.n_draft_total, 4);
    ck_assert_int_eq(f.s[0]->spec.n_accepted_total, 2);
    ck_assert_uint_eq(stats.spec_drafts, 1);
    ck_assert_uint_eq(stats.spec_draft_tokens, 4);
    ck_assert_uint_eq(stats.spec_accepted_tokens, 2);
    ck_assert_uint_eq(stats.spec_accepted_at[0], 1);
    ck_assert_uint_eq(stats.spec_accepted_at[1], 1);
    ck_assert_uint_eq(stats.spec_accepted_at[2], 0);
    ck_assert_int_eq(st.n_accepted, 1);
    ck_assert_int_eq(st.last_accepted_tokens, 8);
    /* nothing drafted: nothing learned */
    spec_learn(sp, &f.s[1]->spec, 0, 0, f.s[1]->tokens, 6, &stats);
    ck_assert_uint_eq(stats.spec_drafts, 1);
    ck_assert_int_eq(st.n_accepted, 1);

    /* the rollback forgets the proposer's state */
    spec_seq_release(sp, &f.s[0]->spec);
    ck_assert_int_eq(st.n_rollback, 1);
    ck_assert_ptr_null(f.s[0]->spec.state);
    spec_free(sp);
    ck_assert_int_eq(st.n_free, 1);
    teardown(&f);
}

START_TEST(test_cheap_proposer) { check_proposer(true); }
END_TEST

START_TEST(test_proposer_after_the_rule) { check_proposer(false); }
END_TEST

/* The adaptive rule drafts nothing while a decode step's cost is unknown
 * (that step measures it): a cheap proposer is still asked, the rule then
 * leaves the sequence idle. */
START_TEST(test_rule_waits_for_costs) {
    fixture f;
    setup(&f);
    stub st = {0};
    spec_proposer pr = {.self = &st, .before_rule = true, .propose = stub_propose, .free = stub_free};
    gl_spec *sp = spec_create_with(&pr, 4, 16, 16, 4, false);
    ck_assert_ptr_nonnull(sp);
    spec_seq_init(sp, &f.s[0]->spec, true);
    spec_seq_init(sp, &f.s[1]->spec, true);
    spec_after_step(sp, f.sc, f.plan, true, 1e-3);
    ck_assert_int_eq(st.n_propose, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(f.s[i]->spec.n_draft, 0);
        ck_assert_int_eq(f.s[i]->spec.idle, 1);
    }
    /* a step that did not run plans nothing */
    spec_after_step(sp, f.sc, f.plan, false, 0);
    ck_assert_int_eq(st.n_propose, 2);
    spec_seq_release(sp, &f.s[0]->spec); /* no rollback hook: nothing to do */
    spec_free(sp);
    spec_free(NULL);
    spec_seq_release(NULL, &f.s[1]->spec);
    teardown(&f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("proposer");
    tcase_add_test(tc, test_cheap_proposer);
    tcase_add_test(tc, test_proposer_after_the_rule);
    tcase_add_test(tc, test_rule_waits_for_costs);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
