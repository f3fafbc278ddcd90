/* main.c -- `genloop <command>`: dispatch and the shared argument helpers. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
            "  tokenize   show how a model tokenizes text\n"
            "  serve      run the OpenAI-compatible HTTP server (streaming, metrics, web chat)\n"
            "  bench      measure prompt, generation and batch throughput against memory bandwidth\n"
            "\n"
            "`genloop <command> --help` describes each command's options.\n",
            GL_VERSION);
}

/* s as a whole decimal integer, nothing before or after it. */
static bool parse_whole_long(const char *s, long *out) {
    char *end;
    errno = 0;
    *out = strtol(s, &end, 10);
    return !errno && end != s && !*end;
}

bool cli_parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
    long v;
    if (!parse_whole_long(s, &v) || v < lo || v > hi) {
        fprintf(stderr, "genloop: invalid value '%s' for %s: expected an integer in [%ld, %ld]\n", s, flag, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "genloop: invalid value '%s' for %s: expected a non-negative integer\n", s, flag);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "genloop: invalid value '%s' for %s: expected a number in [%g, %g]\n", s, flag, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_act_bits(const char *flag, const char *s, int *out) {
    long v;
    if (!parse_whole_long(s, &v) || (v != 8 && v != 16)) {
        fprintf(stderr, "genloop: invalid value '%s' for %s: activation_bits must be 8 or 16\n", s, flag);
        return false;
    }
    *out = (int)v;
    return true;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "genloop: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
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
    fprintf(stderr, "genloop: unknown command '%s' (try genloop --help)\n", cmd);
    return 2;
}
