"""Helpers for the HTTP server tests: find the binary and models, start
`genloop serve` on a free loopback port, talk to it with plain sockets."""
import json
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

SOURCE = os.environ.get("GENLOOP_SOURCE",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.join(SOURCE, os.environ.get("GENLOOP_BUILD", "build"))  # absolute stays absolute
BINARY = os.path.join(BUILD, "genloop")
TESTDATA = os.environ.get("GENLOOP_TESTDATA", os.path.join(SOURCE, "..", "shared", "testdata"))
IN_CI = os.environ.get("CI") in ("true", "1")


def need(path, what):
    """The path, or skip (fail under CI=true) when it is missing."""
    if path and os.path.exists(path):
        return path
    msg = f"{what} not found: {path}"
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


def binary():
    return need(BINARY, "genloop binary (set GENLOOP_BUILD)")


def tiny_model():
    return need(os.path.join(TESTDATA, "models", "stories260K.gguf"), "stories260K test model")


def chat_model():
    path = os.environ.get("GENLOOP_MODEL") or os.path.join(SOURCE, "models",
                                                           "SmolLM2-135M-Instruct.Q4_1.gguf")
    return need(path, "SmolLM2 model (set GENLOOP_MODEL)")


class Server:
    """A running `genloop serve`; .url is its base URL."""

    def __init__(self, model, *args, wait_ready=True, timeout=60):
        """model None: no -m (the models come from --models-dir or a config's list in args)."""
        self.proc = subprocess.Popen(
            [binary(), "serve", *(["-m", model] if model else []), "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="backslashreplace")
        # Drain stderr as it comes: the access log of a few thousand requests
        # fills a pipe, and a server blocked writing its log answers nothing.
        self._err = []
        self._err_reader = threading.Thread(target=lambda: self._err.extend(self.proc.stderr), daemon=True)
        self._err_reader.start()
        line = self._read_line(timeout)
        if not line.startswith("listening: "):
            _, err = self.stop()
            raise RuntimeError(f"server did not start: {line!r} {err}")
        self.url = line.split(" ", 1)[1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        if wait_ready:
            self.wait_ready(timeout)

    def _read_line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline() if ready else ""

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _, _ = request(self.url + "/health")
            if status == 200:
                return
            assert self.proc.poll() is None, "server exited while loading"
            time.sleep(0.05)
        raise TimeoutError("server not ready")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """Stops the server; its stderr is left in .log. When the body
        passed, the server must also have exited cleanly (status 0)."""
        code, self.log = self.stop()
        if exc_type is None:
            assert code == 0, self.log
        return False

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signal the server; returns its exit code and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        self._err_reader.join()
        err = "".join(self._err)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode, err


def request(url, body=None, method=None, headers=None, timeout=60):
    """(status, headers, body bytes); body may be a dict (sent as JSON) or bytes."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except (ConnectionError, urllib.error.URLError):
        return 0, {}, b""


def post_json(url, body, **kw):
    status, headers, data = request(url, body, **kw)
    return status, headers, json.loads(data) if data else None


def post_chat(server, **body):
    """POST /v1/chat/completions with body, a one-message conversation by default."""
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return post_json(server.url + "/v1/chat/completions", body)


def ok(reply):
    """The JSON of a post_json reply, asserting it is a 200."""
    status, _, r = reply
    assert status == 200, r
    return r


def sse_events(raw):
    """The JSON payloads of an SSE body (bytes), and whether [DONE] ended it."""
    events, done = [], False
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        if payload == "[DONE]":
            done = True
            continue
        assert not done, "data after [DONE]"
        events.append(json.loads(payload))
    return events, done


def metrics(url, headers=None):
    """{'name{labels}': value} from /metrics; the model_name label every
    series carries is left out of the keys (test_clients.py checks it)."""
    status, _, body = request(url + "/metrics", headers=headers)
    assert status == 200
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            name = re.sub(r'model_name="(?:[^"\\]|\\.)*",?', "", name).replace("{}", "")
            out[name] = float(value)
    return out


def raw_http(port, text, read_until=None, timeout=10):
    """Sends raw bytes, returns the socket and what was read (until read_until
    appears or the peer closes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(text)
    got = b""
    while read_until is None or read_until not in got:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return s, got


def wait_for(pred, timeout=20, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    return pred()
