/* test_request.c -- the request record (request.h) with no model: what
 * request_create builds and seq_free / request_free give back (run under
 * AddressSanitizer: no leak on any path), the constraint stage and the
 * stop rule. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "request.h"
#include "sampler.h"
#include "textstream.h"
#include "testutil.h"

#define N_VOCAB 4
static const char *const pieces[N_VOCAB] = {"a", "b", "</s>", "c"};
static const size_t lens[N_VOCAB] = {1, 1, 0, 1};
static const bool eog[N_VOCAB] = {false, false, true, false};
static const int32_t eog_ids[] = {2};

static gl_request base_request(const int32_t *prompt, int n) {
    gl_request req;
    memset(&req, 0, sizeof req);
    req.prompt = prompt;
    req.n_prompt = n;
    gl_sampling_params_default(&req.sampling);
    req.prompt_logprobs = -1;
    return req;
}

START_TEST(test_create_free) {
    int32_t prompt[] = {0, 1, 0};
    const char *stop[] = {"cc"};
    gl_request req = base_request(prompt, 3);
    req.n_stop = 1;
    req.stop = stop;
    req.min_tokens = 2;
    req.user = &req;
    gl_error err;
    gl_seq *s = request_create(&req, 10, 4, N_VOCAB, NULL, NULL, NULL, &err);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(s->n_prompt, 3);
    ck_assert_int_eq(s->n_tokens, 3);
    ck_assert_int_eq(s->cap_tokens, 10);
    ck_assert_int_eq(s->max_generated, 7);
    ck_assert_int_eq(s->min_tokens, 2);
    ck_assert_ptr_eq(s->user, &req);
    ck_assert_ptr_nonnull(s->sampler);
    ck_assert_ptr_nonnull(s->text);
    ck_assert_ptr_null(s->grammar);
    ck_assert_int_eq(s->spec.len, 0); /* no speculation */
    ck_assert_int_eq(s->progress_sent, -1);
    ck_assert_int_eq(s->prompt_logprobs, -1);
    request_free(NULL, NULL, s);
    request_free(NULL, NULL, NULL);
    seq_free(NULL, NULL);
}
END_TEST

START_TEST(test_create_with_grammar) {
    gl_error err;
    const char *text = "root ::= \"a\" \"b\"";
    gr_grammar *g = gr_compile(text, strlen(text), &err);
    ck_assert_ptr_nonnull(g);
    gr_vocab *v = gr_vocab_create(N_VOCAB, pieces, lens, eog);
    ck_assert_ptr_nonnull(v);
    int32_t prompt[] = {3};
    gl_request req = base_request(prompt, 1);
    req.grammar = g;
    gl_seq *s = request_create(&req, 8, 4, N_VOCAB, v, NULL, NULL, &err);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(s->grammar);

    /* the constraint stage: only "a" may start */
    float row[N_VOCAB] = {1, 2, 3, 4};
    int32_t forced;
    ck_assert_ptr_null(request_constrain(s, row, eog_ids, 1, &forced));
    ck_assert(isfinite(row[0]));
    ck_assert(!isfinite(row[1]) && !isfinite(row[2]) && !isfinite(row[3]));
    /* the stop rule: the end-of-generation token ends a grammar's request
     * even with ignore_eos; the grammar done ends it after "a" "b" */
    s->ignore_eos = true;
    ck_assert_int_eq(request_stop(s, true, false, false), GL_FINISH_STOP);
    ck_assert(gr_matcher_accept_token(s->grammar, 0));
    ck_assert_int_eq(request_stop(s, false, true, false), GL_FINISH_NONE);
    ck_assert(gr_matcher_accept_token(s->grammar, 1));
    ck_assert_int_eq(request_stop(s, false, true, false), GL_FINISH_STOP);
    seq_free(NULL, s);
    gr_vocab_free(v);
    gr_release(g);
}
END_TEST

START_TEST(test_constrain_and_stop) {
    int32_t prompt[] = {0, 1};
    gl_request req = base_request(prompt, 2);
    req.min_tokens = 1;
    gl_error err;
    gl_seq *s = request_create(&req, 4, 4, N_VOCAB, NULL, NULL, NULL, &err);
    ck_assert_ptr_nonnull(s);
    float row[N_VOCAB] = {1, 2, 3, 4};
    int32_t forced;
    /* below min_tokens the end-of-generation token is banned, then not */
    ck_assert_ptr_null(request_constrain(s, row, eog_ids, 1, &forced));
    ck_assert(isinf(row[2]) && row[2] < 0);
    ck_assert_float_eq(row[3], 4);
    s->n_generated = 1;
    row[2] = 3;
    ck_assert_ptr_null(request_constrain(s, row, eog_ids, 1, &forced));
    ck_assert_float_eq(row[2], 3);
    /* end of generation before appending, unless ignored */
    ck_assert_int_eq(request_stop(s, true, false, false), GL_FINISH_STOP);
    ck_assert_int_eq(request_stop(s, false, false, false), GL_FINISH_NONE);
    s->ignore_eos = true;
    ck_assert_int_eq(request_stop(s, true, false, false), GL_FINISH_NONE);
    /* after: a stop string, then the length limits */
    ck_assert_int_eq(request_stop(s, false, true, true), GL_FINISH_STOP);
    s->n_tokens = 3;
    ck_assert_int_eq(request_stop(s, false, true, false), GL_FINISH_NONE);
    s->n_tokens = 4; /* cap_tokens */
    ck_assert_int_eq(request_stop(s, false, true, false), GL_FINISH_LENGTH);
    s->n_tokens = 3;
    s->n_generated = s->max_generated;
    ck_assert_int_eq(request_stop(s, false, true, false), GL_FINISH_LENGTH);
    seq_free(NULL, s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("request");
    TCase *tc = tcase_create("record");
    tcase_add_test(tc, test_create_free);
    tcase_add_test(tc, test_create_with_grammar);
    tcase_add_test(tc, test_constrain_and_stop);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
