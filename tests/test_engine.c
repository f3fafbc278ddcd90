/* test_engine.c -- the generation loop end to end on stories260K: greedy
 * reference continuations, stop conditions, cancellation, and batch
 * invariance under staggered arrivals and preemption. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genloop.h"
#include "testutil.h"

#define MAX_REQ 32
#define MAX_GEN 256

typedef struct req_out {
    int32_t tokens[MAX_GEN];
    int n_tokens;
    char text[4096];
    size_t text_len;
    bool finished;
    gl_finish_reason finish;
    int n_prompt_events;
    float first_prompt_logprob;
    int n_token_logprobs;     /* TOKEN events with a finite logprob <= 0 */
    int n_generated;
    int n_cached;
    int n_draft, n_accepted;
} req_out;

static req_out outs[MAX_REQ];

static void on_event(const gl_event *ev, void *ctx) {
    (void)ctx;
    req_out *o = ev->user;
    ck_assert_msg(!o->finished, "event after FINISHED");
    if (ev->text_len) {
        ck_assert_uint_lt(o->text_len + ev->text_len, sizeof o->text);
        memcpy(o->text + o->text_len, ev->text, ev->text_len);
        o->text_len += ev->text_len;
    }
    if (ev->type == GL_EVENT_PROMPT_TOKEN) {
        if (o->n_prompt_events == 0) o->first_prompt_logprob = ev->logprob;
        else ck_assert(ev->logprob <= 0 && isfinite(ev->logprob));
        o->n_prompt_events++;
    } else if (ev->type == GL_EVENT_TOKEN) {
        ck_assert_int_lt(o->n_tokens, MAX_GEN);
        o->tokens[o->n_tokens++] = ev->token;
        if (isfinite(ev->logprob) && ev->logprob <= 0) o->n_token_logprobs++;
        else ck_assert_msg(isnan(ev->logprob), "token logprob %g", ev->logprob);
    } else {
        o->finished = true;
        o->finish = ev->finish;
        o->n_generated = ev->n_generated;
        o->n_cached = ev->n_cached_tokens;
        o->n_draft = ev->n_draft_tokens;
        o->n_accepted = ev->n_accepted_tokens;
    }
}

static gl_model *model;
static cJSON *reference;
static int spec_mode;     /* engines made with speculative decoding (the "+ngram" and "+draft" cases) */
static char model_path[4096]; /* the draft model's file when spec_mode is GL_SPEC_DRAFT */

static void setup(void) {
    const char *path = testdata_path("models/stories260K.gguf");
    if (!path) exit(TEST_SKIP);
    snprintf(model_path, sizeof model_path, "%s", path); /* path is testdata_path's static buffer */
    gl_error err;
    model = gl_model_load(path, &err);
    ck_assert_msg(model != NULL, "%s", err.message);
    const char *ref_path = testdata_path("models/stories260K_greedy_llamacpp.json");
    FILE *f = fopen(ref_path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    reference = cJSON_Parse(buf);
    ck_assert_ptr_nonnull(reference);
    memset(outs, 0, sizeof outs);
    spec_mode = GL_SPEC_OFF;
}

static void setup_spec(void) {
    setup();
    spec_mode = GL_SPEC_NGRAM;
}

/* the model drafting for itself: every proposal the target's greedy choice */
static void setup_draft(void) {
    setup();
    spec_mode = GL_SPEC_DRAFT;
}

static void teardown(void) {
    gl_model_free(model);
    cJSON_Delete(reference);
}

static gl_kv_type kv_type = GL_KV_F16; /* of the engines make_engine creates */
static int prefill_first_tokens = 64;  /* theirs (the engine's default) */

static gl_engine *make_engine(int kv_tokens, int max_batch_tokens, int max_seqs) {
    gl_engine_params p;
    gl_engine_params_default(&p);
    p.kv_type = kv_type;
    p.n_threads = 2;
    p.kv_cache_tokens = kv_tokens;
    p.max_batch_tokens = max_batch_tokens;
    p.max_seqs = max_seqs;
    p.prefill_first_tokens = prefill_first_tokens;
    p.spec_mode = spec_mode;
    p.spec_ngram_min = 1; /* draft as often as possible: every path gets exercised */
    p.spec_fixed = true;
    p.spec_draft_model = model_path;
    /* a self-draft is always accepted: 8 tokens a step would finish the
     * staggered requests before enough overlap to preempt */
    if (spec_mode == GL_SPEC_DRAFT) p.spec_max_tokens = 2;
    gl_error err;
    gl_engine *e = gl_engine_create(model, &p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    return e;
}

static int json_ids(const cJSON *arr, int32_t *ids) {
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) ids[n++] = (int32_t)it->valueint;
    return n;
}

static gl_request greedy_request(const int32_t *prompt, int n_prompt, int max_tokens, req_out *out) {
    gl_request r = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = max_tokens, .user = out,
                    .prompt_logprobs = -1};
    gl_sampling_params_default(&r.sampling);
    r.sampling.temperature = 0;
    return r;
}

static void run_until_idle(gl_engine *e) {
    for (int guard = 0; guard < 100000; guard++)
        if (gl_engine_step(e, on_event, NULL) == 0) {
            gl_engine_stats st;
            gl_engine_get_stats(e, &st);
            if (st.n_running == 0 && st.n_waiting == 0) return;
        }
    ck_abort_msg("engine did not go idle");
}

static void assert_pool_empty(gl_engine *e) {
    gl_engine_stats st;
    gl_engine_get_stats(e, &st);
    ck_assert_int_eq(st.n_blocks_used, 0);
    ck_assert_int_eq(st.spec_draft_blocks_used, 0);
    ck_assert_int_eq(st.n_running, 0);
    ck_assert_int_eq(st.n_waiting, 0);
}

START_TEST(greedy_matches_reference) {
    gl_engine *e = make_engine(0, 512, 4);
    const cJSON *c;
    int i = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(reference, "cases")) {
        int32_t prompt[64], want[128];
        int n_prompt = json_ids(cJSON_GetObjectItem(c, "prompt_token_ids"), prompt);
        int n_want = json_ids(cJSON_GetObjectItem(c, "generated_token_ids"), want);
        /* the tokenizer gives the same prompt ids */
        int32_t *ids;
        gl_error err;
        const char *text = cJSON_GetObjectItem(c, "prompt")->valuestring;
        int n = gl_tokenize(model, text, strlen(text), GL_TOKENIZE_ADD_SPECIAL, &ids, &err);
        ck_assert_int_eq(n, n_prompt);
        ck_assert_mem_eq(ids, prompt, (size_t)n * sizeof *ids);
        free(ids);

        gl_request r = greedy_request(prompt, n_prompt, n_want, &outs[i]);
        r.ignore_eos = true;
        ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
        run_until_idle(e);
        ck_assert_int_eq(outs[i].n_tokens, n_want);
        ck_assert_mem_eq(outs[i].tokens, want, (size_t)n_want * sizeof *want);
        outs[i].text[outs[i].text_len] = 0;
        ck_assert_str_eq(outs[i].text, cJSON_GetObjectItem(c, "generated_text")->valuestring);
        ck_assert_int_eq(outs[i].finish, GL_FINISH_LENGTH);
        i++;
    }
    ck_assert_int_eq(i, 3);
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

/* 16 requests of mixed prompts arriving at staggered steps, in a pool so
 * small that some must be preempted: each output equals its solo run. */
static void check_batch_invariance(int kv_tokens, int max_batch_tokens) {
    gl_error err;
    const cJSON *cases = cJSON_GetObjectItem(reference, "cases");
    int32_t prompts[3][64], wants[3][128];
    int n_prompts[3];
    for (int c = 0; c < 3; c++) {
        const cJSON *cs = cJSON_GetArrayItem(cases, c);
        n_prompts[c] = json_ids(cJSON_GetObjectItem(cs, "prompt_token_ids"), prompts[c]);
        json_ids(cJSON_GetObjectItem(cs, "generated_token_ids"), wants[c]);
    }
    if (kv_type != GL_KV_F16) { /* another cache type: each prompt's own solo run is the reference */
        gl_engine *solo = make_engine(0, 512, 1);
        for (int c = 0; c < 3; c++) {
            req_out o = {0};
            gl_request r = greedy_request(prompts[c], n_prompts[c], 40, &o);
            r.ignore_eos = true;
            ck_assert(gl_engine_submit(solo, &r, NULL, &err) > 0);
            run_until_idle(solo);
            ck_assert_int_eq(o.n_tokens, 40);
            memcpy(wants[c], o.tokens, 40 * sizeof(int32_t));
        }
        gl_engine_free(solo);
    }
    gl_engine *e = make_engine(kv_tokens, max_batch_tokens, 16);
    int submitted = 0;
    for (int step = 0; step < 100000; step++) {
        if (submitted < 16 && step % 3 == 0) {
            int c = submitted % 3;
            /* vary lengths: a prompt extended by part of its own continuation */
            int extra = submitted % 5;
            int32_t prompt[128];
            memcpy(prompt, prompts[c], (size_t)n_prompts[c] * sizeof *prompt);
            memcpy(prompt + n_prompts[c], wants[c], (size_t)extra * sizeof *prompt);
            gl_request r = greedy_request(prompt, n_prompts[c] + extra, 40 - extra, &outs[submitted]);
            r.ignore_eos = true;
            ck_assert_msg(gl_engine_submit(e, &r, NULL, &err) > 0, "%s", err.message);
            submitted++;
        }
        int ran = gl_engine_step(e, on_event, NULL);
        gl_engine_stats st;
        gl_engine_get_stats(e, &st);
        ck_assert_int_le(st.n_blocks_used, st.n_blocks_total);
        if (submitted == 16 && ran == 0 && st.n_running == 0 && st.n_waiting == 0) break;
    }
    for (int i = 0; i < 16; i++) {
        int c = i % 3, extra = i % 5;
        ck_assert_msg(outs[i].finished, "request %d unfinished", i);
        ck_assert_int_eq(outs[i].n_tokens, 40 - extra);
        ck_assert_msg(memcmp(outs[i].tokens, wants[c] + extra, (size_t)(40 - extra) * sizeof(int32_t)) == 0,
                      "request %d differs from its solo run", i);
    }
    assert_pool_empty(e);
    gl_engine_stats st;
    gl_engine_get_stats(e, &st);
    if (kv_tokens <= 256) ck_assert_msg(st.n_preemptions > 0, "tiny pool did not preempt");
    gl_engine_free(e);
}

START_TEST(batch_invariance) { check_batch_invariance(4096, 512); }
END_TEST

START_TEST(batch_invariance_small_budget_and_preemption) { check_batch_invariance(160, 24); }
END_TEST

static int long_prompt(int case_index, int32_t prompt[70]);

/* The same with Q8_0 K/V (stories260K's head dim 8: one scale per head
 * row), against each prompt's solo run; then a prefix cache hit. */
START_TEST(q8_0_batch_invariance_preemption_prefix_cache) {
    kv_type = GL_KV_Q8_0;
    check_batch_invariance(4096, 512);
    memset(outs, 0, sizeof outs);
    check_batch_invariance(160, 24);
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[70];
    int n = long_prompt(0, prompt);
    gl_error err;
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < 2; i++) {
        gl_request r = greedy_request(prompt, n, 10, &outs[i]);
        r.ignore_eos = true;
        ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
        run_until_idle(e);
    }
    ck_assert_int_eq(outs[1].n_cached, 48);
    ck_assert_mem_eq(outs[0].tokens, outs[1].tokens, 10 * sizeof(int32_t));
    assert_pool_empty(e);
    gl_engine_free(e);
    kv_type = GL_KV_F16;
}
END_TEST

START_TEST(stop_string_and_max_tokens) {
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[] = {1, 403, 407, 261, 378};
    gl_request r = greedy_request(prompt, 5, 64, &outs[0]);
    const char *stops[] = {"Lily"};
    r.stop = stops;
    r.n_stop = 1;
    gl_error err;
    ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    r = greedy_request(prompt, 5, 5, &outs[1]);
    ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    run_until_idle(e);
    outs[0].text[outs[0].text_len] = 0;
    ck_assert_str_eq(outs[0].text, ", there was a little girl named ");
    ck_assert_int_eq(outs[0].finish, GL_FINISH_STOP);
    ck_assert_int_eq(outs[1].n_tokens, 5);
    ck_assert_int_eq(outs[1].finish, GL_FINISH_LENGTH);
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

START_TEST(context_limit_and_errors) {
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[200];
    for (int i = 0; i < 200; i++) prompt[i] = 300 + i % 100;
    prompt[0] = 1;
    gl_error err;
    bool full;
    gl_request r = greedy_request(prompt, 128, 10, &outs[0]);
    ck_assert(gl_engine_submit(e, &r, &full, &err) == 0);
    ck_assert(!full);
    ck_assert_ptr_nonnull(strstr(err.message, "context"));
    prompt[3] = 512; /* out of vocabulary */
    r = greedy_request(prompt, 10, 10, &outs[0]);
    ck_assert(gl_engine_submit(e, &r, &full, &err) == 0);
    prompt[3] = 300;
    /* max_tokens 0: up to the context (128 positions) */
    r = greedy_request(prompt, 100, 0, &outs[0]);
    r.ignore_eos = true;
    ck_assert(gl_engine_submit(e, &r, &full, &err) > 0);
    run_until_idle(e);
    ck_assert_int_eq(outs[0].n_tokens, 28);
    ck_assert_int_eq(outs[0].finish, GL_FINISH_LENGTH);
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

START_TEST(cancel_frees_within_a_step) {
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[] = {1, 403, 407, 261, 378};
    gl_request r = greedy_request(prompt, 5, 100, &outs[0]);
    r.ignore_eos = true;
    gl_error err;
    uint64_t id = gl_engine_submit(e, &r, NULL, &err);
    r.user = &outs[1];
    uint64_t id_waiting = gl_engine_submit(e, &r, NULL, &err);
    gl_engine_step(e, on_event, NULL);
    gl_engine_step(e, on_event, NULL);
    gl_engine_cancel(e, id);
    gl_engine_cancel(e, id_waiting);
    gl_engine_step(e, on_event, NULL);
    ck_assert(outs[0].finished && outs[1].finished);
    ck_assert_int_eq(outs[0].finish, GL_FINISH_CANCELLED);
    ck_assert_int_eq(outs[1].finish, GL_FINISH_CANCELLED);
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

START_TEST(queue_bound) {
    gl_engine_params p;
    gl_engine_params_default(&p);
    p.max_waiting = 2;
    p.n_threads = 1;
    gl_error err;
    gl_engine *e = gl_engine_create(model, &p, &err);
    int32_t prompt[] = {1, 403};
    bool full = false;
    for (int i = 0; i < 2; i++) {
        gl_request r = greedy_request(prompt, 2, 4, &outs[i]);
        ck_assert(gl_engine_submit(e, &r, &full, &err) > 0);
    }
    gl_request r = greedy_request(prompt, 2, 4, &outs[2]);
    ck_assert(gl_engine_submit(e, &r, &full, &err) == 0);
    ck_assert(full);
    run_until_idle(e);
    gl_engine_free(e);
}
END_TEST

/* activation_bits is 16, 12 or 8; anything else fails engine creation with a
 * message naming the setting and the value. */
START_TEST(activation_bits_validated) {
    static const int bad[] = {10, 0, -1, 7, 32};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gl_engine_params p;
        gl_engine_params_default(&p);
        p.n_threads = 1;
        p.activation_bits = bad[i];
        gl_error err = {{0}};
        ck_assert_ptr_null(gl_engine_create(model, &p, &err));
        char want[64];
        snprintf(want, sizeof want, "activation_bits must be 8, 12 or 16, got %d", bad[i]);
        ck_assert_str_eq(err.message, want);
    }
    gl_engine_params p;
    gl_engine_params_default(&p);
    ck_assert_int_eq(p.activation_bits, 12);
    p.n_threads = 1;
    p.activation_bits = 8;
    gl_error err;
    gl_engine *e = gl_engine_create(model, &p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    int32_t prompt[] = {1, 403, 407, 261, 378};
    gl_request r = greedy_request(prompt, 5, 4, &outs[0]);
    r.ignore_eos = true;
    ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    run_until_idle(e);
    ck_assert_int_eq(outs[0].n_tokens, 4);
    gl_engine_free(e);
}
END_TEST

START_TEST(seeded_sampling_reproducible) {
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[] = {1, 403, 407, 261, 378};
    gl_error err;
    for (int i = 0; i < 3; i++) {
        gl_request r = greedy_request(prompt, 5, 30, &outs[i]);
        r.sampling.temperature = 1.0f;
        r.sampling.seed = i < 2 ? 42 : 43;
        r.sampling.has_seed = true;
        r.ignore_eos = true;
        ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    }
    run_until_idle(e);
    ck_assert_int_eq(outs[0].n_tokens, 30);
    ck_assert_mem_eq(outs[0].tokens, outs[1].tokens, 30 * sizeof(int32_t));
    ck_assert(memcmp(outs[0].tokens, outs[2].tokens, 30 * sizeof(int32_t)) != 0);
    gl_engine_free(e);
}
END_TEST

START_TEST(prompt_logprobs) {
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[] = {1, 403, 407, 261, 378};
    gl_request r = greedy_request(prompt, 5, 2, &outs[0]);
    r.prompt_logprobs = 2;
    gl_error err;
    ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    run_until_idle(e);
    ck_assert_int_eq(outs[0].n_prompt_events, 5);
    ck_assert(isnan(outs[0].first_prompt_logprob));
    ck_assert_int_eq(outs[0].n_tokens, 2);
    ck_assert_int_eq(outs[0].n_token_logprobs, 0); /* not asked for: NAN, no softmax over the vocabulary */
    /* asked for: every generated token has one */
    memset(&outs[1], 0, sizeof outs[1]);
    gl_request r2 = greedy_request(prompt, 5, 3, &outs[1]);
    r2.sampling.logprobs = true;
    ck_assert(gl_engine_submit(e, &r2, NULL, &err) > 0);
    run_until_idle(e);
    ck_assert_int_eq(outs[1].n_token_logprobs, 3);
    gl_engine_free(e);
}
END_TEST

/* A 49-token prompt (three full 16-token blocks and one more token): a
 * reference case's prompt followed by the first 44 tokens of its answer. */
static int long_prompt(int case_index, int32_t prompt[70]) {
    const cJSON *cs = cJSON_GetArrayItem(cJSON_GetObjectItem(reference, "cases"), case_index);
    int n = json_ids(cJSON_GetObjectItem(cs, "prompt_token_ids"), prompt);
    return n + json_ids(cJSON_GetObjectItem(cs, "generated_token_ids"), prompt + n) - 20;
}

/* A repeated prompt reuses its cached blocks, and the output is unchanged. */
START_TEST(prefix_cache_hit) {
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[70];
    int n = long_prompt(0, prompt);
    gl_error err;
    for (int i = 0; i < 2; i++) {
        gl_request r = greedy_request(prompt, n, 10, &outs[i]);
        r.ignore_eos = true;
        ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
        run_until_idle(e);
    }
    ck_assert_int_eq(outs[0].n_cached, 0);
    ck_assert_int_eq(outs[1].n_cached, 48); /* 3 full blocks of 16 */
    ck_assert_mem_eq(outs[0].tokens, outs[1].tokens, 10 * sizeof(int32_t));
    gl_engine_stats st;
    gl_engine_get_stats(e, &st);
    ck_assert_uint_eq(st.prefix_queries, 2 * (uint64_t)n);
    ck_assert_uint_eq(st.prefix_hits, 48);
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

/* n > 1 completions of one prompt: the prompt is computed once, the other
 * requests wait a step for its blocks and share them. */
START_TEST(parallel_requests_share_prompt_blocks) {
    gl_engine *e = make_engine(0, 32, 8);
    int32_t prompt[70];
    int n = long_prompt(1, prompt);
    gl_error err;
    for (int i = 0; i < 4; i++) {
        gl_request r = greedy_request(prompt, n, 8, &outs[i]);
        r.ignore_eos = true;
        ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    }
    run_until_idle(e);
    ck_assert_int_eq(outs[0].n_cached, 0);
    for (int i = 1; i < 4; i++) {
        ck_assert_int_eq(outs[i].n_cached, 48);
        ck_assert_mem_eq(outs[0].tokens, outs[i].tokens, 8 * sizeof(int32_t));
    }
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

static void expect_step(gl_engine *e, int seqs, int tokens) {
    gl_engine_step(e, on_event, NULL);
    gl_engine_stats st;
    gl_engine_get_stats(e, &st);
    ck_assert_int_eq(st.last_batch_seqs, seqs);
    ck_assert_int_eq(st.last_batch_tokens, tokens);
}

/* Step plans for scripted arrivals: decode tokens first, the rest of the
 * budget to prompt chunks, first come first served, under max_seqs (with
 * short prompts first off). */
START_TEST(scheduler_step_plans) {
    prefill_first_tokens = 0; /* the plain rule; test_scheduler.c has short prompts first */
    gl_engine *e = make_engine(0, 8, 2);
    prefill_first_tokens = 64;
    int32_t a[5] = {1, 403, 407, 261, 378}, b[20], c[3] = {1, 291, 376};
    for (int i = 0; i < 20; i++) b[i] = 300 + i;
    gl_error err;
    gl_request r = greedy_request(a, 5, 30, &outs[0]);
    r.ignore_eos = true;
    ck_assert(gl_engine_submit(e, &r, NULL, &err));
    expect_step(e, 1, 5); /* A's whole prompt */
    expect_step(e, 1, 1); /* A decodes */
    r = greedy_request(b, 20, 30, &outs[1]);
    r.ignore_eos = true;
    ck_assert(gl_engine_submit(e, &r, NULL, &err));
    r = greedy_request(c, 3, 30, &outs[2]);
    ck_assert(gl_engine_submit(e, &r, NULL, &err));
    expect_step(e, 2, 8); /* A's token + 7 of B's prompt; C waits (max_seqs 2) */
    expect_step(e, 2, 8); /* 1 + 7 */
    expect_step(e, 2, 7); /* 1 + B's last 6 */
    expect_step(e, 2, 2); /* both decode */
    ck_assert_int_eq(outs[1].n_tokens, 2);
    ck_assert_int_eq(outs[2].n_tokens, 0);
    gl_engine_stats st;
    gl_engine_get_stats(e, &st);
    ck_assert_int_eq(st.n_waiting, 1);
    gl_engine_cancel(e, 1); /* A leaves: C is admitted in the same step */
    expect_step(e, 2, 4);   /* B's token + C's 3-token prompt */
    run_until_idle(e);
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

/* The checks above hold with drafts in flight; these make sure drafting
 * actually happened and that its counters, opt-out and cache are right. */
static void assert_drafted(const req_out *o) {
    ck_assert_msg(o->n_draft > 0, "nothing drafted");
    ck_assert_int_le(o->n_accepted, o->n_draft);
}

START_TEST(spec_drafts_counted_and_exact) {
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[] = {1, 403, 407, 261, 378};
    gl_error err;
    gl_request r = greedy_request(prompt, 5, 120, &outs[0]);
    r.ignore_eos = true;
    ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    r = greedy_request(prompt, 5, 120, &outs[1]);
    r.ignore_eos = true;
    r.no_speculation = true;
    ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    run_until_idle(e);
    assert_drafted(&outs[0]);
    ck_assert_msg(outs[0].n_accepted > 0, "nothing accepted");
    ck_assert_int_eq(outs[1].n_draft, 0); /* opted out */
    ck_assert_int_eq(outs[0].n_tokens, 120);
    ck_assert_mem_eq(outs[0].tokens, outs[1].tokens, 120 * sizeof(int32_t));
    gl_engine_stats st;
    gl_engine_get_stats(e, &st);
    ck_assert_uint_eq(st.spec_draft_tokens, (uint64_t)outs[0].n_draft);
    ck_assert_uint_eq(st.spec_accepted_tokens, (uint64_t)outs[0].n_accepted);
    uint64_t at = 0;
    for (int i = 0; i < GL_SPEC_MAX; i++) at += st.spec_accepted_at[i];
    ck_assert_uint_eq(at, st.spec_accepted_tokens);
    ck_assert_uint_gt(st.spec_drafts, 0);
    if (spec_mode == GL_SPEC_DRAFT) /* its own draft, 120 tokens with no stop: nothing rejected */
        ck_assert_int_eq(outs[0].n_accepted, outs[0].n_draft);
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

/* Seeded sampling draws once per generated token with or without drafts,
 * and a chunk's logits equal single steps', so the sampled output is the
 * same token for token. */
START_TEST(spec_sampling_same_as_without) {
    int on = spec_mode == GL_SPEC_DRAFT ? GL_SPEC_DRAFT : GL_SPEC_NGRAM;
    for (int mode = 0; mode < 2; mode++) {
        spec_mode = mode ? on : GL_SPEC_OFF;
        gl_engine *e = make_engine(0, 512, 8);
        int32_t prompt[] = {1, 403, 407, 261, 378};
        gl_error err;
        for (int i = 0; i < 4; i++) {
            gl_request r = greedy_request(prompt, 5, 120, &outs[4 * mode + i]);
            r.sampling.temperature = i < 2 ? 0.7f : 1.0f;
            r.sampling.top_k = i == 1 ? 20 : 0;
            r.sampling.repetition_penalty = i == 3 ? 1.1f : 1.0f;
            r.sampling.seed = 100 + (uint64_t)i;
            r.sampling.has_seed = true;
            r.sampling.logprobs = i == 2;
            r.sampling.n_logprobs = i == 2 ? 3 : 0;
            r.ignore_eos = true;
            ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
        }
        run_until_idle(e);
        assert_pool_empty(e);
        gl_engine_free(e);
    }
    int drafted = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(outs[i].n_tokens, 120);
        ck_assert_msg(memcmp(outs[i].tokens, outs[4 + i].tokens, 120 * sizeof(int32_t)) == 0,
                      "request %d: sampled output changed under speculation", i);
        drafted += outs[4 + i].n_draft;
    }
    ck_assert_int_eq(outs[6].n_token_logprobs, 120);
    ck_assert_int_gt(drafted, 0);
}
END_TEST

/* Prefix hashes cover accepted tokens only: a prompt made of an earlier
 * request's prompt and output reuses the blocks of its generated tokens
 * and continues exactly as the earlier request did. */
START_TEST(spec_prefix_cache_of_generated_blocks) {
    gl_engine *e = make_engine(0, 512, 4);
    int32_t prompt[] = {1, 403, 407, 261, 378};
    gl_error err;
    gl_request r = greedy_request(prompt, 5, 100, &outs[0]);
    r.ignore_eos = true;
    ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    run_until_idle(e);
    assert_drafted(&outs[0]);
    int32_t longer[128];
    memcpy(longer, prompt, sizeof prompt);
    memcpy(longer + 5, outs[0].tokens, 60 * sizeof(int32_t));
    r = greedy_request(longer, 65, 40, &outs[1]);
    r.ignore_eos = true;
    ck_assert(gl_engine_submit(e, &r, NULL, &err) > 0);
    run_until_idle(e);
    ck_assert_int_eq(outs[1].n_cached, 64);
    ck_assert_mem_eq(outs[1].tokens, outs[0].tokens + 60, 40 * sizeof(int32_t));
    assert_pool_empty(e);
    gl_engine_free(e);
}
END_TEST

START_TEST(spec_params_validated) {
    gl_engine_params p;
    gl_engine_params_default(&p);
    p.spec_mode = GL_SPEC_NGRAM;
    gl_error err;
    int bad[][3] = {{0, 1, 2}, {GL_SPEC_MAX + 1, 1, 2}, {4, 0, 2}, {4, 3, 2}};
    for (int i = 0; i < 4; i++) {
        p.spec_max_tokens = bad[i][0];
        p.spec_ngram_min = bad[i][1];
        p.spec_ngram_max = bad[i][2];
        ck_assert_ptr_null(gl_engine_create(model, &p, &err));
        ck_assert_msg(strstr(err.message, "speculative") != NULL, "%s", err.message);
    }
    p = (gl_engine_params){0};
    gl_engine_params_default(&p);
    p.spec_mode = 7;
    ck_assert_ptr_null(gl_engine_create(model, &p, &err));
}
END_TEST

START_TEST(spec_draft_needs_a_file) {
    gl_engine_params p;
    gl_engine_params_default(&p);
    p.spec_mode = GL_SPEC_DRAFT;
    gl_error err;
    ck_assert_ptr_null(gl_engine_create(model, &p, &err));
    ck_assert_msg(strstr(err.message, "--model-draft") != NULL, "%s", err.message);
    p.spec_draft_model = "/nonexistent/draft.gguf";
    ck_assert_ptr_null(gl_engine_create(model, &p, &err));
    ck_assert_msg(strstr(err.message, "nonexistent") != NULL, "%s", err.message);
}
END_TEST

int main(void) {
    if (!testdata_path("models/stories260K.gguf")) {
        printf("SKIP: shared test data not found\n");
        return TEST_SKIP;
    }
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("stories260K");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, greedy_matches_reference);
    tcase_add_test(tc, batch_invariance);
    tcase_add_test(tc, batch_invariance_small_budget_and_preemption);
    tcase_add_test(tc, q8_0_batch_invariance_preemption_prefix_cache);
    tcase_add_test(tc, stop_string_and_max_tokens);
    tcase_add_test(tc, context_limit_and_errors);
    tcase_add_test(tc, cancel_frees_within_a_step);
    tcase_add_test(tc, queue_bound);
    tcase_add_test(tc, activation_bits_validated);
    tcase_add_test(tc, seeded_sampling_reproducible);
    tcase_add_test(tc, prompt_logprobs);
    tcase_add_test(tc, prefix_cache_hit);
    tcase_add_test(tc, scheduler_step_plans);
    tcase_add_test(tc, parallel_requests_share_prompt_blocks);
    suite_add_tcase(s, tc);
    /* the same checks with n-gram drafts in flight */
    TCase *ts = tcase_create("stories260K+ngram");
    tcase_add_checked_fixture(ts, setup_spec, teardown);
    tcase_set_timeout(ts, 600);
    tcase_add_test(ts, greedy_matches_reference);
    tcase_add_test(ts, batch_invariance);
    tcase_add_test(ts, batch_invariance_small_budget_and_preemption);
    tcase_add_test(ts, stop_string_and_max_tokens);
    tcase_add_test(ts, cancel_frees_within_a_step);
    tcase_add_test(ts, seeded_sampling_reproducible);
    tcase_add_test(ts, prompt_logprobs);
    tcase_add_test(ts, prefix_cache_hit);
    tcase_add_test(ts, parallel_requests_share_prompt_blocks);
    tcase_add_test(ts, spec_drafts_counted_and_exact);
    tcase_add_test(ts, spec_sampling_same_as_without);
    tcase_add_test(ts, spec_prefix_cache_of_generated_blocks);
    tcase_add_test(ts, spec_params_validated);
    suite_add_tcase(s, ts);
    /* and with the model as its own draft model */
    TCase *td = tcase_create("stories260K+draft");
    tcase_add_checked_fixture(td, setup_draft, teardown);
    tcase_set_timeout(td, 600);
    tcase_add_test(td, greedy_matches_reference);
    tcase_add_test(td, batch_invariance);
    tcase_add_test(td, batch_invariance_small_budget_and_preemption);
    tcase_add_test(td, stop_string_and_max_tokens);
    tcase_add_test(td, cancel_frees_within_a_step);
    tcase_add_test(td, seeded_sampling_reproducible);
    tcase_add_test(td, prompt_logprobs);
    tcase_add_test(td, prefix_cache_hit);
    tcase_add_test(td, parallel_requests_share_prompt_blocks);
    tcase_add_test(td, spec_drafts_counted_and_exact);
    tcase_add_test(td, spec_sampling_same_as_without);
    tcase_add_test(td, spec_draft_needs_a_file);
    suite_add_tcase(s, td);
    int failed = test_run_suite(s);
    return failed ? 1 : 0;
}
