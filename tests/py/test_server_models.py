"""`genloop serve` with Gemma 3 270M and Qwen2.5-Coder-0.5B: each model's
chat format renders plain chats, system prompts and multi-turn
conversations as the model's own template does (Qwen's
tokenizer.chat_template through the Jinja interpreter; Gemma 3's GGUF ships
none, so the built-in gemma format, which its BOS names), and a greedy chat
completion equals `genloop generate` on the expected prompt text."""
import json
import subprocess

import pytest

from conftest import fetched_model
from server_util import Server, binary, post_json

SYSTEM = {"role": "system", "content": "You answer in one short sentence."}
USER = {"role": "user", "content": "What is the capital of France?"}
REPLY = {"role": "assistant", "content": "Paris."}
USER2 = {"role": "user", "content": "And of Italy?"}

# model -> (conversation -> the prompt text the model's template gives, without a BOS token)
EXPECTED = {
    "gemma3-270m": {
        "plain": "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
        "system": "<start_of_turn>user\nYou answer in one short sentence.\n\nWhat is the capital of France?"
                  "<end_of_turn>\n<start_of_turn>model\n",
        "multi": "<start_of_turn>user\nYou answer in one short sentence.\n\nWhat is the capital of France?"
                 "<end_of_turn>\n<start_of_turn>model\nParis.<end_of_turn>\n<start_of_turn>user\nAnd of Italy?"
                 "<end_of_turn>\n<start_of_turn>model\n",
    },
    "qwen2.5-coder-0.5b": {
        # no system message: Qwen2.5's template supplies its default one
        "plain": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                 "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "system": "<|im_start|>system\nYou answer in one short sentence.<|im_end|>\n"
                  "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "multi": "<|im_start|>system\nYou answer in one short sentence.<|im_end|>\n"
                 "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>\n"
                 "<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n",
    },
}
CONVERSATIONS = {"plain": [USER], "system": [SYSTEM, USER], "multi": [SYSTEM, USER, REPLY, USER2]}


@pytest.fixture(scope="module", params=list(EXPECTED))
def model_server(request):
    path = str(fetched_model(request.param))
    with Server(path, "--n-ctx", "1024", "--alias", request.param) as s:
        yield request.param, path, s


def n_tokens(path, text):
    out = subprocess.run([binary(), "tokenize", "-m", path, "-p", text, "--ids"], capture_output=True, text=True,
                         timeout=120, check=True)
    return len(json.loads(out.stdout))


@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
def test_chat_prompt_renders_as_the_model_template(model_server, conversation):
    """The prompt the server builds has exactly the tokens of the expected
    text (BOS added once, by the tokenizer where the model wants one)."""
    name, path, server = model_server
    status, _, r = post_json(server.url + "/v1/chat/completions",
                             {"messages": CONVERSATIONS[conversation], "max_tokens": 1, "temperature": 0})
    assert status == 200, r
    assert r["usage"]["prompt_tokens"] == n_tokens(path, EXPECTED[name][conversation])


def test_greedy_chat_matches_cli(model_server):
    name, path, server = model_server
    n = 16
    status, _, r = post_json(server.url + "/v1/chat/completions",
                             {"messages": [SYSTEM, USER], "max_tokens": n, "temperature": 0})
    assert status == 200, r
    text = r["choices"][0]["message"]["content"]
    assert text.strip(), r
    out = subprocess.run([binary(), "generate", "-m", path, "-p", EXPECTED[name]["system"], "-n", str(n), "--temp",
                          "0", "-c", "1024"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cli = out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout
    assert text == cli


# ---- Qwen2.5's own tool section ---------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris and Nice?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2, "note": "\u00e9\\"\\n"}'}},
        {"id": "c2", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Nice","big":1e20,"list":[true,null,100.25]}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'},
    {"role": "tool", "tool_call_id": "c2", "content": '{"temp": 24}'},
    {"role": "assistant", "content": "Paris 21, Nice 24."},
    {"role": "user", "content": "And in Rome?"},
]


def hf_render(path, messages, tools):
    """The prompt Hugging Face's apply_chat_template gives (Jinja2 with its
    settings and tojson), from the GGUF's template, with each tool call's
    arguments parsed to a dict as vLLM passes them."""
    jinja2 = pytest.importorskip("jinja2")
    import jinja2.ext
    import jinja2.sandbox
    gguf = pytest.importorskip("gguf")
    field = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    source = bytes(field.parts[field.data[0]]).decode()
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return env.from_string(source).render(messages=msgs, tools=tools, add_generation_prompt=True,
                                          bos_token="", eos_token="<|im_end|>")


def test_qwen_tools_render_through_its_template(model_server):
    """With tools, Qwen2.5's template renders them itself: the prompt is
    Hugging Face's rendering token for token, and a greedy reply equals
    `genloop generate` on that text."""
    name, path, server = model_server
    if name != "qwen2.5-coder-0.5b":
        pytest.skip("Gemma 3's GGUF has no template with a tool section")
    want = hf_render(path, TOOL_CONVERSATION, [WEATHER])
    assert "<tools>\n" + json.dumps(WEATHER) + "\n</tools>" in want
    n = 12
    status, _, r = post_json(server.url + "/v1/chat/completions",
                             {"messages": TOOL_CONVERSATION, "tools": [WEATHER], "tool_choice": "none",
                              "max_tokens": n, "temperature": 0}, timeout=600)
    assert status == 200, r
    assert r["usage"]["prompt_tokens"] == n_tokens(path, want)
    out = subprocess.run([binary(), "generate", "-m", path, "-p", want, "-n", str(n), "--temp", "0", "-c", "1024"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cli = out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout
    assert r["choices"][0]["message"]["content"] == cli


def test_qwen_calls_a_tool_in_its_own_format(model_server):
    """A call from Qwen2.5 given its tools through its own template: the
    grammar writes its <tool_call> format (Qwen2.5-Coder-0.5B, unconstrained,
    answers with the bare JSON object instead, so auto gives text here)."""
    name, path, server = model_server
    if name != "qwen2.5-coder-0.5b":
        pytest.skip("Qwen2.5 only")
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
            "tools": [WEATHER], "tool_choice": "required", "max_tokens": 60, "temperature": 0}
    status, _, r = post_json(server.url + "/v1/chat/completions", body, timeout=600)
    assert status == 200, r
    c = r["choices"][0]
    assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None, c
    (call,) = c["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["city"] == "Paris"
