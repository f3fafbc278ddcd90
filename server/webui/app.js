// genloop web chat: conversations kept in the browser (IndexedDB), each a tree
// of messages whose edits and regenerations are branches; replies stream from
// /v1/chat/completions (SSE over fetch) and are drawn as Markdown by
// markdown.js. User text only ever reaches the page through textContent.
"use strict";

const $ = (id) => document.getElementById(id);
const chatEl = $("chat"), inputEl = $("input"), sendBtn = $("send"), stopBtn = $("stop-btn");

function make(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

function button(text, label, onClick, className = "act") {
  const b = make("button", className, text);
  b.type = "button";
  if (label) { b.setAttribute("aria-label", label); b.title = label; }
  b.addEventListener("click", onClick);
  return b;
}

const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

function announce(text) { $("status").textContent = text; }

// ---- storage: one IndexedDB record per conversation ---------------------------------
// Everything is also held in memory (state.convs); writes go through to the
// database. Without IndexedDB (some private modes) the chat still works, unsaved.
const store = {
  db: null,
  open() {
    return new Promise((resolve) => {
      if (!window.indexedDB) return resolve(null);
      const req = indexedDB.open("genloop-chat", 1);
      req.onupgradeneeded = () => req.result.createObjectStore("conversations", { keyPath: "id" });
      req.onsuccess = () => { this.db = req.result; resolve(this.db); };
      req.onerror = () => resolve(null);
    });
  },
  run(mode, fn) {
    if (!this.db) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const tx = this.db.transaction("conversations", mode);
      const req = fn(tx.objectStore("conversations"));
      tx.oncomplete = () => resolve(req.result);
      tx.onerror = () => reject(tx.error);
    });
  },
  all() { return this.run("readonly", (s) => s.getAll()); },
  put(conv) { return this.run("readwrite", (s) => s.put(conv)).catch((e) => showError("Could not save: " + e)); },
  remove(id) { return this.run("readwrite", (s) => s.delete(id)); },
};

// ---- settings, kept in localStorage -------------------------------------------------
// param: the request field; kind says how the input's text becomes its value.
const SETTINGS = [
  { id: "system", def: "", kind: "text" },
  { id: "temperature", def: 0.7, kind: "number", param: "temperature" },
  { id: "top_k", def: 40, kind: "int", param: "top_k" },
  { id: "top_p", def: 0.95, kind: "number", param: "top_p" },
  { id: "min_p", def: 0.05, kind: "number", param: "min_p" },
  { id: "repetition_penalty", def: 1, kind: "number", param: "repetition_penalty" },
  { id: "presence_penalty", def: 0, kind: "number", param: "presence_penalty" },
  { id: "frequency_penalty", def: 0, kind: "number", param: "frequency_penalty" },
  // llama.cpp's samplers: empty means off (or its default), so nothing is sent
  { id: "typical_p", def: "", kind: "number", param: "typical_p" },
  { id: "top_n_sigma", def: "", kind: "number", param: "top_n_sigma" },
  { id: "xtc_probability", def: "", kind: "number", param: "xtc_probability" },
  { id: "xtc_threshold", def: "", kind: "number", param: "xtc_threshold" },
  { id: "dynatemp_range", def: "", kind: "number", param: "dynatemp_range" },
  { id: "dynatemp_exponent", def: "", kind: "number", param: "dynatemp_exponent" },
  { id: "mirostat", def: "", kind: "int", param: "mirostat" },
  { id: "mirostat_tau", def: "", kind: "number", param: "mirostat_tau" },
  { id: "mirostat_eta", def: "", kind: "number", param: "mirostat_eta" },
  { id: "dry_multiplier", def: "", kind: "number", param: "dry_multiplier" },
  { id: "dry_base", def: "", kind: "number", param: "dry_base" },
  { id: "dry_allowed_length", def: "", kind: "int", param: "dry_allowed_length" },
  { id: "dry_penalty_last_n", def: "", kind: "int", param: "dry_penalty_last_n" },
  { id: "dry_sequence_breakers", def: "", kind: "json", param: "dry_sequence_breakers" },
  // empty: as many as the context has room for (the server's default)
  { id: "max_tokens", def: "", kind: "int", param: "max_tokens" },
  { id: "thinking_budget_tokens", def: "", kind: "int", param: "thinking_budget_tokens" },
  { id: "seed", def: "", kind: "int", param: "seed" },
  { id: "stop", def: "", kind: "lines", param: "stop" },
  { id: "json_output", def: false, kind: "bool" },
  { id: "theme", def: "auto", kind: "text" },
];

function settingValue(s) {
  const el = $(s.id);
  if (s.kind === "bool") return el.checked;
  return el.value;
}

function loadSettings() {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem("genloop.settings") || "{}"); } catch (e) { /* start over */ }
  for (const s of SETTINGS) {
    const v = s.id in saved ? saved[s.id] : s.def;
    if (s.kind === "bool") $(s.id).checked = !!v;
    else $(s.id).value = v;
  }
  applyTheme();
}

function saveSettings() {
  const out = {};
  for (const s of SETTINGS) out[s.id] = settingValue(s);
  localStorage.setItem("genloop.settings", JSON.stringify(out));
  applyTheme();
}

function applyTheme() {
  const theme = $("theme").value;
  if (theme === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

// The sampling fields of a request; empty or unreadable numbers are left out,
// so the server's defaults apply.
function requestSettings() {
  const body = {};
  for (const s of SETTINGS) {
    if (!s.param) continue;
    const text = String(settingValue(s)).trim();
    if (text === "") continue;
    if (s.kind === "lines") {
      const lines = text.split("\n").filter((l) => l !== "");
      if (lines.length) body[s.param] = lines;
    } else if (s.kind === "json") {
      // text that is not JSON goes as it is: the server's error names the field
      try { body[s.param] = JSON.parse(text); } catch (e) { body[s.param] = text; }
    } else {
      const n = s.kind === "int" ? Number.parseInt(text, 10) : Number.parseFloat(text);
      if (Number.isFinite(n)) body[s.param] = n;
    }
  }
  if ($("json_output").checked) body.response_format = { type: "json_object" };
  // Clamped by the model's usable context: a value at or past it means "all
  // the room there is", which the server gives when max_tokens is left out.
  if (body.max_tokens != null && state.contextLength && body.max_tokens >= state.contextLength) delete body.max_tokens;
  return body;
}

for (const s of SETTINGS) $(s.id).addEventListener(s.kind === "bool" || $(s.id).tagName === "SELECT" ? "change" : "input", saveSettings);
$("reset-settings").addEventListener("click", () => {
  localStorage.removeItem("genloop.settings");
  loadSettings();
  announce("Settings reset to defaults");
});
$("settings-toggle").addEventListener("click", () => {
  const panel = $("settings");
  panel.hidden = !panel.hidden;
  $("settings-toggle").setAttribute("aria-expanded", String(!panel.hidden));
});

// ---- API key: sessionStorage, or localStorage when "remember" is ticked ----------------
const KEY = "genloop.apiKey";
const apiKey = () => sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || "";

function authHeaders(extra) {
  const h = Object.assign({}, extra);
  const key = apiKey();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// Asked when /v1/models answers 401; after Cancel only when the user asks
// (Settings) or a request is refused, not on every health check.
let keyDialogOpen = false, keyDeclined = false;
function askForKey(reason, always = true) {
  const dlg = $("key-dialog");
  if (keyDialogOpen || (keyDeclined && !always)) return;
  keyDialogOpen = true;
  $("key-reason").textContent = reason;
  $("key-input").value = "";
  $("key-remember").checked = !!localStorage.getItem(KEY);
  dlg.showModal();
  $("key-input").focus();
}

$("key-form").addEventListener("submit", () => {
  const key = $("key-input").value.trim();
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
  if (key) ($("key-remember").checked ? localStorage : sessionStorage).setItem(KEY, key);
  keyDeclined = false;
  state.modelId = null;
  refreshModel();
});
$("key-forget").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
  $("key-dialog").close();
  announce("API key forgotten");
});
$("key-cancel").addEventListener("click", () => { keyDeclined = true; $("key-dialog").close(); });
$("key-dialog").addEventListener("close", () => { keyDialogOpen = false; });
$("key-dialog").addEventListener("cancel", () => { keyDeclined = true; });   // Esc
$("change-key").addEventListener("click", () => askForKey("Enter the server's API key."));

// ---- server status --------------------------------------------------------------------
const state = {
  convs: new Map(),        // id -> conversation
  activeId: null,
  modelId: null,           // the model requests name: the conversation's, else the one picked last
  models: [],              // /v1/models: {id, state, context_length, ...}
  contextLength: null,     // tokens per sequence, from /v1/models
  progressSupported: true, // cleared when the server rejects return_progress
  run: null,               // the reply in flight: {conv, node, controller}
  views: new Map(),        // node id -> Markdown.View of the messages on screen
  search: "",
};

// The server's models (/v1/models, one entry per model, aliases left out);
// with more than one, a select picks the model and each conversation keeps
// its own (conv.model).
async function refreshModel() {
  try {
    const res = await fetch("/v1/models", { headers: authHeaders() });
    if (res.status === 401) {
      $("model").textContent = "API key needed";
      askForKey(apiKey() ? "The API key was not accepted. Enter the server's API key." : "This server needs an API key.", false);
      return;
    }
    const body = await res.json();
    const seen = new Set();
    state.models = (body.data || []).filter((m) => {
      const key = m.path || m.id;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
    const conv = activeConv();
    const wanted = (conv && conv.model) || state.modelId;
    showModel(state.models.find((m) => m.id === wanted) || state.models[0]);
  } catch (e) {
    $("model").textContent = "model unknown";
  }
}

function showModel(model) {
  state.modelId = model ? model.id : null;
  state.contextLength = model && model.context_length ? model.context_length : null;
  const base = model && model.instruction_tuned === false;
  const several = state.models.length > 1;
  const where = !model || !several ? "" : model.state === "loaded" ? "loaded"
    : model.state === "loading" ? "loading " + Math.round(100 * (model.load_progress || 0)) + "%…"
    : "loads with the first message";
  $("model").textContent = !model ? "no model" : several ? where + (base ? " · base model" : "")
    : model.id + (base ? " · base model" : "");
  $("model").title = base ? "A base (pretrained) model: it continues text and is not tuned for chat; " +
    "replies may ramble or repeat. Use /v1/completions for it." : "Model served";
  $("model").classList.toggle("base", base);
  const select = $("model-select");
  select.hidden = !several;
  select.replaceChildren(...state.models.map((m) => {
    const opt = make("option", "", m.id + (m.state && m.state !== "loaded" ? " (" + m.state + ")" : ""));
    opt.value = m.id;
    return opt;
  }));
  if (model) select.value = model.id;
  limitMaxTokens();
  updateContext();
}

$("model-select").addEventListener("change", () => {
  const model = state.models.find((m) => m.id === $("model-select").value);
  const conv = activeConv();
  if (conv && model) {
    conv.model = model.id;
    store.put(conv);
  }
  showModel(model);
});

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
  if (ok && (!state.modelId || state.models.length > 1) && !keyDialogOpen) refreshModel();
}

// ---- conversations: a tree of messages under a root node ------------------------------
// node: {id, role, content, parent, children: [ids], active: index of the child shown,
//        stats (assistant)}; the path shown follows each node's active child.
function newConversation() {
  const now = Date.now();
  return { id: newId(), title: "", titleSet: false, created: now, updated: now,
           nodes: { root: { id: "root", role: "root", children: [], active: 0 } } };
}

const activeConv = () => state.convs.get(state.activeId) || null;

function pathOf(conv) {
  const out = [];
  let node = conv.nodes.root;
  while (node.children.length) {
    node = conv.nodes[node.children[Math.min(node.active, node.children.length - 1)]];
    out.push(node);
  }
  return out;
}

// The messages from the first one down to node (inclusive).
function ancestry(conv, id) {
  const out = [];
  for (let node = conv.nodes[id]; node && node.id !== "root"; node = conv.nodes[node.parent]) out.unshift(node);
  return out;
}

function addNode(conv, parentId, role, content) {
  const node = { id: newId(), role, content, parent: parentId, children: [], active: 0 };
  conv.nodes[node.id] = node;
  const parent = conv.nodes[parentId];
  parent.children.push(node.id);
  parent.active = parent.children.length - 1;
  return node;
}

function removeNode(conv, node) {
  const parent = conv.nodes[node.parent];
  parent.children = parent.children.filter((id) => id !== node.id);
  parent.active = Math.max(0, Math.min(parent.active, parent.children.length - 1));
  delete conv.nodes[node.id];
}

function touch(conv) {
  conv.updated = Date.now();
  if (!conv.titleSet) {
    const first = conv.nodes[conv.nodes.root.children[0]];
    conv.title = first ? first.content.replace(/\s+/g, " ").trim().slice(0, 80) : "";
  }
  store.put(conv);
}

function openConversation(id) {
  state.activeId = id;
  if (id) localStorage.setItem("genloop.active", id);
  else localStorage.removeItem("genloop.active");
  const conv = activeConv();
  const model = conv && conv.model && state.models.find((m) => m.id === conv.model);
  if (model) showModel(model);
  renderSidebar();
  renderChat();
  closeDrawer();
}

function conversationMatches(conv, q) {
  if (!q) return true;
  if ((conv.title || "").toLowerCase().includes(q)) return true;
  return Object.values(conv.nodes).some((n) => n.content && n.content.toLowerCase().includes(q));
}

function renderSidebar() {
  const list = $("conv-list");
  const q = state.search.trim().toLowerCase();
  const convs = [...state.convs.values()].filter((c) => conversationMatches(c, q))
    .sort((a, b) => b.updated - a.updated);
  list.replaceChildren(...convs.map(conversationItem));
  if (!convs.length) list.append(make("li", "conv-none", q ? "No conversation matches." : "No conversations yet."));
}

function conversationItem(conv) {
  const li = make("li", "conv" + (conv.id === state.activeId ? " active" : ""));
  li.dataset.id = conv.id;
  const open = button(conv.title || "New chat", null, () => openConversation(conv.id), "conv-title");
  if (conv.id === state.activeId) open.setAttribute("aria-current", "true");
  const rename = button("✎", "Rename conversation", () => renameConversation(conv, li));
  const del = button("🗑", "Delete conversation", () => deleteConversation(conv));
  li.append(open, rename, del);
  return li;
}

function renameConversation(conv, li) {
  const input = make("input", "conv-rename");
  input.value = conv.title;
  input.setAttribute("aria-label", "Conversation title");
  li.replaceChildren(input);
  input.focus();
  input.select();
  let done = false;
  const finish = (save) => {
    if (done) return;
    done = true;
    const title = input.value.trim();
    if (save && title) {
      conv.title = title;
      conv.titleSet = true;
      store.put(conv);
    }
    renderSidebar();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); finish(true); }
    if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); finish(false); }
  });
  input.addEventListener("blur", () => finish(true));
}

function deleteConversation(conv) {
  if (!confirm(`Delete "${conv.title || "New chat"}"?`)) return;
  if (state.run && state.run.conv === conv) state.run.controller.abort();
  state.convs.delete(conv.id);
  store.remove(conv.id);
  if (state.activeId === conv.id) openConversation(null);
  else renderSidebar();
}

$("search").addEventListener("input", () => { state.search = $("search").value; renderSidebar(); });
$("new-chat").addEventListener("click", () => { openConversation(null); inputEl.focus(); });

// ---- export and import ----------------------------------------------------------------
$("export").addEventListener("click", () => {
  const data = { format: "genloop-chat", version: 1, conversations: [...state.convs.values()] };
  const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], { type: "application/json" }));
  const a = make("a");
  a.href = url;
  a.download = "genloop-chat-" + new Date().toISOString().slice(0, 10) + ".json";
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
});

// A conversation from a file, checked field by field: the tree must hang
// together, or the page would break on it later.
function validConversation(c) {
  if (!c || typeof c.id !== "string" || !c.nodes || typeof c.nodes !== "object" || !c.nodes.root) return false;
  for (const [id, n] of Object.entries(c.nodes)) {
    if (!n || n.id !== id || !Array.isArray(n.children) || !Number.isInteger(n.active)) return false;
    if (id !== "root" && (typeof n.content !== "string" || !["user", "assistant"].includes(n.role) || !c.nodes[n.parent])) return false;
    if (n.children.some((child) => !c.nodes[child] || c.nodes[child].parent !== id)) return false;
  }
  return true;
}

$("import").addEventListener("change", async () => {
  const file = $("import").files[0];
  $("import").value = "";
  if (!file) return;
  let data;
  try { data = JSON.parse(await file.text()); } catch (e) { return showError(`Import: ${file.name} is not JSON (${e.message})`); }
  const list = Array.isArray(data) ? data : data && data.conversations;
  if (!Array.isArray(list)) return showError(`Import: ${file.name} holds no "conversations" list`);
  const bad = list.filter((c) => !validConversation(c)).length;
  const good = list.filter(validConversation);
  for (const c of good) {
    c.title = typeof c.title === "string" ? c.title : "";
    c.created = Number(c.created) || Date.now();
    c.updated = Number(c.updated) || c.created;
    state.convs.set(c.id, c);
    store.put(c);
  }
  announce(`Imported ${good.length} conversation(s)`);
  if (bad) showError(`Import: ${bad} conversation(s) in ${file.name} were malformed and skipped`);
  if (good.length) openConversation(good.sort((a, b) => b.updated - a.updated)[0].id);
});

// ---- the conversation on screen ----------------------------------------------------------
function scrollToEnd() { chatEl.scrollTop = chatEl.scrollHeight; }

function renderChat() {
  const conv = activeConv();
  state.views.clear();
  for (const el of [...chatEl.children]) if (el.id !== "empty") el.remove();
  const path = conv ? pathOf(conv) : [];
  $("empty").hidden = path.length > 0;
  for (const node of path) chatEl.append(messageElement(conv, node));
  updateContext();
  scrollToEnd();
}

// A reasoning model's thinking: a collapsible block above the answer, open
// while the thinking streams and closed once the answer starts. It stays in
// the conversation but is never sent back.
function showThinking(msg, node, streaming) {
  if (!node.reasoning) return;
  let block = msg.querySelector(".thinking");
  if (!block) {
    block = make("details", "thinking");
    block.append(make("summary", "", "Thinking"), make("div", "thinking-text"));
    block.open = streaming && !node.content;
    msg.querySelector(".bubble").before(block);
  }
  block.querySelector(".thinking-text").textContent = node.reasoning;
  block.querySelector("summary").textContent = streaming && !node.content ? "Thinking…" : "Thinking";
  if (streaming && node.content && !block.dataset.closed) { block.open = false; block.dataset.closed = "1"; }
}

function messageElement(conv, node) {
  const msg = make("article", "msg " + node.role);
  msg.dataset.id = node.id;
  msg.setAttribute("aria-label", node.role === "user" ? "You" : "Assistant");
  msg.append(make("div", "role", node.role === "user" ? "You" : "Assistant"));
  const bubble = make("div", "bubble");
  msg.append(bubble);
  const streaming = state.run && state.run.node === node;
  if (node.role === "user") {
    bubble.textContent = node.content;
  } else {
    const view = new Markdown.View(bubble);
    view.render(node.content, streaming);
    state.views.set(node.id, view);
    showThinking(msg, node, streaming);
    if (streaming) { msg.classList.add("streaming"); bubble.setAttribute("aria-busy", "true"); }
  }
  if (node.stats) msg.append(statsElement(node.stats));
  if (!streaming) msg.append(actionsElement(conv, node));
  return msg;
}

function actionsElement(conv, node) {
  const bar = make("div", "actions");
  const parent = conv.nodes[node.parent];
  if (parent.children.length > 1) {
    const i = parent.children.indexOf(node.id);
    const go = (d) => () => {
      parent.active = (i + d + parent.children.length) % parent.children.length;
      store.put(conv);
      renderChat();
    };
    const nav = make("span", "branch");
    nav.append(button("‹", "Previous version", go(-1)),
               make("span", "branch-pos", `${i + 1}/${parent.children.length}`),
               button("›", "Next version", go(1)));
    bar.append(nav);
  }
  bar.append(button("Copy", "Copy message", (e) => copyText(node.content, e.currentTarget)));
  if (node.role === "user") bar.append(button("Edit", "Edit and resend", () => editMessage(conv, node)));
  else bar.append(button("Regenerate", "Regenerate reply", () => { if (!state.run) generate(conv, node.parent); }));
  return bar;
}

function statsElement(s) {
  const el = make("div", "stats");
  const items = [];
  if (s.ttft != null) items.push("TTFT " + (s.ttft >= 1000 ? (s.ttft / 1000).toFixed(2) + " s" : Math.round(s.ttft) + " ms"));
  if (s.tps != null) items.push(s.tps.toFixed(1) + " tok/s");
  items.push(s.tokens + (s.tokens === 1 ? " token" : " tokens"));
  if (s.finish) items.push(s.finish);
  if (s.prompt != null) items.push(s.prompt + " prompt tokens");
  if (s.cached) items.push(s.cached + " cached");
  el.textContent = items.join(" · ");
  return el;
}

// Tokens the conversation's last reply used of the context (prompt + reply).
// The max_tokens field offers at most the model's usable context.
function limitMaxTokens() {
  const box = $("max_tokens");
  if (!state.contextLength) return;
  box.max = String(state.contextLength);
  box.placeholder = `up to ${state.contextLength}`;
  if (Number.parseInt(box.value, 10) >= state.contextLength) box.value = "";
}

function updateContext() {
  const conv = activeConv();
  const last = conv ? pathOf(conv).filter((n) => n.stats && n.stats.prompt != null).pop() : null;
  const box = $("context");
  if (!last || !state.contextLength) { box.hidden = true; return; }
  const used = last.stats.prompt + last.stats.tokens;
  box.hidden = false;
  $("context-text").textContent = `${used.toLocaleString()} / ${state.contextLength.toLocaleString()}`;
  $("context-meter").value = Math.min(1, used / state.contextLength);
  box.title = `Context: ${used} of ${state.contextLength} tokens used`;
}

function showError(message) {
  const el = make("div", "error", message);
  el.setAttribute("role", "alert");
  chatEl.append(el);
  scrollToEnd();
}

async function copyText(text, btn) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {
    // Not a secure context (plain http to another host): the old way.
    const area = make("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  if (btn) {
    const old = btn.textContent;
    btn.textContent = "Copied";
    setTimeout(() => { btn.textContent = old; }, 1200);
  }
  announce("Copied");
}

chatEl.addEventListener("click", (e) => {
  const btn = e.target.closest(".copy-code");
  if (btn) copyText(btn.closest(".code-block").querySelector("code").textContent, btn);
});

function editMessage(conv, node) {
  if (state.run) return;
  const msg = chatEl.querySelector(`.msg[data-id="${node.id}"]`);
  const area = make("textarea", "edit-box");
  area.value = node.content;
  area.setAttribute("aria-label", "Edit message");
  const save = () => {
    const text = area.value.trim();
    if (!text) return;
    const copy = addNode(conv, node.parent, "user", text);
    touch(conv);
    generate(conv, copy.id);
  };
  const row = make("div", "actions");
  row.append(button("Send", "Send edited message", save, "small"), button("Cancel", "Cancel edit", renderChat, "ghost small"));
  area.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); save(); }
    if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); renderChat(); }
  });
  msg.querySelector(".bubble").replaceWith(area);
  msg.querySelector(".actions").replaceWith(row);
  autosize(area);
  area.addEventListener("input", () => autosize(area));
  area.focus();
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

class HttpError extends Error {
  constructor(status, body) {
    const err = body && body.error;
    super(err ? (typeof err === "string" ? err : err.message || JSON.stringify(err)) : "Server error " + status);
    this.status = status;
    this.param = err && err.param;
  }
}

// POSTs the request; the server says which field it rejects, so a server
// without prompt progress (400 naming return_progress) is asked again without
// it, and not asked for it again in this page's life.
async function postChat(request, signal) {
  for (;;) {
    if (state.progressSupported) request.return_progress = true;
    else delete request.return_progress;
    const res = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify(request),
      signal,
    });
    if (res.ok) return res;
    let body = null;
    try { body = await res.json(); } catch (e) { /* not JSON */ }
    const err = new HttpError(res.status, body);
    if (res.status === 400 && state.progressSupported && (err.param === "return_progress" || /return_progress/.test(err.message))) {
      state.progressSupported = false;
      continue;
    }
    throw err;
  }
}

function buildRequest(conv, parentId) {
  const system = $("system").value.trim();
  const messages = ancestry(conv, parentId).map((n) => ({ role: n.role, content: n.content }));
  if (system) messages.unshift({ role: "system", content: system });
  const request = Object.assign({ messages, stream: true, stream_options: { include_usage: true } }, requestSettings());
  if (!conv.model && state.models.length > 1) conv.model = state.modelId; /* the conversation keeps it */
  const model = conv.model || state.modelId;
  if (model) request.model = model;
  return request;
}

function progressElement(msg) {
  let el = msg.querySelector(".progress");
  if (!el) {
    el = make("div", "progress");
    el.append(make("progress"), make("span", "progress-text"));
    msg.querySelector(".bubble").before(el);
  }
  return el;
}

function showProgress(msg, p) {
  const el = progressElement(msg);
  const bar = el.querySelector("progress");
  bar.max = Math.max(1, p.total);
  bar.value = p.processed;
  const pct = Math.floor((100 * p.processed) / Math.max(1, p.total));
  let text = `Reading prompt: ${p.processed.toLocaleString()} / ${p.total.toLocaleString()} tokens (${pct}%)`;
  if (p.cache) text += `, ${p.cache.toLocaleString()} cached`;
  el.querySelector(".progress-text").textContent = text;
  msg.dataset.progress = `${p.processed}/${p.total}`;
}

// Streams a reply to the messages down to parentId into a new assistant node.
async function generate(conv, parentId) {
  if (state.run) return;
  document.querySelectorAll("#chat > .error").forEach((el) => el.remove());
  const node = addNode(conv, parentId, "assistant", "");
  const controller = new AbortController();
  const run = state.run = { conv, node, controller };
  setBusy(true);
  if (conv.id === state.activeId) renderChat();
  announce("Assistant is replying");

  const request = buildRequest(conv, parentId);
  const picked = state.models.find((m) => m.id === request.model);
  let loadPoll = null;     // the model's load progress while the request waits for it
  if (picked && state.models.length > 1 && picked.state !== "loaded") {
    $("model").textContent = "loading " + picked.id + "…";
    loadPoll = setInterval(refreshModel, 500);
  }
  let chunks = 0, usage = null, timings = null, finish = null, failed = null;
  const start = performance.now();
  let firstAt = null, pending = false;
  const msgOnScreen = () => chatEl.querySelector(`.msg[data-id="${node.id}"]`);
  const paint = () => {
    pending = false;
    const view = state.views.get(node.id);
    if (!view) return;
    const nearEnd = chatEl.scrollHeight - chatEl.scrollTop - chatEl.clientHeight < 80;
    view.render(node.content, state.run === run);
    const msg = msgOnScreen();
    if (msg) showThinking(msg, node, state.run === run);
    if (nearEnd) scrollToEnd();
  };

  try {
    const res = await postChat(request, controller.signal);
    for await (const event of sseEvents(res, controller.signal)) {
      if (event.error) throw new HttpError(500, event);
      if (event.usage) usage = event.usage;
      if (event.timings) timings = event.timings;
      if (event.prompt_progress && firstAt === null) {
        const msg = msgOnScreen();
        if (msg) showProgress(msg, event.prompt_progress);
      }
      const choice = event.choices && event.choices[0];
      if (!choice) continue;
      if (choice.finish_reason) finish = choice.finish_reason;
      const thought = choice.delta && choice.delta.reasoning_content;
      if (thought) {
        node.reasoning = (node.reasoning || "") + thought;
        if (!pending) { pending = true; requestAnimationFrame(paint); }
      }
      const delta = choice.delta && choice.delta.content;
      if (thought && firstAt === null) {
        firstAt = performance.now();
        const msg = msgOnScreen();
        if (msg && msg.querySelector(".progress")) msg.querySelector(".progress").remove();
      }
      if (delta) {
        if (firstAt === null) {
          firstAt = performance.now();
          const msg = msgOnScreen();
          if (msg && msg.querySelector(".progress")) msg.querySelector(".progress").remove();
        }
        chunks++;
        node.content += delta;
        if (!pending) { pending = true; requestAnimationFrame(paint); }
      }
    }
  } catch (e) {
    if (controller.signal.aborted) finish = "stopped";
    else {
      failed = e;
      if (e.status === 401) askForKey("The server refused the request: " + e.message);
    }
  }
  const end = performance.now();
  state.run = null;
  setBusy(false);
  if (loadPoll) clearInterval(loadPoll);
  if (state.models.length > 1) refreshModel();
  const deleted = !state.convs.has(conv.id);

  if (failed && !node.content) {
    // The turn did not happen: drop the empty reply, and a new user message
    // with it, whose text goes back into the box to retry.
    removeNode(conv, node);
    const parent = conv.nodes[parentId];
    if (parent.role === "user" && !parent.children.length && parent.parent === "root" && conv.nodes.root.children.length === 1) {
      state.convs.delete(conv.id);
      store.remove(conv.id);
      putBack(parent.content);
      if (state.activeId === conv.id) { state.activeId = null; localStorage.removeItem("genloop.active"); }
    } else if (parent.role === "user" && !parent.children.length && !inputEl.value) {
      removeNode(conv, parent);
      putBack(parent.content);
      if (!deleted) touch(conv);
    }
  } else {
    const tokens = usage && usage.completion_tokens != null ? usage.completion_tokens : chunks;
    let ttft = firstAt === null ? null : firstAt - start;
    let tps = firstAt !== null && end > firstAt && tokens > 1 ? (tokens - 1) / ((end - firstAt) / 1000) : null;
    if (timings && timings.predicted_per_second) tps = timings.predicted_per_second;
    if (timings && timings.ttft_ms != null) ttft = timings.ttft_ms;
    const details = usage && usage.prompt_tokens_details;
    node.stats = { ttft, tps, tokens, finish: finish || (failed ? "error" : null),
                   prompt: usage ? usage.prompt_tokens : null,
                   cached: details && details.cached_tokens != null ? details.cached_tokens : null };
    if (!deleted) touch(conv);
  }
  renderSidebar();
  if (conv.id === state.activeId || state.activeId === null) renderChat();
  if (failed) { showError(failed.message || String(failed)); announce("Error: " + failed.message); }
  else announce("Reply finished");
}

function putBack(text) {
  if (inputEl.value) return;
  inputEl.value = text;
  autosize(inputEl);
}

function setBusy(busy) {
  sendBtn.hidden = busy;
  stopBtn.hidden = !busy;
  sendBtn.disabled = busy;
}

// ---- input ----------------------------------------------------------------------------
function submit() {
  const text = inputEl.value.trim();
  if (!text || state.run) return;
  let conv = activeConv();
  if (!conv) {
    conv = newConversation();
    state.convs.set(conv.id, conv);
    state.activeId = conv.id;
    localStorage.setItem("genloop.active", conv.id);
  }
  const path = pathOf(conv);
  const user = addNode(conv, path.length ? path[path.length - 1].id : "root", "user", text);
  touch(conv);
  inputEl.value = "";
  autosize(inputEl);
  renderSidebar();
  generate(conv, user.id);
}

function autosize(el) {
  el.style.height = "auto";
  el.style.height = el.scrollHeight + 2 + "px";
}

$("composer").addEventListener("submit", (e) => { e.preventDefault(); submit(); });
inputEl.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); }
});
inputEl.addEventListener("input", () => autosize(inputEl));
stopBtn.addEventListener("click", () => { if (state.run) state.run.controller.abort(); });

// ---- drawer (small screens) and keys ------------------------------------------------------
function closeDrawer() {
  document.body.classList.remove("drawer-open");
  $("backdrop").hidden = true;
  $("menu").setAttribute("aria-expanded", "false");
}
$("menu").addEventListener("click", () => {
  const open = !document.body.classList.contains("drawer-open");
  document.body.classList.toggle("drawer-open", open);
  $("backdrop").hidden = !open;
  $("menu").setAttribute("aria-expanded", String(open));
  if (open) $("search").focus();
});
$("backdrop").addEventListener("click", closeDrawer);

document.addEventListener("keydown", (e) => {
  if (e.key !== "Escape" || e.defaultPrevented || $("key-dialog").open) return;
  if (state.run) { state.run.controller.abort(); e.preventDefault(); }
  else if (document.body.classList.contains("drawer-open")) closeDrawer();
});

// ---- start ----------------------------------------------------------------------------
async function start() {
  loadSettings();
  refreshModel();
  refreshHealth();
  setInterval(refreshHealth, 10000);
  if (!(await store.open())) showError("This browser keeps no conversations (IndexedDB unavailable): they last until the page is closed.");
  try {
    for (const conv of (await store.all()) || []) state.convs.set(conv.id, conv);
  } catch (e) {
    showError("Could not read saved conversations: " + e);
  }
  const saved = localStorage.getItem("genloop.active");
  state.activeId = saved && state.convs.has(saved) ? saved : null;
  renderSidebar();
  renderChat();
  document.body.dataset.ready = "1";
  inputEl.focus();
}
start();
