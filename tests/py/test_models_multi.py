"""Many models from one server (docs/models-multi.md): --models-dir and the
config file's `models` list, loads on demand (shared by concurrent
requests, waited for, not refused), LRU eviction under --models-max-loaded
and --models-memory, keep-alive expiry and per-request keep_alive, a
corrupt file in the folder, and /metrics per model.

Models: stories260K (tiny, no chat template) and SmolLM2-135M (chat)."""
import json
import os
import re
import shutil
import threading
import time

import pytest

from server_util import Server, chat_model, metrics, post_json, request, tiny_model, wait_for

openai = pytest.importorskip("openai")

PROMPT = "Once upon a time there was a little girl who"


@pytest.fixture
def models_dir(tmp_path):
    """stories.gguf, smol.gguf and broken.gguf (a truncated copy)."""
    d = tmp_path / "models"
    d.mkdir()
    os.symlink(tiny_model(), d / "stories.gguf")
    os.symlink(chat_model(), d / "smol.gguf")
    with open(tiny_model(), "rb") as f:
        (d / "broken.gguf").write_bytes(f.read(4096))
    (d / "notes.txt").write_text("not a model")
    return d


def states(server):
    status, _, body = post_json(server.url + "/v1/models", None)
    assert status == 200
    return {m["id"]: m["state"] for m in body["data"]}


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def greedy_completion(c, model):
    r = c.completions.create(model=model, prompt=PROMPT, max_tokens=24, temperature=0)
    return r.choices[0].text


def greedy_chat(c, model):
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Name three colors."}],
                                  max_tokens=24, temperature=0)
    return r.choices[0].message.content


def test_folder_lists_every_model_unloaded(models_dir):
    with Server(None, "--models-dir", str(models_dir)) as s:
        status, _, body = post_json(s.url + "/v1/models", None)
        by_id = {m["id"]: m for m in body["data"]}
        assert set(by_id) == {"stories", "smol", "broken"}  # .gguf files only, by file stem
        assert all(m["state"] == "unloaded" for m in by_id.values())
        assert by_id["smol"]["context_length"] == 8192 and by_id["stories"]["context_length"] == 128
        # general.name answers too, before any load
        name = by_id["smol"]["meta"]["name"]
        status, _, one = post_json(s.url + "/v1/models/" + name.replace(" ", "%20"), None)
        assert status == 200 and one["state"] == "unloaded"
        status, _, err = post_json(s.url + "/v1/completions", {"model": "nope", "prompt": "x"})
        assert status == 404 and "'smol'" in err["error"]["message"] and "'stories'" in err["error"]["message"]
        # health is ok at once: nothing to load at startup
        assert request(s.url + "/health")[0] == 200


def test_two_models_in_turn_evict_and_reload(models_dir):
    """--models-max-loaded 1: each switch evicts the other; greedy outputs
    equal those of single-model servers."""
    with Server(tiny_model()) as single:
        want_stories = greedy_completion(client(single), "x")
    with Server(chat_model()) as single:
        want_smol = greedy_chat(client(single), "x")
    with Server(None, "--models-dir", str(models_dir), "--models-max-loaded", "1") as s:
        c = client(s)
        assert greedy_completion(c, "stories") == want_stories
        assert states(s)["stories"] == "loaded"
        assert greedy_chat(c, "smol") == want_smol
        st = states(s)
        assert st["smol"] == "loaded" and st["stories"] == "unloaded"
        assert greedy_completion(c, "stories.gguf") == want_stories  # the file name answers too
        st = states(s)
        assert st["stories"] == "loaded" and st["smol"] == "unloaded"
        m = metrics(s.url)
        assert m['genloop_model_loads_total{model="stories"}'] == 2
        assert m['genloop_model_unloads_total{model="smol"}'] == 1
        assert m['genloop_model_state{model="stories"}'] == 2
    assert re.search(r"unloading model stories \(least recently used; evicted to load smol\)", s.log)
    assert "model smol unloaded" in s.log


def test_memory_budget_evicts(models_dir):
    """--models-memory counts weights and KV pools (64 MiB each here): stories
    takes 65 MiB, smol 158 MiB."""
    with Server(None, "--models-dir", str(models_dir), "--models-memory", "240", "--kv-cache-mib", "64") as s:
        c = client(s)
        greedy_completion(c, "stories")
        greedy_chat(c, "smol")
        assert states(s)["stories"] == "loaded"
    with Server(None, "--models-dir", str(models_dir), "--models-memory", "200", "--kv-cache-mib", "64") as s:
        c = client(s)
        greedy_completion(c, "stories")
        greedy_chat(c, "smol")
        assert states(s) == {"stories": "unloaded", "smol": "loaded", "broken": "unloaded"}
        status, _, err = post_json(s.url + "/v1/completions",
                                   {"model": "stories", "prompt": "x", "max_tokens": 2})
        assert status == 200
    with Server(None, "--models-dir", str(models_dir), "--models-memory", "100", "--kv-cache-mib", "64") as s:
        status, _, err = post_json(s.url + "/v1/chat/completions",
                                   {"model": "smol", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 503 and "--models-memory" in err["error"]["message"]


def test_keep_alive_expiry(models_dir):
    with Server(None, "--models-dir", str(models_dir), "--keep-alive", "1") as s:
        greedy_completion(client(s), "stories")
        assert states(s)["stories"] == "loaded"
        wait_for(lambda: states(s)["stories"] == "unloaded", timeout=10)
    assert re.search(r"unloading model stories \(idle for \d+ s, keep_alive 1 s\)", s.log)


def test_listing_through_an_unload(models_dir):
    """/v1/models and Ollama's /api/show, asked without pause while a model
    is freed on its thread, answer every time (they once read the model
    being freed: a use-after-free under ASan)."""
    with Server(None, "--models-dir", str(models_dir)) as s:
        for _ in range(3):
            body = {"model": "smol", "prompt": PROMPT, "max_tokens": 2, "keep_alive": 0}
            assert post_json(s.url + "/v1/completions", body)[0] == 200
            seen = set()
            for _ in range(200):
                state = states(s)["smol"]
                assert post_json(s.url + "/api/show", {"model": "smol"})[0] == 200
                seen.add(state)
                if state == "unloaded":
                    break
            assert "unloaded" in seen, seen


def test_request_keep_alive(models_dir):
    with Server(None, "--models-dir", str(models_dir)) as s:
        body = {"model": "stories", "prompt": PROMPT, "max_tokens": 4, "keep_alive": 0}
        status, _, r = post_json(s.url + "/v1/completions", body)
        assert status == 200
        wait_for(lambda: states(s)["stories"] == "unloaded", timeout=10)
        # Ollama's durations; and the `options` of Ollama on the OpenAI endpoints
        body = {"model": "stories", "prompt": PROMPT, "keep_alive": "1h30m", "options": {"num_predict": 3}}
        status, _, r = post_json(s.url + "/v1/completions", body)
        assert status == 200 and r["usage"]["completion_tokens"] == 3
        assert states(s)["stories"] == "loaded"
        status, _, r = post_json(s.url + "/v1/completions", {"model": "stories", "prompt": "x", "keep_alive": "soon"})
        assert status == 400 and r["error"]["param"] == "keep_alive"
        status, _, r = post_json(s.url + "/v1/completions",
                                 {"model": "stories", "prompt": "x", "options": {"num_ctx": 100000}})
        assert status == 400 and "num_ctx" in r["error"]["message"] and "128" in r["error"]["message"]
        status, _, r = post_json(s.url + "/v1/completions",
                                 {"model": "stories", "prompt": "x", "options": {"mirostat": 1}})
        assert status == 400 and "options.mirostat" in r["error"]["message"]
        status, _, r = post_json(s.url + "/v1/completions",
                                 {"model": "stories", "prompt": "x", "max_tokens": 2, "options": {"num_predict": 3}})
        assert status == 400 and "not both" in r["error"]["message"]
    assert "unloading model stories (keep_alive 0)" in s.log


def test_requests_during_a_load_share_it(models_dir):
    """Requests that arrive while the model loads wait (none refused) and one load serves them all."""
    with Server(None, "--models-dir", str(models_dir)) as s:
        results = []

        def one(i):
            results.append(post_json(s.url + "/v1/chat/completions",
                                     {"model": "smol", "messages": [{"role": "user", "content": f"Count to {i}"}],
                                      "max_tokens": 4}))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        def seen():
            smol = next(m for m in post_json(s.url + "/v1/models", None)[2]["data"] if m["id"] == "smol")
            assert smol["state"] != "loading" or 0 <= smol["load_progress"] <= 1
            return smol["state"] in ("loading", "loaded")
        wait_for(seen, timeout=10)
        for t in threads:
            t.join(60)
        assert [r[0] for r in results] == [200] * 4
        assert metrics(s.url)['genloop_model_loads_total{model="smol"}'] == 1
        # another model runs beside it: both stay loaded without a bound
        greedy_completion(client(s), "stories")
        st = states(s)
        assert st["smol"] == "loaded" and st["stories"] == "loaded"


def test_corrupt_file_is_a_clear_error(models_dir):
    with Server(None, "--models-dir", str(models_dir), "--models-max-loaded", "1") as s:
        want = greedy_completion(client(s), "stories")
        status, _, err = post_json(s.url + "/v1/completions", {"model": "broken", "prompt": "x"})
        assert status == 500 and err["error"]["code"] == "model_load_failed"
        assert str(models_dir / "broken.gguf") in err["error"]["message"]
        # nothing was evicted for it, and the others are still served
        assert states(s)["stories"] == "loaded"
        assert greedy_completion(client(s), "stories") == want
        assert greedy_chat(client(s), "smol")


def test_config_models_list(models_dir, tmp_path):
    conf = tmp_path / "genloop.json"
    conf.write_text(json.dumps({"models": [
        {"name": "tiny", "path": str(models_dir / "stories.gguf"), "alias": ["story-teller"], "n_ctx": 64,
         "kv_type": "q8_0"},
        {"name": "chat", "path": chat_model(), "activation_bits": 8},
    ]}))
    with Server(None, "--config", str(conf), "--models-dir", str(models_dir)) as s:
        status, _, body = post_json(s.url + "/v1/models", None)
        by_id = {m["id"]: m for m in body["data"]}
        # the folder's copies of listed files are not listed twice
        assert set(by_id) == {"tiny", "story-teller", "chat", "broken"}
        assert by_id["tiny"]["context_length"] == 64
        r = client(s).completions.create(model="story-teller", prompt=PROMPT, max_tokens=4)
        assert r.model == "tiny"
        status, _, body = post_json(s.url + "/v1/models/tiny", None)
        assert body["state"] == "loaded" and body["context_length"] == 64
    assert re.search(r"KV cache: \d+ tokens \(q8_0", s.log)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"models": [{"name": "x"}]}))
    with pytest.raises(RuntimeError, match="path"):
        Server(None, "--config", str(bad))


def test_pinned_model_beside_a_folder(models_dir):
    """-m is the default (requests without a model) and is never evicted."""
    with Server(tiny_model(), "--models-dir", str(models_dir), "--models-max-loaded", "1") as s:
        c = client(s)
        st = states(s)
        assert st["stories260K.gguf"] == "loaded" and "stories" not in st  # the same file, listed once
        status, _, body = post_json(s.url + "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert status == 200 and body["model"] == "stories260K.gguf"
        status, _, body = post_json(s.url + "/v1/chat/completions",
                                    {"model": "smol", "messages": [{"role": "user", "content": "hi"}],
                                     "max_tokens": 2, "keep_alive": 0})
        assert status == 200  # the pinned model is not counted against the bound's evictions
        wait_for(lambda: states(s)["smol"] == "unloaded", timeout=10)
        assert states(s)["stories260K.gguf"] == "loaded"


def test_two_models_run_at_once(models_dir):
    """Each model is its own engine: a short request to one finishes while a long one runs on the other."""
    with Server(None, "--models-dir", str(models_dir)) as s:
        c = client(s)
        greedy_completion(c, "stories")
        greedy_chat(c, "smol")  # both loaded
        events = []
        stream = c.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Tell a long story."}],
                                           max_tokens=150, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        for i, chunk in enumerate(stream):
            if i == 3:
                greedy_completion(c, "stories")
                events.append("stories done")
            events.append("smol chunk")
        assert events.index("stories done") < len(events) - 100  # long before the smol stream ended
        assert metrics(s.url)["genloop_requests_running"] == 0


def test_tokenize_names_a_model(models_dir):
    """/tokenize and /detokenize wait for the named model's load too."""
    with Server(None, "--models-dir", str(models_dir)) as s:
        status, _, a = post_json(s.url + "/tokenize", {"model": "smol", "content": "Hello world"})
        assert status == 200 and states(s)["smol"] == "loaded"
        status, _, b = post_json(s.url + "/tokenize", {"model": "stories", "content": "Hello world"})
        assert status == 200 and a["tokens"] != b["tokens"]
        status, _, t = post_json(s.url + "/detokenize", {"model": "smol", "tokens": a["tokens"]})
        assert status == 200 and t["content"].endswith("Hello world")
        status, _, e = post_json(s.url + "/tokenize", {"model": "broken", "content": "x"})
        assert status == 500 and "broken.gguf" in e["error"]["message"]


def test_keep_alive_of_the_last_request(models_dir):
    """A request's keep_alive holds for after it; the next request without one restores --keep-alive."""
    with Server(None, "--models-dir", str(models_dir), "--keep-alive", "1") as s:
        body = {"model": "stories", "prompt": PROMPT, "max_tokens": 2, "keep_alive": -1}
        assert post_json(s.url + "/v1/completions", body)[0] == 200
        time.sleep(1.6)
        assert states(s)["stories"] == "loaded"  # kept past --keep-alive
        del body["keep_alive"]
        assert post_json(s.url + "/v1/completions", body)[0] == 200
        wait_for(lambda: states(s)["stories"] == "unloaded", timeout=10)
