"""Helpers for the deployment tests (tests/ops): paths, skip rules, genloop
replicas on loopback ports, and small HTTP calls.

These tests run real third-party servers (nginx, prometheus) next to
genloop. A missing binary or model skips the test, except under CI=true,
where it fails it: CI must never pass by skipping."""
import http.client
import json
import os
import select
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

SOURCE = os.environ.get("GENLOOP_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_build = os.environ.get("GENLOOP_BUILD", "build")
BUILD = _build if os.path.isabs(_build) else os.path.join(SOURCE, _build)
TESTDATA = os.environ.get("GENLOOP_TESTDATA", os.path.join(SOURCE, "..", "shared", "testdata"))
IN_CI = os.environ.get("CI") in ("true", "1")


def skip_or_fail(reason):
    if IN_CI:
        pytest.fail(f"{reason} (CI=true forbids skipping)")
    pytest.skip(reason)


def need_file(path, what):
    if not path or not os.path.exists(path):
        skip_or_fail(f"{what} not found: {path}")
    return path


def need_program(name, *extra_dirs):
    """Path of an executable on PATH or in extra_dirs (nginx lives in /usr/sbin)."""
    path = shutil.which(name) or shutil.which(name, path=os.pathsep.join(extra_dirs))
    if not path:
        skip_or_fail(f"{name} not installed (scripts/install-deps installs it)")
    return path


def genloop_binary():
    return need_file(os.path.join(BUILD, "genloop"), "genloop binary (set GENLOOP_BUILD)")


def tiny_model():
    return need_file(os.path.join(TESTDATA, "models", "stories260K.gguf"), "stories260K test model")


def smollm_model():
    """SmolLM2 if present (slow enough per token to see streaming), else None."""
    path = os.environ.get("GENLOOP_MODEL") or os.path.join(SOURCE, "models",
                                                           "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """`genloop serve` on a free loopback port (the server picks it: --port 0)."""

    def __init__(self, model, *args, timeout=60):
        self.proc = subprocess.Popen(
            [genloop_binary(), "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        deadline = time.time() + timeout
        line = ""
        while time.time() < deadline and not line.startswith("listening: "):
            ready, _, _ = select.select([self.proc.stdout], [], [], 1)
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    break
        if not line.startswith("listening: "):
            self.kill()
            raise RuntimeError(f"genloop did not start (got {line!r})")
        self.url = line.split(" ", 1)[1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        wait_http(self.url + "/health", timeout, self.proc)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdout:
            self.proc.stdout.close()

    def metric(self, name):
        """Sum of every series of a metric in /metrics (labels ignored)."""
        text = get(self.url + "/metrics")[1].decode()
        total, seen = 0.0, False
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
                seen = True
        assert seen, f"{name} not in /metrics"
        return total


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post_json(url, body, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_http(url, timeout, proc=None):
    """Until url answers 200; fails when proc exits first or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before {url} answered")
        try:
            if get(url, timeout=2)[0] == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer 200 within {timeout}s")


def stop(proc, timeout=10):
    """SIGTERM, then SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
