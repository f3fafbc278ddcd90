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
/* --activation-bits: 8 or 16; otherwise print the error and return false. */
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

#endif
