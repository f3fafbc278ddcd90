/* api_chat.h -- POST /v1/chat/completions (OpenAI Chat Completions API).
 *
 * The conversation is rendered with the model's chat template (built once
 * at model load by chat_setup) and then generated like a completion.
 *
 * Accepted: model, messages (system/developer, user, assistant; content a
 * string or an array of {type:"text", text} parts), max_tokens,
 * max_completion_tokens, temperature, top_p, n, stop, seed, presence_penalty,
 * frequency_penalty, logit_bias, logprobs, top_logprobs, stream,
 * stream_options, user, response_format {"type":"text"}; extensions top_k,
 * min_p, repetition_penalty, ignore_eos. Tools, functions, other response formats,
 * audio, modalities and non-text content parts are a 400 naming the field,
 * as is anything unknown. Responses carry `timings` besides `usage`. */
#ifndef GL_API_CHAT_H
#define GL_API_CHAT_H

#include "http.h"
#include "job.h"
#include "tools.h"

struct api_server;

/* At model load: build the chat template from the model's metadata and the
 * chat_template setting, and log which one is used. A model whose template
 * cannot be used only gets a warning; chat requests then fail clearly. */
void chat_setup(models_entry *m, const config *cfg);
void chat_teardown(models_entry *m);

void chat_handle(http_req *req, void *ctx); /* ctx: api_server */

/* ---- for the APIs translated onto chat (api_responses.h, api_anthropic.h) ----
 * They rewrite their request as a chat request body, run it as a chat job
 * (the same template, constraints, tools, speculation and metrics), and
 * write chat's results in their own shapes: their job_ops are chat's with
 * parse, the stream writers and the reply replaced. */

const job_ops *chat_job_ops(void);
/* Chat's ops->parse: a chat request body into the job. */
int chat_parse(job *j, const cJSON *body, params_error *e);

/* A choice's output as it streams, in order: thinking, then the answer's
 * text or its tool calls, then the finish. */
typedef struct chat_stream_ops {
    /* The thinking (reasoning_content) where the template's reasoning is
     * separated from the answer; NULL: it is not. */
    void (*reasoning)(job_seq *s, const char *p, size_t n);
    void (*content)(job_seq *s, const char *p, size_t n);
    void (*call)(job_seq *s, int index, const char *id, const char *name); /* a tool call starts */
    void (*args)(job_seq *s, int index, const char *p, size_t n); /* a piece of its arguments */
    /* The seq is done: "stop", "length", "tool_calls", or NULL when it was
     * cut short (j->unfinished_err says why). */
    void (*finish)(job_seq *s, const char *reason, bool with_timings);
} chat_stream_ops;

/* An ops->stream_flush: sends the seq's new output through ops. */
void chat_stream_drive(job_seq *s, const chat_stream_ops *ops, bool with_timings);

/* A finished choice (non-stream). */
typedef struct chat_result {
    const char *content;     /* the answer's text; NULL when the reply is tool calls */
    size_t content_len;
    const char *reasoning;   /* the thinking when separated (reasoning_content), else NULL */
    size_t reasoning_len;
    const tool_call *calls;  /* the complete tool calls (the seq's: valid while it lives) */
    int n_calls;
    const char *finish_reason; /* as chat_stream_ops.finish gets it */
} chat_result;

void chat_result_get(job_seq *s, chat_result *r);
/* Tool call k's id, as chat completions name it. */
void chat_call_id(char *out, size_t size, const job_seq *s, int k);

#endif
