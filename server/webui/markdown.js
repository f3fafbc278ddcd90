// markdown.js -- a reply's Markdown as sanitized DOM, with highlighted code and
// KaTeX math, kept up to date block by block while the reply streams.
//
// marked (libjs-marked) splits the text into top-level blocks; each block is
// turned into HTML, highlighted (libjs-highlight.js) and cleaned by DOMPurify
// (node-dompurify) before it reaches the page. Math is lifted out of the
// Markdown as its own tokens, so `_` and `*` inside it are not emphasis, and
// KaTeX (libjs-katex) draws it into the cleaned DOM (through the DOM, not
// HTML text, which the page's Content-Security-Policy would strip of styles).
"use strict";

const Markdown = (() => {
  const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");

  // $$...$$ and \[...\] on their own lines are display math.
  const mathBlock = {
    name: "mathBlock",
    level: "block",
    start(src) { const m = /\$\$|\\\[/.exec(src); return m ? m.index : undefined; },
    tokenizer(src) {
      const m = /^\$\$([\s\S]+?)\$\$[^\S\n]*(?:\n|$)/.exec(src) || /^\\\[([\s\S]+?)\\\][^\S\n]*(?:\n|$)/.exec(src);
      if (m) return { type: "mathBlock", raw: m[0], text: m[1].trim() };
      return undefined;
    },
    renderer(token) { return `<div class="math" data-display="1">${escapeHtml(token.text)}</div>\n`; },
  };

  // $...$ and \(...\) inline. Like Pandoc, "$" must not be followed by a space
  // nor the closing one preceded by a space or followed by a digit, so prices
  // ("$5 and $10") stay text.
  const mathInline = {
    name: "mathInline",
    level: "inline",
    start(src) { const m = /\$|\\\(/.exec(src); return m ? m.index : undefined; },
    tokenizer(src) {
      let m = /^\$\$([\s\S]+?)\$\$/.exec(src);
      if (m) return { type: "mathInline", raw: m[0], text: m[1].trim(), display: true };
      m = /^\$(?![\s$])((?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d)/.exec(src) || /^\\\(([\s\S]+?)\\\)/.exec(src);
      if (m) return { type: "mathInline", raw: m[0], text: m[1], display: false };
      return undefined;
    },
    renderer(token) {
      return `<span class="math"${token.display ? ' data-display="1"' : ""}>${escapeHtml(token.text)}</span>`;
    },
  };

  // Code is highlighted here, as HTML, so the sanitizer sees it too. Only a
  // named language is highlighted: guessing tries every grammar, too slow to
  // run on each streamed token.
  const renderer = {
    code(code, info) {
      const lang = (info || "").trim().split(/\s+/)[0].toLowerCase();
      const known = lang && window.hljs && hljs.getLanguage(lang);
      const body = known ? hljs.highlight(lang, code, true).value : escapeHtml(code);
      return `<pre><code class="hljs"${lang ? ` data-lang="${escapeHtml(lang)}"` : ""}>${body}</code></pre>\n`;
    },
    // Task lists as characters: the sanitizer lets no <input> through.
    checkbox(checked) {
      return checked ? "\u2611 " : "\u2610 ";
    },
  };

  marked.use({ extensions: [mathBlock, mathInline], renderer, gfm: true, headerIds: false, mangle: false });

  // Links from a reply open in a new tab and tell the target nothing.
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A" && node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });

  // A reply is text to read: nothing in it may post data, load a page or
  // move the page's base. DOMPurify keeps forms and their controls by
  // default, and a <form action="https://elsewhere/"> with a button would
  // send what is typed into it off the page.
  const SANITIZE = {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ["form", "input", "button", "select", "option", "optgroup", "textarea", "datalist",
                  "fieldset", "output", "iframe", "frame", "frameset", "object", "embed", "base",
                  "meta", "link", "style", "dialog"],
    FORBID_ATTR: ["action", "formaction", "form", "srcdoc", "style"],
  };

  // One block's tokens -> a cleaned fragment, with math drawn and code and
  // tables wrapped for their copy button and scrolling.
  function renderBlock(token, links) {
    const tokens = [token];
    tokens.links = links;
    const html = marked.parser(tokens);
    const frag = DOMPurify.sanitize(html, SANITIZE);
    for (const el of frag.querySelectorAll(".math")) {
      const tex = el.textContent;
      try {
        katex.render(tex, el, { displayMode: el.dataset.display === "1", throwOnError: false });
      } catch (e) {
        el.textContent = tex;   // KaTeX failed outright: show the source
      }
    }
    for (const pre of frag.querySelectorAll("pre")) {
      const code = pre.querySelector("code");
      if (!code) continue;
      const box = document.createElement("div");
      box.className = "code-block";
      const head = document.createElement("div");
      head.className = "code-head";
      const lang = document.createElement("span");
      lang.textContent = code.dataset.lang || "code";
      const copy = document.createElement("button");
      copy.type = "button";
      copy.className = "copy-code";
      copy.textContent = "Copy";
      copy.setAttribute("aria-label", "Copy code");
      head.append(lang, copy);
      pre.replaceWith(box);
      box.append(head, pre);
    }
    for (const table of frag.querySelectorAll("table")) {
      const wrap = document.createElement("div");
      wrap.className = "table-wrap";
      table.replaceWith(wrap);
      wrap.append(table);
    }
    return frag;
  }

  // The innermost block element at the end of el: where an inline cursor goes.
  const CONTAINERS = /^(DIV|P|UL|OL|LI|BLOCKQUOTE|PRE|CODE|TABLE|THEAD|TBODY|TR|TD|TH|H[1-6])$/;
  function lastContainer(el) {
    for (;;) {
      const child = el.lastElementChild;
      if (!child || !CONTAINERS.test(child.tagName) || child.classList.contains("math") ||
          child.classList.contains("code-head")) return el;
      el = child;
    }
  }

  // A view of one reply: render(text) keeps the blocks whose source did not
  // change and rebuilds the rest (while streaming, usually only the last).
  class View {
    constructor(el) {
      this.el = el;
      this.blocks = [];   // [{raw, node}] in order; node is null for blank space
      this.cursor = null;
    }

    render(text, streaming) {
      const tokens = marked.lexer(text);
      let keep = 0;
      while (keep < tokens.length && keep < this.blocks.length && this.blocks[keep].raw === tokens[keep].raw) keep++;
      for (const b of this.blocks.splice(keep)) if (b.node) b.node.remove();
      for (let i = keep; i < tokens.length; i++) {
        let node = null;
        if (tokens[i].type !== "space") {
          node = document.createElement("div");
          node.className = "md";
          node.append(renderBlock(tokens[i], tokens.links));
          this.el.append(node);
        }
        this.blocks.push({ raw: tokens[i].raw, node });
      }
      this.setCursor(streaming);
    }

    setCursor(on) {
      if (this.cursor) this.cursor.remove();
      this.cursor = null;
      if (!on) return;
      this.cursor = document.createElement("span");
      this.cursor.className = "cursor";
      this.cursor.setAttribute("aria-hidden", "true");
      lastContainer(this.el).append(this.cursor);
    }
  }

  return { View };
})();
