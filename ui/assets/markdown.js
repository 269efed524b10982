/*
 * planb form pages: the agent's Markdown made interactive. Served from
 * /assets/markdown.js and loaded deferred, after the vendored highlight.js
 * and mermaid bundles (each only present on pages that need it).
 *
 * - code blocks with a known language are highlighted, and get a Copy button;
 * - mermaid blocks (server-rendered as <pre class="mermaid"> holding the
 *   escaped source) are drawn as SVG, re-drawn when the theme changes, and
 *   open in a lightbox (<dialog>: close with ×, a backdrop click or Esc).
 *
 * The page's CSP forbids inline styles, and mermaid writes many: see
 * withCssomStyles for how they are kept working without 'unsafe-inline'.
 */
(() => {
  "use strict";

  const PLAIN_LANGUAGES = new Set(["text", "txt", "plain", "plaintext", "ascii", "none"]);
  const $ = (selector, scope = document) => scope.querySelector(selector);
  const $$ = (selector, scope = document) => Array.from(scope.querySelectorAll(selector));

  /* The theme form.js applied: an explicit choice, else the system's. */
  function currentTheme() {
    const chosen = document.documentElement.dataset.theme;
    if (chosen === "light" || chosen === "dark") return chosen;
    return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }

  function highlightCode() {
    const hljs = window.hljs;
    for (const code of $$(".md pre > code")) {
      const match = /(?:^|\s)language-(\S+)/.exec(code.className);
      const language = match ? match[1].toLowerCase() : "";
      if (hljs && language && !PLAIN_LANGUAGES.has(language) && hljs.getLanguage(language)) {
        hljs.highlightElement(code);
      }
      addCopyButton(code.parentElement);
    }
  }

  function addCopyButton(pre) {
    if (!navigator.clipboard || pre.parentElement.classList.contains("code-block")) return;
    const wrapper = document.createElement("div");
    wrapper.className = "code-block";
    pre.replaceWith(wrapper);
    wrapper.append(pre);
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy-code";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy code");
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(pre.textContent);
        button.textContent = "Copied";
      } catch {
        button.textContent = "Copy failed";
      }
      button.classList.add("is-done");
      window.setTimeout(() => {
        button.textContent = "Copy";
        button.classList.remove("is-done");
      }, 1600);
    });
    wrapper.append(button);
  }

  /* Mermaid's "base" theme, coloured like the page. */
  const MERMAID_THEMES = {
    light: {
      darkMode: false,
      background: "#ffffff",
      primaryColor: "#eef0ff",
      primaryBorderColor: "#a5a8f0",
      primaryTextColor: "#161a26",
      secondaryColor: "#f4f5f9",
      secondaryBorderColor: "#cdd1dd",
      tertiaryColor: "#ffffff",
      tertiaryBorderColor: "#cdd1dd",
      lineColor: "#7d8399",
      textColor: "#161a26",
      edgeLabelBackground: "#ffffff",
      clusterBkg: "#f6f7ff",
      clusterBorder: "#cdd1dd",
      noteBkgColor: "#fff6e5",
      noteBorderColor: "#f3dcaa",
      noteTextColor: "#161a26",
    },
    dark: {
      darkMode: true,
      background: "#161a26",
      primaryColor: "#252a4a",
      primaryBorderColor: "#5d57c9",
      primaryTextColor: "#e8eaf1",
      secondaryColor: "#1d2231",
      secondaryBorderColor: "#363c52",
      tertiaryColor: "#161a26",
      tertiaryBorderColor: "#363c52",
      lineColor: "#8a90a3",
      textColor: "#e8eaf1",
      edgeLabelBackground: "#1d2231",
      clusterBkg: "#1a1e2b",
      clusterBorder: "#363c52",
      noteBkgColor: "#2b2616",
      noteBorderColor: "#5c4a1f",
      noteTextColor: "#e8eaf1",
    },
  };

  const diagrams = [];
  let diagramRound = 0;
  let lightboxDiagram = null;

  function collectDiagrams() {
    for (const pre of $$(".md pre.mermaid")) {
      const host = document.createElement("div");
      host.className = "diagram";
      host.tabIndex = 0;
      host.setAttribute("role", "button");
      host.setAttribute("aria-label", "Diagram. Press Enter to open a larger view.");
      pre.replaceWith(host);
      host.append(pre);
      const diagram = { host, source: pre.textContent, sheet: null };
      host.addEventListener("click", () => openLightbox(diagram));
      host.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          openLightbox(diagram);
        }
      });
      diagrams.push(diagram);
    }
  }

  async function renderDiagrams() {
    const mermaid = window.mermaid;
    if (!mermaid || diagrams.length === 0) return;
    closeLightbox();
    diagramRound += 1;
    const round = diagramRound;
    const fontFamily = window.getComputedStyle(document.body).fontFamily;
    mermaid.initialize({
      startOnLoad: false,
      securityLevel: "strict",
      suppressErrorRendering: true,
      theme: "base",
      fontFamily,
      themeVariables: { fontFamily, fontSize: "15px", ...MERMAID_THEMES[currentTheme()] },
    });
    for (const [index, diagram] of diagrams.entries()) {
      if (round !== diagramRound) return;
      try {
        const sheet = new CSSStyleSheet();
        adoptSheet(diagram, sheet);
        const { svg } = await withCssomStyles(sheet, () =>
          mermaid.render(`planb-diagram-${round}-${index}`, diagram.source),
        );
        if (round !== diagramRound) return;
        mountSvg(diagram, svg);
      } catch (error) {
        showDiagramError(diagram, error);
      }
    }
  }

  /* While mermaid draws, the inline styles it writes (which the CSP would
     refuse, leaving its text measurements wrong and the console full of
     reports) go through CSSOM instead, which the CSP allows:
     - `setAttribute("style", …)` becomes a `cssText` assignment;
     - its <style> sheet becomes a constructed stylesheet, and the emptied
       <style> element is never inserted; its rules are scoped to the
       diagram's id, so they apply while mermaid measures and afterwards;
     - markup it parses (DOMPurify, innerHTML) carries `style="…"` renamed to
       a marker attribute, which `applyMarkedStyles` turns into `cssText`.
     The patches change nothing but how styles are applied, so other code
     that runs while mermaid awaits is unaffected; they are removed after. */
  const STYLE_MARK = "data-planb-style";
  const TAG = /<[a-zA-Z][^<>]*>/g;
  const STYLE_ATTRIBUTE = /(\s)style=("[^"]*"|'[^']*')/g;
  const STYLE_ELEMENT = /<style\b[^>]*>([\s\S]*?)<\/style>/g;

  function markStyles(markup) {
    return markup.replace(TAG, (tag) => tag.replace(STYLE_ATTRIBUTE, `$1${STYLE_MARK}=$2`));
  }

  function applyMarkedStyles(scope) {
    const marked = [...scope.querySelectorAll(`[${STYLE_MARK}]`)];
    if (scope.hasAttribute && scope.hasAttribute(STYLE_MARK)) marked.push(scope);
    for (const element of marked) {
      element.style.cssText = element.getAttribute(STYLE_MARK);
      element.removeAttribute(STYLE_MARK);
    }
  }

  async function withCssomStyles(sheet, draw) {
    const restore = [];
    const patch = (target, name, descriptor) => {
      restore.push([target, name, Object.getOwnPropertyDescriptor(target, name)]);
      Object.defineProperty(target, name, { configurable: true, ...descriptor });
    };
    const setAttribute = Element.prototype.setAttribute;
    const insertBefore = Node.prototype.insertBefore;
    const appendChild = Node.prototype.appendChild;
    const parseFromString = DOMParser.prototype.parseFromString;
    const innerHtml = Object.getOwnPropertyDescriptor(Element.prototype, "innerHTML");
    const captured = new WeakSet();
    let css = "";
    patch(Element.prototype, "setAttribute", {
      value(name, value) {
        if (String(name).toLowerCase() === "style") this.style.cssText = String(value);
        else setAttribute.call(this, name, value);
      },
    });
    patch(Element.prototype, "innerHTML", {
      get: innerHtml.get,
      set(value) {
        if (this.localName === "style") {
          css += String(value) + "\n";
          sheet.replaceSync(css);
          captured.add(this);
          return;
        }
        innerHtml.set.call(this, markStyles(String(value)));
        applyMarkedStyles(this);
      },
    });
    patch(Node.prototype, "insertBefore", {
      value(node, child) {
        return captured.has(node) ? node : insertBefore.call(this, node, child);
      },
    });
    patch(Node.prototype, "appendChild", {
      value(node) {
        return captured.has(node) ? node : appendChild.call(this, node);
      },
    });
    patch(DOMParser.prototype, "parseFromString", {
      value(markup, type) {
        const text = markStyles(String(markup)).replace(STYLE_ELEMENT, (element, rules) =>
          rules.trim() === "" ? "" : element,
        );
        return parseFromString.call(this, text, type);
      },
    });
    try {
      return await draw();
    } finally {
      for (const [target, name, descriptor] of restore.reverse()) {
        Object.defineProperty(target, name, descriptor);
      }
    }
  }

  function adoptSheet(diagram, sheet) {
    const others = document.adoptedStyleSheets.filter((s) => s !== diagram.sheet);
    document.adoptedStyleSheets = [...others, sheet];
    diagram.sheet = sheet;
  }

  /* Puts mermaid's SVG text into the page, again without inline styles:
     any <style> text joins the diagram's constructed sheet, and style
     attributes are renamed before parsing and set back through CSSOM. */
  function mountSvg(diagram, svgText) {
    let css = "";
    const markup = markStyles(svgText).replace(STYLE_ELEMENT, (element, rules) => {
      css += rules + "\n";
      return "";
    });
    const parsed = new DOMParser().parseFromString(markup, "image/svg+xml");
    const svg = parsed.documentElement;
    if (!svg || svg.nodeName.toLowerCase() !== "svg") throw new Error("the diagram did not render");
    if (css.trim() !== "") {
      const existing = Array.from(diagram.sheet.cssRules, (rule) => rule.cssText).join("\n");
      diagram.sheet.replaceSync(existing + "\n" + css);
    }
    const adopted = document.adoptNode(svg);
    applyMarkedStyles(adopted);
    adopted.setAttribute("role", "img");
    diagram.host.classList.remove("diagram-failed");
    diagram.host.replaceChildren(adopted);
  }

  function showDiagramError(diagram, error) {
    const note = document.createElement("p");
    note.className = "diagram-error";
    const detail = error && error.message ? error.message.split("\n")[0] : "";
    note.textContent = "This diagram could not be drawn" + (detail ? ": " + detail : ".");
    const pre = document.createElement("pre");
    pre.textContent = diagram.source;
    diagram.host.classList.add("diagram-failed");
    diagram.host.removeAttribute("role");
    diagram.host.removeAttribute("aria-label");
    diagram.host.replaceChildren(note, pre);
  }

  function openLightbox(diagram) {
    const dialog = document.getElementById("lightbox");
    const svg = $("svg", diagram.host);
    if (!dialog || !svg || diagram.host.classList.contains("diagram-failed")) return;
    // The SVG itself moves into the dialog and back, so its CSSOM styles
    // and internal references stay intact.
    diagram.host.classList.add("is-in-lightbox");
    $(".lightbox-content", dialog).replaceChildren(svg);
    lightboxDiagram = diagram;
    dialog.showModal();
    $(".lightbox-close", dialog).focus();
  }

  function closeLightbox() {
    const dialog = document.getElementById("lightbox");
    if (dialog && dialog.open) dialog.close();
  }

  function initLightbox() {
    const dialog = document.getElementById("lightbox");
    if (!dialog) return;
    $(".lightbox-close", dialog).addEventListener("click", () => dialog.close());
    dialog.addEventListener("click", (event) => {
      if (event.target === dialog) dialog.close();
    });
    dialog.addEventListener("close", () => {
      const diagram = lightboxDiagram;
      lightboxDiagram = null;
      if (!diagram) return;
      const svg = $(".lightbox-content svg", dialog);
      if (svg) diagram.host.replaceChildren(svg);
      diagram.host.classList.remove("is-in-lightbox");
      diagram.host.focus();
    });
  }

  // Deferred scripts run once the document is parsed.
  initLightbox();
  collectDiagrams();
  highlightCode();
  renderDiagrams();
  // form.js announces theme changes (the toggle, or the system's while no
  // choice is stored); diagrams are drawn in the theme's colours.
  document.addEventListener("planb:themechange", () => {
    renderDiagrams();
  });
})();
