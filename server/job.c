/* job.c -- the life of a completion-style request: parse, submit one engine
 * request per choice, collect events, stream or reply, free. */
#include "job.h"

#include "ollama.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

job_seq *job_seq_at(job *j, int i) {
    return (job_seq *)((char *)j->seqs + (size_t)i * j->ops->seq_size);
}

void job_seq_append(job_seq *s, const char *text, size_t len) {
    if (s->split) reasoning_split_feed(s->split, text, len, &s->reasoning, &s->text);
    else jbuf_raw(&s->text, text, len);
    s->text_bytes += len;
}

/* ---- lifetime ------------------------------------------------------------------ */

static void job_destroy(api_job *base) {
    job *j = (job *)base;
    if (j->holds_model) {
        models_cancel_wait(&j->wait);
        models_release(j->model, j->keep_alive);
    }
    cJSON_Delete(j->body);
    if (j->compiling) compile_abandon(j->compiling);
    compile_spec_free(j->grammar_spec);
    if (j->ops->free) j->ops->free(j);
    for (int i = 0; j->seqs && i < j->n_seqs; i++) {
        jbuf_free(&job_seq_at(j, i)->text);
        jbuf_free(&job_seq_at(j, i)->reasoning);
    }
    free(j->seqs);
    params_generation_free(&j->gen);
    jbuf_free(&j->chunk);
    free(j);
}

static void job_complete(job *j);

static void job_cancel(api_job *base) {
    job *j = (job *)base;
    if (j->holds_model && j->wait.entry) { /* still waiting for its model's load */
        models_cancel_wait(&j->wait);
        j->failed = true;
        params_fail(&j->err, 503, NULL, "server_shutdown", "The server shut down before the model '%s' was loaded",
                    j->model->id);
        job_complete(j);
        return;
    }
    if (j->compiling) compile_cancel(j->compiling);
    gl_engine *engine = j->model ? worker_engine(j->model->worker) : NULL;
    for (int i = 0; engine && i < j->n_seqs; i++) {
        job_seq *s = job_seq_at(j, i);
        if (s->state == JOB_SEQ_RUNNING) gl_engine_cancel(engine, s->request_id);
    }
}

static void job_release(job *j) {
    api_job_remove(j->api, &j->base);
    job_destroy(&j->base);
}

static void on_http_close(void *data, bool aborted) {
    job *j = data;
    j->req = NULL;
    if (j->n_unfinished > 0)
        job_cancel(&j->base);  /* the client left: stop computing for it */
    else
        job_release(j);
}

/* ---- response pieces ------------------------------------------------------------ */

static void write_head(jbuf *b, const job *j, const char *object) {
    jbuf_puts(b, "{\"id\":");
    jbuf_str(b, j->id, strlen(j->id));
    jbuf_printf(b, ",\"object\":\"%s\",\"created\":%ld,\"model\":", object, j->created);
    jbuf_str(b, j->model->id, strlen(j->model->id));
}

void job_write_finish(jbuf *b, const job_seq *s, bool final) {
    jbuf_puts(b, ",\"finish_reason\":");
    if (!final || (s->finish != GL_FINISH_STOP && s->finish != GL_FINISH_LENGTH)) {
        jbuf_puts(b, "null");
        return;
    }
    const char *r = gl_finish_reason_str(s->finish);
    jbuf_str(b, r, strlen(r));
}

job_totals job_get_totals(job *j) {
    job_totals t = { j->prompt_tokens, 0, 0, INFINITY, 0, 0, 0, 0, 0, 0, false };
    double last = 0;
    for (int i = 0; i < j->n_seqs; i++) {
        const job_seq *s = job_seq_at(j, i);
        t.completion_tokens += s->n_generated;
        t.reasoning_tokens += s->n_reasoning;
        t.split |= s->split != NULL;
        t.draft_tokens += s->n_draft;
        t.accepted_tokens += s->n_accepted;
        /* each prompt counts once in prompt_tokens: its first choice's cache use */
        if (i % j->gen.n == 0) t.cached_tokens += s->n_cached;
        if (s->n_generated > 0) {
            t.seqs_with_tokens++;
            if (s->t_first < t.ttft) {
                t.ttft = s->t_first;
                t.prefill_time = s->t_first - s->t_queued;
            }
            if (s->t_total > last) last = s->t_total;
        }
    }
    if (t.seqs_with_tokens == 0) t.ttft = 0;
    else t.decode_time = last - t.ttft;
    return t;
}

static void write_usage(jbuf *b, const job_totals *t) {
    jbuf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                   "\"prompt_tokens_details\":{\"cached_tokens\":%d}",
                t->prompt_tokens, t->completion_tokens, t->prompt_tokens + t->completion_tokens,
                t->cached_tokens);
    if (t->split) jbuf_printf(b, ",\"completion_tokens_details\":{\"reasoning_tokens\":%d}", t->reasoning_tokens);
    jbuf_puts(b, "}");
}

/* timings (llama.cpp server's names): prompt_n counts the prompt tokens
 * computed, cache_n those served from the prefix cache, and
 * prompt_per_second is over the computed ones and the prefill time only;
 * ttft over the first token of any choice; predicted_per_second is the
 * decode rate after each choice's first token. */
static void write_timings(jbuf *b, const job_totals *t) {
    int decoded = t->completion_tokens - t->seqs_with_tokens;
    int computed = t->prompt_tokens - t->cached_tokens;
    jbuf_printf(b, "\"timings\":{\"cache_n\":%d,\"prompt_n\":%d,\"prompt_ms\":", t->cached_tokens,
                computed);
    jbuf_num(b, t->prefill_time * 1e3);
    jbuf_puts(b, ",\"ttft_ms\":");
    jbuf_num(b, t->ttft * 1e3);
    jbuf_puts(b, ",\"prompt_per_second\":");
    jbuf_num(b, t->prefill_time > 0 ? computed / t->prefill_time : 0);
    jbuf_printf(b, ",\"predicted_n\":%d,\"predicted_per_second\":", t->completion_tokens);
    jbuf_num(b, t->decode_time > 0 && decoded > 0 ? decoded / t->decode_time : 0);
    jbuf_printf(b, ",\"draft_n\":%d,\"draft_n_accepted\":%d}", t->draft_tokens, t->accepted_tokens);
}

/* ---- streaming -------------------------------------------------------------------- */

void job_send(job *j) {
    if (j->req) http_stream_write(j->req, j->chunk.data, j->chunk.len);
    jbuf_clear(&j->chunk);
}

jbuf *job_chunk_begin(job *j) {
    jbuf *b = &j->chunk;
    jbuf_puts(b, "data: ");
    write_head(b, j, j->ops->chunk_object);
    jbuf_puts(b, ",\"choices\":[");
    return b;
}

void job_chunk_end(job *j, bool with_timings) {
    jbuf *b = &j->chunk;
    jbuf_puts(b, "]");
    if (j->gen.include_usage && j->gen.continuous_usage) {
        job_totals t = job_get_totals(j);
        jbuf_puts(b, ",");
        write_usage(b, &t);
    } else if (j->gen.include_usage) {
        jbuf_puts(b, ",\"usage\":null");
    }
    if (with_timings) {
        job_totals t = job_get_totals(j);
        jbuf_puts(b, ",");
        write_timings(b, &t);
    }
    jbuf_puts(b, "}\n\n");
    job_send(j);
}

/* A prompt_progress chunk (PROGRESS_SHAPE.md): no choices. */
static void stream_progress(job *j, const gl_event *ev) {
    if (!j->stream_started || !j->req || !j->gen.stream || !j->gen.return_progress) return;
    jbuf *b = &j->chunk;
    jbuf_puts(b, "data: ");
    write_head(b, j, j->ops->chunk_object);
    jbuf_printf(b, ",\"choices\":[],\"prompt_progress\":{\"total\":%d,\"cache\":%d,\"processed\":%d,"
                   "\"time_ms\":", ev->n_prompt_tokens, ev->n_cached_tokens, ev->n_processed);
    jbuf_num(b, (ev->t_total - ev->t_queued) * 1e3);
    jbuf_puts(b, "}}\n\n");
    job_send(j);
}

/* A long prompt is logged while it is read (a CPU reads a few hundred
 * tokens a second): when it starts, every PROGRESS_LOG_S seconds, and at
 * its end. */
#define PROGRESS_LOG_TOKENS 1024
#define PROGRESS_LOG_S 5.0
static void log_progress(job *j, const gl_event *ev) {
    if (ev->n_prompt_tokens - ev->n_cached_tokens < PROGRESS_LOG_TOKENS) return;
    double t = ev->t_total - ev->t_queued;   /* since the prefill began */
    bool start = ev->n_processed <= ev->n_cached_tokens, done = ev->n_processed >= ev->n_prompt_tokens;
    if (!start && !done && t < j->progress_logged + PROGRESS_LOG_S) return;
    j->progress_logged = t;
    char when[40];
    http_log_time(when, sizeof when);
    fprintf(stderr, "%s http #%llu prompt %s: %d of %d tokens (%d from the cache) in %.1f s\n", when,
            (unsigned long long)j->http_seq, done ? "read" : "reading", ev->n_processed, ev->n_prompt_tokens,
            ev->n_cached_tokens, t);
}

static void stream_flush(job_seq *s, bool with_timings) {
    job *j = s->job;
    if (!j->stream_started || s->final_sent) return;
    j->ops->stream_flush(s, with_timings);
    if (s->state == JOB_SEQ_DONE) s->final_sent = true;
}

static void stream_start(job *j) {
    j->stream_started = true;
    if (j->req) http_stream_start(j->req, 200, j->ops->stream_type ? j->ops->stream_type : "text/event-stream");
    for (int i = 0; i < j->n_seqs; i++) {
        job_seq *s = job_seq_at(j, i);
        if (j->ops->stream_open(s)) stream_flush(s, 0);
    }
}

/* ---- completion ---------------------------------------------------------------------- */

static void log_line(job *j, const job_totals *t) {
    if (!j->req) return;
    int decoded = t->completion_tokens - t->seqs_with_tokens;
    http_req_log(j->req, "%s prompt=%d gen=%d ttft=%.1fms tps=%.1f finish=%s%s", j->id,
                 t->prompt_tokens, t->completion_tokens, t->ttft * 1e3,
                 t->decode_time > 0 ? decoded / t->decode_time : 0.0,
                 j->n_seqs ? gl_finish_reason_str(job_seq_at(j, 0)->finish) : "-",
                 j->n_seqs > 1 ? " (choice 0)" : "");
}

static void write_whole(job *j, const job_totals *t, jbuf *b) {
    write_head(b, j, j->ops->object);
    jbuf_puts(b, ",\"choices\":[");
    for (int i = 0; i < j->n_seqs; i++) {
        if (i) jbuf_puts(b, ",");
        j->ops->write_choice(b, job_seq_at(j, i));
    }
    jbuf_puts(b, "],");
    write_usage(b, t);
    jbuf_puts(b, ",");
    write_timings(b, t);
    jbuf_puts(b, "}");
}

static void reply_whole(job *j, const job_totals *t) {
    jbuf b = {0};
    if (j->ops->reply) j->ops->reply(j, t, &b);
    else write_whole(j, t, &b);
    if (b.oom) {
        params_fail(&j->err, 500, NULL, NULL, "out of memory");
        api_reply_error(j->api, j->req, &j->err);
    } else {
        http_reply(j->req, 200, "application/json", b.data, b.len);
    }
    jbuf_free(&b);
}

static void job_complete(job *j) {
    job_totals t = job_get_totals(j);
    if (j->failed) {
        if (j->req && j->ops->reply_error) j->ops->reply_error(j, &j->err);
        else if (j->req) api_reply_error(j->api, j->req, &j->err);
    } else if (j->gen.stream) {
        for (int i = 0; i < j->n_seqs; i++) stream_flush(job_seq_at(j, i), 0);
        jbuf *b = &j->chunk;
        if (j->ops->stream_close) {
            j->ops->stream_close(j, &t);
        } else if (j->unfinished_err.status) { /* a choice was cut short: no finish_reason, an error */
            jbuf_puts(b, "data: {\"error\":{\"message\":");
            jbuf_str(b, j->unfinished_err.message, strlen(j->unfinished_err.message));
            jbuf_printf(b, ",\"type\":\"%s\",\"param\":null,\"code\":", j->unfinished_err.type);
            jbuf_str(b, j->unfinished_err.code, strlen(j->unfinished_err.code));
            jbuf_puts(b, "}}\n\n");
        } else if (j->gen.include_usage) {
            jbuf_puts(b, "data: ");
            write_head(b, j, j->ops->chunk_object);
            jbuf_puts(b, ",\"choices\":[],");
            write_usage(b, &t);
            jbuf_puts(b, ",");
            write_timings(b, &t);
            jbuf_puts(b, "}\n\n");
        }
        if (!j->ops->stream_close) jbuf_puts(b, "data: [DONE]\n\n");
        job_send(j);
        if (j->req) http_stream_end(j->req);
        log_line(j, &t);
    } else if (j->req && j->unfinished_err.status && j->ops->reply_error) {
        j->ops->reply_error(j, &j->unfinished_err);
    } else if (j->req && j->unfinished_err.status) {
        api_reply_error(j->api, j->req, &j->unfinished_err);
    } else if (j->req) {
        reply_whole(j, &t);
        log_line(j, &t);
    }
    if (!j->req) job_release(j);
}

static void seq_on_event(api_sink *sink, const gl_event *ev, double t_event) {
    job_seq *s = (job_seq *)sink;
    job *j = s->job;
    api_server *a = j->api;
    switch (ev->type) {
    case GL_EVENT_PROMPT_TOKEN:
        if (j->ops->on_prompt_token) j->ops->on_prompt_token(s, ev);
        break;
    case GL_EVENT_PROMPT_PROGRESS:
        log_progress(j, ev);
        stream_progress(j, ev);
        break;
    case GL_EVENT_TOKEN:
        if (s->t_last_token > 0) metrics_observe(a->m.itl, t_event - s->t_last_token);
        s->t_last_token = t_event;
        if (j->scoring_only) break;
        s->n_generated = ev->n_generated;
        s->n_reasoning = ev->n_reasoning_tokens;
        if (j->ops->on_token) j->ops->on_token(s, ev);
        job_seq_append(s, ev->text, ev->text_len);
        if (j->gen.stream) stream_flush(s, 0);
        break;
    case GL_EVENT_FINISHED: {
        gl_event shown = *ev;
        if (j->scoring_only && ev->finish != GL_FINISH_CANCELLED && ev->finish != GL_FINISH_ERROR) {
            shown.n_generated = 0;
            shown.finish = GL_FINISH_LENGTH;
        }
        api_note_finished(a, &shown);
        if (!j->scoring_only) job_seq_append(s, ev->text, ev->text_len);
        if (s->split) reasoning_split_finish(s->split, &s->reasoning, &s->text);
        s->n_reasoning = ev->n_reasoning_tokens;
        s->state = JOB_SEQ_DONE;
        s->finish = shown.finish;
        s->stop_index = shown.finish == GL_FINISH_STOP ? ev->stop_index : -1;
        s->n_generated = shown.n_generated;
        s->n_cached = ev->n_cached_tokens;
        s->n_draft = ev->n_draft_tokens;
        s->n_accepted = ev->n_accepted_tokens;
        s->t_queued = ev->t_queued;
        s->t_first = ev->t_first_token;
        s->t_total = ev->t_total;
        /* the engine's grammar errors are a dead end of the request's own grammar */
        bool grammar_fault = j->gen.grammar && ev->error && !strncmp(ev->error, "the grammar", 11);
        if (ev->finish == GL_FINISH_ERROR && !j->failed && !j->stream_started && grammar_fault) {
            j->failed = true;
            params_fail(&j->err, 400, "grammar", "invalid_grammar", "%s", ev->error);
        } else if (ev->finish == GL_FINISH_ERROR && !j->failed && !j->stream_started) {
            j->failed = true;
            params_fail(&j->err, 500, NULL, "engine_error", "%s", ev->error ? ev->error : "engine error");
        } else if (ev->finish == GL_FINISH_ERROR && !j->unfinished_err.status) {
            params_fail(&j->unfinished_err, 500, NULL, "engine_error", "%s",
                        ev->error ? ev->error : "engine error");
        } else if (ev->finish == GL_FINISH_CANCELLED && !j->unfinished_err.status) {
            params_fail(&j->unfinished_err, 503, NULL, "server_shutdown",
                        "The server shut down before this request finished");
        }
        j->n_unfinished--;
        if (j->gen.stream) stream_flush(s, j->n_unfinished == 0);
        if (j->n_unfinished == 0) job_complete(j);
        break;
    }
    }
}

/* A submit failed: the job fails with the first reason, seqs not yet
 * submitted are never submitted, and those running are cancelled. */
static void seq_rejected(job_seq *s, bool queue_full, const char *error) {
    job *j = s->job;
    if (!j->failed) {
        j->failed = true;
        if (queue_full)
            params_fail(&j->err, 503, NULL, "server_busy", "The server is busy (waiting queue full); retry later");
        else
            params_fail(&j->err, 400, j->ops->prompt_param, "invalid_request", "%s", error[0] ? error : "rejected");
    }
    for (int i = s->index; i < j->n_seqs; i++) {
        job_seq_at(j, i)->state = JOB_SEQ_DONE;
        j->n_unfinished--;
    }
    job_cancel(&j->base);
}

int job_count_prompt(api_server *a, models_entry *m, const job_ops *ops, const cJSON *body, int *n_tokens,
                     params_error *e) {
    job *j = calloc(1, ops->job_size);
    if (!j) return params_fail(e, 500, NULL, NULL, "out of memory");
    j->ops = ops;
    j->api = a;
    j->model = m;
    int rc = ops->parse(j, body, e);
    *n_tokens = j->prompt_tokens;
    job_destroy(&j->base);
    return rc;
}

/* ---- the handler --------------------------------------------------------------------- */

/* Choice i's sampling seed: the request's for choice 0 (so n=1 and the first
 * of n choices agree), else a splitmix64 mix of (seed, i), so choices differ
 * and the whole response is reproducible. */
static uint64_t choice_seed(uint64_t seed, int i) {
    if (i == 0) return seed;
    uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void job_submit(job *j);
static void on_compiled(void *ctx, gl_grammar *g, const params_error *e);

static void on_model_ready(models_waiter *w, const params_error *load_error);

void job_handle(http_req *req, api_server *a, const job_ops *ops) {
    if (api_reply_if_loading(a, req)) return;
    cJSON *body = api_parse_body(a, req);
    if (body) job_handle_body(req, a, ops, body);
}

void job_handle_body(http_req *req, api_server *a, const job_ops *ops, cJSON *body) {
    params_error e;
    double keep_alive = MODELS_KEEP_DEFAULT; /* as Ollama: a request without it restores the server's */
    cJSON *ka = cJSON_DetachItemFromObjectCaseSensitive(body, "keep_alive");
    models_entry *m = NULL;
    if (!ka || cJSON_IsNull(ka) || models_parse_keep_alive(ka, "keep_alive", &keep_alive, &e) == 0)
        m = api_model_for(a, body, &e);
    cJSON_Delete(ka);
    job *j = m ? calloc(1, ops->job_size) : NULL;
    if (!j) {
        if (m) params_fail(&e, 500, NULL, NULL, "out of memory");
        cJSON_Delete(body);
        api_reply_error(a, req, &e);
        return;
    }
    j->ops = ops;
    j->api = a;
    j->base.cancel = job_cancel;
    j->base.destroy = job_destroy;
    j->model = m;
    j->body = body;
    j->keep_alive = keep_alive;
    j->t_start = worker_now();
    j->req = req;
    j->http_seq = http_req_seq(req);
    j->created = (long)time(NULL);
    snprintf(j->id, sizeof(j->id), "%s-%llx%06llx", ops->id_prefix, (unsigned long long)j->created,
             (unsigned long long)++a->next_id);
    api_job_add(a, &j->base);
    http_req_on_close(req, on_http_close, j);
    j->holds_model = true;
    j->wait.ready = on_model_ready;
    models_acquire(m, &j->wait);
}

/* The model is up (or failed to load): parse, then compile or submit. */
static void on_model_ready(models_waiter *w, const params_error *load_error) {
    job *j = (job *)((char *)w - offsetof(job, wait));
    api_server *a = j->api;
    params_error e;
    int rc = -1;
    j->t_model = worker_now();
    if (load_error) e = *load_error;
    else if (!j->ops->ollama_options || ollama_apply_options(j->body, j->model, &e) == 0)
        rc = j->ops->parse(j, j->body, &e);
    cJSON_Delete(j->body);
    j->body = NULL;
    /* More sequences than the waiting queue holds would get 503 forever. */
    if (rc == 0 && j->n_seqs > a->cfg->max_waiting)
        rc = params_fail(&e, 400, "n", "invalid_value",
                         "This request has %d sequences (prompts x n), but this server queues at "
                         "most %d (--max-waiting); send fewer", j->n_seqs, a->cfg->max_waiting);
    if (rc == 0) {
        j->seqs = calloc((size_t)j->n_seqs, j->ops->seq_size);
        if (!j->seqs) rc = params_fail(&e, 500, NULL, NULL, "out of memory");
    }
    if (rc) {
        j->failed = true;
        j->err = e;
        j->n_seqs = 0;
        j->n_unfinished = 0;
        job_complete(j);
        return;
    }
    j->n_unfinished = j->n_seqs;
    if (!j->grammar_spec) {
        job_submit(j);
        return;
    }
    compile_budget budget = {a->cfg->grammar_compile_ms, a->cfg->grammar_compile_mib};
    compile_spec *spec = j->grammar_spec;
    j->grammar_spec = NULL;
    j->compiling = compile_start(a->compiler, spec, &budget, on_compiled, j);
    if (!j->compiling) {
        params_fail(&e, 500, NULL, NULL, "cannot queue the grammar's compile");
        on_compiled(j, NULL, &e);
    }
}

/* The grammar is ready (or refused): the seqs go to the engine. */
static void on_compiled(void *ctx, gl_grammar *g, const params_error *e) {
    job *j = ctx;
    j->compiling = NULL;
    j->gen.grammar = g;
    if (!g || !j->req) { /* refused, or the client left meanwhile */
        j->failed = true;
        if (e) j->err = *e;
        for (int i = 0; i < j->n_seqs; i++) job_seq_at(j, i)->state = JOB_SEQ_DONE;
        j->n_unfinished = 0;
        job_complete(j);
        return;
    }
    job_submit(j);
}

static void job_submit(job *j) {
    for (int i = 0; i < j->n_seqs; i++) {
        job_seq *s = job_seq_at(j, i);
        s->sink.on_event = seq_on_event;
        s->job = j;
        s->index = i;
        gl_request r = {
            .max_tokens = j->gen.max_tokens,
            .sampling = j->gen.sampling,
            .n_stop = j->gen.n_stop,
            .stop = (const char *const *)j->gen.stop,
            .ignore_eos = j->gen.ignore_eos,
            .grammar = j->gen.grammar,
            .prompt_logprobs = -1,
            .min_tokens = j->gen.min_tokens,
            .no_prefix_cache = j->gen.no_prefix_cache,
            .no_speculation = j->gen.no_speculation,
            .prompt_progress = i == 0, /* streamed when asked (return_progress), always logged */
            .user = &s->sink,
        };
        if (r.sampling.has_seed) r.sampling.seed = choice_seed(r.sampling.seed, i);
        j->ops->prepare(s, &r);
        bool queue_full = false;
        gl_error err = {{0}};
        s->request_id = gl_engine_submit(worker_engine(j->model->worker), &r, &queue_full, &err);
        if (s->request_id == 0) {
            seq_rejected(s, queue_full, err.message);
            break;
        }
        s->state = JOB_SEQ_RUNNING;
    }
    /* Events come through the loop, so none has arrived yet. */
    if (j->n_unfinished == 0) job_complete(j);
    else if (!j->failed && j->gen.stream) stream_start(j);
}
