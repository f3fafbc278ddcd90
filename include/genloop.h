/* genloop.h -- the engine's public API.
 *
 * A model is loaded once and is read-only afterwards. An engine owns the KV
 * cache and a scheduler: clients submit requests (token ids + sampling
 * parameters) from any thread, and one thread calls gl_engine_step() in a loop;
 * each step runs one batched forward pass over every scheduled sequence and
 * reports generated text through a callback. The engine knows nothing of HTTP.
 */
#ifndef GL_GENLOOP_H
#define GL_GENLOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GL_VERSION "0.1.0"

/* ---- errors ---------------------------------------------------------------- */
typedef struct gl_error {
    char message[512];        /* one line, no trailing newline */
} gl_error;

/* ---- model ------------------------------------------------------------------ */
typedef struct gl_model gl_model;

typedef struct gl_model_info {
    const char *name;         /* general.name, or the file name */
    const char *arch;         /* general.architecture */
    const char *path;         /* the GGUF file */
    int n_vocab;
    int n_ctx_train;          /* context length from metadata */
    int n_embd;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int n_ff;
    uint64_t n_params;
    uint64_t weight_bytes;    /* bytes of weights read per decoded token */
    int bos_id, eos_id;       /* -1 when absent */
    bool add_bos;             /* tokenizer adds BOS when asked for specials */
    const char *chat_template;/* tokenizer.chat_template, or NULL */
} gl_model_info;

gl_model *gl_model_load(const char *path, gl_error *err);
/* The same, calling progress(fraction done, ctx) as the weights are prepared
 * (the slow part for large models); fraction reaches 1 before it returns. */
typedef void (*gl_load_progress_fn)(float fraction, void *ctx);
gl_model *gl_model_load_progress(const char *path, gl_load_progress_fn progress, void *ctx,
                                 gl_error *err);
void gl_model_free(gl_model *model);
const gl_model_info *gl_model_get_info(const gl_model *model);
/* What a GGUF file says of its model, read from the metadata without
 * loading the weights (a server listing the models it can load). */
typedef struct gl_model_summary {
    char name[256];           /* general.name, or "" */
    char arch[64];            /* general.architecture */
    int n_ctx_train;          /* context length from metadata; 0 when absent */
    bool has_chat_template;   /* tokenizer.chat_template is there */
    uint64_t n_params;        /* elements of its tensors */
    char file_type[16];       /* the most common tensor type ("Q4_1", "F16", ...), "" when none */
} gl_model_summary;
/* Returns false with err naming the file when it is not a readable GGUF. */
bool gl_model_summarize(const char *path, gl_model_summary *out, gl_error *err);

/* ---- tokenizer -------------------------------------------------------------- */
enum {
    GL_TOKENIZE_ADD_SPECIAL = 1,   /* add BOS/EOS as the model's metadata says */
    GL_TOKENIZE_PARSE_SPECIAL = 2, /* "<|im_start|>" in text becomes that token */
};

/* Tokenize text (len bytes). Returns the number of ids written to *ids_out
 * (malloc'd, caller frees), or -1 with err set (e.g. invalid UTF-8). */
int gl_tokenize(const gl_model *model, const char *text, size_t len, int flags,
                int32_t **ids_out, gl_error *err);
/* Text of a token sequence (malloc'd, NUL-terminated); NULL with err on a bad id. */
char *gl_detokenize(const gl_model *model, const int32_t *ids, size_t n, gl_error *err);
/* Raw piece of one token as the vocabulary spells it (for display). */
const char *gl_token_text(const gl_model *model, int32_t id);
/* Bytes the token adds to decoded text (may be a partial UTF-8 sequence,
 * "" for control tokens); NULL for an out-of-range id. */
const char *gl_token_piece(const gl_model *model, int32_t id, size_t *len);
/* True for EOS and end-of-turn tokens (e.g. <|im_end|>, <|eot_id|>). */
bool gl_token_is_eog(const gl_model *model, int32_t id);

/* ---- sampling ---------------------------------------------------------------- */
typedef struct gl_logit_bias {
    int32_t token;
    float bias;               /* added to the logit; -100 bans in practice */
} gl_logit_bias;

typedef struct gl_sampling_params {
    float temperature;        /* 0 = greedy */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off; divides positive logits of seen tokens */
    float presence_penalty;   /* 0 = off */
    float frequency_penalty;  /* 0 = off */
    int penalty_last_n;       /* window of generated+prompt tokens penalised; -1 = all */
    uint64_t seed;            /* per-request RNG seed */
    bool has_seed;            /* false: seed from the clock */
    int n_logit_bias;
    const gl_logit_bias *logit_bias;
    bool logprobs;            /* report each token's logprob (and n_logprobs alternatives);
                                 off saves a softmax over the vocabulary per token */
    int n_logprobs;           /* top alternatives to report per token, 0..20 */
    /* llama.cpp's samplers (docs/sampling.md) */
    float typical_p;          /* locally typical sampling; 1 = off */
    float top_n_sigma;        /* keep logits within n std-devs of the max; <= 0 = off */
    float xtc_probability;    /* chance per token that XTC cuts the top choices; 0 = off */
    float xtc_threshold;      /* XTC cuts the tokens at or above this probability; > 0.5 = off */
    float dynatemp_range;     /* temperature varies in temperature +- range by entropy; 0 = off */
    float dynatemp_exponent;  /* shape of the entropy -> temperature map */
    int mirostat;             /* 0 = off, 1 or 2: replaces the truncations and the draw */
    float mirostat_tau;       /* target surprise in bits */
    float mirostat_eta;       /* learning rate of mu */
    float dry_multiplier;     /* DRY repeat penalty; 0 = off */
    float dry_base;           /* penalty = multiplier * base^(repeat - allowed_length) */
    int dry_allowed_length;   /* repeats this long go unpenalised */
    int dry_penalty_last_n;   /* window DRY scans; -1 = the context, 0 = off */
    int n_dry_breakers;
    const char *const *dry_breakers; /* strings that end a repeat (read at submit) */
} gl_sampling_params;

void gl_sampling_params_default(gl_sampling_params *p);

/* ---- structured output -------------------------------------------------------- */
/* A compiled grammar that constrains generation token by token (README
 * "Structured output"). Compiles are cached by text: the same text returns
 * the same shared grammar. Thread-safe; free releases one reference. */
typedef struct gl_grammar gl_grammar;

/* GBNF text, root rule "root"; NULL with err naming line and column. */
gl_grammar *gl_grammar_from_gbnf(const char *text, size_t len, gl_error *err);
/* A JSON Schema (JSON text); NULL with err naming the keyword's JSON path. */
gl_grammar *gl_grammar_from_json_schema(const char *schema, size_t len, gl_error *err);
/* A regular expression (the subset JSON Schema patterns support) that the
 * whole output matches, ^ and $ implied; NULL with err. */
gl_grammar *gl_grammar_from_regex(const char *regex, size_t len, gl_error *err);
void gl_grammar_free(gl_grammar *g);
/* For combining several schemas in one GBNF text (tool calling): the
 * schema's rules with every name prefixed (its root rule is PREFIX "root"),
 * without the shared JSON rules, which gl_json_schema_gbnf_common() gives
 * once. malloc'd; NULL with err naming the keyword's JSON path. */
char *gl_json_schema_to_gbnf(const char *schema, size_t len, const char *prefix, gl_error *err);
const char *gl_json_schema_gbnf_common(void);
/* A bound on the grammar compiles (gl_grammar_from_*, gl_json_schema_to_gbnf)
 * that the calling thread runs while it is set, all of them together: past
 * it a compile fails, its error names the bound, and `exceeded` says which. */
typedef enum { GL_BUDGET_OK, GL_BUDGET_TIME, GL_BUDGET_MEMORY, GL_BUDGET_CANCELLED } gl_budget_hit;
typedef struct gl_compile_budget {
    double max_seconds;       /* wall time of one compile; 0 = no bound */
    size_t max_bytes;         /* memory the compiler allocates; 0 = no bound */
    const _Atomic int *cancel; /* optional: set nonzero (any thread) to stop the compile */
    gl_budget_hit exceeded;   /* set by a compile that stopped */
} gl_compile_budget;
/* The calling thread's budget from now on (NULL: none); its clock and
 * memory count start here. */
void gl_compile_budget_set(gl_compile_budget *b);
/* Measuring a grammar (genloop schema-check): a text walked through it as
 * generation would walk it, tokenized by the model (no special tokens),
 * each token allowed by the mask computed before it, and an end of
 * generation allowed after the last one. */
typedef struct gl_grammar_probe gl_grammar_probe;
typedef struct gl_grammar_walk {
    bool accepted;            /* every token allowed and the end accepts */
    int n_tokens;             /* tokens of the text */
    int n_masks;              /* masks computed (up to the first refused token) */
    const double *mask_us;    /* each mask's time; valid until the next walk */
} gl_grammar_walk;
gl_grammar_probe *gl_grammar_probe_create(const gl_model *m, gl_error *err);
void gl_grammar_probe_free(gl_grammar_probe *p);
/* false with err only when the text cannot be tokenized or memory fails. */
bool gl_grammar_probe_walk(gl_grammar_probe *p, gl_grammar *g, const char *text, size_t len, gl_grammar_walk *out,
                           gl_error *err);

/* ---- engine ----------------------------------------------------------------- */
typedef struct gl_engine gl_engine;

/* Element type of the KV cache (README "KV cache"). */
typedef enum gl_kv_type {
    GL_KV_F16 = 0,            /* IEEE half: the default */
    GL_KV_Q8_0,               /* 8-bit values, an fp16 scale per 32 channels of a head:
                                 ~1.9x the tokens of F16 in the same memory */
    GL_KV_F32,                /* float: twice F16's memory, for reference runs */
} gl_kv_type;

/* "f16", "q8_0" or "f32"; false for anything else. */
bool gl_kv_type_parse(const char *s, gl_kv_type *out);
const char *gl_kv_type_name(gl_kv_type t);

typedef struct gl_engine_params {
    int n_threads;            /* compute threads; 0 = all cores */
    int kv_cache_tokens;      /* KV pool size in tokens; 0 = from kv_cache_mib */
    int kv_cache_mib;         /* KV pool size in MiB when kv_cache_tokens is 0 */
    int block_size;           /* tokens per KV block */
    gl_kv_type kv_type;       /* K/V element type */
    int max_batch_tokens;     /* token budget of one step */
    int prefill_first_tokens; /* waiting prompts of at most this many tokens run in a step of their
                                 own before the running batch's decodes; 0 = never (docs/scheduling.md) */
    int max_seqs;             /* sequences running at once */
    int max_waiting;          /* waiting-queue bound; submit fails beyond it */
    int n_ctx;                /* per-sequence context limit; 0 = model's */
    bool prefix_caching;      /* reuse cached prompt blocks */
    const char *kv_cache_dir; /* NULL or "": none; else the prefix cache's blocks also go to this
                                 folder and survive restarts (docs/prefix-cache.md) */
    int kv_cache_dir_mib;     /* size bound of kv_cache_dir: oldest entries are deleted past it */
    int activation_bits;      /* 12 (default), 16 or 8: docs/activation-precision.md */
    int spec_mode;            /* speculative decoding: GL_SPEC_NGRAM (default), GL_SPEC_OFF or
                                 GL_SPEC_DRAFT (README "Speculative decoding") */
    const char *spec_draft_model; /* GL_SPEC_DRAFT: GGUF of the draft model (the target's vocabulary);
                                 loaded and owned by the engine */
    int spec_max_tokens;      /* drafted tokens per sequence and step at most, 1..GL_SPEC_MAX */
    int spec_ngram_min;       /* n-gram drafter: shortest suffix matched, >= 1 */
    int spec_ngram_max;       /* n-gram drafter: longest suffix matched, >= spec_ngram_min */
    bool spec_fixed;          /* always draft spec_max_tokens (no adaptive length; for tests) */
} gl_engine_params;

/* Speculative decoding modes (gl_engine_params.spec_mode). */
enum { GL_SPEC_OFF = 0, GL_SPEC_NGRAM = 1, GL_SPEC_DRAFT = 2 };
#define GL_SPEC_MAX 16        /* bound of spec_max_tokens */

void gl_engine_params_default(gl_engine_params *p);
/* The one rule for activation_bits (8, 12 or 16), for clients that check a
 * setting before they create an engine. */
bool gl_activation_bits_valid(int bits);
/* The matrix kernels this process runs: "amx", "avx512", "avx2" or "scalar"
 * (docs/kernels.md; GENLOOP_KERNELS picks another). */
const char *gl_kernels_name(void);

typedef enum gl_finish_reason {
    GL_FINISH_NONE = 0,
    GL_FINISH_STOP,           /* EOS, end-of-turn token, stop string, or a grammar's
                                 structure complete with nothing that can follow */
    GL_FINISH_LENGTH,         /* max_tokens or the context limit */
    GL_FINISH_CANCELLED,      /* gl_engine_cancel */
    GL_FINISH_ERROR,          /* see event.error */
} gl_finish_reason;

const char *gl_finish_reason_str(gl_finish_reason r); /* "stop", "length", ... */

/* A thinking block the output may start with (docs/reasoning.md): the
 * engine counts its tokens and, given a budget, closes it itself. */
typedef struct gl_reasoning {
    const char *open;         /* text that opens the block, e.g. "<think>" */
    const char *close;        /* text that closes it, e.g. "</think>" */
    bool opened;              /* the prompt opened the block: the output starts inside it */
    int budget;               /* tokens inside the block at most, then the engine appends
                                 close's tokens; -1 = no bound */
    bool grammar_after;       /* gl_request.grammar constrains only what follows the block */
} gl_reasoning;

typedef struct gl_request {
    const int32_t *prompt;    /* token ids (copied by submit) */
    int n_prompt;
    int max_tokens;           /* generated tokens at most; <= 0 = up to the context */
    gl_sampling_params sampling;
    int n_stop;
    const char *const *stop;  /* stop strings (copied) */
    bool ignore_eos;
    gl_grammar *grammar;      /* NULL, or the output must match it (the engine takes
                                 a reference): tokens it rejects are masked before
                                 sampling, EOS only where it accepts; stop strings
                                 are not applied (the structure ends generation) */
    int prompt_logprobs;      /* -1: none; else report each prompt token's logprob
                                 with this many top alternatives (for echo) */
    int min_tokens;           /* end-of-generation tokens are banned until this many are generated */
    bool no_prefix_cache;     /* do not reuse cached prompt blocks for this request */
    bool prompt_progress;     /* emit GL_EVENT_PROMPT_PROGRESS while the prompt is prefilled */
    bool no_speculation;      /* never draft for this request (the engine's spec_mode otherwise) */
    const gl_reasoning *reasoning; /* NULL, or the output may start with a thinking block (copied) */
    void *user;               /* passed back in events */
} gl_request;

typedef struct gl_top_logprob {
    int32_t token;
    float logprob;
} gl_top_logprob;

typedef enum gl_event_type {
    GL_EVENT_PROMPT_TOKEN,    /* prompt_logprobs: one per prompt token, in order;
                                 the first has logprob NAN (nothing predicts it) */
    GL_EVENT_TOKEN,           /* one generated token (text may be empty while held back) */
    GL_EVENT_FINISHED,        /* last event of a request */
    GL_EVENT_PROMPT_PROGRESS, /* prompt_progress: once at admission (n_processed = n_cached_tokens),
                                 then after each prefill chunk, the last with n_processed = n_prompt_tokens */
} gl_event_type;

typedef struct gl_event {
    gl_event_type type;
    uint64_t request_id;
    void *user;
    int32_t token;            /* TOKEN: the sampled id; PROMPT_TOKEN: the prompt id */
    const char *text;         /* TOKEN/FINISHED: new complete-UTF-8 text, may be "" */
    size_t text_len;
    float logprob;            /* TOKEN (NAN unless sampling.logprobs), PROMPT_TOKEN: its log-probability */
    int n_top;                /* TOKEN, PROMPT_TOKEN: entries in top */
    const gl_top_logprob *top;
    gl_finish_reason finish;  /* FINISHED */
    int stop_index;           /* FINISHED: the gl_request.stop string that ended it; -1 = none */
    const char *error;        /* FINISHED with GL_FINISH_ERROR */
    int n_prompt_tokens;      /* FINISHED, PROMPT_PROGRESS: usage */
    int n_cached_tokens;      /* FINISHED, PROMPT_PROGRESS: prompt tokens served from the prefix cache */
    int n_processed;          /* PROMPT_PROGRESS: prompt tokens in the cache so far, cached ones included */
    int n_generated;          /* TOKEN/FINISHED: tokens generated so far */
    int n_reasoning_tokens;   /* TOKEN/FINISHED: of those, the thinking block's (gl_request.reasoning) */
    double t_queued;          /* FINISHED, PROMPT_PROGRESS: seconds spent waiting */
    double t_first_token;     /* FINISHED: seconds from submit to the first token */
    double t_total;           /* FINISHED: seconds from submit to finish; PROMPT_PROGRESS: to now */
    int n_draft_tokens;       /* FINISHED: tokens drafted for this request (speculative decoding) */
    int n_accepted_tokens;    /* FINISHED: of which accepted */
} gl_event;

typedef void (*gl_event_fn)(const gl_event *ev, void *ctx);

typedef struct gl_engine_stats {
    int n_running;            /* sequences in the batch */
    int n_waiting;            /* queued, not yet admitted */
    int n_blocks_total;
    int n_blocks_used;        /* held by running sequences */
    int spec_draft_blocks_used; /* GL_SPEC_DRAFT: blocks of the draft model's own pool held */
    int block_size;
    int kv_capacity_tokens;   /* n_blocks_total * block_size */
    uint64_t n_preemptions;
    uint64_t prefix_queries;  /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_hits;     /* of which found (in memory or in kv_cache_dir) */
    uint64_t disk_loaded;     /* kv_cache_dir: blocks read back */
    uint64_t disk_written;    /* kv_cache_dir: blocks written */
    uint64_t disk_evicted;    /* kv_cache_dir: entries deleted for the size bound */
    uint64_t disk_skipped;    /* kv_cache_dir: files skipped as corrupt, truncated or foreign */
    uint64_t disk_dropped;    /* kv_cache_dir: blocks not written (queue full, disk error) */
    uint64_t disk_bytes;      /* kv_cache_dir: bytes of its entries now */
    uint64_t n_steps;         /* steps that ran a forward pass */
    int last_batch_seqs;      /* sequences in the latest such step */
    int last_batch_tokens;    /* tokens in the latest such step */
    uint64_t spec_drafts;     /* speculative decoding: drafts verified (one per sequence and step) */
    uint64_t spec_draft_tokens; /* tokens in them */
    uint64_t spec_accepted_tokens; /* of which accepted */
    uint64_t spec_accepted_at[GL_SPEC_MAX]; /* accepted drafted tokens at each draft position */
} gl_engine_stats;

gl_engine *gl_engine_create(gl_model *model, const gl_engine_params *params, gl_error *err);
void gl_engine_free(gl_engine *engine);

/* Queue a request; thread-safe. Returns its id (> 0), or 0 with err set when
 * the request can never run (prompt too long) or the waiting queue is full
 * (*queue_full set). */
uint64_t gl_engine_submit(gl_engine *engine, const gl_request *req, bool *queue_full, gl_error *err);
/* Ask a request to stop; thread-safe; it finishes within one step. */
void gl_engine_cancel(gl_engine *engine, uint64_t request_id);
/* Run one step: schedule, one forward pass, sample, emit events. Returns
 * the number of sequences that ran (0 = idle). Not thread-safe: one caller. */
int gl_engine_step(gl_engine *engine, gl_event_fn on_event, void *ctx);
/* Block until there is work or gl_engine_wake() is called. */
void gl_engine_wait(gl_engine *engine);
void gl_engine_wake(gl_engine *engine);
void gl_engine_get_stats(gl_engine *engine, gl_engine_stats *out);

#endif
