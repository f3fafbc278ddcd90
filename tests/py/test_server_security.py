"""`genloop serve` access control with the tiny stories260K model: the API
key (flag, config key, key file), which endpoints stay open, /metrics with
and without --metrics-public, and CORS (off by default, allowed and
disallowed origins, preflight)."""
import json
import subprocess

import pytest

from server_util import Server, binary, metrics, post_json, raw_http, request, sse_events, tiny_model

KEY = "sk-test-0123456789abcdef"
ALLOWED = "http://allowed.example"
OTHER_ALLOWED = "http://two.example:8080"
BODY = {"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0}


def auth(key=KEY):
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server():
    with Server(tiny_model(), "--api-key", KEY, "--cors-origin", ALLOWED,
               "--cors-origin", OTHER_ALLOWED) as s:
        yield s
    assert KEY not in s.log  # the key never reaches the log


@pytest.fixture(scope="module")
def plain():
    """No key, no CORS: the defaults."""
    with Server(tiny_model()) as s:
        yield s


def assert_401(status, headers, body):
    assert status == 401, (status, body)
    err = json.loads(body)["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_api_key"
    assert err["param"] is None and err["message"]
    assert headers.get("WWW-Authenticate") == "Bearer"


# ---- the API key -------------------------------------------------------------------

PROTECTED = [("POST", "/v1/completions", BODY), ("GET", "/v1/models", None),
             ("POST", "/tokenize", {"content": "hi"}), ("POST", "/detokenize", {"tokens": [1]}),
             ("GET", "/metrics", None), ("POST", "/v1/chat/completions",
                                         {"messages": [{"role": "user", "content": "hi"}]})]


@pytest.mark.parametrize("method,path,body", PROTECTED)
def test_401_without_key(server, method, path, body):
    assert_401(*request(server.url + path, body, method=method))


@pytest.mark.parametrize("key", [KEY[:-1] + "X", KEY[:-1], KEY + "0", "", "x", KEY.upper(), KEY * 2])
def test_401_wrong_key(server, key):
    assert_401(*request(server.url + "/v1/completions", BODY, headers=auth(key)))


@pytest.mark.parametrize("value", [KEY, f"Basic {KEY}", f"Bearer{KEY}", f"Token {KEY}", "Bearer"])
def test_401_malformed_header(server, value):
    assert_401(*request(server.url + "/v1/models", headers={"Authorization": value}))


def test_200_with_key(server):
    status, _, r = post_json(server.url + "/v1/completions", BODY, headers=auth())
    assert status == 200 and r["usage"]["completion_tokens"] == 3
    for path in ("/v1/models", "/metrics"):
        assert request(server.url + path, headers=auth())[0] == 200
    # scheme is case-insensitive, blanks around the token are fine
    assert request(server.url + "/v1/models", headers={"Authorization": f"bearer   {KEY} "})[0] == 200


def test_stream_with_key(server):
    status, _, raw = request(server.url + "/v1/completions", dict(BODY, stream=True), headers=auth())
    events, done = sse_events(raw)
    assert status == 200 and done and events


def test_open_endpoints(server):
    status, _, body = request(server.url + "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    # the web UI (when built in) loads without a key; its API calls need one
    status, _, _ = request(server.url + "/")
    assert status in (200, 404)
    # unknown paths say 404 (nothing is served there), key or not
    assert request(server.url + "/nope")[0] == 404


def test_401_counted_and_before_body(server):
    before = metrics_with_key(server).get('genloop_request_errors_total{code="401"}', 0)
    # a body over the size limit still gets 401 (not 413): the key is checked first
    big = b"x" * (2 << 20)
    status, headers, body = request(server.url + "/v1/completions", big)
    assert status in (401, 0)  # 0: the server may close while we still send
    if status:
        assert_401(status, headers, body)
    # a raw request whose body never comes is answered at once
    sock, got = raw_http(server.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 1000\r\n\r\n", read_until=b"}}")
    sock.close()
    assert got.startswith(b"HTTP/1.1 401")
    assert metrics_with_key(server)['genloop_request_errors_total{code="401"}'] >= before + 1


def metrics_with_key(server):
    return metrics(server.url, headers=auth())


def test_metrics_public():
    with Server(tiny_model(), "--api-key", KEY, "--metrics-public") as s:
        assert request(s.url + "/metrics")[0] == 200
        assert "genloop_engine_steps_total" in metrics(s.url)
        assert_401(*request(s.url + "/v1/models"))


def test_key_file_and_config(tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_text(f"  {KEY}\n")
    with Server(tiny_model(), "--api-key-file", str(keyfile)) as s:
        assert_401(*request(s.url + "/v1/models"))
        assert request(s.url + "/v1/models", headers=auth())[0] == 200

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"api_key": KEY, "metrics_public": True}))
    with Server(tiny_model(), "--config", str(cfg)) as s:
        assert_401(*request(s.url + "/v1/models"))
        assert request(s.url + "/v1/models", headers=auth())[0] == 200
        assert request(s.url + "/metrics")[0] == 200


@pytest.mark.parametrize("args,message", [
    (["--api-key", KEY, "--api-key-file", "/dev/null"], "not both"),
    (["--api-key-file", "/nonexistent/key"], "api_key_file"),
    (["--api-key", "has space"], "api_key"),
    (["--metrics-public=maybe"], "metrics_public"),
])
def test_bad_key_settings(args, message):
    out = subprocess.run([binary(), "serve", "-m", tiny_model(), "--port", "0", *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and message in out.stderr, out.stderr


def test_empty_key_file_rejected(tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_text("\n")
    out = subprocess.run([binary(), "serve", "-m", tiny_model(), "--port", "0",
                          "--api-key-file", str(keyfile)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "empty" in out.stderr


def test_no_key_by_default(plain):
    assert request(plain.url + "/v1/models")[0] == 200
    assert post_json(plain.url + "/v1/completions", BODY)[0] == 200


# ---- CORS ---------------------------------------------------------------------------

def cors_headers(headers):
    return {k: v for k, v in headers.items() if k.lower().startswith("access-control-")}


def test_cors_off_by_default(plain):
    status, headers, _ = request(plain.url + "/health", headers={"Origin": ALLOWED})
    assert status == 200 and not cors_headers(headers)
    status, headers, _ = request(plain.url + "/v1/completions", method="OPTIONS", headers={
        "Origin": ALLOWED, "Access-Control-Request-Method": "POST"})
    assert status != 204 and not cors_headers(headers)


@pytest.mark.parametrize("origin", [ALLOWED, OTHER_ALLOWED, "HTTP://Allowed.Example"])
def test_cors_allowed_origin(server, origin):
    status, headers, _ = request(server.url + "/health", headers={"Origin": origin})
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == origin and "Origin" in headers["Vary"]
    # errors carry it too, so browser code can read the 401
    status, headers, _ = request(server.url + "/v1/models", headers={"Origin": origin})
    assert status == 401 and headers["Access-Control-Allow-Origin"] == origin
    # and streams
    status, headers, _ = request(server.url + "/v1/completions", dict(BODY, stream=True),
                                 headers=dict(auth(), Origin=origin))
    assert status == 200 and headers["Access-Control-Allow-Origin"] == origin


@pytest.mark.parametrize("origin", ["http://evil.example", ALLOWED + ".evil.example",
                                    "https://allowed.example", "null"])
def test_cors_disallowed_origin(server, origin):
    status, headers, _ = request(server.url + "/health", headers={"Origin": origin})
    assert status == 200 and not cors_headers(headers)
    status, headers, _ = request(server.url + "/v1/completions", method="OPTIONS", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST"})
    assert status == 403 and not cors_headers(headers)


def test_cors_preflight(server):
    # no key: a preflight never carries credentials
    status, headers, body = request(server.url + "/v1/completions", method="OPTIONS", headers={
        "Origin": ALLOWED, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204 and body == b""
    assert headers["Access-Control-Allow-Origin"] == ALLOWED
    assert "POST" in headers["Access-Control-Allow-Methods"]
    allowed = [h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")]
    assert "authorization" in allowed and "content-type" in allowed
    assert int(headers["Access-Control-Max-Age"]) > 0


def test_cors_wildcard_and_config(tmp_path):
    with Server(tiny_model(), "--cors-origin", "*") as s:
        status, headers, _ = request(s.url + "/v1/models", headers={"Origin": "http://any.example"})
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "*"
        status, headers, _ = request(s.url + "/v1/models", method="OPTIONS", headers={
            "Origin": "http://any.example", "Access-Control-Request-Method": "GET"})
        assert status == 204 and headers["Access-Control-Allow-Origin"] == "*"
    # config: an array or a comma list; the first flag replaces it, more flags add
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"cors_origin": ["http://a.example", "http://b.example"]}))
    run = lambda *a: subprocess.run([binary(), "serve", "--config", str(cfg), *a, "--print-config"],  # noqa: E731
                                    capture_output=True, text=True, check=True)
    assert json.loads(run().stdout)["cors_origin"] == ["http://a.example", "http://b.example"]
    assert json.loads(run("--cors-origin", "http://c.example, http://d.example",
                          "--cors-origin", "*").stdout)["cors_origin"] == [
        "http://c.example", "http://d.example", "*"]
    for bad in ("http://a.example/", "a.example", "http://*.example"):
        out = subprocess.run([binary(), "serve", "-m", tiny_model(), "--cors-origin", bad],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and "cors_origin" in out.stderr, bad
