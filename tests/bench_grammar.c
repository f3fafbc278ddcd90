/* bench_grammar.c -- structured output speed (a benchmark, not a test):
 *
 *   bench_grammar MODEL [N_TOKENS] [REPS] [THREADS]
 *
 * Reports, alternating constrained and unconstrained runs in one process
 * and taking medians: single-stream decode tokens/s with a nested JSON
 * schema vs without, batch-16 aggregate tokens/s with all 16 constrained
 * vs none, the compile time of a 50-property schema, and the time of one
 * mask computed from scratch (a state not in the cache) vs from the cache.
 * Unconstrained runs use ignore_eos and the constrained run's token count,
 * so both decode the same number of tokens. N_TOKENS 0: compile and mask
 * timings only (a big model's vocabulary without its decode time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "genloop.h"
#include "grammar.h"

static const char NESTED[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"street\",\"city\",\"zip\"]},"
    "\"friends\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"since\":{\"type\":\"string\",\"format\":\"date\"}},\"required\":[\"name\",\"since\"]},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\",\"address\",\"friends\"]}";

typedef struct run {
    int n_done, n_tokens;
} run;

static void on_event(const gl_event *ev, void *ctx) {
    run *r = ctx;
    if (ev->type == GL_EVENT_TOKEN) r->n_tokens++;
    if (ev->type == GL_EVENT_FINISHED) r->n_done++;
}

/* n_seqs requests of max_tokens each; returns aggregate decode tokens/s
 * (from the first generated token on) and the tokens generated per request. */
static double generate(gl_engine *e, const int32_t *prompt, int n_prompt, gl_grammar *g, int max_tokens, int n_seqs,
                       int *tokens_out) {
    gl_request req = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = max_tokens, .grammar = g,
                      .ignore_eos = g == NULL};
    gl_sampling_params_default(&req.sampling);
    req.sampling.temperature = 0;
    gl_error err;
    for (int i = 0; i < n_seqs; i++) {
        if (!gl_engine_submit(e, &req, NULL, &err)) {
            fprintf(stderr, "submit: %s\n", err.message);
            exit(1);
        }
    }
    run r = {0};
    while (r.n_tokens < n_seqs) gl_engine_step(e, on_event, &r); /* prefill and first token */
    int first = r.n_tokens;
    double t0 = bench_now();
    while (r.n_done < n_seqs) gl_engine_step(e, on_event, &r);
    double dt = bench_now() - t0;
    if (tokens_out) *tokens_out = r.n_tokens / n_seqs;
    return (r.n_tokens - first) / dt;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar MODEL [N_TOKENS] [REPS] [THREADS]\n");
        return 2;
    }
    int n_tokens = argc > 2 ? atoi(argv[2]) : 96, reps = argc > 3 ? atoi(argv[3]) : 3;
    gl_error err;
    gl_model *m = gl_model_load(argv[1], &err);
    if (!m) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    gl_engine_params ep;
    gl_engine_params_default(&ep);
    ep.n_threads = argc > 4 ? atoi(argv[4]) : 0;
    ep.prefix_caching = true;
    gl_engine *e = gl_engine_create(m, &ep, &err);
    if (!e) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }

    /* compile time of a 50-property schema (distinct texts: no cache hits) */
    double ct[5];
    for (int k = 0; k < 5; k++) {
        char schema[8192];
        int n = snprintf(schema, sizeof schema, "{\"type\":\"object\",\"properties\":{");
        for (int i = 0; i < 50; i++)
            n += snprintf(schema + n, sizeof schema - (size_t)n, "%s\"field_%d_%d\":{\"type\":\"%s\"}", i ? "," : "", k, i,
                          i % 3 == 0 ? "string" : i % 3 == 1 ? "integer" : "boolean");
        snprintf(schema + n, sizeof schema - (size_t)n, "},\"required\":[\"field_%d_0\"]}", k);
        double t0 = bench_now();
        gl_grammar *g = gl_grammar_from_json_schema(schema, strlen(schema), &err);
        ct[k] = bench_now() - t0;
        if (!g) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        gl_grammar_free(g);
    }
    printf("compile, 50-property schema: %.2f ms (median of 5)\n", bench_median(ct, 5) * 1e3);

    gl_grammar *g = gl_grammar_from_json_schema(NESTED, sizeof NESTED - 1, &err);
    if (!g) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    const char *text = "<|im_start|>user\nDescribe a person with a name, age, address and friends as JSON.<|im_end|>\n"
                       "<|im_start|>assistant\n";
    int32_t *prompt;
    int n_prompt = gl_tokenize(m, text, strlen(text), GL_TOKENIZE_PARSE_SPECIAL, &prompt, &err);

    /* one mask from scratch vs from the cache, inside a string */
    const gl_model_info *info = gl_model_get_info(m);
    int n_vocab = info->n_vocab;
    const char **pieces = malloc((size_t)n_vocab * sizeof *pieces);
    size_t *lens = malloc((size_t)n_vocab * sizeof *lens);
    bool *eog = malloc((size_t)n_vocab);
    for (int t = 0; t < n_vocab; t++) {
        pieces[t] = gl_token_piece(m, t, &lens[t]);
        if (!pieces[t]) lens[t] = 0;
        eog[t] = gl_token_is_eog(m, t);
    }
    gr_vocab *v = gr_vocab_create(n_vocab, pieces, lens, eog);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    double cold[5], warm[5];
    for (int k = 0; k < 5; k++) {
        char gbnf[128];
        snprintf(gbnf, sizeof gbnf, "root ::= \"{\\\"k%d\\\": \\\"\" [^\"\\\\]* \"\\\"}\"", k);
        gl_grammar *sg = gl_grammar_from_gbnf(gbnf, strlen(gbnf), &err);
        gr_matcher *mt = gr_matcher_create(sg, v, &err);
        char pre[32];
        int pl = snprintf(pre, sizeof pre, "{\"k%d\": \"ab", k);
        gr_matcher_accept_bytes(mt, pre, (size_t)pl);
        double t0 = bench_now();
        int allowed = gr_matcher_mask(mt, logits);
        cold[k] = bench_now() - t0;
        t0 = bench_now();
        gr_matcher_mask(mt, logits);
        warm[k] = bench_now() - t0;
        if (k == 0) printf("mask inside a string: %d of %d tokens allowed\n", allowed, n_vocab);
        gr_matcher_free(mt);
        gl_grammar_free(sg);
    }
    printf("mask from scratch: %.2f ms, from the cache: %.3f ms (medians of 5)\n", bench_median(cold, 5) * 1e3,
           bench_median(warm, 5) * 1e3);

    int n_gen = 0;
    if (n_tokens <= 0) reps = 0;
    else generate(e, prompt, n_prompt, g, n_tokens, 1, &n_gen); /* warm-up: fills the mask cache */
    if (reps > 0) printf("nested schema: %d tokens generated (greedy)\n", n_gen);
    double c1[16], u1[16], cb[16], ub[16];
    if (reps > 16) reps = 16;
    for (int r = 0; r < reps; r++) {
        c1[r] = generate(e, prompt, n_prompt, g, n_tokens, 1, NULL);
        u1[r] = generate(e, prompt, n_prompt, NULL, n_gen, 1, NULL);
        cb[r] = generate(e, prompt, n_prompt, g, n_tokens, 16, NULL);
        ub[r] = generate(e, prompt, n_prompt, NULL, n_gen, 16, NULL);
    }
    if (reps > 0) {
        double mc1 = bench_median(c1, reps), mu1 = bench_median(u1, reps);
        double mcb = bench_median(cb, reps), mub = bench_median(ub, reps);
        printf("single stream: constrained %.1f tok/s, unconstrained %.1f tok/s (%.2fx)\n", mc1, mu1, mc1 / mu1);
        printf("batch 16:      constrained %.1f tok/s, unconstrained %.1f tok/s (%.2fx)\n", mcb, mub, mcb / mub);
    }
    free(prompt);
    free(logits);
    free(pieces);
    free(lens);
    free(eog);
    gr_vocab_free(v);
    gl_grammar_free(g);
    gl_engine_free(e);
    gl_model_free(m);
    return 0;
}
