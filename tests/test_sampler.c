/* test_sampler.c -- the sampler against hand-computed cases and a naive
 * reference pipeline. Every random test is seeded, so nothing is flaky. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "testutil.h"

/* ---- helpers -------------------------------------------------------------- */

static gl_sampling_params params_default(void) {
    gl_sampling_params p;
    gl_sampling_params_default(&p);
    p.has_seed = true;
    p.seed = 1234;
    return p;
}

/* One sample from a fresh copy of logits (sampling clobbers them). */
static int32_t sample_copy(gl_sampler *s, const float *logits, int n, float *logprob, gl_top_logprob *top) {
    float buf[4096];
    ck_assert_int_le(n, 4096);
    memcpy(buf, logits, (size_t)n * sizeof *buf);
    return sampler_sample(s, buf, logprob, top);
}

/* Draw n_draws times and count the tokens. */
static void histogram(const gl_sampling_params *p, const float *logits, int n, int n_draws, int *counts) {
    static float buf[4096];
    ck_assert_int_le(n, 4096);
    gl_sampler *s = sampler_create(p, n);
    ck_assert_ptr_nonnull(s);
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (int i = 0; i < n_draws; i++) {
        memcpy(buf, logits, (size_t)n * sizeof *buf);
        int32_t t = sampler_sample(s, buf, NULL, NULL);
        ck_assert(t >= 0 && t < n);
        counts[t]++;
    }
    sampler_free(s);
}

/* Pearson chi-square of counts against probabilities; cells with p = 0
 * must be empty. */
static double chi_square(const int *counts, const double *probs, int n, int n_draws) {
    double chi = 0;
    for (int i = 0; i < n; i++) {
        if (probs[i] == 0) {
            ck_assert_msg(counts[i] == 0, "token %d has p=0 but was drawn %d times", i, counts[i]);
            continue;
        }
        double expected = probs[i] * n_draws;
        chi += (counts[i] - expected) * (counts[i] - expected) / expected;
    }
    return chi;
}

static uint64_t test_rng = 88172645463325252ull;
static double urand(void) { /* xorshift64, independent of the sampler's RNG */
    test_rng ^= test_rng << 13;
    test_rng ^= test_rng >> 7;
    test_rng ^= test_rng << 17;
    return (double)(test_rng >> 11) * 0x1.0p-53;
}

static void random_logits(float *l, int n, float scale) {
    for (int i = 0; i < n; i++) l[i] = (float)((urand() * 2 - 1) * scale);
}

static int32_t naive_argmax(const float *l, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

/* ---- the naive reference: full sort, in the documented order -------------- */

static const float *sort_key;
static int by_logit_desc(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_key[x] != sort_key[y]) return sort_key[x] > sort_key[y] ? -1 : 1;
    return x - y;
}

/* Probabilities the sampler should draw from (no bias/penalties). */
static void reference_probs(const float *logits, int n, float temp, int top_k, float top_p, float min_p, double *out) {
    int32_t order[64];
    for (int i = 0; i < n; i++) order[i] = i;
    sort_key = logits;
    qsort(order, (size_t)n, sizeof *order, by_logit_desc);
    int kept = (top_k > 0 && top_k < n) ? top_k : n;
    double w[64], z = 0;
    for (int j = 0; j < kept; j++) z += w[j] = exp(((double)logits[order[j]] - logits[order[0]]) / temp);
    if (top_p < 1) {
        double cum = 0;
        int j = 0;
        while (j < kept) {
            cum += w[j++] / z;
            if (cum >= top_p) break;
        }
        kept = j;
    }
    int j = 0;
    while (j < kept && w[j] >= min_p * w[0]) j++;
    kept = j;
    double total = 0;
    for (j = 0; j < kept; j++) total += w[j];
    for (int i = 0; i < n; i++) out[i] = 0;
    for (j = 0; j < kept; j++) out[order[j]] = w[j] / total;
}

/* ---- tests ---------------------------------------------------------------- */

START_TEST(test_defaults) {
    gl_sampling_params p;
    memset(&p, 0x5a, sizeof p);
    gl_sampling_params_default(&p);
    ck_assert_float_eq(p.temperature, 1.0f);
    ck_assert_int_eq(p.top_k, 0);
    ck_assert_float_eq(p.top_p, 1.0f);
    ck_assert_float_eq(p.min_p, 0.0f);
    ck_assert_float_eq(p.repetition_penalty, 1.0f);
    ck_assert_float_eq(p.presence_penalty, 0.0f);
    ck_assert_float_eq(p.frequency_penalty, 0.0f);
    ck_assert_int_eq(p.penalty_last_n, 64);
    ck_assert(!p.has_seed);
    ck_assert_int_eq(p.n_logit_bias, 0);
    ck_assert_ptr_null(p.logit_bias);
    ck_assert_int_eq(p.n_logprobs, 0);
}
END_TEST

START_TEST(test_greedy_argmax_and_ties) {
    gl_sampling_params p = params_default();
    p.temperature = 0;
    gl_sampler *s = sampler_create(&p, 5);
    ck_assert_int_eq(sample_copy(s, (float[]){1, 5, 3, -2, 4.9f}, 5, NULL, NULL), 1);
    ck_assert_int_eq(sample_copy(s, (float[]){1, 5, 5, 2, 5}, 5, NULL, NULL), 1);  /* ties: lowest id */
    ck_assert_int_eq(sample_copy(s, (float[]){-3, -1, -2, -1, -7}, 5, NULL, NULL), 1);
    ck_assert_int_eq(sample_copy(s, (float[]){7, 7, 7, 7, 7}, 5, NULL, NULL), 0);
    sampler_free(s);

    p.temperature = 1e-7f; /* below the greedy threshold */
    s = sampler_create(&p, 5);
    for (int i = 0; i < 100; i++) ck_assert_int_eq(sample_copy(s, (float[]){1, 2, 3, 2.99f, 0}, 5, NULL, NULL), 2);
    sampler_free(s);
}
END_TEST

/* sampler_argmax (vectorized, 16 lanes) is the one-lane strict scan: every
 * length around the lane count, the maximum in each lane and the tail, ties
 * between lanes, NaNs anywhere (a NaN at 0 keeps 0), -inf rows, +-0. */
static int32_t scan_argmax(const float *l, int n) {
    int32_t best = 0;
    float b = l[0];
    for (int i = 1; i < n; i++)
        if (l[i] > b) best = i, b = l[i];
    return best;
}

START_TEST(test_argmax_matches_scan) {
    enum { N = 300 };
    float l[N];
    for (int round = 0; round < 4000; round++) {
        int n = 1 + round % 70 + (round % 7 == 0 ? 200 : 0);
        random_logits(l, n, 4);
        int kind = round % 9;
        if (kind == 1) /* ties: the same maximum in several lanes */
            for (int k = 0; k < 4; k++) l[(int)(urand() * n)] = 9.0f;
        if (kind == 2) l[(int)(urand() * n)] = NAN, l[(int)(urand() * n)] = NAN;
        if (kind == 3) l[0] = NAN;
        if (kind == 4)
            for (int i = 0; i < n; i++) l[i] = -INFINITY;
        if (kind == 5)
            for (int i = 0; i < n; i++) l[i] = urand() < 0.5 ? 0.0f : -0.0f;
        if (kind == 6) l[n - 1] = 50.0f; /* in the tail */
        if (kind == 7)
            for (int i = 0; i < n; i++) l[i] = (float)(int)(urand() * 3); /* many ties */
        ck_assert_msg(sampler_argmax(l, n) == scan_argmax(l, n), "round %d (n %d, kind %d): %d vs %d", round, n, kind,
                      sampler_argmax(l, n), scan_argmax(l, n));
    }
}
END_TEST

START_TEST(test_top_k_1_is_greedy) {
    float logits[1000];
    const float temps[] = {0.1f, 1.0f, 5.0f, 1000.0f};
    for (int round = 0; round < 20; round++) {
        random_logits(logits, 1000, 3);
        if (round % 5 == 0) logits[17] = logits[naive_argmax(logits, 1000)]; /* a tie */
        int32_t want = naive_argmax(logits, 1000);
        for (int k = 0; k < 4; k++) {
            gl_sampling_params p = params_default();
            p.temperature = temps[k];
            p.top_k = 1;
            p.top_p = 0.9f;
            gl_sampler *s = sampler_create(&p, 1000);
            for (int i = 0; i < 5; i++) ck_assert_int_eq(sample_copy(s, logits, 1000, NULL, NULL), want);
            sampler_free(s);
        }
    }
}
END_TEST

START_TEST(test_top_p_tiny_keeps_max) {
    float logits[100];
    random_logits(logits, 100, 2);
    int32_t want = naive_argmax(logits, 100);
    const float ps[] = {1e-6f, 0.0f, -1.0f};
    for (int k = 0; k < 3; k++) {
        gl_sampling_params p = params_default();
        p.top_p = ps[k];
        p.temperature = 3.0f;
        gl_sampler *s = sampler_create(&p, 100);
        for (int i = 0; i < 500; i++) ck_assert_int_eq(sample_copy(s, logits, 100, NULL, NULL), want);
        sampler_free(s);
    }
    /* a flat distribution: the bound must not throw everything out */
    float flat[100];
    for (int i = 0; i < 100; i++) flat[i] = 0.5f;
    gl_sampling_params p = params_default();
    p.top_p = 0.001f;
    gl_sampler *s = sampler_create(&p, 100);
    for (int i = 0; i < 50; i++) ck_assert_int_eq(sample_copy(s, flat, 100, NULL, NULL), 0);
    sampler_free(s);
}
END_TEST

START_TEST(test_no_filter_keeps_all) {
    const float logits[6] = {0, -1, -2, -3, -4, -5};
    int counts[6];
    gl_sampling_params p = params_default(); /* top_p 1, top_k 0, min_p 0 */
    histogram(&p, logits, 6, 20000, counts);
    for (int i = 0; i < 6; i++) ck_assert_int_gt(counts[i], 0);
    p.top_k = 6; /* top_k >= n_vocab is off */
    histogram(&p, logits, 6, 20000, counts);
    for (int i = 0; i < 6; i++) ck_assert_int_gt(counts[i], 0);
}
END_TEST

START_TEST(test_min_p_edges) {
    const float logits[5] = {3, 1, 3, 0, -1};
    int counts[5];
    gl_sampling_params p = params_default();
    p.min_p = 1.0f; /* only the maxima survive */
    histogram(&p, logits, 5, 4000, counts);
    ck_assert_int_gt(counts[0], 1500);
    ck_assert_int_gt(counts[2], 1500);
    ck_assert_int_eq(counts[0] + counts[2], 4000);

    p.min_p = 0.0f; /* off */
    histogram(&p, logits, 5, 20000, counts);
    for (int i = 0; i < 5; i++) ck_assert_int_gt(counts[i], 0);

    p.min_p = 1e-9f; /* on, but keeps everything */
    histogram(&p, logits, 5, 20000, counts);
    for (int i = 0; i < 5; i++) ck_assert_int_gt(counts[i], 0);
}
END_TEST

START_TEST(test_high_temperature_spreads) {
    const float logits[4] = {0, -5, -10, -20};
    int counts[4];
    gl_sampling_params p = params_default();
    p.temperature = 1000.0f;
    histogram(&p, logits, 4, 20000, counts);
    for (int i = 0; i < 4; i++) ck_assert_int_gt(counts[i], 4500); /* ~5000 each */
    p.temperature = 1.0f;
    histogram(&p, logits, 4, 20000, counts);
    ck_assert_int_gt(counts[0], 19800);
}
END_TEST

START_TEST(test_seeded_reproducible) {
    float logits[50];
    random_logits(logits, 50, 1);
    gl_sampling_params p = params_default();
    p.seed = 42;
    gl_sampler *a = sampler_create(&p, 50), *b = sampler_create(&p, 50);
    p.seed = 43;
    gl_sampler *c = sampler_create(&p, 50);
    int n_diff = 0;
    for (int i = 0; i < 1000; i++) {
        int32_t ta = sample_copy(a, logits, 50, NULL, NULL);
        ck_assert_int_eq(ta, sample_copy(b, logits, 50, NULL, NULL));
        n_diff += ta != sample_copy(c, logits, 50, NULL, NULL);
    }
    ck_assert_int_gt(n_diff, 500);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);

    /* unseeded samplers created back to back still differ */
    p.has_seed = false;
    a = sampler_create(&p, 50);
    b = sampler_create(&p, 50);
    n_diff = 0;
    for (int i = 0; i < 200; i++)
        n_diff += sample_copy(a, logits, 50, NULL, NULL) != sample_copy(b, logits, 50, NULL, NULL);
    ck_assert_int_gt(n_diff, 0);
    sampler_free(a);
    sampler_free(b);
}
END_TEST

START_TEST(test_distribution_matches_softmax) {
    /* 3 degrees of freedom: chi-square > 30 has probability ~1e-6. */
    const float logits[4] = {1.0f, 0.5f, -0.3f, -1.2f};
    const float temps[] = {1.0f, 0.7f, 2.0f};
    for (int k = 0; k < 3; k++) {
        gl_sampling_params p = params_default();
        p.temperature = temps[k];
        p.seed = 7 + (uint64_t)k;
        double probs[4];
        reference_probs(logits, 4, temps[k], 0, 1, 0, probs);
        int counts[4];
        histogram(&p, logits, 4, 20000, counts);
        double chi = chi_square(counts, probs, 4, 20000);
        ck_assert_msg(chi < 30, "T=%g chi-square %g", temps[k], chi);
    }
}
END_TEST

/* Probabilities .5 .3 .15 .05 make the truncations easy to check by hand. */
START_TEST(test_truncations_by_hand) {
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct {
        int top_k;
        float top_p, min_p;
        double want[4];
    } cases[] = {
        {2, 1.0f, 0, {0.625, 0.375, 0, 0}},
        {0, 0.7f, 0, {0.625, 0.375, 0, 0}},
        {0, 0.85f, 0, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {0, 1.0f, 0.5f, {0.625, 0.375, 0, 0}},
        {0, 1.0f, 0.2f, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {3, 0.6f, 0, {0.625, 0.375, 0, 0}},           /* top-p on the renormalised top-3 */
        {0, 0.85f, 0.5f, {0.625, 0.375, 0, 0}},       /* min-p cuts the nucleus */
        {0, 0.7f, 0.1f, {0.625, 0.375, 0, 0}},        /* top-p cuts the min-p set */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gl_sampling_params p = params_default();
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.seed = 100 + c;
        int counts[4];
        histogram(&p, logits, 4, 20000, counts);
        double chi = chi_square(counts, cases[c].want, 4, 20000);
        ck_assert_msg(chi < 30, "case %zu chi-square %g", c, chi);
    }
}
END_TEST

/* Random logits and settings against the full-sort reference. */
START_TEST(test_matches_reference_pipeline) {
    for (int round = 0; round < 30; round++) {
        float logits[8];
        random_logits(logits, 8, 2.5f);
        gl_sampling_params p = params_default();
        p.temperature = (float)(0.3 + urand() * 2);
        p.top_k = urand() < 0.5 ? 0 : 1 + (int)(urand() * 7);
        p.top_p = urand() < 0.3 ? 1.0f : (float)(0.2 + urand() * 0.75);
        p.min_p = urand() < 0.5 ? 0.0f : (float)(urand() * 0.3);
        p.seed = 1000 + (uint64_t)round;
        double probs[8];
        reference_probs(logits, 8, p.temperature, p.top_k, p.top_p, p.min_p, probs);
        int counts[8], dof = -1;
        for (int i = 0; i < 8; i++) dof += probs[i] > 0;
        histogram(&p, logits, 8, 20000, counts);
        double chi = chi_square(counts, probs, 8, 20000);
        ck_assert_msg(chi < 30 + 5 * dof, "round %d (T=%g k=%d p=%g min_p=%g) chi-square %g",
                      round, p.temperature, p.top_k, p.top_p, p.min_p, chi);
    }
}
END_TEST

/* Many random rows: every draw must lie in the nucleus of a full sort. */
START_TEST(test_nucleus_membership) {
    enum { N = 200 };
    float logits[N], work[N];
    int32_t order[N];
    for (int round = 0; round < 2000; round++) {
        random_logits(logits, N, 2);
        gl_sampling_params p = params_default();
        p.top_p = (float)(0.2 + urand() * 0.75);
        p.temperature = (float)(0.5 + urand());
        p.seed = (uint64_t)round;
        for (int i = 0; i < N; i++) order[i] = i;
        sort_key = logits;
        qsort(order, N, sizeof *order, by_logit_desc);
        double w[N], z = 0, cum = 0;
        for (int j = 0; j < N; j++) z += w[j] = exp((logits[order[j]] - logits[order[0]]) / p.temperature);
        int n_in = 0;
        while (n_in < N && cum < p.top_p * z) cum += w[n_in++];
        if (fabs(cum - w[n_in - 1] - p.top_p * z) < 1e-4 * z || fabs(cum - p.top_p * z) < 1e-4 * z)
            continue; /* too close to call in float */
        float worst_in = logits[order[n_in - 1]];
        gl_sampler *s = sampler_create(&p, N);
        for (int i = 0; i < 30; i++) {
            memcpy(work, logits, sizeof work);
            int32_t t = sampler_sample(s, work, NULL, NULL);
            ck_assert_msg(logits[t] >= worst_in, "round %d: drew a token outside the nucleus", round);
        }
        sampler_free(s);
    }
}
END_TEST

/* Ties decide the nucleus boundary: 100 equal "high" tokens scattered over a
 * 3000-token vocabulary, the rest equal and lower. Equal logits rank by id,
 * so the nucleus is known exactly, and it is big enough to go through the
 * partitioning path rather than the short-run sort. */
START_TEST(test_nucleus_with_ties) {
    enum { N = 3000, N_HIGH = 100 };
    static float logits[N];
    static bool high[N];
    for (int i = 0; i < N; i++) logits[i] = -3.0f;
    for (int placed = 0; placed < N_HIGH;) {
        int i = (int)(urand() * N);
        if (!high[i]) {
            high[i] = true;
            logits[i] = 0.0f;
            placed++;
        }
    }
    const double w_low = expf(-3.0f), z = N_HIGH + (N - N_HIGH) * w_low;
    const float ps[] = {0.3f, 0.5f, 0.97f};
    for (int k = 0; k < 3; k++) {
        /* the nucleus: the first n_high high ids, then the first n_low low ids */
        double target = ps[k] * z;
        int n_high = target <= N_HIGH ? (int)ceil(target) : N_HIGH;
        int n_low = target <= N_HIGH ? 0 : (int)ceil((target - N_HIGH) / w_low);
        double slack = target <= N_HIGH ? n_high - target : n_low - (target - N_HIGH) / w_low;
        ck_assert(slack > 0.01 && slack < 0.99); /* not on a rounding edge */
        static bool in[N];
        int seen_high = 0, seen_low = 0;
        for (int i = 0; i < N; i++) {
            in[i] = high[i] ? seen_high++ < n_high : seen_low++ < n_low;
        }
        gl_sampling_params p = params_default();
        p.top_p = ps[k];
        p.seed = 5 + (uint64_t)k;
        static int counts[N];
        histogram(&p, logits, N, 20000, counts);
        for (int i = 0; i < N; i++) {
            if (!in[i]) ck_assert_msg(counts[i] == 0, "p=%g: token %d outside the nucleus drawn", ps[k], i);
            if (in[i] && high[i]) ck_assert_int_gt(counts[i], 0);
        }
    }
}
END_TEST

/* A real-size vocabulary: the heap paths must pick from the right sets. */
START_TEST(test_large_vocab_sets) {
    enum { N = 256000 };
    float *logits = malloc(N * sizeof *logits), *work = malloc(N * sizeof *work);
    int32_t *order = malloc(N * sizeof *order);
    random_logits(logits, N, 8);
    for (int i = 0; i < N; i++) order[i] = i;
    sort_key = logits;
    qsort(order, N, sizeof *order, by_logit_desc);

    gl_sampling_params p = params_default();
    p.top_k = 40;
    gl_sampler *s = sampler_create(&p, N);
    for (int i = 0; i < 50; i++) {
        memcpy(work, logits, N * sizeof *work);
        int32_t t = sampler_sample(s, work, NULL, NULL);
        ck_assert_float_ge(logits[t], logits[order[39]]);
    }
    sampler_free(s);

    /* the nucleus for p = 0.5, from the full sort */
    double z = 0, cum = 0;
    for (int i = 0; i < N; i++) z += exp((double)logits[i] - logits[order[0]]);
    int n_nucleus = 0;
    while (cum < 0.5 * z) cum += exp((double)logits[order[n_nucleus++]] - logits[order[0]]);
    p = params_default();
    p.top_p = 0.5f;
    s = sampler_create(&p, N);
    for (int i = 0; i < 50; i++) {
        memcpy(work, logits, N * sizeof *work);
        int32_t t = sampler_sample(s, work, NULL, NULL);
        ck_assert_float_ge(logits[t], logits[order[n_nucleus - 1]]);
    }
    sampler_free(s);
    free(logits);
    free(work);
    free(order);
}
END_TEST

START_TEST(test_logit_bias_bans_and_forces) {
    float logits[10];
    for (int i = 0; i < 10; i++) logits[i] = 1.0f;
    gl_logit_bias ban[] = {{3, -100}, {-5, 50}, {99, 50}}; /* out-of-range ids are ignored */
    gl_sampling_params p = params_default();
    p.logit_bias = ban;
    p.n_logit_bias = 3;
    int counts[10];
    histogram(&p, logits, 10, 5000, counts);
    ck_assert_int_eq(counts[3], 0);
    for (int i = 0; i < 10; i++)
        if (i != 3) ck_assert_int_gt(counts[i], 0);

    gl_logit_bias force[] = {{7, 100}};
    p.logit_bias = force;
    p.n_logit_bias = 1;
    p.n_logprobs = 2;
    gl_sampler *s = sampler_create(&p, 10);
    force[0].token = 2; /* the sampler keeps its own copy */
    for (int i = 0; i < 500; i++) {
        float lp;
        gl_top_logprob top[2];
        ck_assert_int_eq(sample_copy(s, logits, 10, &lp, top), 7);
        ck_assert_float_eq_tol(lp, logf(0.1f), 1e-5); /* raw distribution, not the biased one */
        ck_assert_int_eq(top[0].token, 0);
        ck_assert_int_eq(top[1].token, 1);
    }
    sampler_free(s);

    p.temperature = 0;
    force[0].token = 9;
    s = sampler_create(&p, 10);
    ck_assert_int_eq(sample_copy(s, logits, 10, NULL, NULL), 9);
    sampler_free(s);
}
END_TEST

/* The sampler leaves the processed logits in its scratch buffer. */
static void processed(gl_sampler *s, const float *logits, int n, float *out) {
    memcpy(out, logits, (size_t)n * sizeof *out);
    sampler_sample(s, out, NULL, NULL);
}

START_TEST(test_penalties) {
    const float logits[5] = {4, -4, 2, 1, 0.5f};
    float out[5];

    gl_sampling_params p = params_default();
    p.repetition_penalty = 2.0f;
    gl_sampler *s = sampler_create(&p, 5);
    sampler_accept(s, 0);
    sampler_accept(s, 1);
    sampler_accept(s, 1);
    processed(s, logits, 5, out);
    ck_assert_float_eq(out[0], 2.0f);   /* positive: divided */
    ck_assert_float_eq(out[1], -8.0f);  /* negative: multiplied, once however often seen */
    ck_assert_float_eq(out[2], 2.0f);
    ck_assert_float_eq(out[3], 1.0f);
    sampler_reset(s);
    processed(s, logits, 5, out);
    for (int i = 0; i < 5; i++) ck_assert_float_eq(out[i], logits[i]);
    sampler_free(s);

    p = params_default();
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    s = sampler_create(&p, 5);
    for (int i = 0; i < 3; i++) sampler_accept(s, 2);
    sampler_accept(s, 3);
    sampler_accept(s, 77); /* out of range: ignored */
    processed(s, logits, 5, out);
    ck_assert_float_eq(out[0], 4.0f);
    ck_assert_float_eq_tol(out[2], 2.0f - 3 * 0.25f - 0.5f, 1e-6);
    ck_assert_float_eq_tol(out[3], 1.0f - 0.25f - 0.5f, 1e-6);
    ck_assert_float_eq(out[4], 0.5f);
    sampler_free(s);

    /* all three on one token: repetition first, then presence and frequency */
    p = params_default();
    p.repetition_penalty = 1.5f;
    p.presence_penalty = 0.1f;
    p.frequency_penalty = 0.2f;
    s = sampler_create(&p, 5);
    sampler_accept(s, 0);
    sampler_accept(s, 0);
    processed(s, logits, 5, out);
    ck_assert_float_eq_tol(out[0], 4.0f / 1.5f - 0.4f - 0.1f, 1e-6);
    sampler_free(s);
}
END_TEST

START_TEST(test_penalty_window) {
    const float logits[5] = {1, 1, 1, 1, 1};
    float out[5];
    gl_sampling_params p = params_default();
    p.frequency_penalty = 1.0f;
    p.penalty_last_n = 3;
    gl_sampler *s = sampler_create(&p, 5);
    const int32_t seq[] = {0, 0, 1, 2, 2, 3};
    for (int i = 0; i < 6; i++) sampler_accept(s, seq[i]);
    processed(s, logits, 5, out); /* window: 2 2 3 */
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], 1.0f);
    ck_assert_float_eq(out[2], -1.0f);
    ck_assert_float_eq(out[3], 0.0f);
    sampler_accept(s, 4);
    sampler_accept(s, 4);
    processed(s, logits, 5, out); /* window: 3 4 4 */
    ck_assert_float_eq(out[2], 1.0f);
    ck_assert_float_eq(out[3], 0.0f);
    ck_assert_float_eq(out[4], -1.0f);
    sampler_free(s);

    p.penalty_last_n = -1; /* everything */
    s = sampler_create(&p, 5);
    for (int i = 0; i < 6; i++) sampler_accept(s, seq[i]);
    processed(s, logits, 5, out);
    ck_assert_float_eq(out[0], -1.0f);
    ck_assert_float_eq(out[1], 0.0f);
    ck_assert_float_eq(out[2], -1.0f);
    ck_assert_float_eq(out[3], 0.0f);
    ck_assert_float_eq(out[4], 1.0f);
    sampler_free(s);

    p.penalty_last_n = 0; /* off */
    s = sampler_create(&p, 5);
    for (int i = 0; i < 6; i++) sampler_accept(s, seq[i]);
    processed(s, logits, 5, out);
    for (int i = 0; i < 5; i++) ck_assert_float_eq(out[i], 1.0f);
    sampler_free(s);
}
END_TEST

START_TEST(test_logprobs) {
    enum { N = 1000 };
    float logits[N];
    random_logits(logits, N, 6);
    logits[500] = logits[naive_argmax(logits, N)]; /* a tie for first place */
    double max = logits[naive_argmax(logits, N)], z = 0;
    for (int i = 0; i < N; i++) z += exp(logits[i] - max);
    double lse = max + log(z);

    gl_top_logprob top[20];
    double total = 0;
    for (int i = 0; i < N; i++) {
        float lp = sampler_logprob(logits, N, i, top, 20);
        ck_assert_float_eq_tol(lp, logits[i] - lse, 1e-4);
        total += exp(lp);
    }
    ck_assert_float_eq_tol(total, 1.0, 1e-4);
    int32_t order[N];
    for (int i = 0; i < N; i++) order[i] = i;
    sort_key = logits;
    qsort(order, N, sizeof *order, by_logit_desc);
    for (int j = 0; j < 20; j++) {
        ck_assert_int_eq(top[j].token, order[j]);
        if (j > 0) ck_assert_float_le(top[j].logprob, top[j - 1].logprob);
    }
    ck_assert(sampler_logprob(logits, N, -1, NULL, 0) == -INFINITY);

    /* sampler_sample reports the raw distribution whatever the processing */
    gl_sampling_params p = params_default();
    p.temperature = 0.5f;
    p.top_k = 10;
    p.repetition_penalty = 1.3f;
    p.n_logprobs = 5;
    gl_logit_bias bias[] = {{order[7], 3.0f}};
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    gl_sampler *s = sampler_create(&p, N);
    sampler_accept(s, order[0]);
    for (int i = 0; i < 200; i++) {
        float lp;
        gl_top_logprob top5[5];
        int32_t t = sample_copy(s, logits, N, &lp, top5);
        ck_assert_float_eq_tol(lp, logits[t] - lse, 1e-4);
        for (int j = 0; j < 5; j++) {
            ck_assert_int_eq(top5[j].token, order[j]);
            ck_assert_float_eq_tol(top5[j].logprob, logits[order[j]] - lse, 1e-4);
        }
    }
    sampler_free(s);

    /* more alternatives asked for than the vocabulary has */
    p = params_default();
    p.n_logprobs = 20;
    s = sampler_create(&p, 3);
    gl_top_logprob top3[3];
    float lp;
    sample_copy(s, (float[]){0, 0, 0}, 3, &lp, top3);
    ck_assert_float_eq_tol(lp, logf(1.0f / 3), 1e-6);
    for (int j = 0; j < 3; j++) ck_assert_int_eq(top3[j].token, j);
    sampler_free(s);
    sampler_logprob((float[]){0, 0}, 2, 0, top, 4);
    ck_assert_int_eq(top[2].token, -1);
    ck_assert_int_eq(top[3].token, -1);
}
END_TEST

START_TEST(test_nan_and_inf) {
    const float nan = NAN, inf = INFINITY;
    gl_top_logprob top[3];
    float lp;

    /* NaN is -inf; +inf wins */
    const float with_nan[4] = {nan, 1, nan, 0.5f};
    const float with_inf[4] = {nan, 1, inf, -inf};
    const float all_bad[4] = {nan, -inf, nan, -inf};
    const float *rows[] = {with_nan, with_inf, all_bad};
    const float temps[] = {0, 1, 0.5f};
    for (int k = 0; k < 3; k++) {
        gl_sampling_params p = params_default();
        p.temperature = temps[k];
        p.n_logprobs = 3;
        p.top_p = k == 2 ? 0.9f : 1.0f;
        p.min_p = k == 2 ? 0.1f : 0.0f;
        gl_sampler *s = sampler_create(&p, 4);
        int counts[4] = {0};
        for (int i = 0; i < 300; i++) {
            int32_t t = sample_copy(s, rows[0], 4, &lp, top);
            counts[t]++;
            ck_assert(!isnan(lp));
            ck_assert_int_eq(top[0].token, 1);
            ck_assert_int_eq(top[1].token, 3);
            ck_assert_float_eq_tol(lp, t == 1 ? 1 - logf(expf(1) + expf(0.5f)) : 0.5f - logf(expf(1) + expf(0.5f)), 1e-5);
            ck_assert_int_eq(sample_copy(s, rows[1], 4, &lp, top), 2);
            ck_assert_float_eq_tol(lp, 0, 1e-6);
            int32_t u = sample_copy(s, rows[2], 4, &lp, top);
            ck_assert(u >= 0 && u < 4);
            ck_assert(lp == -INFINITY);
        }
        ck_assert_int_eq(counts[0] + counts[2], 0);
        sampler_free(s);
    }
    float l = sampler_logprob(with_nan, 4, 0, top, 3);
    ck_assert(l == -INFINITY);
    ck_assert_float_eq_tol(expf(sampler_logprob(with_nan, 4, 1, NULL, 0)) +
                           expf(sampler_logprob(with_nan, 4, 3, NULL, 0)), 1.0f, 1e-6);
}
END_TEST


/* ---- llama.cpp's samplers ------------------------------------------------- */

START_TEST(test_llama_sampler_defaults) {
    gl_sampling_params p;
    memset(&p, 0x5a, sizeof p);
    gl_sampling_params_default(&p);
    ck_assert_float_eq(p.typical_p, 1.0f);
    ck_assert_float_eq(p.top_n_sigma, -1.0f);
    ck_assert_float_eq(p.xtc_probability, 0.0f);
    ck_assert_float_eq(p.xtc_threshold, 0.1f);
    ck_assert_float_eq(p.dynatemp_range, 0.0f);
    ck_assert_float_eq(p.dynatemp_exponent, 1.0f);
    ck_assert_int_eq(p.mirostat, 0);
    ck_assert_float_eq(p.mirostat_tau, 5.0f);
    ck_assert_float_eq(p.mirostat_eta, 0.1f);
    ck_assert_float_eq(p.dry_multiplier, 0.0f);
    ck_assert_float_eq(p.dry_base, 1.75f);
    ck_assert_int_eq(p.dry_allowed_length, 2);
    ck_assert_int_eq(p.dry_penalty_last_n, -1);
    ck_assert_int_eq(p.n_dry_breakers, 4);
    ck_assert_str_eq(p.dry_breakers[0], "\n");
    ck_assert_str_eq(p.dry_breakers[1], ":");
    ck_assert_str_eq(p.dry_breakers[2], "\"");
    ck_assert_str_eq(p.dry_breakers[3], "*");
}
END_TEST

/* The draws of p against want, by chi-square (3 degrees of freedom at most). */
static void check_draws(const gl_sampling_params *p, const float *logits, const double *want, const char *what) {
    int counts[5];
    histogram(p, logits, 4, 20000, counts);
    double chi = chi_square(counts, want, 4, 20000);
    ck_assert_msg(chi < 30, "%s: chi-square %g", what, chi);
}

/* Probabilities .5 .3 .15 .05: entropy 1.142 nats; surprises .693 1.204
 * 1.897 2.996, so typicality ranks 1, 0, 2, 3. */
START_TEST(test_typical_by_hand) {
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct {
        float typical_p;
        double want[4];
    } cases[] = {
        {0.0f, {0, 1, 0, 0}},  /* the most typical token, not the most likely */
        {0.25f, {0, 1, 0, 0}},
        {0.5f, {0.625, 0.375, 0, 0}},
        {0.9f, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {1.0f, {0.5, 0.3, 0.15, 0.05}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gl_sampling_params p = params_default();
        p.typical_p = cases[c].typical_p;
        p.seed = 300 + c;
        check_draws(&p, logits, cases[c].want, "typical_p");
    }
    /* with top-p after it: top-p's mass is that of the typical set */
    gl_sampling_params p = params_default();
    p.typical_p = 0.5f;
    p.top_p = 0.5f;
    const double want[4] = {1, 0, 0, 0};
    check_draws(&p, logits, want, "typical_p then top_p");
}
END_TEST

/* Logits 2 1 0 -1 -2: mean 0, standard deviation sqrt 2. */
START_TEST(test_top_n_sigma_by_hand) {
    const float logits[5] = {2, 1, 0, -1, -2};
    double e2 = exp(2), e1 = exp(1), e0 = 1;
    struct {
        float n;
        double want[4];
    } cases[] = {
        {1e-4f, {1, 0, 0, 0}},                              /* tiny n: greedy */
        {1.0f, {e2 / (e2 + e1), e1 / (e2 + e1), 0, 0}},    /* above 2 - 1.41 */
        {2.0f, {e2 / (e2 + e1 + e0), e1 / (e2 + e1 + e0), e0 / (e2 + e1 + e0), 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gl_sampling_params p = params_default();
        p.top_n_sigma = cases[c].n;
        p.seed = 400 + c;
        int counts[5];
        histogram(&p, logits, 5, 20000, counts);
        double want5[5] = {cases[c].want[0], cases[c].want[1], cases[c].want[2], cases[c].want[3], 0};
        double chi = chi_square(counts, want5, 5, 20000);
        ck_assert_msg(chi < 30, "top_n_sigma %g: chi-square %g", cases[c].n, chi);
    }
    /* off (<= 0) keeps everything; a banned token does not count in the spread */
    gl_sampling_params p = params_default();
    p.top_n_sigma = 0;
    int counts[5];
    histogram(&p, logits, 5, 20000, counts);
    ck_assert_int_gt(counts[4], 0);
    float banned[5] = {2, 1, 0, -1, -INFINITY};
    p.top_n_sigma = 1.0f; /* mean 0.5, sd 1.118: keeps logits >= 0.88 */
    histogram(&p, banned, 5, 20000, counts);
    ck_assert_int_gt(counts[1], 0);
    ck_assert_int_eq(counts[2] + counts[3] + counts[4], 0);
}
END_TEST

START_TEST(test_xtc_by_hand) {
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct {
        float probability, threshold;
        double want[4];
    } cases[] = {
        {1.0f, 0.1f, {0, 0, 0.75, 0.25}},           /* 0, 1, 2 reach .1: only 2 stays */
        {1.0f, 0.2f, {0, 0.6, 0.3, 0.1}},           /* 0 and 1 reach .2: 1 stays */
        {1.0f, 0.45f, {0.5, 0.3, 0.15, 0.05}},      /* one token reaches it: nothing goes */
        {1.0f, 0.6f, {0.5, 0.3, 0.15, 0.05}},       /* above .5: off */
        {0.5f, 0.2f, {0.25, 0.45, 0.225, 0.075}},   /* half the time */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gl_sampling_params p = params_default();
        p.xtc_probability = cases[c].probability;
        p.xtc_threshold = cases[c].threshold;
        p.seed = 500 + c;
        check_draws(&p, logits, cases[c].want, "xtc");
    }
}
END_TEST

/* Dynamic temperature from the normalised entropy of logits 1 0 -1 -2. */
START_TEST(test_dynatemp_by_hand) {
    const float logits[4] = {1, 0, -1, -2};
    double z = 0, h = 0;
    for (int i = 0; i < 4; i++) z += exp(logits[i]);
    for (int i = 0; i < 4; i++) h -= exp(logits[i]) / z * (logits[i] - log(z));
    double norm = h / log(4.0);
    struct {
        float temperature, range, exponent;
    } cases[] = {{1.0f, 0.5f, 1.0f}, {1.0f, 0.8f, 2.0f}, {0.7f, 0.0f, 1.0f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gl_sampling_params p = params_default();
        p.temperature = cases[c].temperature;
        p.dynatemp_range = cases[c].range;
        p.dynatemp_exponent = cases[c].exponent;
        p.seed = 600 + c;
        double lo = fmax(cases[c].temperature - cases[c].range, 0), hi = cases[c].temperature + cases[c].range;
        double t = lo + (hi - lo) * pow(norm, cases[c].exponent);
        double want[4];
        reference_probs(logits, 4, (float)t, 0, 1, 0, want);
        check_draws(&p, logits, want, "dynatemp");
    }
    /* a flat-enough row at exponent 60 maps to temperature - range = 0: greedy */
    gl_sampling_params p = params_default();
    p.temperature = 0.5f;
    p.dynatemp_range = 0.5f;
    p.dynatemp_exponent = 60;
    const double greedy[4] = {1, 0, 0, 0};
    check_draws(&p, logits, greedy, "dynatemp down to 0");
}
END_TEST

/* Zipf logits p_i ~ (i + 1)^-1.5 over 1000 tokens: mirostat 1 estimates
 * s = 1.5, and with tau 3 (mu 6) keeps k = (0.5 * 2^6 / (1 - 1000^-0.5))^(1/1.5)
 * = 10 tokens on its first draw. */
START_TEST(test_mirostat_1_first_k) {
    enum { N = 1000 };
    static float logits[N], work[N];
    for (int i = 0; i < N; i++) logits[i] = -1.5f * logf((float)(i + 1));
    int above_5 = 0;
    for (int seed = 0; seed < 500; seed++) {
        gl_sampling_params p = params_default();
        p.mirostat = 1;
        p.mirostat_tau = 3;
        p.seed = (uint64_t)seed;
        gl_sampler *s = sampler_create(&p, N);
        memcpy(work, logits, sizeof work);
        int32_t t = sampler_sample(s, work, NULL, NULL);
        ck_assert_int_lt(t, 10);
        above_5 += t >= 5;
        sampler_free(s);
    }
    ck_assert_int_gt(above_5, 20); /* ~12% of the top-10 mass */
}
END_TEST

/* Mirostat 2 with tau 0.1 (mu 0.2): only tokens with p >= 2^-0.2 = 0.87
 * pass, so the first draws are the best token; mu then grows by eta * tau
 * per draw. With a large tau every token passes: plain softmax. */
START_TEST(test_mirostat_2_by_hand) {
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    gl_sampling_params p = params_default();
    p.mirostat = 2;
    p.mirostat_tau = 0.1f;
    gl_sampler *s = sampler_create(&p, 4);
    for (int i = 0; i < 100; i++) ck_assert_int_eq(sample_copy(s, logits, 4, NULL, NULL), 0);
    sampler_free(s);
    p.mirostat_tau = 10;
    const double softmax[4] = {0.5, 0.3, 0.15, 0.05};
    check_draws(&p, logits, softmax, "mirostat 2, tau 10");
    /* top_k, top_p and friends do not apply under mirostat */
    p.top_k = 1;
    p.top_p = 0.1f;
    check_draws(&p, logits, softmax, "mirostat 2 ignores top_k/top_p");
}
END_TEST

/* Both versions steer the drawn tokens' surprise: a lower tau draws more
 * likely tokens on average (on a roughly Zipf row, mirostat 1's model). */
START_TEST(test_mirostat_follows_tau) {
    enum { N = 200, STEPS = 3000 };
    static float logits[N], work[N];
    for (int i = 0; i < N; i++) logits[i] = -1.2f * logf((float)(i + 1)) + (float)(urand() * 0.2);
    double z = 0;
    for (int i = 0; i < N; i++) z += exp(logits[i]);
    for (int version = 1; version <= 2; version++) {
        double mean[2];
        const float taus[2] = {1.5f, 4.0f};
        for (int k = 0; k < 2; k++) {
            gl_sampling_params p = params_default();
            p.mirostat = version;
            p.mirostat_tau = taus[k];
            gl_sampler *s = sampler_create(&p, N);
            double total = 0;
            for (int i = 0; i < STEPS; i++) {
                memcpy(work, logits, sizeof work);
                int32_t t = sampler_sample(s, work, NULL, NULL);
                total += -log2(exp(logits[t]) / z);
            }
            mean[k] = total / STEPS;
            sampler_free(s);
        }
        ck_assert_msg(mean[0] + 0.5 < mean[1], "mirostat %d: mean surprise %g at tau 1.5, %g at tau 4", version,
                      mean[0], mean[1]);
    }
}
END_TEST

/* The DRY penalty a sampler with this history puts on each of 10 tokens
 * (all logits 0, greedy: sampling leaves the processed logits in place). */
static void dry_penalties(const gl_sampling_params *p, const int32_t *history, int n, const int32_t *breakers,
                          int n_breakers, float *penalty) {
    gl_sampler *s = sampler_create(p, 10);
    ck_assert_ptr_nonnull(s);
    for (int i = 0; i < n_breakers; i++) sampler_set_breaker(s, breakers[i]);
    for (int i = 0; i < n; i++) sampler_accept(s, history[i]);
    float row[10] = {0};
    float logprob;
    sampler_sample(s, row, &logprob, NULL);
    ck_assert_float_eq_tol(logprob, logf(0.1f), 1e-5); /* raw, whatever the penalty */
    for (int i = 0; i < 10; i++) penalty[i] = -row[i];
    sampler_free(s);
}

START_TEST(test_dry_by_hand) {
    /* 1 2 3 4 1 2 3: the text ends with "1 2 3", which 4 followed before */
    const int32_t h[7] = {1, 2, 3, 4, 1, 2, 3};
    gl_sampling_params p = params_default();
    p.temperature = 0;
    p.dry_multiplier = 0.8f;
    float pen[10];
    dry_penalties(&p, h, 7, NULL, 0, pen);
    for (int i = 0; i < 10; i++) ck_assert_float_eq_tol(pen[i], i == 4 ? 0.8f * 1.75f : 0, 1e-6);

    p.dry_allowed_length = 3;  /* 3 - 3: multiplier * base^0 */
    dry_penalties(&p, h, 7, NULL, 0, pen);
    ck_assert_float_eq_tol(pen[4], 0.8f, 1e-6);
    p.dry_allowed_length = 4;  /* a run of 3 is allowed */
    dry_penalties(&p, h, 7, NULL, 0, pen);
    ck_assert_float_eq_tol(pen[4], 0, 1e-6);
    p.dry_allowed_length = 2;

    const int32_t b1[1] = {1}, b2[1] = {2}, b4[1] = {4};
    dry_penalties(&p, h, 7, b1, 1, pen);   /* the run stops after the breaker 1: "2 3", length 2 */
    ck_assert_float_eq_tol(pen[4], 0.8f, 1e-6);
    dry_penalties(&p, h, 7, b2, 1, pen);   /* "3" alone is shorter than allowed */
    ck_assert_float_eq_tol(pen[4], 0, 1e-6);
    dry_penalties(&p, h, 7, b4, 1, pen);   /* a breaker is never penalised */
    ck_assert_float_eq_tol(pen[4], 0, 1e-6);

    p.dry_penalty_last_n = 4;              /* the window 4 1 2 3 holds no repeat */
    dry_penalties(&p, h, 7, NULL, 0, pen);
    ck_assert_float_eq_tol(pen[4], 0, 1e-6);
    p.dry_penalty_last_n = 0;              /* off */
    dry_penalties(&p, h, 7, NULL, 0, pen);
    ck_assert_float_eq_tol(pen[4], 0, 1e-6);
    p.dry_penalty_last_n = -1;

    /* 5 6 5 6 5 6 5: "6 5 6 5" (after 5 6 5 6 ...) is followed by 6, run 5 */
    const int32_t alt[7] = {5, 6, 5, 6, 5, 6, 5};
    dry_penalties(&p, alt, 7, NULL, 0, pen);
    for (int i = 0; i < 10; i++)
        ck_assert_float_eq_tol(pen[i], i == 6 ? 0.8f * powf(1.75f, 5 - 2) : 0, 1e-4);
    /* the longest run wins when a token follows several */
    const int32_t two[9] = {7, 1, 2, 9, 1, 2, 3, 1, 2};
    dry_penalties(&p, two, 9, NULL, 0, pen); /* 9 and 3 follow "1 2"; 7 1 2 is not repeated */
    ck_assert_float_eq_tol(pen[9], 0.8f, 1e-6);
    ck_assert_float_eq_tol(pen[3], 0.8f, 1e-6);

    /* a long run of one token: the exponent stops short of overflow */
    int32_t same[300];
    for (int i = 0; i < 300; i++) same[i] = 8;
    p.dry_base = 3;
    dry_penalties(&p, same, 300, NULL, 0, pen);
    ck_assert(pen[8] > 1e30f && isfinite(pen[8]));

    /* sampler_reset forgets the history */
    gl_sampler *s = sampler_create(&p, 10);
    for (int i = 0; i < 7; i++) sampler_accept(s, h[i]);
    sampler_reset(s);
    float row[10] = {0};
    sampler_sample(s, row, NULL, NULL);
    for (int i = 0; i < 10; i++) ck_assert_float_eq(row[i], 0);
    sampler_free(s);
}
END_TEST

/* A made-up vocabulary's text for sampler_set_text. */
static const char *const test_pieces[10] = {"a", "b", "Us", "er", ":", "x", "U", "ser", "\n", "y"};

static const char *test_piece(const void *ctx, int32_t id, size_t *len) {
    (void)ctx;
    if (id < 0 || id >= 10) return NULL;
    *len = strlen(test_pieces[id]);
    return test_pieces[id];
}

/* The DRY penalty on token 5 after history h, with these breakers found in
 * the text of test_pieces. */
static float dry_penalty_with_text(const int32_t *h, int n, const char *const *breakers, int n_breakers) {
    gl_sampling_params p = params_default();
    p.temperature = 0;
    p.dry_multiplier = 0.8f;
    p.dry_breakers = breakers;
    p.n_dry_breakers = n_breakers;
    gl_sampler *s = sampler_create(&p, 10);
    ck_assert_ptr_nonnull(s);
    sampler_set_text(s, test_piece, NULL);
    for (int i = 0; i < n; i++) sampler_accept(s, h[i]);
    float row[10] = {0};
    sampler_sample(s, row, NULL, NULL);
    sampler_free(s);
    return -row[5];
}

/* "Us er : a b x Us er : a b": the text ends with "User:ab", which "x"
 * followed before (a run of 5 tokens). A "User:" breaker, spelled over three
 * tokens, ends the run at ":", leaving "a b" (run 2). */
START_TEST(test_dry_breakers_in_text) {
    const int32_t h[11] = {2, 3, 4, 0, 1, 5, 2, 3, 4, 0, 1};
    const float full = 0.8f * powf(1.75f, 3), cut = 0.8f;
    const char *const none[1] = {"zz"}, *const user[1] = {"User:"}, *const er[2] = {"q", "er:"};
    const char *const sr[1] = {"ser"}, *const nl[1] = {"\n"};
    ck_assert_float_eq_tol(dry_penalty_with_text(h, 11, none, 1), full, 1e-4);
    ck_assert_float_eq_tol(dry_penalty_with_text(h, 11, user, 1), cut, 1e-6);
    ck_assert_float_eq_tol(dry_penalty_with_text(h, 11, er, 2), cut, 1e-6);
    ck_assert_float_eq_tol(dry_penalty_with_text(h, 11, nl, 1), full, 1e-4);
    /* the same words spelled "U ser :": "ser" is inside one token */
    const int32_t h2[11] = {6, 7, 4, 0, 1, 5, 6, 7, 4, 0, 1};
    ck_assert_float_eq_tol(dry_penalty_with_text(h2, 11, user, 1), cut, 1e-6);
    ck_assert_float_eq_tol(dry_penalty_with_text(h2, 11, sr, 1), 0.8f * 1.75f, 1e-5); /* ends at "ser": ": a b" */
    /* a breaker the text never completes ("User" then "x") does not cut */
    const int32_t h3[11] = {2, 3, 5, 0, 1, 5, 2, 3, 5, 0, 1};
    ck_assert_float_eq_tol(dry_penalty_with_text(h3, 11, user, 1), full, 1e-4);
    /* the default breakers: token 8 ("\n") breaks */
    gl_sampling_params p = params_default();
    p.temperature = 0;
    p.dry_multiplier = 0.8f;
    gl_sampler *s = sampler_create(&p, 10);
    sampler_set_text(s, test_piece, NULL);
    const int32_t h4[11] = {8, 0, 1, 5, 9, 8, 0, 1, 5, 9, 8};
    for (int i = 0; i < 11; i++) sampler_accept(s, h4[i]);
    float row[10] = {0};
    sampler_sample(s, row, NULL, NULL);
    for (int i = 0; i < 10; i++) ck_assert_float_eq(row[i], 0); /* the run is empty after "\n" */
    sampler_free(s);
}
END_TEST

/* Every new sampler at once: the same seed gives the same tokens, another
 * seed others. */
START_TEST(test_llama_samplers_seeded) {
    enum { N = 300, STEPS = 400 };
    static float logits[N], work[N];
    random_logits(logits, N, 3);
    for (int mirostat = 0; mirostat <= 2; mirostat++) {
        gl_sampling_params p = params_default();
        p.typical_p = 0.95f;
        p.top_n_sigma = 3;
        p.xtc_probability = 0.5f;
        p.dynatemp_range = 0.3f;
        p.dry_multiplier = 0.5f;
        p.mirostat = mirostat;
        p.seed = 77;
        gl_sampler *a = sampler_create(&p, N), *b = sampler_create(&p, N);
        p.seed = 78;
        gl_sampler *c = sampler_create(&p, N);
        int n_diff = 0;
        for (int i = 0; i < STEPS; i++) {
            memcpy(work, logits, sizeof work);
            int32_t ta = sampler_sample(a, work, NULL, NULL);
            memcpy(work, logits, sizeof work);
            ck_assert_int_eq(ta, sampler_sample(b, work, NULL, NULL));
            memcpy(work, logits, sizeof work);
            n_diff += ta != sampler_sample(c, work, NULL, NULL);
            sampler_accept(a, ta);
            sampler_accept(b, ta);
            sampler_accept(c, ta);
        }
        ck_assert_int_gt(n_diff, STEPS / 10);
        sampler_free(a);
        sampler_free(b);
        sampler_free(c);
    }
}
END_TEST

static Suite *sampler_suite(void) {
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_greedy_argmax_and_ties);
    tcase_add_test(tc, test_argmax_matches_scan);
    tcase_add_test(tc, test_top_k_1_is_greedy);
    tcase_add_test(tc, test_top_p_tiny_keeps_max);
    tcase_add_test(tc, test_no_filter_keeps_all);
    tcase_add_test(tc, test_min_p_edges);
    tcase_add_test(tc, test_high_temperature_spreads);
    tcase_add_test(tc, test_seeded_reproducible);
    tcase_add_test(tc, test_distribution_matches_softmax);
    tcase_add_test(tc, test_truncations_by_hand);
    tcase_add_test(tc, test_matches_reference_pipeline);
    tcase_add_test(tc, test_nucleus_membership);
    tcase_add_test(tc, test_nucleus_with_ties);
    tcase_add_test(tc, test_large_vocab_sets);
    tcase_add_test(tc, test_logit_bias_bans_and_forces);
    tcase_add_test(tc, test_penalties);
    tcase_add_test(tc, test_penalty_window);
    tcase_add_test(tc, test_logprobs);
    tcase_add_test(tc, test_nan_and_inf);
    tcase_add_test(tc, test_llama_sampler_defaults);
    tcase_add_test(tc, test_typical_by_hand);
    tcase_add_test(tc, test_top_n_sigma_by_hand);
    tcase_add_test(tc, test_xtc_by_hand);
    tcase_add_test(tc, test_dynatemp_by_hand);
    tcase_add_test(tc, test_mirostat_1_first_k);
    tcase_add_test(tc, test_mirostat_2_by_hand);
    tcase_add_test(tc, test_mirostat_follows_tau);
    tcase_add_test(tc, test_dry_by_hand);
    tcase_add_test(tc, test_dry_breakers_in_text);
    tcase_add_test(tc, test_llama_samplers_seeded);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    int failed = test_run_suite(sampler_suite());
    return failed ? 1 : 0;
}
