#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<target>/ (run once; the
outputs are checked in). Each seed is small: libFuzzer caps mutated inputs
near the largest seed, and small inputs run fast.

    tests/fuzz/make_corpus.py [--smollm PATH/SmolLM2-135M-Instruct.Q4_1.gguf]

The GGUF seeds are built here with the gguf package: every key type
(scalars, string, arrays of scalars/strings, a nested array), tensors of
several types, and vocab-only files for each tokenizer kind so the
tokenizer loader is reached from fuzz_gguf. With --smollm, SmolLM2's chat
template becomes a fuzz_chat_template seed."""
import argparse
import json
import os
import struct

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def write_gguf(name, fill):
    path = os.path.join(CORPUS, "fuzz_gguf", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, "llama")
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert os.path.getsize(path) < 64 * 1024, name


def all_kinds(w):
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "caf\u00e9")
    w.add_array("t.arr_i32", [1, 2, 3])
    w.add_array("t.arr_f32", [0.5, 1.5])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.arr_arr", [[1, 2], [3]])
    w.add_uint32("general.alignment", 32)
    w.add_tensor("a.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.add_tensor("b.weight", np.ones((3,), dtype=np.float16))
    w.add_tensor("c.weight", np.zeros((1, 34), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def spm_vocab(w):
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    toks += ["\u2581", "\u2581a", "\u2581the", "he", "llo", "\u2581hello", "<|user|>"]
    scores = [0.0] * len(toks)
    types = [2, 3, 3] + [6] * 256 + [1] * 6 + [4]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_space_prefix(True)


def bpe_vocab(pre):
    def fill(w):
        # GPT-2's byte-to-unicode map: printable bytes stand for themselves.
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b); cs.append(256 + n); n += 1
        byte_chars = [chr(c) for c in cs]
        toks = byte_chars + ["\u0120t", "he", "\u0120the", "ll", "<|im_start|>", "<|im_end|>"]
        types = [1] * (len(toks) - 2) + [3, 3]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(toks)
        w.add_token_types(types)
        w.add_token_merges(["\u0120 t", "h e", "\u0120t he", "l l"])
        w.add_bos_token_id(len(toks) - 2)
        w.add_eos_token_id(len(toks) - 1)
    return fill


def bert_vocab(w):
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "##s", ",", "a"]
    w.add_tokenizer_model("bert")
    w.add_token_list(toks)
    w.add_token_types([3, 2, 3, 3, 1, 1, 1, 1, 1])
    w.add_uint32("tokenizer.ggml.cls_token_id", 2)
    w.add_uint32("tokenizer.ggml.seperator_token_id", 3)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 1)


def gguf_seeds():
    write_gguf("all_kinds.gguf", all_kinds)
    write_gguf("vocab_spm.gguf", spm_vocab)
    write_gguf("vocab_bpe_smollm.gguf", bpe_vocab("smollm"))
    write_gguf("vocab_bpe_gpt2.gguf", bpe_vocab("gpt2"))
    write_gguf("vocab_bert.gguf", bert_vocab)
    # Header only (v3 and v2), no keys, no tensors.
    put("fuzz_gguf", "empty_v3.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    put("fuzz_gguf", "empty_v2.gguf", b"GGUF" + struct.pack("<IQQ", 2, 0, 0))


TEXTS = [
    "Hello world",
    " leading space and  double  spaces\n\ttabs",
    "caf\u00e9 na\u00efve \u00fcber \u4f60\u597d \U0001f600",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<s> [INST] hi [/INST]",
    "numbers 1234567 3.14 and code: for (int i = 0; i < n; i++) {}",
    "\u0645\u0631\u062d\u0628\u0627 \u0928\u092e\u0938\u094d\u0924\u0947 \uc548\ub155",
    "I'm don't we'll ABC's",
]


def tokenizer_seeds():
    # byte 0: vocab (low 2 bits) and mode (high nibble: 0 encode, 1 encode+special, 2 decode)
    for i, text in enumerate(TEXTS):
        for vocab in range(4):
            mode = (i + vocab) % 2
            put("fuzz_tokenizer", "text_%d_%d" % (i, vocab), bytes([mode << 4 | vocab]) + text.encode())
    put("fuzz_tokenizer", "bad_utf8", bytes([0]) + b"ok \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82")
    for vocab in range(4):
        ids = struct.pack("<8I", 0, 1, 2, 3, 100, 200, 300, 1000)
        put("fuzz_tokenizer", "ids_%d" % vocab, bytes([2 << 4 | vocab]) + ids)


REQUESTS = [
    {"prompt": "Once upon a time", "max_tokens": 8},
    {"model": "stories260K", "prompt": ["a", "b"], "n": 2, "temperature": 0.7, "top_p": 0.9,
     "stream": True, "stream_options": {"include_usage": True}},
    {"prompt": [1, 2, 3, 4], "logprobs": 3, "echo": True, "max_tokens": 0},
    {"prompt": [[1, 2], [3]], "stop": ["\n", "The"], "seed": 42, "logit_bias": {"5": -100, "7": 3.5}},
    {"prompt": "x", "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
     "presence_penalty": -1.5, "frequency_penalty": 2, "user": "u", "best_of": 1, "suffix": None},
    {"prompt": "<s>hi</s>", "stop": "end", "max_tokens": None, "temperature": None},
    {"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 5},
    {"prompt": "\u00e9\u4f60\U0001f600", "stream": False, "n": 1e300, "seed": -9007199254740992},
]


def request_seeds():
    for i, r in enumerate(REQUESTS):
        put("fuzz_request", "req_%d.json" % i, json.dumps(r))
    put("fuzz_request", "escapes.json", '{"prompt":"\\ud83d\\ude00 \\u0000 \\ud800","stop":["\\n"]}')
    put("fuzz_request", "not_object.json", '[1, "two", null, true, 1.5e-3]')
    # the hostile inputs of tests/py/test_hostile.py (issue 20)
    hostile = {
        "nul": b'{"prompt":"Once upon\x00 a time","echo":true,"max_tokens":1}',
        "bad_utf8_key": b'{"prompt":"x","\xff":1}',
        "bad_utf8_model": b'{"prompt":"x","model":"m\xff"}',
        "logit_bias_cut": ('{"prompt":"x","logit_bias":{"%s":1}}' % ("a" * 31 + "\u20ac")).encode(),
        "trailing": b'{"prompt":"x"}{"prompt":"y"} xyz',
        "surrogates": b'{"prompt":["\\ud800","\\udc00x","\xed\xa0\x80","\\ud83d\\ude00"]}',
        "numbers": b'{"prompt":[9223372036854775808],"temperature":1e999,"seed":9223372036854775808,'
                   b'"n":-0,"top_k":1e-400,"max_tokens":1.5}',
        "nesting": b'{"prompt":' + b"[" * 200 + b"]" * 200 + b',"stop":[[[["a"]]]]}',
        "long_key": ('{"prompt":"x","%s":1}' % ("\u20ac" * 40)).encode(),
    }
    for name, data in hostile.items():
        put("fuzz_request", "hostile_%s.json" % name, data)


CHATML_LIKE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
               "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
JINJA_BITS = ("{%- set ns = namespace(n=0) -%}{%- for m in messages if m.role != 'system' -%}"
              "{%- set ns.n = ns.n + 1 -%}{{ loop.index0 ~ ':' ~ m.content | trim | upper }}"
              "{%- if not loop.last %}, {% endif -%}{%- endfor -%}"
              "{{ ' total=' ~ ns.n ~ ' ' ~ (messages | length) }}"
              "{% if messages[0]['role'] == 'system' %}{{ messages[0].content[:5] }}{% else %}"
              "{{ raise_exception('need a system message') }}{% endif %}"
              "{{ {'a': 1}.items() | list | tojson }}{{ range(3) | join('-') }}"
              "{# comment #}{{ 'x'.startswith('x') and 'abc'.split('b')[1] }}")


def chat_seeds(smollm):
    msgs = b"system\0Be brief.\0user\0Hello\0assistant\0Hi!\0user\0Bye"
    put("fuzz_chat_template", "chatml_like", b"\x80" + CHATML_LIKE.encode() + b"\0" + msgs)
    put("fuzz_chat_template", "jinja_bits", b"\x00" + JINJA_BITS.encode() + b"\0" + msgs)
    put("fuzz_chat_template", "builtin_override", b"\x83" + b"\0" + msgs)
    put("fuzz_chat_template", "no_source", b"\x00" + b"\0user\0\x01")
    if smollm:
        r = gguf.GGUFReader(smollm)
        f = r.fields["tokenizer.chat_template"]
        src = bytes(f.parts[f.data[0]])
        put("fuzz_chat_template", "smollm2", b"\x80" + src + b"\0" + msgs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm")
    a = ap.parse_args()
    gguf_seeds()
    tokenizer_seeds()
    request_seeds()
    chat_seeds(a.smollm)


if __name__ == "__main__":
    main()
