"""`genloop serve` under hostile or heavy use: request limits (each a 400
naming the field), slow readers, slowloris, the connection cap, a full
waiting queue, and the batch-shape metrics. Mostly the tiny stories260K
model (context 128); the overload test uses SmolLM2. Loopback only; waits
are bounded and generous, nothing passes or fails on speed."""
import json
import socket
import subprocess
import threading
import time

import pytest

from server_util import (Server, binary, chat_model, metrics, post_json, request, sse_events,
                         tiny_model, wait_for)

PROMPT = "Once upon a time"
EOS = 2  # stories260K's end-of-text id; banning it makes every request run to max_tokens


@pytest.fixture(scope="module")
def limited():
    with Server(tiny_model(), "--max-prompt-tokens", "20", "--max-tokens-cap", "50", "--max-n", "3",
               "--max-stop", "2", "--max-stop-bytes", "8", "--max-logit-bias", "4") as s:
        yield s


@pytest.fixture(scope="module")
def plain():
    with Server(tiny_model()) as s:
        yield s


def complete(server, **body):
    body.setdefault("prompt", PROMPT)
    body.setdefault("max_tokens", 2)
    return post_json(server.url + "/v1/completions", body)


def raw_request(body):
    data = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data)) + data


# ---- request limits ------------------------------------------------------------------

# (field, over the limit, at the limit)
LIMITS = [
    ("prompt", {"prompt": [5] * 21}, {"prompt": [5] * 20}),
    ("prompt", {"prompt": "one two three four five six seven eight nine ten " * 3}, {"prompt": "one two"}),
    ("prompt", {"prompt": [[5] * 3, [5] * 21]}, {"prompt": [[5] * 3, [5] * 20]}),
    ("max_tokens", {"max_tokens": 51}, {"max_tokens": 50}),
    ("n", {"n": 4}, {"n": 3}),
    ("best_of", {"n": 3, "best_of": 4}, {"n": 3, "best_of": 3}),
    ("stop", {"stop": ["a", "b", "c"]}, {"stop": ["a", "b"]}),
    ("stop", {"stop": "123456789"}, {"stop": "12345678"}),
    ("stop", {"stop": ["ok", "é" * 5]}, {"stop": ["ok", "é" * 4]}),  # bytes, not characters
    ("logit_bias", {"logit_bias": {str(i): 1 for i in range(5)}},
     {"logit_bias": {str(i): 1 for i in range(4)}}),
]


@pytest.mark.parametrize("param,over,at", LIMITS)
def test_limit(limited, param, over, at):
    status, _, r = complete(limited, **over)
    assert status == 400, r
    assert r["error"]["param"] == param and r["error"]["type"] == "invalid_request_error", r
    status, _, r = complete(limited, **at)
    assert status == 200, r


def test_max_tokens_cap_message(limited):
    status, _, r = complete(limited, max_tokens=1000)
    assert status == 400 and r["error"]["param"] == "max_tokens" and "50" in r["error"]["message"]


def test_default_limits(plain):
    defaults = json.loads(subprocess.run([binary(), "serve", "--print-config"], capture_output=True,
                                         text=True, check=True).stdout)
    assert defaults["max_stop"] == 4 and defaults["max_stop_bytes"] == 256
    assert defaults["max_logit_bias"] == 1024 and defaults["stream_buffer_bytes"] == 1 << 20
    assert defaults["max_connections"] > 0 and defaults["max_n"] > 0
    assert complete(plain, stop=list("abcde"))[2]["error"]["param"] == "stop"
    assert complete(plain, stop=["x" * 257])[2]["error"]["param"] == "stop"
    assert complete(plain, stop=["x" * 256, "a", "b", "c"])[0] == 200
    # the context still bounds max_tokens when no cap is set (context 128)
    assert complete(plain, max_tokens=129)[2]["error"]["param"] == "max_tokens"


@pytest.mark.parametrize("flag,value", [("--max-stop", "17"), ("--max-stop-bytes", "0"),
                                        ("--stream-buffer-bytes", "100"), ("--max-connections", "0"),
                                        ("--max-logit-bias", "-1"), ("--max-prompt-tokens", "x")])
def test_limit_flags_validated(flag, value):
    out = subprocess.run([binary(), "serve", "-m", tiny_model(), flag, value], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 1 and flag[2:].replace("-", "_") in out.stderr, out.stderr


def test_limit_flags_in_help():
    out = subprocess.run([binary(), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--max-prompt-tokens", "--max-tokens-cap", "--max-n", "--max-stop", "--max-stop-bytes",
                 "--max-logit-bias", "--stream-buffer-bytes", "--max-connections", "--timeout",
                 "--api-key", "--api-key-file", "--metrics-public", "--cors-origin"):
        assert flag in out, flag


# ---- slow readers ----------------------------------------------------------------------

def test_slow_client_dropped_others_unaffected():
    """A client that never reads its stream is dropped once its unsent bytes
    pass --stream-buffer-bytes (its work is cancelled), while a normal stream
    running at the same time completes in full. The normal stream's whole
    output (~25 KB) fits the bound, so however slowly this machine lets
    the test read it, it cannot be dropped."""
    with Server(tiny_model(), "--stream-buffer-bytes", "65536") as s:
        cancelled = lambda: metrics(s.url)['genloop_requests_total{finish_reason="cancelled"}']  # noqa: E731
        before = cancelled()
        # ~16 x 120 tokens with 5 logprobs each: far more than every buffer on the way
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        slow.connect(("127.0.0.1", s.port))
        slow.sendall(raw_request({"prompt": PROMPT, "max_tokens": 120, "n": 16, "logprobs": 5,
                                  "stream": True, "logit_bias": {str(EOS): -100}}))
        normal = {"prompt": PROMPT, "max_tokens": 100, "stream": True, "temperature": 0,
                  "logit_bias": {str(EOS): -100}}
        status, _, raw = request(s.url + "/v1/completions", normal, timeout=60)
        events, done = sse_events(raw)
        assert status == 200 and done
        assert "".join(e["choices"][0]["text"] for e in events if e["choices"])
        assert events[-1]["choices"][0]["finish_reason"] == "length"
        assert wait_for(lambda: cancelled() > before, timeout=60)
        # the slow client finds its connection reset or closed after what was buffered
        slow.settimeout(30)
        closed = False
        try:
            while slow.recv(65536):
                pass
            closed = True
        except ConnectionResetError:
            closed = True
        slow.close()
        assert closed
        assert wait_for(lambda: metrics(s.url)["genloop_requests_running"] == 0, timeout=60)
        # still serving
        assert complete(s)[0] == 200
    assert "dropped: slow client" in s.log


# ---- slowloris and the connection cap -----------------------------------------------------

def wait_closed(sock, timeout):
    """True when the peer closes (or resets) sock within timeout seconds."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_slowloris_timeout():
    with Server(tiny_model(), "--timeout", "2") as s:
        stalled = []
        for partial in (b"", b"GET /hea", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n",
                        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"):
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.sendall(partial)
            stalled.append(sock)
        # meanwhile the server answers others
        assert complete(s)[0] == 200
        t0 = time.monotonic()
        for sock in stalled:
            assert wait_closed(sock, 30)  # --timeout 2; 30 is only a bound for a loaded machine
            sock.close()
        assert time.monotonic() - t0 < 30


def test_connection_cap():
    """At the cap, a new connection closes the oldest idle keep-alive one
    and is served at once (before, it waited in the backlog until a client
    left); with every connection busy it gets a 503 and is closed."""
    cap = 4
    s = Server(tiny_model(), "--max-connections", str(cap), "--timeout", "60")
    holders = []
    try:
        for _ in range(cap):  # keep-alive connections, each served once
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            holders.append(sock)
            time.sleep(0.01)  # a distinct age each
        extra = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert extra.recv(4096).startswith(b"HTTP/1.1 200")
        assert wait_closed(holders[0], 5), "the oldest idle connection was not closed"
        for sock in holders[1:]:  # the others are still served
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        for sock in holders + [extra]:
            sock.close()
        holders = []
        time.sleep(0.5)  # the server sees those closes
        # busy connections (a request head in, its body still coming) are never closed for room
        for _ in range(cap):
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            holders.append(sock)
        time.sleep(0.3)
        status, headers, body = read_reply(socket.create_connection(("127.0.0.1", s.port), timeout=30))
        assert status == 503 and json.loads(body)["error"]["code"] == "too_many_connections"
        for sock in holders:
            sock.settimeout(0.2)
            with pytest.raises(socket.timeout):
                sock.recv(1)
    finally:
        for sock in holders:
            sock.close()
        code, err = s.stop()
    assert code == 0, err
    assert "to make room" in err and "refused at the cap" in err


def read_reply(sock, timeout=10):
    """(status, headers, body) of the reply on sock, read until the server closes."""
    sock.settimeout(timeout)
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except ConnectionResetError:
        pass
    sock.close()
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.decode().partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body


# ---- overload -----------------------------------------------------------------------------

def test_admitted_streams_complete_while_queue_full():
    """--max-seqs 1 --max-waiting 1: with one request running and one
    waiting, more requests get 503 + Retry-After, and the two admitted
    streams still run to the end with the right text."""
    with Server(chat_model(), "--max-seqs", "1", "--max-waiting", "1") as s:
        body = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0,
                "stream": True, "logit_bias": {"0": -100, "2": -100}}  # no end of text
        # "a" is long enough to still be running when the refused requests
        # arrive, however fast the machine decodes; "b" is short.
        bodies = {"a": dict(body, max_tokens=1000), "b": body}
        results = {}

        def stream(name):
            results[name] = request(s.url + "/v1/completions", bodies[name], timeout=300)

        admitted = [threading.Thread(target=stream, args=(n,)) for n in ("a", "b")]
        admitted[0].start()
        assert wait_for(lambda: metrics(s.url)["genloop_requests_running"] == 1, timeout=60)
        admitted[1].start()
        assert wait_for(lambda: metrics(s.url)["genloop_requests_waiting"] == 1, timeout=60)
        # the queue is full as long as "a" runs; these are refused at once
        refused = [post_json(s.url + "/v1/completions", dict(body, stream=False)) for _ in range(3)]
        for status, headers, r in refused:
            assert status == 503 and headers.get("Retry-After") and r["error"]["code"] == "server_busy"
        for t in admitted:
            t.join(300)
        texts = []
        for name in ("a", "b"):
            status, _, raw = results[name]
            events, done = sse_events(raw)
            assert status == 200 and done, name
            assert events[-1]["choices"][0]["finish_reason"] == "length"
            texts.append("".join(e["choices"][0]["text"] for e in events if e["choices"]))
        reference = post_json(s.url + "/v1/completions", dict(body, stream=False), timeout=300)
        assert reference[0] == 200
        # greedy and batch-invariant: the short answer is the start of the long one
        assert texts[1] == reference[2]["choices"][0]["text"] and texts[1]
        assert texts[0].startswith(texts[1]) and len(texts[0]) > len(texts[1])
        m = metrics(s.url)
        assert m['genloop_request_errors_total{code="503"}'] == 3


# ---- batch metrics ------------------------------------------------------------------------

def batch_counts(url):
    m = metrics(url)
    return {k: m[f"genloop_{k}"] for k in (
        "batch_size_count", "batch_size_sum", "batch_tokens_count", "batch_tokens_sum",
        "engine_steps_total", "prompt_tokens_total", "generation_tokens_total",
        "prefix_cache_hits_total")}


def test_batch_metrics():
    """Every forward pass shows in genloop_batch_size/_tokens. With end of
    text banned, a request of P prompt tokens (C of them cached) and G
    generated takes G steps and P - C + G - 1 tokens (the last token is
    sampled, never fed back); one at a time, the step count is exact.
    Speculation is off here: with drafts one step may yield several tokens
    (test_speculative.py counts those steps)."""
    with Server(tiny_model(), "--spec", "off") as s:
        base = batch_counts(s.url)
        assert base["batch_size_count"] == base["engine_steps_total"] == 0
        long = "Once upon a time there was a little girl who lived in a small house near the big forest with her mother"
        prompts = [long, "The little dog", long, "A big red ball fell"]
        lengths = [5, 9, 13, 1]
        total_g = 0
        for prompt, g in zip(prompts, lengths):
            status, _, r = post_json(s.url + "/v1/completions", {
                "prompt": prompt, "max_tokens": g, "logit_bias": {str(EOS): -100}})
            assert status == 200 and r["choices"][0]["finish_reason"] == "length"
            assert r["usage"]["completion_tokens"] == g
            total_g += g

        def settled(expect_steps):
            c = batch_counts(s.url)
            return c if c["batch_size_count"] == c["engine_steps_total"] == expect_steps else None

        c = wait_for(lambda: settled(total_g), timeout=30)
        assert c, batch_counts(s.url)
        assert c["batch_tokens_count"] == c["batch_size_count"]
        assert c["batch_size_sum"] == total_g  # one sequence per step
        n_req = len(prompts)
        assert c["prefix_cache_hits_total"] > 0  # the repeated long prompt
        expect_tokens = (c["prompt_tokens_total"] - c["prefix_cache_hits_total"]
                         + c["generation_tokens_total"] - n_req)
        assert c["batch_tokens_sum"] == expect_tokens

        # concurrent requests share steps: sums stay exact, steps are fewer
        before = c
        bodies = [{"prompt": f"Story number {i}:", "max_tokens": 20, "n": 2, "stream": i % 2 == 0,
                   "logit_bias": {str(EOS): -100}} for i in range(4)]
        out = [None] * len(bodies)

        def one(i):
            out[i] = request(s.url + "/v1/completions", bodies[i], timeout=120)[0]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert out == [200] * len(bodies)
        n_seqs, g = 8, 20
        c = wait_for(lambda: (lambda c: c if c["batch_size_sum"] - before["batch_size_sum"] == n_seqs * g
                              and c["batch_size_count"] == c["engine_steps_total"] else None)(
            batch_counts(s.url)), timeout=30)
        assert c, batch_counts(s.url)
        d = {k: c[k] - before[k] for k in c}
        assert 0 < d["batch_size_count"] <= n_seqs * g
        assert d["batch_tokens_sum"] == (d["prompt_tokens_total"] - d["prefix_cache_hits_total"]
                                         + d["generation_tokens_total"] - n_seqs)
