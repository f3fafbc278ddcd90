#!/usr/bin/env python3
"""Independent numpy reference for the forward pass of llama, qwen2, qwen3
and gemma3 GGUFs.

    python3 tests/py/reference.py MODEL.gguf OUT.f32 id1 id2 ...

Reads the GGUF with gguf.GGUFReader, dequantizes every tensor with
gguf.quants.dequantize (never the engine's code), runs the token list as one
causal sequence in float64 and writes the logits of every position:
n_tokens x n_vocab float32, little-endian -- the layout of the engine's
tests/dump_logits.

Written from the Hugging Face definitions (modeling_llama.py, modeling_qwen2.py,
modeling_qwen3.py, modeling_gemma3.py) and llama.cpp's GGUF conventions, not
from the engine: see ARCHS.
"""
import sys

import numpy as np
import gguf


# What each architecture adds to the Llama block, as HF defines it:
#   neox       RoPE rotates (x[i], x[i + d/2]) (HF rotate_half); llama's GGUF
#              converter permutes Q/K so adjacent pairs are right there
#   qkv_bias   q/k/v projections have biases (Qwen2)
#   qk_norm    RMSNorm over each head of q and k before RoPE (Qwen3, Gemma 3)
#   post_norm  the attention and FFN outputs are RMS-normed before the residual
#              add (Gemma 3)
#   gelu       FFN gate activation gelu(approximate="tanh") instead of SiLU
#   embd_scale embeddings times sqrt(hidden_size)
#   swa        (period, local RoPE base): layers with (l + 1) % period != 0 see
#              only the last sliding_window positions and use the local base
# Gemma's RMSNorm is x * (1 + w) in HF; llama.cpp's converter stores 1 + w, so
# GGUF norm weights multiply as they are for every architecture.
ARCHS = {
    "llama": dict(),
    "qwen2": dict(neox=True, qkv_bias=True),
    "qwen3": dict(neox=True, qk_norm=True),
    "gemma3": dict(neox=True, qk_norm=True, post_norm=True, gelu=True, embd_scale=True, swa=(6, 10000.0)),
}


class Model:
    """Hyperparameters from the GGUF metadata, and weights dequantized on
    first use, kept as float64 numpy arrays shaped (out, in) (float64 so the
    matrix products run in BLAS without a per-call conversion)."""

    def __init__(self, path):
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self._weights = {}
        arch = self.meta("general.architecture")
        if arch not in ARCHS:
            raise ValueError(f"{path}: architecture {arch!r}, the reference knows {', '.join(ARCHS)}")
        self.arch = arch
        self.flags = ARCHS[arch]
        self.dim = self.meta(f"{arch}.embedding_length")
        self.n_layers = self.meta(f"{arch}.block_count")
        self.n_heads = self.meta(f"{arch}.attention.head_count")
        self.n_kv_heads = self.meta(f"{arch}.attention.head_count_kv", self.n_heads)
        self.head_dim = self.meta(f"{arch}.attention.key_length", self.dim // self.n_heads)
        self.rope_dim = self.meta(f"{arch}.rope.dimension_count", self.head_dim)
        self.rope_base = float(self.meta(f"{arch}.rope.freq_base", 10000.0))
        self.eps = float(self.meta(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5))
        self.n_vocab = self.tensors["token_embd.weight"].shape[1]
        self.window = self.meta(f"{arch}.attention.sliding_window") if "swa" in self.flags else 0
        scaling = self.meta(f"{arch}.rope.scaling.type", "none")
        if scaling not in ("none",):
            raise ValueError(f"{path}: rope scaling {scaling!r} is not implemented in the reference")

    def layer_window(self, layer):
        """(sliding window or 0, RoPE base) of a layer."""
        if "swa" in self.flags:
            period, local_base = self.flags["swa"]
            if (layer + 1) % period:
                return self.window, local_base
        return 0, self.rope_base

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


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def rope_neox(x, positions, rope_dim, base):
    """HF's rotate_half RoPE: pairs (x[i], x[i + rope_dim/2]) rotate by
    pos * base^(-2i/rope_dim)."""
    out = x.copy()
    half = rope_dim // 2
    inv_freq = base ** (-np.arange(0, rope_dim, 2, dtype=np.float64) / rope_dim)
    angle = positions[:, None].astype(np.float64) * inv_freq[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    x0, x1 = x[..., :half], x[..., half:rope_dim]
    out[..., :half] = x0 * cos - x1 * sin
    out[..., half:rope_dim] = x0 * sin + x1 * cos
    return out


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


def attention(q, k, v, n_heads, n_kv_heads, window=0):
    """Causal attention with grouped KV heads: query head h reads KV head
    h // (n_heads / n_kv_heads). q: (T, n_heads, hd), k and v: (T, n_kv, hd).
    window > 0: position t sees only positions t - window + 1 .. t."""
    n_tokens, _, head_dim = q.shape
    group = n_heads // n_kv_heads
    k = np.repeat(k, group, axis=1)  # KV head j serves query heads j*group .. j*group+group-1
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(head_dim)
    t, s = np.arange(n_tokens)[:, None], np.arange(n_tokens)[None, :]
    hidden = (s > t) | ((t - s >= window) if window > 0 else False)
    scores = np.where(hidden[None], -np.inf, scores)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", scores, v)


def forward_hidden(model, tokens):
    """The final-normed hidden states (n_tokens, dim) float64, the input of
    the output head."""
    m = model
    f = m.flags
    tokens = np.asarray(tokens, dtype=np.int64)
    n_tokens = len(tokens)
    positions = np.arange(n_tokens)
    x = m.weight("token_embd.weight")[tokens]
    if f.get("embd_scale"):
        x = x * np.sqrt(m.dim)
    rotate = rope_neox if f.get("neox") else rope
    for layer in range(m.n_layers):
        p = f"blk.{layer}."
        window, base = m.layer_window(layer)
        h = rmsnorm(x, m.weight(p + "attn_norm.weight"), m.eps)
        q, k, v = (h @ m.weight(p + f"attn_{n}.weight").T for n in "qkv")
        if f.get("qkv_bias"):
            q, k, v = (y + m.weight(p + f"attn_{n}.bias") for y, n in zip((q, k, v), "qkv"))
        q = q.reshape(n_tokens, m.n_heads, m.head_dim)
        k = k.reshape(n_tokens, m.n_kv_heads, m.head_dim)
        v = v.reshape(n_tokens, m.n_kv_heads, m.head_dim)
        if f.get("qk_norm"):
            q = rmsnorm(q, m.weight(p + "attn_q_norm.weight"), m.eps)
            k = rmsnorm(k, m.weight(p + "attn_k_norm.weight"), m.eps)
        q = rotate(q, positions, m.rope_dim, base)
        k = rotate(k, positions, m.rope_dim, base)
        att = attention(q, k, v, m.n_heads, m.n_kv_heads, window).reshape(n_tokens, m.n_heads * m.head_dim)
        out = att @ m.weight(p + "attn_output.weight").T
        if f.get("post_norm"):
            out = rmsnorm(out, m.weight(p + "post_attention_norm.weight"), m.eps)
        x = x + out
        h = rmsnorm(x, m.weight(p + "ffn_norm.weight"), m.eps)
        gate = h @ m.weight(p + "ffn_gate.weight").T
        up = h @ m.weight(p + "ffn_up.weight").T
        out = ((gelu_tanh if f.get("gelu") else silu)(gate) * up) @ m.weight(p + "ffn_down.weight").T
        if f.get("post_norm"):
            out = rmsnorm(out, m.weight(p + "post_ffw_norm.weight"), m.eps)
        x = x + out
    return rmsnorm(x, m.weight("output_norm.weight"), m.eps)


def forward(model, tokens):
    """Logits (n_tokens, n_vocab) float64 for every position of tokens."""
    return forward_hidden(model, tokens) @ model.output_weight().T


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
