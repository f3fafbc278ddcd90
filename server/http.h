/* http.h -- libmicrohttpd driven by a libuv loop, with routing, bodies,
 * replies that may come later, and chunked streams.
 *
 * MHD runs without threads of its own (MHD_USE_EPOLL): a uv_poll_t watches its
 * epoll fd and a uv_timer_t its timeouts, so every callback below runs on the
 * loop thread. A handler gets the whole body and either replies at once or
 * keeps the http_req and replies/streams later from the loop thread; meanwhile
 * the connection is suspended and the socket is watched for the client going
 * away. All functions are loop-thread only. */
#ifndef HTTP_H
#define HTTP_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct http_server http_server;
typedef struct http_req http_req;

typedef void (*http_handler_fn)(http_req *req, void *ctx);

typedef struct http_route {
    const char *method;      /* "GET" or "POST" */
    const char *path;        /* exact match, query string excluded */
    http_handler_fn handler;
} http_route;

typedef struct http_options {
    const char *host;
    int port;                /* 0 = any free port; see http_port() */
    int timeout_s;           /* idle connection timeout */
    size_t max_body_bytes;   /* larger bodies get 413 */
    const http_route *routes;
    int n_routes;
    /* Formats errors found by this module (404, 405, 413); the reply must be
     * made with http_reply*. */
    void (*error)(http_req *req, int status, const char *message, void *ctx);
    void *ctx;               /* passed to handlers and error */
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
size_t http_req_body_len(const http_req *r);
uint64_t http_req_seq(const http_req *r);        /* 1, 2, ... per server */
/* Free text appended to this request's log line. */
void http_req_log(http_req *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* fn(data, aborted) runs once when the request is over: aborted = the
 * client went away or the server cut it before the reply was complete.
 * After it, r is gone. */
void http_req_on_close(http_req *r, void (*fn)(void *data, int aborted), void *data);

/* ---- replying (once per request) -------------------------------------------- */
void http_add_header(http_req *r, const char *name, const char *value);
void http_reply(http_req *r, int status, const char *content_type, const char *body, size_t len);
/* A chunked response; the status and headers go out at once. */
void http_stream_start(http_req *r, int status, const char *content_type);
void http_stream_write(http_req *r, const char *data, size_t len);
void http_stream_end(http_req *r);

#endif
