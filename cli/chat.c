/* chat.c -- `genloop chat`: an interactive conversation in the terminal.
 *
 * Each turn renders the whole conversation with the model's chat template
 * (the server's renderer), so the engine's prefix cache finds the earlier
 * turns and only the new message is computed. The reply streams to stdout;
 * Ctrl-C stops it (the partial reply stays in the conversation), Ctrl-C or
 * Ctrl-D at the prompt leaves, /reset starts over. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "genloop.h"
#include "genloop_chat.h"

#define MAX_LINE 65536

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: genloop chat -m MODEL [options]\n"
            "\n"
            "Talk to a model in the terminal through its chat template. Type a message\n"
            "and Enter; /reset forgets the conversation, /quit or Ctrl-D leaves;\n"
            "Ctrl-C stops a reply (and at the prompt, leaves).\n"
            "\n"
            "  -m, --model FILE        GGUF model\n"
            "  -s, --system TEXT       system message\n"
            "  -n, --max-tokens N      tokens per reply at most (default: up to the context)\n"
            "      --temp T            temperature, 0 = greedy (default 0.7)\n"
            "      --seed S            RNG seed for reproducible replies\n"
            "      --chat-template NAME  chatml, llama2, llama3, mistral, gemma, phi3, zephyr, or jinja\n"
            "  -t, --threads N         compute threads (default: all cores)\n"
            "  -c, --ctx N             context length (default: the model's)\n"
            "  -h, --help              this text\n");
}

typedef struct conversation {
    gl_chat_message *msgs;
    char **texts;            /* owned contents, parallel to msgs */
    int n, cap;
} conversation;

static int conv_add(conversation *c, const char *role, const char *text, size_t len) {
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        gl_chat_message *m = realloc(c->msgs, (size_t)cap * sizeof *m);
        if (!m) return -1;
        c->msgs = m;
        char **t = realloc(c->texts, (size_t)cap * sizeof *t);
        if (!t) return -1;
        c->texts = t;
        c->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, text, len);
    copy[len] = 0;
    c->texts[c->n] = copy;
    c->msgs[c->n] = (gl_chat_message){ .role = role, .content = copy };
    c->n++;
    return 0;
}

static void conv_truncate(conversation *c, int n) {
    while (c->n > n) free(c->texts[--c->n]);
}

typedef struct reply {
    char *text;              /* what was streamed, for the conversation */
    size_t len, cap;
    gl_event end;            /* the FINISHED event (type 0 until it came); its pointers are not kept */
    char error[512];
} reply;

static void reply_append(reply *r, const char *text, size_t len) {
    if (r->len + len + 1 > r->cap) {
        size_t cap = (r->len + len + 1) * 2;
        char *t = realloc(r->text, cap);
        if (!t) return;
        r->text = t;
        r->cap = cap;
    }
    memcpy(r->text + r->len, text, len);
    r->len += len;
}

static void on_event(const gl_event *ev, void *ctx) {
    reply *r = ctx;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        reply_append(r, ev->text, ev->text_len);
    }
    if (ev->type != GL_EVENT_FINISHED) return;
    r->end = *ev;
    if (ev->error) snprintf(r->error, sizeof r->error, "%s", ev->error);
}

/* One assistant turn for the conversation so far; its text is added to it. */
static int answer(gl_engine *e, const gl_model *model, const gl_chat_template *tpl, conversation *c,
                  const gl_sampling_params *sp, int max_tokens) {
    gl_error err = {{0}};
    char *text = gl_chat_template_render(tpl, c->msgs, c->n, true, &err);
    if (!text) {
        fprintf(stderr, "genloop chat: %s\n", err.message);
        return -1;
    }
    int32_t *ids = NULL;
    int n = gl_tokenize(model, text, strlen(text), GL_TOKENIZE_PARSE_SPECIAL, &ids, &err);
    free(text);
    if (n < 0) {
        fprintf(stderr, "genloop chat: %s\n", err.message);
        return -1;
    }
    int n_stops = 0;
    const char *const *stops = gl_chat_template_stop_strings(tpl, &n_stops);
    gl_request req = { .prompt = ids, .n_prompt = n, .max_tokens = max_tokens, .sampling = *sp,
                       .n_stop = n_stops, .stop = stops, .prompt_logprobs = -1 };
    reply r = {0};
    req.user = &r;
    uint64_t id = gl_engine_submit(e, &req, NULL, &err);
    free(ids);
    if (!id) {
        fprintf(stderr, "genloop chat: %s (/reset starts over)\n", err.message);
        return -1;
    }
    interrupted = 0;
    bool cancelled = false;
    while (r.end.type != GL_EVENT_FINISHED) {
        if (interrupted && !cancelled) {
            gl_engine_cancel(e, id);
            cancelled = true;
        }
        gl_engine_step(e, on_event, &r);
    }
    interrupted = 0;
    printf("\n");
    int rc = 0;
    const gl_event *end = &r.end;
    if (end->finish == GL_FINISH_ERROR) {
        fprintf(stderr, "genloop chat: %s\n", r.error);
        rc = -1;
    } else {
        double decode = end->t_total - end->t_first_token;
        fprintf(stderr, "[%d prompt tokens (%d cached), %d generated, %.1f tokens/s%s]\n", end->n_prompt_tokens,
                end->n_cached_tokens, end->n_generated,
                decode > 0 && end->n_generated > 1 ? (end->n_generated - 1) / decode : 0.0,
                end->finish == GL_FINISH_CANCELLED ? "; stopped"
                : end->finish == GL_FINISH_LENGTH  ? "; length limit" : "");
        if (conv_add(c, "assistant", r.text ? r.text : "", r.len)) rc = -1;
    }
    free(r.text);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    const char *model_path = NULL, *system = NULL, *template_name = NULL, *v;
    long max_tokens = 0, n_threads = 0, n_ctx = 0;
    double temp = 0.7;
    uint64_t seed = 0;
    bool has_seed = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_set_once("-m", &model_path, v)) return 2;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--system")) {
            if (!(system = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(template_name = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 24, &max_tokens)) return 2;
        } else if (!strcmp(a, "--temp")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_float(a, v, 0, 2, &temp)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_u64(a, v, &seed)) return 2;
            has_seed = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1024, &n_threads)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_parse_int(a, v, 16, 1 << 24, &n_ctx)) return 2;
        } else {
            fprintf(stderr, "genloop chat: unknown option '%s' (see genloop chat --help)\n", a);
            return 2;
        }
    }
    if (!model_path) {
        fprintf(stderr, "genloop chat: -m MODEL is required (see genloop chat --help)\n");
        return 2;
    }

    gl_error err = {{0}};
    gl_model *model = gl_model_load(model_path, &err);
    if (!model) {
        fprintf(stderr, "genloop chat: %s\n", err.message);
        return 1;
    }
    const gl_model_info *info = gl_model_get_info(model);
    const char *bos = info->bos_id >= 0 ? gl_token_text(model, info->bos_id) : "";
    const char *eos = info->eos_id >= 0 ? gl_token_text(model, info->eos_id) : "";
    gl_chat_template *tpl = gl_chat_template_create(info->chat_template, template_name, bos, eos, &err);
    gl_engine_params ep;
    gl_engine_params_default(&ep);
    ep.n_threads = (int)n_threads;
    ep.n_ctx = (int)n_ctx;
    ep.max_seqs = 1;
    gl_engine *e = tpl ? gl_engine_create(model, &ep, &err) : NULL;
    if (!e) {
        fprintf(stderr, "genloop chat: %s: %s\n", model_path, err.message);
        gl_chat_template_free(tpl);
        gl_model_free(model);
        return 1;
    }
    gl_sampling_params sp;
    gl_sampling_params_default(&sp);
    sp.temperature = (float)temp;
    sp.seed = seed;
    sp.has_seed = has_seed;

    /* No SA_RESTART: Ctrl-C at the prompt ends the read. */
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    bool tty = isatty(STDIN_FILENO);
    fprintf(stderr, "genloop chat: %s (%s template); /reset starts over, Ctrl-C stops a reply, Ctrl-D leaves\n",
            info->name, gl_chat_template_name(tpl));
    conversation c = {0};
    int rc = 0, base = 0;
    if (system) {
        if (conv_add(&c, "system", system, strlen(system))) rc = 1;
        base = 1; /* /reset keeps the system message */
    }
    char *line = malloc(MAX_LINE);
    if (!line) rc = 1;
    while (rc == 0) {
        printf("> ");
        fflush(stdout);
        interrupted = 0;
        if (!fgets(line, MAX_LINE, stdin)) {
            if (!interrupted && ferror(stdin) && errno != EINTR) rc = 1;
            printf("\n");
            break;
        }
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        if (!tty) printf("%s\n", line); /* echo piped input, so the transcript reads as a dialogue */
        if (len == 0) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            conv_truncate(&c, base);
            printf("(conversation reset)\n");
            continue;
        }
        if (conv_add(&c, "user", line, len)) {
            rc = 1;
            break;
        }
        if (answer(e, model, tpl, &c, &sp, (int)max_tokens)) conv_truncate(&c, c.n - 1);
    }
    free(line);
    conv_truncate(&c, 0);
    free(c.msgs);
    free(c.texts);
    gl_engine_free(e);
    gl_chat_template_free(tpl);
    gl_model_free(model);
    return rc;
}
