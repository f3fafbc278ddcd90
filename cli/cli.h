/* cli.h -- the genloop command line: one function per subcommand, and the
 * strict number parsing they share. */
#ifndef GL_CLI_H
#define GL_CLI_H

#include <stdbool.h>
#include <stdint.h>

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* Parse a whole string as a number in [lo, hi]; on failure print
 * "genloop: invalid value 'x' for --flag: ..." and return false. */
bool cli_parse_int(const char *flag, const char *s, long lo, long hi, long *out);
bool cli_parse_u64(const char *flag, const char *s, uint64_t *out);
bool cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out);
/* --activation-bits: 8 or 16; otherwise print the error and return false. */
bool cli_parse_act_bits(const char *flag, const char *s, int *out);
/* The value after argv[*i] (advancing *i), or NULL after printing an error. */
const char *cli_value(int argc, char **argv, int *i);

#endif
