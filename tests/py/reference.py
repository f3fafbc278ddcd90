#!/usr/bin/env python3
"""Independent numpy reference for the Llama forward pass.

    python3 tests/py/reference.py MODEL.gguf OUT.f32 id1 id2 ...

Reads the GGUF with gguf.GGUFReader, dequantizes every tensor with
gguf.quants.dequantize (never the engine's code), runs the token list as one
causal sequence in float64 and writes the logits of every position:
n_tokens x n_vocab float32, little-endian -- the layout of the engine's
tests/dump_logits.
"""
import sys

import numpy as np
import gguf


class Model:
    """Hyperparameters from the GGUF metadata, and weights dequantized on
    first use, kept as float64 numpy arrays shaped (out, in) (float64 so the
    matrix products run in BLAS without a per-call conversion)."""

    def __init__(self, path):
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self._weights = {}
        arch = self.meta("general.architecture")
        if arch != "llama":
            raise ValueError(f"{path}: architecture {arch!r}, only llama is supported")
        self.dim = self.meta("llama.embedding_length")
        self.n_layers = self.meta("llama.block_count")
        self.n_heads = self.meta("llama.attention.head_count")
        self.n_kv_heads = self.meta("llama.attention.head_count_kv", self.n_heads)
        self.head_dim = self.dim // self.n_heads
        self.rope_dim = self.meta("llama.rope.dimension_count", self.head_dim)
        self.rope_base = float(self.meta("llama.rope.freq_base", 10000.0))
        self.eps = float(self.meta("llama.attention.layer_norm_rms_epsilon", 1e-5))
        self.n_vocab = self.tensors["token_embd.weight"].shape[1]
        scaling = self.meta("llama.rope.scaling.type", "none")
        if scaling not in ("none",):
            raise ValueError(f"{path}: rope scaling {scaling!r} is not implemented in the reference")

    def meta(self, key, default=None):
        field = self.reader.fields.get(key)
        if field is None:
            if default is None:
                raise KeyError(f"metadata key {key} is missing")
            return default
        return field.contents()

    def weight(self, name):
        if name not in self._weights:
            t = self.tensors[name]
            w = gguf.quants.dequantize(t.data, t.tensor_type)
            # GGUF ne is {in, out}; numpy holds it as (out, in)
            self._weights[name] = np.asarray(w, dtype=np.float64).reshape([int(n) for n in reversed(t.shape)])
        return self._weights[name]

    def output_weight(self):
        name = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        return self.weight(name)


def rmsnorm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1 + np.exp(-x))


def rope(x, positions, rope_dim, base):
    """GGUF "normal" Llama RoPE: rotate adjacent pairs (x[2i], x[2i+1]) of each
    head by pos * base^(-2i/rope_dim); dims past rope_dim stay as they are.
    x: (n_tokens, n_heads, head_dim)."""
    out = x.copy()
    inv_freq = base ** (-np.arange(0, rope_dim, 2, dtype=np.float64) / rope_dim)
    angle = positions[:, None].astype(np.float64) * inv_freq[None, :]  # (n_tokens, rope_dim/2)
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    x0, x1 = x[..., 0:rope_dim:2], x[..., 1:rope_dim:2]
    out[..., 0:rope_dim:2] = x0 * cos - x1 * sin
    out[..., 1:rope_dim:2] = x0 * sin + x1 * cos
    return out


def attention(q, k, v, n_heads, n_kv_heads):
    """Causal attention with grouped KV heads: query head h reads KV head
    h // (n_heads / n_kv_heads). q: (T, n_heads, hd), k and v: (T, n_kv, hd)."""
    n_tokens, _, head_dim = q.shape
    group = n_heads // n_kv_heads
    k = np.repeat(k, group, axis=1)  # KV head j serves query heads j*group .. j*group+group-1
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(head_dim)
    future = np.triu(np.ones((n_tokens, n_tokens), dtype=bool), k=1)
    scores = np.where(future[None], -np.inf, scores)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", scores, v)


def forward(model, tokens):
    """Logits (n_tokens, n_vocab) float64 for every position of tokens."""
    m = model
    tokens = np.asarray(tokens, dtype=np.int64)
    n_tokens = len(tokens)
    positions = np.arange(n_tokens)
    x = m.weight("token_embd.weight")[tokens]
    for layer in range(m.n_layers):
        p = f"blk.{layer}."
        h = rmsnorm(x, m.weight(p + "attn_norm.weight"), m.eps)
        q = (h @ m.weight(p + "attn_q.weight").T).reshape(n_tokens, m.n_heads, m.head_dim)
        k = (h @ m.weight(p + "attn_k.weight").T).reshape(n_tokens, m.n_kv_heads, m.head_dim)
        v = (h @ m.weight(p + "attn_v.weight").T).reshape(n_tokens, m.n_kv_heads, m.head_dim)
        q = rope(q, positions, m.rope_dim, m.rope_base)
        k = rope(k, positions, m.rope_dim, m.rope_base)
        att = attention(q, k, v, m.n_heads, m.n_kv_heads).reshape(n_tokens, m.dim)
        x = x + att @ m.weight(p + "attn_output.weight").T
        h = rmsnorm(x, m.weight(p + "ffn_norm.weight"), m.eps)
        gate = h @ m.weight(p + "ffn_gate.weight").T
        up = h @ m.weight(p + "ffn_up.weight").T
        x = x + (silu(gate) * up) @ m.weight(p + "ffn_down.weight").T
    x = rmsnorm(x, m.weight("output_norm.weight"), m.eps)
    return x @ m.output_weight().T


def write_logits(path, logits):
    np.asarray(logits, dtype="<f4").tofile(path)


def read_logits(path, n_tokens):
    data = np.fromfile(path, dtype="<f4")
    if n_tokens == 0 or data.size % n_tokens:
        raise ValueError(f"{path}: {data.size} floats is not a whole number of rows for {n_tokens} tokens")
    return data.reshape(n_tokens, -1)


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    model = Model(argv[1])
    tokens = [int(t) for t in argv[3:]]
    bad = [t for t in tokens if not 0 <= t < model.n_vocab]
    if bad:
        print(f"token ids out of range 0..{model.n_vocab - 1}: {bad}", file=sys.stderr)
        return 2
    write_logits(argv[2], forward(model, tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
