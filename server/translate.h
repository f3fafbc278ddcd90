/* translate.h -- what the APIs translated onto chat completions share
 * (api_responses.c, api_anthropic.c): building the chat request body,
 * naming their own fields in chat's errors, SSE events with names, and a
 * choice's output gathered as it streams. */
#ifndef GL_TRANSLATE_H
#define GL_TRANSLATE_H

#include <cjson/cJSON.h>

#include "api_chat.h"

/* A field that is absent or null is not given. */
const cJSON *tr_given(const cJSON *obj, const char *key);

/* Copies the request's fields that mean the same in chat (samplers,
 * extensions, bookkeeping) into chat; `own` lists the API's fields the
 * translation handles itself (NULL-terminated). A field of chat's own
 * vocabulary that this API does not have (messages, n, stop, ...) is a 400
 * naming it, as an unknown field is (chat's check finds the rest). */
int tr_copy_fields(const api_server *a, const cJSON *body, const char *const *own, cJSON *chat,
                   params_error *e);

/* A field accepted only with the value that changes nothing (a JSON text), or null. */
int tr_neutral_only(const cJSON *body, const char *key, const char *neutral, params_error *e);

/* A chat field's name in the API's terms: pairs {chat name, API name},
 * NULL-terminated. A param starting with a chat name is renamed, and the
 * message's first quote of it too. */
void tr_rename_error(params_error *e, const char *const (*names)[2]);

/* Starts an SSE event "event: NAME" in j->chunk; returns it for the data's JSON. */
jbuf *tr_event_begin(job *j, const char *name);
void tr_event_end(job *j); /* ends the event and sends it */

/* A choice's output: the thinking, the answer, the tool calls. */
typedef struct tr_call {
    char id[96];
    char *name;
    jbuf args;               /* JSON text */
} tr_call;

typedef struct tr_output {
    jbuf reasoning, content;
    tr_call *calls;
    int n_calls;
    const char *finish_reason; /* chat's: "stop", "length", "tool_calls", or NULL */
} tr_output;

/* A call started (the stream's chat_stream_ops.call); 0 or -1 out of memory. */
int tr_output_call(tr_output *o, const char *id, const char *name);
/* A finished non-stream choice's output. */
int tr_output_from_seq(tr_output *o, job_seq *s);
void tr_output_free(tr_output *o);

/* A JSON text as a value (tool arguments), or an empty object when it is not JSON. */
cJSON *tr_parse_or_empty(const char *text, size_t len);

#endif
