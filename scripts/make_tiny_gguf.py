#!/usr/bin/env python3
"""Write a random-weight GGUF (v3) for tests and benchmarks.

    make_tiny_gguf.py OUT.gguf --type Q4_0 [--dim 256 --n-layers 2 --n-heads 4
        --n-kv-heads 2 --ff 512 --vocab 300 --ctx 256 --seed 1 --tied|--untied
        --output-type Q6_K --rope-base 10000]
    make_tiny_gguf.py OUT.gguf --preset tinyllama --type Q4_0
    make_tiny_gguf.py OUT.gguf --arch qwen3 --head-dim 64 [--omit KEY_OR_TENSOR]
    make_tiny_gguf.py OUT.gguf --arch qwen3 --chat-template qwen3.jinja \
        --control-token '<|im_start|>' --control-token '<|im_end|>' --user-token '<think>' \
        --user-token '</think>' --eos-token '<|im_end|>'

--arch picks the architecture (llama, qwen2, qwen3, gemma3) and with it the
extra tensors: q/k/v biases (qwen2), per-head Q/K norms (qwen3, gemma3),
post-attention and post-FFN norms and attention.sliding_window (gemma3).
--omit leaves out a metadata key or a tensor and --wrong-shape gives a
tensor one row too many (or a norm one column too many), for the
bad-input tests. --chat-template writes tokenizer.chat_template from a file;
--control-token and --user-token append special tokens (control: parsed
only as specials; user-defined: always whole, text when decoded), taking
the last filler pieces' places; --eos-token makes one of them the EOS.

Tensor names and shapes are llama.cpp's (ne[0] is a matrix's input size).
Quantized matrices are random quant bytes written directly, with the scale
fields chosen so the dequantized weights have a standard deviation near
1/sqrt(fan_in): activations then stay O(1) through any number of layers.
The tokenizer is a minimal SentencePiece ("llama") vocabulary: <unk>, <s>,
</s>, the 256 byte tokens, then filler pieces up to the vocabulary size.
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

PRESETS = {
    # llama2.c's stories110M shapes
    "stories110M": dict(dim=768, n_layers=12, n_heads=12, n_kv_heads=12, ff=2048, vocab=32000, ctx=1024),
    # TinyLlama-1.1B shapes
    "tinyllama": dict(dim=2048, n_layers=22, n_heads=32, n_kv_heads=4, ff=5632, vocab=32000, ctx=2048),
}

FLOAT_TYPES = ("F32", "F16", "BF16")
QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


def f16_bytes(values):
    """(n,) floats -> (n, 2) uint8 of little-endian halves."""
    return np.asarray(values, dtype="<f2").view(np.uint8).reshape(-1, 2)


def pack_k4_scales(sc, mn):
    """Pack 8 six-bit scales and mins per block the way Q4_K/Q5_K store them:
    bytes 0-3 and 4-7 hold scales/mins 0-3 plus the top 2 bits of 4-7,
    bytes 8-11 hold the low nibbles of scales 4-7 (low) and mins 4-7 (high)."""
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = sc[:, 0:4] | (sc[:, 4:8] >> 4) << 6
    out[:, 4:8] = mn[:, 0:4] | (mn[:, 4:8] >> 4) << 6
    out[:, 8:12] = (sc[:, 4:8] & 0xF) | (mn[:, 4:8] & 0xF) << 4
    return out


# Per type: the f16 scale fields as (byte offset, value at unit scale). All
# of a block's scale fields are multiplied by one factor, which scales every
# dequantized value by that factor; the "min" fields are set so that blocks
# are centred around zero.
SCALE_FIELDS = {
    "Q4_0": [(0, 1.0)],
    "Q4_1": [(0, 1.0), (2, -7.5)],   # q * d + m, q in 0..15
    "Q5_0": [(0, 1.0)],
    "Q5_1": [(0, 1.0), (2, -15.5)],  # q in 0..31
    "Q8_0": [(0, 1.0)],
    "Q2_K": [(80, 1.0), (82, 1.5)],  # d*sc*q - dmin*m with m = sc, q in 0..3
    "Q3_K": [(108, 1.0)],
    "Q4_K": [(0, 1.0), (2, 7.5)],    # m = sc, q in 0..15
    "Q5_K": [(0, 1.0), (2, 15.5)],   # m = sc, q in 0..31
    "Q6_K": [(208, 1.0)],
}


def random_quant(qtype, n_rows, n_cols, std, rng):
    """Random blocks of a quantized type, shape (n_rows, row_bytes) uint8."""
    gtype = T[qtype]
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[gtype]
    n_blocks = n_rows * n_cols // block_size
    blocks = np.frombuffer(rng.bytes(n_blocks * block_bytes), dtype=np.uint8).reshape(n_blocks, block_bytes).copy()

    # Sub-block scales: keep the structure that centres each sub-block.
    if qtype == "Q2_K":
        sc = blocks[:, 0:16] & 0xF
        blocks[:, 0:16] = sc | sc << 4  # min = scale
    elif qtype in ("Q4_K", "Q5_K"):
        sc = rng.integers(1, 64, size=(n_blocks, 8), dtype=np.uint8)
        blocks[:, 4:16] = pack_k4_scales(sc, sc)
    elif qtype == "Q6_K":  # int8 scales; keep them small so d stays a normal half
        blocks[:, 192:208] = rng.integers(-32, 32, size=(n_blocks, 16), dtype=np.int8).view(np.uint8)

    fields = SCALE_FIELDS[qtype]
    for off, base in fields:
        blocks[:, off:off + 2] = f16_bytes(np.full(n_blocks, base))

    # Measure the spread at unit scale on a sample, then pick each block's factor.
    sample = gguf.quants.dequantize(blocks[:min(n_blocks, 64)], gtype)
    unit_std = float(np.sqrt(np.mean(np.square(sample, dtype=np.float64))))
    factor = (std / unit_std) * rng.uniform(0.5, 1.5, size=n_blocks)
    for off, base in fields:
        blocks[:, off:off + 2] = f16_bytes(base * factor)
    return blocks.reshape(n_rows, n_cols // block_size * block_bytes)


def random_tensor(ttype, n_rows, n_cols, std, rng):
    """(array to write, raw_dtype or None) for an n_rows x n_cols matrix."""
    if ttype in QUANT_TYPES:
        return random_quant(ttype, n_rows, n_cols, std, rng), T[ttype]
    w = rng.standard_normal((n_rows, n_cols), dtype=np.float32) * np.float32(std)
    if ttype == "F32":
        return w, None
    if ttype == "F16":
        return w.astype(np.float16), None
    # BF16: round to nearest even on the top 16 bits of the float
    bits = w.view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype("<u2").view(np.uint8).reshape(n_rows, n_cols * 2), T.BF16


def tensor_nbytes(ttype, n_rows, n_cols):
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[T[ttype]]
    return n_rows * n_cols // block_size * block_bytes


def vocab_pieces(n_vocab):
    """Tokens, scores and token types of the minimal SentencePiece vocabulary."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(tokens) < n_vocab:  # "▁a", "▁b", ..., "▁ba", ...: all distinct
        word, k = "", i
        while True:
            word = letters[k % 26] + word
            k = k // 26 - 1
            if k < 0:
                break
        tokens.append("\u2581" + word)
        types.append(gguf.TokenType.NORMAL)
        i += 1
    if n_vocab < len(tokens):
        raise SystemExit(f"--vocab must be at least {len(tokens)}")
    scores = [0.0] * 259 + [-float(i) for i in range(n_vocab - 259)]
    return tokens, scores, [int(t) for t in types]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--type", default="Q4_0", choices=FLOAT_TYPES + QUANT_TYPES, help="type of the matrices")
    ap.add_argument("--output-type", default=None, choices=FLOAT_TYPES + QUANT_TYPES,
                    help="type of output.weight (default: Q6_K for quantized --type, like llama.cpp, else --type)")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="real model shapes (flags after it still win)")
    ap.add_argument("--dim", type=int)
    ap.add_argument("--n-layers", type=int)
    ap.add_argument("--n-heads", type=int)
    ap.add_argument("--n-kv-heads", type=int)
    ap.add_argument("--ff", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--eps", type=float, default=1e-5, help="RMSNorm epsilon")
    tie = ap.add_mutually_exclusive_group()
    tie.add_argument("--tied", dest="tied", action="store_true", help="no output.weight: logits use token_embd")
    tie.add_argument("--untied", dest="tied", action="store_false")
    ap.set_defaults(tied=False)
    ap.add_argument("--arch", default="llama", help="llama, qwen2, qwen3, gemma3 (another name writes llama's tensors)")
    ap.add_argument("--head-dim", type=int, help="attention.key_length (default dim / n_heads)")
    ap.add_argument("--sliding-window", type=int, default=8, help="gemma3's attention.sliding_window")
    ap.add_argument("--omit", action="append", default=[], help="metadata key or tensor to leave out")
    ap.add_argument("--wrong-shape", action="append", default=[], help="tensor to write with a wrong shape")
    ap.add_argument("--chat-template", help="file whose text becomes tokenizer.chat_template")
    ap.add_argument("--control-token", action="append", default=[], help="append a control token")
    ap.add_argument("--user-token", action="append", default=[], help="append a user-defined token")
    ap.add_argument("--eos-token", help="text of the EOS token (one of the appended ones)")
    args = ap.parse_args(argv)

    shape = dict(dim=256, n_layers=2, n_heads=4, n_kv_heads=2, ff=512, vocab=300, ctx=256)
    if args.preset:
        shape.update(PRESETS[args.preset])
    for key in shape:
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)
    dim, n_layers, n_heads, n_kv_heads, ff, n_vocab, ctx = (
        shape[k] for k in ("dim", "n_layers", "n_heads", "n_kv_heads", "ff", "vocab", "ctx"))
    if (dim % n_heads and not args.head_dim) or n_heads % n_kv_heads:
        raise SystemExit("dim must be a multiple of n_heads (or give --head-dim), and n_heads of n_kv_heads")
    arch = args.arch
    head_dim = args.head_dim or dim // n_heads
    q_dim = n_heads * head_dim
    kv_dim = n_kv_heads * head_dim
    mtype = args.type
    otype = args.output_type or ("Q6_K" if mtype in QUANT_TYPES else mtype)
    for t in (mtype, otype):
        block = gguf.GGML_QUANT_SIZES[T[t]][0]
        if dim % block or ff % block:
            raise SystemExit(f"{t} needs dim and ff to be multiples of {block}")

    # (name, type, n_rows = ne[1], n_cols = ne[0], std); norms are 1-D
    tensors = [("token_embd.weight", mtype, n_vocab, dim, 1 / np.sqrt(dim))]
    for i in range(n_layers):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", "F32", None, dim, None),
            (p + "attn_q.weight", mtype, q_dim, dim, 1 / np.sqrt(dim)),
            (p + "attn_k.weight", mtype, kv_dim, dim, 1 / np.sqrt(dim)),
            (p + "attn_v.weight", mtype, kv_dim, dim, 1 / np.sqrt(dim)),
            (p + "attn_output.weight", mtype, dim, q_dim, 1 / np.sqrt(q_dim)),
            (p + "ffn_norm.weight", "F32", None, dim, None),
            (p + "ffn_gate.weight", mtype, ff, dim, 1 / np.sqrt(dim)),
            (p + "ffn_up.weight", mtype, ff, dim, 1 / np.sqrt(dim)),
            (p + "ffn_down.weight", mtype, dim, ff, 1 / np.sqrt(ff)),
        ]
        if arch == "qwen2":  # biases: 1-D F32, std given as the last field
            tensors += [(p + f"attn_{n}.bias", "F32", None, d, 0.5) for n, d in (("q", q_dim), ("k", kv_dim), ("v", kv_dim))]
        if arch in ("qwen3", "gemma3"):
            tensors += [(p + "attn_q_norm.weight", "F32", None, head_dim, None),
                        (p + "attn_k_norm.weight", "F32", None, head_dim, None)]
        if arch == "gemma3":
            tensors += [(p + "post_attention_norm.weight", "F32", None, dim, None),
                        (p + "post_ffw_norm.weight", "F32", None, dim, None)]
    tensors.append(("output_norm.weight", "F32", None, dim, None))
    if not args.tied:
        tensors.append(("output.weight", otype, n_vocab, dim, 1 / np.sqrt(dim)))

    tensors = [t for t in tensors if t[0] not in args.omit]
    for name in args.wrong_shape:
        i = [t[0] for t in tensors].index(name)
        n, ttype, n_rows, n_cols, std = tensors[i]
        tensors[i] = (n, ttype, None, n_cols + 1, std) if n_rows is None else (n, ttype, n_rows + 1, n_cols, std)

    w = gguf.GGUFWriter(args.out, arch)
    w.add_name(f"genloop random {args.preset or 'tiny'} {arch} {mtype}")
    u32 = {"context_length": ctx, "embedding_length": dim, "block_count": n_layers, "feed_forward_length": ff,
           "attention.head_count": n_heads, "attention.head_count_kv": n_kv_heads,
           "rope.dimension_count": head_dim, "vocab_size": n_vocab}
    if args.head_dim:
        u32["attention.key_length"] = u32["attention.value_length"] = head_dim
    if arch == "gemma3":
        u32["attention.sliding_window"] = args.sliding_window
    f32 = {"attention.layer_norm_rms_epsilon": args.eps, "rope.freq_base": args.rope_base}
    for key, value in u32.items():
        if f"{arch}.{key}" not in args.omit:
            w.add_uint32(f"{arch}.{key}", value)
    for key, value in f32.items():
        if f"{arch}.{key}" not in args.omit:
            w.add_float32(f"{arch}.{key}", value)
    tokens, scores, types = vocab_pieces(n_vocab)
    added = [(t, gguf.TokenType.CONTROL) for t in args.control_token] + \
            [(t, gguf.TokenType.USER_DEFINED) for t in args.user_token]
    if added and len(added) > n_vocab - 259:
        raise SystemExit("--vocab has no room for the appended tokens")
    for k, (text, ttype) in enumerate(added):
        i = n_vocab - len(added) + k
        tokens[i], types[i], scores[i] = text, int(ttype), 0.0
    if args.chat_template:
        with open(args.chat_template, encoding="utf-8") as f:
            w.add_chat_template(f.read())
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(tokens.index(args.eos_token) if args.eos_token else 2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    # Announce every tensor first, then generate and stream them one at a
    # time so the big presets never hold more than one tensor in memory.
    for name, ttype, n_rows, n_cols, _ in tensors:
        if n_rows is None:
            w.add_tensor_info(name, (n_cols,), np.dtype(np.float32), n_cols * 4)
        else:
            nbytes = tensor_nbytes(ttype, n_rows, n_cols)
            if ttype in ("F32", "F16"):
                w.add_tensor_info(name, (n_rows, n_cols), np.dtype(np.float32 if ttype == "F32" else np.float16), nbytes)
            else:
                w.add_tensor_info(name, (n_rows, nbytes // n_rows), np.dtype(np.uint8), nbytes, raw_dtype=T[ttype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(args.seed)
    for name, ttype, n_rows, n_cols, std in tensors:
        if n_rows is None and std is not None:  # biases
            data = (std * rng.standard_normal(n_cols)).astype(np.float32)
        elif n_rows is None:  # norm weights around 1
            data = (1 + 0.1 * rng.standard_normal(n_cols)).astype(np.float32)
        else:
            data, _ = random_tensor(ttype, n_rows, n_cols, std, rng)
        w.write_tensor_data(data)
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
