#!/usr/bin/env python3
"""Write tokenizer test vectors for a real model with Hugging Face's tokenizer
built from the GGUF's own metadata (transformers' GGUF converters: the same
vocabulary, merges and pre-tokenizer as the model's tokenizer.json).

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
from transformers.integrations.ggml import GGUF_TO_FAST_CONVERTERS, GGUF_TOKENIZER_MAPPING

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
    reader = gguf.GGUFReader(path)
    names = GGUF_TOKENIZER_MAPPING["tokenizer"]
    fields = {names[k[len("tokenizer."):]]: f.contents() for k, f in reader.fields.items()
              if k.startswith("tokenizer.") and k[len("tokenizer."):] in names}
    arch = reader.fields["general.architecture"].contents()
    return GGUF_TO_FAST_CONVERTERS[arch](fields).converted()


def main(argv):
    tok = hf_tokenizer(argv[1])
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]
    with open(argv[2], "w") as out:
        json.dump({"source": "transformers 4.56.2 GGUF converter + tokenizers 0.22.1", "cases": cases}, out,
                  ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
