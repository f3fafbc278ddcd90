"""The genloop command line: generation on real models, tokenize, and clear
one-line errors with a non-zero exit for bad input."""
import json
import subprocess

import pytest

from conftest import build_dir, skip_or_fail


def genloop(*args, timeout=300):
    exe = build_dir() / "genloop"
    if not exe.is_file():
        skip_or_fail(f"{exe} is missing")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_stories260k_greedy_matches_reference(stories260k, testdata_dir):
    ref = json.loads((testdata_dir / "models" / "stories260K_greedy_llamacpp.json").read_text())
    for case in ref["cases"]:
        r = genloop("generate", "-m", stories260k, "-p", case["prompt"], "-n", 64, "--temp", 0, "--ignore-eos")
        assert r.returncode == 0, r.stderr
        assert r.stdout == case["generated_text"] + "\n"
        assert "prompt tokens: 5" in r.stderr
        assert "TTFT:" in r.stderr and "decode:" in r.stderr


def test_smollm_names_paris(smollm):
    r = genloop("generate", "-m", smollm, "-p", "The capital of France is", "-n", 16, "--temp", 0)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout


def test_seeded_sampling_is_reproducible(stories260k):
    args = ("generate", "-m", stories260k, "-p", "Once upon a time", "-n", 40, "--temp", 1, "--seed", 7)
    a, b = genloop(*args), genloop(*args)
    assert a.returncode == 0 and a.stdout == b.stdout


def test_stop_string_is_not_emitted(stories260k):
    r = genloop("generate", "-m", stories260k, "-p", "Once upon a time", "-n", 64, "--temp", 0, "--stop", "Lily")
    assert r.returncode == 0
    assert r.stdout == ", there was a little girl named \n"
    assert "(stop)" in r.stderr


def test_tokenize_ids(stories260k, smollm):
    r = genloop("tokenize", "-m", stories260k, "-p", "Once upon a time", "--ids")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [1, 403, 407, 261, 378]
    r = genloop("tokenize", "-m", smollm, "-p", "<|im_start|>user", "--ids")
    special = json.loads(r.stdout)
    r = genloop("tokenize", "-m", smollm, "-p", "<|im_start|>user", "--ids", "--no-special")
    assert len(json.loads(r.stdout)) > len(special)
    r = genloop("tokenize", "-m", stories260k, "-p", "Once upon")
    assert r.returncode == 0 and "403" in r.stdout


def test_help_and_version():
    r = genloop("--help")
    assert r.returncode == 0 and "generate" in r.stdout
    r = genloop("--version")
    assert r.returncode == 0 and r.stdout.startswith("genloop ")
    r = genloop("generate", "--help")
    assert r.returncode == 0 and "--top-p" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (["generate", "-m", "/nonexistent.gguf", "-p", "x"], "/nonexistent.gguf"),
    (["generate", "-p", "x"], "required"),
    (["generate", "-m", "MODEL", "-p", "x", "-n", "abc"], "-n"),
    (["generate", "-m", "MODEL", "-p", "x", "--temp", "-1"], "--temp"),
    (["generate", "-m", "MODEL", "-p", "x", "--top-p", "0"], "--top-p"),
    (["generate", "-m", "MODEL", "-p", "x", "--bogus"], "--bogus"),
    (["generate", "-m", "MODEL", "-p", "x", "--seed"], "--seed"),
    (["frobnicate"], "frobnicate"),
    (["bench", "-m", "MODEL", "-d", "0"], "-d"),
    (["bench", "-m", "MODEL", "-d", "x"], "-d"),
])
def test_bad_arguments_give_one_clear_line(stories260k, args, needle):
    args = [str(stories260k) if a == "MODEL" else a for a in args]
    r = genloop(*args)
    assert r.returncode != 0
    assert needle in r.stderr
    assert "Segmentation" not in r.stderr


def test_corrupt_and_non_gguf_files(tmp_path, stories260k):
    data = stories260k.read_bytes()
    cases = {
        "truncated.gguf": data[:5000],
        "garbage.gguf": b"this is not a model at all" * 100,
        "empty.gguf": b"",
        "flipped.gguf": data[:8] + b"\xff\xff\xff\xff\xff\xff\xff\x7f" + data[16:],
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        r = genloop("generate", "-m", path, "-p", "hi", "-n", 4)
        assert r.returncode == 1, name
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and name in lines[0], (name, r.stderr)


def test_prompt_longer_than_context(stories260k):
    r = genloop("generate", "-m", stories260k, "-p", "Once upon a time " * 60, "-n", 4)
    assert r.returncode == 1
    assert "context" in r.stderr


def test_invalid_utf8_prompt(stories260k, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"Once upon \xff\xfe a time")
    r = genloop("generate", "-m", stories260k, "-f", path, "-n", 4)
    assert r.returncode == 1
    assert "UTF-8" in r.stderr


def test_bench_depth(stories260k):
    """-d runs the single-stream generation after a prompt of that many tokens
    (past stories260K's 128-token training context and two 256-position
    attention segments: the engine's context is sized for it) and reports it."""
    r = genloop("bench", "-m", stories260k, "-p", 16, "-n", 8, "-d", 300, "-b", 1, "-r", 1, "-t", 2, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["depth"] == 300 and out["tg_tokens_per_s"] > 0
    r = genloop("bench", "-m", stories260k, "-p", 16, "-n", 8, "-d", 40, "-b", 1, "-r", 1, "-t", 2)
    assert r.returncode == 0 and "tg8 @ depth 40" in r.stdout, r.stdout


def test_bench_int8_ceiling(stories260k):
    """Prompt processing is set against the host's int8 ceiling: the layers'
    multiply-adds a token (twice at 16-bit activations, two int8 parts) over
    the kernels' peak int8 rate on the threads' cores at the measured clock
    (AVX-512: 64 a vpdpbusd times the one or two a core issues a cycle,
    measured: Xeon cores two, Zen 4 one)."""
    per_cycle = {"amx": (1024,), "avx512": (64, 128), "avx2": (64,)}
    outs = {}
    for bits in (16, 8):
        r = genloop("bench", "-m", stories260k, "-p", 16, "-n", 4, "-b", 1, "-r", 1, "-t", 1,
                    "--activation-bits", bits, "--json")
        assert r.returncode == 0, r.stderr
        outs[bits] = o = json.loads(r.stdout)
        assert o["kernels"] in per_cycle and o["int8_macs_per_cycle_core"] in per_cycle[o["kernels"]], o
        assert 0.5 < o["cpu_ghz"] < 10, o
        ceiling = o["int8_macs_per_cycle_core"] * o["cpu_ghz"] * 1e9 / o["int8_macs_per_prompt_token"]
        assert o["pp_int8_ceiling_tokens_per_s"] == pytest.approx(ceiling, rel=1e-3)
        assert o["pp_int8_ceiling_fraction"] == pytest.approx(o["pp_tokens_per_s"] / ceiling, rel=1e-2, abs=1e-4)
    # stories260K: 5 layers, dim 64, 8 query and 4 KV heads of 8, FFN 172
    assert outs[8]["int8_macs_per_prompt_token"] == 5 * (64 * (64 + 2 * 32) + 64 * 64 + 3 * 64 * 172)
    assert outs[16]["int8_macs_per_prompt_token"] == 2 * outs[8]["int8_macs_per_prompt_token"]
    r = genloop("bench", "-m", stories260k, "-p", 16, "-n", 4, "-b", 1, "-r", 1, "-t", 1)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("int8 ceiling")), "")
    assert r.returncode == 0 and " of " in line and "int8 multiply-adds/cycle/core x 1 x" in line, r.stdout


def test_llama_sampler_flags(stories260k):
    """llama.cpp's sampler flags on generate (docs/sampling.md)."""
    def gen(prompt, *flags):
        r = genloop("generate", "-m", stories260k, "-p", prompt, "-n", 8, *flags)
        assert r.returncode == 0, r.stderr
        return r.stdout
    greedy = gen("Once upon a time", "--temp", 0)
    # mirostat 2 with tau 0 keeps only the best token, whatever top-k/top-p say
    assert gen("Once upon a time", "--mirostat", 2, "--mirostat-ent", 0, "--seed", 3) == greedy
    assert gen("Once upon a time", "--top-nsigma", 0.0001, "--seed", 3) == greedy
    repeated = "Lily and Ben. Lily and Ben. Lily and Ben. Lily and"
    plain = gen(repeated, "--temp", 0)
    assert plain.startswith(" Ben")
    assert not gen(repeated, "--temp", 0, "--dry-multiplier", 3).startswith(" Ben")
    assert gen(repeated, "--temp", 0, "--dry-multiplier", 3, "--dry-sequence-breaker", ". Li") == plain
    for flags, name in ((("--mirostat", 3), "--mirostat"), (("--typical", 2), "--typical"),
                        (("--dry-base", 0.5), "--dry-base"), (("--dry-sequence-breaker", ""), "--dry-sequence-breaker")):
        r = genloop("generate", "-m", stories260k, "-p", "x", *flags)
        assert r.returncode == 2 and name in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
