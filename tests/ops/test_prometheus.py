"""genloop's /metrics scraped by a real Prometheus server.

Starts genloop (stories260K), sends a known set of completions and sums the
completion_tokens their responses report, then runs Prometheus (Debian
package `prometheus`) with a 1 s scrape of that server and asks its HTTP API
for genloop_generation_tokens_total and genloop_requests_total: they must be
exactly what the responses said. Also checks deploy/prometheus.yml with
promtool. Bounded: Prometheus gets 60 s to report; everything is killed at
the end. Skips without prometheus, except under CI=true."""
import json
import os
import subprocess
import tempfile
import time
import urllib.parse

import opsutil

SCRAPE = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: genloop
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""


def query(base, expr):
    """The instant vector of a PromQL query as {job-less label tuple: value}."""
    status, body = opsutil.get(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}", timeout=5)
    assert status == 200, body
    reply = json.loads(body)
    assert reply["status"] == "success", reply
    return [float(r["value"][1]) for r in reply["data"]["result"]]


def test_deploy_prometheus_yml_is_valid():
    promtool = opsutil.need_program("promtool")
    path = os.path.join(opsutil.SOURCE, "deploy", "prometheus.yml")
    r = subprocess.run([promtool, "check", "config", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_prometheus_scrapes_generation_tokens():
    prometheus = opsutil.need_program("prometheus")
    server = opsutil.Replica(opsutil.tiny_model(), "-t", "1", "--kv-cache-mib", "16")
    proc = None
    tmp = tempfile.mkdtemp(prefix="genloop-prom-")
    try:
        url = f"{server.url}/v1/completions"
        expected_tokens = 0
        prompts = ["Once upon a time", "The cat", "Lily and Tom went", "One day", "Hello"]
        for i, prompt in enumerate(prompts):
            status, reply = opsutil.post_json(url, {"prompt": prompt, "max_tokens": 5 + 7 * i,
                                                    "temperature": 0.8, "seed": i})
            assert status == 200, reply
            expected_tokens += reply["usage"]["completion_tokens"]
        assert expected_tokens > 0

        conf = os.path.join(tmp, "prometheus.yml")
        with open(conf, "w") as f:
            f.write(SCRAPE.format(port=server.port))
        port = opsutil.free_port()
        proc = subprocess.Popen(
            [prometheus, f"--config.file={conf}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        opsutil.wait_http(f"{base}/-/ready", 60, proc)

        # Wait for a successful scrape, then read the counters.
        deadline = time.time() + 60
        while time.time() < deadline and query(base, 'up{job="genloop"}') != [1.0]:
            time.sleep(0.5)
        assert query(base, 'up{job="genloop"}') == [1.0], "Prometheus never scraped genloop"
        tokens = query(base, "genloop_generation_tokens_total")
        requests = query(base, 'sum(genloop_requests_total)')
        assert tokens == [float(expected_tokens)], (tokens, expected_tokens)
        assert requests == [float(len(prompts))], requests
    finally:
        if proc is not None:
            opsutil.stop(proc)
        server.kill()
        subprocess.run(["rm", "-rf", tmp])
