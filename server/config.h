/* config.h -- server settings: built-in defaults, a JSON file, then flags.
 *
 * Every setting has one name used in three places: the key in the JSON file
 * (config/genloop.json), the long flag (--kv-cache-mib; '_' becomes '-'),
 * and --print-config's output. Later sources override earlier ones; a list
 * setting (cors_origin) given several times on the command line collects
 * every value, replacing the file's. */
#ifndef GL_CONFIG_H
#define GL_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

/* One entry of the config file's `models` list (docs/models-multi.md);
 * 0 or "" in a per-model setting means the server's own. */
#define CONFIG_MAX_MODELS 32
typedef struct config_model {
    char name[256];          /* the model's id in the API */
    char path[1024];         /* GGUF file */
    char alias[1024];        /* comma list of more names */
    int n_ctx;               /* context per sequence */
    char kv_type[16];
    int activation_bits;
    int kv_cache_mib;
    char model_draft[1024];  /* draft model for speculative decoding (spec "draft" for this model) */
} config_model;

typedef struct config {
    char host[256];          /* bind address; loopback unless told otherwise */
    int port;                /* 0 = any free port (printed at startup) */
    char model[1024];        /* GGUF path (required) */
    char served_model_name[256]; /* model id shown by /v1/models and in responses; "" = first alias, else file name */
    char alias[1024];        /* comma list of more names the model answers to (repeatable flag) */
    bool strict_model;       /* a request's `model` must name this model (else 404); off: any name */
    bool lenient_params;     /* unknown request fields are logged and ignored instead of 400 */
    int shutdown_timeout;    /* seconds running/queued requests may take to finish on SIGTERM */
    char chat_template[64];  /* "" = the model's template (or a guess); else a built-in name or "jinja" */
    char reasoning_format[16]; /* none, auto or deepseek: where a reply's thinking goes (docs/reasoning.md) */
    int reasoning_budget;    /* thinking tokens at most before the engine closes the block; -1 = no bound */
    int threads;             /* engine compute threads; 0 = all cores */
    int activation_bits;     /* matmul activation precision: 16 or 8 (faster, less precise) */
    int kv_cache_mib;        /* KV pool size */
    char kv_cache_dir[1024]; /* "" = none; else the prefix cache also lives in this folder (docs/prefix-cache.md) */
    int kv_cache_dir_size;   /* MiB the folder may take; oldest entries are deleted past it */
    char kv_type[16];        /* KV element type: f16, q8_0 (about half the memory a token) or f32 */
    int block_size;          /* tokens per KV block */
    int max_batch_tokens;    /* token budget of one engine step */
    int prefill_first_tokens; /* short waiting prompts run alone before the decodes (0: never) */
    int max_seqs;            /* sequences decoded together */
    int max_waiting;         /* engine queue bound; beyond it -> 503 */
    int grammar_compile_ms;  /* one request's grammar compile at most (then 400) */
    int grammar_compile_mib; /* memory one grammar compile may allocate (then 400) */
    int max_body_bytes;      /* request bodies above this -> 413 */
    int n_ctx;               /* per-sequence context; 0 = the model's */
    char spec[16];           /* speculative decoding: "ngram", "draft" or "off" */
    char model_draft[1024];  /* draft model GGUF for spec "draft" */
    int spec_max_tokens;     /* drafted tokens per sequence and step at most */
    int spec_ngram_min;      /* n-gram drafter: shortest suffix looked up */
    int spec_ngram_max;      /* n-gram drafter: longest suffix looked up */
    bool spec_fixed;         /* always draft spec_max_tokens (no adaptive length) */
    int timeout;             /* seconds an idle keep-alive connection is kept */
    int header_timeout;      /* seconds a new connection has to send its request head */
    int body_timeout;        /* seconds a request body may pause between two reads */
    int max_connections;     /* open connections at most; beyond it the oldest idle one is closed */
    int max_connections_per_address; /* the same per client address; 0 = no cap */
    int stream_buffer_bytes; /* unsent stream bytes per client; beyond it the client is dropped */
    /* request limits (each violation is a 400 naming the field) */
    int max_n;               /* largest accepted `n` */
    int max_prompt_tokens;   /* tokens per prompt; 0 = the context length */
    int max_tokens_cap;      /* largest max_tokens; 0 = the context length */
    int max_stop;            /* stop strings per request */
    int max_stop_bytes;      /* bytes per stop string */
    int max_logit_bias;      /* logit_bias entries per request */
    /* access */
    char api_key[512];       /* "" = no key needed; else `Authorization: Bearer KEY` */
    char api_key_file[1024]; /* file holding the key (read at startup) */
    bool metrics_vllm_names; /* /metrics also under vLLM's names (endpoint pickers; docs/prefix-cache.md) */
    bool metrics_public;     /* /metrics answers without the key */
    char cors_origin[1024];  /* comma list of allowed Origins ("*" = any); "" = no CORS */
    /* many models (docs/models-multi.md) */
    char models_dir[1024];   /* every .gguf in it can be served, loaded on demand */
    int models_max_loaded;   /* models in memory at once; 0 = no bound */
    int models_memory;       /* MiB of weights and KV pools loaded at once; 0 = no bound */
    int keep_alive;          /* seconds an idle on-demand model stays loaded; 0 = forever */
    config_model models[CONFIG_MAX_MODELS]; /* the config file's `models` list */
    int n_models;
} config;

/* Built-in defaults (the same values as config/genloop.json). */
void config_default(config *c);
/* Merge a JSON object file into c. Returns 0, or -1 with a message in err. */
int config_load_file(config *c, const char *path, char *err, size_t err_len);
/* Apply command-line flags (argv[0] is skipped). Sets *config_path when
 * --config is seen (callers load it first, then re-apply flags), *help and
 * *print when asked. Returns 0, or -1 with a message in err. */
int config_parse_args(config *c, int argc, char **argv, const char **config_path,
                      bool *help, bool *print, char *err, size_t err_len);
/* Range checks on the merged result. Returns 0, or -1 with a message. */
int config_validate(const config *c, char *err, size_t err_len);
/* When api_key_file is set, reads the key from it into api_key (surrounding
 * whitespace dropped). Returns 0, or -1 with a message. */
int config_read_api_key(config *c, char *err, size_t err_len);
void config_print_help(FILE *out, const config *defaults);
void config_print_json(FILE *out, const config *c);

#endif
