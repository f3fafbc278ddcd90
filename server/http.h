/* http.h -- libmicrohttpd driven by a libuv loop, with routing, bodies,
 * replies that may come later, and chunked streams.
 *
 * MHD runs without threads of its own (MHD_USE_EPOLL): a uv_poll_t watches its
 * epoll fd and a uv_timer_t its timeouts, so every callback below runs on the
 * loop thread. A handler gets the whole body and either replies at once or
 * keeps the http_req and replies/streams later from the loop thread; meanwhile
 * the connection is suspended and the socket is watched for the client going
 * away. All functions are loop-thread only. */
#ifndef GL_HTTP_H
#define GL_HTTP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct http_server http_server;
typedef struct http_req http_req;

typedef void (*http_handler_fn)(http_req *req, void *ctx);

typedef struct http_route {
    const char *method;      /* "GET", "HEAD" or "POST" */
    const char *path;        /* exact match, query string excluded; a trailing star matches any rest */
    http_handler_fn handler;
    bool open;               /* for admit: served without credentials (health, web UI) */
} http_route;

typedef struct http_options {
    const char *host;
    int port;                /* 0 = any free port; see http_port() */
    int timeout_s;           /* keep-alive idle timeout (and MHD's inactivity timeout) */
    int header_timeout_s;    /* a new connection's request head must be in by then; 0 = timeout_s */
    int body_timeout_s;      /* longest pause between two reads of a request body; 0 = none */
    int max_connections;     /* beyond it the oldest idle connection is closed, or the new one
                                gets 503 when none is idle; 0 = MHD's limit, no guard */
    int max_per_address;     /* the same per client address (429); 0 = no cap */
    size_t max_body_bytes;   /* larger bodies get 413 */
    size_t max_stream_buffer;/* unsent stream bytes before the client is dropped (and the
                                stream socket's SO_SNDBUF, up to 1 MiB); 0 = no bound */
    const http_route *routes;
    int n_routes;
    /* Called once per request when its headers are in, before routing
     * errors and before the body is read; route is the match or NULL. It
     * may add headers, or reply (e.g. 401, a CORS preflight) and return 1 to
     * end the request there; 0 goes on. NULL = admit everything. */
    int (*admit)(http_req *req, const http_route *route, void *ctx);
    /* Formats errors found by this module (400, 404, 405, 413); the reply must be
     * made with http_reply*. */
    void (*error)(http_req *req, int status, const char *message, void *ctx);
    void *ctx;               /* passed to handlers, admit and error */
} http_options;

/* Listens at once. Returns NULL with a message in err on failure. */
http_server *http_start(uv_loop_t *loop, const http_options *opt, char *err, size_t err_len);
int http_port(const http_server *s);
/* Close the listening socket; requests in progress go on. */
void http_stop_accepting(http_server *s);
/* Number of requests not yet completed. */
int http_active(const http_server *s);
/* End every request still open (streams are cut), stop MHD, close handles.
 * Close callbacks run before this returns; memory goes when the loop runs. */
void http_free(http_server *s);

/* ---- the request ------------------------------------------------------------ */
const char *http_req_method(const http_req *r);
const char *http_req_path(const http_req *r);
const char *http_req_body(const http_req *r);   /* NUL-terminated */
/* A request header (name case-insensitive), or NULL. */
const char *http_req_header(const http_req *r, const char *name);
size_t http_req_body_len(const http_req *r);
uint64_t http_req_seq(const http_req *r);        /* 1, 2, ... per server */
/* Free text appended to this request's log line. */
void http_req_log(http_req *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* fn(data, aborted) runs once when the request is over: aborted = the
 * client went away or the server cut it before the reply was complete.
 * After it, r is gone. */
void http_req_on_close(http_req *r, void (*fn)(void *data, bool aborted), void *data);

/* The time at the head of every log line: UTC, to the millisecond. */
void http_log_time(char *out, size_t n);

/* ---- replying (once per request) -------------------------------------------- */
void http_add_header(http_req *r, const char *name, const char *value);
void http_reply(http_req *r, int status, const char *content_type, const char *body, size_t len);
/* A chunked response; the status and headers go out at once. */
void http_stream_start(http_req *r, int status, const char *content_type);
/* Queues bytes for the client. A client that lets more than
 * max_stream_buffer bytes pile up is dropped: its connection is reset and
 * on_close runs with aborted = 1, so a slow reader never holds memory or
 * the engine. Later writes are ignored. */
void http_stream_write(http_req *r, const char *data, size_t len);
void http_stream_end(http_req *r);

#endif
