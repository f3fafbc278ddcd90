"""The web chat UI at GET /, driven in headless Chromium against the real server.

Starts `$GENLOOP_BUILD/genloop serve -m MODEL --port P` (SmolLM2 by default),
opens the page, sends messages and checks that replies stream in, that Stop
cancels the request on the server (genloop_requests_running back to 0), that
server errors are shown, and that text is never interpreted as HTML.
Screenshots go to tests/artifacts/.

Needs Debian's chromium, chromium-driver and python3-selenium. Skips when they
or the model are missing, or when the server has no `serve` command or chat
endpoint yet, except under CI=true where all of that fails the test.
GENLOOP_WEBUI_URL=http://host:port points the test at a server already
running instead (for working on the UI).
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import SOURCE_DIR, build_dir, skip_or_fail

ARTIFACTS = SOURCE_DIR / "tests" / "artifacts"


def import_selenium():
    """Debian's python3-selenium lives in the system dist-packages, which a
    virtualenv made from another Python (e.g. pyenv) does not see."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")
        try:
            import selenium  # noqa: F401
        except ImportError:
            skip_or_fail("selenium is not installed (apt-get install python3-selenium)")
    from selenium import webdriver
    return webdriver


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as res:
        return res.status, res.read().decode("utf-8", "replace")


def http_status(url, data=None, timeout=30):
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            res.read()
            return res.status
    except urllib.error.HTTPError as e:
        return e.code


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    url = os.environ.get("GENLOOP_WEBUI_URL")
    if url:
        yield url.rstrip("/")
        return
    exe = build_dir() / "genloop"
    if not os.access(exe, os.X_OK):
        skip_or_fail(f"{exe} is not built (set GENLOOP_BUILD to the meson build folder)")
    model = Path(os.environ.get("GENLOOP_MODEL") or SOURCE_DIR / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not model.is_file():
        skip_or_fail(f"model {model} is missing (set GENLOOP_MODEL or run scripts/fetch-model)")
    probe = subprocess.run([str(exe), "serve", "--help"], capture_output=True, text=True, timeout=30)
    if "unknown command" in (probe.stdout + probe.stderr):
        skip_or_fail(f"{exe} has no serve command yet")

    port = free_port()
    log = (tmp_path_factory.mktemp("webui") / "server.log").open("w")
    proc = subprocess.Popen([str(exe), "serve", "-m", str(model), "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}; log in {log.name}")
            try:
                if http_get(url + "/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail(f"server not healthy after 180 s; log in {log.name}")
            time.sleep(0.3)
        try:
            status, page = http_get(url + "/")
        except urllib.error.HTTPError as e:
            status, page = e.code, ""
        if status == 404:
            skip_or_fail("the server does not serve the web UI at / yet")
        assert status == 200 and "<title>genloop chat</title>" in page
        chat = http_status(url + "/v1/chat/completions",
                           b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}')
        if chat == 404:
            skip_or_fail("the server has no /v1/chat/completions yet")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser():
    webdriver = import_selenium()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_exe = shutil.which("chromedriver")
    if not chromium or not driver_exe:
        skip_or_fail("chromium / chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="genloop-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,860"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_exe), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def running_requests(url):
    text = http_get(url + "/metrics")[1]
    m = re.search(r"^genloop_requests_running(?:\{[^}]*\})?\s+([0-9.eE+-]+)", text, re.M)
    assert m, "genloop_requests_running missing from /metrics"
    return float(m.group(1))


def screenshot(driver, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / name))


def test_webui_chat(server_url, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    d = browser
    d.get(server_url + "/")
    find = d.find_element

    def js(script, *args):
        return d.execute_script(script, *args)

    # Model name and health come from the server.
    wait_for(lambda: find(By.ID, "model").text not in ("", "loading…"), 30, "the model name")
    wait_for(lambda: "ok" in find(By.ID, "health").get_attribute("class"), 30, "health ok")

    def set_setting(id_, value):
        js("const el = document.getElementById(arguments[0]); el.value = arguments[1];"
           "el.dispatchEvent(new Event('input'));", id_, str(value))

    def assistant_texts():
        return js("return [...document.querySelectorAll('.msg.assistant .bubble')].map(b => b.textContent)")

    def n_stats():
        return len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats"))

    # 1. A short reply, sent with Enter, streams in and gets its stats. The
    #    message holds markup, which must show up as text.
    set_setting("max_tokens", 24)
    set_setting("temperature", 0)
    box = find(By.ID, "input")
    box.send_keys("Say hello. <b>bold?</b>")
    box.send_keys(Keys.SHIFT, Keys.ENTER)      # a newline, not a send
    assert len(d.find_elements(By.CSS_SELECTOR, ".msg.user")) == 0
    box.send_keys("Thanks!", Keys.ENTER)
    wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg.user")) == 1, 10, "the user message")
    user_bubble = find(By.CSS_SELECTOR, ".msg.user .bubble")
    assert "<b>bold?</b>" in user_bubble.text and "\n" in user_bubble.text
    assert not d.find_elements(By.CSS_SELECTOR, ".msg.user b"), "user text was parsed as HTML"
    wait_for(lambda: n_stats() == 1, 120, "the first reply to finish")
    stats = find(By.CSS_SELECTOR, ".msg.assistant .stats").text
    assert "TTFT" in stats and "tok" in stats, stats
    tokens = int(re.search(r"(\d+) tokens?", stats).group(1))
    assert 1 <= tokens <= 24, stats
    assert assistant_texts()[0].strip(), "empty reply"
    assert not d.find_elements(By.CSS_SELECTOR, ".msg.assistant .bubble *:not(div):not(pre)")
    screenshot(d, "webui-stats.png")

    # 2. A long reply grows over time; Stop cancels it on the server.
    set_setting("max_tokens", 2000)
    set_setting("temperature", 0.8)
    box.send_keys("Write a very long story about a dragon who learns to cook, with many chapters.", Keys.ENTER)
    wait_for(lambda: len(assistant_texts()) == 2 and len(assistant_texts()[1]) > 0, 120, "the second reply to start")
    first_len = len(assistant_texts()[1])
    wait_for(lambda: len(assistant_texts()[1]) > first_len + 120, 60, "the reply to grow")
    screenshot(d, "webui-streaming.png")
    assert find(By.ID, "stop").is_displayed(), "reply finished before Stop could be tested"
    find(By.ID, "stop").click()
    wait_for(lambda: find(By.ID, "send").is_displayed(), 10, "Send to come back after Stop")
    wait_for(lambda: n_stats() == 2, 10, "stats of the stopped reply")
    assert "stopped" in d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[1].text
    wait_for(lambda: running_requests(server_url) == 0, 15, "genloop_requests_running to return to 0")

    # 3. A server error (prompt longer than the context) is shown clearly.
    find(By.ID, "new-chat").click()
    assert not d.find_elements(By.CSS_SELECTOR, ".msg")
    js("const el = document.getElementById('input'); el.value = arguments[0];", "toolong " * 40000)
    find(By.ID, "send").click()
    error = wait_for(lambda: d.find_elements(By.CSS_SELECTOR, ".error"), 60, "an error message")[0]
    assert error.text.strip() and "Server error" not in error.text, error.text
    assert find(By.ID, "input").get_attribute("value").startswith("toolong"), "the failed message should come back"

    # 4. Phone width: the page still fits.
    d.set_window_size(390, 844)
    js("document.getElementById('input').value = ''")
    width = js("return document.documentElement.scrollWidth")
    assert width <= 400, f"page is {width}px wide at phone width"
    screenshot(d, "webui-phone.png")
