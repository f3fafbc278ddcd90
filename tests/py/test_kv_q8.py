"""--kv-type q8_0: greedy output is the same alone (CLI), through the
server one at a time, concurrently in a batch, after a prefix cache hit and
after preemption in a pool too small for the batch; the same --kv-cache-mib
holds about 1.9x the tokens of f16; bad values are one-line errors."""
import re
import subprocess
import threading

import pytest

from server_util import Server, binary, chat_model, metrics, post_json, tiny_model

SMOLLM_PROMPTS = [
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg of Mainz "
    "combined movable metal type with an oil-based ink and a screw press. The result",
    "A recipe for bread: mix flour, water, salt and yeast, knead the dough for ten minutes, then",
    "The three laws of motion stated by Isaac Newton in his Principia of 1687 describe the relationship "
    "between a body, the forces acting upon it, and",
]
TINY_PROMPTS = ["Once upon a time, there was a little girl named Lily. She loved to play outside",
                "One day, a big dog came to the house of a small boy who liked to",
                "Tom and Sue went to the park with their mom. They saw a big tree and"]


def cli_greedy(model, prompt, n):
    out = subprocess.run([binary(), "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                          "--ignore-eos", "--kv-type", "q8_0", "-t", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout


def complete(url, prompt, n):
    status, _, r = post_json(url + "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0,
                                                       "ignore_eos": True}, timeout=600)
    assert status == 200, r
    return r["choices"][0]["text"]


def concurrent(url, prompts, n):
    out = [None] * len(prompts)

    def one(i):
        out[i] = complete(url, prompts[i], n)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("which", ["stories260K", "smollm2"])
def test_q8_0_alone_batched_prefix_cached_preempted(which):
    # SmolLM2: a pool too small for the concurrent batch, so sequences are
    # preempted (stories260K's smallest pool, 1 MiB, holds 2600 of its tokens:
    # test_engine.c preempts it with Q8_0 instead)
    if which == "smollm2":
        model, prompts, n, mib, copies = chat_model(), SMOLLM_PROMPTS, 32, 2, 2
    else:  # 128 positions of context
        model, prompts, n, mib, copies = tiny_model(), TINY_PROMPTS, 64, 1, 8
    alone = [cli_greedy(model, p, n) for p in prompts]
    with Server(model, "--kv-type", "q8_0", "--kv-cache-mib", str(mib), "--max-seqs", "32", "--threads", "2") as s:
        for p, want in zip(prompts, alone):  # one at a time, then again from the prefix cache
            hits = metrics(s.url)["genloop_prefix_cache_hits_total"]
            assert complete(s.url, p, n) == want
            assert complete(s.url, p, n) == want
            assert metrics(s.url)["genloop_prefix_cache_hits_total"] > hits
        got = concurrent(s.url, prompts * copies, n)
        assert got == alone * copies
        if which == "smollm2":
            assert metrics(s.url)["genloop_num_preemptions_total"] > 0
    assert re.search(r"KV cache: \d+ tokens \(q8_0, %d MiB" % mib, s.log), s.log


def capacity(model, kv_type):
    with Server(model, "--kv-type", kv_type, "--kv-cache-mib", "64") as s:
        tokens = metrics(s.url)["genloop_kv_cache_capacity_tokens"]
    assert "KV cache: %d tokens (%s, 64 MiB" % (tokens, kv_type) in s.log
    return tokens


def test_q8_0_capacity_in_tokens():
    # SmolLM2: 30 layers of 3 KV heads of 64; Q8_0 takes 17 bytes where F16 takes 32
    f16, q8 = capacity(chat_model(), "f16"), capacity(chat_model(), "q8_0")
    assert f16 == 64 * 2**20 // (2 * 30 * 192 * 16 * 2) * 16
    assert 1.85 < q8 / f16 < 1.9


@pytest.mark.parametrize("cmd", [["serve", "-m", "MODEL"], ["generate", "-m", "MODEL", "-p", "x"],
                                 ["bench", "-m", "MODEL"]])
def test_bad_kv_type_is_one_line(cmd):
    args = [tiny_model() if a == "MODEL" else a for a in cmd] + ["--kv-type", "q4_0"]
    out = subprocess.run([binary(), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "q8_0" in lines[0] and "q4_0" in lines[0], out.stderr


def test_kv_type_config_key(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"kv_type": "q8_0"}')
    out = subprocess.run([binary(), "serve", "--config", str(cfg), "--print-config"],
                         capture_output=True, text=True, check=True)
    assert '"kv_type":\t"q8_0"' in out.stdout
    out = subprocess.run([binary(), "serve", "--config", str(cfg), "--kv-type", "f32", "--print-config"],
                         capture_output=True, text=True, check=True)
    assert '"kv_type":\t"f32"' in out.stdout
    cfg.write_text('{"kv_type": "int4"}')
    out = subprocess.run([binary(), "serve", "--config", str(cfg), "-m", tiny_model()],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1 and "kv_type" in out.stderr
    out = subprocess.run([binary(), "serve", "--help"], capture_output=True, text=True, check=True)
    assert "--kv-type" in out.stdout and "q8_0" in out.stdout
