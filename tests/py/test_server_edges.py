"""Rough edges a new user hits (issue 36): favicon, JSON 404s, metric
labels, /v1/models' usable context and base-model flag, the
context_length_exceeded code, log lines for a stopped stream and a long
prompt, the first prompt_progress chunk, `generate -f` on a missing file,
and scripts/fetch-model's wait for a .venv being created."""
import json
import os
import re
import socket
import subprocess
import time

import pytest

from server_util import (SOURCE, Server, binary, chat_model, metrics, post_json, request, sse_events,
                         tiny_model)


@pytest.fixture(scope="module")
def tiny():
    with Server(tiny_model(), "--chat-template", "chatml") as s:
        yield s


def test_favicon(tiny):
    for path in ("/favicon.ico", "/favicon.svg"):
        status, headers, body = request(tiny.url + path)
        assert status == 200 and headers["Content-Type"] == "image/svg+xml" and body.startswith(b"<svg"), path
    assert b'rel="icon"' in request(tiny.url + "/")[2]


@pytest.mark.parametrize("path", ["/props", "/slots", "/v1/foo"])
def test_unknown_paths_get_json_404(tiny, path):
    for method, body in (("GET", None), ("POST", {})):
        status, headers, raw = request(tiny.url + path, body, method=method)
        assert status in (404, 405) and headers["Content-Type"] == "application/json", raw
        assert json.loads(raw)["error"]["code"] in ("not_found", "method_not_allowed")


def test_metric_bucket_labels_plain(tiny):
    text = request(tiny.url + "/metrics")[2].decode()
    labels = re.findall(r'le="([^"]*)"', text)
    assert labels and all(re.fullmatch(r"[0-9]+(\.[0-9]+)?|\+Inf", le) for le in labels), set(labels)
    assert 'le="10"' in text and 'le="120"' in text


def test_models_usable_context_and_code():
    """-c 4096 with a 1 MiB KV cache: a request can use what the cache
    holds, /v1/models says so (the trained context beside it), and a prompt
    past it gets context_length_exceeded on both endpoints."""
    with Server(tiny_model(), "-c", "4096", "--kv-cache-mib", "1", "--chat-template", "chatml") as s:
        cap = int(metrics(s.url)["genloop_kv_cache_capacity_tokens"])
        assert cap < 4096
        model = post_json(s.url + "/v1/models", None)[2]["data"][0]
        assert model["context_length"] == cap and model["max_model_len"] == cap
        assert model["trained_context_length"] == 128
        assert model["instruction_tuned"] is False and "base" in model["note"]
        status, _, body = post_json(s.url + "/v1/completions", {"prompt": [1] * (cap + 10), "max_tokens": 1})
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
        status, _, body = post_json(s.url + "/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": "a b " * cap}], "max_tokens": 1})
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
        status, _, body = post_json(s.url + "/v1/completions", {"prompt": [1] * (cap - 20), "max_tokens": 4})
        assert status == 200, body
    assert "the KV cache holds fewer than its 4096" in s.log


def test_stopped_stream_logged_with_time_and_id(tiny):
    """A client that closes a stream: the access-log line has the time, the
    request number and why; libmicrohttpd's own untimed line is gone."""
    sock = socket.create_connection(("127.0.0.1", tiny.port))
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 100, "stream": True,
                       "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    sock.close()
    time.sleep(0.5)
    log = "".join(tiny._err)
    assert re.search(r"^\d{4}-\d\d-\d\dT[0-9:.]+Z http #\d+ POST /v1/completions 200 \(aborted: client closed "
                     r"the connection\)", log, re.M), log[-2000:]
    assert "application error generating response" not in log
    assert not re.search(r"^genloop: http:", log, re.M)


def test_long_prompt_logged_and_first_progress_early():
    """A prompt over 1024 tokens read in chunks of 128: its reading is
    logged with the request number, and the first prompt_progress chunk
    leaves before the first chunk is computed (its time_ms is well under
    the next one's)."""
    prompt = (open(os.path.join(SOURCE, "tests", "py", "long_prompt.txt")).read() + "\n") * 3
    with Server(chat_model(), "--max-batch-tokens", "128") as s:
        status, _, raw = request(s.url + "/v1/completions", {"prompt": prompt, "max_tokens": 1, "stream": True,
                                                             "return_progress": True}, timeout=300)
        assert status == 200
        progress = [e["prompt_progress"] for e in sse_events(raw)[0] if "prompt_progress" in e]
        assert progress[0]["processed"] == 0 and len(progress) > 3
        assert progress[0]["time_ms"] < progress[1]["time_ms"] / 2, progress[:3]
        total = progress[0]["total"]
        assert total > 1024
    assert re.search(r"Z http #\d+ prompt reading: 0 of %d tokens" % total, s.log), s.log
    assert re.search(r"Z http #\d+ prompt read: %d of %d tokens" % (total, total), s.log), s.log


def test_smollm2_is_instruction_tuned():
    with Server(chat_model()) as s:
        model = post_json(s.url + "/v1/models", None)[2]["data"][0]
        assert model["instruction_tuned"] is True and "note" not in model


def test_generate_missing_file_says_why(tmp_path):
    missing = tmp_path / "nope.txt"
    r = subprocess.run([binary(), "generate", "-m", tiny_model(), "-f", str(missing)], capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stderr.strip() == f"genloop generate: cannot read prompt file {missing}: No such file or directory"
    r = subprocess.run([binary(), "generate", "-m", tiny_model(), "-f", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode != 0 and "Is a directory" in r.stderr


def test_fetch_model_waits_for_venv_lock(tmp_path):
    """While scripts/install-deps holds .venv.lock (creating .venv, whose
    python comes before its pip), fetch-model waits, then uses the venv only
    if its pip runs."""
    import fcntl
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    with open(os.path.join(SOURCE, "scripts", "fetch-model")) as f:
        (root / "scripts" / "fetch-model").write_text(f.read())
    os.chmod(root / "scripts" / "fetch-model", 0o755)
    marker = tmp_path / "used"
    # a venv python whose pip works; it records the download it was asked for and fails it
    fake = root / ".venv" / "bin" / "python"
    fake.write_text(f'#!/bin/sh\n[ "$3" = --version ] && exit 0\necho venv >> {marker}\nexit 3\n')
    os.chmod(fake, 0o755)
    lock = open(root / ".venv.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    t0 = time.monotonic()
    proc = subprocess.Popen([str(root / "scripts" / "fetch-model")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(1.0)
    assert not marker.exists() and proc.poll() is None, "fetch-model did not wait for the lock"
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()
    proc.communicate(timeout=30)
    assert proc.returncode != 0 and time.monotonic() - t0 >= 1.0
    assert marker.read_text() == "venv\n"
