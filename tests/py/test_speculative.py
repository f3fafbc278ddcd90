"""Speculative decoding (n-gram drafts): greedy output token for token the
same with and without it (CLI and a concurrent server, stories260K and
SmolLM2, structured output), the sampled output distribution unchanged
(chi-square over many seeds), the per-request opt-out, flags, metrics and
timings. The engine-level checks (preemption, stop strings, logprobs,
prefix cache, seeded sampling) are in tests/test_engine.c."""
import json
import math
import os
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from server_util import SOURCE, Server, binary, chat_model, metrics, post_json, tiny_model

PROMPTS = os.path.join(SOURCE, "scripts", "spec-prompts")


def prompt_text(name):
    with open(os.path.join(PROMPTS, name)) as f:
        return f.read()


def chatml(text):
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def generate(model, prompt, *args):
    r = subprocess.run([binary(), "generate", "-m", model, "-p", prompt, "--temp", "0", "-t", "2", *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


@pytest.mark.parametrize("which", ["stories260K", "SmolLM2"])
def test_cli_greedy_identical_with_and_without(which):
    if which == "stories260K":
        model, prompt, n = tiny_model(), "Once upon a time, there was a little girl named Lily.", "200"
    else:
        model, prompt, n = chat_model(), chatml(prompt_text("rename.txt")), "160"
    off, _ = generate(model, prompt, "-n", n, "--spec", "off")
    on, err = generate(model, prompt, "-n", n, "--spec", "ngram", "--spec-ngram-min", "1", "--spec-fixed")
    assert on == off
    drafted = [line for line in err.splitlines() if line.startswith("speculative:")]
    assert drafted and int(drafted[0].split()[1]) > 0, err


def test_cli_rejects_bad_spec_flags():
    for args, needle in ((["--spec", "bogus"], "--spec"), (["--spec-max-tokens", "17"], "--spec-max-tokens"),
                         (["--spec-ngram-min", "0"], "--spec-ngram-min")):
        r = subprocess.run([binary(), "generate", "-m", tiny_model(), "-p", "x", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and needle in r.stderr, r.stderr
    r = subprocess.run([binary(), "generate", "-m", tiny_model(), "-p", "x", "--spec", "ngram",
                        "--spec-ngram-min", "5", "--spec-ngram-max", "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "speculative" in r.stderr, r.stderr
    r = subprocess.run([binary(), "serve", "-m", "x", "--spec", "bogus"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "spec" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def smollm_server():
    with Server(chat_model(), "--spec", "ngram", "--spec-ngram-min", "1", "--spec-fixed", "--max-seqs", "8", "-t", "2") as s:
        yield s


def chat(url, content, **kw):
    status, _, r = post_json(url + "/v1/chat/completions",
                             {"messages": [{"role": "user", "content": content}], "temperature": 0, **kw},
                             timeout=600)
    assert status == 200, r
    return r


def test_server_concurrent_greedy_identical(smollm_server):
    """8 requests at once (input-grounded and free), each with and without
    drafts: same text; opted-out requests draft nothing; the metrics add up."""
    url = smollm_server.url
    before = metrics(url)
    jobs = []
    for name, n in (("rename.txt", 120), ("quote.txt", 80), ("extract.txt", 120), ("free.txt", 60)):
        for spec in (True, False):
            jobs.append((prompt_text(name), n, spec))
    with ThreadPoolExecutor(len(jobs)) as ex:
        outs = list(ex.map(lambda j: chat(url, j[0], max_tokens=j[1], speculative=j[2]), jobs))
    drafted = accepted = 0
    for i in range(0, len(jobs), 2):
        on, off = outs[i], outs[i + 1]
        assert on["choices"][0]["message"]["content"] == off["choices"][0]["message"]["content"]
        assert on["usage"] == off["usage"] or on["usage"]["completion_tokens"] == off["usage"]["completion_tokens"]
        assert off["timings"]["draft_n"] == 0 and off["timings"]["draft_n_accepted"] == 0
        assert 0 <= on["timings"]["draft_n_accepted"] <= on["timings"]["draft_n"]
        drafted += on["timings"]["draft_n"]
        accepted += on["timings"]["draft_n_accepted"]
    assert accepted > 0
    after = metrics(url)
    key = "genloop_spec_decode_num_draft_tokens_total"
    assert after[key] - before[key] == drafted
    key = "genloop_spec_decode_num_accepted_tokens_total"
    assert after[key] - before[key] == accepted
    assert after["genloop_spec_decode_num_drafts_total"] > before["genloop_spec_decode_num_drafts_total"]
    per_pos = sum(v for k, v in after.items() if k.startswith("genloop_spec_decode_num_accepted_tokens_per_pos"))
    assert per_pos == after[key]
    assert after['genloop_spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] > 0


def test_server_structured_output_identical(smollm_server):
    """Drafts under a grammar: each drafted position is masked with the
    grammar's state after the tokens before it (rows are verified in order)."""
    schema = {"type": "object", "properties": {"invoice_number": {"type": "string"}, "total": {"type": "string"},
                                               "seller": {"type": "string"}},
              "required": ["invoice_number", "total", "seller"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    outs = [chat(smollm_server.url, prompt_text("extract.txt"), max_tokens=120, response_format=fmt,
                 speculative=spec) for spec in (True, False)]
    assert outs[0]["choices"][0]["message"]["content"] == outs[1]["choices"][0]["message"]["content"]
    json.loads(outs[0]["choices"][0]["message"]["content"])
    assert outs[0]["timings"]["draft_n"] > 0


def test_server_rejects_bad_speculative_field(smollm_server):
    status, _, r = post_json(smollm_server.url + "/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "hi"}], "speculative": "yes"})
    assert status == 400 and "speculative" in json.dumps(r)


def chi2_sf(x, k):
    """P(X > x) for chi-square with k degrees of freedom (Wilson-Hilferty)."""
    z = ((x / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_sampling_distribution_unchanged():
    """Temperature 0.6 on stories260K, 300 seeds with drafts and 300 other
    seeds without: the continuations' frequencies must not differ (chi-square
    test of homogeneity, categories with too few samples pooled)."""
    n = 300
    prompt = "Lily and Tom were friends. Lily and Tom liked to play. Lily and Tom"  # drafts: "were", "liked"
    with Server(tiny_model(), "--spec", "ngram", "--spec-ngram-min", "1", "--spec-fixed", "--max-seqs", "16", "-t", "2") as s:
        def one(args):
            seed, spec = args
            status, _, r = post_json(s.url + "/v1/completions",
                                     {"prompt": prompt, "max_tokens": 4, "temperature": 0.6, "seed": seed,
                                      "speculative": spec, "ignore_eos": True}, timeout=120)
            assert status == 200, r
            return r["choices"][0]["text"], r["timings"]["draft_n_accepted"]
        with ThreadPoolExecutor(16) as ex:
            on = list(ex.map(one, [(seed, True) for seed in range(n)]))
            off = list(ex.map(one, [(seed, False) for seed in range(n, 2 * n)]))
    assert sum(a for _, a in on) > 50, "too few drafted tokens accepted for the test to mean anything"
    a, b = Counter(t for t, _ in on), Counter(t for t, _ in off)
    cats, other_a, other_b = [], 0, 0
    for t in set(a) | set(b):
        if a[t] + b[t] >= 10:
            cats.append((a[t], b[t]))
        else:
            other_a += a[t]
            other_b += b[t]
    cats.append((other_a, other_b))
    stat = 0.0
    for ca, cb in cats:
        tot = ca + cb
        for c in (ca, cb):
            exp = tot / 2
            if exp > 0:
                stat += (c - exp) ** 2 / exp
    dof = len(cats) - 1
    assert dof >= 3, cats
    p = chi2_sf(stat, dof)
    assert p > 0.001, f"chi-square {stat:.1f} with {dof} degrees of freedom: p = {p:.2g}"
