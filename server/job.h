/* job.h -- one completion-style API request ("job") and the engine requests
 * ("seqs", one per choice) it fans out into.
 *
 * job_handle parses the body through the endpoint's job_ops, submits every
 * seq, and then follows the engine events: each seq collects its text and
 * finish; streaming writes SSE chunks as tokens come, otherwise the whole
 * response goes out once every seq has finished. Usage, timings, the log
 * line, metrics and errors (rejected submits, engine errors) are handled
 * here; the endpoint supplies request parsing and the JSON of its choices.
 *
 * A job outlives its HTTP request when the client leaves early: its seqs
 * are cancelled and it frees itself once the connection is closed and every
 * seq has finished. The endpoint's structs start with a job and a job_seq. */
#ifndef GL_JOB_H
#define GL_JOB_H

#include <cjson/cJSON.h>

#include "api.h"
#include "compile.h"

typedef enum { JOB_SEQ_NEW, JOB_SEQ_RUNNING, JOB_SEQ_DONE } job_seq_state;

typedef struct job_seq {
    api_sink sink;           /* first: the engine request's user pointer */
    struct job *job;
    int index;               /* choice index */
    uint64_t request_id;     /* the engine's, once submitted */
    job_seq_state state;
    jbuf text;               /* non-stream: the whole text; stream: not yet sent */
    reasoning_split *split;  /* NULL, or the thinking goes to reasoning, not text (set by ops->prepare) */
    jbuf reasoning;          /* with split: the thinking; non-stream: all of it; stream: not yet sent */
    int n_reasoning;         /* tokens of the thinking block (usage's reasoning_tokens) */
    size_t text_bytes;       /* choice text so far, sent or not */
    bool final_sent;         /* stream: the chunk with finish_reason went out */
    int n_generated;
    int n_cached;            /* prompt tokens served from the prefix cache */
    int n_draft, n_accepted; /* speculative decoding: drafted tokens, accepted ones */
    gl_finish_reason finish;
    int stop_index;          /* the j->gen.stop string that ended it; -1 = none */
    double t_queued;         /* seconds waiting before the prompt was scheduled */
    double t_first, t_total; /* seconds since submit */
    double t_last_token;     /* for inter-token latency */
} job_seq;

typedef struct job {
    api_job base;            /* first: listed in api_server */
    const struct job_ops *ops;
    api_server *api;
    models_entry *model;     /* the model it runs on, held from the handler to its free */
    models_waiter wait;      /* while the model loads */
    bool holds_model;        /* acquired, not yet released */
    cJSON *body;             /* the request until the model is up and ops->parse has run */
    double keep_alive;       /* the request's keep_alive (seconds), or MODELS_KEEP_DEFAULT */
    double t_start;          /* worker_now() when the request came in */
    double t_model;          /* ... and when its model was ready (the wait is its load time) */
    http_req *req;           /* NULL once the connection has closed */
    char id[48];
    long created;
    params_generation gen;   /* filled by ops->parse */
    compile_spec *grammar_spec; /* set by ops->parse: gen.grammar, compiled before the seqs are submitted */
    compile_task *compiling; /* while it compiles */
    int n_seqs;              /* set by ops->parse */
    int prompt_tokens;       /* usage: set by ops->parse */
    bool scoring_only;       /* set by ops->parse: the one generated token is dropped */
    void *seqs;              /* n_seqs of ops->seq_size bytes; see job_seq_at */
    int n_unfinished;        /* seqs not DONE */
    bool failed;             /* a submit was rejected: err holds the reply */
    params_error err;
    params_error unfinished_err; /* status 0, or why a choice ended without a finish_reason */
    bool stream_started;
    jbuf chunk;              /* scratch for one SSE chunk */
    double progress_logged;  /* prefill seconds at the last "prompt read" log line */
    uint64_t http_seq;       /* its request's number in the access log */
    void *ext;               /* a translated API's own state (api_responses.c, api_anthropic.c) */
} job;

/* The usage and timings of a job, over its seqs. */
typedef struct job_totals {
    int prompt_tokens, completion_tokens;
    int cached_tokens;       /* of prompt_tokens, served from the prefix cache */
    double ttft, decode_time;
    double prefill_time;     /* of the choice that answered first: ttft less its queueing */
    int seqs_with_tokens;
    int draft_tokens, accepted_tokens; /* speculative decoding */
    int reasoning_tokens;    /* of completion_tokens, thinking */
    bool split;              /* the thinking was separated: usage reports reasoning_tokens */
} job_totals;

typedef struct job_ops {
    size_t job_size, seq_size; /* the endpoint's structs */
    bool ollama_options;     /* Ollama's `options` is mapped onto the body's own fields (ollama.h) */
    const char *stream_type; /* the stream's Content-Type; NULL = text/event-stream */
    /* Optional: an error reply in the API's own shape (else api_reply_error). */
    void (*reply_error)(struct job *j, const params_error *e);
    const char *id_prefix;   /* of response ids: "cmpl" */
    const char *object;      /* "object" of the whole response */
    const char *chunk_object;/* "object" of streamed chunks */
    const char *prompt_param;/* what a rejected submit's 400 names */
    /* Validates the body into the job (gen, n_seqs, prompt_tokens and its
     * own fields); returns 0 or -1 with e filled. */
    int (*parse)(job *j, const cJSON *body, params_error *e);
    /* Fills in the endpoint's part of a seq's engine request (prompt; the
     * rest comes from gen) just before it is submitted. */
    void (*prepare)(job_seq *s, gl_request *r);
    /* Optional: a prompt token was scored (prompt logprobs). */
    void (*on_prompt_token)(job_seq *s, const gl_event *ev);
    /* Optional: a token was generated; its text is appended after this, so
     * s->text_bytes is its offset. Not called when scoring_only. */
    void (*on_token)(job_seq *s, const gl_event *ev);
    /* When the stream opens: may send a first chunk; returns 1 when the
     * seq's pending text goes out now. */
    int (*stream_open)(job_seq *s);
    /* Sends a seq's pending text as chunks (job_chunk_begin/end), and the
     * chunk with finish_reason once it is done, with_timings on that one. */
    void (*stream_flush)(job_seq *s, bool with_timings);
    /* One choice of the whole (non-stream) response. */
    void (*write_choice)(jbuf *b, job_seq *s);
    /* Optional: frees the endpoint's fields of the job and its seqs. */
    void (*free)(job *j);
    /* Optional, for APIs with envelopes of their own (the ones translated
     * onto chat): the whole response body, written instead of the
     * completion object around write_choice's choices; */
    void (*reply)(job *j, const job_totals *t, jbuf *b);
    /* and the stream's last events (j->unfinished_err.status set: a choice
     * was cut short), sent instead of the usage chunk and [DONE]. */
    void (*stream_close)(job *j, const job_totals *t);
} job_ops;

/* The route handler of an endpoint: ctx is the api_server. The request
 * waits for its model when that is not loaded; `keep_alive` (Ollama's,
 * any endpoint) is taken from the body before ops->parse sees it. */
void job_handle(http_req *req, api_server *a, const job_ops *ops);
/* The same with a body the caller parsed (and may have rewritten); takes body. */
void job_handle_body(http_req *req, api_server *a, const job_ops *ops, cJSON *body);

/* What ops->parse makes of body, without running it: the prompt's length
 * in tokens (an API's count_tokens). Returns 0 or -1 with e filled. */
int job_count_prompt(api_server *a, models_entry *m, const job_ops *ops, const cJSON *body, int *n_tokens,
                     params_error *e);

job_seq *job_seq_at(job *j, int i);
job_totals job_get_totals(job *j);
/* Sends j->chunk as it is (an SSE event written by the endpoint) and clears it. */
void job_send(job *j);
/* Appends to a seq's text (echo, tokens), its thinking to reasoning when split. */
void job_seq_append(job_seq *s, const char *text, size_t len);

/* A streamed chunk: begin writes `data: {"id":..,"choices":[` to j->chunk
 * and returns it for the endpoint's choice; end closes the object (with
 * usage null and, if asked, timings) and sends it. */
jbuf *job_chunk_begin(job *j);
void job_chunk_end(job *j, bool with_timings);

/* A finish_reason, or null while the choice is still going. A choice that
 * was cancelled or failed has none: its stream ends with an error event. */
void job_write_finish(jbuf *b, const job_seq *s, bool final);

#endif
