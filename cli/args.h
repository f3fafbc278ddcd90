/* args.h -- strict parsing of command-line values, shared by the subcommands. */
#ifndef GL_CLI_ARGS_H
#define GL_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "genloop.h"

/* Parse a whole string as a number in [lo, hi]; on failure print
 * "genloop: invalid value 'x' for --flag: ..." and return false. */
bool cli_parse_int(const char *flag, const char *s, long lo, long hi, long *out);
bool cli_parse_u64(const char *flag, const char *s, uint64_t *out);
bool cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out);
/* --activation-bits: 8, 12 or 16; otherwise print the error and return false. */
bool cli_parse_act_bits(const char *flag, const char *s, int *out);
/* --kv-type: f16, q8_0 or f32; otherwise print the error and return false. */
bool cli_parse_kv_type(const char *flag, const char *s, gl_kv_type *out);
/* The value after argv[*i] (advancing *i), or NULL after printing an error. */
const char *cli_value(int argc, char **argv, int *i);
/* *slot = value unless it was set already: then print "genloop: FLAG given
 * twice" and return false (a second -m must not silently win). */
bool cli_set_once(const char *flag, const char **slot, const char *value);

/* Speculative decoding flags shared by generate, bench and serve:
 * --spec ngram|draft|off, --model-draft FILE, --spec-max-tokens N, --spec-ngram-min N, --spec-ngram-max N.
 * Returns 1 when argv[*i] was one (applied to p, *i advanced), 0 when it is
 * not, -1 after printing an error. */
struct gl_engine_params;
int cli_parse_spec(int argc, char **argv, int *i, struct gl_engine_params *p);
/* Copy the speculative-decoding settings cli_parse_spec filled in from into to. */
void cli_copy_spec(struct gl_engine_params *to, const struct gl_engine_params *from);
#define CLI_SPEC_USAGE \
    "      --spec MODE         speculative decoding: ngram (prompt lookup), draft (a draft model) or off\n" \
    "                          (default: ngram)\n" \
    "      --model-draft FILE  the draft model for --spec draft (the target's vocabulary)\n" \
    "      --spec-max-tokens N drafted tokens per step at most (default 8, up to 16)\n" \
    "      --spec-ngram-min N  shortest n-gram looked up (default 2)\n" \
    "      --spec-ngram-max N  longest n-gram looked up (default 4)\n" \
    "      --spec-fixed        always draft --spec-max-tokens (no adaptive length)\n"

/* llama.cpp's sampler flags (docs/sampling.md), with its names: --typical P,
 * --top-nsigma N, --xtc-probability P, --xtc-threshold T, --dynatemp-range R,
 * --dynatemp-exp E, --mirostat 0|1|2, --mirostat-ent TAU, --mirostat-lr ETA,
 * --dry-multiplier M, --dry-base B, --dry-allowed-length N,
 * --dry-penalty-last-n N and --dry-sequence-breaker STR (repeatable; the
 * first replaces the defaults, kept in breakers[0..cap)). Returns 1 when
 * argv[*i] was one (applied to sp, *i advanced), 0 when it is not, -1 after
 * printing an error. */
int cli_parse_sampler(int argc, char **argv, int *i, gl_sampling_params *sp, const char **breakers, int cap);
#define CLI_SAMPLER_USAGE \
    "      --typical P         locally typical sampling (default 1 = off)\n" \
    "      --top-nsigma N      keep logits within N standard deviations of the top (default -1 = off)\n" \
    "      --xtc-probability P XTC: chance per token of excluding the top choices (default 0 = off)\n" \
    "      --xtc-threshold T   XTC: probability a top choice must reach (default 0.1)\n" \
    "      --dynatemp-range R  dynamic temperature in temp +- R (default 0 = off)\n" \
    "      --dynatemp-exp E    dynamic temperature exponent (default 1)\n" \
    "      --mirostat N        mirostat 1 or 2 instead of top-k/top-p/min-p (default 0 = off)\n" \
    "      --mirostat-ent TAU  mirostat target surprise in bits (default 5)\n" \
    "      --mirostat-lr ETA   mirostat learning rate (default 0.1)\n" \
    "      --dry-multiplier M  DRY repetition penalty (default 0 = off)\n" \
    "      --dry-base B        DRY penalty base (default 1.75)\n" \
    "      --dry-allowed-length N  DRY: repeats this long are free (default 2)\n" \
    "      --dry-penalty-last-n N  DRY: tokens scanned (default -1 = the context; 0 = off)\n" \
    "      --dry-sequence-breaker STR  text that ends a repeat (repeatable; default \\n : \" *)\n"

#endif
