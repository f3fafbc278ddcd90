"""Reasoning models: the thinking apart from the answer (docs/reasoning.md).

A random-weight qwen3 model from scripts/make_tiny_gguf.py carries a real
Qwen3 chat template (tests/py/data/qwen3_chat_template.jinja) and Qwen3's
added tokens (<think>, </think>, <|im_start|>, <|im_end|>, <tool_call>);
GBNF grammars force its replies to open with a thinking block, so the
splitter, the budget and the streaming are checked on real server output.
"""
import json
from pathlib import Path

import pytest

from server_util import Server, post_json, request, sse_events, tiny_model

TEMPLATE = Path(__file__).resolve().parent / "data" / "qwen3_chat_template.jinja"
FORCED = 'root ::= "<think>" " a b c" "</think>" "The answer"'
FREE_THINKING = 'root ::= "<think>" [a-z ]* "</think>" "The answer"'
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory, make_tiny_gguf):
    path = tmp_path_factory.mktemp("reasoning") / "qwen3-think.gguf"
    make_tiny_gguf.main([str(path), "--arch", "qwen3", "--type", "Q8_0", "--output-type", "Q8_0", "--dim", "64",
                         "--n-heads", "4", "--n-kv-heads", "2", "--ff", "128", "--vocab", "400", "--ctx", "2048",
                         "--chat-template", str(TEMPLATE), "--control-token", "<|im_start|>",
                         "--control-token", "<|im_end|>", "--user-token", "<think>", "--user-token", "</think>",
                         "--user-token", "<tool_call>", "--user-token", "</tool_call>", "--eos-token", "<|im_end|>"])
    return path


@pytest.fixture(scope="module")
def server(qwen3):
    with Server(str(qwen3), "--spec", "off") as s:
        yield s


def chat(server, **body):
    body.setdefault("messages", MSG)
    body.setdefault("max_tokens", 40)
    status, _, reply = post_json(server.url + "/v1/chat/completions", body)
    assert status == 200, reply
    return reply


def tokens_of(reply):
    return [t["token"] for t in reply["choices"][0]["logprobs"]["content"]]


def through_close(toks):
    """Tokens up to the one that completes "</think>" (the model may spell it in bytes)."""
    text = ""
    for i, t in enumerate(toks):
        text += t
        if "</think>" in text:
            return i + 1
    return len(toks)


def inside_block(toks):
    """The tokens between "<think>" and the first piece of its closing text."""
    end = next((i for i, t in enumerate(toks) if "<" in t and i > 0), len(toks))
    return toks[1:end]


def test_markers_from_the_template(server):
    assert "thinking block: <think> ... </think>" in "".join(server._err)


def test_thinking_separated(server):
    r = chat(server, grammar=FORCED, logprobs=True)
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"] == "a b c"
    assert msg["content"] == "The answer"
    toks = tokens_of(r)
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == through_close(toks)


def test_thinking_streamed(server):
    status, _, raw = request(server.url + "/v1/chat/completions",
                             {"messages": MSG, "max_tokens": 40, "grammar": FORCED, "stream": True,
                              "stream_options": {"include_usage": True}})
    assert status == 200
    events, done = sse_events(raw)
    assert done
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert (reasoning, content) == ("a b c", "The answer")
    first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all(not d.get("reasoning_content") for d in deltas[first_content:])
    assert events[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0


def test_openai_sdk_reads_reasoning_content(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    r = client.chat.completions.create(model="m", messages=MSG, max_tokens=40, extra_body={"grammar": FORCED})
    assert r.choices[0].message.reasoning_content == "a b c"
    assert r.choices[0].message.content == "The answer"
    assert r.usage.completion_tokens_details.reasoning_tokens > 0
    reasoning, content = [], []
    for chunk in client.chat.completions.create(model="m", messages=MSG, max_tokens=40, stream=True,
                                                extra_body={"grammar": FORCED}):
        if chunk.choices:
            reasoning.append(getattr(chunk.choices[0].delta, "reasoning_content", None) or "")
            content.append(chunk.choices[0].delta.content or "")
    assert ("".join(reasoning), "".join(content)) == ("a b c", "The answer")


def test_reasoning_format_none_and_deepseek(server):
    r = chat(server, grammar=FORCED, reasoning_format="none")
    assert r["choices"][0]["message"]["content"] == "<think> a b c</think>The answer"
    assert "reasoning_content" not in r["choices"][0]["message"]
    assert "completion_tokens_details" not in r["usage"]
    r = chat(server, grammar=FORCED, reasoning_format="deepseek")
    assert r["choices"][0]["message"]["reasoning_content"] == "a b c"
    status, _, err = post_json(server.url + "/v1/chat/completions",
                               {"messages": MSG, "reasoning_format": "raw"})
    assert status == 400 and err["error"]["param"] == "reasoning_format"


def test_deepseek_format_on_a_model_without_markers():
    with Server(tiny_model(), "--spec", "off") as s:
        body = {"messages": MSG, "max_tokens": 40, "grammar": FORCED}
        status, _, r = post_json(s.url + "/v1/chat/completions", body)
        assert status == 200 and r["choices"][0]["message"]["content"].startswith("<think>")
        status, _, r = post_json(s.url + "/v1/chat/completions", {**body, "reasoning_format": "deepseek"})
        assert status == 200
        assert r["choices"][0]["message"]["reasoning_content"] == "a b c"
        assert r["choices"][0]["message"]["content"] == "The answer"
        status, _, r = post_json(s.url + "/v1/chat/completions", {**body, "thinking_budget_tokens": 2})
        assert status == 400 and r["error"]["param"] == "thinking_budget_tokens"


@pytest.mark.parametrize("field", ["thinking_budget_tokens", "reasoning_budget_tokens"])
def test_budget_cuts_thinking_at_exactly_n_tokens(server, field):
    free = tokens_of(chat(server, grammar=FREE_THINKING, temperature=0, max_tokens=120, logprobs=True))
    inside = inside_block(free)
    assert len(inside) >= 4, free
    for n in (0, 1, 3):
        r = chat(server, grammar=FREE_THINKING, temperature=0, max_tokens=120, logprobs=True, **{field: n})
        toks = tokens_of(r)
        assert toks[:n + 2] == ["<think>", *inside[:n], "</think>"], (n, toks)
        assert r["choices"][0]["message"]["content"] == "The answer"
        assert r["choices"][0]["message"].get("reasoning_content", "") == "".join(inside[:n]).strip()
        assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == n + 2


def test_budget_when_streaming(server):
    status, _, raw = request(server.url + "/v1/chat/completions",
                             {"messages": MSG, "max_tokens": 120, "grammar": FREE_THINKING, "temperature": 0,
                              "stream": True, "stream_options": {"include_usage": True},
                              "thinking_budget_tokens": 2})
    events, _ = sse_events(raw)
    assert events[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 4
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert content == "The answer"


def test_server_budget_default(qwen3):
    with Server(str(qwen3), "--spec", "off", "--reasoning-budget", "1") as s:
        status, _, r = post_json(s.url + "/v1/chat/completions",
                                 {"messages": MSG, "max_tokens": 80, "grammar": FREE_THINKING, "temperature": 0})
        assert status == 200
        assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 3
        status, _, r = post_json(s.url + "/v1/chat/completions",
                                 {"messages": MSG, "max_tokens": 80, "grammar": FREE_THINKING, "temperature": 0,
                                  "thinking_budget_tokens": 2})
        assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 4


def think_bias(server):
    status, _, r = post_json(server.url + "/tokenize", {"content": "<think>"})
    assert status == 200
    return {str(r["tokens"][-1]): 100}  # after the BOS


def test_schema_applies_after_the_thinking(server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    r = chat(server, max_tokens=80, logit_bias=think_bias(server), thinking_budget_tokens=3, temperature=0,
             response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    msg = r["choices"][0]["message"]
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5
    assert msg["reasoning_content"]
    assert isinstance(json.loads(msg["content"])["ok"], bool)


def test_tool_call_after_the_thinking(server):
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["utc"]}}, "required": ["zone"],
        "additionalProperties": False}}}]
    r = chat(server, max_tokens=400, logit_bias=think_bias(server), thinking_budget_tokens=2, temperature=0,
             tools=tools, tool_choice="required")
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["reasoning_content"]
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_time" and json.loads(call["arguments"]) == {"zone": "utc"}


def test_enable_thinking_false_and_reasoning_effort_none(server):
    def prompt_tokens(**kw):
        return chat(server, max_tokens=1, **kw)["usage"]["prompt_tokens"]
    plain = prompt_tokens()
    off = prompt_tokens(chat_template_kwargs={"enable_thinking": False})
    assert off > plain  # Qwen3's template writes an empty <think></think> block
    assert prompt_tokens(reasoning_effort="none") == off
    assert prompt_tokens(reasoning_effort="high") == plain


def test_reasoning_content_sent_back(server):
    def prompt_tokens(messages):
        return chat(server, messages=messages, max_tokens=1, add_generation_prompt=False)["usage"]["prompt_tokens"]
    turn = {"role": "assistant", "content": "The answer"}
    with_thinking = {**turn, "reasoning_content": "a b c d e f"}
    # the turn after the last user message shows its thinking, as Qwen3's template does
    assert prompt_tokens(MSG + [with_thinking]) > prompt_tokens(MSG + [turn])
    # an earlier turn's thinking is dropped
    later = [{"role": "user", "content": "more"}]
    assert prompt_tokens(MSG + [with_thinking] + later) == prompt_tokens(MSG + [turn] + later)
    status, _, err = post_json(server.url + "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "x", "reasoning_content": "r"}]})
    assert status == 400 and err["error"]["param"] == "messages[0].reasoning_content"
