"""Shared paths and skip rules for the Python tests.

Missing inputs (shared test data, the real model, the C dump_logits helper)
skip a test, except under CI=true where they fail it: CI must never pass by
skipping.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("GENLOOP_SOURCE") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(Path(__file__).resolve().parent))  # so tests can import reference

import reference  # noqa: E402


def in_ci():
    return os.environ.get("CI") in ("true", "1")


def skip_or_fail(reason):
    if in_ci():
        pytest.fail(f"{reason} (CI=true forbids skipping)")
    pytest.skip(reason)


def build_dir():
    build = Path(os.environ.get("GENLOOP_BUILD", "build"))
    return build if build.is_absolute() else SOURCE_DIR / build


def load_script(name):
    """Import scripts/<name>.py as a module (scripts/ is not a package)."""
    path = SOURCE_DIR / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def make_tiny_gguf():
    return load_script("make_tiny_gguf")


@pytest.fixture(scope="session")
def testdata_dir():
    path = Path(os.environ.get("GENLOOP_TESTDATA") or SOURCE_DIR.parent / "shared" / "testdata")
    if not path.is_dir():
        skip_or_fail(f"test data folder {path} is missing")
    return path


@pytest.fixture(scope="session")
def stories260k(testdata_dir):
    path = testdata_dir / "models" / "stories260K.gguf"
    if not path.is_file():
        skip_or_fail(f"{path} is missing")
    return path


@pytest.fixture(scope="session")
def smollm():
    path = Path(os.environ.get("GENLOOP_MODEL") or SOURCE_DIR / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not path.is_file():
        skip_or_fail(f"model {path} is missing (set GENLOOP_MODEL or run scripts/fetch-model)")
    return path


# The models scripts/fetch-model knows beside the default: name -> file in models/.
EXTRA_MODELS = {
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct.gguf",
}


def fetched_model(name):
    """Path of a model scripts/fetch-model NAME puts in models/ (scripts/test
    fetches them all, so CI never skips)."""
    path = SOURCE_DIR / "models" / EXTRA_MODELS[name]
    if not path.is_file():
        skip_or_fail(f"model {path} is missing (run scripts/fetch-model {name})")
    return path


@pytest.fixture(scope="session")
def gemma3():
    return fetched_model("gemma3-270m")


@pytest.fixture(scope="session")
def qwen2():
    return fetched_model("qwen2.5-coder-0.5b")


class DumpLogits:
    """Runs the engine's tests/dump_logits and reads its n_tokens x n_vocab output."""

    def __init__(self, exe, tmp_dir):
        self.exe = exe
        self.tmp_dir = tmp_dir
        self.runs = 0

    def __call__(self, model, tokens, decode=False, activation_bits=16):
        self.runs += 1
        out = self.tmp_dir / f"logits{self.runs}.f32"
        cmd = [str(self.exe)] + (["--decode"] if decode else []) + ["--activation-bits", str(activation_bits)]
        cmd += [str(model), str(out)] + [str(t) for t in tokens]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode == 77:
            skip_or_fail(f"{self.exe} reports it cannot run yet (exit 77): {proc.stderr.strip()}")
        assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}"
        return reference.read_logits(out, len(tokens))


@pytest.fixture(scope="session")
def dump_logits(tmp_path_factory):
    exe = build_dir() / "tests" / "dump_logits"
    if not os.access(exe, os.X_OK):
        skip_or_fail(f"{exe} is not built (set GENLOOP_BUILD to the meson build folder)")
    return DumpLogits(exe, tmp_path_factory.mktemp("dump_logits"))


def compare_logits(got, want, label=""):
    """(max |diff|, max |diff| / max(1, max |want|), passed). The tolerance is
    max |diff| <= 1e-3 * max(1, max |logit|) over every logit of every
    position: float32 engine math against a float64 reference on the same
    dequantized weights stays far inside it, while a real bug (pairing the
    wrong RoPE dims, a wrong GQA head, a missing mask) moves logits by O(1)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{label}: shape {got.shape} != reference {want.shape}"
    scale = max(1.0, float(np.abs(want).max()))
    max_abs = float(np.abs(got - want).max())
    rel = max_abs / scale
    print(f"{label}: max|diff| {max_abs:.3e}, max|logit| {np.abs(want).max():.3f}, relative {rel:.3e}")
    return max_abs, rel, rel <= 1e-3
