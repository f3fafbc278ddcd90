/* fuzz_request.c -- request-body parsing and validation of the completion
 * endpoints, over arbitrary bytes.
 *
 * The server's whole request parser (parse_request in api_completions.c) is
 * static and needs an api_server, so this drives the callable units it is
 * built from, in the same order: cJSON_ParseWithLength, params_check_keys,
 * params_generation_parse (max_tokens, default limits, as completions) and
 * params_generation_parse_limits (max_completion_tokens, tight limits, as
 * chat with a configured server), the logprobs/echo getters, then
 * the prompt the way /v1/completions reads it (UTF-8 check, tokenize with
 * specials, detokenize; token-id arrays range-checked and detokenized).
 * Every string and number in the body is also written back with the jbuf
 * JSON writers and must parse again as the same value.
 *
 * Checks beyond "no crash": an accepted request's fields are all in their
 * documented ranges; a rejected one names a status and a message;
 * params_utf8_valid agrees with an independent UTF-8 check and with the
 * tokenizer. The model (stories260K) loads once. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "genloop.h"
#include "jbuf.h"
#include "params.h"

#define MAX_N 4
#define MAX_TOKENS_CAP 2048

static gl_model *model;
static int n_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    char *path = fuzz_testdata("models/stories260K.gguf");
    if (!path) fuzz_die("models/stories260K.gguf not found (set GENLOOP_TESTDATA)");
    gl_error err = {{0}};
    model = gl_model_load(path, &err);
    if (!model) fuzz_die("%s", err.message);
    n_vocab = gl_model_get_info(model)->n_vocab;
    free(path);
    return 0;
}

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "fuzz_request: check failed: %s (line %d)\n", #cond, __LINE__); abort(); } } while (0)

static void check_error(const params_error *e) {
    CHECK(e->status == 400 || e->status == 404 || e->status == 500);
    CHECK(e->type && e->type[0]);
    CHECK(e->message[0]);
    CHECK(memchr(e->param, 0, sizeof e->param));
    CHECK(memchr(e->message, 0, sizeof e->message));
    /* they quote request bytes and go back to the client in JSON */
    CHECK(fuzz_utf8_valid(e->param, strlen(e->param)));
    CHECK(fuzz_utf8_valid(e->message, strlen(e->message)));
}

/* lim NULL: params_generation_parse with its default limits (4 stops of
 * 256 bytes, 1024 biases). */
static void check_generation(const cJSON *body, const char *max_key, const params_limits *lim) {
    params_generation g;
    params_error e;
    memset(&e, 0, sizeof e);
    int rc = lim ? params_generation_parse_limits(body, model, lim, max_key, &g, &e)
                 : params_generation_parse(body, model, MAX_N, max_key, MAX_TOKENS_CAP, &g, &e);
    int max_stop = lim ? lim->max_stop : 4, max_stop_bytes = lim ? lim->max_stop_bytes : 256;
    int max_bias = lim ? lim->max_logit_bias : 1024, max_n = lim ? lim->max_n : MAX_N;
    int max_tokens = lim ? lim->max_tokens : MAX_TOKENS_CAP;
    if (rc) {
        check_error(&e);
        params_generation_free(&g);
        return;
    }
    const gl_sampling_params *s = &g.sampling;
    CHECK(s->temperature >= 0 && s->temperature <= 2);
    CHECK(s->top_p > 0 && s->top_p <= 1);
    CHECK(s->top_k >= 0);
    CHECK(s->min_p >= 0 && s->min_p <= 1);
    CHECK(s->repetition_penalty > 0 && s->repetition_penalty <= 10);
    CHECK(fabsf(s->presence_penalty) <= 2 && fabsf(s->frequency_penalty) <= 2);
    CHECK(g.n >= 1 && g.n <= max_n);
    CHECK(g.max_tokens >= 0 && g.max_tokens <= max_tokens);
    CHECK(g.n_stop >= 0 && g.n_stop <= max_stop && g.n_stop <= PARAMS_MAX_STOP);
    for (int i = 0; i < g.n_stop; i++) {
        CHECK(g.stop[i] && g.stop[i][0]);
        CHECK(strlen(g.stop[i]) <= (size_t)max_stop_bytes);
        CHECK(fuzz_utf8_valid(g.stop[i], strlen(g.stop[i])));
    }
    CHECK(!g.include_usage || g.stream);
    CHECK(s->typical_p >= 0 && s->typical_p <= 1 && s->top_n_sigma >= -1 && s->top_n_sigma <= 1000);
    CHECK(s->xtc_probability >= 0 && s->xtc_probability <= 1 && s->xtc_threshold >= 0 && s->xtc_threshold <= 1);
    CHECK(s->dynatemp_range >= 0 && s->dynatemp_range <= 2);
    CHECK(s->dynatemp_exponent >= 0 && s->dynatemp_exponent <= 100);
    CHECK(s->mirostat >= 0 && s->mirostat <= 2 && s->mirostat_tau >= 0 && s->mirostat_tau <= 100);
    CHECK(s->mirostat_eta >= 0 && s->mirostat_eta <= 1);
    CHECK(s->dry_multiplier >= 0 && s->dry_multiplier <= 100 && s->dry_base >= 1 && s->dry_base <= 100);
    CHECK(s->dry_allowed_length >= 0 && s->dry_penalty_last_n >= -1);
    CHECK(s->n_dry_breakers >= 1 && s->n_dry_breakers <= PARAMS_MAX_DRY_BREAKERS);
    for (int i = 0; i < s->n_dry_breakers; i++) {
        size_t len = strlen(s->dry_breakers[i]);
        CHECK(len >= 1 && len <= PARAMS_MAX_DRY_BREAKER_BYTES && fuzz_utf8_valid(s->dry_breakers[i], len));
    }
    CHECK(s->n_logit_bias >= 0 && s->n_logit_bias <= max_bias);
    CHECK(s->n_logit_bias == 0 || s->logit_bias == g.bias);
    for (int i = 0; i < s->n_logit_bias; i++) {
        CHECK(s->logit_bias[i].token >= 0 && s->logit_bias[i].token < n_vocab);
        CHECK(fabsf(s->logit_bias[i].bias) <= 100);
    }
    params_generation_free(&g);
}

static void check_text_prompt(const char *text) {
    size_t len = strlen(text);
    int valid = params_utf8_valid(text, len);
    CHECK(valid == fuzz_utf8_valid(text, len));
    gl_error err = {{0}};
    int32_t *ids = NULL;
    int n = gl_tokenize(model, text, len, GL_TOKENIZE_ADD_SPECIAL | GL_TOKENIZE_PARSE_SPECIAL, &ids, &err);
    CHECK((n >= 0) == valid); /* the tokenizer refuses exactly what the server refuses */
    if (n > 0) {
        char *back = gl_detokenize(model, ids, (size_t)n, &err);
        CHECK(back);
        free(back);
    }
    free(ids);
}

static void check_id_prompt(const cJSON *arr) {
    int n = cJSON_GetArraySize(arr), k = 0, ok = 1;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (const cJSON *t = arr->child; t; t = t->next) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
            t->valuedouble < 0 || t->valuedouble >= n_vocab) { ok = 0; break; }
        ids[k++] = (int32_t)t->valuedouble;
    }
    if (ok && k > 0) {
        gl_error err = {{0}};
        char *text = gl_detokenize(model, ids, (size_t)k, &err);
        CHECK(text);
        free(text);
    }
    free(ids);
}

static void check_prompt(const cJSON *prompt) {
    if (cJSON_IsString(prompt)) { check_text_prompt(prompt->valuestring); return; }
    if (!cJSON_IsArray(prompt)) return;
    if (prompt->child && cJSON_IsNumber(prompt->child)) { check_id_prompt(prompt); return; }
    int i = 0;
    for (const cJSON *item = prompt->child; item && i < 256; item = item->next, i++) {
        if (cJSON_IsString(item)) check_text_prompt(item->valuestring);
        else if (cJSON_IsArray(item)) check_id_prompt(item);
    }
}

/* What the response writers make of the request's strings and numbers must
 * be JSON again: strings come back equal when they were valid UTF-8. */
static void check_writers(const cJSON *v, int depth) {
    if (depth > 32) return;
    jbuf b = {0};
    if (cJSON_IsString(v)) {
        size_t len = strlen(v->valuestring);
        jbuf_str(&b, v->valuestring, len);
        CHECK(!b.oom && b.data);
        cJSON *back = cJSON_ParseWithLength(b.data, b.len);
        CHECK(cJSON_IsString(back));
        if (fuzz_utf8_valid(v->valuestring, len)) CHECK(!strcmp(back->valuestring, v->valuestring));
        cJSON_Delete(back);
    } else if (cJSON_IsNumber(v)) {
        jbuf_num(&b, v->valuedouble);
        CHECK(!b.oom && b.data);
        cJSON *back = cJSON_ParseWithLength(b.data, b.len);
        CHECK(back && (cJSON_IsNumber(back) || cJSON_IsNull(back)));
        cJSON_Delete(back);
    }
    jbuf_free(&b);
    for (const cJSON *c = v->child; c; c = c->next) check_writers(c, depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const completion_keys[] = {
        "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
        "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "seed",
        "user", "best_of", "suffix", "top_k", "min_p", "repetition_penalty", NULL };
    cJSON *body = cJSON_ParseWithLength((const char *)data, size);
    if (!body) return 0;
    check_writers(body, 0);
    if (!cJSON_IsObject(body)) { cJSON_Delete(body); return 0; }
    params_error e;
    memset(&e, 0, sizeof e);
    if (params_check_keys(body, completion_keys, &e)) check_error(&e);
    /* Completions with the default limits; chat's field name with tight
     * server limits, so the limit paths are reached by small inputs. */
    static const params_limits tight = { .max_n = 2, .max_tokens = 64, .max_stop = 2,
                                         .max_stop_bytes = 8, .max_logit_bias = 3 };
    check_generation(body, "max_tokens", NULL);
    check_generation(body, "max_completion_tokens", &tight);
    int logprobs = -1, best_of = 1;
    bool echo = false;
    if (params_get_int(body, "logprobs", 0, 5, &logprobs, &e)) check_error(&e);
    else CHECK(logprobs >= -1 && logprobs <= 5);
    if (params_get_int(body, "best_of", 1, MAX_N, &best_of, &e)) check_error(&e);
    else CHECK(best_of >= 1 && best_of <= MAX_N);
    if (params_get_bool(body, "echo", &echo, &e)) check_error(&e);
    check_prompt(cJSON_GetObjectItemCaseSensitive(body, "prompt"));
    cJSON_Delete(body);
    return 0;
}
