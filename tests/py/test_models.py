"""The architectures beside llama (qwen2, qwen3, gemma3) against the numpy
reference (reference.py): random-weight models of each shape from
scripts/make_tiny_gguf.py, then the two real models scripts/fetch-model
knows, Gemma 3 270M and Qwen2.5-Coder-0.5B, on several prompts (one of 605
tokens, past Gemma 3's 512-position sliding window), in prefill and decode
mode, at the default activation precision. The bar: the tolerance of
conftest.compare_logits and the same top-1 token at every position, but
for near-ties (TOP1_TIE).
"""
import json
from pathlib import Path
import subprocess

import numpy as np
import pytest

import reference
from conftest import build_dir, compare_logits

TOKENS = [1] + [(i * 37) % 290 + 5 for i in range(45)]  # 46 positions: several cache blocks of 16
TINY = {  # arch -> make_tiny_gguf flags
    "qwen2": ["--n-layers", "2"],
    "qwen3": ["--n-layers", "2", "--head-dim", "48"],  # head_dim * heads != dim, as Qwen3 allows
    # 6 layers: five sliding-window layers (window 5, inside one cache block and across two) and a global one
    "gemma3": ["--n-layers", "6", "--head-dim", "48", "--sliding-window", "5"],
}
LONG_PROMPT = (Path(__file__).parent / "long_prompt.txt").read_text()
PROMPTS = [
    "The capital of France is Paris, and the capital of Italy is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
]


def make_tiny(make_tiny_gguf, folder, arch, *extra):
    path = folder / f"tiny-{arch}{'-'.join(extra)}.gguf"
    make_tiny_gguf.main([str(path), "--arch", arch, "--type", "Q8_0", "--output-type", "Q8_0", "--untied", "--dim",
                         "128", "--n-heads", "4", "--n-kv-heads", "2", "--ff", "256", "--vocab", "300", "--seed", "3"]
                        + TINY[arch] + list(extra))
    return path


@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("arch", list(TINY))
def test_tiny_architectures(dump_logits, make_tiny_gguf, tmp_path, arch, mode):
    path = make_tiny(make_tiny_gguf, tmp_path, arch)
    want = reference.forward(reference.Model(path), TOKENS)
    got = dump_logits(path, TOKENS, decode=mode == "decode")
    _, _, passed = compare_logits(got, want, f"tiny {arch} {mode}")
    assert passed
    assert (got.argmax(axis=1) == want.argmax(axis=1)).all()


@pytest.mark.parametrize("bug", ["no_window", "llama_rope", "no_post_norm"])
def test_tolerance_catches_architecture_bugs(dump_logits, make_tiny_gguf, tmp_path, monkeypatch, bug):
    """Each Gemma 3 feature moves the logits beyond the tolerance: a forward
    pass without the sliding window, with adjacent-pair RoPE, or without the
    post-norms would fail the comparison."""
    path = make_tiny(make_tiny_gguf, tmp_path, "gemma3")
    got = dump_logits(path, TOKENS)
    model = reference.Model(path)
    if bug == "no_window":
        model.window = 0
    elif bug == "llama_rope":
        monkeypatch.setattr(reference, "rope_neox", reference.rope)
    else:
        model.flags = dict(model.flags, post_norm=False)
    _, _, passed = compare_logits(got, reference.forward(model, TOKENS), f"tiny gemma3 vs reference with {bug}")
    assert not passed


# ---- the real models -------------------------------------------------------------


def tokenize(model, text):
    out = subprocess.run([str(build_dir() / "genloop"), "tokenize", "-m", str(model), "-p", text, "--ids"],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


# A position may pick another top-1 than the reference only where the
# reference itself ranks the two within this fraction of max(1, max |logit|):
# a tie far inside the rounding compare_logits admits (1e-3), which any
# last-bit change of float32 math (a reordered sum, another exp) can flip.
TOP1_TIE = 5e-5


def compare_in_chunks(got, hidden, output, label, rows=64):
    """compare_logits and top-1 agreement over every position, computing the
    reference logits (hidden @ output.T) a few rows at a time: a 605 x 262144
    float64 matrix would take 1.3 GB. Returns (within tolerance, top-1 the
    same at every position but near-ties)."""
    max_diff, max_logit, top1, gaps = 0.0, 0.0, [], []
    for r0 in range(0, len(hidden), rows):
        want = hidden[r0:r0 + rows] @ output.T
        g = got[r0:r0 + rows]
        max_diff = max(max_diff, float(np.abs(g - want).max()))
        max_logit = max(max_logit, float(np.abs(want).max()))
        pick, best = g.argmax(axis=1), want.argmax(axis=1)
        top1.append(pick == best)
        rows_ = np.arange(len(g))
        gaps.append(want[rows_, best] - want[rows_, pick])  # 0 where they agree
    top1, gap = np.concatenate(top1), float(np.concatenate(gaps).max())
    scale = max(1.0, max_logit)
    rel = max_diff / scale
    print(f"{label}: {len(hidden)} positions, max|diff| {max_diff:.3e}, max|logit| {max_logit:.3f}, "
          f"relative {rel:.3e}, top-1 agreement {top1.mean():.4f}, largest reference gap of a different pick {gap:.2e}")
    return rel <= 1e-3, gap <= TOP1_TIE * scale


def check_real_model(dump_logits, path, prompts, decode_prompts):
    model = reference.Model(path)
    output = model.output_weight()
    failures = []
    for i, text in enumerate(prompts):
        ids = tokenize(path, text)
        hidden = reference.forward_hidden(model, ids)
        for mode in ["prefill"] + (["decode"] if i in decode_prompts else []):
            got = dump_logits(path, ids, decode=mode == "decode")
            close, same_top1 = compare_in_chunks(got, hidden, output, f"{path.name} prompt {i} {mode}")
            if not (close and same_top1):
                failures.append(f"prompt {i} {mode}: within tolerance {close}, top-1 identical but near-ties {same_top1}")
    assert not failures, failures


def test_gemma3_270m(dump_logits, gemma3):
    # the long prompt (605 tokens) in decode mode too: one token at a time through the window
    check_real_model(dump_logits, gemma3, PROMPTS + [LONG_PROMPT], decode_prompts={0, len(PROMPTS)})


def test_qwen25_coder(dump_logits, qwen2):
    check_real_model(dump_logits, qwen2, PROMPTS + [LONG_PROMPT], decode_prompts={3})


def test_real_models_metadata(gemma3, qwen2):
    g, q = reference.Model(gemma3), reference.Model(qwen2)
    assert (g.arch, g.n_layers, g.dim, g.n_heads, g.n_kv_heads, g.head_dim, g.window) == ("gemma3", 18, 640, 4, 1, 256, 512)
    assert [g.layer_window(l) for l in (0, 4, 5, 11, 17)] == [(512, 1e4), (512, 1e4), (0, 1e6), (0, 1e6), (0, 1e6)]
    assert (q.arch, q.n_layers, q.dim, q.n_heads, q.n_kv_heads, q.head_dim) == ("qwen2", 24, 896, 14, 2, 64)


# ---- bad input at load -----------------------------------------------------------

BAD_MODELS = [  # (arch, make_tiny_gguf flags, what the one-line error must name)
    ("qwen2", ["--omit", "blk.1.attn_q.bias"], "tensor blk.1.attn_q.bias is missing"),
    ("qwen3", ["--omit", "blk.0.attn_k_norm.weight"], "tensor blk.0.attn_k_norm.weight is missing"),
    ("gemma3", ["--omit", "blk.3.post_ffw_norm.weight"], "tensor blk.3.post_ffw_norm.weight is missing"),
    ("gemma3", ["--omit", "gemma3.attention.sliding_window"], "gemma3.attention.sliding_window"),
    ("qwen3", ["--omit", "qwen3.attention.head_count"], "qwen3.attention.head_count"),
    ("gemma3", ["--wrong-shape", "blk.0.attn_q_norm.weight"], "tensor blk.0.attn_q_norm.weight has shape [49, 1"),
    ("qwen3", ["--wrong-shape", "blk.1.attn_output.weight"], "tensor blk.1.attn_output.weight has shape"),
    ("qwen2", ["--wrong-shape", "blk.0.attn_v.bias"], "tensor blk.0.attn_v.bias has shape"),
]


def load_error(path):
    """The CLI's message for a model it refuses to load (exit status != 0)."""
    out = subprocess.run([str(build_dir() / "genloop"), "generate", "-m", str(path), "-p", "hi", "-n", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0, out.stdout
    assert out.stderr.count("\n") == 1, out.stderr  # one line
    return out.stderr


@pytest.mark.parametrize("arch,flags,message", BAD_MODELS)
def test_bad_model_refused_with_one_line(make_tiny_gguf, tmp_path, arch, flags, message):
    path = make_tiny(make_tiny_gguf, tmp_path, arch, *flags)
    err = load_error(path)
    assert message in err and str(path) in err, err


def test_head_dim_must_match_where_the_architecture_requires(make_tiny_gguf, tmp_path):
    """qwen2 (like llama) has head_dim = n_embd / n_heads: a key_length that
    says otherwise is refused, naming the key."""
    path = tmp_path / "qwen2-head-dim.gguf"
    make_tiny_gguf.main([str(path), "--arch", "qwen2", "--type", "F32", "--dim", "128", "--n-heads", "4",
                         "--n-kv-heads", "2", "--ff", "256", "--vocab", "300", "--head-dim", "48", "--n-layers", "1"])
    assert "qwen2.attention.key_length 48 is not embedding_length / head_count = 32" in load_error(path)


def test_unsupported_architecture_lists_the_supported(make_tiny_gguf, tmp_path):
    path = tmp_path / "mamba.gguf"
    make_tiny_gguf.main([str(path), "--arch", "mamba", "--type", "F32", "--dim", "64", "--n-heads", "2",
                         "--n-kv-heads", "2", "--ff", "128", "--vocab", "300", "--n-layers", "1"])
    assert "architecture 'mamba' is not supported (genloop runs llama, qwen2, qwen3, gemma3)" in load_error(path)
