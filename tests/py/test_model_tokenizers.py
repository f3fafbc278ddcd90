"""Tokenization of the real models' vocabularies against test vectors:
Qwen2.5 (byte-level BPE, pre-tokenizer qwen2) from Hugging Face's tokenizer
built from the GGUF metadata, Gemma 3 (SentencePiece BPE, 262144 pieces)
from the independent encoder tests/py/spm_bpe.py (transformers' converter
makes a Unigram model of it, which is not Gemma's tokenizer). Written by
tests/py/make_tokenizer_vectors.py; the special tokens in the text are
parsed, as Hugging Face's encode does; the model's BOS is not counted."""
import json
from pathlib import Path
import subprocess

import pytest

from conftest import build_dir, fetched_model

VECTORS = Path(__file__).parent / "vectors"
MODELS = {"gemma3-270m": ("gemma3-270m.json", 2), "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b.json", None)}


@pytest.mark.parametrize("name", list(MODELS))
def test_tokenizer_matches_vectors(name):
    path = fetched_model(name)
    file, bos = MODELS[name]
    data = json.loads((VECTORS / file).read_text())
    failures = []
    for case in data["cases"]:
        out = subprocess.run([str(build_dir() / "genloop"), "tokenize", "-m", str(path), "-p", case["text"], "--ids"],
                             capture_output=True, text=True, timeout=120, check=True)
        ids = json.loads(out.stdout)
        if bos is not None:
            assert ids[:1] == [bos], ids
            ids = ids[1:]
        if ids != case["ids"]:
            failures.append((case["text"], ids, case["ids"]))
    assert not failures, failures
    assert len(data["cases"]) >= 15
