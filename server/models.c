/* models.c -- the served models: the list, loads on demand, LRU and idle
 * unloads, and each model's request bounds once it is up. */
#include "models.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api.h"
#include "api_chat.h"

#define IDLE_TICK_MS 250     /* how often idle models are checked against their keep-alive */

struct models_registry {
    struct api_server *api;
    uv_loop_t *loop;
    const config *cfg;
    models_entry *entries;
    int n;
    int default_index;       /* -1: none */
    uv_timer_t idle;
    bool closing;
    metrics_family *state, *loads, *unloads, *users; /* per model */
};

const char *models_state_name(models_state s) {
    static const char *const names[] = { "unloaded", "loading", "loaded", "unloading" };
    return names[s];
}

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
    char when[40];
    http_log_time(when, sizeof when);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s genloop: ", when);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- the list ------------------------------------------------------------------ */

static uint64_t file_bytes(const char *path) {
    struct stat st;
    return path[0] && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

bool models_matches(const models_entry *m, const char *name) {
    if (!strcmp(name, m->id)) return true;
    size_t len = strlen(name);
    for (const char *p = m->alias; *p;) {
        size_t n = strcspn(p, ",");
        if (n == len && !strncmp(p, name, n)) return true;
        p += n + (p[n] == ',');
    }
    if (m->general_name[0] && !strcmp(name, m->general_name)) return true;
    const char *file = strrchr(m->path, '/');
    file = file ? file + 1 : m->path;
    size_t n = strlen(file);
    if (!strcmp(name, file)) return true;
    return n > 5 && !strcmp(file + n - 5, ".gguf") && len == n - 5 && !strncmp(name, file, n - 5);
}

models_entry *models_find(models_registry *r, const char *name) {
    for (int i = 0; i < r->n; i++) /* ids first: a file stem may equal another model's general.name */
        if (!strcmp(r->entries[i].id, name)) return &r->entries[i];
    for (int i = 0; i < r->n; i++)
        if (models_matches(&r->entries[i], name)) return &r->entries[i];
    return NULL;
}

int models_count(const models_registry *r) { return r->n; }
models_entry *models_at(models_registry *r, int i) { return &r->entries[i]; }
models_entry *models_default(models_registry *r) {
    return r->default_index >= 0 ? &r->entries[r->default_index] : NULL;
}

/* Adds a model with the server's engine settings; per-model ones are set by the caller. */
static models_entry *add_entry(models_registry *r, const char *id, const char *path, char *err,
                               size_t err_len) {
    if (models_find(r, id)) {
        snprintf(err, err_len, "two models are named '%.200s' (%.400s)", id, path);
        return NULL;
    }
    models_entry *grown = realloc(r->entries, sizeof *grown * (size_t)(r->n + 1));
    if (!grown) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    r->entries = grown;
    models_entry *m = &r->entries[r->n++];
    memset(m, 0, sizeof *m);
    const config *c = r->cfg;
    snprintf(m->id, sizeof m->id, "%s", id);
    snprintf(m->path, sizeof m->path, "%s", path);
    gl_engine_params *ep = &m->params;
    gl_engine_params_default(ep);
    ep->n_threads = c->threads;
    ep->activation_bits = c->activation_bits;
    ep->kv_cache_tokens = 0;
    ep->kv_cache_mib = c->kv_cache_mib;
    ep->kv_cache_dir = c->kv_cache_dir;
    ep->kv_cache_dir_mib = c->kv_cache_dir_size;
    snprintf(m->kv_type, sizeof m->kv_type, "%s", c->kv_type);
    ep->block_size = c->block_size;
    ep->max_batch_tokens = c->max_batch_tokens;
    ep->prefill_first_tokens = c->prefill_first_tokens;
    ep->max_seqs = c->max_seqs;
    ep->max_waiting = c->max_waiting;
    ep->n_ctx = c->n_ctx;
    ep->spec_mode = !strcmp(c->spec, "ngram") ? GL_SPEC_NGRAM : !strcmp(c->spec, "draft") ? GL_SPEC_DRAFT : GL_SPEC_OFF;
    snprintf(m->model_draft, sizeof m->model_draft, "%s", c->model_draft);
    ep->spec_max_tokens = c->spec_max_tokens;
    ep->spec_ngram_min = c->spec_ngram_min;
    ep->spec_ngram_max = c->spec_ngram_max;
    ep->spec_fixed = c->spec_fixed;
    m->keep_alive = c->keep_alive > 0 ? c->keep_alive : -1;
    gl_model_summary sum;
    gl_error gerr = {{0}};
    if (gl_model_summarize(path, &sum, &gerr)) {
        snprintf(m->general_name, sizeof m->general_name, "%s", sum.name);
        m->n_ctx_train = sum.n_ctx_train;
        m->summary = sum;
    }
    struct stat st;
    if (stat(path, &st) == 0) m->mtime = (long)st.st_mtime;
    return m;
}

/* After every entry is added: pointers into the (now final) array. */
static void finish_entries(models_registry *r) {
    for (int i = 0; i < r->n; i++) {
        models_entry *m = &r->entries[i];
        m->registry = r;
        m->params.spec_draft_model = m->model_draft;
        if (m->params.spec_mode == GL_SPEC_DRAFT && !m->model_draft[0]) m->params.spec_mode = GL_SPEC_NGRAM;
        gl_kv_type_parse(m->kv_type, &m->params.kv_type); /* config_validate checked it */
        m->bytes = file_bytes(m->path) + file_bytes(m->model_draft) + ((uint64_t)m->params.kv_cache_mib << 20);
    }
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.gguf in dir, in name order, named by the file name without .gguf. */
static int scan_dir(models_registry *r, const char *dir, char *err, size_t err_len) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, err_len, "models_dir %.900s: %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len <= 5 || strcmp(de->d_name + len - 5, ".gguf") || de->d_name[0] == '.') continue;
        char **grown = realloc(names, sizeof *grown * (size_t)(n + 1));
        if (!grown) break;
        names = grown;
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[1024], id[256];
        snprintf(path, sizeof path, "%.900s/%.100s", dir, names[i]);
        snprintf(id, sizeof id, "%.*s", (int)strlen(names[i]) - 5, names[i]);
        char real[PATH_MAX];
        bool listed = false; /* the same file as -m or a config entry */
        for (int k = 0; k < r->n && realpath(path, real); k++) {
            char other[PATH_MAX];
            listed |= realpath(r->entries[k].path, other) && !strcmp(real, other);
        }
        if (!listed && !models_find(r, id) && !add_entry(r, id, path, err, err_len)) rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

/* The -m model's id: --served-model-name, else the first alias, else the file name. */
static void pinned_id(const config *c, char *out, size_t n) {
    if (c->served_model_name[0]) {
        snprintf(out, n, "%s", c->served_model_name);
    } else if (c->alias[0]) {
        snprintf(out, n, "%.*s", (int)strcspn(c->alias, ","), c->alias);
    } else {
        char path[1024];
        snprintf(path, sizeof path, "%s", c->model);
        snprintf(out, n, "%s", basename(path));
    }
}

models_registry *models_create(struct api_server *a, uv_loop_t *loop, const config *cfg, char *err,
                               size_t err_len) {
    models_registry *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    r->api = a;
    r->loop = loop;
    r->cfg = cfg;
    r->default_index = -1;
    if (cfg->model[0]) {
        char id[256];
        pinned_id(cfg, id, sizeof id);
        models_entry *m = add_entry(r, id, cfg->model, err, err_len);
        if (!m) goto fail;
        snprintf(m->alias, sizeof m->alias, "%s", cfg->alias);
        m->pinned = true;
        m->keep_alive = -1;
        r->default_index = 0;
    }
    for (int i = 0; i < cfg->n_models; i++) {
        const config_model *cm = &cfg->models[i];
        models_entry *m = add_entry(r, cm->name, cm->path, err, err_len);
        if (!m) goto fail;
        snprintf(m->alias, sizeof m->alias, "%s", cm->alias);
        if (cm->n_ctx) m->params.n_ctx = cm->n_ctx;
        if (cm->kv_type[0]) snprintf(m->kv_type, sizeof m->kv_type, "%s", cm->kv_type);
        if (cm->activation_bits) m->params.activation_bits = cm->activation_bits;
        if (cm->kv_cache_mib) m->params.kv_cache_mib = cm->kv_cache_mib;
        if (cm->model_draft[0]) {
            snprintf(m->model_draft, sizeof m->model_draft, "%s", cm->model_draft);
            m->params.spec_mode = GL_SPEC_DRAFT;
        }
    }
    if (cfg->models_dir[0] && scan_dir(r, cfg->models_dir, err, err_len)) goto fail;
    if (r->n == 0) {
        snprintf(err, err_len, "models_dir %.900s holds no .gguf file", cfg->models_dir);
        goto fail;
    }
    if (r->default_index < 0) r->default_index = 0;
    finish_entries(r);
    uv_timer_init(loop, &r->idle);
    r->idle.data = r;
    metrics *reg = a->registry;
    r->state = metrics_gauge_labelled(reg, "model_state",
        "Each model's state: 0 unloaded, 1 loading, 2 loaded, 3 unloading.", "model");
    r->loads = metrics_counter(reg, "model_loads_total", "Loads of each model.", "model");
    r->unloads = metrics_counter(reg, "model_unloads_total", "Unloads of each model (idle, evicted, keep_alive 0).", "model");
    r->users = metrics_gauge_labelled(reg, "model_requests", "Requests holding each model (running or waiting for its load).", "model");
    models_update_metrics(r);
    return r;
fail:
    free(r->entries);
    free(r);
    return NULL;
}

void models_update_metrics(models_registry *r) {
    for (int i = 0; i < r->n; i++) {
        models_entry *m = &r->entries[i];
        metrics_set(r->state, m->id, m->state);
        metrics_set(r->users, m->id, m->n_users);
        metrics_inc(r->loads, m->id, 0);
        metrics_inc(r->unloads, m->id, 0);
    }
}

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

void models_free(models_registry *r) {
    if (!r) return;
    r->closing = true;
    for (int i = 0; i < r->n; i++) {
        models_entry *m = &r->entries[i];
        worker_stop(m->worker);  /* joins the engine thread */
        m->worker = NULL;
        m->model = NULL;
        chat_teardown(m);
    }
    free(r->entries);
    uv_close((uv_handle_t *)&r->idle, on_timer_closed);
}

/* ---- loading ------------------------------------------------------------------- */

static void on_worker_msg(const worker_msg *msg, void *ctx);

/* Hands each waiting request its model, or e (NULL: the load succeeded). */
static void wake_waiters(models_entry *m, const params_error *e) {
    models_waiter *w = m->waiters;
    m->waiters = NULL;
    while (w) {
        models_waiter *next = w->next;
        w->entry = NULL;
        w->ready(w, e);
        w = next;
    }
}

static void start_load(models_entry *m) {
    models_registry *r = m->registry;
    m->state = MODELS_LOADING;
    m->t_load_start = worker_now();
    log_line("loading model %s (%s)", m->id, m->path);
    m->worker = worker_start(r->loop, m->path, &m->params, on_worker_msg, m);
    if (!m->worker) {
        m->state = MODELS_UNLOADED;
        params_error e;
        params_fail(&e, 500, "model", "model_load_failed", "cannot start the engine thread for model '%s'", m->id);
        wake_waiters(m, &e);
    }
}

static void unload(models_entry *m, const char *why) {
    log_line("unloading model %s (%s)", m->id, why);
    m->state = MODELS_UNLOADING;
    m->model = NULL;   /* the worker thread frees it now: a listing must not read it */
    metrics_inc(m->registry->unloads, m->id, 1);
    worker_release(m->worker);
}

static bool counts(const models_entry *m, bool with_unloading) {
    return m->state == MODELS_LOADED || m->state == MODELS_LOADING ||
           (with_unloading && m->state == MODELS_UNLOADING);
}

/* Whether m fits beside the models in memory (with_unloading: those still
 * being freed count too). */
static bool fits(models_registry *r, const models_entry *m, bool with_unloading) {
    int n = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < r->n; i++) {
        if (!counts(&r->entries[i], with_unloading)) continue;
        n += !r->entries[i].pinned; /* the -m model is not one of the on-demand ones */
        bytes += r->entries[i].bytes;
    }
    const config *c = r->cfg;
    return (c->models_max_loaded <= 0 || n + 1 <= c->models_max_loaded) &&
           (c->models_memory <= 0 || bytes + m->bytes <= ((uint64_t)c->models_memory << 20));
}

/* Nothing can be unloaded for m: it waits while another model has
 * requests (they will end), else it can never be loaded. */
static void fail_if_stuck(models_entry *m) {
    models_registry *r = m->registry;
    for (int i = 0; i < r->n; i++) {
        const models_entry *o = &r->entries[i];
        if (o != m && o->n_users > 0 && !o->pinned && o->state != MODELS_UNLOADED) return;
    }
    params_error e;
    params_fail(&e, 503, "model", "model_no_room", "model '%s' does not fit beside the models that cannot be "
                "unloaded (--models-max-loaded %d, --models-memory %d MiB)", m->id, r->cfg->models_max_loaded,
                r->cfg->models_memory);
    wake_waiters(m, &e);
}

/* Unloads idle models, least recently used first, until m fits; then
 * loads it once the memory is really free. Otherwise m stays queued until
 * a model is released or unloaded. */
static void try_load(models_entry *m) {
    models_registry *r = m->registry;
    while (!fits(r, m, false)) {
        models_entry *lru = NULL;
        for (int i = 0; i < r->n; i++) {
            models_entry *o = &r->entries[i];
            if (o->state == MODELS_LOADED && o->n_users == 0 && !o->pinned && (!lru || o->last_used < lru->last_used))
                lru = o;
        }
        if (!lru) {
            fail_if_stuck(m);
            return;
        }
        char why[320];
        snprintf(why, sizeof why, "least recently used; evicted to load %.256s", m->id);
        unload(lru, why);
    }
    if (fits(r, m, true)) start_load(m);
}

static void load_queued(models_registry *r) {
    if (r->closing) return;
    for (int i = 0; i < r->n; i++) {
        models_entry *m = &r->entries[i];
        if (m->state == MODELS_UNLOADED && m->waiters) try_load(m);
    }
}

/* The model is up: its request bounds, chat template, and the log lines. */
static void on_loaded(models_entry *m) {
    models_registry *r = m->registry;
    const config *c = r->cfg;
    m->model = worker_model(m->worker);
    m->state = MODELS_LOADED;
    m->last_used = worker_now();
    metrics_inc(r->loads, m->id, 1);
    const gl_model_info *info = gl_model_get_info(m->model);
    gl_engine_stats st;
    worker_stats(m->worker, &st);
    long kv_tokens = st.kv_capacity_tokens;
    /* What one request can really use: the engine holds a sequence to the
     * KV cache's size, whatever context the model was trained for. */
    int asked = m->params.n_ctx > 0 ? m->params.n_ctx : info->n_ctx_train;
    m->n_ctx = asked;
    if (kv_tokens > 0 && m->n_ctx > kv_tokens) m->n_ctx = (int)kv_tokens;
    m->limits = (params_limits){
        .max_n = c->max_n,
        .max_tokens = c->max_tokens_cap > 0 && c->max_tokens_cap < m->n_ctx ? c->max_tokens_cap : m->n_ctx,
        .max_stop = c->max_stop,
        .max_stop_bytes = c->max_stop_bytes,
        .max_logit_bias = c->max_logit_bias,
    };
    /* Without a cap below the context, the context check (context_length_exceeded) rules. */
    m->max_prompt_tokens = c->max_prompt_tokens > 0 && c->max_prompt_tokens < m->n_ctx
                         ? c->max_prompt_tokens : INT_MAX;
    chat_setup(m, c);
    char cut[96] = "";
    if (m->n_ctx < asked)
        snprintf(cut, sizeof cut, "; the KV cache holds fewer than its %d: raise --kv-cache-mib for more", asked);
    log_line("model %s loaded in %.1f s (%s, n_ctx %d%s)", m->id, worker_now() - m->t_load_start,
             info->arch ? info->arch : "?", m->n_ctx, cut);
    if (!info->chat_template)
        fprintf(stderr, "genloop: %s has no chat template: a base (pretrained) model, for /v1/completions; "
                        "it is not tuned to follow chat messages\n", m->id);
    fprintf(stderr, "genloop: KV cache: %ld tokens (%s, %d MiB, %d blocks of %d); up to %d sequences at once, "
                    "%ld at full context\n", kv_tokens, m->kv_type, m->params.kv_cache_mib, st.n_blocks_total,
            st.block_size, m->params.max_seqs, kv_tokens / (m->n_ctx > 0 ? m->n_ctx : 1));
    if (m->pinned) {
        fprintf(stderr, "genloop: ready at %s\n", r->api->url);
        api_print_status("ready", r->api->url);
    }
    wake_waiters(m, NULL);
}

static void on_load_failed(models_entry *m, const char *error) {
    models_registry *r = m->registry;
    log_line("cannot load model %s: %s", m->id, error);
    worker_stop(m->worker);      /* its thread has ended */
    m->worker = NULL;
    m->state = MODELS_UNLOADED;
    if (m->pinned) {
        if (r->api->on_load_failed) r->api->on_load_failed(r->api);
        return;
    }
    params_error e;
    params_fail(&e, 500, "model", "model_load_failed", "cannot load model '%s': %s", m->id, error);
    wake_waiters(m, &e);
    load_queued(r);
}

static void on_released(models_entry *m) {
    worker_stop(m->worker);
    m->worker = NULL;
    chat_teardown(m);
    m->model = NULL;
    m->state = MODELS_UNLOADED;
    log_line("model %s unloaded", m->id);
    if (m->waiters) try_load(m);  /* asked for again while it was being freed */
    load_queued(m->registry);
}

static void on_worker_msg(const worker_msg *msg, void *ctx) {
    models_entry *m = ctx;
    switch (msg->type) {
    case WORKER_READY: on_loaded(m); break;
    case WORKER_LOAD_FAILED: on_load_failed(m, msg->ev.error); break;
    case WORKER_RELEASED: on_released(m); break;
    default: api_on_worker_msg(msg, m->registry->api); break;
    }
}

void models_load_pinned(models_registry *r) {
    for (int i = 0; i < r->n; i++)
        if (r->entries[i].pinned) start_load(&r->entries[i]);
}

/* ---- users --------------------------------------------------------------------- */

static void on_idle_tick(uv_timer_t *t) {
    models_registry *r = t->data;
    double now = worker_now();
    bool waiting = false;
    for (int i = 0; i < r->n; i++) {
        models_entry *m = &r->entries[i];
        if (m->state != MODELS_LOADED || m->n_users > 0 || m->pinned || m->keep_alive < 0) continue;
        if (now - m->last_used >= m->keep_alive) {
            char why[64];
            snprintf(why, sizeof why, "idle for %.0f s, keep_alive %.0f s", now - m->last_used, m->keep_alive);
            unload(m, why);
        } else {
            waiting = true;
        }
    }
    if (!waiting) uv_timer_stop(t);
}

void models_acquire(models_entry *m, models_waiter *w) {
    m->n_users++;
    m->last_used = worker_now();
    if (m->state == MODELS_LOADED) {
        w->entry = NULL;
        w->ready(w, NULL);
        return;
    }
    models_registry *r = m->registry;
    /* A file that is not a readable GGUF fails before any model is evicted for it. */
    gl_model_summary sum;
    gl_error gerr = {{0}};
    if (m->state == MODELS_UNLOADED && !gl_model_summarize(m->path, &sum, &gerr)) {
        params_error e;
        params_fail(&e, 500, "model", "model_load_failed", "cannot load model '%s': %s", m->id, gerr.message);
        log_line("cannot load model %s: %s", m->id, gerr.message);
        w->entry = NULL;
        w->ready(w, &e);
        return;
    }
    uint64_t budget = (uint64_t)r->cfg->models_memory << 20;
    if (budget && m->bytes > budget) {
        params_error e;
        params_fail(&e, 503, "model", "model_too_large",
                    "model '%s' needs %llu MiB (weights and KV pool), more than --models-memory %d MiB",
                    m->id, (unsigned long long)(m->bytes >> 20), r->cfg->models_memory);
        w->entry = NULL;
        w->ready(w, &e);
        return;
    }
    w->entry = m;
    w->next = m->waiters;
    m->waiters = w;
    if (m->state == MODELS_UNLOADED) try_load(m);
}

void models_cancel_wait(models_waiter *w) {
    models_entry *m = w->entry;
    if (!m) return;
    for (models_waiter **p = &m->waiters; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->entry = NULL;
}

void models_release(models_entry *m, double keep_alive) {
    models_registry *r = m->registry;
    m->n_users--;
    m->last_used = worker_now();
    if (keep_alive >= -1) m->keep_alive = keep_alive;
    else if (keep_alive == MODELS_KEEP_DEFAULT) m->keep_alive = r->cfg->keep_alive > 0 ? r->cfg->keep_alive : -1;
    if (r->closing || r->api->shutting_down || m->n_users > 0) return; /* nothing new starts in a drain */
    if (m->state == MODELS_LOADED && !m->pinned && m->keep_alive == 0) unload(m, "keep_alive 0");
    else if (m->state == MODELS_LOADED && !m->pinned && m->keep_alive > 0)
        uv_timer_start(&r->idle, on_idle_tick, IDLE_TICK_MS, IDLE_TICK_MS);
    load_queued(r);
}

/* ---- keep_alive ------------------------------------------------------------------ */

int models_parse_keep_alive(const cJSON *v, const char *param, double *out, params_error *e) {
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble < 0 ? -1 : v->valuedouble;
        return 0;
    }
    if (!cJSON_IsString(v))
        return params_fail(e, 400, param, "invalid_type", "'%s' must be a number of seconds or a duration "
                                                          "such as \"5m\"", param);
    /* Go's durations as Ollama takes them: [-]{number unit}..., or a bare number of seconds. */
    const char *s = v->valuestring;
    char *end;
    double total = strtod(s, &end);
    if (end != s && *end == 0) {
        *out = total < 0 ? -1 : total;
        return 0;
    }
    bool neg = *s == '-';
    if (neg) s++;
    total = 0;
    while (*s) {
        double n = strtod(s, &end);
        if (end == s || n < 0 || !isfinite(n)) goto bad;
        s = end;
        double unit = !strncmp(s, "ms", 2) ? (s += 2, 0.001) : !strncmp(s, "us", 2) ? (s += 2, 1e-6)
                    : !strncmp(s, "ns", 2) ? (s += 2, 1e-9) : *s == 'h' ? (s++, 3600)
                    : *s == 'm' ? (s++, 60) : *s == 's' ? (s++, 1) : -1;
        if (unit < 0) goto bad;
        total += n * unit;
    }
    if (s == v->valuestring) goto bad;
    *out = neg && total > 0 ? -1 : total;
    return 0;
bad:
    return params_fail(e, 400, param, "invalid_value", "'%s' is not a duration (\"5m\", \"1h30m\", \"90s\") "
                       "or a number of seconds: '%.100s'", param, v->valuestring);
}
