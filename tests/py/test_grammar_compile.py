"""Grammars compile off the loop thread under a budget; refused grammars do
not grow the server; GBNF faults are 4xx; tool calls in the forms models
write them; vLLM's structured-output fields."""
import json
import os
import threading
import time
import urllib.request

import pytest

from server_util import Server, binary, chat_model, need, post_json, request, sse_events, tiny_model, SOURCE

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def big_schema(n):
    props = {f"field_{i}": {"type": "string"} for i in range(n)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024


@pytest.fixture(scope="module")
def tiny():
    s = Server(tiny_model())
    yield s
    s.stop()


@pytest.fixture(scope="module")
def chat():
    s = Server(chat_model())
    yield s
    s.stop()


def test_health_and_stream_flow_while_a_big_schema_compiles(chat):
    """A ~1 MB schema compiles on the compile thread: /health answers at once
    and a running stream keeps receiving tokens."""
    schema = big_schema(20000)
    assert len(json.dumps(schema)) > 900_000
    arrivals, done = [], {}

    def stream():
        req = urllib.request.Request(chat.url + "/v1/completions", data=json.dumps(
            {"prompt": "Once upon a time", "max_tokens": 120, "ignore_eos": True, "stream": True,
             "temperature": 0}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                if line.startswith(b"data: {"):
                    arrivals.append(time.time())

    def compile_big():
        t = time.time()
        done["status"], _, done["body"] = post_json(chat.url + "/v1/completions",
                                                    {"prompt": "x", "max_tokens": 1, "json_schema": schema},
                                                    timeout=120)
        done["t0"], done["t1"] = t, time.time()

    st = threading.Thread(target=stream)
    st.start()
    while not arrivals:
        time.sleep(0.01)
    ct = threading.Thread(target=compile_big)
    ct.start()
    worst = 0.0
    while ct.is_alive():
        t = time.time()
        status, _, _ = request(chat.url + "/health")
        worst = max(worst, time.time() - t)
        assert status == 200
        time.sleep(0.02)
    st.join()
    assert done["status"] == 200, done  # 20,000 required fields compile, off the loop
    assert worst < 0.2, f"/health took {worst * 1e3:.0f} ms during a compile"
    during = [a for a in arrivals if done["t0"] <= a <= done["t1"]]
    if done["t1"] - done["t0"] > 0.5:  # the compile was long enough to see the stream go on
        assert during, "no token arrived while the schema compiled"


@pytest.mark.parametrize("flag,needle", [
    ("--grammar-compile-ms=1", "grammar_compile_ms"),
    ("--grammar-compile-mib=1", "grammar_compile_mib"),
])
def test_compile_budget_is_a_400_naming_it(flag, needle):
    s = Server(tiny_model(), flag)
    try:
        status, _, r = post_json(s.url + "/v1/completions",
                                 {"prompt": "x", "max_tokens": 1, "json_schema": big_schema(7500)}, timeout=120)
        assert status == 400, r
        assert r["error"]["type"] == "invalid_request_error"
        assert needle in r["error"]["message"], r["error"]["message"]
        status, _, _ = post_json(s.url + "/v1/completions", {"prompt": "x", "max_tokens": 1,
                                                             "grammar": 'root ::= "ok"'})
        assert status == 200
    finally:
        s.stop()


def test_refused_grammars_do_not_grow_rss(tiny):
    """Grammars that parse but cannot start are refused before the cache."""
    def refused(i):
        return "root ::= " + " | ".join(f'"w{i}x{k}"' for k in range(55000)) + "\n"
    for i in range(4):  # warm-up: the compile thread's arena reaches its size
        post_json(tiny.url + "/v1/completions", {"prompt": "x", "max_tokens": 1, "grammar": refused(1000 + i)})
    before = rss_mib(tiny.proc.pid)
    for i in range(40):
        g = refused(i)
        assert len(g) > 700_000
        status, _, r = post_json(tiny.url + "/v1/completions", {"prompt": "x", "max_tokens": 1, "grammar": g})
        assert status == 400, r
        assert "run-time bounds" in r["error"]["message"]
    after = rss_mib(tiny.proc.pid)
    assert after - before < 48, f"RSS grew from {before:.0f} to {after:.0f} MiB"


@pytest.mark.parametrize("grammar,needle", [
    ('root ::= "\\uD800"', "surrogate"),
    ("root ::= [\\uDC00-\\uDCFF]", "surrogate"),
    ("root ::= root \"a\" | \"b\"", "left-recursive"),
    ("root ::= root \"a\"", "accepts nothing"),
    ('root ::= "a"{3,2}', None),
    ("root ::= [", "character class"),
    ("x ::= \"a\"", "root"),
])
def test_gbnf_faults_are_400(tiny, grammar, needle):
    status, _, r = post_json(tiny.url + "/v1/completions", {"prompt": "x", "max_tokens": 2, "grammar": grammar})
    assert status == 400, r
    assert r["error"]["type"] == "invalid_request_error"
    if needle:
        assert needle in r["error"]["message"], r["error"]["message"]


@pytest.mark.parametrize("field", [
    {"guided_choice": ["yes", "no"]},
    {"structured_outputs": {"choice": ["yes", "no"]}},
    {"guided_regex": "(yes|no)"},
    {"structured_outputs": {"regex": "^(yes|no)$"}},
    {"guided_grammar": 'root ::= "yes" | "no"'},
    {"structured_outputs": {"grammar": 'root ::= "yes" | "no"'}},
])
def test_vllm_choice_regex_grammar(tiny, field):
    status, _, r = post_json(tiny.url + "/v1/completions", {"prompt": "Is it?", "max_tokens": 8, **field})
    assert status == 200, r
    assert r["choices"][0]["text"] in ("yes", "no")


@pytest.mark.parametrize("field", [
    {"guided_json": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
    {"guided_json": json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})},
    {"structured_outputs": {"json": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}},
])
def test_vllm_json(tiny, field):
    status, _, r = post_json(tiny.url + "/v1/completions", {"prompt": "x", "max_tokens": 40, **field})
    assert status == 200, r
    if r["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(r["choices"][0]["text"])["a"], int)


@pytest.mark.parametrize("body,needle", [
    ({"guided_json": {"type": "object"}, "guided_regex": "a"}, "at most one"),
    ({"grammar": 'root ::= "a"', "structured_outputs": {"json": {}}}, "at most one"),
    ({"structured_outputs": {"json": {}, "regex": "a"}}, "one of"),
    ({"structured_outputs": {"xml": "a"}}, "structured_outputs.xml"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_regex": "(a"}, "guided_regex"),
])
def test_vllm_field_faults(tiny, body, needle):
    status, _, r = post_json(tiny.url + "/v1/completions", {"prompt": "x", "max_tokens": 2, **body})
    assert status == 400, r
    assert needle in r["error"]["message"], r["error"]["message"]


# The forms models write, forced with a grammar (tool_choice auto).
FORMS = [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
    '[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
]


def gbnf_literal(text):
    return 'root ::= "' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("stream", [False, True])
def test_forced_forms_are_tool_calls(chat, form, stream):
    body = {"messages": ASK, "tools": [WEATHER], "max_tokens": 64, "grammar": gbnf_literal(form), "stream": stream}
    if not stream:
        status, _, r = post_json(chat.url + "/v1/chat/completions", body)
        assert status == 200, r
        choice = r["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice
        calls = choice["message"]["tool_calls"]
        assert choice["message"]["content"] is None
    else:
        status, _, raw = request(chat.url + "/v1/chat/completions", body)
        assert status == 200
        events, done = sse_events(raw)
        assert done
        deltas = [e["choices"][0]["delta"] for e in events if e.get("choices")]
        assert not any(d.get("content") for d in deltas), deltas  # not streamed as text
        calls = {}
        for d in deltas:
            for c in d.get("tool_calls") or []:
                entry = calls.setdefault(c["index"], {"function": {"name": "", "arguments": ""}})
                entry["function"]["name"] += c["function"].get("name") or ""
                entry["function"]["arguments"] += c["function"].get("arguments") or ""
        calls = [calls[k] for k in sorted(calls)]
        assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert len(calls) == 1
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("form", [
    '{"name": "get_stock", "arguments": {"sym": "X"}}',        # unknown tool
    '{"name": "get_weather", "arguments": {"unit": "celsius"}}',  # required city missing
    'The weather in Paris is sunny.',
])
def test_non_calls_stay_text(chat, form):
    status, _, r = post_json(chat.url + "/v1/chat/completions",
                             {"messages": ASK, "tools": [WEATHER], "max_tokens": 64, "grammar": gbnf_literal(form)})
    assert status == 200, r
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["choices"][0]["message"]["content"] == form
    assert not r["choices"][0]["message"].get("tool_calls")


def test_parallel_tool_calls_false_gives_one(chat):
    form = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]'
    for parallel, n in ((True, 2), (False, 1)):
        status, _, r = post_json(chat.url + "/v1/chat/completions",
                                 {"messages": ASK, "tools": [WEATHER], "max_tokens": 64, "grammar": gbnf_literal(form),
                                  "parallel_tool_calls": parallel})
        assert status == 200, r
        assert len(r["choices"][0]["message"]["tool_calls"]) == n


def qwen_model():
    return need(os.path.join(SOURCE, "models", "qwen2.5-coder-0.5b-instruct.gguf"), "Qwen2.5-Coder model")


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
def test_qwen_weather_tool_end_to_end(choice):
    s = Server(qwen_model())
    try:
        status, _, r = post_json(s.url + "/v1/chat/completions",
                                 {"messages": ASK, "tools": [WEATHER], "tool_choice": choice, "max_tokens": 80,
                                  "temperature": 0}, timeout=300)
        assert status == 200, r
        choice0 = r["choices"][0]
        assert choice0["finish_reason"] == "tool_calls", choice0
        call = choice0["message"]["tool_calls"][0]["function"]
        assert call["name"] == "get_weather"
        assert json.loads(call["arguments"])["city"].lower().startswith("paris")
    finally:
        s.stop()
