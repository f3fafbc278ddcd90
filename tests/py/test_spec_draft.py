"""Speculative decoding with a draft model (--spec draft --model-draft FILE):
the target as its own draft (stories260K, SmolLM2) gives the same greedy
output and every proposal is accepted; a random-weight draft/target pair
with one vocabulary (scripts/make_tiny_gguf.py) gives the same output, greedy
and seeded sampling; a draft with another vocabulary is refused in one line
(generate, bench, serve); concurrent server requests match their
non-speculative twins."""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from server_util import Server, binary, chat_model, post_json, tiny_model


def generate(model, prompt, *args, rc=0):
    r = subprocess.run([binary(), "generate", "-m", model, "-p", prompt, "--temp", "0", "-t", "2", *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == rc, r.stderr
    return r.stdout, r.stderr


def spec_counts(err):
    line = [x for x in err.splitlines() if x.startswith("speculative:")][0]
    w = line.split()
    return int(w[1]), int(w[4])


@pytest.fixture(scope="module")
def pair(tmp_path_factory, make_tiny_gguf):
    """A target and a smaller draft with the same (generated) vocabulary but
    different random weights."""
    d = tmp_path_factory.mktemp("pair")
    target, draft = str(d / "target.gguf"), str(d / "draft.gguf")
    make_tiny_gguf.main([target, "--type", "F32", "--dim", "128", "--n-layers", "2", "--vocab", "300", "--seed", "1"])
    make_tiny_gguf.main([draft, "--type", "Q8_0", "--dim", "64", "--n-layers", "1", "--n-heads", "2",
                         "--n-kv-heads", "1", "--output-type", "Q8_0", "--vocab", "300", "--seed", "2"])
    return target, draft


@pytest.mark.parametrize("which", ["stories260K", "SmolLM2"])
@pytest.mark.parametrize("fixed", [True, False])
def test_self_draft_identical_and_all_accepted(which, fixed):
    model = tiny_model() if which == "stories260K" else chat_model()
    prompt = "Once upon a time, there was a little girl named Lily."
    n = "120" if which == "stories260K" else "48"
    # --ignore-eos: a draft past an end-of-sequence token is never verified
    off, _ = generate(model, prompt, "-n", n, "--ignore-eos")
    args = ["-n", n, "--ignore-eos", "--spec", "draft", "--model-draft", model] + (["--spec-fixed"] if fixed else [])
    on, err = generate(model, prompt, *args)
    assert on == off
    drafted, accepted = spec_counts(err)
    assert drafted > 0 and accepted == drafted, err


def test_random_pair_identical(pair):
    target, draft = pair
    for extra in ([], ["--temp", "0.8", "--seed", "7"]):
        off, _ = generate(target, "hello world", "-n", "80", "--ignore-eos", *extra)
        for k in ("1", "4", "16"):
            on, err = generate(target, "hello world", "-n", "80", "--ignore-eos", "--spec", "draft", "--model-draft",
                               draft, "--spec-fixed", "--spec-max-tokens", k, *extra)
            assert on == off, (k, extra)
            drafted, accepted = spec_counts(err)
            assert drafted > 0 and 0 <= accepted <= drafted
    # the target drafting for itself with early stops: partial acceptance, same output
    off, _ = generate(target, "hello world", "-n", "200")
    on, err = generate(target, "hello world", "-n", "200", "--spec", "draft", "--model-draft", target, "--spec-fixed")
    assert on == off


def test_mismatched_vocabulary_refused(pair):
    _, err = generate(tiny_model(), "hi", "--spec", "draft", "--model-draft", chat_model(), rc=1)
    assert "vocabulary differs from the target's (49152 vs 512 tokens)" in err and len(err.strip().splitlines()) == 1
    _, err = generate(tiny_model(), "hi", "--spec", "draft", "--model-draft", pair[1], rc=1)
    assert "vocabulary differs" in err, err
    r = subprocess.run([binary(), "bench", "-m", tiny_model(), "--spec", "draft", "--model-draft", chat_model()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "vocabulary differs" in r.stderr, r.stderr
    r = subprocess.run([binary(), "serve", "-m", tiny_model(), "--port", "0", "--spec", "draft", "--model-draft",
                        chat_model()], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "vocabulary differs from the target's" in r.stderr, r.stderr


def test_draft_mode_needs_a_file():
    _, err = generate(tiny_model(), "hi", "--spec", "draft", rc=1)
    assert "--model-draft" in err and len(err.strip().splitlines()) == 1, err
    r = subprocess.run([binary(), "serve", "-m", tiny_model(), "--spec", "draft"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "--model-draft" in r.stderr, r.stderr
    _, err = generate(tiny_model(), "hi", "--spec", "draft", "--model-draft", "/nonexistent.gguf", rc=1)
    assert "nonexistent" in err


@pytest.mark.parametrize("self_draft", [True, False])
def test_server_concurrent_identical(pair, self_draft):
    """12 requests at once with --max-seqs 4 (so they queue and mix),
    each with and without drafts: same text."""
    target, draft = pair
    if self_draft:
        model, dm, prompts = tiny_model(), tiny_model(), ["Once upon a time", "Lily and Tom", "The dog", "One day"]
    else:
        model, dm, prompts = target, draft, ["hello", "world", "a b c", "x"]
    with Server(model, "--spec", "draft", "--model-draft", dm, "--spec-fixed", "--max-seqs", "4", "-t", "2",
                "--kv-cache-mib", "1") as s:
        def one(job):
            prompt, spec = job
            status, _, r = post_json(s.url + "/v1/completions",
                                     {"prompt": prompt, "max_tokens": 100, "temperature": 0, "ignore_eos": True,
                                      "speculative": spec}, timeout=300)
            assert status == 200, r
            return r["choices"][0]["text"], r["timings"]["draft_n"], r["timings"]["draft_n_accepted"]
        jobs = [(p, spec) for p in prompts for spec in (True, False)] + [(p, True) for p in prompts[:2]]
        with ThreadPoolExecutor(len(jobs)) as ex:
            outs = list(ex.map(one, jobs))
    for i in range(0, 2 * len(prompts), 2):
        assert outs[i][0] == outs[i + 1][0]
        assert outs[i + 1][1] == 0
        assert outs[i][1] > 0
        if self_draft:
            assert outs[i][1] == outs[i][2]
    assert outs[-2][0] == outs[0][0] and outs[-1][0] == outs[2][0]
