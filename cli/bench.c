/* bench.c -- `genloop bench`: how fast a model runs on this machine, and how
 * close decoding comes to the memory-bandwidth roofline.
 *
 * Measures, each as the median of -r repetitions: memory read bandwidth
 * (best of several passes over a 512 MiB buffer with the same thread count),
 * prompt processing (one request of -p tokens, max_tokens 1: prompt tokens
 * over the time to its first token), single-stream generation (-n tokens),
 * and aggregate generation for each batch size of -b (from when every request
 * has its first token to when all finish). Decoding reads every weight once
 * per step, so tg x weight bytes per token / bandwidth is the fraction of the
 * roofline reached: per repetition, against the mean of the probes just
 * before and after its decode run; the bandwidth printed is the median of
 * those means. Prompt processing is compute-bound instead: it is set against
 * the int8 ceiling, the layers' multiply-adds per token (two int8 ones each
 * at 16-bit activations) over the peak int8 rate of the kernels in use on
 * the threads' cores at the measured clock. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "genloop.h"

#define MAX_BATCHES 16
#define BW_BYTES ((size_t)512 << 20)
#define GEN_PROMPT 16 /* prompt tokens of the generation runs */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- memory bandwidth ------------------------------------------------------- */

typedef struct bw_slice {
    const uint64_t *data;
    size_t n;                 /* words */
    uint64_t sum;             /* keeps the reads from being optimised away */
} bw_slice;

/* Sums a slice a cache line at a time, prefetching into L2 6 KiB ahead:
 * the best this plain reader found (the decode rows' pair of requests, L1
 * at 1 KiB and L2 at 3 KiB, read 19.5 vs 21.4 GB/s here on one thread),
 * so the probe is no weaker a reader than the decode it is the ceiling for. */
static void *bw_read(void *arg) {
    bw_slice *s = arg;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 8 <= s->n; i += 8) {
        __builtin_prefetch(s->data + i + 768, 0, 2);
        a0 += s->data[i] + s->data[i + 4];
        a1 += s->data[i + 1] + s->data[i + 5];
        a2 += s->data[i + 2] + s->data[i + 6];
        a3 += s->data[i + 3] + s->data[i + 7];
    }
    s->sum = a0 + a1 + a2 + a3;
    return NULL;
}

/* GB/s of reading the buffer with n_threads threads, best of `passes`. */
static double measure_bandwidth(int n_threads, int passes) {
    /* On 2 MiB pages where the system gives them, as the engine keeps its
     * weights: the probe reads no worse than the decode it is compared with.
     * One buffer for every probe of the run: faulting in 512 MiB of huge
     * pages again each time took seconds on a VM. */
    static uint64_t *buf;
    size_t words = BW_BYTES / sizeof *buf;
    if (!buf) {
        if (posix_memalign((void **)&buf, (size_t)2 << 20, BW_BYTES)) return 0;
#ifdef MADV_HUGEPAGE
        madvise(buf, BW_BYTES, MADV_HUGEPAGE);
#endif
        for (size_t i = 0; i < words; i++) buf[i] = i; /* touch every page */
    }
    bw_slice slices[64];
    pthread_t threads[64];
    if (n_threads > 64) n_threads = 64;
    double best = 0;
    uint64_t sink = 0;
    for (int pass = 0; pass < passes; pass++) {
        double t0 = now_s();
        for (int i = 0; i < n_threads; i++) {
            size_t from = words * (size_t)i / (size_t)n_threads, to = words * (size_t)(i + 1) / (size_t)n_threads;
            slices[i] = (bw_slice){.data = buf + from, .n = to - from};
            if (i > 0) pthread_create(&threads[i], NULL, bw_read, &slices[i]);
        }
        bw_read(&slices[0]);
        for (int i = 1; i < n_threads; i++) pthread_join(threads[i], NULL);
        double dt = now_s() - t0;
        for (int i = 0; i < n_threads; i++) sink += slices[i].sum;
        double gbs = (double)BW_BYTES / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    if (sink == 42) fprintf(stderr, " "); /* a use of the sums */
    return best;
}

/* ---- the int8 ceiling of prompt processing ------------------------------------- */

/* Clock of one busy core in GHz, the higher of what Linux reports
 * (/proc/cpuinfo: the nominal clock on VMs) and a measurement: a chain of
 * dependent register adds runs one a cycle (adds of an immediate would
 * not: newer cores fold those at rename), best of five tries, since a
 * preempted try only reads slower. The higher one keeps the ceiling a
 * ceiling when turbo runs above the nominal clock. */
static double measure_ghz(void) {
    double best = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "cpu MHz", 7) && strchr(line, ':')) {
                best = atof(strchr(line, ':') + 1) / 1e3;
                break;
            }
        fclose(f);
    }
#if defined(__x86_64__)
    const long iters = 5000000;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t x = 0, one = 1;
        long n = iters;
        double t0 = now_s();
        __asm__ volatile("1:\n\t"
                         "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                         "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                         "dec %1\n\tjnz 1b"
                         : "+r"(x), "+r"(n)
                         : "r"(one));
        double ghz = (double)iters * 8 / (now_s() - t0) / 1e9;
        if (ghz > best) best = ghz;
    }
#endif
    return best;
}

#if defined(__x86_64__)
/* 512-bit vpdpbusd a core issues per cycle, measured (12 independent chains
 * against the clock measure_ghz read): two on Xeon cores, one on Zen 4 and
 * on client cores; rounded to 1 or 2. */
__attribute__((target("avx512f,avx512vnni"))) static int vnni512_per_cycle(double ghz) {
    const long iters = 2000000;
    double best = 0;
    for (int rep = 0; rep < 3 && ghz > 0; rep++) {
        long n = iters;
        double t0 = now_s();
        __asm__ volatile("vpxord %%zmm12, %%zmm12, %%zmm12\n\tvpxord %%zmm13, %%zmm13, %%zmm13\n\t"
                         "1:\n\t"
                         "vpdpbusd %%zmm12, %%zmm13, %%zmm0\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm1\n\t"
                         "vpdpbusd %%zmm12, %%zmm13, %%zmm2\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm3\n\t"
                         "vpdpbusd %%zmm12, %%zmm13, %%zmm4\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm5\n\t"
                         "vpdpbusd %%zmm12, %%zmm13, %%zmm6\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm7\n\t"
                         "vpdpbusd %%zmm12, %%zmm13, %%zmm8\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm9\n\t"
                         "vpdpbusd %%zmm12, %%zmm13, %%zmm10\n\tvpdpbusd %%zmm12, %%zmm13, %%zmm11\n\t"
                         "dec %0\n\tjnz 1b\n\tvzeroupper"
                         : "+r"(n)
                         :
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                           "xmm11", "xmm12", "xmm13", "cc");
        double per_cycle = (double)iters * 12 / ((now_s() - t0) * ghz * 1e9);
        if (per_cycle > best) best = per_cycle;
    }
    return best >= 1.5 ? 2 : 1;
}
#endif

/* int8 multiply-adds a core issues per cycle on the kernels in use, peak:
 * AMX's tdpbusd does 16 x 16 x 64 in 16 cycles; a 512-bit vpdpbusd 64, on
 * as many ports as vnni512_per_cycle finds; a 256-bit one 32, on two ports.
 * 0 for the scalar reference, which has no such peak. */
static int int8_macs_per_cycle(const char *kernels, double ghz) {
    if (!strcmp(kernels, "amx")) return 1024;
#if defined(__x86_64__)
    static int avx512_ports;
    if (!strcmp(kernels, "avx512")) {
        if (!avx512_ports) avx512_ports = vnni512_per_cycle(ghz);
        return avx512_ports * 64;
    }
#endif
    if (!strcmp(kernels, "avx2")) return 2 * 32;
    return 0;
}

/* Multiply-adds of one prompt token in the layers' matrices (Q, K, V, O,
 * gate, up, down); the output matrix runs for the last token only, and
 * attention is float work beside these. */
static double layer_macs_per_token(const gl_model_info *info) {
    double q = (double)info->n_heads * info->head_dim, kv = (double)info->n_kv_heads * info->head_dim;
    double d = info->n_embd;
    return info->n_layers * (d * (q + 2 * kv) + q * d + 3 * d * info->n_ff);
}

/* ---- engine runs -------------------------------------------------------------- */

/* Each phase is announced on stderr as it starts (stdout holds only the
 * results, so --json stays one object). */
static void phase(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "genloop bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

typedef struct run_state {
    int n_requests;
    long prompt_total, prompt_done;   /* tokens, over all requests */
    long gen_total, gen_done;
    double t_progress;        /* when the last progress line was printed */
    int n_first;              /* requests that have their first token */
    int n_finished;
    double t_all_first;       /* when the last first token arrived */
    long tokens_after_first;  /* generated after t_all_first */
    double t_first_token;     /* FINISHED of the last request: its submit-to-first-token */
    int *got_first;           /* [n_requests], by user index */
    char error[256];
} run_state;

static void on_event(const gl_event *ev, void *ctx) {
    run_state *st = ctx;
    intptr_t idx = (intptr_t)ev->user;
    if (ev->type == GL_EVENT_PROMPT_PROGRESS && ev->n_processed == ev->n_prompt_tokens) {
        st->prompt_done += ev->n_prompt_tokens;
    } else if (ev->type == GL_EVENT_TOKEN) {
        st->gen_done++;
        if (st->n_first == st->n_requests) st->tokens_after_first++;
        if (!st->got_first[idx]) {
            st->got_first[idx] = 1;
            if (++st->n_first == st->n_requests) st->t_all_first = now_s();
        }
    } else if (ev->type == GL_EVENT_FINISHED) {
        st->n_finished++;
        st->t_first_token = ev->t_first_token;
        if (ev->finish == GL_FINISH_ERROR && ev->error) snprintf(st->error, sizeof st->error, "%s", ev->error);
    }
}

/* Submit n_req requests of n_prompt tokens generating max_tokens each, run to
 * the end. Prompts differ per request and per `salt`, so no prefix is shared. */
static int run_requests(gl_engine *e, const gl_model_info *info, int n_req, int n_prompt, int max_tokens, int salt,
                        run_state *st) {
    memset(st, 0, sizeof *st);
    st->n_requests = n_req;
    st->got_first = calloc((size_t)n_req, sizeof *st->got_first);
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
    if (!st->got_first || !prompt) {
        free(st->got_first);
        free(prompt);
        fprintf(stderr, "genloop bench: out of memory\n");
        return -1;
    }
    int span = info->n_vocab > 400 ? info->n_vocab - 300 : info->n_vocab;
    int base = info->n_vocab > 400 ? 260 : 0; /* past byte and special tokens */
    for (int r = 0; r < n_req; r++) {
        for (int i = 0; i < n_prompt; i++)
            prompt[i] = base + (int32_t)(((uint64_t)i * 7919u + (uint64_t)r * 104729u + (uint64_t)salt * 15485863u) % (uint64_t)span);
        gl_request req = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = max_tokens, .ignore_eos = true,
                          .prompt_logprobs = -1, .prompt_progress = true, .user = (void *)(intptr_t)r};
        gl_sampling_params_default(&req.sampling);
        req.sampling.temperature = 0;
        gl_error err;
        if (!gl_engine_submit(e, &req, NULL, &err)) {
            fprintf(stderr, "genloop bench: %s\n", err.message);
            free(prompt);
            free(st->got_first);
            return -1;
        }
    }
    free(prompt);
    st->prompt_total = (long)n_req * n_prompt;
    st->gen_total = (long)n_req * max_tokens;
    st->t_progress = now_s();
    /* a line a second while a run is long; GENLOOP_BENCH_PROGRESS_S shortens
     * it so a test sees lines whatever the host's speed */
    const char *every_env = getenv("GENLOOP_BENCH_PROGRESS_S");
    double every = every_env && atof(every_env) > 0 ? atof(every_env) : 1.0;
    while (st->n_finished < n_req) {
        gl_engine_step(e, on_event, st);
        if (now_s() - st->t_progress >= every) {
            st->t_progress = now_s();
            phase("  prompt %ld/%ld tokens, generated %ld/%ld", st->prompt_done, st->prompt_total,
                  st->gen_done, st->gen_total);
        }
    }
    free(st->got_first);
    if (st->error[0]) {
        fprintf(stderr, "genloop bench: %s\n", st->error);
        return -1;
    }
    return 0;
}

/* ---- the command ----------------------------------------------------------------- */

static void usage(FILE *out) {
    fprintf(out,
            "usage: genloop bench -m MODEL [options]\n"
            "\n"
            "  -m, --model PATH    GGUF model\n"
            "  -p N                prompt tokens for prompt processing (default 512)\n"
            "  -n N                tokens to generate (default 128)\n"
            "  -d N                context depth of the single-stream generation run: its prompt\n"
            "                      tokens, so tg shows attention over that many (default 16)\n"
            "  -t, --threads N     compute threads (default: all cores)\n"
            "  -b LIST             batch sizes for aggregate generation, e.g. 1,4,16 (default 1,2,4,8,16)\n"
            "  -r N                repetitions, the median is reported (default 3)\n"
            "  --activation-bits N matmul activation precision: 12 (default; Q4_0/Q4_1, others 16), 16 or 8\n"
            "  --kv-type T         KV cache element type: f16 (default), q8_0 or f32\n"
            "  --json              print one JSON object instead of a table\n"
            "speculative decoding (off here unless --spec; the input-grounded workload is\n"
            "scripts/bench --workload grounded):\n"
            CLI_SPEC_USAGE);
}

static int parse_batches(const char *s, int *out) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        long v;
        char *end;
        v = strtol(tok, &end, 10);
        if (n == MAX_BATCHES || end == tok || *end || v < 1 || v > 256) return -1;
        out[n++] = (int)v;
    }
    return n;
}

int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL;
    long n_prompt = 512, n_gen = 128, n_threads = 0, reps = 3, depth = GEN_PROMPT;
    int batches[MAX_BATCHES] = {1, 2, 4, 8, 16}, n_batches = 5;
    bool json = false;
    gl_engine_params defaults;
    gl_engine_params_default(&defaults);
    /* tg measures decode speed against the roofline and llama-bench: no
     * drafts unless asked (random prompts' greedy loops would be copied) */
    defaults.spec_mode = GL_SPEC_OFF;
    int act_bits = defaults.activation_bits;
    gl_kv_type kv_type = defaults.kv_type;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_set_once("-m", &model_path, v)) return 2;
        } else if (!strcmp(a, "-p")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &n_prompt)) return 2;
        } else if (!strcmp(a, "-n")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_int(a, v, 2, 1 << 20, &n_gen)) return 2;
        } else if (!strcmp(a, "-d")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &depth)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1024, &n_threads)) return 2;
        } else if (!strcmp(a, "-r")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1000, &reps)) return 2;
        } else if (!strcmp(a, "--activation-bits")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_act_bits(a, v, &act_bits)) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_kv_type(a, v, &kv_type)) return 2;
        } else if (!strncmp(a, "--spec", 6) || !strcmp(a, "--model-draft")) {
            if (cli_parse_spec(argc, argv, &i, &defaults) <= 0) {
                if (!strcmp(argv[i], a)) fprintf(stderr, "genloop bench: unknown option '%s'\n", a);
                return 2;
            }
        } else if (!strcmp(a, "-b")) {
            if (!(v = cli_value(argc, argv, &i))) return 2;
            if ((n_batches = parse_batches(v, batches)) <= 0) {
                fprintf(stderr, "genloop: invalid value '%s' for -b: expected up to %d sizes in [1, 256] like 1,4,16\n",
                        v, MAX_BATCHES);
                return 2;
            }
        } else {
            fprintf(stderr, "genloop bench: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model_path) {
        usage(stderr);
        return 2;
    }
    if (n_threads == 0) n_threads = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;

    gl_error err;
    phase("loading %s", model_path);
    gl_model *model = gl_model_load(model_path, &err);
    if (!model) {
        fprintf(stderr, "genloop bench: %s\n", err.message);
        return 1;
    }
    const gl_model_info *info = gl_model_get_info(model);
    int max_batch = 1;
    for (int i = 0; i < n_batches; i++) max_batch = batches[i] > max_batch ? batches[i] : max_batch;
    int ctx = (int)(n_prompt > depth ? n_prompt : depth) + (int)n_gen + 16;

    gl_engine_params ep;
    gl_engine_params_default(&ep);
    ep.n_threads = (int)n_threads;
    ep.kv_cache_tokens = max_batch * (GEN_PROMPT + (int)n_gen + 32) > ctx ? max_batch * (GEN_PROMPT + (int)n_gen + 32)
                                                                         : ctx;
    ep.kv_cache_tokens += 64;
    ep.max_batch_tokens = (int)n_prompt > max_batch * GEN_PROMPT ? (int)n_prompt : max_batch * GEN_PROMPT;
    ep.max_seqs = max_batch;
    ep.n_ctx = ctx;
    ep.prefix_caching = false;
    ep.activation_bits = act_bits;
    ep.kv_type = kv_type;
    cli_copy_spec(&ep, &defaults);
    gl_engine *e = gl_engine_create(model, &ep, &err);
    if (!e) {
        fprintf(stderr, "genloop bench: %s\n", err.message);
        gl_model_free(model);
        return 1;
    }

    double *bw = calloc((size_t)reps, sizeof *bw), *pp = calloc((size_t)reps, sizeof *pp);
    double *tg = calloc((size_t)reps, sizeof *tg), *roof = calloc((size_t)reps, sizeof *roof);
    double *bt = calloc((size_t)reps * (size_t)n_batches, sizeof *bt);
    double bt_med[MAX_BATCHES];
    int rc = 0;
    run_state st;
    /* Warm up: page the weights in, start the workers. */
    phase("warm-up");
    if (run_requests(e, info, 1, 8, 2, 999, &st)) rc = 1;
    for (int r = 0; r < reps && !rc; r++) {
        /* Interleave the measurements so machine noise spreads over all of them. */
        phase("[%d/%ld] prompt processing: %ld tokens", r + 1, reps, n_prompt);
        if (run_requests(e, info, 1, (int)n_prompt, 1, r, &st)) rc = 1;
        else pp[r] = (double)n_prompt / st.t_first_token;
        phase("[%d/%ld] memory bandwidth", r + 1, reps);
        bw[r] = measure_bandwidth((int)n_threads, 3);
        if (!rc) phase("[%d/%ld] generation: %ld tokens at depth %ld", r + 1, reps, n_gen, depth);
        if (!rc && run_requests(e, info, 1, (int)depth, (int)n_gen, 1000 + r, &st) == 0)
            tg[r] = (double)st.tokens_after_first / (now_s() - st.t_all_first);
        else rc = 1;
        /* The machine's bandwidth drifts within minutes (35-68 GB/s seen here
         * a minute apart), so each decode run is set against the mean of the
         * probes just before and just after it. */
        if (!rc) {
            bw[r] = (bw[r] + measure_bandwidth((int)n_threads, 3)) / 2;
            roof[r] = tg[r] * (double)info->weight_bytes / (bw[r] * 1e9);
        }
        for (int b = 0; b < n_batches && !rc; b++) {
            double t0;
            phase("[%d/%ld] batch of %d: %ld tokens each", r + 1, reps, batches[b], n_gen);
            if (run_requests(e, info, batches[b], GEN_PROMPT, (int)n_gen, 2000 + 100 * r + b, &st)) {
                rc = 1;
                break;
            }
            t0 = st.t_all_first;
            bt[b * reps + r] = (double)st.tokens_after_first / (now_s() - t0);
        }
    }
    if (!rc) {
        double bw_m = median(bw, (int)reps), pp_m = median(pp, (int)reps), tg_m = median(tg, (int)reps);
        for (int b = 0; b < n_batches; b++) bt_med[b] = median(bt + b * reps, (int)reps);
        double roof_m = median(roof, (int)reps);
        /* At 16 bits each activation block is two int8 parts, so a weight's
         * multiply-add costs two int8 ones. */
        const char *kernels = gl_kernels_name();
        double ghz = measure_ghz(), macs = layer_macs_per_token(info) * (act_bits == 8 ? 1 : 2);
        long cores = sysconf(_SC_NPROCESSORS_ONLN) > 0 && sysconf(_SC_NPROCESSORS_ONLN) < n_threads
                         ? sysconf(_SC_NPROCESSORS_ONLN) : n_threads;
        double ceiling = (double)int8_macs_per_cycle(kernels, ghz) * (double)cores * ghz * 1e9 / macs;
        double pp_frac = ceiling > 0 ? pp_m / ceiling : 0;
        if (json) {
            printf("{\"model\": \"%s\", \"threads\": %ld, \"activation_bits\": %d, \"kv_type\": \"%s\", \"n_prompt\": %ld, "
                   "\"n_gen\": %ld, \"depth\": %ld, \"reps\": %ld, "
                   "\"pp_tokens_per_s\": %.2f, \"tg_tokens_per_s\": %.2f, \"bandwidth_gb_per_s\": %.2f, "
                   "\"weight_bytes_per_token\": %llu, \"roofline_fraction\": %.4f, \"kernels\": \"%s\", "
                   "\"cpu_ghz\": %.3f, \"int8_macs_per_cycle_core\": %d, \"int8_macs_per_prompt_token\": %.0f, "
                   "\"pp_int8_ceiling_tokens_per_s\": %.1f, \"pp_int8_ceiling_fraction\": %.4f, \"batch_tg_tokens_per_s\": {",
                   info->name, n_threads, act_bits, gl_kv_type_name(kv_type), n_prompt, n_gen, depth, reps, pp_m, tg_m, bw_m,
                   (unsigned long long)info->weight_bytes, roof_m, kernels, ghz, int8_macs_per_cycle(kernels, ghz), macs,
                   ceiling, pp_frac);
            for (int b = 0; b < n_batches; b++) printf("%s\"%d\": %.2f", b ? ", " : "", batches[b], bt_med[b]);
            printf("}}\n");
        } else {
            printf("model               %s\n", info->name);
            printf("threads             %ld\n", n_threads);
            printf("activations         %d-bit\n", act_bits);
            printf("kv cache            %s\n", gl_kv_type_name(kv_type));
            printf("bandwidth           %.2f GB/s\n", bw_m);
            printf("weights per token   %.1f MB\n", (double)info->weight_bytes / 1e6);
            printf("pp%-5ld             %.1f tokens/s\n", n_prompt, pp_m);
            if (ceiling > 0)
                printf("int8 ceiling        %.3f of %.0f tokens/s (%s: %d int8 multiply-adds/cycle/core x %ld x %.2f GHz;"
                       " %.2f G int8 multiply-adds a token)\n",
                       pp_frac, ceiling, kernels, int8_macs_per_cycle(kernels, ghz), cores, ghz, macs / 1e9);
            else printf("int8 ceiling        - (%s kernels)\n", kernels);
            char tg_label[64];
            if (depth == GEN_PROMPT) snprintf(tg_label, sizeof tg_label, "tg%ld", n_gen);
            else snprintf(tg_label, sizeof tg_label, "tg%ld @ depth %ld", n_gen, depth);
            printf("%-20s%.1f tokens/s\n", tg_label, tg_m);
            printf("roofline fraction   %.3f\n", roof_m);
            for (int b = 0; b < n_batches; b++)
                printf("batch %-3d           %.1f tokens/s aggregate (%.2fx single)\n", batches[b], bt_med[b],
                       tg_m > 0 ? bt_med[b] / tg_m : 0);
        }
    }
    free(bw), free(roof), free(pp), free(tg), free(bt);
    gl_engine_free(e);
    gl_model_free(model);
    return rc;
}
