/* config.h -- server settings: built-in defaults, a JSON file, then flags.
 *
 * Every setting has one name used in three places: the key in the JSON file
 * (config/genloop.json), the long flag (--kv-cache-mib; '_' becomes '-'),
 * and --print-config's output. Later sources override earlier ones. */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdio.h>

typedef struct config {
    char host[256];          /* bind address; loopback unless told otherwise */
    int port;                /* 0 = any free port (printed at startup) */
    char model[1024];        /* GGUF path (required) */
    char alias[256];         /* model id shown by /v1/models; "" = file name */
    int threads;             /* engine compute threads; 0 = all cores */
    int kv_cache_mib;        /* KV pool size */
    int block_size;          /* tokens per KV block */
    int max_batch_tokens;    /* token budget of one engine step */
    int max_seqs;            /* sequences decoded together */
    int max_waiting;         /* engine queue bound; beyond it -> 503 */
    int max_body_bytes;      /* request bodies above this -> 413 */
    int n_ctx;               /* per-sequence context; 0 = the model's */
    int timeout;             /* seconds an idle connection is kept */
    int max_n;               /* largest accepted `n` */
} config;

/* Built-in defaults (the same values as config/genloop.json). */
void config_default(config *c);
/* Merge a JSON object file into c. Returns 0, or -1 with a message in err. */
int config_load_file(config *c, const char *path, char *err, size_t err_len);
/* Apply command-line flags (argv[0] is skipped). Sets *config_path when
 * --config is seen (callers load it first, then re-apply flags), *help and
 * *print when asked. Returns 0, or -1 with a message in err. */
int config_parse_args(config *c, int argc, char **argv, const char **config_path,
                      int *help, int *print, char *err, size_t err_len);
/* Range checks on the merged result. Returns 0, or -1 with a message. */
int config_validate(const config *c, char *err, size_t err_len);
void config_print_help(FILE *out, const config *defaults);
void config_print_json(FILE *out, const config *c);

#endif
