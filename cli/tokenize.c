/* tokenize.c -- `genloop tokenize`: show how a model's tokenizer splits a text.
 *
 *   genloop tokenize -m MODEL -p TEXT [--ids] [--no-special]
 *
 * One line per token, "ID<TAB>'piece'", or with --ids a JSON array of ids.
 * BOS/EOS are added as the model's metadata says; special-token text such as
 * "<|im_start|>" becomes that token unless --no-special is given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "genloop.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: genloop tokenize -m MODEL -p TEXT [--ids] [--no-special]\n"
            "  -m, --model PATH   GGUF model (a vocab-only GGUF works too)\n"
            "  -p, --prompt TEXT  text to tokenize\n"
            "  --ids              print only a JSON array of token ids\n"
            "  --no-special       treat special-token text like <|im_start|> as plain text\n");
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    size_t need = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (need == 0 || need > n) return 0;
    for (size_t k = 1; k < need; k++)
        if ((s[k] & 0xc0) != 0x80) return 0;
    return need;
}

/* Print bytes between single quotes, escaping what a terminal would hide:
 * control bytes, quotes, backslashes and bytes of incomplete UTF-8. */
static void print_escaped(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    putchar('\'');
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len;
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\'' || c == '\\') printf("\\%c", c);
        else if (c >= 0x20 && c < 0x7f) putchar(c);
        else if (c >= 0x80 && (len = utf8_seq(s + i, n - i)) > 0) {
            fwrite(s + i, 1, len, stdout);
            i += len;
            continue;
        } else printf("\\x%02x", c);
        i++;
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    bool ids_only = false, special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            if (!cli_set_once("-m", &model_path, argv[++i])) return 2;
        }
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if (!strcmp(a, "--ids")) ids_only = true;
        else if (!strcmp(a, "--no-special")) special = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "genloop tokenize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model_path || !prompt) {
        fprintf(stderr, "genloop tokenize: %s is required\n", !model_path ? "-m MODEL" : "-p TEXT");
        usage(stderr);
        return 2;
    }

    gl_error err = {0};
    gl_model *model = gl_model_load(model_path, &err);
    if (!model) {
        fprintf(stderr, "genloop tokenize: %s\n", err.message);
        return 1;
    }
    int32_t *ids = NULL;
    int flags = GL_TOKENIZE_ADD_SPECIAL | (special ? GL_TOKENIZE_PARSE_SPECIAL : 0);
    int n = gl_tokenize(model, prompt, strlen(prompt), flags, &ids, &err);
    if (n < 0) {
        fprintf(stderr, "genloop tokenize: %s\n", err.message);
        gl_model_free(model);
        return 1;
    }

    int rc = 0;
    if (ids_only) {
        putchar('[');
        for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        puts("]");
    } else {
        /* A token's piece is what it adds to the decoded text of the tokens
         * before it; decoding prefixes keeps the first-token space rule. */
        size_t prev_len = 0;
        for (int i = 0; i < n; i++) {
            char *text = gl_detokenize(model, ids, (size_t)i + 1, &err);
            if (!text) {
                fprintf(stderr, "genloop tokenize: %s\n", err.message);
                rc = 1;
                break;
            }
            size_t len = strlen(text);
            size_t start = prev_len <= len ? prev_len : len;
            printf("%d\t", ids[i]);
            /* Control tokens add no text: show their spelling instead. */
            if (len == start && gl_token_text(model, ids[i])) {
                const char *raw = gl_token_text(model, ids[i]);
                print_escaped(raw, strlen(raw));
            } else {
                print_escaped(text + start, len - start);
            }
            putchar('\n');
            prev_len = len;
            free(text);
        }
    }
    free(ids);
    gl_model_free(model);
    return rc;
}
