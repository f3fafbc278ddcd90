"""`genloop serve` against malformed and hostile requests (stories260K).

CASES is a table: one row per malformed input, sent as raw bytes, with the
status (and error code) it must get. Every reply must be valid UTF-8 and
valid JSON (an OpenAI error object for errors), and the server must stay
healthy. A new case is one row. After the table, the connection edge cases
that need raw sockets: a half-closed client, an endless chunked upload, a
malformed Content-Length. Loopback only; waits are bounded."""
import json
import socket
import time

import pytest

from server_util import Server, binary, request, tiny_model

MAX_WAITING = 8
MAX_BODY = 200_000
TIMEOUT_S = 60  # the server's idle timeout: the tests must see closes long before it


@pytest.fixture(scope="module")
def server():
    with Server(tiny_model(), "--max-waiting", str(MAX_WAITING), "--max-body-bytes", str(MAX_BODY),
                "--timeout", str(TIMEOUT_S), "--chat-template", "chatml", "--strict-model") as s:
        yield s


def http_bytes(method, path, body=b"", content_type=b"application/json", extra=b""):
    head = b"%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method.encode(), path)
    if content_type:
        head += b"Content-Type: " + content_type + b"\r\n"
    if method != "GET":
        head += b"Content-Length: %d\r\n" % len(body)
    return head + extra + b"\r\n" + body


def exchange(port, data, timeout=30):
    """Sends data, reads until the server closes; (status, headers dict, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.decode().partition(":") for ln in lines[1:])}
    return status, headers, body


def nested(depth):
    return b"[" * depth + b"]" * depth


# (id, method, path, body bytes, status, error code or None, content type)
JSON = b"application/json"
CASES = [
    # 4: a raw NUL byte inside a string must not cut the text silently
    ("nul-prompt", "POST", b"/v1/completions",
     b'{"prompt":"Once upon\x00 a time there was","echo":true,"max_tokens":1}', 400, "invalid_json", JSON),
    ("nul-tokenize", "POST", b"/tokenize", b'{"content":"Once upon\x00 a time"}', 400, "invalid_json", JSON),
    ("nul-chat", "POST", b"/v1/chat/completions",
     b'{"messages":[{"role":"user","content":"hi\x00 there"}]}', 400, "invalid_json", JSON),
    ("nul-escaped", "POST", b"/tokenize", b'{"content":"a\\u0000b"}', 400, "invalid_value", JSON),
    # 5: echoed request bytes stay valid UTF-8 in the error
    ("bad-utf8-key", "POST", b"/tokenize", b'{"content":"x","\xff":1}', 400, "unsupported_parameter", JSON),
    ("bad-utf8-model", "POST", b"/v1/completions", b'{"prompt":"x","model":"m\xff"}', 404, "model_not_found", JSON),
    ("logit-bias-cut", "POST", b"/v1/completions",
     ('{"prompt":"x","logit_bias":{"%s":1}}' % ("a" * 31 + "\u20ac")).encode(), 400, "invalid_value", JSON),
    ("long-utf8-key", "POST", b"/tokenize", ('{"content":"x","%s":1}' % ("\u20ac" * 200)).encode(), 400,
     "unsupported_parameter", JSON),
    ("bad-utf8-prompt", "POST", b"/v1/completions", b'{"prompt":"a\xff\xfeb"}', 400, "invalid_value", JSON),
    ("overlong-utf8", "POST", b"/tokenize", b'{"content":"\xc0\xaf"}', 400, "invalid_value", JSON),
    # lone surrogates, escaped and raw (CESU-8)
    ("lone-high-surrogate", "POST", b"/tokenize", b'{"content":"a\\ud800b"}', 400, None, JSON),
    ("lone-low-surrogate", "POST", b"/v1/completions", b'{"prompt":"\\udc00"}', 400, None, JSON),
    ("raw-surrogate", "POST", b"/tokenize", b'{"content":"\xed\xa0\x80"}', 400, "invalid_value", JSON),
    ("surrogate-pair-ok", "POST", b"/tokenize", b'{"content":"\\ud83d\\ude00"}', 200, None, JSON),
    # 6: data after the JSON value
    ("trailing-garbage", "POST", b"/tokenize", b'{"content":"x"} xyz', 400, "invalid_json", JSON),
    ("two-objects", "POST", b"/v1/completions", b'{"prompt":"x"}{"prompt":"y"}', 400, "invalid_json", JSON),
    ("trailing-nul", "POST", b"/tokenize", b'{"content":"x"}\x00', 400, "invalid_json", JSON),
    ("trailing-space-ok", "POST", b"/tokenize", b'{"content":"x"} \r\n\t', 200, None, JSON),
    ("bom-ok", "POST", b"/tokenize", b'\xef\xbb\xbf{"content":"x"}', 200, None, JSON),
    # not a JSON object
    ("empty-body", "POST", b"/tokenize", b"", 400, "invalid_json", JSON),
    ("array-body", "POST", b"/v1/completions", b"[]", 400, "invalid_json", JSON),
    ("null-body", "POST", b"/v1/completions", b"null", 400, "invalid_json", JSON),
    ("truncated", "POST", b"/v1/completions", b'{"prompt":"x"', 400, "invalid_json", JSON),
    ("unterminated-string", "POST", b"/tokenize", b'{"content":"x}', 400, "invalid_json", JSON),
    # deep nesting: over cJSON's limit is not JSON to us; under it, the wrong type
    ("deep-nesting", "POST", b"/v1/completions", b'{"prompt":' + nested(90_000) + b"}", 400, "invalid_json", JSON),
    ("nesting-in-unknown-key", "POST", b"/tokenize", b'{"content":"x","z":' + nested(900) + b"}", 400,
     "unsupported_parameter", JSON),
    ("nested-prompt", "POST", b"/v1/completions", b'{"prompt":' + nested(500) + b"}", 400, "invalid_value", JSON),
    # content types: the body is JSON whatever the header says (curl -d sends a form type)
    ("form-body", "POST", b"/v1/completions", b"prompt=hello&max_tokens=2", 400, "invalid_json",
     b"application/x-www-form-urlencoded"),
    ("multipart-body", "POST", b"/tokenize", b"--b\r\nContent-Disposition: form-data; name=\"content\"\r\n\r\nx\r\n--b--",
     400, "invalid_json", b"multipart/form-data; boundary=b"),
    ("json-as-text-ok", "POST", b"/tokenize", b'{"content":"x"}', 200, None, b"text/plain"),
    ("no-content-type-ok", "POST", b"/tokenize", b'{"content":"x"}', 200, None, None),
    # huge token-id arrays
    ("huge-prompt-ids", "POST", b"/v1/completions", json.dumps({"prompt": [5] * 60_000}).encode(), 400,
     "context_length_exceeded", JSON),
    ("huge-prompt-ids-many", "POST", b"/v1/completions", json.dumps({"prompt": [[5] * 100] * 300}).encode(), 400,
     "invalid_value", JSON),
    ("huge-detokenize-ok", "POST", b"/detokenize", json.dumps({"tokens": [5] * 30_000}).encode(), 200, None, JSON),
    ("token-id-2p31", "POST", b"/detokenize", b'{"tokens":[2147483648]}', 400, "invalid_value", JSON),
    ("token-id-negative", "POST", b"/v1/completions", b'{"prompt":[1,-1]}', 400, "invalid_value", JSON),
    ("token-id-fraction", "POST", b"/v1/completions", b'{"prompt":[1,2.5]}', 400, "invalid_value", JSON),
    ("body-over-limit", "POST", b"/tokenize", b'{"content":"' + b"a" * MAX_BODY + b'"}', 413, "request_too_large",
     JSON),
    # numeric edge values
    ("nan", "POST", b"/v1/completions", b'{"prompt":"x","temperature":NaN}', 400, "invalid_json", JSON),
    ("infinity", "POST", b"/v1/completions", b'{"prompt":"x","temperature":Infinity}', 400, "invalid_json", JSON),
    ("minus-infinity", "POST", b"/v1/completions", b'{"prompt":"x","top_p":-Infinity}', 400, "invalid_json", JSON),
    ("1e999-temperature", "POST", b"/v1/completions", b'{"prompt":"x","temperature":1e999}', 400, "invalid_type",
     JSON),
    ("1e999-max-tokens", "POST", b"/v1/completions", b'{"prompt":"x","max_tokens":1e999}', 400, "invalid_type",
     JSON),
    ("-1e999-seed", "POST", b"/v1/completions", b'{"prompt":"x","seed":-1e999}', 400, "invalid_type", JSON),
    ("2p63-seed", "POST", b"/v1/completions", b'{"prompt":"x","seed":9223372036854775808}', 400, "invalid_type",
     JSON),
    ("2p63-n", "POST", b"/v1/completions", b'{"prompt":"x","n":9223372036854775808}', 400, "invalid_value", JSON),
    ("2p63-top-k", "POST", b"/v1/completions", b'{"prompt":"x","top_k":9223372036854775808}', 400,
     "invalid_value", JSON),
    ("2p63-logit-bias-key", "POST", b"/v1/completions",
     b'{"prompt":"x","logit_bias":{"9223372036854775808":1}}', 400, "invalid_value", JSON),
    ("2p63-token-id", "POST", b"/v1/completions", b'{"prompt":[9223372036854775808]}', 400, "invalid_value", JSON),
    ("1e-400-temperature-ok", "POST", b"/v1/completions", b'{"prompt":"x","temperature":1e-400,"max_tokens":1}',
     200, None, JSON),
    ("minus-zero-ok", "POST", b"/v1/completions", b'{"prompt":"x","max_tokens":-0,"temperature":-0.0}', 200, None,
     JSON),
    ("fraction-max-tokens", "POST", b"/v1/completions", b'{"prompt":"x","max_tokens":1.5}', 400, "invalid_type",
     JSON),
    ("hex-number", "POST", b"/v1/completions", b'{"prompt":"x","max_tokens":0x10}', 400, "invalid_json", JSON),
    ("string-number", "POST", b"/v1/completions", b'{"prompt":"x","max_tokens":"2"}', 400, "invalid_type", JSON),
    # 1: more sequences than the waiting queue can ever hold
    ("seqs-over-queue", "POST", b"/v1/completions",
     json.dumps({"prompt": ["x"] * (MAX_WAITING + 1), "max_tokens": 1}).encode(), 400, "invalid_value", JSON),
    ("seqs-n-over-queue", "POST", b"/v1/completions",
     json.dumps({"prompt": ["x"] * 3, "n": 3, "max_tokens": 1}).encode(), 400, "invalid_value", JSON),
    ("chat-n-over-queue", "POST", b"/v1/chat/completions",
     json.dumps({"messages": [{"role": "user", "content": "x"}], "n": MAX_WAITING + 1}).encode(), 400,
     "invalid_value", JSON),
    ("seqs-at-queue-ok", "POST", b"/v1/completions",
     json.dumps({"prompt": ["x"] * 4, "n": 2, "max_tokens": 1}).encode(), 200, None, JSON),
    # 7: %00 in a path serves nothing
    ("pct00-suffix", "GET", b"/app.js%00.html", b"", 404, "not_found", None),
    ("pct00-root", "GET", b"/%00", b"", 404, "not_found", None),
    ("pct00-index", "GET", b"/index.html%00", b"", 404, "not_found", None),
    ("dotdot", "GET", b"/%2e%2e/%2e%2e/etc/passwd", b"", 404, "not_found", None),
    ("pct-encoded-route-ok", "GET", b"/%68ealth", b"", 200, None, None),
    ("wrong-method", "GET", b"/v1/completions", b"", 405, "method_not_allowed", None),
]


def check_reply(status, headers, body, want_status, want_code):
    text = body.decode("utf-8")  # raises on invalid UTF-8
    assert status == want_status, text[:500]
    reply = json.loads(text)
    if status >= 400:
        err = reply["error"]
        assert isinstance(err["message"], str) and err["message"], reply
        assert err["type"] in ("invalid_request_error", "not_found_error", "server_error"), reply
        if want_code:
            assert err["code"] == want_code, reply
        if status == 400 and err["param"] == "n":
            assert str(MAX_WAITING) in err["message"], reply  # names the limit
    return reply


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed(server, case):
    _, method, path, body, want_status, want_code, ctype = case
    status, headers, reply = exchange(server.port, http_bytes(method, path, body, ctype))
    check_reply(status, headers, reply, want_status, want_code)
    assert server.proc.poll() is None


def test_errors_quote_on_character_boundaries(server):
    """The logit_bias key is quoted cut to 32 bytes: the cut may not split the euro sign."""
    body = ('{"prompt":"x","logit_bias":{"%s":1}}' % ("a" * 31 + "\u20ac")).encode()
    status, headers, reply = exchange(server.port, http_bytes("POST", b"/v1/completions", body))
    message = check_reply(status, headers, reply, 400, "invalid_value")["error"]["message"]
    assert "'" + "a" * 31 + "'" in message and "\ufffd" not in message
    body = b'{"prompt":"x","model":"m\xff"}'
    status, headers, reply = exchange(server.port, http_bytes("POST", b"/v1/completions", body))
    assert "m\ufffd" in check_reply(status, headers, reply, 404, "model_not_found")["error"]["message"]


def test_server_healthy_after_table(server):
    assert request(server.url + "/health")[0] == 200


# ---- connection edge cases ------------------------------------------------------------------------


def read_to_close(sock, limit_s):
    """What the server sends until it closes, and whether it closed within limit_s."""
    sock.settimeout(limit_s)
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return got, True
            got += chunk
    except ConnectionResetError:
        return got, True
    except socket.timeout:
        return got, False


@pytest.mark.parametrize("data", [
    http_bytes("GET", b"/health").replace(b"Connection: close\r\n", b""),
    http_bytes("POST", b"/tokenize", b'{"content":"Once upon a time"}').replace(b"Connection: close\r\n", b""),
    http_bytes("POST", b"/tokenize", b'{"content":5}').replace(b"Connection: close\r\n", b""),
], ids=["health", "tokenize", "error"])
def test_half_close_gets_reply_then_close(server, data):
    """Request, then shutdown(SHUT_WR) on a keep-alive connection: the reply
    comes and the server closes at once (not after --timeout)."""
    for _ in range(5):  # it was timing-dependent
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        got, closed = read_to_close(sock, 10)
        sock.close()
        assert got.startswith(b"HTTP/1.1 "), got
        assert closed, "connection left open after the reply"


def test_half_close_during_generation_closes(server):
    """A half-close while the reply is being computed reads as the client
    going away (a full close looks the same): the work is cancelled and the
    connection closed, never left in CLOSE-WAIT."""
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 50}).encode()
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(http_bytes("POST", b"/v1/completions", body).replace(b"Connection: close\r\n", b""))
        sock.shutdown(socket.SHUT_WR)
        got, closed = read_to_close(sock, 10)
        sock.close()
        assert closed and (got == b"" or got.startswith(b"HTTP/1.1 200")), got[:200]
    assert request(server.url + "/health")[0] == 200


def test_chunked_upload_over_limit_stops_early(server):
    """A chunk size of 2^63-1: 413 once MAX_BODY bytes are in, then close,
    while the client is still sending (before, it was read forever)."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\n")
    sock.setblocking(False)
    sent, got, closed, t0 = 0, b"", False, time.monotonic()
    while time.monotonic() - t0 < 20 and not closed:
        try:
            sent += sock.send(b"a" * 65536)
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:  # EPIPE / ECONNRESET: the server closed
            closed = True
        try:
            chunk = sock.recv(65536)
            got += chunk
            closed = closed or not chunk
        except BlockingIOError:
            pass
        except OSError:
            closed = True
    sock.close()
    assert closed, f"still reading after {sent} bytes"
    assert sent < 64 << 20, sent  # the limit plus what the kernels buffer
    if got:  # the reply can be lost to the reset a client still sending gets
        status, _, body = got.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 413"), got[:300]
        assert json.loads(body)["error"]["code"] == "request_too_large"


def test_chunked_upload_over_limit_reply(server):
    """The same with the body sent at once and then read: the 413 arrives whole."""
    data = b"a" * (MAX_BODY + 10_000)
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(data) + data)
    got, closed = read_to_close(sock, 10)
    sock.close()
    assert closed
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"Connection: close" in head, got[:300]
    assert json.loads(body)["error"]["code"] == "request_too_large"
    assert request(server.url + "/health")[0] == 200


def test_chunked_upload_within_limit(server):
    body = b'{"content":"Once upon a time"}'
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n5\r\n" + body[:5] + b"\r\n%x\r\n" % (len(body) - 5)
                 + body[5:] + b"\r\n0\r\n\r\n")
    got, closed = read_to_close(sock, 10)
    sock.close()
    assert got.startswith(b"HTTP/1.1 200") and b'"tokens"' in got, got[:300]


def test_content_length_with_chunked_refused(server):
    """Both framings in one request (a smuggling pattern): 400, and closed."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    got, closed = read_to_close(sock, 10)
    sock.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert closed and head.startswith(b"HTTP/1.1 400"), got[:300]
    assert json.loads(body)["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("value", [b"-1", b"abc", b"1e3", b"", b"0x10", b"18446744073709551616"])
def test_malformed_content_length(server, value):
    """libmicrohttpd answers these itself, before genloop sees the request;
    0.9.75 (Debian 12) writes its 400's status line and headers twice (see
    README, Limits and failure behaviour). What holds: the reply starts with
    a 400 (413 for a value past 2^64) and the connection is closed at once;
    the server goes on."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + value + b"\r\n\r\n{}")
    got, closed = read_to_close(sock, 10)
    sock.close()
    assert closed
    assert got.startswith(b"HTTP/1.1 400 ") or got.startswith(b"HTTP/1.1 413 "), got[:200]
    assert request(server.url + "/health")[0] == 200


def test_queue_limit_is_400_not_503(server):
    """The same oversized request on an idle server, repeated: always 400
    (never 503 + Retry-After, which a client would retry forever)."""
    body = json.dumps({"prompt": ["Once"] * 4, "n": 3, "max_tokens": 1}).encode()
    for _ in range(5):
        status, headers, reply = exchange(server.port, http_bytes("POST", b"/v1/completions", body))
        err = check_reply(status, headers, reply, 400, "invalid_value")["error"]
        assert err["param"] == "n" and "retry-after" not in headers
        assert "12 sequences" in err["message"], err


# ---- holding the line (issue 36): deadlines, caps, half-closed requests, Host --------------------


def test_partial_request_line_then_fin_closed_within_1s(server):
    """A partial request line and a FIN: the server closes at once (before,
    libmicrohttpd left the socket in CLOSE-WAIT until --timeout in most tries
    when the bytes and the FIN came together)."""
    for data in (b"G", b"GET /hea", b"GET /health HTTP/1.1\r\nHo", b""):
        for _ in range(10):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            t0 = time.monotonic()
            got, closed = read_to_close(sock, 1.0)
            sock.close()
            assert closed and got == b"", (data, got, time.monotonic() - t0)


@pytest.mark.parametrize("headers,status", [
    (b"", 400), (b"Host: a\r\nHost: b\r\n", 400), (b"host: a\r\nHOST: a\r\n", 400), (b"Host: a\r\n", 200),
], ids=["no-host", "two-hosts", "two-hosts-same", "one-host"])
def test_http11_host_header_rules(server, headers, status):
    """RFC 9112 section 3.2: an HTTP/1.1 request has exactly one Host header."""
    got_status, got_headers, body = exchange(server.port, b"GET /health HTTP/1.1\r\nConnection: close\r\n"
                                             + headers + b"\r\n")
    assert got_status == status, body
    if status == 400:
        err = json.loads(body)["error"]
        assert err["code"] == "invalid_request" and "Host" in err["message"], err


def test_http10_without_host_is_fine(server):
    status, _, _ = exchange(server.port, b"GET /health HTTP/1.0\r\n\r\n")
    assert status == 200


def quick_health(port, timeout=5.0, source=None):
    """Seconds a /health on a new connection takes (from source, an address to bind)."""
    t0 = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0) if source else None)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got, closed = read_to_close(sock, timeout)
    sock.close()
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    return time.monotonic() - t0


def test_header_deadline_distinct_from_keepalive():
    """--header-timeout 1: a silent connection and a slowloris one (a header
    byte every 0.3 s) are closed after about a second, while a keep-alive
    connection that was served stays open (its idle timeout is --timeout)."""
    with Server(tiny_model(), "--header-timeout", "1", "--timeout", "60") as s:
        kept = socket.create_connection(("127.0.0.1", s.port))
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        silent = socket.create_connection(("127.0.0.1", s.port))
        slow = socket.create_connection(("127.0.0.1", s.port))
        t0 = time.monotonic()
        slow_closed = None
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\n":
            try:
                slow.send(bytes([byte]))
            except OSError:
                slow_closed = time.monotonic() - t0
                break
            time.sleep(0.3)
            if time.monotonic() - t0 > 4:
                break
        _, silent_closed = read_to_close(silent, 3)
        if slow_closed is None:
            _, closed = read_to_close(slow, 3)
            assert closed
        else:
            assert slow_closed < 4
        assert silent_closed
        assert time.monotonic() - t0 < 6
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # still open after the deadline
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        for sock in (kept, silent, slow):
            sock.close()
    assert "past the header deadline" in s.log


def test_body_deadline_gets_408():
    """--body-timeout 1: a body that stops coming gets a 408 (JSON) and the close."""
    with Server(tiny_model(), "--body-timeout", "1", "--timeout", "60") as s:
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"content\":")
        t0 = time.monotonic()
        got, closed = read_to_close(sock, 5)
        sock.close()
        assert closed and time.monotonic() - t0 < 4
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), got[:200]
        assert json.loads(body)["error"]["code"] == "request_timeout"
        # a body that keeps coming, slower than the deadline in total, is fine
        sock = socket.create_connection(("127.0.0.1", s.port))
        content = b'{"content":"Once upon a time"}'
        sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(content))
        for i in range(0, len(content), 8):
            sock.sendall(content[i:i + 8])
            time.sleep(0.4)
        got, closed = read_to_close(sock, 5)
        sock.close()
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
    assert "408" in s.log


def test_idle_connections_do_not_lock_others_out():
    """Twice --max-connections idle sockets (never a byte): new clients are
    still served quickly, the oldest idle ones being closed to make room."""
    cap = 32
    with Server(tiny_model(), "--max-connections", str(cap), "--timeout", "600") as s:
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(2 * cap)]
        time.sleep(0.3)
        worst = max(quick_health(s.port) for _ in range(10))
        assert worst < 2.0, worst  # a bound for a loaded machine; scripts/bench-hostile measures
        _, first_closed = read_to_close(idle[0], 2)
        assert first_closed
        for sock in idle:
            sock.close()


def test_per_address_cap():
    """--max-connections-per-address 3: a fourth connection from 127.0.0.1
    closes that address's oldest idle one; with all three busy it gets 429;
    another loopback address is not affected."""
    with Server(tiny_model(), "--max-connections-per-address", "3", "--timeout", "600") as s:
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(3)]
        time.sleep(0.1)
        quick_health(s.port)
        _, closed = read_to_close(idle[0], 2)
        assert closed
        for sock in idle:
            sock.close()
        busy = []
        for _ in range(3):
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            busy.append(sock)
        time.sleep(0.3)
        status, headers, body = exchange(s.port, b"")
        assert status == 429 and json.loads(body)["error"]["code"] == "too_many_connections"
        assert quick_health(s.port, source="127.0.0.2") < 5
        for sock in busy:
            sock.close()


def test_open_files_limit_raised_and_reported():
    """The soft open-files limit is raised to the hard one; where even the
    hard limit is too low for --max-connections, fewer are taken and the
    start-up line says how many."""
    import resource
    import subprocess

    def start(soft, hard, cap):
        def lower():
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        proc = subprocess.Popen([binary(), "serve", "-m", tiny_model(), "--host", "127.0.0.1", "--port", "0",
                                 "--max-connections", str(cap)], preexec_fn=lower,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        assert line.startswith("listening: "), line
        with open(f"/proc/{proc.pid}/limits") as f:
            limits = [ln for ln in f if ln.startswith("Max open files")][0].split()
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        return int(limits[3]), err

    soft, err = start(256, 4096, 1000)
    assert soft == 4096 and "(up to 1000 connections" in err, err
    soft, err = start(256, 512, 1000)
    assert soft == 512 and "allows 320 connections" in err and "(up to 320 connections" in err, err
