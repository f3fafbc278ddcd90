"""/v1/responses (OpenAI's Responses API) through the openai SDK's
client.responses, against SmolLM2: a translation onto chat completions, so
at temperature 0 a response says exactly what the same conversation says
through /v1/chat/completions. Plain, instructions, streamed (the Responses
event sequence), function tools with a function_call_output round trip,
previous_response_id (and store: false), GET, text.format, errors."""
import json

import pytest

from server_util import Server, chat_model, post_json, request

openai = pytest.importorskip("openai")

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                          "required": ["city"]}}


@pytest.fixture(scope="module")
def smol():
    with Server(chat_model(), "--alias", "smol") as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def chat_text(server, messages, **kw):
    r = client(server).chat.completions.create(model="smol", messages=messages, temperature=0, **kw)
    return r.choices[0].message.content


def test_plain_input_is_the_chat_answer(smol):
    c = client(smol)
    r = c.responses.create(model="smol", input="Name a color.", max_output_tokens=12, temperature=0)
    assert r.object == "response" and r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output_text and r.output_text == chat_text(smol, [{"role": "user", "content": "Name a color."}],
                                                        max_tokens=12)
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 12
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0 and u.output_tokens_details.reasoning_tokens == 0
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.model == "SmolLM2-135M-Instruct.Q4_1.gguf" or r.model


def test_instructions_and_items(smol):
    c = client(smol)
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
             {"role": "user", "content": "Name a fruit."}]
    r = c.responses.create(model="smol", instructions="Answer in one word.", input=items,
                           max_output_tokens=10, temperature=0)
    expect = chat_text(smol, [{"role": "system", "content": "Answer in one word."},
                              {"role": "user", "content": "Hi."},
                              {"role": "assistant", "content": "Hello!"},
                              {"role": "user", "content": "Name a fruit."}], max_tokens=10)
    assert r.output_text == expect and r.instructions == "Answer in one word."


def test_stream_event_sequence(smol):
    c = client(smol)
    whole = c.responses.create(model="smol", input="Count to five.", max_output_tokens=16, temperature=0)
    events = list(c.responses.create(model="smol", input="Count to five.", max_output_tokens=16,
                                     temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"], types
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done",
                          "response.completed" if whole.status == "completed" else "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text
    assert events[-4].text == deltas and events[-1].response.output_text == deltas
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens
    assert events[0].response.status == "in_progress" and events[0].response.output == []


def test_function_call_and_result_round_trip(smol):
    c = client(smol)
    first = c.responses.create(model="smol", input="What is the weather in Paris?", tools=[WEATHER],
                               tool_choice="required", max_output_tokens=60, temperature=0)
    calls = [o for o in first.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].status == "completed", first.output
    assert json.loads(calls[0].arguments)["city"] in ("Paris", "Rome")
    call = calls[0]
    follow = [{"role": "user", "content": "What is the weather in Paris?"},
              {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
              {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 C"}]
    second = c.responses.create(model="smol", input=follow, tools=[WEATHER], tool_choice="none",
                                max_output_tokens=20, temperature=0)
    assert second.output[0].type == "message" and second.output_text
    # the same conversation through chat completions says the same
    chat_tools = [{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}]
    expect = chat_text(smol, [{"role": "user", "content": "What is the weather in Paris?"},
                              {"role": "assistant", "content": None, "tool_calls": [
                                  {"id": call.call_id, "type": "function",
                                   "function": {"name": call.name, "arguments": call.arguments}}]},
                              {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 24 C"}],
                       tools=chat_tools, tool_choice="none", max_tokens=20)
    assert second.output_text == expect
    # a named function as tool_choice
    named = c.responses.create(model="smol", input="Weather?", tools=[WEATHER], max_output_tokens=60,
                               tool_choice={"type": "function", "name": "get_weather"}, temperature=0)
    assert named.output[0].type == "function_call"


def test_function_call_streams_its_arguments(smol):
    c = client(smol)
    events = list(c.responses.create(model="smol", input="Weather in Rome?", tools=[WEATHER],
                                     tool_choice="required", parallel_tool_calls=False,
                                     max_output_tokens=60, temperature=0, stream=True))
    added = [e for e in events if e.type == "response.output_item.added"]
    assert added[0].item.type == "function_call" and added[0].item.name == "get_weather"
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done[0].arguments == args and json.loads(args)["city"] in ("Paris", "Rome")
    final = events[-1].response
    assert final.output[0].type == "function_call" and final.output[0].arguments == args


def test_previous_response_id_and_store(smol):
    c = client(smol)
    r1 = c.responses.create(model="smol", input="My name is Bob.", max_output_tokens=10, temperature=0)
    r2 = c.responses.create(model="smol", previous_response_id=r1.id, input="What is my name?",
                            max_output_tokens=10, temperature=0)
    expect = chat_text(smol, [{"role": "user", "content": "My name is Bob."},
                              {"role": "assistant", "content": r1.output_text},
                              {"role": "user", "content": "What is my name?"}], max_tokens=10)
    assert r2.output_text == expect and r2.previous_response_id == r1.id
    # chains: the third sees both turns
    r3 = c.responses.create(model="smol", previous_response_id=r2.id, input="Thanks.", max_output_tokens=4)
    assert r3.usage.input_tokens > r2.usage.input_tokens
    assert c.responses.retrieve(r1.id).output_text == r1.output_text
    # store: false keeps nothing
    gone = c.responses.create(model="smol", input="hi", store=False, max_output_tokens=2)
    assert gone.store is False
    with pytest.raises(openai.NotFoundError) as e:
        c.responses.create(model="smol", previous_response_id=gone.id, input="again", max_output_tokens=2)
    assert e.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(gone.id)
    # delete: gone from the store, then a 404
    c.responses.delete(r3.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r3.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.delete(r3.id)
    assert c.responses.retrieve(r2.id).id == r2.id


def test_text_format_json_schema(smol):
    c = client(smol)
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"type": "integer"}},
              "required": ["answer", "n"], "additionalProperties": False}
    r = c.responses.create(model="smol", input="Is the sky blue? Give a number too.", max_output_tokens=40,
                           text={"format": {"type": "json_schema", "name": "reply", "schema": schema,
                                            "strict": True}})
    value = json.loads(r.output_text)
    assert value["answer"] in ("yes", "no") and isinstance(value["n"], int)
    assert r.text.format.type == "json_schema"
    r = c.responses.create(model="smol", input="JSON please", max_output_tokens=30,
                           text={"format": {"type": "json_object"}})
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict)


def test_reasoning_effort_passes_to_the_template(smol):
    c = client(smol)
    r = c.responses.create(model="smol", input="hi", max_output_tokens=2,
                           reasoning={"effort": "low", "summary": "auto"})
    assert r.reasoning.effort == "low"


@pytest.mark.parametrize("body, param", [
    ({"input": "hi", "n": 2}, "n"),
    ({"input": "hi", "frobnicate": 1}, "frobnicate"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "truncation": "auto"}, "truncation"),
    ({"input": "hi", "include": ["reasoning.encrypted_content"]}, "include"),
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "hi", "reasoning": {"foo": 1}}, "reasoning.foo"),
    ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"input": "hi", "typical_p": 0.5}, "typical_p"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    ({}, "input"),
])
def test_errors_name_the_field(smol, body, param):
    code, _, r = post_json(smol.url + "/v1/responses", {"model": "smol", "max_output_tokens": 2, **body})
    assert code == 400 and r["error"]["param"] == param, r
    assert r["error"]["type"] == "invalid_request_error" and r["error"]["message"]


def test_errors_through_the_sdk(smol):
    c = client(smol)
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="smol", input="hi", max_output_tokens=0)
    assert e.value.body["param"] == "max_output_tokens"
    assert "'max_output_tokens' must be at least 1" in e.value.body["message"]
    code, _, body = request(smol.url + "/v1/responses/resp-nope")
    assert code == 404 and json.loads(body)["error"]["code"] == "not_found"
