"""The Ollama API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps,
/api/version) driven by the `ollama` Python client from PyPI, unchanged,
against a folder of models (docs/models-multi.md): streaming and not,
format, options, keep_alive, think, and the clear refusals (images,
embeddings, unknown options)."""
import json
import os

import pytest

from server_util import Server, chat_model, post_json, request, tiny_model, wait_for

ollama = pytest.importorskip("ollama")

MSGS = [{"role": "user", "content": "Name three colors."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    os.symlink(tiny_model(), d / "stories.gguf")
    os.symlink(chat_model(), d / "smol.gguf")
    with Server(None, "--models-dir", str(d)) as s:
        yield s


@pytest.fixture
def client(server):
    return ollama.Client(host=server.url)


def openai_chat(server, **body):
    status, _, r = post_json(server.url + "/v1/chat/completions", body)
    assert status == 200, r
    return r


def test_chat_matches_openai_endpoint(server, client):
    r = client.chat(model="smol", messages=MSGS, options={"temperature": 0, "num_predict": 16})
    want = openai_chat(server, model="smol", messages=MSGS, temperature=0, max_tokens=16)
    assert r.message.role == "assistant"
    assert r.message.content == want["choices"][0]["message"]["content"]
    assert r.done and r.done_reason == want["choices"][0]["finish_reason"]
    assert r.eval_count == want["usage"]["completion_tokens"]
    assert r.prompt_eval_count == want["usage"]["prompt_tokens"]
    assert r.total_duration > 0 and r.eval_duration > 0 and r.model == "smol"


def test_chat_streams_ndjson(server, client):
    parts = list(client.chat(model="smol", messages=MSGS, stream=True, options={"temperature": 0, "num_predict": 12}))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    text = "".join(p.message.content for p in parts)
    whole = client.chat(model="smol", messages=MSGS, options={"temperature": 0, "num_predict": 12})
    assert text == whole.message.content and parts[-1].eval_count == whole.eval_count
    status, headers, raw = request(server.url + "/api/chat", {"model": "smol", "messages": MSGS,
                                                             "options": {"num_predict": 3}})
    assert status == 200 and headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(l) for l in raw.decode().splitlines()]
    assert len(lines) == 4 and lines[-1]["done"] is True  # streaming is the default


def test_generate_templated_and_raw(server, client):
    r = client.generate(model="smol", prompt="Name three colors.", options={"temperature": 0, "num_predict": 10})
    want = openai_chat(server, model="smol", messages=MSGS, temperature=0, max_tokens=10)
    assert r.response == want["choices"][0]["message"]["content"]  # the prompt goes through the chat template
    # a model without a chat template continues the text, like raw
    prompt = "Once upon a time there was a little girl who"
    r = client.generate(model="stories", prompt=prompt, options={"temperature": 0, "num_predict": 20})
    status, _, want = post_json(server.url + "/v1/completions", {"model": "stories", "prompt": prompt,
                                                               "temperature": 0, "max_tokens": 20})
    assert r.response == want["choices"][0]["text"] and r.eval_count == 20
    parts = list(client.generate(model="stories", prompt=prompt, stream=True,
                                 options={"temperature": 0, "num_predict": 20}))
    assert "".join(p.response for p in parts) == r.response and parts[-1].done
    r = client.generate(model="smol", prompt="<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", raw=True,
                        options={"temperature": 0, "num_predict": 5})
    assert r.response and r.eval_count == 5
    # without num_predict a raw generation may run to the end of the (128-token) context
    r = client.generate(model="stories", prompt=prompt, options={"temperature": 0, "seed": 1})
    assert r.prompt_eval_count + r.eval_count <= 128 and r.done_reason in ("stop", "length")


def test_format_json_and_schema(client):
    r = client.chat(model="smol", messages=[{"role": "user", "content": "Give a color as JSON."}], format="json",
                    options={"num_predict": 40, "temperature": 0})
    json.loads(r.message.content) if r.done_reason == "stop" else None
    schema = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "blue"]}},
              "required": ["color"]}
    r = client.chat(model="smol", messages=[{"role": "user", "content": "Pick a color."}], format=schema,
                    options={"num_predict": 40, "temperature": 0})
    assert json.loads(r.message.content)["color"] in ("red", "blue")


def test_tags_show_ps_version(server, client):
    tags = client.list()
    names = {m.model for m in tags.models}
    assert names == {"smol", "stories"}
    smol = next(m for m in tags.models if m.model == "smol")
    assert smol.details.family == "llama" and smol.details.quantization_level == "Q4_1"
    assert smol.details.parameter_size == "135M" and smol.size > 90_000_000
    show = client.show("smol")
    assert "completion" in show.capabilities and show.modelinfo["llama.context_length"] == 8192
    client.generate(model="smol", prompt="")  # an empty prompt loads the model
    ps = client.ps()
    assert "smol" in {m.model for m in ps.models}
    one = next(m for m in ps.models if m.model == "smol")
    assert one.context_length == 8192 and one.size > smol.size and one.expires_at is not None
    assert request(server.url + "/api/version")[0] == 200
    # keep_alive 0 with an empty prompt unloads, as in Ollama
    r = client.generate(model="smol", prompt="", keep_alive=0)
    assert r.done_reason == "unload"
    wait_for(lambda: "smol" not in {m.model for m in client.ps().models}, timeout=10)


def test_errors_are_clear(server, client):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="nope", messages=MSGS)
    assert e.value.status_code == 404 and "nope" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="smol", messages=[{"role": "user", "content": "What is this?", "images": [b"\x89PNG"]}])
    assert e.value.status_code == 400 and "images" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="smol", messages=MSGS, options={"mirostat": 2})
    assert e.value.status_code == 400 and "options.mirostat" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="smol", messages=MSGS, options={"num_ctx": 1 << 20})
    assert e.value.status_code == 400 and "num_ctx" in e.value.error and "8192" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="smol", messages=MSGS, think=True)
    assert e.value.status_code == 400 and "thinking" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model="smol", input="hello")
    assert e.value.status_code == 501 and "not supported" in e.value.error
    status, _, r = post_json(server.url + "/api/embeddings", {"model": "smol", "prompt": "x"})
    assert status == 501 and "error" in r
    with pytest.raises(ollama.ResponseError) as e:
        client.generate(model="smol", prompt="hi", keep_alive="later")
    assert e.value.status_code == 400 and "keep_alive" in e.value.error
    # think false is understood: no thinking asked of the template
    r = client.chat(model="smol", messages=MSGS, think=False, options={"num_predict": 2})
    assert r.done


def test_tools_through_ollama(server, client):
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                             "parameters": {"type": "object", "properties": {
                                                 "city": {"type": "string"}}, "required": ["city"]}}}
    msgs = [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"}]
    r = client.chat(model="smol", messages=msgs, tools=[tool], options={"num_predict": 60, "temperature": 0})
    want = openai_chat(server, model="smol", tools=[tool], max_tokens=60, temperature=0, messages=[
        msgs[0], {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 21 C"}])
    got = want["choices"][0]["message"]
    assert r.done and r.message.content == (got["content"] or "")
    assert [c.function.name for c in r.message.tool_calls or []] == [c["function"]["name"] for c in got.get("tool_calls") or []]
