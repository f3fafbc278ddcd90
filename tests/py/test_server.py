"""`genloop serve` end to end with the tiny stories260K model (context 128):
the OpenAI completions API over curl, urllib and the openai package, errors,
metrics, tokenizer endpoints, config and shutdown."""
import json
import os
import shutil
import signal
import socket
import subprocess
import threading

import pytest

from server_util import (SOURCE, Server, binary, metrics, post_json, raw_http, request,
                         sse_events, tiny_model)

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def server():
    with Server(tiny_model(), "--alias", "tiny", "--max-body-bytes", "65536") as s:
        yield s


def complete(server, **body):
    body.setdefault("prompt", PROMPT)
    return post_json(server.url + "/v1/completions", body)


def greedy(server, max_tokens=12, **body):
    status, _, r = complete(server, max_tokens=max_tokens, temperature=0, **body)
    assert status == 200, r
    return r


# ---- basics -----------------------------------------------------------------------

def test_health_and_models(server):
    status, _, body = request(server.url + "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, _, models = post_json(server.url + "/v1/models", None)
    assert status == 200
    assert models["object"] == "list"
    (m,) = models["data"]
    assert m["id"] == "tiny" and m["object"] == "model" and m["context_length"] == 128


def test_completion_shape(server):
    r = greedy(server)
    assert r["id"].startswith("cmpl-") and r["object"] == "text_completion"
    assert r["model"] == "tiny" and isinstance(r["created"], int)
    (c,) = r["choices"]
    assert c["index"] == 0 and c["logprobs"] is None and c["text"]
    assert c["finish_reason"] in ("stop", "length")
    u = r["usage"]
    assert u["prompt_tokens"] > 0 and 0 < u["completion_tokens"] <= 12
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    t = r["timings"]
    assert t["prompt_n"] == u["prompt_tokens"] and t["predicted_n"] == u["completion_tokens"]
    assert t["ttft_ms"] > 0 and t["prompt_per_second"] > 0 and t["predicted_per_second"] >= 0


def test_model_names_accepted(server):
    for name in ("tiny", "stories260K.gguf", "stories260K"):
        status, _, r = complete(server, model=name, max_tokens=1)
        assert status == 200, (name, r)


def test_greedy_matches_cli(server):
    n = 20
    text = greedy(server, max_tokens=n)["choices"][0]["text"]
    out = subprocess.run([binary(), "generate", "-m", tiny_model(), "-p", PROMPT, "-n", str(n),
                          "--temp", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cli = out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout
    assert text == cli


def test_curl_nonstream_and_stream(server):
    curl = shutil.which("curl")
    if not curl:
        pytest.skip("curl missing")
    body = {"prompt": PROMPT, "max_tokens": 10, "temperature": 0}
    out = subprocess.run([curl, "-sS", "-H", "Content-Type: application/json", "-d", json.dumps(body),
                          server.url + "/v1/completions"], capture_output=True, timeout=60, check=True)
    full = json.loads(out.stdout)["choices"][0]["text"]
    body.update(stream=True, stream_options={"include_usage": True})
    out = subprocess.run([curl, "-sSN", "-i", "-d", json.dumps(body), server.url + "/v1/completions"],
                         capture_output=True, timeout=60, check=True)
    head, _, payload = out.stdout.partition(b"\r\n\r\n")
    assert b"text/event-stream" in head.lower()
    events, done = sse_events(payload)
    assert done
    *chunks, usage = events
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    assert "".join(c["choices"][0]["text"] for c in chunks) == full
    assert all(c["choices"][0]["text"] for c in chunks[:-1])  # no empty chunks but the last
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert all(c["usage"] is None for c in chunks)
    assert usage["usage"]["completion_tokens"] == json.loads(
        subprocess.run([curl, "-sS", "-d", json.dumps({"prompt": PROMPT, "max_tokens": 10, "temperature": 0}),
                        server.url + "/v1/completions"], capture_output=True, check=True).stdout
    )["usage"]["completion_tokens"]


def test_stream_arrives_incrementally(server):
    """Chunks come as separate writes, each a complete SSE event."""
    body = json.dumps({"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stream": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body
    s, got = raw_http(server.port, req)
    s.close()
    assert b"Transfer-Encoding: chunked" in got
    assert got.count(b"data: ") >= 2 and b"data: [DONE]" in got


def test_openai_client(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=10, temperature=0)
    text = r.choices[0].text
    assert text and r.usage.completion_tokens > 0
    pieces, usage = [], None
    stream = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=10, temperature=0,
                                       stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            pieces.append(c.text)
    assert len(pieces) > 1 and "".join(pieces) == text
    assert usage.completion_tokens == r.usage.completion_tokens
    assert usage.prompt_tokens == r.usage.prompt_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


# ---- request features ---------------------------------------------------------------

def test_prompt_forms(server):
    status, _, tok = post_json(server.url + "/tokenize", {"content": PROMPT})
    ids = tok["tokens"]
    by_text = greedy(server, max_tokens=6)["choices"][0]["text"]
    assert greedy(server, max_tokens=6, prompt=ids)["choices"][0]["text"] == by_text
    r = greedy(server, max_tokens=6, prompt=[PROMPT, "The dog"])
    assert [c["index"] for c in r["choices"]] == [0, 1]
    assert r["choices"][0]["text"] == by_text
    r = greedy(server, max_tokens=6, prompt=[ids, ids])
    assert [c["text"] for c in r["choices"]] == [by_text, by_text]


def test_n_choices(server):
    r = greedy(server, max_tokens=5, n=3)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert len({c["text"] for c in r["choices"]}) == 1  # greedy: all the same
    one = greedy(server, max_tokens=5)
    assert r["usage"]["completion_tokens"] == 3 * one["usage"]["completion_tokens"]
    assert r["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]  # counted once per prompt
    status, _, r = complete(server, max_tokens=4, n=2, best_of=2, temperature=1, seed=7)
    assert status == 200 and len(r["choices"]) == 2


def test_seed_reproducible(server):
    a = complete(server, max_tokens=10, temperature=1.0, seed=42)[2]["choices"][0]["text"]
    b = complete(server, max_tokens=10, temperature=1.0, seed=42)[2]["choices"][0]["text"]
    assert a == b


def test_stop_string(server):
    text = greedy(server, max_tokens=20)["choices"][0]["text"]
    words = text.split()
    assert len(words) >= 3
    stop = words[2]
    r = greedy(server, max_tokens=20, stop=[stop, "zzzz"])
    c = r["choices"][0]
    assert c["finish_reason"] == "stop"
    assert stop not in c["text"] and text.startswith(c["text"])
    # streaming never leaks a part of the stop string
    status, _, raw = request(server.url + "/v1/completions",
                             {"prompt": PROMPT, "max_tokens": 20, "temperature": 0, "stop": stop,
                              "stream": True})
    events, done = sse_events(raw)
    assert done and "".join(e["choices"][0]["text"] for e in events) == c["text"]


def test_logprobs_and_echo(server):
    r = greedy(server, max_tokens=6, logprobs=2)
    c = r["choices"][0]
    lp = c["logprobs"]
    n = r["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n
    assert len(lp["text_offset"]) == n and lp["text_offset"] == sorted(lp["text_offset"])
    assert all(v <= 0 for v in lp["token_logprobs"])
    assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"])
    # greedy: the chosen token is the most likely one
    for v, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
        assert abs(max(top.values()) - v) < 1e-3
    # echo: prompt text first; with logprobs the prompt tokens too, first null
    r = greedy(server, max_tokens=3, echo=True)
    assert r["choices"][0]["text"].startswith(PROMPT)
    r = greedy(server, max_tokens=3, echo=True, logprobs=1)
    lp = r["choices"][0]["logprobs"]
    n_prompt = r["usage"]["prompt_tokens"]
    assert len(lp["tokens"]) == n_prompt + r["usage"]["completion_tokens"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(v is not None for v in lp["token_logprobs"][1:])
    # max_tokens 0 + echo: score the prompt only
    r = greedy(server, max_tokens=0, echo=True, logprobs=0)
    assert r["choices"][0]["text"] == PROMPT and r["usage"]["completion_tokens"] == 0
    assert len(r["choices"][0]["logprobs"]["tokens"]) == n_prompt


def test_logprobs_stream(server):
    status, _, raw = request(server.url + "/v1/completions",
                             {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 1,
                              "stream": True, "echo": True})
    events, done = sse_events(raw)
    assert done
    text = "".join(e["choices"][0]["text"] for e in events)
    full = greedy(server, max_tokens=6, logprobs=1, echo=True)["choices"][0]
    assert text == full["text"]
    tokens = sum((e["choices"][0]["logprobs"]["tokens"] for e in events), [])
    assert tokens == full["logprobs"]["tokens"]


def test_sampling_params_accepted(server):
    status, _, r = complete(server, max_tokens=4, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05,
                            repetition_penalty=1.1, presence_penalty=0.5, frequency_penalty=0.5,
                            logit_bias={"1": -100, "5": 2.5}, seed=1, user="me", suffix=None,
                            stream=False)
    assert status == 200, r


def test_logit_bias_forces_token(server):
    status, _, tok = post_json(server.url + "/tokenize", {"content": " cat", "add_special": False})
    forced = tok["tokens"][-1]
    r = greedy(server, max_tokens=3, logit_bias={str(forced): 100})
    status, _, back = post_json(server.url + "/detokenize", {"tokens": [forced] * 3})
    assert r["choices"][0]["text"] == back["content"] or r["choices"][0]["text"].strip() == back["content"].strip()


EOS = 2  # stories260K's end-of-sequence token


def test_ignore_eos(server):
    # the bias makes EOS the greedy pick at every step: the completion ends at
    # once, unless ignore_eos lets it run to max_tokens
    body = dict(max_tokens=8, logit_bias={str(EOS): 100})
    for ignore in (None, False):
        extra = {} if ignore is None else {"ignore_eos": ignore}
        r = greedy(server, **body, **extra)
        assert r["choices"][0]["finish_reason"] == "stop" and r["usage"]["completion_tokens"] == 0
    r = greedy(server, **body, ignore_eos=True, n=2)
    assert r["usage"]["completion_tokens"] == 2 * 8
    assert [c["finish_reason"] for c in r["choices"]] == ["length", "length"]
    status, _, raw = request(server.url + "/v1/completions",
                             dict(body, prompt=PROMPT, temperature=0, ignore_eos=True, stream=True,
                                  stream_options={"include_usage": True}))
    assert status == 200
    events, done = sse_events(raw)
    assert done and events[-1]["usage"]["completion_tokens"] == 8
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    # without the bias greedy decoding already runs to the limit; ignore_eos keeps it there
    r = greedy(server, max_tokens=30, ignore_eos=True)
    assert r["usage"]["completion_tokens"] == 30 and r["choices"][0]["finish_reason"] == "length"


# ---- errors --------------------------------------------------------------------------

BAD_REQUESTS = [
    ({"prompt": PROMPT, "temperature": "hot"}, "temperature"),
    ({"prompt": PROMPT, "temperature": 2.5}, "temperature"),
    ({"prompt": PROMPT, "top_p": 0}, "top_p"),
    ({"prompt": PROMPT, "top_p": 1.5}, "top_p"),
    ({"prompt": PROMPT, "n": 0}, "n"),
    ({"prompt": PROMPT, "n": 1000}, "n"),
    ({"prompt": PROMPT, "max_tokens": -1}, "max_tokens"),
    ({"prompt": PROMPT, "max_tokens": 1.5}, "max_tokens"),
    ({"prompt": PROMPT, "logprobs": 6}, "logprobs"),
    ({"prompt": PROMPT, "presence_penalty": 3}, "presence_penalty"),
    ({"prompt": PROMPT, "frequency_penalty": -3}, "frequency_penalty"),
    ({"prompt": PROMPT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": PROMPT, "stop": 5}, "stop"),
    ({"prompt": PROMPT, "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"prompt": PROMPT, "logit_bias": {"1": 101}}, "logit_bias"),
    ({"prompt": PROMPT, "logit_bias": {"99999": 1}}, "logit_bias"),
    ({"prompt": PROMPT, "suffix": "x"}, "suffix"),
    ({"prompt": PROMPT, "best_of": 3}, "best_of"),
    ({"prompt": PROMPT, "frobnicate": 1}, "frobnicate"),
    ({"prompt": PROMPT, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": PROMPT, "stream": "yes"}, "stream"),
    ({"prompt": PROMPT, "echo": 1}, "echo"),
    ({"prompt": PROMPT, "ignore_eos": 1}, "ignore_eos"),
    ({"prompt": PROMPT, "ignore_eos": "true"}, "ignore_eos"),
    ({"prompt": PROMPT, "seed": "x"}, "seed"),
    ({"prompt": PROMPT, "model": 5}, "model"),
    ({"prompt": PROMPT, "user": 5}, "user"),
    ({}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({"prompt": ["a", [1]]}, "prompt"),
    ({"prompt": [99999]}, "prompt"),
    ({"prompt": [-1]}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
]


@pytest.mark.parametrize("body,param", BAD_REQUESTS, ids=[p + str(i) for i, (_, p) in enumerate(BAD_REQUESTS)])
def test_400_names_param(server, body, param):
    status, _, r = post_json(server.url + "/v1/completions", body)
    assert status == 400, r
    err = r["error"]
    assert err["param"] == param and err["message"] and err["type"] == "invalid_request_error"
    assert set(err) == {"message", "type", "param", "code"}


def test_400_malformed(server):
    for raw in (b"{", b"[1,2]", b"", b"\"x\"", b"{\"prompt\": \"a\",}"):
        status, _, body = request(server.url + "/v1/completions", raw)
        assert status == 400, raw
        assert json.loads(body)["error"]["code"] == "invalid_json"


def test_400_invalid_utf8(server):
    raw = b'{"prompt": "abc\xff\xfe", "max_tokens": 1}'
    status, _, body = request(server.url + "/v1/completions", raw)
    assert status == 400 and json.loads(body)["error"]["param"] == "prompt"
    status, _, body = request(server.url + "/tokenize", b'{"content": "\xc3("}')
    assert status == 400


def test_400_nul_in_strings(server):
    # cJSON hands strings over as C strings: a NUL would cut them short silently.
    for raw in (rb'{"prompt": "Once\u0000 upon a time", "max_tokens": 1}',
                rb'{"prompt": "Once", "stop": ["\u0000x"], "max_tokens": 1}'):
        status, _, body = request(server.url + "/v1/completions", raw)
        assert status == 400, raw
        assert "NUL" in json.loads(body)["error"]["message"]
    # an escaped backslash followed by the letters u0000 is ordinary text
    status, _, body = request(server.url + "/v1/completions",
                              rb'{"prompt": "a\\u0000", "max_tokens": 1, "echo": true}')
    assert status == 200, body
    assert json.loads(body)["choices"][0]["text"].startswith("a\\u0000")


def test_context_length_exceeded(server):
    status, _, r = complete(server, prompt=PROMPT * 20, max_tokens=16)
    assert status == 400 and r["error"]["code"] == "context_length_exceeded"
    status, _, r = complete(server, prompt=PROMPT, max_tokens=127)
    assert status == 400 and r["error"]["code"] == "context_length_exceeded"
    status, _, r = complete(server, prompt=PROMPT, max_tokens=129)
    assert status == 400 and r["error"]["param"] == "max_tokens"


def test_404(server):
    status, _, body = request(server.url + "/v1/nothing")
    assert status == 404 and "error" in json.loads(body)
    # any model name is accepted (--strict-model restores 404: test_clients.py); the reply names the real one
    status, _, r = complete(server, model="gpt-4", max_tokens=1)
    assert status == 200 and r["model"] == "tiny"


def test_405(server):
    status, headers, body = request(server.url + "/v1/completions")
    assert status == 405 and headers.get("Allow") == "POST"
    assert json.loads(body)["error"]["code"] == "method_not_allowed"
    status, headers, _ = request(server.url + "/health", b"{}")
    assert status == 405 and headers.get("Allow") == "GET, HEAD"


def test_413(server):
    big = json.dumps({"prompt": "a" * 70000}).encode()
    status, _, body = request(server.url + "/v1/completions", big)
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    # no Content-Length: chunked upload, caught while accumulating
    part = b"x" * 30000
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
           b"Content-Type: application/json\r\nConnection: close\r\n\r\n")
    for _ in range(3):
        req += b"%x\r\n%s\r\n" % (len(part), part)
    req += b"0\r\n\r\n"
    s, got = raw_http(server.port, req)
    s.close()
    assert got.startswith(b"HTTP/1.1 413"), got[:100]
    assert request(server.url + "/health")[0] == 200


def test_garbage_does_not_hurt(server):
    for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                 b"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\n{",
                 b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}"):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        s.sendall(junk)
        s.close()
    assert request(server.url + "/health")[0] == 200


# ---- tokenizer endpoints ------------------------------------------------------------------

def test_tokenize_detokenize(server):
    status, _, r = post_json(server.url + "/tokenize", {"content": PROMPT})
    assert status == 200 and all(isinstance(t, int) for t in r["tokens"])
    status, _, plain = post_json(server.url + "/tokenize", {"content": PROMPT, "add_special": False})
    assert len(plain["tokens"]) <= len(r["tokens"])
    status, _, back = post_json(server.url + "/detokenize", {"tokens": plain["tokens"]})
    assert status == 200 and back["content"].strip() == PROMPT
    status, _, pieces = post_json(server.url + "/tokenize",
                                  {"content": PROMPT, "add_special": False, "with_pieces": True})
    assert [p["id"] for p in pieces["tokens"]] == plain["tokens"]
    assert "".join(p["piece"] for p in pieces["tokens"]).strip() == PROMPT
    assert post_json(server.url + "/tokenize", {"content": 5})[0] == 400
    assert post_json(server.url + "/tokenize", {"text": "a"})[0] == 400
    assert post_json(server.url + "/detokenize", {"tokens": [100000]})[0] == 400
    assert post_json(server.url + "/detokenize", {"tokens": "a"})[0] == 400


# ---- metrics --------------------------------------------------------------------------------

def test_metrics_counters(server):
    before = metrics(server.url)
    r = greedy(server, max_tokens=5)
    assert complete(server, temperature=9)[0] == 400
    after = metrics(server.url)
    u = r["usage"]
    fin = r["choices"][0]["finish_reason"]
    d = lambda k: after.get(k, 0) - before.get(k, 0)  # noqa: E731
    assert d("genloop_prompt_tokens_total") == u["prompt_tokens"]
    assert d("genloop_generation_tokens_total") == u["completion_tokens"]
    assert d(f'genloop_requests_total{{finish_reason="{fin}"}}') == 1
    assert d('genloop_request_errors_total{code="400"}') == 1
    assert d("genloop_time_to_first_token_seconds_count") == 1
    assert d("genloop_e2e_request_latency_seconds_count") == 1
    assert d("genloop_request_generation_tokens_sum") == u["completion_tokens"]
    assert d("genloop_inter_token_latency_seconds_count") == u["completion_tokens"] - 1
    assert after["genloop_requests_running"] == 0 and after["genloop_requests_waiting"] == 0
    assert 0 <= after["genloop_kv_cache_usage_ratio"] <= 1
    for k in ("genloop_num_preemptions_total", "genloop_prefix_cache_queries_total",
              "genloop_prefix_cache_hits_total"):
        assert k in after


def test_metrics_promtool(server):
    promtool = shutil.which("promtool")
    if not promtool:
        if os.environ.get("CI") in ("true", "1"):
            pytest.fail("promtool missing (apt-get install prometheus)")
        pytest.skip("promtool missing (apt-get install prometheus)")
    greedy(server, max_tokens=3)
    status, headers, body = request(server.url + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    out = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    text = body.decode()
    for name in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                 "e2e_request_latency_seconds", "request_prompt_tokens", "request_generation_tokens",
                 "request_queue_time_seconds", "batch_size", "batch_tokens"):
        assert f"# TYPE genloop_{name} histogram" in text
    assert "# TYPE genloop_engine_steps_total counter" in text


# ---- load limits, disconnects, lifecycle -------------------------------------------------------

def test_503_when_queue_full():
    with Server(tiny_model(), "--max-waiting", "1", "--max-seqs", "1") as s:
        results = []
        lock = threading.Lock()

        def one():
            status, headers, body = post_json(s.url + "/v1/completions",
                                              {"prompt": PROMPT, "max_tokens": 100, "temperature": 0})
            with lock:
                results.append((status, headers, body))

        threads = [threading.Thread(target=one) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        statuses = [r[0] for r in results]
        assert len(results) == 12 and set(statuses) <= {200, 503}, statuses
        assert 503 in statuses and 200 in statuses
        for status, headers, body in results:
            if status == 503:
                assert headers.get("Retry-After") and body["error"]["code"] == "server_busy"
        m = metrics(s.url)
        assert m['genloop_request_errors_total{code="503"}'] == statuses.count(503)


def test_health_while_loading():
    """The socket listens before the model is loaded: /health is 503 (with
    Retry-After) until the model is up, then 200. The load may be too quick
    to catch a 503, so only the sequence is checked."""
    s = Server(tiny_model(), wait_ready=False)
    try:
        seen = []
        while not seen or seen[-1] != 200:
            status, headers, body = request(s.url + "/health")
            assert status in (200, 503), status
            if status == 503:
                assert headers.get("Retry-After") and json.loads(body)["status"] == "loading model"
            seen.append(status)
        assert seen == sorted(seen, reverse=True)  # 503s, then 200
    finally:
        code, _ = s.stop()
    assert code == 0


def test_load_failure_exits_1(tmp_path):
    # not GGUF at all: refused before the port is bound (test_clients.py has the missing file)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    r = subprocess.run([binary(), "serve", "-m", str(bad), "--port", "0"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and "not a GGUF file" in r.stderr and "listening" not in r.stdout
    # GGUF but corrupt: found by the load, after listening
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    s = Server(str(bad), wait_ready=False)
    assert s.proc.wait(30) == 1
    _, err = s.stop()
    assert "cannot load model" in err


def test_sigterm_with_stream_in_flight():
    s = Server(tiny_model())
    body = json.dumps({"prompt": PROMPT, "max_tokens": 100, "stream": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    sock, _ = raw_http(s.port, req, read_until=b"data: ")
    code, err = s.stop(signal.SIGTERM)
    sock.close()
    assert code == 0, err
    assert "stopped" in err


def test_config_file_and_flags(tmp_path):
    default = subprocess.run([binary(), "serve", "--print-config"], capture_output=True, text=True, check=True)
    shipped = subprocess.run([binary(), "serve", "--config", os.path.join(SOURCE, "config", "genloop.json"),
                              "--print-config"], capture_output=True, text=True, check=True)
    assert json.loads(default.stdout) == json.loads(shipped.stdout)
    with open(os.path.join(SOURCE, "config", "genloop.json")) as f:
        assert json.load(f) == json.loads(default.stdout)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"port": 9999, "max_seqs": 3}))
    out = subprocess.run([binary(), "serve", "--config", str(cfg), "--port", "1234", "--print-config"],
                         capture_output=True, text=True, check=True)
    merged = json.loads(out.stdout)
    assert merged["port"] == 1234 and merged["max_seqs"] == 3
    cfg.write_text(json.dumps({"bogus": 1}))
    out = subprocess.run([binary(), "serve", "--config", str(cfg), "-m", "x"], capture_output=True, text=True)
    assert out.returncode == 1 and "bogus" in out.stderr
    out = subprocess.run([binary(), "serve", "--help"], capture_output=True, text=True, check=True)
    for flag in ("--host", "--port", "--model", "--threads", "--kv-cache-mib", "--block-size",
                 "--max-batch-tokens", "--max-seqs", "--max-waiting", "--max-body-bytes", "--n-ctx",
                 "--timeout", "--alias", "--config"):
        assert flag in out.stdout
    assert subprocess.run([binary(), "serve"], capture_output=True).returncode == 1
    assert subprocess.run([binary(), "serve", "-m", "x", "--port", "99999"], capture_output=True).returncode == 1
