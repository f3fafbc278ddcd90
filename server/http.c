/* http.c -- MHD in external-epoll mode on a uv loop.
 *
 * Request life: the access handler is called first with no body (we route,
 * ask opt.admit, and check Content-Length), then with body pieces, then
 * with none (we call the route's handler). If the handler made no response
 * yet, the connection is suspended; http_reply()/http_stream_*() resume it and MHD calls the
 * access handler again, which queues the response. A stream's reader
 * callback hands out buffered bytes, or suspends until there are more. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "utf8.h"

typedef struct header { char *name, *value; struct header *next; } header;

struct http_req {
    http_server *srv;
    struct MHD_Connection *conn;
    http_req *prev, *next;   /* the server's list of open requests */
    uint64_t seq;
    char method[16];
    char *path;
    const http_route *route; /* NULL: answered with an error */
    char *body;
    size_t body_len, body_cap;
    bool body_too_large;
    bool upload_cut;         /* body over the limit while MHD still reads it: reply raw */
    bool dispatched;         /* handler called */
    int status;              /* of the response made, 0 = none yet */
    struct MHD_Response *response; /* made, not yet queued */
    header *headers;

    bool streaming, stream_ended;
    char *out;               /* stream bytes not yet taken by MHD */
    size_t out_len, out_pos, out_cap;

    bool suspended;
    bool client_gone;        /* seen by the socket watch, or server shutdown */
    uv_poll_t watch;         /* the socket while suspended */
    bool watch_inited, watch_only_hup;

    void (*on_close)(void *data, bool aborted);
    void *close_data;
    char note[320];
    uint64_t t_start_ns;
};

struct http_server {
    uv_loop_t *loop;
    char start_error[256];   /* MHD's reason when the daemon does not start */
    http_options opt;
    struct MHD_Daemon *daemon;
    uv_poll_t epoll_watch;
    uv_timer_t timer;
    uv_check_t check;        /* runs MHD after resumes, once per loop turn */
    bool run_pending;
    int port;
    bool listening;
    int n_closing;           /* uv handles whose close callbacks are due */
    bool freeing;            /* http_free ran: free s when n_closing drops to 0 */
    http_req *reqs;          /* open requests */
    int n_reqs;
    uint64_t next_seq;
};

/* ---- driving MHD ------------------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static void run_mhd(http_server *s) {
    if (!s->daemon) return;
    s->run_pending = false;
    MHD_run(s->daemon);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(s->daemon, &ms) == MHD_YES)
        uv_timer_start(&s->timer, on_timer, ms, 0);
    else
        uv_timer_stop(&s->timer);
}

static void on_epoll(uv_poll_t *p, int status, int events) { run_mhd(p->data); }
static void on_timer(uv_timer_t *t) { run_mhd(t->data); }
static void on_check(uv_check_t *c) {
    http_server *s = c->data;
    if (s->run_pending) run_mhd(s);
}

/* ---- suspension and the client-gone watch ------------------------------------ */

static void watch_cb(uv_poll_t *p, int status, int events);

static void suspend(http_req *r) {
    if (r->suspended) return;
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    if (r->client_gone) return;
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return;
    if (!r->watch_inited) {
        if (uv_poll_init_socket(r->srv->loop, &r->watch, info->connect_fd) != 0) return;
        r->watch.data = r;
        r->watch_inited = true;
    }
    uv_poll_start(&r->watch, r->watch_only_hup ? UV_DISCONNECT : UV_READABLE | UV_DISCONNECT,
                  watch_cb);
}

static void resume(http_req *r) {
    if (!r->suspended) return;
    if (r->watch_inited) uv_poll_stop(&r->watch);
    r->suspended = false;
    MHD_resume_connection(r->conn);
    r->srv->run_pending = true;
}

/* The socket of a suspended request became readable or hung up: find out
 * whether the peer closed it (pipelined bytes are left for MHD). */
static void watch_cb(uv_poll_t *p, int status, int events) {
    http_req *r = p->data;
    bool gone = status < 0 || (events & UV_DISCONNECT);
    if (!gone && (events & UV_READABLE)) {
        char byte;
        ssize_t n = recv(r->watch.io_watcher.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            gone = true;
        else if (n > 0) {
            r->watch_only_hup = true;
            uv_poll_start(&r->watch, UV_DISCONNECT, watch_cb);
        }
    }
    if (!gone) return;
    /* Resume so MHD closes the connection; the close callback cancels work. */
    r->client_gone = true;
    resume(r);
}

/* ---- responses ---------------------------------------------------------------- */

static void apply_headers(http_req *r, struct MHD_Response *resp) {
    for (header *h = r->headers; h; h = h->next) MHD_add_response_header(resp, h->name, h->value);
}

void http_add_header(http_req *r, const char *name, const char *value) {
    header *h = malloc(sizeof(*h));
    if (!h) return;
    h->name = strdup(name);
    h->value = strdup(value);
    h->next = r->headers;
    r->headers = h;
}

/* The connection's socket, or -1. */
static int conn_fd(http_req *r) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

/* A reply while MHD is still reading the body: libmicrohttpd 0.9.75 takes
 * no response then (MHD_queue_response fails until the upload ends, and a
 * chunked upload need never end). So it goes to the socket from here, the
 * write side is shut (the client sees the reply end), what has arrived is
 * read and dropped (so the close that follows is a FIN, not a reset, if
 * the client has stopped sending), and the caller has MHD close the
 * connection. */
static void reply_raw(http_req *r, int status, const char *content_type, const char *body,
                      size_t len) {
    char head[2048];
    int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Length: %zu\r\n",
                     status, MHD_get_reason_phrase_for((unsigned)status), len);
    if (content_type)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Content-Type: %s\r\n", content_type);
    for (header *h = r->headers; h && (size_t)n < sizeof(head); h = h->next)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "%s: %s\r\n", h->name, h->value);
    int fd = conn_fd(r);
    if (fd < 0 || (size_t)n + 2 >= sizeof(head)) return;
    memcpy(head + n, "\r\n", 2);
    n += 2;
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n)
        send(fd, body, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    char drop[16384];
    for (int i = 0; i < 64 && recv(fd, drop, sizeof(drop), MSG_DONTWAIT) > 0; i++) {}
}

void http_reply(http_req *r, int status, const char *content_type, const char *body, size_t len) {
    if (r->status) return;  /* one response per request */
    if (r->upload_cut) {
        reply_raw(r, status, content_type, body, len);
        r->status = status;
        return;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return;
    if (content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    apply_headers(r, resp);
    r->response = resp;
    r->status = status;
    resume(r);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    http_req *r = cls;
    if (r->client_gone) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t avail = r->out_len - r->out_pos;
    if (avail > 0) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, r->out + r->out_pos, n);
        r->out_pos += n;
        if (r->out_pos == r->out_len) r->out_pos = r->out_len = 0;
        return (ssize_t)n;
    }
    if (r->stream_ended) return MHD_CONTENT_READER_END_OF_STREAM;
    suspend(r);
    return 0;
}

void http_stream_start(http_req *r, int status, const char *content_type) {
    if (r->status) return;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, NULL);
    if (!resp) return;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    apply_headers(r, resp);
    r->response = resp;
    r->status = status;
    r->streaming = true;
    /* The kernel's send buffer is part of what a slow reader holds: Linux
     * grows it up to tcp_wmem's max (MiBs), so pin it near our own bound. */
    size_t limit = r->srv->opt.max_stream_buffer;
    int fd = limit ? conn_fd(r) : -1;
    if (fd >= 0) {
        int sndbuf = limit < (1u << 20) ? (int)limit : 1 << 20;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    }
    resume(r);
}

/* The client reads slower than we produce: reset the connection (SO_LINGER 0
 * makes close() send RST and discard what the kernel still holds) and let
 * MHD see it closed; on_close then cancels the work. */
static void drop_slow_client(http_req *r, size_t unsent) {
    http_req_log(r, "%sdropped: slow client, %zu bytes unsent", r->note[0] ? " " : "", unsent);
    r->client_gone = true;
    int fd = conn_fd(r);
    if (fd >= 0) {
        struct linger lg = { 1, 0 };
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        shutdown(fd, SHUT_RDWR);
    }
    resume(r);
    r->srv->run_pending = true;
}

void http_stream_write(http_req *r, const char *data, size_t len) {
    if (!r->streaming || r->stream_ended || r->client_gone) return;
    size_t unsent = r->out_len - r->out_pos;
    size_t limit = r->srv->opt.max_stream_buffer;
    if (limit && unsent > 0 && unsent + len > limit) { /* one big write alone is fine */
        drop_slow_client(r, unsent + len);
        return;
    }
    if (r->out_pos > 0 && r->out_len + len > r->out_cap) {
        /* Reuse the taken prefix before growing, so the buffer stays near the bound. */
        memmove(r->out, r->out + r->out_pos, unsent);
        r->out_pos = 0;
        r->out_len = unsent;
    }
    if (r->out_len + len > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap : 4096;
        while (cap < r->out_len + len) cap *= 2;
        char *p = realloc(r->out, cap);
        if (!p) { r->client_gone = true; resume(r); return; }
        r->out = p;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, data, len);
    r->out_len += len;
    resume(r);
}

void http_stream_end(http_req *r) {
    if (!r->streaming) return;
    r->stream_ended = true;
    resume(r);
}

/* ---- request accessors --------------------------------------------------------- */

const char *http_req_method(const http_req *r) { return r->method; }
const char *http_req_path(const http_req *r) { return r->path; }
const char *http_req_body(const http_req *r) { return r->body ? r->body : ""; }
const char *http_req_header(const http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}
size_t http_req_body_len(const http_req *r) { return r->body_len; }
uint64_t http_req_seq(const http_req *r) { return r->seq; }

void http_req_log(http_req *r, const char *fmt, ...) {
    size_t used = strlen(r->note);
    char text[sizeof(r->note) + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    /* cut where the note is full, but not inside a character */
    size_t n = utf8_cut(text, sizeof(r->note) - 1 - used);
    memcpy(r->note + used, text, n);
    r->note[used + n] = 0;
}

void http_req_on_close(http_req *r, void (*fn)(void *, bool), void *data) {
    r->on_close = fn;
    r->close_data = data;
}

/* ---- MHD callbacks ------------------------------------------------------------- */

static void error_reply(http_req *r, int status, const char *message) {
    r->srv->opt.error(r, status, message, r->srv->opt.ctx);
    if (!r->status) http_reply(r, status, "text/plain", message, strlen(message));
}

/* A route path ending in '*' matches every path with that prefix. */
static int path_matches(const char *route_path, const char *path) {
    size_t n = strlen(route_path);
    if (n > 0 && route_path[n - 1] == '*') return strncmp(route_path, path, n - 1) == 0;
    return strcmp(route_path, path) == 0;
}

static const http_route *find_route(const http_server *s, const char *method, const char *path) {
    for (int i = 0; i < s->opt.n_routes; i++)
        if (path_matches(s->opt.routes[i].path, path) && !strcmp(s->opt.routes[i].method, method))
            return &s->opt.routes[i];
    return NULL;
}

/* No route matched: 405 with Allow when the path exists, else 404. */
static void route_error(http_req *r) {
    const http_options *o = &r->srv->opt;
    char allow[64] = "";
    for (int i = 0; i < o->n_routes; i++) {
        if (!path_matches(o->routes[i].path, r->path)) continue;
        if (strlen(allow) + strlen(o->routes[i].method) + 3 < sizeof(allow))
            snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s",
                     allow[0] ? ", " : "", o->routes[i].method);
    }
    if (allow[0]) {
        char msg[128];
        http_add_header(r, MHD_HTTP_HEADER_ALLOW, allow);
        snprintf(msg, sizeof(msg), "Method %s not allowed; use %s", r->method, allow);
        error_reply(r, 405, msg);
    } else {
        error_reply(r, 404, "Not found");
    }
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_size,
                                      void **con_cls) {
    http_server *s = cls;
    http_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r) return MHD_NO;
        r->srv = s;
        r->conn = conn;
        r->seq = ++s->next_seq;
        r->t_start_ns = uv_hrtime();
        snprintf(r->method, sizeof(r->method), "%s", method);
        r->path = strdup(url);
        r->next = s->reqs;
        if (s->reqs) s->reqs->prev = r;
        s->reqs = r;
        s->n_reqs++;
        *con_cls = r;
        r->route = find_route(s, r->method, r->path);
        if (s->opt.admit && s->opt.admit(r, r->route, s->opt.ctx)) {
            if (!r->status) error_reply(r, 500, "request refused");
        } else if (!r->route) {
            route_error(r);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        /* Both framings at once is how requests are smuggled past proxies. */
        if (!r->status && cl && MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                            MHD_HTTP_HEADER_TRANSFER_ENCODING))
            error_reply(r, 400, "Content-Length and Transfer-Encoding must not come together");
        if (!r->status && cl && strtoull(cl, NULL, 10) > s->opt.max_body_bytes) {
            r->body_too_large = true;
            error_reply(r, 413, "Request body too large");
        }
        if (!r->status) return MHD_YES; /* wait for the body */
    }
    if (*upload_size) {
        /* After an early error the body is read and dropped. */
        if (!r->status && !r->body_too_large) {
            size_t need = r->body_len + *upload_size;
            if (need > s->opt.max_body_bytes) {
                r->body_too_large = true;
                free(r->body);
                r->body = NULL;
                r->body_len = r->body_cap = 0;
                /* Answer now, then close: a chunked upload need never end. */
                r->upload_cut = true;
                error_reply(r, 413, "Request body too large");
                *upload_size = 0;
                return MHD_NO;
            } else {
                if (need + 1 > r->body_cap) {
                    size_t cap = r->body_cap ? r->body_cap : 1024;
                    while (cap < need + 1) cap *= 2;
                    char *p = realloc(r->body, cap);
                    if (!p) return MHD_NO;
                    r->body = p;
                    r->body_cap = cap;
                }
                memcpy(r->body + r->body_len, upload_data, *upload_size);
                r->body_len = need;
                r->body[need] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!r->dispatched && !r->status) {
        r->dispatched = true;
        if (r->body_too_large)
            error_reply(r, 413, "Request body too large");
        else
            r->route->handler(r, s->opt.ctx);
    }
    if (r->client_gone && (!r->response || !r->streaming)) return MHD_NO;
    if (r->response) {
        enum MHD_Result ok = MHD_queue_response(conn, (unsigned)r->status, r->response);
        MHD_destroy_response(r->response);
        r->response = NULL;
        return ok;
    }
    suspend(r);
    return MHD_YES;
}

static void free_req(http_req *r) {
    while (r->headers) {
        header *h = r->headers;
        r->headers = h->next;
        free(h->name);
        free(h->value);
        free(h);
    }
    if (r->response) MHD_destroy_response(r->response);
    free(r->path);
    free(r->body);
    free(r->out);
    free(r);
}

static void handle_closed(http_server *s) {
    if (--s->n_closing == 0 && s->freeing) free(s);
}

static void on_watch_closed(uv_handle_t *h) {
    http_req *r = h->data;
    http_server *s = r->srv;
    free_req(r);
    handle_closed(s);
}

/* UTC, to the millisecond: access-log lines from several replicas sort together. */
static void log_time(char *out, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* A client that shut its write side after the request has nothing more
 * to send; MHD (edge-triggered epoll) may already have had the end-of-file
 * event while the request was in hand, and would then keep the connection
 * in CLOSE-WAIT until the idle timeout. The reply is in the kernel's
 * buffer by now, so shutting the socket both ways still delivers it, and
 * MHD sees the connection end. Pipelined bytes leave it open. */
static void close_if_half_closed(http_req *r) {
    int fd = conn_fd(r);
    char byte;
    if (fd >= 0 && recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) shutdown(fd, SHUT_RDWR);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    http_server *s = cls;
    http_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    bool aborted = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || r->client_gone;
    double ms = (double)(uv_hrtime() - r->t_start_ns) / 1e6;
    char when[40];
    log_time(when, sizeof when);
    fprintf(stderr, "%s http #%llu %s %s %d%s %.1fms%s%s\n", when, (unsigned long long)r->seq, r->method,
            r->path, r->status, aborted ? " (aborted)" : "", ms, r->note[0] ? " " : "", r->note);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) close_if_half_closed(r);
    if (r->prev) r->prev->next = r->next; else s->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    s->n_reqs--;
    if (r->on_close) r->on_close(r->close_data, aborted);
    if (r->watch_inited) {
        s->n_closing++;
        uv_close((uv_handle_t *)&r->watch, on_watch_closed);
    } else {
        free_req(r);
    }
}

/* A closed connection may free a slot under max_connections; MHD takes the
 * listening socket back into its epoll set only on its next run, so make
 * one (in this loop turn) or clients queued in the backlog would wait for
 * an unrelated event. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) s->run_pending = true;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* MHD's own %XX decoding turns %00 into a NUL that ends the path
 * ("/app.js%00.html" would route as "/app.js"). This one decodes the rest
 * and keeps %00 as sent, so such a path matches no route. */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s) {
    char *out = s;
    for (const char *p = s; *p; p++) {
        int hi = p[0] == '%' ? hex_digit(p[1]) : -1, lo = hi >= 0 ? hex_digit(p[2]) : -1;
        if (lo >= 0 && (hi | lo)) {
            *out++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *out++ = *p;
        }
    }
    *out = 0;
    return (size_t)(out - s);
}

/* ---- server ----------------------------------------------------------------- */

/* MHD's own messages: while starting, the reason is kept for http_start's one
 * line (MHD's text names port 0 when given a socket address); later ones are
 * logged. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    http_server *s = cls;
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    if (!s->daemon) { /* still in MHD_start_daemon */
        const char *reason = strrchr(line, ':');
        snprintf(s->start_error, sizeof s->start_error, "%s", reason ? reason + 2 : line);
        return;
    }
    fprintf(stderr, "genloop: http: %s\n", line);
}

http_server *http_start(uv_loop_t *loop, const http_options *opt, char *err, size_t err_len) {
    struct sockaddr_in addr4;
    struct sockaddr_in6 addr6;
    struct sockaddr *addr;
    memset(&addr4, 0, sizeof(addr4));
    memset(&addr6, 0, sizeof(addr6));
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, opt->host, &addr4.sin_addr) == 1) {
        addr4.sin_family = AF_INET;
        addr4.sin_port = htons((uint16_t)opt->port);
        addr = (struct sockaddr *)&addr4;
    } else if (inet_pton(AF_INET6, opt->host, &addr6.sin6_addr) == 1) {
        addr6.sin6_family = AF_INET6;
        addr6.sin6_port = htons((uint16_t)opt->port);
        addr = (struct sockaddr *)&addr6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, err_len, "host must be a numeric IPv4 or IPv6 address: %s", opt->host);
        return NULL;
    }
    http_server *s = calloc(1, sizeof(*s));
    if (!s) { snprintf(err, err_len, "out of memory"); return NULL; }
    s->loop = loop;
    s->opt = *opt;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, access_handler, s,
                                 MHD_OPTION_SOCK_ADDR, addr,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)opt->timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)(opt->max_connections > 0 ? opt->max_connections : 1024),
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                 MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, err_len, "cannot listen on %s:%d: %s", opt->host, opt->port,
                 s->start_error[0] ? s->start_error : "address in use or not available");
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : opt->port;
    info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    uv_poll_init(loop, &s->epoll_watch, info->epoll_fd);
    s->epoll_watch.data = s;
    uv_poll_start(&s->epoll_watch, UV_READABLE, on_epoll);
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    uv_check_init(loop, &s->check);
    s->check.data = s;
    uv_check_start(&s->check, on_check);
    s->listening = true;
    run_mhd(s);
    return s;
}

int http_port(const http_server *s) { return s->port; }
int http_active(const http_server *s) { return s->n_reqs; }

void http_stop_accepting(http_server *s) {
    if (!s->listening) return;
    s->listening = false;
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

static void on_server_handle_closed(uv_handle_t *h) { handle_closed(h->data); }

void http_free(http_server *s) {
    if (!s) return;
    http_stop_accepting(s);
    /* Cut whatever is still open, let MHD close those connections, then stop. */
    for (http_req *r = s->reqs; r; r = r->next) {
        r->client_gone = true;
        resume(r);
    }
    for (int i = 0; i < 4 && s->n_reqs > 0; i++) run_mhd(s);
    uv_poll_stop(&s->epoll_watch);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    s->freeing = true;
    s->n_closing += 3;
    uv_close((uv_handle_t *)&s->epoll_watch, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->timer, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->check, on_server_handle_closed);
}
