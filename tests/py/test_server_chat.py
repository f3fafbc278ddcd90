"""POST /v1/chat/completions and the web UI's files, end to end.

The tiny stories260K model (context 128, no chat template of its own) runs
with --chat-template chatml; SmolLM2 (GENLOOP_MODEL or models/...) brings a
real template and real end-of-turn tokens. Rendered prompts are checked by
comparing usage.prompt_tokens with /tokenize of the text the template must
produce."""
import json
import os
import subprocess
import sys

import pytest

from server_util import (Server, binary, chat_model, metrics, post_json, raw_http, request,
                         sse_events, tiny_model, wait_for)

CHATML_END = "<|im_end|>"


@pytest.fixture(scope="module")
def tiny():
    with Server(tiny_model(), "--alias", "tiny", "--chat-template", "chatml") as s:
        yield s


@pytest.fixture(scope="module")
def smol():
    with Server(chat_model(), "--alias", "smollm") as s:
        yield s
    assert "chat template: chatml (the model's own template)" in s.log


def chat(server, messages=None, **body):
    body.setdefault("messages", messages or [{"role": "user", "content": "hi"}])
    return post_json(server.url + "/v1/chat/completions", body)


def ok(server, **body):
    status, _, r = chat(server, **body)
    assert status == 200, r
    return r


def n_tokens(server, text):
    """Tokens of text as a chat prompt: special tokens parsed, no BOS added."""
    status, _, r = post_json(server.url + "/tokenize", {"content": text, "add_special": False})
    assert status == 200, r
    return len(r["tokens"])


def chatml(messages, system=None):
    out = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    for m in messages:
        out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


# ---- shape and prompt ------------------------------------------------------------------

def test_chat_shape(tiny):
    r = ok(tiny, max_tokens=8, temperature=0)
    assert r["id"].startswith("chatcmpl-") and r["object"] == "chat.completion"
    assert r["model"] == "tiny" and isinstance(r["created"], int)
    (c,) = r["choices"]
    assert c["index"] == 0 and c["logprobs"] is None
    assert c["message"]["role"] == "assistant" and isinstance(c["message"]["content"], str)
    assert c["finish_reason"] in ("stop", "length")
    u = r["usage"]
    assert u["prompt_tokens"] > 0 and 0 < u["completion_tokens"] <= 8
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    t = r["timings"]
    assert t["prompt_n"] == u["prompt_tokens"] and t["predicted_n"] == u["completion_tokens"]


def test_prompt_is_chatml(tiny):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    r = ok(tiny, messages=msgs, max_tokens=1)
    assert r["usage"]["prompt_tokens"] == n_tokens(tiny, chatml(msgs))
    # "developer" is the newer name of "system"
    dev = [{"role": "developer", "content": "Be brief."}] + msgs[1:]
    assert ok(tiny, messages=dev, max_tokens=1)["usage"]["prompt_tokens"] == r["usage"]["prompt_tokens"]


def test_content_parts(tiny):
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    r = ok(tiny, messages=[{"role": "user", "content": parts}], max_tokens=1, temperature=0)
    want = chatml([{"role": "user", "content": "Hello\nworld"}])
    assert r["usage"]["prompt_tokens"] == n_tokens(tiny, want)
    same = ok(tiny, messages=[{"role": "user", "content": "Hello\nworld"}], max_tokens=1, temperature=0)
    assert same["choices"][0]["message"] == r["choices"][0]["message"]


def test_greedy_matches_completion_of_rendered_prompt(tiny):
    msgs = [{"role": "user", "content": "Once upon a time"}]
    r = ok(tiny, messages=msgs, max_tokens=12, temperature=0)
    # the template writes BOS itself (chatml has none), so compare with ids, not text
    _, _, ids = post_json(tiny.url + "/tokenize", {"content": chatml(msgs), "add_special": False})
    status, _, c = post_json(tiny.url + "/v1/completions",
                             {"prompt": ids["tokens"], "max_tokens": 12, "temperature": 0})
    assert status == 200, c
    assert r["choices"][0]["message"]["content"] == c["choices"][0]["text"]


def test_user_stop_and_n(tiny):
    base = ok(tiny, max_tokens=30, temperature=0, seed=1)["choices"][0]["message"]["content"]
    assert len(base) > 4, base
    stop = base[2:4]
    r = ok(tiny, max_tokens=30, temperature=0, stop=[stop])
    (c,) = r["choices"]
    assert c["finish_reason"] == "stop" and stop not in c["message"]["content"]
    assert base.startswith(c["message"]["content"])
    r = ok(tiny, max_tokens=4, n=3, temperature=0.9, seed=5)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert 3 <= r["usage"]["completion_tokens"] <= 12


def test_max_completion_tokens_and_default(tiny):
    r = ok(tiny, max_completion_tokens=3, temperature=0)
    assert r["usage"]["completion_tokens"] <= 3
    # newer name wins over the older one
    r = ok(tiny, max_completion_tokens=2, max_tokens=5, temperature=0)
    assert r["usage"]["completion_tokens"] <= 2
    # neither: the reply may run to the end of the context
    r = ok(tiny, temperature=0, logit_bias={"2": -100})
    assert r["usage"]["total_tokens"] <= 128
    assert r["choices"][0]["finish_reason"] in ("stop", "length")


def test_ignore_eos(tiny):
    # the bias makes EOS (id 2) the greedy pick at every step: the reply ends
    # at once, unless ignore_eos lets it run to max_tokens
    body = dict(max_tokens=8, temperature=0, logit_bias={"2": 100})
    r = ok(tiny, **body, ignore_eos=False)
    assert r["choices"][0]["finish_reason"] == "stop" and r["usage"]["completion_tokens"] == 0
    r = ok(tiny, **body, ignore_eos=True)
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 8
    events, done = stream(tiny, **body, ignore_eos=True, stream_options={"include_usage": True})
    assert done and events[-1]["usage"]["completion_tokens"] == 8
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    r = ok(tiny, max_completion_tokens=20, temperature=0, ignore_eos=True)
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 20


def test_logprobs_shape(tiny):
    r = ok(tiny, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    (c,) = r["choices"]
    content = c["logprobs"]["content"]
    assert len(content) == r["usage"]["completion_tokens"]
    for e in content:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
        assert e["logprob"] <= 0 and all(isinstance(b, int) and 0 <= b < 256 for b in e["bytes"])
        assert len(e["top_logprobs"]) == 3
        for t in e["top_logprobs"]:
            assert set(t) == {"token", "logprob", "bytes"}
        # greedy: the chosen token is the most likely one
        assert e["top_logprobs"][0]["token"] == e["token"]
        assert abs(e["top_logprobs"][0]["logprob"] - e["logprob"]) < 1e-5
    text = b"".join(bytes(e["bytes"]) for e in content).decode("utf-8", "replace")
    if c["finish_reason"] == "length":
        assert text == c["message"]["content"]
    r = ok(tiny, max_tokens=2, logprobs=True)
    assert all(e["top_logprobs"] == [] for e in r["choices"][0]["logprobs"]["content"])


# ---- streaming -----------------------------------------------------------------------------

def stream(server, **body):
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    status, headers, raw = request(server.url + "/v1/chat/completions", dict(body, stream=True))
    assert status == 200, raw
    assert headers["Content-Type"].startswith("text/event-stream")
    return sse_events(raw)


def test_stream_chunks(tiny):
    msgs = [{"role": "user", "content": "Once upon a time"}]
    whole = ok(tiny, messages=msgs, max_tokens=10, temperature=0)
    events, done = stream(tiny, messages=msgs, max_tokens=10, temperature=0,
                          stream_options={"include_usage": True})
    assert done
    assert all(e["object"] == "chat.completion.chunk" and e["id"] == events[0]["id"] for e in events)
    first, *middle, last, usage = events
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["choices"][0]["finish_reason"] is None and first["usage"] is None
    assert all(e["choices"][0]["finish_reason"] is None for e in middle)
    text = "".join(e["choices"][0]["delta"]["content"] for e in middle)
    assert text == whole["choices"][0]["message"]["content"]
    assert last["choices"][0]["delta"] == {}
    assert last["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    # without include_usage: no usage chunk, no usage keys
    events, done = stream(tiny, messages=msgs, max_tokens=3)
    assert done and all("usage" not in e and e["choices"] for e in events)


def test_stream_logprobs_and_n(tiny):
    events, done = stream(tiny, max_tokens=5, n=2, temperature=0, logprobs=True, top_logprobs=1)
    assert done
    for index in (0, 1):
        mine = [e["choices"][0] for e in events if e["choices"][0]["index"] == index]
        assert mine[0]["delta"]["role"] == "assistant" and mine[-1]["finish_reason"]
        entries = [t for c in mine if c["logprobs"] for t in c["logprobs"]["content"]]
        assert 1 <= len(entries) <= 5
        for c in mine:
            if c["delta"].get("content"):
                assert c["logprobs"]["content"], c


def test_openai_client(tiny):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=tiny.url + "/v1", api_key="none")
    msgs = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "A cat"}]
    full = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0)
    assert full.choices[0].message.role == "assistant" and full.usage.completion_tokens > 0
    chunks = list(client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=msgs,
                                       tools=[{"type": "function", "function": {"name": "f"}}])
    assert "tools" in str(e.value)


# ---- refusals ----------------------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "f"}}  # no parameters


@pytest.mark.parametrize("body,param", [
    ({"tools": [TOOL]}, "tools[0]"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}},
     "response_format.json_schema.schema"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"frobnicate": True}, "frobnicate"),  # unknown (store is accepted: docs/api-reference.md "Request fields")
    ({"echo": True}, "echo"),
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]}, "messages[0].content[1].type"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": "a"},
                   {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}]},
     "messages[1].tool_calls[0]"),
    ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "wizard", "content": "42"}]}, "messages[0].role"),
    ({"messages": [{"content": "42"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": ["hi"]}, "messages[0]"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": None}, "messages"),
    ({"logprobs": 3}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"max_tokens": 129}, "max_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"n": 1000}, "n"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"user": 5}, "user"),
    ({"stop": 5}, "stop"),
    ({"ignore_eos": "yes"}, "ignore_eos"),
    ({"ignore_eos": 0}, "ignore_eos"),
])
def test_400_names_field(tiny, body, param):
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    status, _, r = post_json(tiny.url + "/v1/chat/completions", body)
    assert status == 400, r
    assert r["error"]["param"] == param, r
    assert r["error"]["type"] == "invalid_request_error" and r["error"]["message"]


def test_nulls_and_harmless_values_accepted(tiny):
    # what OpenAI clients send for unset fields, and an assistant message
    # echoed back from a response
    ok(tiny, max_tokens=1, tools=[], tool_choice=None, functions=None, response_format={"type": "text"},
       modalities=["text"], user="someone", seed=None,
       messages=[{"role": "user", "content": "hi", "name": "bob"},
                 {"role": "assistant", "content": "hello", "refusal": None, "tool_calls": None,
                  "function_call": None, "audio": None, "annotations": []},
                 {"role": "user", "content": "again"}])


def test_model_and_context_errors(tiny):
    status, _, r = chat(tiny, model="gpt-4o", max_tokens=1)
    assert status == 200 and r["model"] == "tiny"
    long = [{"role": "user", "content": "Once upon a time " * 40}]
    status, _, r = chat(tiny, messages=long, max_tokens=8)
    assert status == 400 and r["error"]["code"] == "context_length_exceeded", r
    assert r["error"]["param"] == "messages"
    # no max_tokens: the prompt alone must leave room for one token
    status, _, r = chat(tiny, messages=long)
    assert status == 400 and r["error"]["code"] == "context_length_exceeded", r
    status, _, r = post_json(tiny.url + "/v1/chat/completions", b"{not json")
    assert status == 400 and r["error"]["code"] == "invalid_json"
    status, headers, _ = request(tiny.url + "/v1/chat/completions")
    assert status == 405 and headers.get("Allow") == "POST"


# ---- templates that cannot be used, and the --chat-template setting ---------------------

def with_template(tmp_path, name, template):
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", "--force",
                           "--chat-template", template, tiny_model(), str(out)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"gguf_new_metadata failed: {proc.stderr[-500:]}")
    return str(out)


def test_model_template_used(tmp_path):
    tpl = ("{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}\n{% endfor %}"
           "{% if add_generation_prompt %}[ASSISTANT] {% endif %}")
    with Server(with_template(tmp_path, "custom.gguf", tpl)) as s:
        msgs = [{"role": "system", "content": "Tell"}, {"role": "user", "content": "a story"}]
        r = ok(s, messages=msgs, max_tokens=1)
        assert r["usage"]["prompt_tokens"] == n_tokens(s, "[SYSTEM] Tell\n[USER] a story\n[ASSISTANT] ")
    assert "chat template: jinja (the model's own template)" in s.log, s.log


def test_unusable_template_warns_and_chat_fails(tmp_path):
    with Server(with_template(tmp_path, "broken.gguf", "{% for m in messages %}{{ m.content ")) as s:
        status, _, r = chat(s, max_tokens=1)
        assert status == 500 and r["error"]["code"] == "chat_template_unsupported", r
        assert "chat template" in r["error"]["message"] and "--chat-template" in r["error"]["message"]
        # the rest of the server works
        status, _, r = post_json(s.url + "/v1/completions", {"prompt": "Once", "max_tokens": 1})
        assert status == 200, r
    assert "WARNING: the chat template cannot be used" in s.log, s.log


def test_raise_exception_is_400(tmp_path):
    tpl = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system "
           "messages, please') }}{% endif %}{{ m.content }}{% endfor %}")
    s = Server(with_template(tmp_path, "strict.gguf", tpl))
    try:
        status, _, r = chat(s, messages=[{"role": "system", "content": "x"}], max_tokens=1)
        assert status == 400 and "no system messages" in r["error"]["message"], r
        assert r["error"]["param"] == "messages"
        assert chat(s, max_tokens=1)[0] == 200
    finally:
        s.stop()


def test_chat_template_setting():
    proc = subprocess.run([binary(), "serve", "-m", tiny_model(), "--chat-template", "nosuch"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "chat_template" in proc.stderr and "nosuch" in proc.stderr
    s = Server(tiny_model(), "--chat-template", "jinja")  # the model has no template of its own
    try:
        status, _, r = chat(s, max_tokens=1)
        assert status == 500 and r["error"]["code"] == "chat_template_unsupported"
    finally:
        code, err = s.stop()
    assert "WARNING" in err and "no chat template" in err, err
    s = Server(tiny_model(), "--chat-template", "llama3")
    try:
        msgs = [{"role": "user", "content": "Hi"}]
        r = ok(s, messages=msgs, max_tokens=1)
        want = "<s><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" \
               "<|start_header_id|>assistant<|end_header_id|>\n\n"
        assert r["usage"]["prompt_tokens"] == n_tokens(s, want)
    finally:
        code, err = s.stop()
    assert "chat template: llama3 (built-in, as asked by --chat-template)" in err, err


# ---- the web UI's files ------------------------------------------------------------------------

@pytest.mark.parametrize("path,ctype,marker", [
    ("/", "text/html", b"<title>genloop chat</title>"),
    ("/index.html", "text/html", b"<title>genloop chat</title>"),
    ("/?utm=1", "text/html", b"<title>genloop chat</title>"),
    ("/style.css", "text/css", b"{"),
    ("/app.js", "text/javascript", b"/v1/chat/completions"),
])
def test_static_files(tiny, path, ctype, marker):
    status, headers, body = request(tiny.url + path)
    assert status == 200 and headers["Content-Type"].startswith(ctype)
    assert marker in body
    assert headers["Cache-Control"] == "no-cache"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"] == ("default-src 'self'; form-action 'none'; base-uri 'none'; "
                                                   "frame-ancestors 'none'")
    src = {"/": "index.html", "/?utm=1": "index.html"}.get(path, path.lstrip("/"))
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "server", "webui", src), "rb") as f:
        assert body == f.read()


def test_static_head_404_405(tiny):
    status, headers, body = request(tiny.url + "/", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 100
    for path in ("/nothing.js", "/webui.h", "/../server/webui/app.js", "/index.htm", "/app.js/"):
        status, _, body = request(tiny.url + path)
        assert status == 404, path
        assert json.loads(body)["error"]["code"] == "not_found"
    status, headers, _ = request(tiny.url + "/", b"{}")
    assert status == 405 and "GET" in headers.get("Allow", "")


# ---- SmolLM2: the real template, end of turn, disconnects ----------------------------------------

SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def test_smollm_prompt(smol):
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    r = ok(smol, messages=msgs, max_tokens=1)
    # the model's template adds its default system prompt when none is given
    assert r["usage"]["prompt_tokens"] == n_tokens(smol, chatml(msgs, system=SMOL_SYSTEM))
    msgs = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Bonjour"}, {"role": "user", "content": "Ça va?"}]
    r = ok(smol, messages=msgs, max_tokens=1)
    assert r["usage"]["prompt_tokens"] == n_tokens(smol, chatml(msgs))


HERMES_TOOLS = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
                "For each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n"
                "{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>")


def test_smollm_tools_in_the_generic_format(smol):
    """SmolLM2's template has no tool section: the tools go in a system
    message, calls in the assistant's text, results as user messages, in
    the Hermes format (docs/tool-calls.md), rendered by its template."""
    tool = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}
    msgs = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "4"}]
    want = chatml([
        {"role": "system", "content": "Use tools.\n\n" + HERMES_TOOLS.format(tools=json.dumps(tool, separators=(",", ":")))},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": '<tool_call>\n{"name":"add","arguments":{"a":2,"b":2}}\n</tool_call>'},
        {"role": "user", "content": "<tool_response>\n4\n</tool_response>"}])
    r = ok(smol, messages=msgs, tools=[tool], tool_choice="none", max_tokens=1)
    assert r["usage"]["prompt_tokens"] == n_tokens(smol, want)


def test_smollm_stops_at_end_of_turn(smol):
    r = ok(smol, messages=[{"role": "user", "content": "Say hi"}], temperature=0, max_tokens=300)
    (c,) = r["choices"]
    assert c["finish_reason"] == "stop" and r["usage"]["completion_tokens"] < 300
    assert c["message"]["content"].strip()
    assert CHATML_END not in c["message"]["content"] and "<|im_start|>" not in c["message"]["content"]
    events, done = stream(smol, messages=[{"role": "user", "content": "Say hi"}], temperature=0,
                          max_tokens=300)
    assert done and events[-1]["choices"][0]["finish_reason"] == "stop"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert text == c["message"]["content"]


def test_smollm_openai_stream(smol):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=smol.url + "/v1", api_key="none")
    msgs = [{"role": "user", "content": "Name three colors."}]
    full = client.chat.completions.create(model="smollm", messages=msgs, max_tokens=40, temperature=0)
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="smollm", messages=msgs, max_tokens=40, temperature=0, stream=True) if c.choices]
    assert "".join(pieces) == full.choices[0].message.content
    assert len([p for p in pieces if p]) > 3  # it arrived in pieces


def _cancelled(url):
    return metrics(url).get('genloop_requests_total{finish_reason="cancelled"}', 0)


def _long_request(server, stream):
    """Bytes of a chat request that runs for long: end-of-text tokens are banned."""
    _, _, eog = post_json(server.url + "/tokenize", {"content": "<|endoftext|><|im_end|>", "add_special": False})
    body = json.dumps({"messages": [{"role": "user", "content": "Tell me a long story."}],
                       "max_tokens": 4000, "temperature": 0.8, "stream": stream,
                       "logit_bias": {str(t): -100 for t in eog["tokens"]}}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


@pytest.mark.parametrize("stream_mode", [True, False])
def test_disconnect_cancels(smol, stream_mode):
    before = _cancelled(smol.url)
    req = _long_request(smol, stream_mode)
    if stream_mode:
        sock, got = raw_http(smol.port, req, read_until=b'"content":"')
    else:
        sock, got = raw_http(smol.port, req, read_until=b"")  # returns at once
        assert wait_for(lambda: metrics(smol.url).get("genloop_requests_running", 0) == 1, timeout=30)
    sock.close()
    assert wait_for(lambda: _cancelled(smol.url) == before + 1, timeout=30)
    assert wait_for(lambda: metrics(smol.url)["genloop_requests_running"] == 0, timeout=30)
    assert ok(smol, max_tokens=2)["choices"]
