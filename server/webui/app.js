// genloop web chat: talks to /v1/chat/completions with streaming (SSE over
// fetch), shows each reply as it grows, and times it. Model text only ever
// reaches the page through textContent, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const chatEl = $("chat"), inputEl = $("input"), sendBtn = $("send"), stopBtn = $("stop");
const settingsEl = $("settings"), settingsBtn = $("settings-toggle");

const state = {
  history: [],        // [{role, content}] sent with each request (system prompt added on send)
  controller: null,   // AbortController of the request in flight
  modelId: null,
  epoch: 0,           // bumped by New chat, so a reply still finishing is not kept
};

// ---- settings, remembered across visits ------------------------------------------
const SETTINGS = ["system", "temperature", "top_p", "max_tokens"];

function loadSettings() {
  for (const key of SETTINGS) {
    const saved = localStorage.getItem("genloop." + key);
    if (saved !== null) $(key).value = saved;
  }
  for (const key of ["temperature", "top_p"]) $(key + "-out").textContent = $(key).value;
}

for (const key of SETTINGS) {
  $(key).addEventListener("input", () => {
    localStorage.setItem("genloop." + key, $(key).value);
    if ($(key + "-out")) $(key + "-out").textContent = $(key).value;
  });
}

settingsBtn.addEventListener("click", () => {
  settingsEl.hidden = !settingsEl.hidden;
  settingsBtn.setAttribute("aria-expanded", String(!settingsEl.hidden));
});

// ---- server status ----------------------------------------------------------------
async function refreshModel() {
  try {
    const res = await fetch("/v1/models");
    const body = await res.json();
    const model = body.data && body.data[0];
    state.modelId = model ? model.id : null;
    $("model").textContent = model ? model.id : "no model";
  } catch (e) {
    $("model").textContent = "model unknown";
  }
}

async function refreshHealth() {
  const el = $("health");
  let ok = false, text = "unreachable";
  try {
    const res = await fetch("/health", { cache: "no-store" });
    ok = res.ok;
    text = ok ? "ready" : res.status === 503 ? "loading" : "error " + res.status;
  } catch (e) { /* keep "unreachable" */ }
  el.classList.toggle("ok", ok);
  el.classList.toggle("bad", !ok);
  $("health-text").textContent = text;
  if (ok && !state.modelId) refreshModel();
}

// ---- rendering --------------------------------------------------------------------
function scrollToEnd() { chatEl.scrollTop = chatEl.scrollHeight; }

function addMessage(role) {
  $("empty").hidden = true;
  const msg = document.createElement("div");
  msg.className = "msg " + role;
  const label = document.createElement("div");
  label.className = "role";
  label.textContent = role === "user" ? "You" : "Assistant";
  const bubble = document.createElement("div");
  bubble.className = "bubble";
  msg.append(label, bubble);
  chatEl.append(msg);
  return msg;
}

// Plain text with ``` fenced blocks shown as <pre>; an unclosed fence (still
// streaming) is shown as code too. Everything goes in through textContent.
function renderText(bubble, text) {
  const parts = text.split("```");
  const nodes = [];
  parts.forEach((part, i) => {
    if (i % 2 === 0) {
      if (part) {
        const span = document.createElement("div");
        span.className = "text";
        // The line breaks that open and close a fence belong to it.
        span.textContent = part.replace(i > 0 ? /^\n{1,2}/ : /^$/, "").replace(i < parts.length - 1 ? /\n{1,2}$/ : /^$/, "");
        nodes.push(span);
      }
      return;
    }
    const pre = document.createElement("pre");
    const newline = part.indexOf("\n");
    const lang = newline > 0 ? part.slice(0, newline).trim() : "";
    if (lang && /^[\w+#.-]{1,20}$/.test(lang)) pre.dataset.lang = lang;
    pre.textContent = (newline >= 0 && (lang === "" || pre.dataset.lang) ? part.slice(newline + 1) : part).replace(/\n$/, "");
    nodes.push(pre);
  });
  bubble.replaceChildren(...nodes);
}

function showError(message) {
  const el = document.createElement("div");
  el.className = "error";
  el.setAttribute("role", "alert");
  el.textContent = message;
  chatEl.append(el);
  scrollToEnd();
}

function showStats(msg, s) {
  const el = document.createElement("div");
  el.className = "stats";
  const items = [];
  if (s.ttft !== null) items.push("TTFT " + (s.ttft >= 1000 ? (s.ttft / 1000).toFixed(2) + " s" : Math.round(s.ttft) + " ms"));
  if (s.tokensPerSecond !== null) items.push(s.tokensPerSecond.toFixed(1) + " tok/s");
  items.push(s.tokens + (s.tokens === 1 ? " token" : " tokens"));
  if (s.finish) items.push(s.finish);
  for (const item of items) {
    const span = document.createElement("span");
    span.textContent = item;
    el.append(span);
  }
  msg.append(el);
}

// ---- streaming ----------------------------------------------------------------------
// Yields the JSON payload of each "data: ..." line until "[DONE]".
async function* sseEvents(response, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (!line.startsWith("data:")) continue;   // blank separators, comments, event: lines
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  } finally {
    if (signal.aborted) reader.cancel().catch(() => {});
  }
}

function errorText(body, status) {
  if (body && body.error) return typeof body.error === "string" ? body.error : body.error.message || JSON.stringify(body.error);
  return "Server error " + status;
}

async function send(text) {
  const system = $("system").value.trim();
  const epoch = state.epoch;
  state.history.push({ role: "user", content: text });
  renderText(addMessage("user").querySelector(".bubble"), text);

  const msg = addMessage("assistant");
  msg.classList.add("streaming");
  const bubble = msg.querySelector(".bubble");
  scrollToEnd();

  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);

  const request = {
    messages: (system ? [{ role: "system", content: system }] : []).concat(state.history),
    stream: true,
    stream_options: { include_usage: true },
    temperature: parseFloat($("temperature").value),
    top_p: parseFloat($("top_p").value),
    max_tokens: parseInt($("max_tokens").value, 10) || undefined,
  };
  if (state.modelId) request.model = state.modelId;

  let reply = "", chunks = 0, usage = null, timings = null, finish = null, failed = null;
  const start = performance.now();
  let firstAt = null, pending = false;
  const paint = () => {
    pending = false;
    renderText(bubble, reply);
    const nearEnd = chatEl.scrollHeight - chatEl.scrollTop - chatEl.clientHeight < 80;
    if (nearEnd) scrollToEnd();
  };

  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request),
      signal: controller.signal,
    });
    if (!res.ok) {
      let body = null;
      try { body = await res.json(); } catch (e) { /* not JSON */ }
      throw new Error(errorText(body, res.status));
    }
    for await (const event of sseEvents(res, controller.signal)) {
      if (event.error) throw new Error(errorText(event, 500));
      if (event.usage) usage = event.usage;
      if (event.timings) timings = event.timings;
      const choice = event.choices && event.choices[0];
      if (!choice) continue;
      if (choice.finish_reason) finish = choice.finish_reason;
      const delta = choice.delta && choice.delta.content;
      if (delta) {
        if (firstAt === null) firstAt = performance.now();
        chunks++;
        reply += delta;
        if (!pending) { pending = true; requestAnimationFrame(paint); }
      }
    }
  } catch (e) {
    if (controller.signal.aborted) finish = "stopped";
    else failed = e.message || String(e);
  }
  const end = performance.now();
  paint();
  msg.classList.remove("streaming");
  if (state.controller === controller) {
    state.controller = null;
    setBusy(false);
  }

  if (epoch !== state.epoch) return;    // New chat was pressed meanwhile
  if (failed !== null) {
    if (!reply) msg.remove();
    state.history.pop();                 // the turn did not happen; let the user retry
    if (!inputEl.value) inputEl.value = text;
    showError(failed);
    return;
  }
  state.history.push({ role: "assistant", content: reply });

  // Prefer the server's own numbers when it sends them.
  const tokens = usage && usage.completion_tokens != null ? usage.completion_tokens : chunks;
  let ttft = firstAt === null ? null : firstAt - start;
  let tps = firstAt !== null && end > firstAt && tokens > 1 ? (tokens - 1) / ((end - firstAt) / 1000) : null;
  if (timings) {
    if (timings.predicted_per_second != null) tps = timings.predicted_per_second;
    if (timings.ttft_ms != null) ttft = timings.ttft_ms;
    else if (timings.prompt_ms != null && ttft === null) ttft = timings.prompt_ms;
  }
  showStats(msg, { ttft, tokensPerSecond: tps, tokens, finish });
  scrollToEnd();
}

function setBusy(busy) {
  sendBtn.hidden = busy;
  stopBtn.hidden = !busy;
  sendBtn.disabled = busy;
}

// ---- input ----------------------------------------------------------------------------
function submit() {
  const text = inputEl.value.trim();
  if (!text || state.controller) return;
  inputEl.value = "";
  autosize();
  send(text);
}

function autosize() {
  inputEl.style.height = "auto";
  inputEl.style.height = inputEl.scrollHeight + 2 + "px";
}

$("composer").addEventListener("submit", (e) => { e.preventDefault(); submit(); });
inputEl.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); }
});
inputEl.addEventListener("input", autosize);
stopBtn.addEventListener("click", () => { if (state.controller) state.controller.abort(); });

$("new-chat").addEventListener("click", () => {
  if (state.controller) state.controller.abort();
  state.epoch++;
  state.history = [];
  for (const el of [...chatEl.children]) if (el.id !== "empty") el.remove();
  $("empty").hidden = false;
  inputEl.focus();
});

loadSettings();
refreshModel();
refreshHealth();
setInterval(refreshHealth, 10000);
inputEl.focus();
