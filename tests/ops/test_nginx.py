"""deploy/nginx.conf in front of two genloop replicas, for real.

The config under test is deploy/nginx.conf itself, with only what must
change to run here rewritten: the two upstream addresses, the listen
address, and pid/log/temp paths (into a temporary folder). Checks:
- 20 concurrent streaming completions all arrive intact through nginx
  (every chunk parses, each stream ends with `data: [DONE]`) and both
  replicas served some (their genloop_requests_total rose);
- streams are not buffered: with a model slow enough per token (SmolLM2),
  each stream arrives in many pieces spread over its generation;
- with one replica killed, new requests still succeed (nginx retries the
  other: proxy_next_upstream error).
Skips without nginx (Debian package `nginx`), except under CI=true."""
import concurrent.futures
import contextlib
import http.client
import json
import os
import re
import subprocess
import tempfile
import time

import pytest

import opsutil

CONF = os.path.join(opsutil.SOURCE, "deploy", "nginx.conf")


def render_config(tmp, listen_port, upstream_ports):
    """deploy/nginx.conf with addresses and paths made local."""
    text = open(CONF).read()
    subs = [
        (r"worker_processes [^;]+;", "worker_processes 1;"),
        (r"\npid [^;]+;", f"\npid {tmp}/nginx.pid;"),
        (r"error_log \S+", f"error_log {tmp}/error.log"),
        (r"access_log [^;]+;", f"access_log {tmp}/access.log;"),
        (r"listen 8080;", f"listen 127.0.0.1:{listen_port};"),
    ]
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text)
        assert n == 1, f"deploy/nginx.conf: expected one match of {pattern!r}, found {n}"
    text, n = re.subn(r"(\w+_temp_path) \S+;", lambda m: f"{m.group(1)} {tmp}/{m.group(1)};", text)
    assert n >= 2, "deploy/nginx.conf: temp paths not found"
    servers = iter(upstream_ports)
    text, n = re.subn(r"server 127\.0\.0\.1:\d+", lambda m: f"server 127.0.0.1:{next(servers)}", text)
    assert n == len(upstream_ports), f"deploy/nginx.conf: {n} upstream servers, want {len(upstream_ports)}"
    return text


@contextlib.contextmanager
def cluster(model, *server_args):
    """Two replicas and nginx before them; yields (nginx_port, replicas)."""
    nginx = opsutil.need_program("nginx", "/usr/sbin", "/sbin")
    replicas, proc = [], None
    tmp = tempfile.mkdtemp(prefix="genloop-nginx-")
    os.chmod(tmp, 0o755)  # nginx workers drop root privileges
    try:
        for _ in range(2):
            replicas.append(opsutil.Replica(model, "-t", "1", "--kv-cache-mib", "64", *server_args))
        port = opsutil.free_port()
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(render_config(tmp, port, [r.port for r in replicas]))
        for d in ("client_body_temp_path", "proxy_temp_path", "fastcgi_temp_path",
                  "uwsgi_temp_path", "scgi_temp_path"):
            os.makedirs(os.path.join(tmp, d), mode=0o777, exist_ok=True)
            os.chmod(os.path.join(tmp, d), 0o777)
        test = subprocess.run([nginx, "-t", "-p", tmp, "-c", conf, "-e", f"{tmp}/error.log"],
                              capture_output=True, text=True)
        assert test.returncode == 0, test.stderr
        proc = subprocess.Popen([nginx, "-p", tmp, "-c", conf, "-e", f"{tmp}/error.log",
                                 "-g", "daemon off;"], stderr=subprocess.PIPE, text=True)
        opsutil.wait_http(f"http://127.0.0.1:{port}/health", 20, proc)
        yield port, replicas
    finally:
        if proc is not None:
            opsutil.stop(proc)
        for r in replicas:
            r.kill()
        subprocess.run(["rm", "-rf", tmp])


def stream(port, body, timeout=120):
    """POST a streaming completion; returns status, headers and the SSE events
    as (arrival time, text) plus the start time."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    events, buf = [], b""
    while True:
        data = resp.read1(65536)
        if not data:
            break
        now = time.monotonic()
        buf += data
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            events.append((now, event.decode()))
    conn.close()
    return {"status": resp.status, "type": resp.getheader("Content-Type", ""), "t0": t0,
            "events": events, "rest": buf}


def check_intact(s):
    """Every chunk is a completion chunk, one of them final, then [DONE]."""
    assert s["status"] == 200, s
    assert s["type"].startswith("text/event-stream"), s["type"]
    assert s["rest"].strip() == b"", f"bytes after the last event: {s['rest']!r}"
    texts = [e for _, e in s["events"]]
    assert texts and texts[-1] == "data: [DONE]", texts[-3:]
    finals = 0
    for t in texts[:-1]:
        assert t.startswith("data: "), t
        chunk = json.loads(t[len("data: "):])
        assert chunk["object"] == "text_completion"
        finals += chunk["choices"][0]["finish_reason"] is not None
    assert finals == 1


def run_streams(port, n, max_tokens):
    body = {"prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
            "temperature": 0}
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: stream(port, body), range(n)))


def test_nginx_balances_streams_and_fails_over():
    with cluster(opsutil.tiny_model()) as (port, replicas):
        before = [r.metric("genloop_requests_total") for r in replicas]
        streams = run_streams(port, 20, 32)
        for s in streams:
            check_intact(s)
        served = [r.metric("genloop_requests_total") - b for r, b in zip(replicas, before)]
        assert sum(served) == 20, served
        assert all(x >= 1 for x in served), f"one replica served nothing: {served}"

        # One replica dies: nginx must send everything to the other.
        replicas[0].kill()
        time.sleep(0.5)  # nginx notices its idle keepalive connections closing
        before = replicas[1].metric("genloop_requests_total")
        for i in range(6):
            if i % 2:
                check_intact(stream(port, {"prompt": "Hello", "max_tokens": 8, "stream": True}))
            else:
                status, reply = opsutil.post_json(f"http://127.0.0.1:{port}/v1/completions",
                                                  {"prompt": "Hello", "max_tokens": 8})
                assert status == 200, reply
                assert reply["usage"]["completion_tokens"] >= 1
        assert replicas[1].metric("genloop_requests_total") - before == 6
        assert opsutil.get(f"http://127.0.0.1:{port}/health")[0] == 200


def test_nginx_does_not_buffer_streams():
    """Each stream must reach the client chunk by chunk, as generated, not
    in one piece at the end. Needs a model slow enough per token (SmolLM2:
    tens of ms per token here) for the chunks to be apart in time;
    stories260K finishes a stream in a few milliseconds. Measured as the
    number of separate socket reads that delivered a stream's events: a
    buffered stream of 16 tokens (~4 KB) comes in one or two; unbuffered it
    comes in about one read per token. Generous: 4 reads, 15 of 20 streams,
    so a loaded machine delaying the client cannot fail it."""
    model = opsutil.smollm_model()
    if model is None:
        opsutil.skip_or_fail("SmolLM2 model not found (set GENLOOP_MODEL); needed to see streaming")
    with cluster(model) as (port, replicas):
        streams = run_streams(port, 20, 16)
        reads = []
        for s in streams:
            check_intact(s)
            reads.append(len({t for t, _ in s["events"]}))
        spread = sum(1 for n in reads if n >= 4)
        assert spread >= 15, f"streams arrived in too few pieces (reads per stream: {sorted(reads)})"


def test_nginx_conf_has_streaming_settings():
    """The settings a streaming LLM API needs, read from the file (no nginx
    needed): the live tests above cannot tell some of them apart."""
    text = "\n".join(line.split("#", 1)[0] for line in open(CONF))
    for directive in ["least_conn;", "keepalive ", "proxy_http_version 1.1;",
                      'proxy_set_header Connection "";', "proxy_buffering off;",
                      "proxy_cache off;", "proxy_next_upstream error", "location = /health"]:
        assert directive in text, f"deploy/nginx.conf lacks {directive!r}"
    assert re.search(r"max_fails=\d+ fail_timeout=\d+s", text)
    timeout = re.search(r"proxy_read_timeout (\d+)s;", text)
    assert timeout and int(timeout.group(1)) >= 3600
    assert "non_idempotent" not in text, "POSTs must not be re-sent after a replica got them"
