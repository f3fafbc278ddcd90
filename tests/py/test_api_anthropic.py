"""/v1/messages and /v1/messages/count_tokens (Anthropic's Messages API)
through the `anthropic` SDK, against SmolLM2: a translation onto chat
completions, so at temperature 0 a message says exactly what the same
conversation says through /v1/chat/completions. Text, streaming (the
event sequence with ping), tool use with a tool_result round trip,
tool_choice, stop_sequences, count_tokens, x-api-key, errors in
Anthropic's shape, thinking."""
import json

import pytest

from server_util import Server, chat_model, post_json, request, tiny_model

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                            "required": ["city"]}}


@pytest.fixture(scope="module")
def smol():
    with Server(chat_model(), "--alias", "smol") as s:
        yield s


T0 = {"temperature": 0}  # the SDK sends samplers through extra_body


def client(server, key="unused"):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)


def chat_text(server, messages, **kw):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    r = c.chat.completions.create(model="smol", messages=messages, extra_body=T0, **kw)
    return r.choices[0].message.content


def test_text_is_the_chat_answer(smol):
    m = client(smol).messages.create(model="smol", max_tokens=12, extra_body=T0, system="Be brief.",
                                     messages=[{"role": "user", "content": "Name a color."}])
    assert m.type == "message" and m.role == "assistant" and m.id
    assert m.content[0].type == "text" and m.stop_reason in ("end_turn", "max_tokens")
    assert m.content[0].text == chat_text(smol, [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Name a color."}], max_tokens=12)
    u = m.usage
    assert 0 < m.usage.output_tokens <= 12 and u.input_tokens + u.cache_read_input_tokens > 0
    # blocks and a system block list give the same
    m2 = client(smol).messages.create(
        model="smol", max_tokens=12, extra_body=T0, system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Name a color."}]}])
    assert m2.content[0].text == m.content[0].text


def test_stream_event_sequence(smol):
    c = client(smol)
    kw = dict(model="smol", max_tokens=16, extra_body=T0,
              messages=[{"role": "user", "content": "Count to five."}])
    whole = c.messages.create(**kw)
    with c.messages.stream(**kw) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    # the raw events (the SDK drops ping): "event: NAME" matches the data's type
    body = dict(kw, stream=True, temperature=0)
    del body["extra_body"]
    code, headers, raw = request(smol.url + "/v1/messages", body)
    assert code == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = []
    for block in raw.decode().strip().split("\n\n"):
        name, data = block.split("\n")
        events.append(json.loads(data[len("data: "):]))
        assert name == "event: " + events[-1]["type"], block
    types = [e["type"] for e in events]
    assert types[:3] == ["message_start", "ping", "content_block_start"], types
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"], types
    assert set(types[3:-3]) == {"content_block_delta"}
    assert events[0]["message"]["content"] == [] and events[0]["message"]["usage"]["input_tokens"] > 0
    assert events[-2]["delta"]["stop_reason"] == whole.stop_reason


def test_tool_use_round_trip(smol):
    c = client(smol)
    first = c.messages.create(model="smol", max_tokens=60, extra_body=T0, tools=[WEATHER],
                              tool_choice={"type": "any"},
                              messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    uses = [b for b in first.content if b.type == "tool_use"]
    assert uses and uses[0].name == "get_weather" and uses[0].input["city"] in ("Paris", "Rome")
    if first.stop_reason != "max_tokens":
        assert first.stop_reason == "tool_use"
    use = uses[0]
    convo = [{"role": "user", "content": "What is the weather in Paris?"},
             {"role": "assistant", "content": [b.model_dump() for b in first.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                           "content": "Sunny, 24 C"}]}]
    second = c.messages.create(model="smol", max_tokens=20, extra_body=T0, tools=[WEATHER],
                               tool_choice={"type": "none"}, messages=convo)
    assert second.content[0].type == "text" and second.content[0].text
    chat_tools = [{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                    "parameters": WEATHER["input_schema"]}}]
    calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
             for b in uses]
    results = [{"role": "tool", "tool_call_id": use.id, "content": "Sunny, 24 C"}]
    expect = chat_text(smol, [{"role": "user", "content": "What is the weather in Paris?"},
                              {"role": "assistant", "content": None, "tool_calls": calls}] + results,
                       tools=chat_tools, tool_choice="none", max_tokens=20)
    assert second.content[0].text == expect


def test_tool_use_streams_input_json(smol):
    c = client(smol)
    with c.messages.stream(model="smol", max_tokens=60, extra_body=T0, tools=[WEATHER],
                           tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                           messages=[{"role": "user", "content": "Weather in Rome?"}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input["city"] in ("Paris", "Rome")
    assert final.stop_reason == "tool_use" and len(final.content) == 1
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert deltas and all(d.delta.type == "input_json_delta" for d in deltas)


def test_stop_sequences_and_samplers(smol):
    c = client(smol)
    m = c.messages.create(model="smol", max_tokens=30, extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 20},
                          stop_sequences=[" "], messages=[{"role": "user", "content": "Tell me a story."}])
    assert " " not in m.content[0].text.strip() and m.stop_reason in ("stop_sequence", "end_turn", "max_tokens")
    # a stop sequence that ends the text is reported as such, streamed or not
    kw = dict(model="smol", max_tokens=40, extra_body={"temperature": 0}, stop_sequences=["zzz", "e"],
              messages=[{"role": "user", "content": "Tell me a story."}])
    m = c.messages.create(**kw)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "e", m
    with c.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "e"
    assert final.content[0].text == m.content[0].text


def test_count_tokens(smol):
    c = client(smol)
    kw = dict(model="smol", system="Be brief.", messages=[{"role": "user", "content": "Name a fruit."}])
    n = c.messages.count_tokens(**kw).input_tokens
    m = c.messages.create(max_tokens=1, **kw)
    assert n > 0 and n == m.usage.input_tokens + m.usage.cache_read_input_tokens
    with_tools = c.messages.count_tokens(tools=[WEATHER], **kw).input_tokens
    assert with_tools > n
    code, _, r = post_json(smol.url + "/v1/messages/count_tokens", {"messages": "x"})
    assert code == 400 and r["type"] == "error" and r["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({"max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0]"),
    ({"max_tokens": 2, "messages": [{"role": "system", "content": "hi"}]}, "messages[0]"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], "frobnicate": 1}, "frobnicate"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "maybe"}},
     "tool_choice"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], "mcp_servers": [{"url": "x"}]},
     "mcp_servers"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "sometimes"}},
     "thinking.type"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], "stop_sequences": "x"},
     "stop_sequences"),
])
def test_errors_in_anthropic_shape(smol, body, param):
    code, _, r = post_json(smol.url + "/v1/messages", body)
    assert code == 400 and r["type"] == "error", r
    assert r["error"]["type"] == "invalid_request_error" and r["error"]["param"] == param, r
    assert r["error"]["message"]


def test_errors_through_the_sdk(smol):
    c = client(smol)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model="smol", max_tokens=0, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in e.value.body["error"]["message"]
    code, _, body = request(smol.url + "/v1/messages", b"{not json")
    assert code == 400 and json.loads(body)["type"] == "error"


def test_x_api_key():
    with Server(tiny_model(), "--api-key", "sekret", "--chat-template", "chatml") as s:
        m = client(s, "sekret").messages.create(model="x", max_tokens=2,
                                               messages=[{"role": "user", "content": "hi"}])
        assert m.usage.output_tokens == 2
        with pytest.raises(anthropic.AuthenticationError) as e:
            client(s, "wrong").messages.create(model="x", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
        assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
        # the same key check for every endpoint, either header
        code, _, _ = post_json(s.url + "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
                               headers={"x-api-key": "sekret"})
        assert code == 200
        code, _, _ = post_json(s.url + "/v1/messages/count_tokens",
                               {"messages": [{"role": "user", "content": "hi"}]},
                               headers={"Authorization": "Bearer sekret"})
        assert code == 200
        code, _, r = post_json(s.url + "/v1/messages/count_tokens", {"messages": []})
        assert code == 401 and r["error"]["type"] == "authentication_error"


def test_thinking(smol):
    """thinking: disabled renders the template without thinking; enabled asks
    for chat's thinking budget and returns the separated thinking as a thinking
    block. A grammar forces a think block so the separation is checked on real
    server output."""
    c = client(smol)
    m = c.messages.create(model="smol", max_tokens=4, thinking={"type": "disabled"},
                          messages=[{"role": "user", "content": "hi"}])
    assert m.content[0].type == "text"
    grammar = 'root ::= "<think>a b c</think>The answer"'
    kw = dict(model="smol", max_tokens=40, thinking={"type": "enabled", "budget_tokens": 1024},
              messages=[{"role": "user", "content": "hi"}],
              extra_body={"grammar": grammar, "reasoning_format": "deepseek"})
    m = c.messages.create(**kw)
    assert [b.type for b in m.content] == ["thinking", "text"], m.content
    assert m.content[0].thinking.strip() == "a b c" and m.content[1].text.strip() == "The answer"
    with c.messages.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert final.content[0].thinking == m.content[0].thinking and final.content[1].text == m.content[1].text
    assert any(e.type == "content_block_delta" and e.delta.type == "thinking_delta" for e in events)
