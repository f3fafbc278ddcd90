/* params.h -- validation of OpenAI request fields shared by the
 * completion-style endpoints (/v1/completions now, chat later).
 *
 * Every check fails with a filled params_error naming the field; a JSON
 * null means "not given" (OpenAI clients send nulls for unset fields). */
#ifndef PARAMS_H
#define PARAMS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "genloop.h"

#define PARAMS_MAX_STOP 4

typedef struct params_error {
    int status;              /* HTTP status: 400, 404, ... */
    const char *type;        /* "invalid_request_error", ... */
    const char *code;        /* machine-readable code, or NULL */
    char param[64];          /* offending field, "" if none */
    char message[512];
} params_error;

typedef struct params_generation {
    gl_sampling_params sampling; /* logit_bias points into bias below */
    gl_logit_bias *bias;     /* owned */
    char *stop[PARAMS_MAX_STOP]; /* owned */
    int n_stop;
    int max_tokens;          /* >= 0; default 16 */
    int n;                   /* choices per prompt, 1..max_n */
    bool stream;
    bool include_usage;      /* stream_options.include_usage */
} params_generation;

/* 400 naming the first key of body not in allowed (NULL-terminated).
 * Returns 0 or -1. */
int params_check_keys(const cJSON *body, const char *const *allowed, params_error *e);

/* Reads the sampling/generation fields common to completions and chat:
 * temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty,
 * frequency_penalty, logit_bias, seed, stop, n, stream, stream_options and
 * the max-tokens field named max_tokens_key (up to max_tokens_cap).
 * Returns 0, or -1 with e filled; call params_generation_free either way. */
int params_generation_parse(const cJSON *body, const gl_model *model, int max_n,
                            const char *max_tokens_key, int max_tokens_cap,
                            params_generation *out, params_error *e);
void params_generation_free(params_generation *g);

/* Single fields; *out keeps its value when the field is absent or null. */
int params_get_int(const cJSON *body, const char *key, long lo, long hi, int *out,
                   params_error *e);
int params_get_number(const cJSON *body, const char *key, double lo, double hi, bool lo_open,
                      double *out, params_error *e);
int params_get_bool(const cJSON *body, const char *key, bool *out, params_error *e);

/* Fills e and returns -1 (for `return params_fail(...)`). */
int params_fail(params_error *e, int status, const char *param, const char *code,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* True when s[0..len) is valid UTF-8 (no overlongs, surrogates). */
bool params_utf8_valid(const char *s, size_t len);

#endif
