"""`genloop serve` with SmolLM2-135M (a real byte-level BPE vocabulary and
a long context): CLI equality, the openai client, and client disconnects
cancelling work."""
import json
import socket
import subprocess

import pytest

from server_util import Server, binary, chat_model, metrics, post_json, raw_http, wait_for

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def server():
    with Server(chat_model(), "--alias", "smollm") as s:
        yield s


def test_greedy_matches_cli(server):
    n = 24
    status, _, r = post_json(server.url + "/v1/completions",
                             {"prompt": PROMPT, "max_tokens": n, "temperature": 0})
    assert status == 200, r
    out = subprocess.run([binary(), "generate", "-m", chat_model(), "-p", PROMPT, "-n", str(n),
                          "--temp", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    cli = out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout
    assert r["choices"][0]["text"] == cli


def test_openai_stream_utf8_and_special_tokens(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    prompt = "<|im_start|>user\nSay hello in Japanese.<|im_end|>\n<|im_start|>assistant\n"
    full = client.completions.create(model="smollm", prompt=prompt, max_tokens=20, temperature=0)
    pieces = [c.choices[0].text for c in client.completions.create(
        model="smollm", prompt=prompt, max_tokens=20, temperature=0, stream=True) if c.choices]
    assert "".join(pieces) == full.choices[0].text
    assert "<|im_start|>" not in full.choices[0].text


def _cancelled(url):
    return metrics(url).get('genloop_requests_total{finish_reason="cancelled"}', 0)


def _start(server, stream):
    """A request that runs for long: end-of-text tokens are banned."""
    status, _, eog = post_json(server.url + "/tokenize",
                               {"content": "<|endoftext|><|im_end|>", "add_special": False})
    bias = {str(t): -100 for t in eog["tokens"]}
    body = json.dumps({"prompt": PROMPT, "max_tokens": 4000, "temperature": 0.8, "stream": stream,
                       "logit_bias": bias}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
    return req


def test_disconnect_mid_stream_cancels(server):
    before = _cancelled(server.url)
    sock, got = raw_http(server.port, _start(server, True), read_until=b"data: ")
    while got.count(b"data: ") < 3:
        got += sock.recv(65536)
    sock.close()
    assert wait_for(lambda: _cancelled(server.url) == before + 1, timeout=30)
    assert wait_for(lambda: metrics(server.url)["genloop_requests_running"] == 0, timeout=30)


def test_disconnect_non_stream_cancels(server):
    before = _cancelled(server.url)
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(_start(server, False))
    assert wait_for(lambda: metrics(server.url)["genloop_requests_running"] == 1, timeout=30)
    sock.close()
    assert wait_for(lambda: _cancelled(server.url) == before + 1, timeout=30)
    assert wait_for(lambda: metrics(server.url)["genloop_requests_running"] == 0, timeout=30)
    # the server is fine afterwards
    status, _, r = post_json(server.url + "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    assert status == 200
