"""The llama.cpp comparison scripts, without llama.cpp: scripts/bench-vs-llamacpp
against a stub llama-bench that prints llama-bench's output formats, and the
real genloop bench on the tiny test model."""
import importlib.machinery
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest
from conftest import SOURCE_DIR, build_dir
from server_util import binary, tiny_model

SCRIPT = SOURCE_DIR / "scripts" / "bench-vs-llamacpp"


def load(path, name):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# What llama-bench -o json prints (fields cut to those the script reads and a few more).
LLAMA_JSON = """[
  {
    "build_commit": "0c1e570",
    "build_number": 1,
    "cpu_info": "Intel(R) Xeon(R) Platinum 8481C",
    "model_filename": "m.gguf",
    "n_threads": 2,
    "n_prompt": 512,
    "n_gen": 0,
    "n_depth": 0,
    "avg_ts": 812.5,
    "stddev_ts": 0.0,
    "samples_ns": [ 630153000 ],
    "samples_ts": [ 812.5 ]
  },
  {
    "build_commit": "0c1e570",
    "build_number": 1,
    "n_prompt": 0,
    "n_gen": 128,
    "n_depth": 0,
    "avg_ts": 101.25,
    "stddev_ts": 0.0,
    "samples_ns": [ 1264197000 ],
    "samples_ts": [ 101.25 ]
  }
]
"""

LLAMA_MD = """| model                          |       size |     params | backend    | threads |            test |                  t/s |
| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |
| llama ?B Q4_1                  |  85.84 MiB |   134.52 M | CPU        |       2 |           pp512 |        812.50 ± 3.10 |
| llama ?B Q4_1                  |  85.84 MiB |   134.52 M | CPU        |       2 |           tg128 |        101.25 ± 0.40 |

build: 0c1e570 (1)
"""


@pytest.fixture(scope="module")
def mod():
    return load(SCRIPT, "bench_vs_llamacpp")


def test_parse_llama_bench_json_jsonl_markdown(mod):
    want = {"pp": 812.5, "tg": 101.25, "build": "0c1e570 (1)"}
    assert mod.parse_llama_bench(LLAMA_JSON) == want
    jsonl = "\n".join(json.dumps(r) for r in json.loads(LLAMA_JSON))
    assert mod.parse_llama_bench(jsonl) == want
    assert mod.parse_llama_bench(LLAMA_MD) == want
    assert mod.parse_llama_bench("") == {}


@pytest.fixture
def stub_bin(tmp_path):
    """A folder with a llama-bench that logs its arguments and prints LLAMA_JSON."""
    folder = tmp_path / "bin"
    folder.mkdir()
    exe = folder / "llama-bench"
    log = tmp_path / "calls.log"
    exe.write_text(f"#!{sys.executable}\nimport sys\n"
                   f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                   f"if '--fail' in open({str(log)!r}).read(): sys.exit('llama-bench: boom')\n"
                   f"sys.stdout.write({LLAMA_JSON!r})\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder, log


def test_table_against_stub_llama_bench(stub_bin, tmp_path):
    folder, log = stub_bin
    out_json = tmp_path / "res.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--llamacpp-bin", str(folder), "--genloop", str(binary()),
                        "-r", "2", "-p", "32", "-n", "8", "--lock", str(tmp_path / "lock"),
                        "--json", str(out_json), f"tiny={tiny_model()}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all("-p 32 -n 8 -t 2 -r 1 -o json" in c for c in calls), calls
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("llama.cpp build 0c1e570 (1); 2 threads; medians of 2") and "load average" in lines[0]
    # the host beside the table: CPU, L3, bandwidth, AMX state (the stub is no AMX build)
    assert lines[1].startswith("host: ") and " L3 " in lines[1] and "GB/s (genloop bench probe" in lines[1], lines[1]
    assert "AMX-INT8: " in lines[1] and "genloop kernels " in lines[1] and "llama.cpp AMX not compiled in" in lines[1]
    assert lines[2] == ("| model | llama.cpp pp32 | genloop pp32 12/16/8-bit | ratio | "
                        "llama.cpp tg8 | genloop tg8 12/16/8-bit | ratio |")
    cells = [c.strip() for c in lines[4].strip("|").split("|")]
    assert cells[0] == "tiny" and cells[1] == "812.5" and cells[4] == "101.2"
    res = json.loads(out_json.read_text())["results"][0]
    for k, col in (("pp", 2), ("tg", 5)):
        ours = [res["median"][f"genloop{b}"][k] for b in (12, 16, 8)]
        ref = res["median"]["llama.cpp"][k]
        assert all(v > 0 for v in ours) and len(res["samples"]["genloop16"][k]) == 2
        assert cells[col] == " / ".join(f"{v:.1f}" for v in ours)
        assert cells[col + 1] == " / ".join(f"{v / ref:.2f}x" for v in ours)
    assert lines[5].startswith("tiny: genloop pp32 at ") and lines[5].endswith(
        "of the host's int8 ceiling (12/16/8-bit; genloop bench)"), lines[5]
    fractions = [float(x) for x in lines[5].split(" at ")[1].split(" of ")[0].split(" / ")]
    assert len(fractions) == 3 and all(f > 0 for f in fractions)
    assert json.loads(out_json.read_text())["host"] == lines[1]
    # rounds alternate: round 1 starts with llama.cpp, round 2 ends with it
    order = [line.split(": ")[0].split()[-1] for line in r.stderr.splitlines() if " round " in line]
    assert order == ["llama.cpp", "genloop12", "genloop16", "genloop8", "genloop8", "genloop16", "genloop12",
                     "llama.cpp"], order


def test_llama_build_amx_detection(mod, tmp_path):
    """An AMX build of llama.cpp defines ggml_backend_amx_buffer_type; the
    script reads it from the CPU backend library or a static llama-bench."""
    (tmp_path / "llama-bench").write_bytes(b"\x7fELF no such symbol here")
    assert mod.llama_has_amx(str(tmp_path)) is False
    (tmp_path / "libggml-cpu.so.0").write_bytes(b"\x7fELF ... _Z28ggml_backend_amx_buffer_typev ...")
    assert mod.llama_has_amx(str(tmp_path)) is True
    empty = tmp_path / "empty"
    empty.mkdir()
    assert mod.llama_has_amx(str(empty)) is None
    facts = mod.cpu_facts()
    assert set(facts) == {"cpu", "l3", "amx_int8"} and facts["cpu"]


def test_native_build_is_documented():
    """The script says how to build llama.cpp's native AMX build."""
    text = SCRIPT.read_text()
    for needle in ("pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36", "-DGGML_NATIVE=ON",
                   '__asm__ volatile("" : : "r"(&tc) : "memory");', "_tile_loadconfig(&tc);", "LLAMA_CPP_BIN"):
        assert needle in text, needle


@pytest.mark.parametrize("args, msg", [
    ([], "LLAMA_CPP_BIN"),
    (["--llamacpp-bin", "/nonexistent"], "/nonexistent/llama-bench is not an executable"),
    (["--activation-bits", "4"], "--activation-bits"),
])
def test_bad_arguments_are_one_clear_line(args, msg, stub_bin):
    env = {k: v for k, v in os.environ.items() if k not in ("LLAMACPP_BIN", "LLAMA_CPP_BIN")}
    if args[:1] == ["--activation-bits"]:
        args = args + ["--llama-bin", str(stub_bin[0])]
    r = subprocess.run([sys.executable, str(SCRIPT), *args, tiny_model()], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_llama_bench_failure_is_reported(stub_bin):
    folder, log = stub_bin
    log.write_text("--fail\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "--llamacpp-bin", str(folder), "--genloop", str(binary()),
                        "-r", "1", "-p", "16", "-n", "4", tiny_model()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "llama-bench exited with status 1: llama-bench: boom" in r.stderr, r.stderr


# Logs, as a server starts, how many servers of this test's model are alive
# beside it (/proc command lines naming the model and "serve"), then becomes
# genloop serve (with llama-server's flags turned into genloop's for the stub).
SERVER_STUB = """#!{python}
import os, sys
a = sys.argv[1:]
me = str(os.getpid())
alive = 0
for pid in os.listdir("/proc"):
    if pid.isdigit() and pid != me:
        try:
            cmd = open(f"/proc/{{pid}}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        if {model!r}.encode() in cmd and b"serve" in cmd:
            alive += 1
open({log!r}, "a").write({name!r} + " alive=" + str(alive) + "\\n")
{body}
"""


def test_bench_compare_mode_against_stub_llama_server(tmp_path):
    """scripts/bench --llama-server, with a stub that is genloop serve under
    llama-server's flags: both sides are measured, ratios printed, and one
    server runs at a time (each started after the previous one stopped)."""
    model = tmp_path / "model.gguf"  # a path of this test alone, to find its servers by
    model.symlink_to(tiny_model())
    starts = tmp_path / "starts.log"
    stub = tmp_path / "llama-server"
    args_log = tmp_path / "args.log"
    stub.write_text(SERVER_STUB.format(python=sys.executable, model=str(model), log=str(starts), name="llama-server",
                                       body=f"""open({str(args_log)!r}, "w").write(" ".join(a))
v = lambda flag: a[a.index(flag) + 1]
os.execv({str(binary())!r}, [{str(binary())!r}, "serve", "-m", v("-m"), "--port", v("--port"),
         "--max-seqs", v("-np"), "-t", v("-t"), "--max-waiting", "64"])"""))
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    gl = tmp_path / "genloop"
    gl.write_text(SERVER_STUB.format(python=sys.executable, model=str(model), log=str(starts), name="genloop",
                                     body=f"os.execv({str(binary())!r}, [{str(binary())!r}] + a)"))
    gl.chmod(gl.stat().st_mode | stat.S_IXUSR)
    csv_path, png = tmp_path / "b.csv", tmp_path / "b.png"
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "scripts" / "bench"), "-m", str(model), "--genloop", str(gl),
                        "--llama-server", str(stub), "-c", "1,2", "--prompt-tokens", "20", "-n", "8",
                        "--rounds", "2", "--loaded-ttft", "2", "--loaded-tokens", "64", "--sweep-batch-tokens", "16", "--lock", str(tmp_path / "lock"),
                        "--csv", str(csv_path), "--png", str(png)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-np 3 -c " in args_log.read_text() and "-t 2" in args_log.read_text()
    out = r.stdout
    ratio_rows = [line for line in out.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(ratio_rows) == 2, out
    for line in ratio_rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[1]) > 0 and float(cells[2]) > 0 and float(cells[3]) > 0, line
    assert "short prompt, 2 streams decoding: TTFT genloop" in out
    rows = csv_path.read_text().splitlines()
    assert rows[0].startswith("server,clients,") and len(rows) == 7
    assert sorted(r.split(",")[0] for r in rows[1:]) == ["genloop"] * 2 + ["genloop b=16"] * 2 + ["llama-server"] * 2
    if shutil.which("gnuplot"):
        assert png.stat().st_size > 0 and (tmp_path / "b-tradeoff.png").stat().st_size > 0
    assert all(r.split(",")[3] == "0" for r in rows[1:])  # no failed requests
    # 2 rounds x (genloop, genloop b=16, llama-server), each alone: round 2 in reverse order
    assert starts.read_text().splitlines() == [f"{n} alive=0" for n in ("genloop", "genloop", "llama-server") * 1] + [
        f"{n} alive=0" for n in ("llama-server", "genloop", "genloop")], starts.read_text()


def test_perplexity_script_compares_kv_types_and_activation_bits(tmp_path):
    """scripts/perplexity runs one server per (KV type, activation bits) pair and sets each against the first."""
    text = tmp_path / "text.txt"
    text.write_text("Once upon a time, there was a little girl named Lily. She liked to play in the park. " * 12)
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "scripts" / "perplexity"), "-m", tiny_model(), "-f", str(text),
                        "--kv-type", "f16,q8_0", "--activation-bits", "16,8", "--ctx", "64", "--windows", "2",
                        "--threads", "1", "--genloop", binary()], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["f16/16", "f16/8", "q8_0/16", "q8_0/8"]
    for ln in lines:
        assert "over 126 tokens (2 windows of 64)" in ln, ln
        assert float(ln.split()[2]) > 1.0
    assert all("vs f16/16: mean |dlogprob|" in ln for ln in lines[1:])


def test_exact_agreement_script_against_the_reference(tmp_path):
    """scripts/exact-agreement sets the engine's prefill logits against the float64 reference, window by window."""
    text = tmp_path / "text.txt"
    text.write_text("Once upon a time, there was a little girl named Lily. She liked to play in the park. " * 12)
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "scripts" / "exact-agreement"), "-m", tiny_model(), "-f",
                        str(text), "--ctx", "64", "--windows", "2", "--build", str(build_dir())],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["window 1/2: same top-1 100.00%", "window 2/2: same top-1 100.00%"]
    assert "2 windows of 64, 126 positions" in lines[2]
    assert "126/126 = 100.00%" in lines[3]
    words = lines[4].replace(",", "").split()  # perplexity genloop G exact E (D%)
    assert abs(float(words[2]) / float(words[4]) - 1) < 1e-4, lines[4]


def test_bench_hostile_small():
    """scripts/bench-hostile at a small size: every scenario prints its line."""
    binary()
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "scripts" / "bench-hostile"), "-m", tiny_model(),
                        "--build", str(build_dir()), "--idle", "300", "--slow", "40", "--probes", "10",
                        "--slow-seconds", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4 and all("/health p50" in ln and "0 failed" in ln for ln in lines), r.stdout
    assert "300 idle sockets opened" in lines[0] and "server still holds 256" in lines[0]
    assert "server still holds 300" in lines[2]
