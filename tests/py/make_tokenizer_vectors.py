#!/usr/bin/env python3
"""Write tokenizer test vectors for a real model: byte-level BPE (qwen2) with
Hugging Face's tokenizer built from the GGUF's own metadata (transformers'
GGUF converters: the same vocabulary, merges and pre-tokenizer as the
model's tokenizer.json); SentencePiece (Gemma 3) with the independent
encoder in spm_bpe.py.

    PYTHONPATH=DIR python3 tests/py/make_tokenizer_vectors.py MODEL.gguf OUT.json

DIR holds transformers 4.56.2, tokenizers 0.22.1 and huggingface-hub 0.35.3
(pip install --no-deps --target DIR ...): transformers 5 dropped the GGUF
tokenizer converters. Not needed to run the tests, which read OUT.json.
Only for byte-level BPE vocabularies (qwen2): the converter rebuilds
SentencePiece vocabularies as Unigram models, which do not tokenize as the
models' own BPE tokenizers do.
"""
import json
import sys

import gguf

import spm_bpe

TEXTS = [
    "Hello world!",
    " Hello world",
    "Hello  world   with   spaces",
    "\n\n\nnewlines\n \n\t tabs\t\t",
    "numbers 1 12 123 1234 12345 3.14159 1,000,000",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }",
    "I'm sure they'll say we've done it; you're right, it's theirs.",
    "Ünïcödé àccents, naïve café, Straße, İstanbul",
    "中文测试：你好，世界！日本語のテキスト。한국어 텍스트",
    "emoji 🙂🚀👍🏽 and symbols ∑∫√ → ← ©®",
    "Привет, мир! Γειά σου κόσμε! مرحبا بالعالم",
    "   leading and trailing spaces   ",
    "MixedCASE camelCase snake_case kebab-case SCREAMING_CASE",
    "URLs: https://example.com/path?query=1&x=y#frag and mail@example.org",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "A" * 50 + " " + "ab" * 40,
    "'''quotes''' \"double\" `back` «guillemets» „low“",
]


def hf_tokenizer(path):
    from transformers.integrations.ggml import GGUF_TO_FAST_CONVERTERS, GGUF_TOKENIZER_MAPPING

    reader = gguf.GGUFReader(path)
    names = GGUF_TOKENIZER_MAPPING["tokenizer"]
    fields = {names[k[len("tokenizer."):]]: f.contents() for k, f in reader.fields.items()
              if k.startswith("tokenizer.") and k[len("tokenizer."):] in names}
    arch = reader.fields["general.architecture"].contents()
    return GGUF_TO_FAST_CONVERTERS[arch](fields).converted()


def main(argv):
    kind = gguf.GGUFReader(argv[1]).fields["tokenizer.ggml.model"].contents()
    if kind == "llama":
        encode, source = spm_bpe.SpmBpe(argv[1]).encode, "tests/py/spm_bpe.py (SentencePiece BPE)"
    else:
        tok = hf_tokenizer(argv[1])
        encode = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
        source = "transformers 4.56.2 GGUF converter + tokenizers 0.22.1"
    cases = [{"text": t, "ids": encode(t)} for t in TEXTS]
    with open(argv[2], "w") as out:
        json.dump({"source": source, "cases": cases}, out, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
