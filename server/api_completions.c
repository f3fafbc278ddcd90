/* api_completions.c -- a completion request is a job (job.h) of n x prompts
 * seqs, one per choice. What is particular to this endpoint: the prompts
 * (strings or token ids, several per request), echo, the legacy logprobs
 * shape with text offsets (prompt tokens too, with echo), max_tokens 0 for
 * prompt scoring, and the text_completion JSON. */
#include "api_completions.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "structured.h"

typedef struct cmpl_prompt {
    int32_t *ids;
    int n;
    char *text;              /* what echo prepends */
    size_t text_len;
} cmpl_prompt;

typedef struct cmpl_seq {
    job_seq base;            /* first */
    size_t prompt_offset;    /* echo+logprobs: offset of the next prompt token */
    int n_lp;                /* logprob entries in lp_* not yet written */
    jbuf lp_tokens, lp_values, lp_tops, lp_offsets;
} cmpl_seq;

typedef struct cmpl_job {
    job base;                /* first */
    int logprobs;            /* -1: none */
    bool echo;
    cmpl_prompt *prompts;
    int n_prompts;
} cmpl_job;

static void cmpl_free(job *j) {
    cmpl_job *cj = (cmpl_job *)j;
    for (int i = 0; i < cj->n_prompts; i++) {
        free(cj->prompts[i].ids);
        free(cj->prompts[i].text);
    }
    free(cj->prompts);
    for (int i = 0; j->seqs && i < j->n_seqs; i++) {
        cmpl_seq *s = (cmpl_seq *)job_seq_at(j, i);
        jbuf_free(&s->lp_tokens);
        jbuf_free(&s->lp_values);
        jbuf_free(&s->lp_tops);
        jbuf_free(&s->lp_offsets);
    }
}

/* ---- logprobs ----------------------------------------------------------------- */

/* One entry; logprob NAN (the first prompt token) gives nulls. */
static void lp_add(cmpl_seq *s, const gl_event *ev, size_t offset) {
    const cmpl_job *cj = (const cmpl_job *)s->base.job;
    const gl_model *model = cj->base.model->model;
    const char *sep = s->n_lp ? "," : "";
    jbuf_puts(&s->lp_tokens, sep);
    api_write_piece(model, &s->lp_tokens, ev->token);
    jbuf_puts(&s->lp_values, sep);
    jbuf_num(&s->lp_values, ev->logprob);
    jbuf_puts(&s->lp_tops, sep);
    if (isnan(ev->logprob)) {
        jbuf_puts(&s->lp_tops, "null");
    } else {
        jbuf_puts(&s->lp_tops, "{");
        int n = ev->n_top < cj->logprobs ? ev->n_top : cj->logprobs;
        for (int i = 0; i < n; i++) {
            if (i) jbuf_puts(&s->lp_tops, ",");
            api_write_piece(model, &s->lp_tops, ev->top[i].token);
            jbuf_puts(&s->lp_tops, ":");
            jbuf_num(&s->lp_tops, ev->top[i].logprob);
        }
        jbuf_puts(&s->lp_tops, "}");
    }
    jbuf_printf(&s->lp_offsets, "%s%zu", sep, offset);
    s->n_lp++;
}

/* Writes the pending entries as a logprobs object (or null) and clears them. */
static void lp_write(jbuf *out, cmpl_seq *s) {
    if (((cmpl_job *)s->base.job)->logprobs < 0) { jbuf_puts(out, "null"); return; }
    jbuf_puts(out, "{\"tokens\":[");
    jbuf_raw(out, s->lp_tokens.data ? s->lp_tokens.data : "", s->lp_tokens.len);
    jbuf_puts(out, "],\"token_logprobs\":[");
    jbuf_raw(out, s->lp_values.data ? s->lp_values.data : "", s->lp_values.len);
    jbuf_puts(out, "],\"top_logprobs\":[");
    jbuf_raw(out, s->lp_tops.data ? s->lp_tops.data : "", s->lp_tops.len);
    jbuf_puts(out, "],\"text_offset\":[");
    jbuf_raw(out, s->lp_offsets.data ? s->lp_offsets.data : "", s->lp_offsets.len);
    jbuf_puts(out, "]}");
    jbuf_clear(&s->lp_tokens);
    jbuf_clear(&s->lp_values);
    jbuf_clear(&s->lp_tops);
    jbuf_clear(&s->lp_offsets);
    s->n_lp = 0;
}

static void cmpl_on_prompt_token(job_seq *js, const gl_event *ev) {
    cmpl_seq *s = (cmpl_seq *)js;
    const cmpl_job *cj = (const cmpl_job *)js->job;
    if (!cj->echo || cj->logprobs < 0) return;
    size_t len = 0;
    gl_token_piece(cj->base.model->model, ev->token, &len);
    lp_add(s, ev, s->prompt_offset);
    s->prompt_offset += len;
}

static void cmpl_on_token(job_seq *js, const gl_event *ev) {
    if (((cmpl_job *)js->job)->logprobs >= 0) lp_add((cmpl_seq *)js, ev, js->text_bytes);
}

/* ---- response pieces ------------------------------------------------------------ */

static void write_choice(jbuf *b, job_seq *s, bool final) {
    jbuf_puts(b, "{\"text\":");
    jbuf_str(b, s->text.data ? s->text.data : "", s->text.len);
    jbuf_printf(b, ",\"index\":%d,\"logprobs\":", s->index);
    lp_write(b, (cmpl_seq *)s);
    job_write_finish(b, s, final);
    jbuf_puts(b, "}");
    jbuf_clear(&s->text);
}

static void cmpl_write_choice(jbuf *b, job_seq *s) { write_choice(b, s, 1); }

/* Echo text goes out when the stream opens unless prompt logprobs are still to come. */
static int cmpl_stream_open(job_seq *s) {
    const cmpl_job *cj = (const cmpl_job *)s->job;
    return s->state == JOB_SEQ_DONE || !cj->echo || cj->logprobs < 0;
}

/* One chunk with the pending text/logprobs (and the finish_reason once
 * done); chunks without text are skipped except the final one. */
static void cmpl_stream_flush(job_seq *s, bool with_timings) {
    bool final = s->state == JOB_SEQ_DONE;
    if (!final && s->text.len == 0) return;
    write_choice(job_chunk_begin(s->job), s, final);
    job_chunk_end(s->job, with_timings);
}

/* ---- request parsing ------------------------------------------------------------------- */

static int parse_token_array(const cJSON *arr, int n_vocab, cmpl_prompt *p, params_error *e) {
    int n = cJSON_GetArraySize(arr);
    p->ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!p->ids) return params_fail(e, 500, "prompt", NULL, "out of memory");
    for (const cJSON *t = arr->child; t; t = t->next) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
            t->valuedouble < 0 || t->valuedouble >= n_vocab)
            return params_fail(e, 400, "prompt", "invalid_value",
                               "'prompt' token ids must be integers in 0..%d", n_vocab - 1);
        p->ids[p->n++] = (int32_t)t->valuedouble;
    }
    return 0;
}

static int tokenize_prompt(const gl_model *model, const char *text, cmpl_prompt *p,
                           params_error *e) {
    size_t len = strlen(text);
    if (!params_utf8_valid(text, len))
        return params_fail(e, 400, "prompt", "invalid_value", "'prompt' is not valid UTF-8");
    gl_error err = {{0}};
    int n = gl_tokenize(model, text, len, GL_TOKENIZE_ADD_SPECIAL | GL_TOKENIZE_PARSE_SPECIAL,
                        &p->ids, &err);
    if (n < 0) return params_fail(e, 400, "prompt", "invalid_value", "%s", err.message);
    p->n = n;
    p->text = strdup(text);
    p->text_len = len;
    return 0;
}

/* prompt: "s" | ["s", ...] | [id, ...] | [[id, ...], ...] */
static int parse_prompts(cmpl_job *cj, const cJSON *prompt, params_error *e) {
    const gl_model *model = cj->base.model->model;
    int n_vocab = gl_model_get_info(model)->n_vocab;
    if (!prompt) return params_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    int n = cJSON_IsString(prompt) ? 1 : cJSON_IsArray(prompt) ? cJSON_GetArraySize(prompt) : -1;
    if (n < 0)
        return params_fail(e, 400, "prompt", "invalid_type",
                           "'prompt' must be a string, an array of strings, an array of token ids or an array of token-id arrays");
    if (n == 0) return params_fail(e, 400, "prompt", "invalid_value", "'prompt' must not be empty");
    const cJSON *first = cJSON_IsArray(prompt) ? prompt->child : NULL;
    int is_ids = first && cJSON_IsNumber(first);
    if (is_ids) n = 1;
    if (n > 256) return params_fail(e, 400, "prompt", "invalid_value", "at most 256 prompts per request");
    cj->prompts = calloc((size_t)n, sizeof(cmpl_prompt));
    if (!cj->prompts) return params_fail(e, 500, "prompt", NULL, "out of memory");
    cj->n_prompts = n;
    if (cJSON_IsString(prompt)) {
        if (tokenize_prompt(model, prompt->valuestring, &cj->prompts[0], e)) return -1;
    } else if (is_ids) {
        if (parse_token_array(prompt, n_vocab, &cj->prompts[0], e)) return -1;
    } else {
        int i = 0;
        for (const cJSON *item = prompt->child; item; item = item->next, i++) {
            int rc = cJSON_IsString(item) ? tokenize_prompt(model, item->valuestring, &cj->prompts[i], e)
                   : cJSON_IsArray(item) && cJSON_GetArraySize(item) > 0 &&
                     (!first || cJSON_IsArray(first))
                       ? parse_token_array(item, n_vocab, &cj->prompts[i], e)
                       : params_fail(e, 400, "prompt", "invalid_type",
                                     "'prompt' array items must all be strings or all be non-empty token-id arrays");
            if (rc) return -1;
            if (cJSON_IsString(item) != cJSON_IsString(first))
                return params_fail(e, 400, "prompt", "invalid_type",
                                   "'prompt' array items must all be strings or all be token-id arrays");
        }
    }
    for (int i = 0; i < n; i++) {
        cmpl_prompt *p = &cj->prompts[i];
        if (p->n == 0)
            return params_fail(e, 400, "prompt", "invalid_value", "'prompt' has no tokens");
        if (!p->text) {
            gl_error err = {{0}};
            p->text = gl_detokenize(model, p->ids, (size_t)p->n, &err);
            if (!p->text) return params_fail(e, 400, "prompt", "invalid_value", "%s", err.message);
            p->text_len = strlen(p->text);
        }
    }
    return 0;
}

static int cmpl_parse(job *j, const cJSON *body, params_error *e) {
    cmpl_job *cj = (cmpl_job *)j;
    static const char *const keys[] = {
        "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
        "logprobs", "echo", "stop", "response_format", "grammar", "json_schema", "guided_json", "guided_regex", "guided_choice",
        "guided_grammar", "structured_outputs", "presence_penalty", "frequency_penalty", "logit_bias", "seed",
        "user", "best_of", "suffix", "top_k", "min_p", "repetition_penalty", "ignore_eos",
        /* llama.cpp server / vLLM extensions (README "Request fields") */
        "repeat_penalty", "repeat_last_n", "min_tokens", "cache_prompt", "speculative", "n_probs",
        "return_progress", PARAMS_SAMPLER_KEYS, NULL };
    api_server *a = j->api;
    const models_entry *m = j->model;
    if (params_check_fields(body, keys, a->cfg->lenient_params, e))
        return -1;
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(body, "suffix");
    if (suffix && !cJSON_IsNull(suffix))
        return params_fail(e, 400, "suffix", "unsupported_parameter", "'suffix' is not supported");
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(body, "user");
    if (user && !cJSON_IsNull(user) && !cJSON_IsString(user))
        return params_fail(e, 400, "user", "invalid_type", "'user' must be a string");
    if (params_generation_parse_limits(body, m->model, &m->limits, "max_tokens", &j->gen, e) ||
        structured_parse(body, &j->grammar_spec, e))
        return -1;
    int best_of = j->gen.n;
    if (params_get_int(body, "best_of", 1, m->limits.max_n, &best_of, e)) return -1;
    if (best_of != j->gen.n)
        return params_fail(e, 400, "best_of", "unsupported_parameter",
                           "'best_of' is only supported equal to 'n'");
    cj->logprobs = -1;
    if (params_get_int(body, "logprobs", 0, 5, &cj->logprobs, e) ||
        params_get_bool(body, "echo", &cj->echo, e))
        return -1;
    /* llama.cpp's name for the number of alternatives */
    const cJSON *n_probs = cJSON_GetObjectItemCaseSensitive(body, "n_probs");
    if (n_probs && !cJSON_IsNull(n_probs)) {
        int np = 0;
        if (params_get_int(body, "n_probs", 0, 5, &np, e)) return -1;
        if (cj->logprobs >= 0 && cj->logprobs != np)
            return params_fail(e, 400, "n_probs", "invalid_value", "give 'logprobs' or 'n_probs', not both");
        if (np > 0) cj->logprobs = np;
    }
    if (parse_prompts(cj, cJSON_GetObjectItemCaseSensitive(body, "prompt"), e)) return -1;
    if ((long)cj->n_prompts * j->gen.n > 256)
        return params_fail(e, 400, "n", "invalid_value", "'n' times the number of prompts must be at most 256");
    for (int i = 0; i < cj->n_prompts; i++) {
        if (api_check_prompt_tokens(m, cj->prompts[i].n, "prompt", e)) return -1;
        int need = cj->prompts[i].n + (j->gen.max_tokens > 0 ? j->gen.max_tokens : 1);
        if (need > m->n_ctx)
            return params_fail(e, 400, "prompt", "context_length_exceeded",
                               "This model's maximum context length is %d tokens, however you "
                               "requested %d tokens (%d in your prompt; %d for the completion). "
                               "Please reduce your prompt or completion length.",
                               m->n_ctx, need, cj->prompts[i].n, j->gen.max_tokens);
    }
    j->n_seqs = cj->n_prompts * j->gen.n;
    j->prompt_tokens = 0;
    for (int i = 0; i < cj->n_prompts; i++) j->prompt_tokens += cj->prompts[i].n;
    j->scoring_only = j->gen.max_tokens == 0; /* echo/logprobs of the prompt only */
    j->gen.sampling.logprobs = cj->logprobs >= 0;
    j->gen.sampling.n_logprobs = cj->logprobs > 0 ? cj->logprobs : 0;
    return 0;
}

static void cmpl_prepare(job_seq *js, gl_request *r) {
    const cmpl_job *cj = (const cmpl_job *)js->job;
    const cmpl_prompt *p = &cj->prompts[js->index / cj->base.gen.n]; /* n choices per prompt */
    if (cj->echo) job_seq_append(js, p->text, p->text_len);
    r->prompt = p->ids;
    r->n_prompt = p->n;
    /* max_tokens 0 (prompt scoring): generate one token and drop it */
    if (r->max_tokens == 0) r->max_tokens = 1;
    r->prompt_logprobs = cj->echo && cj->logprobs >= 0 ? cj->logprobs : -1;
}

static const job_ops cmpl_ops = {
    .job_size = sizeof(cmpl_job), .seq_size = sizeof(cmpl_seq), .ollama_options = true,
    .id_prefix = "cmpl", .prompt_param = "prompt",
    .object = "text_completion", .chunk_object = "text_completion",
    .parse = cmpl_parse, .prepare = cmpl_prepare,
    .on_prompt_token = cmpl_on_prompt_token, .on_token = cmpl_on_token,
    .stream_open = cmpl_stream_open, .stream_flush = cmpl_stream_flush,
    .write_choice = cmpl_write_choice,
    .free = cmpl_free,
};

const job_ops *completions_job_ops(void) {
    return &cmpl_ops;
}

void completions_handle(http_req *req, void *ctx) {
    job_handle(req, ctx, &cmpl_ops);
}
