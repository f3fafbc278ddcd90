"""The README's quickstart, run as written, so it cannot rot.

Every fenced block of the README's "Quickstart" section whose language is
`bash` or `python` runs against a real `genloop serve` (SmolLM2, the default
model) on a free port: `bash` blocks (curl) through bash, `python` blocks
(the openai SDK, LangChain) in one interpreter, in order, sharing their
names as a reader pasting them into one session would. Blocks marked `sh`
or `text` are shown, not run. The only change made to a block is the port:
127.0.0.1:8080 becomes the test server's."""
import json
import os
import re
import subprocess
import sys

import pytest

from server_util import SOURCE, Server, chat_model

README = os.path.join(SOURCE, "README.md")
DOC_URL = "http://127.0.0.1:8080"
RUNNABLE = ("bash", "python")


def quickstart_blocks():
    """[(language, code)] of the runnable fenced blocks under "## Quickstart"."""
    text = open(README, encoding="utf-8").read()
    assert "\n## Quickstart\n" in text, "the README has no Quickstart section"
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", section, re.S | re.M)
    return [(lang, code) for lang, code in blocks if lang in RUNNABLE]


BLOCKS = quickstart_blocks()
CURL = [code for lang, code in BLOCKS if lang == "bash"]
PYTHON = [code for lang, code in BLOCKS if lang == "python"]


def test_quickstart_has_its_examples():
    """The markers did not drift: curl and Python examples of chat, completion,
    streaming, structured output and a tool call are all runnable blocks."""
    assert len(CURL) >= 5 and len(PYTHON) >= 3, [lang for lang, _ in BLOCKS]
    for code in CURL:
        assert DOC_URL in code, f"a curl block that does not talk to the server:\n{code}"
    curl, python = "\n".join(CURL), "\n".join(PYTHON)
    for needle in ("/v1/chat/completions", "/v1/completions", '"stream": true', "json_schema", '"tools"'):
        assert needle in curl, f"no curl example with {needle}"
    for needle in ("chat.completions.create", "completions.create", "stream=True", "json_schema",
                   "tool_calls", "langchain_openai"):
        assert needle in python, f"no Python example with {needle}"


@pytest.fixture(scope="module")
def server():
    with Server(chat_model()) as s:
        yield s


def local(code, server):
    return code.replace(DOC_URL, server.url)


def check_chat_or_completion(reply, code):
    assert "error" not in reply, reply
    choice = reply["choices"][0]
    if "message" not in choice:
        assert choice["text"], reply
        return
    message = choice["message"]
    if '"tools"' in code:
        assert choice["finish_reason"] == "tool_calls", reply
        call = message["tool_calls"][0]["function"]
        assert call["name"] == "get_weather" and "city" in json.loads(call["arguments"]), reply
    elif "json_schema" in code:
        assert choice["finish_reason"] == "stop", reply
        assert set(json.loads(message["content"])) == {"city", "country"}, reply
    else:
        assert message["content"], reply


def check_stream(out):
    events = [line[len("data: "):] for line in out.splitlines() if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", out[-500:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("error" not in c for c in chunks), out[-500:]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip(), out[-500:]


@pytest.mark.parametrize("index", range(len(CURL)))
def test_curl_block(server, index):
    code = CURL[index]
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", local(code, server)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{code}\nexit {proc.returncode}: {proc.stderr}"
    if '"stream": true' in code:
        check_stream(proc.stdout)
        return
    reply = json.loads(proc.stdout)
    if code.rstrip().endswith("/v1/models"):
        assert reply["data"] and reply["data"][0]["context_length"] > 0, reply
    else:
        check_chat_or_completion(reply, code)


DRIVER = """
import json, sys
g = {"__name__": "__main__"}
for i, code in enumerate(json.load(sys.stdin)):
    print(f"\\n@@block {i}@@", flush=True)
    exec(compile(code, f"<README quickstart python block {i}>", "exec"), g)
"""


def test_python_blocks(server):
    """The openai SDK and LangChain blocks, in order, in one interpreter (this
    test's own: the project's .venv under scripts/test)."""
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps([local(c, server) for c in PYTHON]),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    outputs = re.split(r"\n?@@block \d+@@\n", proc.stdout)[1:]
    assert len(outputs) == len(PYTHON), proc.stdout
    for code, out in zip(PYTHON, outputs):
        assert out.strip(), f"a block printed nothing:\n{code}"
