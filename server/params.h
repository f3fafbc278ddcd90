/* params.h -- validation of OpenAI request fields shared by the
 * completion-style endpoints (/v1/completions, /v1/chat/completions).
 *
 * Every check fails with a filled params_error naming the field; a JSON
 * null means "not given" (OpenAI clients send nulls for unset fields). */
#ifndef GL_PARAMS_H
#define GL_PARAMS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "genloop.h"

#define PARAMS_MAX_STOP 16   /* the most stop strings any configuration allows */
#define PARAMS_MAX_DRY_BREAKERS 32      /* dry_sequence_breakers strings */
#define PARAMS_MAX_DRY_BREAKER_BYTES 64 /* bytes per breaker */

/* llama.cpp's sampler fields that params_generation_parse reads, for the
 * endpoints' lists of handled keys. */
#define PARAMS_SAMPLER_KEYS                                                                        \
    "typical_p", "top_n_sigma", "xtc_probability", "xtc_threshold", "dynatemp_range",              \
    "dynatemp_exponent", "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base", \
    "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers"

/* Per-request bounds from the server settings. */
typedef struct params_limits {
    int max_n;               /* largest `n` */
    int max_tokens;          /* largest max-tokens value (cap, at most the context) */
    int max_stop;            /* stop strings, <= PARAMS_MAX_STOP */
    int max_stop_bytes;      /* bytes per stop string */
    int max_logit_bias;      /* logit_bias entries */
} params_limits;

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
    char *dry_breakers[PARAMS_MAX_DRY_BREAKERS]; /* owned; sampling.dry_breakers points here when given */
    int n_dry_breakers;
    int max_tokens;          /* >= 0; default 16 */
    int n;                   /* choices per prompt, 1..lim->max_n */
    bool stream;
    bool include_usage;      /* stream_options.include_usage */
    bool ignore_eos;         /* extension: generate past end-of-sequence tokens */
    gl_grammar *grammar;     /* owned: the output's constraint (structured.h), or NULL */
    bool continuous_usage;   /* stream_options.continuous_usage_stats: usage on every chunk */
    bool no_prefix_cache;    /* cache_prompt: false */
    int min_tokens;          /* end-of-sequence tokens are banned until this many are generated */
    bool return_progress;    /* stream: prompt_progress chunks while the prompt is prefilled */
    bool no_speculation;     /* speculative: false (opt out of drafted tokens) */
} params_generation;

/* 400 naming the first key of body not in allowed (NULL-terminated).
 * Returns 0 or -1. */
int params_check_keys(const cJSON *body, const char *const *allowed, params_error *e);
/* The request-field check of the completion endpoints (README "Request
 * fields"): keys in handled are the endpoint's own; the rest of the API
 * surface is either accepted and ignored (store, metadata, user, ...: they
 * cannot change the output) or refused with a 400 naming it unless it holds
 * its neutral value (typical_p 1, use_beam_search false, ...). A key known
 * to neither is a 400 too, or with lenient a line on stderr. */
int params_check_fields(const cJSON *body, const char *const *handled, bool lenient,
                        params_error *e);

/* Reads the sampling/generation fields common to completions and chat:
 * temperature, top_p, top_k, min_p, repetition_penalty (or llama.cpp's
 * repeat_penalty with repeat_last_n), presence_penalty, frequency_penalty,
 * logit_bias, seed, stop, n, stream, stream_options, ignore_eos, min_tokens,
 * cache_prompt, llama.cpp's samplers (PARAMS_SAMPLER_KEYS) and the
 * max-tokens field named max_tokens_key, within lim.
 * Returns 0, or -1 with e filled; call params_generation_free either way. */
int params_generation_parse_limits(const cJSON *body, const gl_model *model,
                                   const params_limits *lim, const char *max_tokens_key,
                                   params_generation *out, params_error *e);
/* The same with OpenAI's default stop/logit_bias limits (4 stops of 256
 * bytes, 1024 biases): for callers not yet passing the server's limits. */
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
/* True when a JSON text has a \u0000 escape: cJSON hands strings over as C
 * strings, so a NUL would silently cut a prompt or stop string short. */
bool params_json_has_nul(const char *json, size_t len);

#endif
