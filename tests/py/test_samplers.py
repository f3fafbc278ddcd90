"""llama.cpp's samplers over HTTP (docs/sampling.md): typical_p, top_n_sigma,
XTC, dynamic temperature, mirostat and DRY accepted on completions and chat
(and passed on by the Responses translation), out-of-range values a 400
naming the field, each moving the output the way it should on the tiny
stories260K model (context 128), seeded runs reproducible and a request's
output independent of what else is in the batch."""
import math
import threading

import pytest

from server_util import Server, metrics, ok, post_chat, post_json, tiny_model

PROMPT = "Once upon a time there was a little girl who liked to play in the park with"


@pytest.fixture(scope="module")
def tiny():
    with Server(tiny_model(), "--chat-template", "chatml", "--max-seqs", "8") as s:
        yield s


def complete(server, **body):
    body.setdefault("prompt", PROMPT)
    return post_json(server.url + "/v1/completions", body)


def text(server, **body):
    return ok(complete(server, **body))["choices"][0]["text"]


ALL_ON = {"typical_p": 0.95, "top_n_sigma": 3.0, "xtc_probability": 0.5, "xtc_threshold": 0.1,
          "dynatemp_range": 0.3, "dynatemp_exponent": 1.5, "dry_multiplier": 0.8, "dry_base": 1.75,
          "dry_allowed_length": 2, "dry_penalty_last_n": -1, "dry_sequence_breakers": ["\n", ":"]}

# field: (accepted values, out-of-range or mistyped values)
FIELDS = {
    "typical_p": ([0, 0.5, 1], [-0.1, 1.01, "x"]),
    "top_n_sigma": ([-1, 0, 1.5, 1000], [-1.5, 1001]),
    "xtc_probability": ([0, 0.5, 1], [-0.1, 1.5]),
    "xtc_threshold": ([0, 0.1, 1], [-0.1, 1.1]),
    "dynatemp_range": ([0, 0.5, 2], [-0.1, 2.5]),
    "dynatemp_exponent": ([0, 1, 100], [-1, 101]),
    "mirostat": ([0, 1, 2], [-1, 3, 1.5, "2"]),
    "mirostat_tau": ([0, 5, 100], [-1, 101]),
    "mirostat_eta": ([0, 0.1, 1], [-0.1, 1.1]),
    "dry_multiplier": ([0, 0.8, 100], [-0.1, 101]),
    "dry_base": ([1, 1.75, 100], [0.9, 101]),
    "dry_allowed_length": ([0, 2, 65536], [-1, 65537, 2.5]),
    "dry_penalty_last_n": ([-1, 0, 64, 1 << 24], [-2, (1 << 24) + 1]),
    "dry_sequence_breakers": ([["\n"], ["\n", ":", "\"", "*"], ["Lily", "x" * 64]],
                              [[], "\n", [""], [1], ["x" * 65], ["a"] * 33]),
}


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_field_accepted_and_bounded(tiny, field):
    good, bad = FIELDS[field]
    for value in good:
        # with DRY on, so the DRY settings are used, not just parsed
        extra = {"dry_multiplier": 0.5} if field.startswith("dry_") and field != "dry_multiplier" else {}
        ok(complete(tiny, max_tokens=3, seed=1, **{field: value}, **extra))
        ok(post_chat(tiny, max_tokens=3, seed=1, **{field: value}, **extra))
    for value in bad:
        for send in (complete, post_chat):
            code, _, r = send(tiny, max_tokens=3, **{field: value})
            assert code == 400, (field, value, r)
            assert r["error"]["param"] == field and field in r["error"]["message"], r
            assert r["error"]["type"] == "invalid_request_error"


def test_null_means_default(tiny):
    base = text(tiny, max_tokens=12, seed=5)
    assert text(tiny, max_tokens=12, seed=5, **{f: None for f in FIELDS}) == base


def test_neutral_values_change_nothing(tiny):
    """Each sampler at its off value gives the default output, draw for draw."""
    base = text(tiny, max_tokens=24, seed=9)
    neutral = {"typical_p": 1, "top_n_sigma": -1, "xtc_probability": 0, "dynatemp_range": 0, "mirostat": 0,
               "dry_multiplier": 0, "xtc_threshold": 0.3, "dry_base": 3, "mirostat_tau": 2}
    assert text(tiny, max_tokens=24, seed=9, **neutral) == base
    # XTC above threshold 0.5 is off, as in llama.cpp
    assert text(tiny, max_tokens=24, seed=9, xtc_probability=1, xtc_threshold=0.6) == base


def test_responses_passes_samplers_on(tiny):
    code, _, r = post_json(tiny.url + "/v1/responses", {"input": "hi", "max_output_tokens": 3, "typical_p": 0.5,
                                                        "mirostat": 2, "dry_multiplier": 0.8})
    assert code == 200, r
    code, _, r = post_json(tiny.url + "/v1/responses", {"input": "hi", "max_output_tokens": 3, "typical_p": 2})
    assert code == 400 and r["error"]["param"] == "typical_p", r


# ---- each sampler moves the output the expected way -----------------------------------------

def test_dry_stops_a_repeated_ngram(tiny):
    prompt = "Lily and Ben. Lily and Ben. Lily and Ben. Lily and"
    plain = text(tiny, prompt=prompt, max_tokens=6, temperature=0)
    assert plain.startswith(" Ben"), plain  # greedy repeats the 3-gram
    dry = text(tiny, prompt=prompt, max_tokens=6, temperature=0, dry_multiplier=3)
    assert not dry.startswith(" Ben"), dry
    # a window too short to see the earlier repeats, or a breaker inside the run, leave it alone
    assert text(tiny, prompt=prompt, max_tokens=6, temperature=0, dry_multiplier=3, dry_penalty_last_n=3) == plain
    assert text(tiny, prompt=prompt, max_tokens=6, temperature=0, dry_multiplier=3,
                dry_sequence_breakers=["and"]) == plain
    # a breaker spread over two tokens ("." and " Lily"): found in the text
    assert text(tiny, prompt=prompt, max_tokens=6, temperature=0, dry_multiplier=3,
                dry_sequence_breakers=[". Li"]) == plain
    assert text(tiny, prompt=prompt, max_tokens=6, temperature=0, dry_multiplier=3,
                dry_sequence_breakers=["zzz"]) == dry
    # the run (the whole prompt after its first period) is shorter than an allowed length of 40
    assert text(tiny, prompt=prompt, max_tokens=6, temperature=0, dry_multiplier=3, dry_allowed_length=40) == plain


def test_xtc_never_picks_the_top_token_when_another_reaches_the_threshold(tiny):
    checked = 0
    for seed in range(4):
        r = ok(complete(tiny, max_tokens=40, seed=seed, xtc_probability=1, xtc_threshold=0.1, logprobs=5,
                        ignore_eos=True))
        lp = r["choices"][0]["logprobs"]
        for token, top in zip(lp["tokens"], lp["top_logprobs"]):
            ranked = sorted(top.items(), key=lambda kv: -kv[1])
            if len(ranked) >= 2 and math.exp(ranked[1][1]) >= 0.11:
                assert token != ranked[0][0], (token, ranked)
                checked += 1
    assert checked >= 10


def test_typical_p_and_top_n_sigma_narrow_to_one_choice(tiny):
    greedy = text(tiny, max_tokens=30, temperature=0)
    # top_n_sigma near 0: only the largest logit survives
    for seed in (1, 2, 3):
        assert text(tiny, max_tokens=30, seed=seed, top_n_sigma=1e-4) == greedy
    # typical_p 0: one token per step (the most typical), whatever the seed
    outs = {text(tiny, max_tokens=30, seed=seed, typical_p=0) for seed in (1, 2, 3)}
    assert len(outs) == 1
    # while plain sampling does depend on the seed
    assert len({text(tiny, max_tokens=30, seed=seed) for seed in (1, 2, 3)}) > 1


def test_dynatemp_down_to_zero_is_greedy(tiny):
    greedy = text(tiny, max_tokens=30, temperature=0)
    # temperature 0.5 - 0.5 = 0 at normalised entropy^100 ~ 0
    assert text(tiny, max_tokens=30, seed=4, temperature=0.5, dynatemp_range=0.5, dynatemp_exponent=100) == greedy
    assert text(tiny, max_tokens=30, seed=4, temperature=0.5, dynatemp_range=0.5) != greedy


def mean_logprob(server, **body):
    total, n = 0.0, 0
    for seed in range(3):
        r = ok(complete(server, max_tokens=40, seed=seed, logprobs=1, ignore_eos=True, **body))
        lps = r["choices"][0]["logprobs"]["token_logprobs"]
        total += sum(lps)
        n += len(lps)
    return total / n


@pytest.mark.parametrize("version", [1, 2])
def test_mirostat_follows_tau(tiny, version):
    """A low target surprise draws likelier tokens than a high one; tau 0
    with mirostat 2 keeps only the best token (greedy)."""
    low = mean_logprob(tiny, mirostat=version, mirostat_tau=0.5)
    high = mean_logprob(tiny, mirostat=version, mirostat_tau=8)
    assert low > high + 0.3, (low, high)
    if version == 2:
        greedy = text(tiny, max_tokens=30, temperature=0)
        assert text(tiny, max_tokens=30, seed=3, mirostat=2, mirostat_tau=0) == greedy


# ---- determinism and batch invariance --------------------------------------------------------

@pytest.mark.parametrize("mirostat", [0, 1, 2])
def test_seeded_and_batch_invariant(tiny, mirostat):
    body = dict(ALL_ON, mirostat=mirostat, max_tokens=40, ignore_eos=True)
    alone = [text(tiny, seed=s, **body) for s in (11, 12)]
    assert alone[0] == text(tiny, seed=11, **body)
    assert alone[0] != alone[1]
    # the same requests beside others that run at the same time
    out = {}

    def one(key, **b):
        out[key] = text(tiny, **b)

    threads = [threading.Thread(target=one, args=(s,), kwargs=dict(body, seed=s)) for s in (11, 12)]
    threads += [threading.Thread(target=one, args=(f"other{i}",),
                                 kwargs=dict(prompt="The dog ran" * (i + 1), max_tokens=30, seed=i,
                                             temperature=1.2, dry_multiplier=i))
                for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [out[11], out[12]] == alone
    # chat too: n choices, each reproducible
    r1 = ok(post_chat(tiny, n=2, seed=3, **body))
    r2 = ok(post_chat(tiny, n=2, seed=3, **body))
    assert [c["message"]["content"] for c in r1["choices"]] == [c["message"]["content"] for c in r2["choices"]]


def test_speculation_changes_nothing():
    """Drafted tokens (prompt lookup, on by default) are accepted while they
    equal what the sampler draws, so the output is the same without them:
    mirostat's mu and DRY's history follow the tokens actually kept. The
    adaptive rule drafts only where the measured step costs say it pays (on
    a slow or busy host it may not), so this server drafts every step."""
    with Server(tiny_model(), "--chat-template", "chatml", "--max-seqs", "8", "--spec-fixed") as tiny:
        drafted = "genloop_spec_decode_num_draft_tokens_total"
        before = metrics(tiny.url)[drafted]
        for mirostat in (0, 1, 2):
            body = dict(prompt="Lily and Ben. Lily and Ben. Lily and Ben. Lily and", max_tokens=40, seed=11,
                        ignore_eos=True, temperature=0.3, typical_p=0.95, top_n_sigma=3, xtc_probability=0.2,
                        xtc_threshold=0.3, dynatemp_range=0.2, dry_multiplier=0.3, dry_allowed_length=4,
                        mirostat=mirostat, mirostat_tau=1)
            assert text(tiny, **body) == text(tiny, speculative=False, **body), mirostat
        assert metrics(tiny.url)[drafted] > before  # drafts were made (which are taken depends on the kernels)
