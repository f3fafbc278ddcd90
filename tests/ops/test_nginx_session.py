"""Session routing (deploy/nginx-session.conf) against least_conn
(deploy/nginx.conf), three genloop replicas behind nginx on loopback.

30 multi-turn conversations, 4 turns each: every turn's prompt is the
conversation so far (earlier turns and answers) plus a new user line, sent
with "user" (the conversation id), "prompt_cache_key" or an X-Session-Id
header. Prints, for each configuration, the prefix-cache hit rate (prompt
tokens served from the cache over prompt tokens, from the replicas'
/metrics) and checks that session routing beats least_conn's hit rate while
the sessions still spread over the replicas. Skips without nginx and its njs
module (Debian packages nginx and libnginx-mod-http-js), except under
CI=true."""
import contextlib
import random
import os
import re
import subprocess
import tempfile

import opsutil

DEPLOY = os.path.join(opsutil.SOURCE, "deploy")
NJS = "/usr/lib/nginx/modules/ngx_http_js_module.so"


def render(conf, tmp, listen_port, upstream_ports):
    """A deploy/ nginx config with addresses and paths made local and the
    upstream's servers replaced by upstream_ports."""
    text = open(os.path.join(DEPLOY, conf)).read()
    subs = [
        (r"worker_processes [^;]+;", "worker_processes 1;"),
        (r"\npid [^;]+;", f"\npid {tmp}/nginx.pid;"),
        (r"error_log \S+", f"error_log {tmp}/error.log"),
        (r"access_log [^;]+;", f"access_log {tmp}/access.log;"),
        (r"listen 8080;", f"listen 127.0.0.1:{listen_port};"),
    ]
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text)
        assert n == 1, f"deploy/{conf}: expected one match of {pattern!r}, found {n}"
    text = re.sub(r"js_path \S+;", f"js_path {DEPLOY};", text)
    text = re.sub(r"(\w+_temp_path) \S+;", lambda m: f"{m.group(1)} {tmp}/{m.group(1)};", text)
    servers = "".join(f"        server 127.0.0.1:{p} max_fails=2 fail_timeout=10s;\n" for p in upstream_ports)
    text, n = re.subn(r"(        server 127\.0\.0\.1:\d+[^\n]*\n)+", servers, text)
    assert n == 1, f"deploy/{conf}: upstream servers not found"
    return text


@contextlib.contextmanager
def nginx(conf, ports):
    binary = opsutil.need_program("nginx", "/usr/sbin", "/sbin")
    if "session" in conf:
        opsutil.need_file(NJS, "njs module (Debian package libnginx-mod-http-js)")
    tmp = tempfile.mkdtemp(prefix="genloop-nginx-session-")
    os.chmod(tmp, 0o755)
    proc = None
    try:
        port = opsutil.free_port()
        path = os.path.join(tmp, "nginx.conf")
        with open(path, "w") as f:
            f.write(render(conf, tmp, port, ports))
        for d in ("client_body_temp_path", "proxy_temp_path", "fastcgi_temp_path",
                  "uwsgi_temp_path", "scgi_temp_path"):
            os.makedirs(os.path.join(tmp, d), mode=0o777, exist_ok=True)
            os.chmod(os.path.join(tmp, d), 0o777)
        check = subprocess.run([binary, "-t", "-p", tmp, "-c", path, "-e", f"{tmp}/error.log"],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        proc = subprocess.Popen([binary, "-p", tmp, "-c", path, "-e", f"{tmp}/error.log",
                                 "-g", "daemon off;"], stderr=subprocess.DEVNULL)
        opsutil.wait_http(f"http://127.0.0.1:{port}/health", 20, proc)
        yield port
    finally:
        if proc is not None:
            opsutil.stop(proc)
        subprocess.run(["rm", "-rf", tmp])


def conversations(port, n_conv=30, n_turns=4):
    """Runs the conversations turn by turn (all first turns, then all second
    ones..., each turn in its own order), keying them three ways."""
    import http.client
    import json
    # short: the tiny model's context is 128 tokens
    history = [f"Once upon a time, robot {c} lived in a box." for c in range(n_conv)]
    for turn in range(n_turns):
        order = list(range(n_conv))
        random.Random(turn).shuffle(order)  # users answer at their own pace
        for c in order:
            history[c] += f" Then {turn}:"
            body = {"prompt": history[c], "max_tokens": 6, "temperature": 0}
            headers = {"Content-Type": "application/json"}
            if c % 3 == 0:
                body["user"] = f"conv-{c}"
            elif c % 3 == 1:
                body["prompt_cache_key"] = f"conv-{c}"
            else:
                headers["X-Session-Id"] = f"conv-{c}"
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("POST", "/v1/completions", json.dumps(body), headers)
            resp = conn.getresponse()
            reply = json.loads(resp.read())
            conn.close()
            assert resp.status == 200, reply
            history[c] += reply["choices"][0]["text"]


def hit_rate(replicas):
    q = sum(r.metric("genloop_prefix_cache_queries_total") for r in replicas)
    h = sum(r.metric("genloop_prefix_cache_hits_total") for r in replicas)
    return h / q


def run(conf, model):
    replicas = []
    try:
        for _ in range(3):
            replicas.append(opsutil.Replica(model, "-t", "1", "--kv-cache-mib", "64", "--block-size", "4"))
        with nginx(conf, [r.port for r in replicas]) as port:
            conversations(port)
        served = [r.metric("genloop_requests_total") for r in replicas]
        return hit_rate(replicas), served
    finally:
        for r in replicas:
            r.kill()


def test_session_routing_keeps_prefix_cache_hits():
    model = opsutil.tiny_model()
    session, served_s = run("nginx-session.conf", model)
    least, served_l = run("nginx.conf", model)
    print(f"\nprefix-cache hit rate, 30 conversations x 4 turns on 3 replicas: "
          f"session routing {session:.3f} (requests per replica {served_s}), "
          f"least_conn {least:.3f} (requests per replica {served_l})")
    assert session > least
    assert sum(1 for n in served_s if n > 0) >= 2  # the sessions spread over replicas


def test_inference_gateway_manifests():
    """deploy/k8s/inference-gateway: the pool selects deployment.yaml's pods
    on genloop's port and names the picker's Service; the metrics the picker
    reads by default are in genloop's /metrics."""
    try:
        import yaml
    except ImportError:
        opsutil.skip_or_fail("PyYAML not installed (pip install pyyaml)")
    k8s = os.path.join(DEPLOY, "k8s")
    docs = {}
    for path in (os.path.join(k8s, "deployment.yaml"), *[os.path.join(k8s, "inference-gateway", f) for f in
                                                          ("inferencepool.yaml", "epp.yaml")]):
        for doc in yaml.safe_load_all(open(path)):
            docs[(doc["kind"], doc["metadata"]["name"])] = doc
    pod = docs[("Deployment", "genloop")]["spec"]["template"]
    pool = docs[("InferencePool", "genloop")]["spec"]
    assert pool["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pool["targetPorts"][0]["number"] == pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    epp_svc = docs[("Service", pool["endpointPickerRef"]["name"])]
    assert epp_svc["spec"]["ports"][0]["port"] == pool["endpointPickerRef"]["port"]["number"]
    route = docs[("HTTPRoute", "genloop")]
    assert route["spec"]["rules"][0]["backendRefs"][0]["name"] == "genloop"
    config = yaml.safe_load(docs[("ConfigMap", "genloop-epp-config")]["data"]["config.yaml"])
    types = {p["type"] for p in config["plugins"]}
    assert {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"} <= types
    args = pod["spec"]["containers"][0]["args"]
    assert "--kv-cache-dir" in args and "--metrics-vllm-names" in args
    r = opsutil.Replica(opsutil.tiny_model(), "-t", "1", "--metrics-vllm-names")
    try:
        for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
            r.metric(name)  # asserts presence
    finally:
        r.kill()
