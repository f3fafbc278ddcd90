/* test_server_params.c -- the server's request-field validation and JSON
 * writer, linked from the server library with no model and no socket. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jbuf.h"
#include "params.h"
#include "testutil.h"
#include "tools.h"
#include "utf8.h"

static int parse(const char *json, params_generation *g, params_error *e) {
    cJSON *body = cJSON_Parse(json);
    ck_assert_ptr_nonnull(body);
    memset(e, 0, sizeof *e);
    int rc = params_generation_parse(body, NULL, 4, "max_tokens", 100, g, e);
    cJSON_Delete(body);
    return rc;
}

START_TEST(test_defaults_and_fields) {
    params_generation g;
    params_error e;
    ck_assert_int_eq(parse("{}", &g, &e), 0);
    ck_assert_int_eq(g.max_tokens, 16);
    ck_assert_int_eq(g.n, 1);
    ck_assert_float_eq(g.sampling.temperature, 1.0f);
    ck_assert(!g.stream);
    params_generation_free(&g);

    ck_assert_int_eq(parse("{\"temperature\":0,\"max_tokens\":7,\"n\":3,\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true},\"stop\":[\"a\",\"bc\"],\"seed\":5}",
                           &g, &e), 0);
    ck_assert_float_eq(g.sampling.temperature, 0.0f);
    ck_assert_int_eq(g.max_tokens, 7);
    ck_assert_int_eq(g.n, 3);
    ck_assert(g.stream && g.include_usage);
    ck_assert_int_eq(g.n_stop, 2);
    ck_assert_str_eq(g.stop[1], "bc");
    ck_assert(g.sampling.has_seed);
    ck_assert_uint_eq(g.sampling.seed, 5);
    params_generation_free(&g);
}
END_TEST

START_TEST(test_errors_name_the_field) {
    static const struct { const char *json, *param; } cases[] = {
        {"{\"temperature\":3}", "temperature"},
        {"{\"max_tokens\":101}", "max_tokens"},
        {"{\"n\":5}", "n"},
        {"{\"stream\":1}", "stream"},
        {"{\"stream_options\":{\"include_usage\":true}}", "stream_options"},
        {"{\"seed\":1.5}", "seed"},
        {"{\"top_p\":1e-50}", "top_p"},   /* > 0 as a double, 0 as the float it is kept in */
        {"{\"repetition_penalty\":1e-300}", "repetition_penalty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        params_generation g;
        params_error e;
        ck_assert_int_eq(parse(cases[i].json, &g, &e), -1);
        ck_assert_int_eq(e.status, 400);
        ck_assert_str_eq(e.param, cases[i].param);
        ck_assert(e.message[0] != '\0');
        params_generation_free(&g);
    }
}
END_TEST

/* llama.cpp's samplers: llama.cpp's defaults when absent, each field read
 * into the sampling params, the breakers owned by the parse result. */
START_TEST(test_llama_samplers) {
    params_generation g;
    params_error e;
    ck_assert_int_eq(parse("{}", &g, &e), 0);
    ck_assert_float_eq(g.sampling.typical_p, 1.0f);
    ck_assert_float_eq(g.sampling.top_n_sigma, -1.0f);
    ck_assert_int_eq(g.sampling.mirostat, 0);
    ck_assert_float_eq(g.sampling.dry_multiplier, 0.0f);
    ck_assert_int_eq(g.sampling.dry_penalty_last_n, -1);
    ck_assert_int_eq(g.sampling.n_dry_breakers, 4);
    params_generation_free(&g);

    ck_assert_int_eq(parse("{\"typical_p\":0.5,\"top_n_sigma\":2,\"xtc_probability\":1,\"xtc_threshold\":0.2,"
                           "\"dynatemp_range\":0.3,\"dynatemp_exponent\":2,\"mirostat\":2,\"mirostat_tau\":3,"
                           "\"mirostat_eta\":0.2,\"dry_multiplier\":0.8,\"dry_base\":2,\"dry_allowed_length\":3,"
                           "\"dry_penalty_last_n\":64,\"dry_sequence_breakers\":[\"\\n\",\"User:\"]}",
                           &g, &e), 0);
    const gl_sampling_params *sp = &g.sampling;
    ck_assert_float_eq(sp->typical_p, 0.5f);
    ck_assert_float_eq(sp->top_n_sigma, 2.0f);
    ck_assert_float_eq(sp->xtc_probability, 1.0f);
    ck_assert_float_eq(sp->xtc_threshold, 0.2f);
    ck_assert_float_eq(sp->dynatemp_range, 0.3f);
    ck_assert_float_eq(sp->dynatemp_exponent, 2.0f);
    ck_assert_int_eq(sp->mirostat, 2);
    ck_assert_float_eq(sp->mirostat_tau, 3.0f);
    ck_assert_float_eq(sp->mirostat_eta, 0.2f);
    ck_assert_float_eq(sp->dry_multiplier, 0.8f);
    ck_assert_float_eq(sp->dry_base, 2.0f);
    ck_assert_int_eq(sp->dry_allowed_length, 3);
    ck_assert_int_eq(sp->dry_penalty_last_n, 64);
    ck_assert_int_eq(sp->n_dry_breakers, 2);
    ck_assert_str_eq(sp->dry_breakers[0], "\n");
    ck_assert_str_eq(sp->dry_breakers[1], "User:");
    params_generation_free(&g);

    static const struct { const char *json, *param; } bad[] = {
        {"{\"typical_p\":1.5}", "typical_p"},
        {"{\"mirostat\":3}", "mirostat"},
        {"{\"mirostat\":1.5}", "mirostat"},
        {"{\"dry_base\":0.5}", "dry_base"},
        {"{\"dry_penalty_last_n\":-2}", "dry_penalty_last_n"},
        {"{\"dry_sequence_breakers\":[]}", "dry_sequence_breakers"},
        {"{\"dry_sequence_breakers\":[\"a\",\"\"]}", "dry_sequence_breakers"},   /* frees the "a" it kept */
        {"{\"dry_sequence_breakers\":\"\\n\"}", "dry_sequence_breakers"},
        {"{\"xtc_threshold\":-0.1}", "xtc_threshold"},
        {"{\"top_n_sigma\":-2}", "top_n_sigma"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse(bad[i].json, &g, &e), -1);
        ck_assert_int_eq(e.status, 400);
        ck_assert_str_eq(e.param, bad[i].param);
        params_generation_free(&g);
    }
}
END_TEST

START_TEST(test_unknown_key) {
    static const char *const allowed[] = {"model", "prompt", NULL};
    cJSON *body = cJSON_Parse("{\"model\":\"m\",\"promt\":\"x\"}");
    params_error e = {0};
    ck_assert_int_eq(params_check_keys(body, allowed, &e), -1);
    ck_assert_str_eq(e.param, "promt");
    cJSON_Delete(body);
}
END_TEST

START_TEST(test_utf8_and_nul) {
    ck_assert(params_utf8_valid("h\xc3\xa9", 3));
    ck_assert(!params_utf8_valid("\xc0\xaf", 2));     /* overlong */
    ck_assert(!params_utf8_valid("\xed\xa0\x80", 3)); /* surrogate */
    ck_assert(params_json_has_nul("\"a\\u0000b\"", 10));
    ck_assert(!params_json_has_nul("\"a\\\\u0000b\"", 11)); /* an escaped backslash, then text */
}
END_TEST

START_TEST(test_jbuf_json) {
    jbuf b = {0};
    jbuf_str(&b, "a\"\n\xff", 4);
    jbuf_raw(&b, ",", 1);
    jbuf_num(&b, INFINITY);
    ck_assert_str_eq(b.data, "\"a\\\"\\n\xef\xbf\xbd\",null");
    ck_assert(!b.oom);
    jbuf_free(&b);
}
END_TEST

START_TEST(test_utf8_cut_and_clean) {
    const char *euro = "aaa\xe2\x82\xac";                    /* "aaa" + U+20AC, 6 bytes */
    ck_assert_uint_eq(utf8_cut(euro, 4), 3);                   /* not inside the euro sign */
    ck_assert_uint_eq(utf8_cut(euro, 6), 6);
    ck_assert_uint_eq(utf8_cut(euro, 100), 6);
    char out[8];
    utf8_clean(out, sizeof out, "m\xff", 2);
    ck_assert_str_eq(out, "m\xef\xbf\xbd");
    utf8_clean(out, 6, euro, 6);                               /* room for 5 bytes: the euro sign goes */
    ck_assert_str_eq(out, "aaa");
    params_error e;
    params_fail(&e, 400, "\xff", NULL, "key '%.*s' bad", (int)utf8_cut(euro, 5), euro);
    ck_assert_str_eq(e.param, "\xef\xbf\xbd");
    ck_assert_str_eq(e.message, "key 'aaa' bad");
}
END_TEST

/* ---- tool-call replies read as they are generated ---- */

typedef struct reader_log {
    jbuf b;                  /* the events as text: |call I NAME|, argument bytes, |end I| */
} reader_log;

static void log_call(void *c, int i, const char *name) { jbuf_printf(&((reader_log *)c)->b, "|call %d %s|", i, name); }
static void log_args(void *c, int i, const char *p, size_t n) {
    (void)i;
    jbuf_raw(&((reader_log *)c)->b, p, n);
}
static void log_end(void *c, int i) { jbuf_printf(&((reader_log *)c)->b, "|end %d|", i); }

START_TEST(test_tools_reader_pieces) {
    static const tools_reader_ops ops = {log_call, log_args, log_end};
    const char *reply =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par is\\\" }\",\n  \"days\": [1, {\"a\": 2}]}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"n\\\"q\", \"arguments\": 42}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"s\", \"arguments\": \"x}\"}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"cut\", \"arguments\": {\"a\": \"unfinish";
    const char *want = "|call 0 get_weather|{\"city\":\"Par is\\\" }\",\"days\":[1,{\"a\":2}]}|end 0|"
                       "|call 1 n\"q|42|end 1||call 2 s|\"x}\"|end 2||call 3 cut|{\"a\":\"unfinish";
    size_t len = strlen(reply);
    /* whole, and grown a few bytes at a time: the same events */
    for (size_t step = 0; step <= 3; step++) {
        reader_log log = {0};
        tools_reader r = {0};
        if (step > 0)
            for (size_t n = 1; n <= len; n += step) tools_reader_feed(&r, reply, n, &ops, &log);
        tools_reader_feed(&r, reply, len, &ops, &log);
        jbuf_raw(&log.b, "", 1);
        ck_assert_str_eq(log.b.data, want);
        jbuf_free(&log.b);
    }
    int n = 0;
    tool_call *calls = tools_extract(reply, len, &n);
    ck_assert_int_eq(n, 3); /* the cut call is left out */
    ck_assert_str_eq(calls[0].name, "get_weather");
    ck_assert_str_eq(calls[0].arguments, "{\"city\":\"Par is\\\" }\",\"days\":[1,{\"a\":2}]}");
    ck_assert_str_eq(calls[1].name, "n\"q");
    ck_assert_str_eq(calls[1].arguments, "42");
    ck_assert_str_eq(calls[2].arguments, "\"x}\"");
    tools_calls_free(calls, n);
    /* text that is not a call yields nothing */
    calls = tools_extract("<tool_cal", 9, &n);
    ck_assert_int_eq(n, 0);
    free(calls);
    calls = tools_extract("<b>hello</b>", 12, &n);
    ck_assert_int_eq(n, 0);
    free(calls);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_defaults_and_fields, test_errors_name_the_field, test_llama_samplers, test_unknown_key,
                            test_utf8_and_nul, test_jbuf_json, test_utf8_cut_and_clean,
                            test_tools_reader_pieces};
    return test_run_tests("server_params", tests, (int)(sizeof tests / sizeof tests[0])) ? 1 : 0;
}
