"""activation_bits (`--activation-bits`, the config key): values other than 8,
12 and 16 are refused with a clear message by serve, generate and bench; a
server with 8-bit activations serves completions; and greedy output is
batch-invariant in every mode on a random Q4_0 model (whose packed matmuls
are the ones 8 and 12 bits change): each request's tokens and logprobs
are the same alone as in a batch, with prefill in chunks beside decodes."""
import json
import subprocess
import threading

import pytest

from server_util import Server, binary, metrics, post_json

PROMPTS = [[1, 17, 250, 33, 98, 4], [1, 200, 201, 202], [1, 5, 100, 299, 42, 7, 7, 250, 3, 180, 64, 9, 17],
           [1, 77], [1, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167],
           [1, 8, 9], [1, 260, 42, 42, 42, 42, 42, 42], [1, 123, 45, 67, 89, 101]]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def q4_0_model(tmp_path_factory, make_tiny_gguf):
    """A random Q4_0 model with tied embeddings, so the output matmul is Q4_0 too."""
    path = tmp_path_factory.mktemp("act_bits") / "tiny-Q4_0.gguf"
    make_tiny_gguf.main([str(path), "--type", "Q4_0", "--dim", "256", "--n-layers", "2", "--n-heads", "4",
                         "--n-kv-heads", "2", "--ff", "512", "--vocab", "300", "--ctx", "256", "--seed", "11",
                         "--tied"])
    return str(path)


def run(*args, timeout=120):
    return subprocess.run([binary(), *map(str, args)], capture_output=True, text=True, timeout=timeout)


# ---- validation ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["7", "10", "0", "-8"])
def test_serve_flag_rejected(q4_0_model, value):
    r = run("serve", "-m", q4_0_model, "--port", "0", "--activation-bits", value)
    assert r.returncode == 1
    assert f"activation_bits: must be 8, 12 or 16, got {value}" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_serve_config_key_rejected_and_accepted(q4_0_model, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"activation_bits": 7}))
    r = run("serve", "-m", q4_0_model, "--port", "0", "--config", cfg)
    assert r.returncode == 1 and "activation_bits: must be 8, 12 or 16, got 7" in r.stderr, r.stderr
    cfg.write_text(json.dumps({"activation_bits": "8"}))
    r = run("serve", "-m", q4_0_model, "--config", cfg)
    assert r.returncode == 1 and "\"activation_bits\" must be an integer" in r.stderr, r.stderr
    cfg.write_text(json.dumps({"activation_bits": 8}))
    r = run("serve", "--config", cfg, "--print-config")
    assert r.returncode == 0 and json.loads(r.stdout)["activation_bits"] == 8
    r = run("serve", "--config", cfg, "--activation-bits", "16", "--print-config")
    assert r.returncode == 0 and json.loads(r.stdout)["activation_bits"] == 16  # the flag wins
    r = run("serve", "--print-config")
    assert json.loads(r.stdout)["activation_bits"] == 12
    r = run("serve", "--help")
    assert "--activation-bits N" in r.stdout and "(default 12)" in r.stdout


@pytest.mark.parametrize("cmd", [["generate", "-p", "hi", "-n", "2"], ["bench", "-p", "8", "-n", "2"]])
def test_cli_flag_rejected(q4_0_model, cmd):
    r = run(cmd[0], "-m", q4_0_model, *cmd[1:], "--activation-bits", "10")
    assert r.returncode == 2
    assert r.stderr.strip() == ("genloop: invalid value '10' for --activation-bits: "
                                "activation_bits must be 8, 12 or 16"), r.stderr
    assert "--activation-bits" in run(cmd[0], "--help").stdout


def test_cli_generate_and_bench_with_8_bits(q4_0_model):
    r = run("generate", "-m", q4_0_model, "-p", "hello", "-n", 8, "--temp", 0, "--ignore-eos",
            "--activation-bits", 8)
    assert r.returncode == 0 and "generated tokens: 8" in r.stderr, r.stderr
    r = run("bench", "-m", q4_0_model, "-p", 16, "-n", 4, "-b", "1,2", "-r", 1, "-t", 2, "--json",
            "--activation-bits", 8)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["activation_bits"] == 8
    r = run("bench", "-m", q4_0_model, "-p", 16, "-n", 4, "-b", "1", "-r", 1, "-t", 2)
    assert r.returncode == 0 and "activations         12-bit" in r.stdout, r.stdout


# ---- serving and batch invariance ---------------------------------------------------------

def greedy(server, prompt):
    """[(tokens, logprobs)] for each prompt of a list of token-id prompts, sent
    as one request (so they reach the engine together)."""
    status, _, r = post_json(server.url + "/v1/completions",
                             {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
                              "logprobs": 1}, timeout=120)
    assert status == 200, r
    assert r["usage"]["completion_tokens"] == MAX_TOKENS * len(prompt)
    out = [None] * len(prompt)
    for c in r["choices"]:
        assert c["finish_reason"] == "length"
        out[c["index"]] = (c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"])
    return out


def test_server_with_8_bits_serves_a_completion(q4_0_model):
    with Server(q4_0_model, "-t", "2", "--activation-bits", "8") as s:
        status, _, r = post_json(s.url + "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8,
                                                            "ignore_eos": True})
        assert status == 200, r
        assert r["usage"]["completion_tokens"] == 8 and r["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("bits", ["16", "12", "8"])
def test_batch_invariance(q4_0_model, bits):
    """Each prompt alone, then all eight at once with prefill in 16-token
    chunks beside the others' decodes: identical tokens and logprobs."""
    with Server(q4_0_model, "-t", "2", "--activation-bits", bits, "--max-seqs", "8",
                "--max-batch-tokens", "16") as s:
        alone = [greedy(s, [p])[0] for p in PROMPTS]
        assert len({tuple(a[0]) for a in alone}) > 1  # the prompts do lead to different outputs
        # all eight in one request: they run together from the first step
        before = metrics(s.url)
        together = greedy(s, PROMPTS)
        m = metrics(s.url)
        # steps of more than 4 sequences: how the 24 decode steps overlap
        # depends on when each prompt's chunks got their turn, not whether
        wide = [x["genloop_batch_size_count"] - x['genloop_batch_size_bucket{le="4"}'] for x in (before, m)]
        assert wide[1] - wide[0] >= MAX_TOKENS // 2, f"{wide[1] - wide[0]} steps of over 4 sequences: the requests hardly ran together"
        # and as eight clients arriving at slightly different steps
        arrived = [None] * len(PROMPTS)
        start = threading.Barrier(len(PROMPTS))

        def one(i):
            start.wait()
            arrived[i] = greedy(s, [PROMPTS[i]])[0]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for i in range(len(PROMPTS)):
            assert together[i] == alone[i], f"prompt {i} differs in a batch ({bits}-bit activations)"
            assert arrived[i] == alone[i], f"prompt {i} differs among concurrent clients ({bits}-bit activations)"


# Prompts long enough for the AMX prompt tiles (32 tokens or more in one call).
LONG_PROMPTS = [[1] + [(7 * i + 13 * k) % 298 + 1 for i in range(n)] for k, n in enumerate((40, 70, 33, 100))]


@pytest.mark.parametrize("bits", ["16", "12", "8"])
def test_amx_prefill_matches_vnni(q4_0_model, bits, monkeypatch):
    """Each long prompt prefilled in one call (on AMX where the host has it)
    gives the tokens and logprobs of the same prompt prefilled in 16-token
    chunks (always the VNNI tiles) and of the avx512 backend: the AMX tiles
    are bit for bit the VNNI ones. Elsewhere all three runs are plain VNNI."""
    runs = []
    for kernels, chunk in (("auto", "128"), ("auto", "16"), ("avx512", "128")):
        monkeypatch.setenv("GENLOOP_KERNELS", kernels)
        with Server(q4_0_model, "-t", "2", "--activation-bits", bits, "--max-batch-tokens", chunk) as s:
            runs.append([greedy(s, [p])[0] for p in LONG_PROMPTS])
    for i in range(len(LONG_PROMPTS)):
        assert runs[0][i] == runs[1][i], f"prompt {i}: one-call prefill differs from 16-token chunks ({bits}-bit)"
        assert runs[0][i] == runs[2][i], f"prompt {i}: auto differs from avx512 ({bits}-bit)"
