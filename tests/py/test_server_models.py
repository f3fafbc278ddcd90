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
