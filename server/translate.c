/* translate.c -- the pieces the translated APIs share (translate.h). */
#include "translate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const cJSON *tr_given(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool listed(const char *const *list, const char *key) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], key)) return true;
    return false;
}

int tr_copy_fields(const api_server *a, const cJSON *body, const char *const *own, cJSON *chat,
                   params_error *e) {
    /* Chat's fields that the translation writes itself, or that these APIs
     * spell otherwise or do not have. */
    static const char *const chat_only[] = {
        "messages", "prompt", "max_tokens", "max_completion_tokens", "n", "stop", "response_format",
        "json_schema", "logprobs", "top_logprobs", "n_probs", "stream_options", "functions",
        "function_call", "audio", "modalities", "add_generation_prompt", "continue_final_message",
        "reasoning_effort", "return_progress", "tools", "tool_choice", "parallel_tool_calls",
        "echo", "suffix", "best_of", NULL };
    for (const cJSON *f = body->child; f; f = f->next) {
        if (listed(own, f->string)) continue;
        if (listed(chat_only, f->string)) {
            if (!a->cfg->lenient_params)
                return params_fail(e, 400, f->string, "unsupported_parameter",
                                   "Unrecognized request argument supplied: %s", f->string);
            fprintf(stderr, "genloop: ignoring unknown request field '%.100s' (--lenient-params)\n", f->string);
            continue;
        }
        cJSON *copy = cJSON_Duplicate(f, 1);
        if (!copy || !cJSON_AddItemToObject(chat, f->string, copy)) {
            cJSON_Delete(copy);
            return params_fail(e, 500, NULL, NULL, "out of memory");
        }
    }
    return 0;
}

int tr_neutral_only(const cJSON *body, const char *key, const char *neutral, params_error *e) {
    const cJSON *v = tr_given(body, key);
    if (!v) return 0;
    cJSON *n = cJSON_Parse(neutral);
    bool same = cJSON_Compare(v, n, true);
    cJSON_Delete(n);
    if (same) return 0;
    return params_fail(e, 400, key, "unsupported_parameter",
                       "'%s' is not supported by this server (only %s is accepted)", key, neutral);
}

/* Replaces the first `from` in s (of size cap) by `to`. */
static void replace_once(char *s, size_t cap, const char *from, const char *to) {
    char *at = strstr(s, from);
    if (!at) return;
    char rest[512];
    snprintf(rest, sizeof rest, "%s", at + strlen(from));
    snprintf(at, cap - (size_t)(at - s), "%s%s", to, rest);
}

void tr_rename_error(params_error *e, const char *const (*names)[2]) {
    for (int i = 0; names[i][0]; i++) {
        size_t n = strlen(names[i][0]);
        if (strncmp(e->param, names[i][0], n) || (e->param[n] && e->param[n] != '[' && e->param[n] != '.'))
            continue;
        char param[sizeof e->param], quoted[80];
        snprintf(param, sizeof param, "%s%s", names[i][1], e->param + n);
        char to[80];
        snprintf(quoted, sizeof quoted, "'%s", names[i][0]);
        snprintf(to, sizeof to, "'%s", names[i][1]);
        if (strstr(e->message, quoted)) {
            replace_once(e->message, sizeof e->message, quoted, to);
        } else { /* "Unrecognized request argument supplied: NAME" */
            snprintf(quoted, sizeof quoted, ": %s", names[i][0]);
            snprintf(to, sizeof to, ": %s", names[i][1]);
            replace_once(e->message, sizeof e->message, quoted, to);
        }
        snprintf(e->param, sizeof e->param, "%s", param);
        return;
    }
}

jbuf *tr_event_begin(job *j, const char *name) {
    jbuf_printf(&j->chunk, "event: %s\ndata: ", name);
    return &j->chunk;
}

void tr_event_end(job *j) {
    jbuf_puts(&j->chunk, "\n\n");
    job_send(j);
}

int tr_output_call(tr_output *o, const char *id, const char *name) {
    tr_call *calls = realloc(o->calls, (size_t)(o->n_calls + 1) * sizeof *calls);
    if (!calls) return -1;
    o->calls = calls;
    tr_call *c = &calls[o->n_calls];
    memset(c, 0, sizeof *c);
    snprintf(c->id, sizeof c->id, "%s", id);
    c->name = strdup(name);
    if (!c->name) return -1;
    o->n_calls++;
    return 0;
}

int tr_output_from_seq(tr_output *o, job_seq *s) {
    chat_result r;
    chat_result_get(s, &r);
    int rc = 0;
    o->finish_reason = r.finish_reason;
    if (r.reasoning) jbuf_raw(&o->reasoning, r.reasoning, r.reasoning_len);
    if (r.content) jbuf_raw(&o->content, r.content, r.content_len);
    for (int k = 0; k < r.n_calls && rc == 0; k++) {
        char id[96];
        chat_call_id(id, sizeof id, s, k);
        rc = tr_output_call(o, id, r.calls[k].name);
        if (rc == 0) jbuf_puts(&o->calls[k].args, r.calls[k].arguments);
    }
    return rc || o->reasoning.oom || o->content.oom ? -1 : 0;
}

void tr_output_free(tr_output *o) {
    jbuf_free(&o->reasoning);
    jbuf_free(&o->content);
    for (int k = 0; k < o->n_calls; k++) {
        free(o->calls[k].name);
        jbuf_free(&o->calls[k].args);
    }
    free(o->calls);
    memset(o, 0, sizeof *o);
}

cJSON *tr_parse_or_empty(const char *text, size_t len) {
    cJSON *v = text && len ? cJSON_ParseWithLength(text, len) : NULL;
    return v ? v : cJSON_CreateObject();
}
