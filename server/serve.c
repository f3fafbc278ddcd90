/* serve.c -- process setup: settings, the loop, HTTP, the engine worker,
 * signals, and an orderly shutdown.
 *
 * Startup listens first and loads the model on the worker thread, so
 * /health answers 503 during the load. SIGTERM/SIGINT drains: new requests
 * get 503 (/health says "draining"), running and queued ones may finish for
 * --shutdown-timeout seconds; then the rest are cancelled (their streams end
 * with an error event), given a few seconds to send that, and the process
 * closes connections, joins the worker, frees everything and exits 0. A
 * second signal skips the wait. */
#include "serve.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "api.h"
#include "api_chat.h"
#include "compile.h"
#include "config.h"
#include "http.h"
#include "routes.h"
#include "models.h"
#include "worker.h"

#define CANCEL_GRACE_MS 5000   /* for cancelled requests to send their last bytes */

typedef struct serve_state {
    uv_loop_t loop;
    config cfg;
    api_server api;
    http_server *http;
    uv_signal_t sigint, sigterm;
    uv_timer_t shutdown_timer;
    uint64_t drain_deadline;     /* loop ms: cancel what still runs */
    uint64_t shutdown_deadline;  /* loop ms: close everything */
    bool cancelled;              /* the drain's time ran out */
    int exit_code;
    bool stopping;
} serve_state;

static void finish_shutdown(serve_state *s) {
    uv_timer_stop(&s->shutdown_timer);
    http_free(s->http);          /* closes what is left; jobs cancel themselves */
    s->http = NULL;
    api_free(&s->api);           /* jobs whose engine events will never come */
    models_free(s->api.models);  /* joins the engine threads */
    s->api.models = NULL;
    compile_pool_free(s->api.compiler); /* after the jobs: they abandoned their compiles */
    s->api.compiler = NULL;
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->shutdown_timer, NULL);
}

static void cancel_rest(serve_state *s) {
    if (s->cancelled) return;
    s->cancelled = true;
    if (s->api.n_jobs > 0)
        fprintf(stderr, "genloop: cancelling %d request(s) still running\n", s->api.n_jobs);
    api_cancel_all(&s->api);
    s->shutdown_deadline = uv_now(&s->loop) + CANCEL_GRACE_MS;
}

static void on_shutdown_tick(uv_timer_t *t) {
    serve_state *s = t->data;
    uint64_t now = uv_now(&s->loop);
    /* Jobs are what a drain waits for (a job lasts until its reply is sent);
     * a request without one (a stalled upload) does not hold the exit up. */
    if (s->api.n_jobs == 0) finish_shutdown(s);
    else if (!s->cancelled && now >= s->drain_deadline) cancel_rest(s);
    else if (s->cancelled && now >= s->shutdown_deadline) finish_shutdown(s);
}

/* drain_ms 0: cancel at once (a failed load, a second signal). */
static void begin_shutdown(serve_state *s, int exit_code, uint64_t drain_ms) {
    if (s->stopping) return;
    s->stopping = true;
    s->exit_code = exit_code;
    s->api.shutting_down = true;
    if (drain_ms > 0 && s->api.n_jobs > 0)
        fprintf(stderr, "genloop: draining: %d request(s) may finish within %llu s; a second signal stops now\n",
                s->api.n_jobs, (unsigned long long)(drain_ms / 1000));
    else
        fprintf(stderr, "genloop: shutting down\n");
    s->drain_deadline = uv_now(&s->loop) + drain_ms;
    if (drain_ms == 0) cancel_rest(s);
    uv_timer_start(&s->shutdown_timer, on_shutdown_tick, 0, 10);
}

static void on_signal(uv_signal_t *h, int signum) {
    serve_state *s = h->data;
    if (!s->stopping) {
        begin_shutdown(s, 0, (uint64_t)s->cfg.shutdown_timeout * 1000);
        return;
    }
    fprintf(stderr, "genloop: second signal: stopping now\n");
    api_cancel_all(&s->api);
    finish_shutdown(s);
}

static void on_load_failed(api_server *a) {
    serve_state *s = (serve_state *)((char *)a - offsetof(serve_state, api));
    begin_shutdown(s, 1, 0);
}

/* Files the process needs besides connections (the listening socket,
 * epoll and event fds, the model, logs), and the connections MHD may hold
 * past the cap while closing idle ones (http.c's slack). */
#define FDS_RESERVED 192

/* Each connection is a file descriptor: raise the soft open-files limit
 * to the hard one, and take no more connections than it allows. Returns
 * the number of connections to take (0: too few descriptors). */
static int open_files_for(int max_connections) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return max_connections;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        if (want == RLIM_INFINITY || want > (rlim_t)1 << 24) want = (rlim_t)1 << 24;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)max_connections + FDS_RESERVED)
        return max_connections;
    int fit = rl.rlim_cur > FDS_RESERVED ? (int)(rl.rlim_cur - FDS_RESERVED) : 0;
    fprintf(stderr, "genloop: the open-files limit (%llu, ulimit -n) allows %d connections, not the %d asked for\n",
            (unsigned long long)rl.rlim_cur, fit, max_connections);
    return fit;
}

/* A missing or unreadable model file fails here, before the port is bound
 * and "listening" printed; the full check is the load on the worker. */
static int check_model_file(const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "%.1000s: %s", path, strerror(errno));
        return -1;
    }
    char magic[4] = {0};
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    if (n != 4 || memcmp(magic, "GGUF", 4) != 0) {
        snprintf(err, err_len, "%.1000s: not a GGUF file", path);
        return -1;
    }
    return 0;
}

int serve_main(int argc, char **argv) {
    static serve_state state;    /* large; lives for the whole process */
    serve_state *s = &state;
    memset(s, 0, sizeof(*s));
    char err[1200];
    const char *config_path = NULL;
    bool help = false, print = false;
    config_default(&s->cfg);
    config defaults = s->cfg;
    /* Flags are applied twice: first to find --config, then over the file. */
    if (config_parse_args(&s->cfg, argc, argv, &config_path, &help, &print, err, sizeof(err)))
        goto bad_args;
    if (help) {
        config_print_help(stdout, &defaults);
        return 0;
    }
    if (config_path) {
        config_default(&s->cfg);
        if (config_load_file(&s->cfg, config_path, err, sizeof(err)) ||
            config_parse_args(&s->cfg, argc, argv, &config_path, &help, &print, err, sizeof(err)))
            goto bad_args;
    }
    if (print) {
        config_print_json(stdout, &s->cfg);
        return 0;
    }
    if (config_validate(&s->cfg, err, sizeof(err)) || config_read_api_key(&s->cfg, err, sizeof(err)))
        goto bad_args;
    if (s->cfg.model[0] && check_model_file(s->cfg.model, err, sizeof(err))) {
        fprintf(stderr, "genloop serve: %s\n", err);
        return 1;
    }

    int max_connections = open_files_for(s->cfg.max_connections);
    if (max_connections < 1) {
        fprintf(stderr, "genloop serve: too few file descriptors for any connection; raise ulimit -n\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&s->loop);
    api_init(&s->api, &s->cfg);
    s->api.on_load_failed = on_load_failed;
    s->api.models = models_create(&s->api, &s->loop, &s->cfg, err, sizeof(err));
    if (!s->api.models) {
        fprintf(stderr, "genloop serve: %s\n", err);
        api_free(&s->api);
        uv_loop_close(&s->loop);
        return 1;
    }
    if (s->cfg.model[0]) api_set_model_label(&s->api, models_default(s->api.models)->id);

    http_options opt = {
        .host = s->cfg.host,
        .port = s->cfg.port,
        .timeout_s = s->cfg.timeout,
        .header_timeout_s = s->cfg.header_timeout,
        .body_timeout_s = s->cfg.body_timeout,
        .max_connections = max_connections,
        .max_per_address = s->cfg.max_connections_per_address,
        .max_body_bytes = (size_t)s->cfg.max_body_bytes,
        .max_stream_buffer = (size_t)s->cfg.stream_buffer_bytes,
        .admit = api_admit,
        .error = api_http_error,
        .ctx = &s->api,
    };
    opt.routes = routes_all(&opt.n_routes);
    s->http = http_start(&s->loop, &opt, err, sizeof(err));
    if (!s->http) {
        fprintf(stderr, "genloop serve: %s\n", err);
        models_free(s->api.models);
        api_free(&s->api);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        uv_loop_close(&s->loop);
        return 1;
    }
    int v6 = strchr(s->cfg.host, ':') != NULL;
    snprintf(s->api.url, sizeof(s->api.url), "http://%s%.255s%s:%d", v6 ? "[" : "", s->cfg.host,
             v6 ? "]" : "", http_port(s->http));
    char per_address[48] = "";
    if (s->cfg.max_connections_per_address > 0)
        snprintf(per_address, sizeof per_address, ", %d per address", s->cfg.max_connections_per_address);
    int n_models = models_count(s->api.models);
    if (s->cfg.model[0])
        fprintf(stderr, "genloop: listening on %s (up to %d connections%s); loading %s\n", s->api.url,
                max_connections, per_address, s->cfg.model);
    else
        fprintf(stderr, "genloop: listening on %s (up to %d connections%s)\n", s->api.url, max_connections,
                per_address);
    if (n_models > 1 || !s->cfg.model[0])
        fprintf(stderr, "genloop: %d models, loaded on demand (at most %d at once, %d MiB; keep_alive %d s)\n",
                n_models, s->cfg.models_max_loaded, s->cfg.models_memory, s->cfg.keep_alive);
    api_print_status("listening", s->api.url);

    s->api.compiler = compile_pool_create(&s->loop);
    if (s->cfg.model[0]) {
        models_load_pinned(s->api.models);
    } else {
        fprintf(stderr, "genloop: ready at %s\n", s->api.url);
        api_print_status("ready", s->api.url);
    }

    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigint.data = s->sigterm.data = s;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_timer_init(&s->loop, &s->shutdown_timer);
    s->shutdown_timer.data = s;

    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    fprintf(stderr, "genloop: stopped\n");
    return s->exit_code;

bad_args:
    fprintf(stderr, "genloop serve: %s (see genloop serve --help)\n", err);
    return 1;
}
