/* fuzz_chat_template.c -- the Jinja chat-template interpreter over arbitrary
 * templates and conversations.
 *
 * genloop_chat.h promises that a hostile template cannot crash or hang the
 * process: every limit violation is an error. Input layout: byte 0 picks the
 * override (none, or one of the built-in names) and add_generation_prompt;
 * the rest is split at NUL bytes into the template source, then role /
 * content pairs. With an override the source still goes in (it must be
 * ignored or used safely). A template that builds is rendered twice: once
 * with the fuzzed messages, once with a fixed ordinary conversation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genloop_chat.h"

#define MAX_MSGS 16

static void render(const gl_chat_template *t, const gl_chat_message *msgs, int n, bool gen) {
    gl_error err = {{0}};
    char *out = gl_chat_template_render(t, msgs, n, gen, &err);
    if (!out && !err.message[0]) {
        fprintf(stderr, "fuzz_chat_template: render failed without a message\n");
        abort();
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int n_builtin = 0;
    while (gl_chat_template_builtin_names[n_builtin]) n_builtin++;
    int pick = data[0] % (n_builtin + 2); /* 0: none, 1: "jinja", 2..: built-ins */
    const char *override = pick == 0 ? NULL : pick == 1 ? "jinja" : gl_chat_template_builtin_names[pick - 2];
    bool gen = data[0] & 0x80;

    /* NUL-separated fields, copied so each is NUL-terminated. */
    char *buf = malloc(size);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    char *fields[1 + 2 * MAX_MSGS];
    int n_fields = 0;
    for (char *p = buf; p < buf + size && n_fields < 1 + 2 * MAX_MSGS; p += strlen(p) + 1)
        fields[n_fields++] = p;

    gl_error err = {{0}};
    gl_chat_template *t = gl_chat_template_create(fields[0], override, "<s>", "</s>", &err);
    if (!t) {
        if (!err.message[0]) {
            fprintf(stderr, "fuzz_chat_template: new failed without a message\n");
            abort();
        }
        free(buf);
        return 0;
    }
    (void)gl_chat_template_name(t);
    (void)gl_chat_template_is_model_source(t);
    int n_stop = 0;
    const char *const *stops = gl_chat_template_stop_strings(t, &n_stop);
    for (int i = 0; i < n_stop; i++)
        if (!stops[i]) abort();

    gl_chat_message msgs[MAX_MSGS];
    int n = 0;
    for (int i = 1; i + 1 < n_fields; i += 2)
        msgs[n++] = (gl_chat_message){ fields[i], fields[i + 1][0] == '\x01' ? NULL : fields[i + 1],
                                       fields[i + 1][0] == '{' ? fields[i + 1] : NULL }; /* JSON fields too */
    render(t, msgs, n, gen);
    static const gl_chat_message plain[] = {
        { "system", "You are helpful.", NULL }, { "user", "Hi", NULL }, { "assistant", "Hello!", NULL },
        { "user", "Bye", NULL },
    };
    render(t, plain, 4, gen);
    gl_chat_template_free(t);
    free(buf);
    return 0;
}
