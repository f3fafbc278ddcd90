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
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "peers.h"
#include "utf8.h"

typedef struct header { char *name, *value; struct header *next; } header;

/* Extra connections MHD may take beyond max_connections: each makes room
 * by closing an idle one, and MHD counts the closed one until it has
 * noticed the close. */
#define EVICT_SLACK 64
#define GUARD_TICK_MS 250   /* deadlines and half-closed sockets are checked this often */

/* Where a connection is: FRESH (accepted, no request head yet), BUSY (a
 * request is open), KEPT (a keep-alive connection between requests). FRESH
 * and KEPT are "idle": they hold a slot but nothing is being served. */
typedef enum { CONN_FRESH, CONN_BUSY, CONN_KEPT } conn_state;

typedef struct conn_slot conn_slot;
typedef struct conn_list { conn_slot *head, *tail; } conn_list;

/* One client connection, from MHD's accept to its close (MHD's socket context). */
struct conn_slot {
    http_server *srv;
    int fd;
    peer *peer;              /* its address's count; NULL once uncounted */
    conn_state state;
    uint64_t since_ms;       /* loop time it became FRESH or KEPT */
    conn_slot *prev, *next;  /* in srv->fresh or srv->kept, oldest first */
    http_req *req;           /* while BUSY */
    uv_poll_t poll;          /* idle: the peer's FIN; suspended request: the client going away */
    bool polling;
    bool peer_shut;          /* FIN seen while idle; closed once MHD has read what came before */
    bool closing;            /* we shut the socket down; MHD has yet to notice */
};

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
    bool watch_only_hup;     /* pipelined bytes wait: watch for the hang-up only */
    conn_slot *slot;         /* its connection */
    uint64_t last_read_ms;   /* loop time the head or the last body piece came */

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

    uv_timer_t guard;        /* deadlines, every GUARD_TICK_MS */
    peers *peers;            /* open connections per address */
    int n_open;              /* connections counted against max_connections */
    conn_list fresh, kept;   /* the idle connections, oldest first */
    int n_peer_shut;         /* idle ones with peer_shut set */
    /* what the guard did since it last logged (at most once a second) */
    int n_evicted, n_refused, n_header_late, n_body_late, n_kept_late;
    uint64_t last_guard_log_ms;
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

static void poll_cb(uv_poll_t *p, int status, int events);

static void poll_start(conn_slot *c, int events) {
    if (uv_poll_start(&c->poll, events, poll_cb) == 0) c->polling = true;
}

static void poll_stop(conn_slot *c) {
    if (!c->polling) return;
    uv_poll_stop(&c->poll);
    c->polling = false;
}

static void suspend(http_req *r) {
    if (r->suspended) return;
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    if (r->client_gone || !r->slot) return;
    poll_start(r->slot, r->watch_only_hup ? UV_DISCONNECT : UV_READABLE | UV_DISCONNECT);
}

static void resume(http_req *r) {
    if (!r->suspended) return;
    if (r->slot) poll_stop(r->slot);
    r->suspended = false;
    MHD_resume_connection(r->conn);
    r->srv->run_pending = true;
}

/* The socket of a suspended request became readable or hung up: find out
 * whether the peer closed it (pipelined bytes are left for MHD). */
static void watch_suspended(http_req *r, int status, int events) {
    bool gone = status < 0 || (events & UV_DISCONNECT);
    if (!gone && (events & UV_READABLE)) {
        char byte;
        ssize_t n = recv(r->slot->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            gone = true;
        else if (n > 0) {
            r->watch_only_hup = true;
            poll_start(r->slot, UV_DISCONNECT);
        }
    }
    if (!gone) return;
    /* Resume so MHD closes the connection; the close callback cancels work. */
    r->client_gone = true;
    resume(r);
}

static void watch_idle(conn_slot *c);

static void poll_cb(uv_poll_t *p, int status, int events) {
    conn_slot *c = p->data;
    if (c->state == CONN_BUSY) {
        if (c->req && c->req->suspended) watch_suspended(c->req, status, events);
        return;
    }
    watch_idle(c);
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

/* ---- the connection guard -----------------------------------------------------
 *
 * What nginx does with client_header_timeout, client_body_timeout,
 * keepalive_timeout and limit_conn, so that one client cannot hold every
 * connection: a new connection must send its request head within
 * header_timeout_s; a body may pause at most body_timeout_s between
 * reads; a keep-alive connection idles at most timeout_s. When a new
 * connection takes the count past max_connections (or its address's past
 * max_per_address), the oldest idle connection (of that address) is closed
 * to make room; with none idle, the new one gets a 503 (429) and is closed.
 * A connection is closed by shutting its socket down: MHD sees the end and
 * runs its close callbacks as for any client that left. */

static void list_append(conn_list *l, conn_slot *c) {
    c->prev = l->tail;
    c->next = NULL;
    if (l->tail) l->tail->next = c; else l->head = c;
    l->tail = c;
}

static void list_remove(conn_list *l, conn_slot *c) {
    if (c->prev) c->prev->next = c->next; else l->head = c->next;
    if (c->next) c->next->prev = c->prev; else l->tail = c->prev;
    c->prev = c->next = NULL;
}

static conn_list *list_of(conn_slot *c) {
    return c->state == CONN_FRESH ? &c->srv->fresh : c->state == CONN_KEPT ? &c->srv->kept : NULL;
}

/* Out of the idle lists (it is busy, closing or closed). */
static void slot_unidle(conn_slot *c) {
    conn_list *l = list_of(c);
    if (l) list_remove(l, c);
    if (c->peer_shut && l) c->srv->n_peer_shut--;
    c->state = CONN_BUSY;
    poll_stop(c);
}

/* Idle again (or for the first time): listed, and its FIN watched. */
static void slot_idle(conn_slot *c, conn_state state) {
    slot_unidle(c);
    c->state = state;
    c->since_ms = uv_now(c->srv->loop);
    list_append(list_of(c), c);
    if (c->peer_shut) c->srv->n_peer_shut++;
    else poll_start(c, UV_DISCONNECT);
}

/* No longer counted against the caps. */
static void slot_uncount(conn_slot *c) {
    if (!c->peer) return;
    c->srv->n_open--;
    peers_remove(c->srv->peers, c->peer);
    c->peer = NULL;
}

static void slot_close(conn_slot *c) {
    if (c->closing) return;
    slot_unidle(c);
    slot_uncount(c);
    c->closing = true;
    shutdown(c->fd, SHUT_RDWR);
    c->srv->run_pending = true;
}

/* A FIN while idle: a request can no longer be completed, so close once
 * MHD has read what came before it (a complete request is still served;
 * MHD does not always notice the end itself, and would leave the socket in
 * CLOSE-WAIT until the idle timeout). */
static void check_peer_shut(conn_slot *c) {
    char byte;
    ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) slot_close(c);
}

static void watch_idle(conn_slot *c) {
    poll_stop(c);
    if (c->peer_shut || c->closing) return;
    c->peer_shut = true;
    c->srv->n_peer_shut++;
    check_peer_shut(c);
}

/* Bytes wait on c's socket: a request is coming in (MHD accepts a batch of
 * connections before it reads any of them), so c is not idle in fact. */
static bool request_pending(const conn_slot *c) {
    char byte;
    return recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

#define VICTIM_SCAN 64   /* idle connections looked at per list for one without pending bytes */

/* The oldest idle connection other than self, of address p (any when NULL),
 * preferring one with no request arriving. */
static conn_slot *oldest_idle(http_server *s, const peer *p, const conn_slot *self) {
    conn_slot *best = NULL, *fallback = NULL;
    const conn_list *lists[2] = { &s->fresh, &s->kept };
    for (int i = 0; i < 2; i++) {
        int looked = 0;
        for (conn_slot *c = lists[i]->head; c && looked < VICTIM_SCAN; c = c->next) {
            if (c == self || (p && c->peer != p)) continue;
            looked++;
            if (!fallback || c->since_ms < fallback->since_ms) fallback = c;
            if (request_pending(c)) continue;
            if (!best || c->since_ms < best->since_ms) best = c;
            break;
        }
    }
    return best ? best : fallback && !request_pending(fallback) ? fallback : NULL;
}

/* A refusal before any request: an OpenAI-style error, then close. */
static void slot_refuse(conn_slot *c, int status, const char *code, const char *message) {
    char body[256], head[256];
    int len = snprintf(body, sizeof body,
                       "{\"error\":{\"message\":\"%s\",\"type\":\"server_error\",\"param\":null,"
                       "\"code\":\"%s\"}}", message, code);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nConnection: close\r\nRetry-After: 1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n",
                     status, MHD_get_reason_phrase_for((unsigned)status), len);
    if (send(c->fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n)
        send(c->fd, body, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    c->srv->n_refused++;
    slot_close(c);
}

/* A new connection is counted; make room for it or refuse it. */
static void slot_admit(http_server *s, conn_slot *c) {
    if (s->opt.max_per_address > 0 && peers_count(c->peer) > s->opt.max_per_address) {
        conn_slot *victim = oldest_idle(s, c->peer, c);
        if (!victim) {
            slot_refuse(c, 429, "too_many_connections", "Too many connections from this address");
            return;
        }
        s->n_evicted++;
        slot_close(victim);
    }
    if (s->opt.max_connections > 0 && s->n_open > s->opt.max_connections) {
        conn_slot *victim = oldest_idle(s, NULL, c);
        if (!victim) {
            slot_refuse(c, 503, "too_many_connections", "The server is at its connection limit");
            return;
        }
        s->n_evicted++;
        slot_close(victim);
    }
}


static void guard_log(http_server *s, uint64_t now) {
    if (!(s->n_evicted | s->n_refused | s->n_header_late | s->n_body_late | s->n_kept_late)) return;
    if (now - s->last_guard_log_ms < 1000) return;
    char when[40];
    http_log_time(when, sizeof when);
    fprintf(stderr, "%s http: connections closed: %d idle to make room, %d refused at the cap, "
            "%d past the header deadline, %d past the body deadline, %d idle keep-alive "
            "(%d open)\n", when, s->n_evicted, s->n_refused, s->n_header_late, s->n_body_late,
            s->n_kept_late, s->n_open);
    s->n_evicted = s->n_refused = s->n_header_late = s->n_body_late = s->n_kept_late = 0;
    s->last_guard_log_ms = now;
}

static void reply_raw(http_req *r, int status, const char *content_type, const char *body,
                      size_t len);

static void on_guard(uv_timer_t *t) {
    http_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    uint64_t header_ms = (uint64_t)s->opt.header_timeout_s * 1000;
    uint64_t kept_ms = (uint64_t)s->opt.timeout_s * 1000;
    uint64_t body_ms = (uint64_t)s->opt.body_timeout_s * 1000;
    /* Each list is oldest first and has one deadline: only heads are due. */
    while (header_ms && s->fresh.head && now - s->fresh.head->since_ms >= header_ms) {
        s->n_header_late++;
        slot_close(s->fresh.head);
    }
    while (kept_ms && s->kept.head && now - s->kept.head->since_ms >= kept_ms) {
        s->n_kept_late++;
        slot_close(s->kept.head);
    }
    for (http_req *r = s->reqs; body_ms && r; r = r->next) {
        if (r->dispatched || !r->slot || r->slot->closing || now - r->last_read_ms < body_ms) continue;
        if (!r->status) {
            static const char msg[] = "{\"error\":{\"message\":\"The request body stalled\","
                                      "\"type\":\"invalid_request_error\",\"param\":null,"
                                      "\"code\":\"request_timeout\"}}";
            reply_raw(r, 408, "application/json", msg, sizeof msg - 1);
            r->status = 408;
        }
        s->n_body_late++;
        r->client_gone = true;
        slot_close(r->slot);
    }
    if (s->n_peer_shut > 0) {
        const conn_list *lists[2] = { &s->fresh, &s->kept };
        for (int i = 0; i < 2; i++)
            for (conn_slot *c = lists[i]->head, *next; c; c = next) {
                next = c->next;
                if (c->peer_shut) check_peer_shut(c);
            }
    }
    guard_log(s, now);
    if (s->run_pending) run_mhd(s);
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

static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
    if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) ++*(int *)cls;
    return MHD_YES;
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
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->slot = ci ? ci->socket_context : NULL;
        if (r->slot) {
            slot_unidle(r->slot);
            r->slot->req = r;
        }
        r->last_read_ms = uv_now(s->loop);
        r->route = find_route(s, r->method, r->path);
        int n_host = 0;
        MHD_get_connection_values(conn, MHD_HEADER_KIND, count_host, &n_host);
        if (!strcmp(version, MHD_HTTP_VERSION_1_1) && n_host != 1) {
            /* RFC 9112 section 3.2: a proxy and this server could disagree on the target. */
            error_reply(r, 400, n_host ? "More than one Host header" : "HTTP/1.1 requests need a Host header");
        } else if (s->opt.admit && s->opt.admit(r, r->route, s->opt.ctx)) {
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
        r->last_read_ms = uv_now(s->loop);
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
    if (--s->n_closing == 0 && s->freeing) {
        peers_free(s->peers);
        free(s);
    }
}


/* UTC, to the millisecond: access-log lines from several replicas sort together. */
void http_log_time(char *out, size_t n) {
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

static const char *abort_reason(const http_req *r, enum MHD_RequestTerminationCode toe) {
    if (r->srv->freeing || (r->client_gone && toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN))
        return " (aborted: server stopping)";
    switch (toe) {
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return " (aborted: timed out)";
    case MHD_REQUEST_TERMINATED_READ_ERROR: return " (aborted: client closed the connection while sending)";
    case MHD_REQUEST_TERMINATED_WITH_ERROR:
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
    case MHD_REQUEST_TERMINATED_COMPLETED_OK: /* a stream the client left */
        return r->client_gone ? " (aborted: client closed the connection)" : " (aborted)";
    default: return " (aborted)";
    }
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
    http_log_time(when, sizeof when);
    fprintf(stderr, "%s http #%llu %s %s %d%s %.1fms%s%s\n", when, (unsigned long long)r->seq, r->method,
            r->path, r->status, aborted ? abort_reason(r, toe) : "", ms, r->note[0] ? " " : "", r->note);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) close_if_half_closed(r);
    if (r->prev) r->prev->next = r->next; else s->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    s->n_reqs--;
    if (r->on_close) r->on_close(r->close_data, aborted);
    if (r->slot) {
        r->slot->req = NULL;
        if (!r->slot->closing) slot_idle(r->slot, CONN_KEPT);
    }
    free_req(r);
}

/* A closed connection may free a slot under max_connections; MHD takes the
 * listening socket back into its epoll set only on its next run, so make
 * one (in this loop turn) or clients queued in the backlog would wait for
 * an unrelated event. */
static void on_slot_closed(uv_handle_t *h) {
    conn_slot *c = h->data;
    http_server *s = c->srv;
    free(c);
    handle_closed(s);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        conn_slot *c = calloc(1, sizeof(*c));
        if (!c || !fd || uv_poll_init_socket(s->loop, &c->poll, fd->connect_fd) != 0) {
            free(c); /* unguarded, but served */
            return;
        }
        c->srv = s;
        c->fd = fd->connect_fd;
        c->poll.data = c;
        c->state = CONN_BUSY;
        c->peer = peers_add(s->peers, addr ? addr->client_addr : NULL);
        if (c->peer) s->n_open++;
        *socket_context = c;
        slot_idle(c, CONN_FRESH);
        slot_admit(s, c);
        return;
    }
    if (toe != MHD_CONNECTION_NOTIFY_CLOSED) return;
    s->run_pending = true;
    conn_slot *c = *socket_context;
    if (!c) return;
    *socket_context = NULL;
    if (c->req) c->req->slot = NULL;
    slot_unidle(c);
    slot_uncount(c);
    s->n_closing++;
    uv_close((uv_handle_t *)&c->poll, on_slot_closed);
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
    /* A client leaving shows in the request's own access-log line (with its
     * time and number); MHD's words for it are noise. */
    if (strstr(line, "detected connection closure") || strstr(line, "application error generating response"))
        return;
    char when[40];
    http_log_time(when, sizeof when);
    fprintf(stderr, "%s genloop: http: %s\n", when, line);
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
    if (s->opt.header_timeout_s <= 0) s->opt.header_timeout_s = opt->timeout_s;
    s->peers = peers_create();
    if (!s->peers) { snprintf(err, err_len, "out of memory"); free(s); return NULL; }
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, access_handler, s,
                                 MHD_OPTION_SOCK_ADDR, addr,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)opt->timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)(opt->max_connections > 0 ? opt->max_connections + EVICT_SLACK : 1024),
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                 MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, err_len, "cannot listen on %s:%d: %s", opt->host, opt->port,
                 s->start_error[0] ? s->start_error : "address in use or not available");
        peers_free(s->peers);
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
    uv_timer_init(loop, &s->guard);
    s->guard.data = s;
    uv_timer_start(&s->guard, on_guard, GUARD_TICK_MS, GUARD_TICK_MS);
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
    s->n_closing += 4;
    uv_close((uv_handle_t *)&s->guard, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->epoll_watch, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->timer, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->check, on_server_handle_closed);
}
