"""genloop driven by the clients people already have: the official `openai`
SDK and LangChain's `langchain-openai`, unchanged, plus the request-field
table of docs/api-reference.md (every row checked against the server), n > 1 with a
seed, model names, endpoints we do not have, and progress events.

The tiny stories260K model (context 128) runs with the chatml template."""
import contextlib
import json
import os
import re
import signal
import threading
import time

import pytest

from server_util import (SOURCE, Server, ok, post_chat, post_json, request, sse_events, tiny_model, wait_for)

openai = pytest.importorskip("openai")

EOS = 2  # stories260K's end-of-sequence id
PROMPT = "Once upon a time there was a little girl who liked to play in the park with"


@pytest.fixture(scope="module")
def tiny():
    with Server(tiny_model(), "--alias", "tiny", "--alias", "stories", "--chat-template", "chatml") as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def complete(server, **body):
    body.setdefault("prompt", PROMPT)
    return post_json(server.url + "/v1/completions", body)


# ---- the request-field table of docs/api-reference.md -------------------------------------

def reference_fields():
    """[(field, endpoints, status)] from the table "Request fields" of docs/api-reference.md."""
    text = open(os.path.join(SOURCE, "docs", "api-reference.md")).read()
    section = text.split("\n## Request fields", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([a-z_.]+)`", cells[0]):
            rows.append((name, cells[1], cells[2].split()[0].lower()))
    return rows


# A value that changes the output for every refused field (the neutral one is accepted), and a
# plausible value for every ignored one.
REFUSED = {
    "suffix": "x", "audio": {"voice": "alloy", "format": "wav"}, "functions": [{"name": "f"}],
    "function_call": "auto", "modalities": ["text", "audio"], "verbosity": "low",
    "web_search_options": {}, "tfs_z": 0.5, "penalize_nl": True,
    "min_keep": 2, "samplers": ["top_k"], "t_max_predict_ms": 100, "post_sampling_probs": True,
    "lora": [{"id": 0, "scale": 1}], "n_indent": 2, "return_tokens": True, "stop_token_ids": [5],
    "include_stop_str_in_output": True, "skip_special_tokens": False,
    "spaces_between_special_tokens": False, "use_beam_search": True, "length_penalty": 2,
    "truncate_prompt_tokens": 5, "priority": 1, "echo": True, "chat_template": "{{ x }}",
    "documents": [{"text": "x"}], "prompt_logprobs": 1, "best_of": 3,
}
IGNORED = {
    "store": True, "metadata": {"k": "v"}, "service_tier": "auto", "safety_identifier": "u1",
    "prompt_cache_key": "k", "prediction": {"type": "content", "content": "x"}, "user": "me",
    "id_slot": 0, "timings_per_token": True, "n_keep": 4, "request_id": "r1", "stream_options.include_obfuscation": False,
}


def test_readme_table_matches_server(tiny):
    rows = reference_fields()
    assert len(rows) > 60, rows
    assert {st for _, _, st in rows} <= {"implemented", "ignored", "refused"}, rows
    assert {f for f, _, st in rows if st == "refused"} == set(REFUSED)
    assert {f for f, _, st in rows if st == "ignored"} == set(IGNORED)
    for field, endpoints, status in rows:
        if status == "implemented" or "." in field:
            continue
        for path, send in (("completions", complete), ("chat", post_chat)):
            if path not in endpoints and endpoints != "both":
                continue
            value = (REFUSED if status == "refused" else IGNORED)[field]
            code, _, r = send(tiny, max_tokens=2, **{field: value})
            if status == "ignored":
                assert code == 200, (path, field, r)
            else:
                assert code == 400 and r["error"]["param"] == field, (path, field, r)
                assert field in r["error"]["message"], r
    # stream_options.include_obfuscation: accepted, changes nothing
    code, _, _ = request(tiny.url + "/v1/completions",
                         {"prompt": PROMPT, "max_tokens": 2, "stream": True,
                          "stream_options": {"include_obfuscation": False}})
    assert code == 200


def test_refused_fields_accept_their_neutral_value(tiny):
    for field, value in (("typical_p", 1), ("mirostat", 0), ("use_beam_search", False),
                         ("skip_special_tokens", True), ("verbosity", "medium"), ("echo", False),
                         ("stop_token_ids", []), ("web_search_options", None)):
        ok(post_chat(tiny, max_tokens=1, **{field: value}))


def test_unknown_field_is_400_unless_lenient(tiny):
    code, _, r = complete(tiny, max_tokens=1, frobnicate=1)
    assert code == 400 and r["error"]["param"] == "frobnicate", r
    with Server(tiny_model(), "--lenient-params", "--chat-template", "chatml") as s:
        ok(complete(s, max_tokens=1, frobnicate=1))
        ok(post_chat(s, max_tokens=1, frobnicate={"x": 1}))
    assert "ignoring unknown request field 'frobnicate'" in s.log, s.log


def test_openai_fields_issue_list(tiny):
    """The fields the issue found refused, through the SDK."""
    c = client(tiny)
    r = c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2, store=False,
        metadata={"a": "b"}, service_tier="auto", reasoning_effort="low", user="me",
        prediction={"type": "content", "content": "hello"}, modalities=["text"],
        extra_body={"cache_prompt": True, "repeat_penalty": 1.1, "min_tokens": 1,
                    "chat_template_kwargs": {"enable_thinking": False},
                    "n_probs": 2, "add_generation_prompt": True,
                    "continue_final_message": False},
        stream_options=None)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert len(r.choices[0].logprobs.content[0].top_logprobs) == 2


def test_repeat_penalty_is_repetition_penalty(tiny):
    base = dict(temperature=0, max_tokens=24, prompt="the the the the the the")
    plain = ok(complete(tiny, **base))["choices"][0]["text"]
    a = ok(complete(tiny, **base, repeat_penalty=1.8, repeat_last_n=64))["choices"][0]["text"]
    b = ok(complete(tiny, **base, repetition_penalty=1.8))["choices"][0]["text"]
    assert a == b and a != plain
    code, _, r = complete(tiny, **base, repeat_penalty=1.1, repetition_penalty=1.2)
    assert code == 400 and r["error"]["param"] == "repeat_penalty"
    # a window of 0 turns the penalty off
    c = ok(complete(tiny, **base, repeat_penalty=1.8, repeat_last_n=0))["choices"][0]["text"]
    assert c == plain


def test_min_tokens_bans_end_of_sequence(tiny):
    forced_eos = dict(temperature=0, max_tokens=10, logit_bias={str(EOS): 100})
    r = ok(complete(tiny, **forced_eos))
    assert r["usage"]["completion_tokens"] == 0 and r["choices"][0]["finish_reason"] == "stop"
    r = ok(complete(tiny, **forced_eos, min_tokens=4))
    assert r["usage"]["completion_tokens"] == 4 and r["choices"][0]["finish_reason"] == "stop"
    code, _, r = complete(tiny, max_tokens=3, min_tokens=5)
    assert code == 400 and r["error"]["param"] == "min_tokens"


def test_cache_prompt_and_cached_tokens(tiny):
    prompt = "A cache test: " + "one two three four five six seven " * 4
    ok(complete(tiny, prompt=prompt, max_tokens=1))
    r = ok(complete(tiny, prompt=prompt, max_tokens=1))
    cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 16 <= cached < r["usage"]["prompt_tokens"], r["usage"]
    t = r["timings"]
    assert t["cache_n"] == cached and t["prompt_n"] == r["usage"]["prompt_tokens"] - cached
    r = ok(complete(tiny, prompt=prompt, max_tokens=1, cache_prompt=False))
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert r["timings"]["cache_n"] == 0 and r["timings"]["prompt_n"] == r["usage"]["prompt_tokens"]


def n_prompt(server, text):
    return len(ok(post_json(server.url + "/tokenize", {"content": text, "add_special": False}))["tokens"])


def test_add_generation_prompt_and_continue_final_message(tiny):
    user = {"role": "user", "content": "Tell me a story"}
    closed = "<|im_start|>user\nTell me a story<|im_end|>\n"
    r = ok(post_chat(tiny, messages=[user], max_tokens=1, add_generation_prompt=False))
    assert r["usage"]["prompt_tokens"] == n_prompt(tiny, closed)
    msgs = [user, {"role": "assistant", "content": "Once upon a time"}]
    r = ok(post_chat(tiny, messages=msgs, max_tokens=1, continue_final_message=True))
    assert r["usage"]["prompt_tokens"] == n_prompt(tiny, closed + "<|im_start|>assistant\nOnce upon a time")
    # greedy: continuing is the same as completing the rendered text
    cont = ok(post_chat(tiny, messages=msgs, max_tokens=8, temperature=0, continue_final_message=True))
    raw = ok(complete(tiny, prompt=closed + "<|im_start|>assistant\nOnce upon a time", max_tokens=8,
                      temperature=0))
    assert cont["choices"][0]["message"]["content"] == raw["choices"][0]["text"].split("<|im_end|>")[0]
    code, _, r = post_chat(tiny, messages=[user], max_tokens=1, continue_final_message=True)
    assert code == 400 and "assistant" in r["error"]["message"], r
    code, _, r = post_chat(tiny, messages=msgs, max_tokens=1, continue_final_message=True,
                      add_generation_prompt=True)
    assert code == 400 and r["error"]["param"] == "continue_final_message", r


def test_chat_template_kwargs(tmp_path):
    from test_server_chat import with_template
    tpl = ("{% for m in messages %}{{ m.content }}\n{% endfor %}"
           "{% if enable_thinking is defined and not enable_thinking %}NOTHINK {% endif %}"
           "{% if reasoning_effort is defined %}EFFORT={{ reasoning_effort }} {% endif %}")
    with Server(with_template(tmp_path, "kw.gguf", tpl)) as s:
        base = ok(post_chat(s, max_tokens=1))["usage"]["prompt_tokens"]
        assert base == n_prompt(s, "hi\n")
        r = ok(post_chat(s, max_tokens=1, chat_template_kwargs={"enable_thinking": False}))
        assert r["usage"]["prompt_tokens"] == n_prompt(s, "hi\nNOTHINK ")
        r = ok(post_chat(s, max_tokens=1, reasoning_effort="high"))
        assert r["usage"]["prompt_tokens"] == n_prompt(s, "hi\nEFFORT=high ")
        code, _, r = post_chat(s, max_tokens=1, chat_template_kwargs={"x": [1]})
        assert code == 400 and r["error"]["param"] == "chat_template_kwargs.x", r
        code, _, r = post_chat(s, max_tokens=1, chat_template_kwargs="no")
        assert code == 400 and r["error"]["param"] == "chat_template_kwargs", r


# ---- n > 1 with a seed --------------------------------------------------------------------

def test_n_with_seed_differs_and_reproduces(tiny):
    c = client(tiny)
    for make in (lambda **kw: c.completions.create(model="tiny", prompt=PROMPT, **kw),
                 lambda **kw: c.chat.completions.create(
                     model="tiny", messages=[{"role": "user", "content": "tell a story"}], **kw)):
        def texts(**kw):
            r = make(max_tokens=12, temperature=1, seed=5, **kw)
            return [getattr(ch, "text", None) or ch.message.content for ch in
                    sorted(r.choices, key=lambda ch: ch.index)]
        three = texts(n=3)
        assert len(set(three)) == 3, three
        assert texts(n=3) == three
        assert texts(n=1) == three[:1]  # choice 0 samples with the seed itself


# ---- model names ----------------------------------------------------------------------------

def test_model_names(tiny):
    c = client(tiny)
    assert [m.id for m in c.models.list().data] == ["tiny", "stories"]
    assert c.models.retrieve("tiny").id == "tiny"
    assert c.models.retrieve("stories").id == "stories"
    assert c.models.retrieve("stories260K.gguf").id == "stories260K.gguf"
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("gpt-4o")
    r = c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                  max_tokens=1)
    assert r.model == "tiny"


def test_served_model_name_and_strict_model():
    with Server(tiny_model(), "--served-model-name", "org/story-model", "--alias", "s",
                "--strict-model") as s:
        c = client(s)
        assert c.models.list().data[0].id == "org/story-model"
        assert c.models.retrieve("org/story-model").id == "org/story-model"
        assert c.completions.create(model="s", prompt="x", max_tokens=1).model == "org/story-model"
        with pytest.raises(openai.NotFoundError) as e:
            c.completions.create(model="gpt-4o", prompt="x", max_tokens=1)
        assert e.value.body["code"] == "model_not_found"


# ---- endpoints we do not have ---------------------------------------------------------------

def test_unsupported_endpoints_say_so(tiny):
    c = client(tiny)
    with pytest.raises(openai.NotFoundError) as e:
        c.embeddings.create(model="tiny", input="hi")
    assert "not supported by this server" in e.value.body["message"]
    for path in ("/v1/audio/speech", "/v1/audio/transcriptions", "/v1/images/generations"):
        code, _, r = post_json(tiny.url + path, {"model": "tiny"})
        assert code == 404 and "not supported by this server" in r["error"]["message"], (path, r)
        assert r["error"]["code"] == "unsupported_endpoint"


# ---- streaming through the SDK ----------------------------------------------------------------

def test_stream_options_usage(tiny):
    c = client(tiny)
    chunks = list(c.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 0
    assert all(ch.usage is None for ch in chunks[:-1])
    chunks = list(c.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"stream_options": {
            "include_usage": True, "continuous_usage_stats": True}}))
    seen = [ch.usage.completion_tokens for ch in chunks if ch.choices and ch.choices[0].text]
    assert seen == sorted(seen) and seen[-1] == 5 and len(seen) >= 2, seen


def test_prompt_progress_events():
    # a 16-token step budget: the prompt is read in several chunks
    with Server(tiny_model(), "--max-batch-tokens", "16", "--chat-template", "chatml") as tiny:
        check_progress(tiny)


def check_progress(tiny):
    prompt = "A progress test: " + "one two three four five six seven " * 2
    for path, body in (("/v1/completions", {"prompt": prompt}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]})):
        code, _, raw = request(tiny.url + path, dict(body, max_tokens=3, stream=True, return_progress=True))
        assert code == 200, raw
        events, done = sse_events(raw)
        progress = [e["prompt_progress"] for e in events if "prompt_progress" in e]
        assert done and len(progress) >= 4, events
        assert all(e["choices"] == [] for e in events if "prompt_progress" in e)
        first, last = progress[0], progress[-1]
        assert first["processed"] == first["cache"] and last["processed"] == last["total"]
        assert [p["processed"] for p in progress] == sorted(p["processed"] for p in progress)
        assert all(p["time_ms"] >= 0 for p in progress)
        # progress comes before any token
        i_last = max(i for i, e in enumerate(events) if "prompt_progress" in e)
        assert all("prompt_progress" not in e for e in events[i_last + 1:])
        # not asked: none
        code, _, raw = request(tiny.url + path, dict(body, max_tokens=3, stream=True))
        assert all("prompt_progress" not in e for e in sse_events(raw)[0])


# ---- another client library: LangChain ------------------------------------------------------

def test_langchain_openai(tiny):
    lc = pytest.importorskip("langchain_openai")
    llm = lc.ChatOpenAI(base_url=tiny.url + "/v1", api_key="unused", model="gpt-4o-mini",
                        max_tokens=6, temperature=0, max_retries=0)
    msg = llm.invoke("Tell me a story")
    assert isinstance(msg.content, str) and msg.response_metadata["model_name"] == "tiny"
    assert msg.usage_metadata["output_tokens"] >= 1
    streamed = "".join(chunk.content for chunk in llm.stream("Tell me a story"))
    assert streamed == msg.content
    many = llm.batch(["a", "b"])
    assert len(many) == 2
    completion = lc.OpenAI(base_url=tiny.url + "/v1", api_key="unused", model="tiny", max_tokens=6,
                           temperature=0, max_retries=0)
    text = completion.invoke(PROMPT)
    assert text == ok(complete(tiny, max_tokens=6, temperature=0))["choices"][0]["text"]


# ---- graceful drain on SIGTERM -----------------------------------------------------------------

class Stream:
    """A streaming completion read on a thread: .events, .done, .first (set at the first token)."""

    def __init__(self, server, **body):
        import requests
        self.events, self.done, self.error = [], False, None
        self.first = threading.Event()
        self.finished = threading.Event()
        body = dict(body, stream=True, prompt=PROMPT)
        self.resp = requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=120)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for line in self.resp.iter_lines():
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    self.done = True
                    continue
                self.events.append(json.loads(line[6:]))
                self.first.set()
        except Exception as e:  # the connection cut
            self.error = e
        finally:
            self.first.set()
            self.finished.set()

    def finish_reasons(self):
        return [c["finish_reason"] for e in self.events for c in e.get("choices", []) if c["finish_reason"]]


@contextlib.contextmanager
def streaming_server(shutdown_timeout, max_tokens=4000):
    """SmolLM (slower than the tiny model, so requests run for seconds) with a 1-sequence batch,
    and a long stream that has started; yields both, then stops the server (.code, .log)."""
    from server_util import chat_model
    s = Server(chat_model(), "--max-seqs", "1", "--shutdown-timeout", str(shutdown_timeout))
    try:
        st = Stream(s, max_tokens=max_tokens, ignore_eos=True)
        assert st.first.wait(60)
        yield s, st
    finally:
        s.code, s.log = s.stop()


def test_drain_lets_running_and_queued_requests_finish():
    with streaming_server(60, max_tokens=60) as (s, running):
        queued = Stream(s, max_tokens=20, ignore_eos=True)
        s.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: request(s.url + "/health")[0] == 503, 10)
        status, _, body = request(s.url + "/health")
        assert json.loads(body) == {"status": "draining"}
        code, _, r = complete(s, max_tokens=1)
        assert code == 503, r
        for st in (running, queued):
            assert st.finished.wait(120) and st.done and st.error is None
            assert st.finish_reasons() == ["length"]
        assert s.proc.wait(30) == 0
    assert s.code == 0 and "draining" in s.log, s.log


def test_drain_timeout_ends_the_rest_with_an_error_event():
    with streaming_server(1) as (s, st):
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        assert st.finished.wait(30) and st.done, st.error
        assert 0.8 < time.time() - t0 < 10
        errors = [e["error"] for e in st.events if "error" in e]
        assert len(errors) == 1 and errors[0]["code"] == "server_shutdown", st.events[-3:]
        assert st.finish_reasons() == []  # OpenAI values only: none for a cut-short choice
        assert s.proc.wait(30) == 0
    assert s.code == 0 and "cancelling 1 request" in s.log, s.log


def test_second_signal_stops_at_once():
    with streaming_server(120) as (s, st):
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert s.proc.poll() is None  # still draining
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(10) == 0 and time.time() - t0 < 5
        assert st.finished.wait(10) and not st.done
    assert "second signal" in s.log, s.log


# ---- metrics --------------------------------------------------------------------------------

def test_metrics_labels_buckets_and_promtool(tiny):
    import shutil
    import subprocess
    ok(complete(tiny, max_tokens=4))
    status, _, body = request(tiny.url + "/metrics")
    text = body.decode()
    series = [l for l in text.splitlines() if l and not l.startswith("#")]
    assert all('model_name="tiny"' in l for l in series), [l for l in series if "model_name" not in l]
    assert 'le="0.005"' in text and "0000000" not in text
    for name in ("request_prefill_time_seconds", "request_decode_time_seconds"):
        assert f"# TYPE genloop_{name} histogram" in text
        assert re.search(rf'genloop_{name}_count{{model_name="tiny"}} [1-9]', text), name
    les = [float(m) for m in re.findall(r'genloop_e2e_request_latency_seconds_bucket\{model_name="tiny",le="([0-9.e+]+)"\}', text)]
    assert max(les) >= 600
    promtool = shutil.which("promtool")
    if promtool:
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


def test_cached_prompt_timings_use_computed_tokens(tiny):
    prompt = "Timings: " + "one two three four five six seven " * 3
    first = ok(complete(tiny, prompt=prompt, max_tokens=1))
    again = ok(complete(tiny, prompt=prompt, max_tokens=1))
    t = again["timings"]
    assert t["cache_n"] > 0 and t["prompt_n"] + t["cache_n"] == again["usage"]["prompt_tokens"]
    # the rate is over the computed tokens in the prefill time, so a cache hit does not inflate it
    assert t["prompt_per_second"] == pytest.approx(t["prompt_n"] / (t["prompt_ms"] / 1e3), rel=1e-3)
    assert first["timings"]["cache_n"] == 0 or first["timings"]["prompt_n"] > 0


# ---- startup, the command line and install-deps ---------------------------------------------

def run_genloop(*args, timeout=120, env=None):
    import subprocess
    from server_util import binary
    return subprocess.run([binary(), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def test_serve_missing_model_fails_before_listening():
    r = run_genloop("serve", "-m", "/nonexistent/model.gguf", "--port", "0")
    assert r.returncode == 1 and "listening" not in r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "/nonexistent/model.gguf" in lines[0] and "No such file" in lines[0], r.stderr


def test_serve_startup_log_and_health_head():
    with Server(tiny_model()) as s:
        code, _, _ = request(s.url + "/health", method="HEAD")
        assert code == 200
        ok(complete(s, max_tokens=1))
    log = s.log
    kv = re.search(r"KV cache: (\d+) tokens \((f16|q8_0|f32), (\d+) MiB, (\d+) blocks of (\d+)\); up to (\d+) sequences at once", log)
    assert kv and int(kv.group(1)) == int(kv.group(4)) * int(kv.group(5)) > 0, log
    assert log.index("listening on") < log.index("KV cache") < log.index("ready at")
    # one startup line each (stdout's copies are for scripts reading a pipe)
    assert log.count("listening on") == 1 and log.count("ready at") == 1
    # access-log lines start with a UTC timestamp
    access = [l for l in log.splitlines() if " http #" in l]
    assert access and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z http #", l) for l in access), access


def test_serve_on_a_terminal_prints_each_startup_line_once():
    import pty
    import subprocess
    from server_util import binary
    master, slave = pty.openpty()
    proc = subprocess.Popen([binary(), "serve", "-m", tiny_model(), "--port", "0"],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    try:
        deadline = time.time() + 30
        while b"ready at" not in out and time.time() < deadline:
            import select
            if select.select([master], [], [], 1)[0]:
                out += os.read(master, 65536)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        os.close(master)
    text = out.decode()
    assert text.count("listening") == 1 and text.count("ready") == 1, text


def test_port_in_use_names_the_port():
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]
    try:
        r = run_genloop("serve", "-m", tiny_model(), "--port", port)
    finally:
        sock.close()
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0] and "port 0" not in lines[0]


@pytest.mark.parametrize("cmd", [["serve"], ["generate", "-p", "x"], ["bench"], ["tokenize", "-p", "x"]])
def test_second_model_flag_is_an_error(cmd):
    r = run_genloop(*cmd, "-m", tiny_model(), "-m", "/other.gguf")
    assert r.returncode != 0 and "given twice" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bench_bad_batch_is_one_line():
    r = run_genloop("bench", "-m", tiny_model(), "-b", "0")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "-b" in r.stderr, r.stderr


def test_bench_prints_phases_on_stderr():
    r = run_genloop("bench", "-m", tiny_model(), "-p", 16, "-n", 8, "-b", "1,2", "-r", 2, "-t", 2, "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)  # stdout stays one JSON object
    for phase in ("loading", "warm-up", "[1/2] prompt processing: 16 tokens", "[2/2] memory bandwidth",
                  "[1/2] generation: 8 tokens", "[2/2] batch of 2"):
        assert phase in r.stderr, (phase, r.stderr)


def test_bench_progress_line_on_long_runs():
    # progress every 20 ms instead of every second, so a fast host prints lines too
    r = run_genloop("bench", "-m", tiny_model(), "-p", 16, "-n", 2500, "-b", "1", "-r", 1, "-t", 2, "--json",
                    timeout=300, env={"GENLOOP_BENCH_PROGRESS_S": "0.02"})
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)
    assert re.search(r"genloop bench:   prompt 16/16 tokens, generated \d+/2500", r.stderr), r.stderr


def test_install_deps_runtime_is_only_what_serving_needs():
    import subprocess
    script = os.path.join(SOURCE, "scripts", "install-deps")
    runtime = subprocess.run([script, "--runtime", "--list"], capture_output=True, text=True, check=True).stdout.split()
    full = subprocess.run([script, "--list"], capture_output=True, text=True, check=True).stdout.split()
    assert set(runtime) < set(full) and "libuv1-dev" in runtime and "meson" in runtime
    for test_only in ("chromium", "nginx", "prometheus", "clang", "check"):
        assert test_only in full and test_only not in runtime, test_only
    assert "scripts/install-deps --runtime" in open(os.path.join(SOURCE, "scripts", "run")).read()


# ---- genloop chat ---------------------------------------------------------------------------

def test_chat_cli_through_a_pipe():
    import subprocess
    from server_util import binary
    r = subprocess.run([binary(), "chat", "-m", tiny_model(), "-n", "8", "--temp", "0", "-t", "2"],
                       input="Once upon a time\n/reset\nThe end\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("> ") == 4 and "(conversation reset)" in r.stdout, r.stdout
    # each turn through the template: chatml here, two turns after the reset start over (nothing cached
    # past the template's opening), and the stats line says how many tokens were read
    stats = re.findall(r"\[(\d+) prompt tokens \((\d+) cached\), (\d+) generated", r.stderr)
    assert len(stats) == 2, r.stderr
    chatml = "<|im_start|>user\nOnce upon a time<|im_end|>\n<|im_start|>assistant\n"
    with Server(tiny_model(), "--chat-template", "chatml") as s:
        assert int(stats[0][0]) == n_prompt(s, chatml)


def test_chat_cli_ctrl_c_stops_a_reply():
    pexpect = pytest.importorskip("pexpect")
    from server_util import binary, chat_model
    child = pexpect.spawn(binary(), ["chat", "-m", chat_model(), "--temp", "0", "-t", "2"],
                          encoding="utf-8", timeout=60)
    try:
        child.expect("> ")
        child.sendline("Write a very long story about a dragon, with many chapters.")
        child.expect(r"chapters\.\r\n")  # the terminal's echo of the line
        child.expect(r"\w+ \w+ \w+")  # the reply is streaming
        t0 = time.time()
        child.sendintr()
        child.expect(r"generated, [0-9.]+ tokens/s; stopped\]")
        child.expect("> ")
        assert time.time() - t0 < 10
        child.sendline("/reset")
        child.expect(r"\(conversation reset\)")
        child.sendline("Say hi")
        child.expect(r"\d+ generated")
        child.expect("> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
