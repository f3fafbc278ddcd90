"""The prefix cache across a restart (--kv-cache-dir, docs/prefix-cache.md).

- A server writes the KV blocks of a long prompt to the folder; a new
  server on the same folder reads them back: the prompt is served from the
  cache (cached_tokens, kv_disk_loaded_blocks_total), the first token comes
  sooner, and the output is identical to the cold run, greedy and seeded.
- A crash (SIGKILL) seconds after a request loses nothing of it.
- Corrupt, truncated and foreign files are skipped with a log line; the
  answer is still the cold run's.
- The size bound (--kv-cache-dir-size, here from a config file) holds:
  entries are evicted, the folder never grows past it.
- A folder that cannot be used fails the start with its name.

Multi-model serving (an unload and a reload of one model while the server
runs) does not exist yet; a restart is the unload/reload path tested here."""
import http.client
import json
import os
import signal
import struct
import time

import pytest

from server_util import Server, chat_model, metrics, post_json, tiny_model, wait_for

PROMPT = open(os.path.join(os.path.dirname(__file__), "long_prompt.txt")).read() * 2
GREEDY = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0}
SEEDED = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 1234}


def args(folder, *more):
    return ("-t", "2", "--kv-cache-dir", str(folder), "--metrics-public", "--kv-cache-mib", "128", *more)


def ttft_and_text(url, body):
    """Streams a completion: (seconds to the first token's chunk, whole text)."""
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    first, text, buf = None, "", b""
    while True:
        data = resp.read1(65536)
        if not data:
            break
        buf += data
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            payload = event.decode()[len("data: "):]
            if payload == "[DONE]":
                continue
            piece = json.loads(payload)["choices"][0]["text"]
            if piece and first is None:
                first = time.monotonic() - t0
            text += piece
    conn.close()
    return first, text


def entries(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".kvb"))


def completion(url, body):
    status, _, r = post_json(url + "/v1/completions", body)
    assert status == 200, r
    return r


def test_restart_serves_prefix_from_disk_identically(tmp_path):
    folder = tmp_path / "kv"
    with Server(chat_model(), *args(folder)) as s:
        cold = {name: ttft_and_text(s.url, body) for name, body in (("greedy", GREEDY), ("seeded", SEEDED))}
        m = metrics(s.url)
        assert m["genloop_kv_disk_loaded_blocks_total"] == 0
    written = entries(folder)
    assert len(written) >= 1000 // 16, written  # the prompt's full blocks, written by the time of the stop
    with Server(chat_model(), *args(folder)) as s:
        warm = {name: ttft_and_text(s.url, body) for name, body in (("seeded", SEEDED), ("greedy", GREEDY))}
        r = completion(s.url, GREEDY)
        m = metrics(s.url)
    # the first request of each server: the cold server's computes the
    # prompt, the restarted server's reads it from the folder
    print(f"TTFT: cold {cold['greedy'][0] * 1000:.0f} ms, first request after a restart "
          f"{warm['seeded'][0] * 1000:.0f} ms")
    assert warm["seeded"][0] < cold["greedy"][0]
    for name in cold:
        assert warm[name][1] == cold[name][1], name
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= r["usage"]["prompt_tokens"] - 16
    assert m["genloop_kv_disk_loaded_blocks_total"] >= len(written) - 2
    assert m["genloop_kv_disk_skipped_files_total"] == 0


def test_crash_loses_only_the_last_seconds(tmp_path):
    folder = tmp_path / "kv"
    s = Server(chat_model(), *args(folder))
    try:
        cold = completion(s.url, GREEDY)
        # the writer is not waited for by the request: the files follow within moments
        assert wait_for(lambda: len(entries(folder)) >= cold["usage"]["prompt_tokens"] // 16, timeout=5)
    finally:
        s.stop(signal.SIGKILL)
    with Server(chat_model(), *args(folder)) as s:
        warm = completion(s.url, GREEDY)
    assert warm["choices"][0]["text"] == cold["choices"][0]["text"]
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= cold["usage"]["prompt_tokens"] - 16


def chain_order(folder):
    """The folder's entries in prefix order (root block first), read from
    their headers: hash at byte 48, parent hash at 56."""
    parent_of = {}
    for name in entries(folder):
        with open(folder / name, "rb") as f:
            head = f.read(64)
        h, parent = struct.unpack("<QQ", head[48:64])
        parent_of[parent] = name, h
    order, at = [], 0
    while at in parent_of:
        name, at = parent_of[at]
        order.append(name)
    return order


def flip_bit(path, offset_from_end=100):
    with open(path, "r+b") as f:
        f.seek(-offset_from_end, os.SEEK_END)
        b = f.read(1)
        f.seek(-offset_from_end, os.SEEK_END)
        f.write(bytes([b[0] ^ 4]))


def test_bad_files_skipped_with_a_log_line(tmp_path):
    folder = tmp_path / "kv"
    with Server(chat_model(), *args(folder)) as s:
        cold = completion(s.url, GREEDY)["choices"][0]["text"]
    chain = chain_order(folder)
    assert len(chain) >= 1000 // 16
    other = tmp_path / "other"  # another model's blocks
    with Server(tiny_model(), "-t", "1", "--kv-cache-dir", str(other)) as s:
        completion(s.url, {"prompt": "Once upon a time " * 20, "max_tokens": 4, "temperature": 0})
    foreign = entries(other)
    assert foreign

    def header_field(path):
        with open(path, "r+b") as f:
            f.seek(48)  # the block's hash: the header's checksum no longer holds
            f.write(struct.pack("<Q", 42))

    def garbage(path):
        with open(path, "wb") as f:
            f.write(b"garbage")

    cases = [
        (3, lambda p: flip_bit(p), "corrupt data (checksum)"),
        (7, lambda p: os.truncate(p, 1000), "truncated"),
        (11, garbage, "truncated"),
        (13, header_field, "corrupt header"),
        (17, lambda p: os.replace(other / foreign[0], p), "another model"),
    ]
    for k, spoil, why in cases:
        spoil(folder / chain[k])
        with Server(chat_model(), *args(folder)) as s:
            r = completion(s.url, GREEDY)
            m = metrics(s.url)
        assert r["choices"][0]["text"] == cold, why
        # the blocks before the bad one came from the folder, the rest were computed
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 16 * k, why
        assert m["genloop_kv_disk_skipped_files_total"] == 1, why
        lines = [line for line in s.log.splitlines() if "kv-cache-dir: skipping" in line]
        assert len(lines) == 1 and chain[k] in lines[0] and why in lines[0], (why, lines)
        # the bad entry was written anew; past the prompt's blocks a chain may end a block sooner
        # or later (whether the last generated token's K/V exists depends on what was drafted)
        n = r["usage"]["prompt_tokens"] // 16
        assert chain_order(folder)[:n] == chain[:n], why


def test_size_bound_from_config_file(tmp_path):
    folder = tmp_path / "kv"
    conf = tmp_path / "genloop.json"
    conf.write_text(json.dumps({"kv_cache_dir": str(folder), "kv_cache_dir_size": 2}))
    bound = 2 << 20
    with Server(chat_model(), "--config", str(conf), "-t", "2", "--metrics-public") as s:
        first = completion(s.url, GREEDY)
        completion(s.url, {**GREEDY, "prompt": "Something else entirely. " + PROMPT})
        assert wait_for(lambda: metrics(s.url)["genloop_kv_disk_evicted_blocks_total"] > 0, timeout=10)
        m = metrics(s.url)
    size = sum(os.path.getsize(folder / f) for f in entries(folder))
    print(f"folder: {len(entries(folder))} entries, {size} bytes, bound {bound}")
    assert 0 < size <= bound and m["genloop_kv_disk_bytes"] <= bound
    # the newest blocks stayed: the second prompt's last blocks, not the first's first
    with Server(chat_model(), "--config", str(conf), "-t", "2") as s:
        r = completion(s.url, GREEDY)
    assert r["choices"][0]["text"] == first["choices"][0]["text"]
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


@pytest.mark.parametrize("flags,message", [
    (("--kv-cache-dir", "/proc/version/kv"), "/proc/version/kv"),
    (("--kv-cache-dir", "/tmp", "--kv-cache-dir-size", "0"), "kv_cache_dir_size"),
])
def test_unusable_folder_fails_the_start(flags, message):
    try:
        s = Server(tiny_model(), *flags, wait_ready=False)
    except RuntimeError as e:  # refused before listening
        assert message in str(e)
        return
    s.proc.wait(60)
    code, log = s.stop()
    assert code == 1 and message in log, log
