/* compile.c -- grammars compiled on the libuv pool under a budget. */
#include "compile.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct compile_task {
    struct compile_task *next; /* in the pool's queue or done list */
    compile_spec *spec;
    compile_budget budget;
    _Atomic int cancel;
    compile_done_fn done;    /* NULL once abandoned */
    void *ctx;
    gl_grammar *grammar;     /* the pool thread's result */
    params_error err;
};

/* ---- specs ------------------------------------------------------------------------ */

typedef struct text_spec {
    compile_spec base;       /* first */
    enum { SPEC_GBNF, SPEC_SCHEMA, SPEC_REGEX } kind;
    char *text;
} text_spec;

static gl_grammar *text_build(compile_spec *self, params_error *e) {
    text_spec *s = (text_spec *)self;
    gl_error err = {{0}};
    size_t len = strlen(s->text);
    gl_grammar *g = s->kind == SPEC_SCHEMA ? gl_grammar_from_json_schema(s->text, len, &err)
                  : s->kind == SPEC_REGEX  ? gl_grammar_from_regex(s->text, len, &err)
                                           : gl_grammar_from_gbnf(s->text, len, &err);
    static const char *const codes[] = {"invalid_grammar", "invalid_schema", "invalid_regex"};
    if (!g) params_fail(e, 400, self->param, codes[s->kind], "'%s': %s", self->param, err.message);
    return g;
}

static void text_destroy(compile_spec *self) {
    free(((text_spec *)self)->text);
    free(self);
}

static compile_spec *text_spec_create(char *text, int kind, const char *param) {
    text_spec *s = calloc(1, sizeof *s);
    if (!s || !text) {
        free(s);
        free(text);
        return NULL;
    }
    s->base.build = text_build;
    s->base.destroy = text_destroy;
    snprintf(s->base.param, sizeof s->base.param, "%s", param);
    s->kind = kind;
    s->text = text;
    return &s->base;
}

compile_spec *compile_gbnf(const char *text, const char *param) {
    return text_spec_create(strdup(text), SPEC_GBNF, param);
}

compile_spec *compile_regex(const char *regex, const char *param) {
    return text_spec_create(strdup(regex), SPEC_REGEX, param);
}

compile_spec *compile_schema(const cJSON *schema, const char *param) {
    return text_spec_create(cJSON_PrintUnformatted(schema), SPEC_SCHEMA, param);
}

void compile_spec_free(compile_spec *s) {
    if (s) s->destroy(s);
}

/* ---- the compile thread ------------------------------------------------------------ */

struct compile_pool {
    uv_loop_t *loop;
    uv_async_t async;        /* finished tasks are handed back through it */
    pthread_t thread;
    bool started;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    compile_task *todo, *todo_tail; /* queued, oldest first */
    compile_task *done;      /* finished, not yet handed back */
    compile_task *running;
    bool stop;
};

static void run_task(compile_task *t) {
    gl_compile_budget b = {
        .max_seconds = t->budget.max_ms / 1e3,
        .max_bytes = (size_t)t->budget.max_mib << 20,
        .cancel = &t->cancel,
    };
    gl_compile_budget_set(&b);
    t->grammar = t->spec->build(t->spec, &t->err);
    gl_compile_budget_set(NULL);
    /* A big compile's working memory goes back to the system, not into
     * this thread's malloc arena. */
    malloc_trim(0);
    if (t->grammar) return;
    /* the budget's own words, with the setting that sets it */
    const char *param = t->spec->param;
    if (b.exceeded == GL_BUDGET_TIME)
        params_fail(&t->err, 400, param, "grammar_too_complex",
                    "'%s': the grammar takes longer to compile than this server's budget of %d ms "
                    "(grammar_compile_ms); simplify the schema or grammar", param, t->budget.max_ms);
    else if (b.exceeded == GL_BUDGET_MEMORY)
        params_fail(&t->err, 400, param, "grammar_too_complex",
                    "'%s': compiling the grammar needs more than this server's budget of %d MiB "
                    "(grammar_compile_mib); simplify the schema or grammar", param, t->budget.max_mib);
    else if (b.exceeded == GL_BUDGET_CANCELLED)
        params_fail(&t->err, 503, NULL, "cancelled", "the request was cancelled while its grammar compiled");
    else if (!t->err.status)
        params_fail(&t->err, 500, param, NULL, "'%s': the grammar could not be compiled", param);
}

static void *compile_thread(void *arg) {
    compile_pool *p = arg;
    pthread_mutex_lock(&p->mutex);
    for (;;) {
        while (!p->todo && !p->stop) pthread_cond_wait(&p->wake, &p->mutex);
        if (p->stop) break;
        compile_task *t = p->todo;
        p->todo = t->next;
        if (!p->todo) p->todo_tail = NULL;
        p->running = t;
        pthread_mutex_unlock(&p->mutex);
        run_task(t);
        pthread_mutex_lock(&p->mutex);
        p->running = NULL;
        t->next = p->done;
        p->done = t;
        uv_async_send(&p->async);
    }
    pthread_mutex_unlock(&p->mutex);
    return NULL;
}

static void task_finish(compile_task *t) {
    if (t->done) t->done(t->ctx, t->grammar, t->grammar ? NULL : &t->err);
    else gl_grammar_free(t->grammar);
    compile_spec_free(t->spec);
    free(t);
}

static void on_done(uv_async_t *a) {
    compile_pool *p = a->data;
    pthread_mutex_lock(&p->mutex);
    compile_task *list = p->done;
    p->done = NULL;
    pthread_mutex_unlock(&p->mutex);
    compile_task *order = NULL; /* oldest first */
    while (list) {
        compile_task *next = list->next;
        list->next = order;
        order = list;
        list = next;
    }
    while (order) {
        compile_task *next = order->next;
        task_finish(order);
        order = next;
    }
}

compile_pool *compile_pool_create(uv_loop_t *loop) {
    compile_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->loop = loop;
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    uv_async_init(loop, &p->async, on_done);
    p->async.data = p;
    return p;
}

static void on_async_closed(uv_handle_t *h) {
    compile_pool *p = h->data;
    pthread_mutex_destroy(&p->mutex);
    pthread_cond_destroy(&p->wake);
    free(p);
}

void compile_pool_free(compile_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mutex);
    p->stop = true;
    if (p->running) atomic_store(&p->running->cancel, 1);
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    if (p->started) pthread_join(p->thread, NULL);
    compile_task *lists[2] = {p->todo, p->done};
    for (int i = 0; i < 2; i++) {
        for (compile_task *t = lists[i], *next; t; t = next) {
            next = t->next;
            t->done = NULL; /* its job is gone */
            task_finish(t);
        }
    }
    uv_close((uv_handle_t *)&p->async, on_async_closed);
}

compile_task *compile_start(compile_pool *p, compile_spec *spec, const compile_budget *b,
                            compile_done_fn done, void *ctx) {
    compile_task *t = calloc(1, sizeof *t);
    if (!t || (!p->started && pthread_create(&p->thread, NULL, compile_thread, p))) {
        free(t);
        compile_spec_free(spec);
        return NULL;
    }
    p->started = true;
    t->spec = spec;
    t->budget = *b;
    t->done = done;
    t->ctx = ctx;
    pthread_mutex_lock(&p->mutex);
    if (p->todo_tail) p->todo_tail->next = t;
    else p->todo = t;
    p->todo_tail = t;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    return t;
}

void compile_cancel(compile_task *t) {
    atomic_store(&t->cancel, 1);
}

void compile_abandon(compile_task *t) {
    atomic_store(&t->cancel, 1);
    t->done = NULL;
}
