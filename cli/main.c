/* main.c -- `genloop <command>`: dispatch to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "genloop.h"
#include "serve.h"

static void usage(FILE *out) {
    fprintf(out,
            "genloop %s -- LLM inference server for GGUF models on the CPU\n"
            "\n"
            "usage: genloop <command> [options]\n"
            "\n"
            "commands:\n"
            "  generate   generate text from a prompt, streamed to stdout\n"
            "  chat       talk to a model in the terminal through its chat template\n"
            "  tokenize   show how a model tokenizes text\n"
            "  serve      run the OpenAI-compatible HTTP server (streaming, metrics, web chat)\n"
            "  bench      measure prompt, generation and batch throughput against memory bandwidth\n"
            "  schema-check  compile JSON Schemas (MaskBench lines) and walk their test instances\n"
            "\n"
            "`genloop <command> --help` describes each command's options.\n",
            GL_VERSION);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("genloop %s\n", GL_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return serve_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "schema-check")) return cmd_schema_check(argc - 1, argv + 1);
    fprintf(stderr, "genloop: unknown command '%s' (try genloop --help)\n", cmd);
    return 2;
}
