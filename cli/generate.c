/* generate.c -- `genloop generate`: one request through the engine, its text
 * streamed to stdout as it is produced, timings to stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "genloop.h"

#define MAX_STOPS 16
#define MAX_BREAKERS 32

static void usage(FILE *out) {
    fprintf(out,
            "usage: genloop generate -m MODEL -p PROMPT [options]\n"
            "\n"
            "  -m, --model FILE        GGUF model\n"
            "  -p, --prompt TEXT       prompt (special tokens such as <|im_start|> are parsed)\n"
            "  -f, --file FILE         read the prompt from a file instead\n"
            "  -n, --max-tokens N      tokens to generate (default 128; -1 = until the context is full)\n"
            "      --temp T            temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K           keep the K most likely tokens (default 40; 0 = off)\n"
            "      --top-p P           nucleus sampling (default 0.95; 1 = off)\n"
            "      --min-p M           drop tokens below M x the top probability (default 0.05)\n"
            "      --repeat-penalty R  repetition penalty (default 1 = off)\n"
            "      --seed S            RNG seed for reproducible sampling\n"
            "      --stop STR          stop at this string (repeatable, up to %d)\n"
            "      --ignore-eos        keep generating past end-of-sequence tokens\n"
            "  -t, --threads N         compute threads (default: all cores)\n"
            "  -c, --ctx N             context length (default: the model's)\n"
            "      --activation-bits N matmul activation precision: 12 (default; Q4_0/Q4_1, others 16), 16 or 8\n"
            "      --kv-type T         KV cache element type: f16 (default), q8_0 (half the memory) or f32\n"
            CLI_SAMPLER_USAGE
            CLI_SPEC_USAGE
            "  -h, --help              this text\n",
            MAX_STOPS);
}

typedef struct gen_state {
    bool finished;
    gl_finish_reason finish;
    char error[512];
    int n_prompt, n_generated;
    double t_first_token, t_total;
    int n_draft, n_accepted;
} gen_state;

static void on_event(const gl_event *ev, void *ctx) {
    gen_state *st = ctx;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
    }
    if (ev->type != GL_EVENT_FINISHED) return;
    st->finished = true;
    st->finish = ev->finish;
    if (ev->error) snprintf(st->error, sizeof st->error, "%s", ev->error);
    st->n_prompt = ev->n_prompt_tokens;
    st->n_generated = ev->n_generated;
    st->t_first_token = ev->t_first_token;
    st->t_total = ev->t_total;
    st->n_draft = ev->n_draft_tokens;
    st->n_accepted = ev->n_accepted_tokens;
}

/* The whole file, NUL-terminated; NULL with errno set when it cannot be read. */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int failed = ferror(f) ? errno : buf ? 0 : ENOMEM; /* a directory reads as EISDIR */
    fclose(f);
    if (failed) {
        free(buf);
        errno = failed;
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

int cmd_generate(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL;
    const char *stops[MAX_STOPS];
    int n_stops = 0;
    long max_tokens = 128, n_threads = 0, n_ctx = 0;
    bool ignore_eos = false;
    gl_engine_params defaults;
    gl_engine_params_default(&defaults);
    int act_bits = defaults.activation_bits;
    gl_kv_type kv_type = defaults.kv_type;
    gl_sampling_params sp;
    gl_sampling_params_default(&sp);
    const char *breakers[MAX_BREAKERS];
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.05f;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double d;
        long l;
#define VALUE() \
    if (!(v = cli_value(argc, argv, &i))) return 2
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            if (!cli_set_once("-m", &model_path, v)) return 2;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VALUE();
            prompt = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            VALUE();
            prompt_file = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            VALUE();
            if (!cli_parse_int(a, v, -1, 1 << 24, &max_tokens)) return 2;
        } else if (!strcmp(a, "--temp")) {
            VALUE();
            if (!cli_parse_float(a, v, 0, 100, &d)) return 2;
            sp.temperature = (float)d;
        } else if (!strcmp(a, "--top-k")) {
            VALUE();
            if (!cli_parse_int(a, v, 0, 1 << 24, &l)) return 2;
            sp.top_k = (int)l;
        } else if (!strcmp(a, "--top-p")) {
            VALUE();
            if (!cli_parse_float(a, v, 0, 1, &d) || d == 0) {
                if (d == 0) fprintf(stderr, "genloop: --top-p must be in (0, 1]\n");
                return 2;
            }
            sp.top_p = (float)d;
        } else if (!strcmp(a, "--min-p")) {
            VALUE();
            if (!cli_parse_float(a, v, 0, 1, &d)) return 2;
            sp.min_p = (float)d;
        } else if (!strcmp(a, "--repeat-penalty")) {
            VALUE();
            if (!cli_parse_float(a, v, 0.01, 100, &d)) return 2;
            sp.repetition_penalty = (float)d;
        } else if (!strcmp(a, "--seed")) {
            VALUE();
            if (!cli_parse_u64(a, v, &sp.seed)) return 2;
            sp.has_seed = true;
        } else if (!strcmp(a, "--stop")) {
            VALUE();
            if (n_stops == MAX_STOPS) {
                fprintf(stderr, "genloop: at most %d --stop strings\n", MAX_STOPS);
                return 2;
            }
            stops[n_stops++] = v;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE();
            if (!cli_parse_int(a, v, 1, 1024, &n_threads)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            VALUE();
            if (!cli_parse_int(a, v, 1, 1 << 24, &n_ctx)) return 2;
        } else if ((l = cli_parse_spec(argc, argv, &i, &defaults)) != 0 ||
                   (l = cli_parse_sampler(argc, argv, &i, &sp, breakers, MAX_BREAKERS)) != 0) {
            if (l < 0) return 2;
        } else if (!strcmp(a, "--activation-bits")) {
            VALUE();
            if (!cli_parse_act_bits(a, v, &act_bits)) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            VALUE();
            if (!cli_parse_kv_type(a, v, &kv_type)) return 2;
        } else {
            fprintf(stderr, "genloop generate: unknown option '%s' (try --help)\n", a);
            return 2;
        }
#undef VALUE
    }
    if (!model_path || (!prompt && !prompt_file)) {
        fprintf(stderr, "genloop generate: -m MODEL and -p PROMPT (or -f FILE) are required\n");
        usage(stderr);
        return 2;
    }
    char *file_text = NULL;
    if (prompt_file) {
        file_text = read_file(prompt_file);
        if (!file_text) {
            fprintf(stderr, "genloop generate: cannot read prompt file %s: %s\n", prompt_file, strerror(errno));
            return 1;
        }
        prompt = file_text;
    }

    gl_error err;
    gl_model *model = gl_model_load(model_path, &err);
    if (!model) {
        fprintf(stderr, "genloop: %s\n", err.message);
        free(file_text);
        return 1;
    }
    int rc = 1;
    gl_engine *engine = NULL;
    int32_t *ids = NULL;
    int n_ids = gl_tokenize(model, prompt, strlen(prompt), GL_TOKENIZE_ADD_SPECIAL | GL_TOKENIZE_PARSE_SPECIAL, &ids, &err);
    if (n_ids < 0) {
        fprintf(stderr, "genloop: prompt: %s\n", err.message);
        goto done;
    }
    const gl_model_info *info = gl_model_get_info(model);
    gl_engine_params ep;
    gl_engine_params_default(&ep);
    ep.n_threads = (int)n_threads;
    ep.n_ctx = n_ctx ? (int)n_ctx : info->n_ctx_train;
    ep.kv_cache_tokens = ep.n_ctx;
    ep.max_seqs = 1;
    ep.activation_bits = act_bits;
    ep.kv_type = kv_type;
    cli_copy_spec(&ep, &defaults);
    engine = gl_engine_create(model, &ep, &err);
    if (!engine) {
        fprintf(stderr, "genloop: %s\n", err.message);
        goto done;
    }
    gl_request req = {.prompt = ids, .n_prompt = n_ids, .max_tokens = (int)max_tokens, .sampling = sp,
                      .n_stop = n_stops, .stop = stops, .ignore_eos = ignore_eos, .prompt_logprobs = -1};
    if (!gl_engine_submit(engine, &req, NULL, &err)) {
        fprintf(stderr, "genloop: %s\n", err.message);
        goto done;
    }
    gen_state st = {0};
    while (!st.finished) gl_engine_step(engine, on_event, &st);
    printf("\n");
    fflush(stdout);
    if (st.finish == GL_FINISH_ERROR) {
        fprintf(stderr, "genloop: generation failed: %s\n", st.error);
        goto done;
    }
    double decode_s = st.t_total - st.t_first_token;
    fprintf(stderr, "prompt tokens: %d, generated tokens: %d (%s)\n", st.n_prompt, st.n_generated,
            gl_finish_reason_str(st.finish));
    fprintf(stderr, "TTFT: %.1f ms (%.1f prompt tokens/s)\n", st.t_first_token * 1e3,
            st.t_first_token > 0 ? st.n_prompt / st.t_first_token : 0);
    fprintf(stderr, "decode: %.2f tokens/s\n", st.n_generated > 1 && decode_s > 0 ? (st.n_generated - 1) / decode_s : 0);
    if (st.n_draft > 0)
        fprintf(stderr, "speculative: %d drafted tokens, %d accepted (%.0f%%)\n", st.n_draft, st.n_accepted,
                100.0 * st.n_accepted / st.n_draft);
    rc = 0;
done:
    free(ids);
    gl_engine_free(engine);
    gl_model_free(model);
    free(file_text);
    return rc;
}
