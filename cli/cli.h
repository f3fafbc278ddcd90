/* cli.h -- the genloop subcommands, one function each (main.c dispatches;
 * args.h has the value parsing they share). */
#ifndef GL_CLI_H
#define GL_CLI_H

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_schema_check(int argc, char **argv);

#endif
