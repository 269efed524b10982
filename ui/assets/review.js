/*
 * planb plan review page. Served from /assets/review.js and loaded deferred
 * at the end of the body, so it runs after markdown.js has highlighted the
 * code and wrapped the diagrams. form.js (in <head>) owns the theme.
 *
 * What it adds to the server-rendered page:
 * - the Plan / Changes tabs (WAI-ARIA tab pattern);
 * - comments anchored to passages of the rendered plan: select text and
 *   choose "Add comment" (or press C), or use the comment button beside a
 *   block (one Tab stop; Up/Down move between blocks). Quoted passages are
 *   painted with the CSS Custom Highlight API, which leaves the plan's DOM
 *   untouched; where the API is missing the comments still work, unpainted;
 * - the overall feedback, the character limits, and the two verdicts:
 *   "Request changes" needs feedback or a comment, "Approve" needs a second,
 *   deliberate click on "Confirm approval".
 *
 * It talks to the local callback server with one relative URL:
 *   POST /review {rid, verdict: "approve" | "changes", feedback,
 *                 comments: [{quote, text}]}
 *     200 {status: "recorded"}; 422 {error}; 404 / 409 {error}
 * The rid and the limits come from the form's data-* attributes; the limits
 * are the server's (pages::review::REVIEW_*_MAX), counted in Unicode code
 * points as Rust's str::chars counts them. Nothing is kept in storage.
 */
(() => {
  "use strict";

  const form = document.getElementById("review-form");
  if (!form) return;

  /* A second click on "Confirm approval" sooner than this after the first
     click on "Approve" is taken as part of a double click and ignored. */
  const CONFIRM_DELAY_MS = 600;
  /* Counters appear once a text uses this share of its limit. */
  const COUNTER_FROM = 0.8;

  const $ = (selector, scope = document) => scope.querySelector(selector);
  const $$ = (selector, scope = document) => Array.from(scope.querySelectorAll(selector));
  const byId = (id) => document.getElementById(id);

  const rid = form.dataset.rid;
  const limits = {
    comments: Number(form.dataset.commentsMax),
    quote: Number(form.dataset.quoteCharsMax),
    comment: Number(form.dataset.commentCharsMax),
    feedback: Number(form.dataset.feedbackCharsMax),
  };

  const plan = byId("plan");
  const planPanel = byId("panel-plan");
  const selectionButton = byId("selection-comment");
  const composer = byId("composer");
  const composerQuote = byId("composer-quote");
  const composerNote = byId("composer-note");
  const composerText = byId("composer-text");
  const composerError = byId("composer-error");
  const composerCounter = byId("composer-counter");
  const commentList = byId("comment-list");
  const commentCount = byId("comment-count");
  const commentsEmpty = byId("comments-empty");
  const commentsLimit = byId("comments-limit");
  const feedback = byId("feedback");
  const feedbackError = byId("feedback-error");
  const feedbackCounter = byId("feedback-counter");
  const reviewStatus = byId("review-status");
  const verdictMessage = byId("verdict-message");
  const approve = byId("approve");
  const approveLabel = $(".btn-label", approve);
  const approveCancel = byId("approve-cancel");
  const requestChanges = byId("request-changes");
  const requestLabel = $(".btn-label", requestChanges);
  const banner = byId("banner");

  /* ---- Text helpers ----------------------------------------------------- */

  function charCount(text) {
    let count = 0;
    for (const _ of text) count += 1;
    return count;
  }

  function firstChars(text, max) {
    let out = "";
    let count = 0;
    for (const char of text) {
      if (count === max) return out;
      out += char;
      count += 1;
    }
    return out;
  }

  const formatNumber = (value) => value.toLocaleString("en-US").replace(/,/g, "\u202f");

  /* Rendered text as a quote: no-break spaces plain, no trailing blanks,
     at most one empty line in a row. Indentation inside lines is kept, so
     quoted code stays recognisable. */
  function tidy(text) {
    return text
      .replace(/\u00a0/g, " ")
      .replace(/[ \t]+\n/g, "\n")
      .replace(/\n{3,}/g, "\n\n")
      .trim();
  }

  /* The text of a cloned fragment without the page's own controls. */
  function textWithoutControls(fragment) {
    for (const control of fragment.querySelectorAll("button, .copy-code")) control.remove();
    return fragment.textContent;
  }

  function isTextEntry(element) {
    if (!element || !element.tagName) return false;
    if (element.isContentEditable || element.tagName === "TEXTAREA" || element.tagName === "SELECT") {
      return true;
    }
    return element.tagName === "INPUT";
  }

  /* ---- State ------------------------------------------------------------ */

  /* Each comment: {id, anchor, quote, text, card}. An anchor is either
     {range} (a live Range over the selected text) or {block} (a block of
     the plan, commented on as a whole). */
  const comments = [];
  let nextId = 1;
  /* The comment being written: {anchor, quote, returnFocus}. */
  let draft = null;
  let armed = false;
  let armedAt = 0;
  let busy = false;
  let finished = false;
  let closed = false;

  /* ---- Tabs --------------------------------------------------------------- */

  const tabs = $$('[role="tab"]', form);
  const panels = tabs.map((tab) => byId(tab.getAttribute("aria-controls")));

  function selectTab(index, focus) {
    if (index < 0 || index >= tabs.length) return;
    tabs.forEach((tab, i) => {
      const selected = i === index;
      tab.setAttribute("aria-selected", String(selected));
      tab.tabIndex = selected ? 0 : -1;
      panels[i].hidden = !selected;
    });
    if (focus) tabs[index].focus();
    if (panels[index] === planPanel) layoutGutter();
    else hideSelectionButton();
  }

  const showPlan = () => {
    if (tabs.length > 0 && planPanel.hidden) selectTab(panels.indexOf(planPanel), false);
  };

  tabs.forEach((tab, index) => {
    tab.addEventListener("click", () => selectTab(index, false));
    tab.addEventListener("keydown", (event) => {
      const last = tabs.length - 1;
      const to = {
        ArrowLeft: index === 0 ? last : index - 1,
        ArrowRight: index === last ? 0 : index + 1,
        Home: 0,
        End: last,
      }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      selectTab(to, true);
    });
  });

  /* ---- Blocks and their comment buttons ---------------------------------- */

  /* The parts of the plan a person can comment on as a whole: every
     top-level element but lists and rules, and every list item, nested
     ones included, since a plan's steps are usually list items. */
  const BLOCKS = ":scope > :not(ul, ol, hr), li";

  const gutter = document.createElement("div");
  gutter.className = "plan-gutter";
  gutter.setAttribute("role", "toolbar");
  gutter.setAttribute("aria-orientation", "vertical");
  gutter.setAttribute("aria-label", "Comment on a part of the plan");
  planPanel.prepend(gutter);

  const commentIcon = $("svg", selectionButton);
  const blocks = $$(BLOCKS, plan).map((element, index) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "block-comment";
    button.tabIndex = index === 0 ? 0 : -1;
    button.setAttribute("aria-label", blockLabel(element));
    button.append(commentIcon.cloneNode(true));
    const count = document.createElement("span");
    count.className = "block-comment-count";
    count.setAttribute("aria-hidden", "true");
    button.append(count);
    gutter.append(button);
    return { element, button, count };
  });

  function shorten(text, max) {
    const flat = text.replace(/\s+/g, " ").trim();
    return flat.length > max ? flat.slice(0, max - 1).trimEnd() + "…" : flat;
  }

  function blockLabel(element) {
    if (/^H[1-6]$/.test(element.tagName)) return `Comment on heading: ${shorten(element.textContent, 60)}`;
    if (element.tagName === "LI") return `Comment on list item: ${shorten(ownText(element), 60)}`;
    if (element.tagName === "TABLE") return "Comment on table";
    if (element.tagName === "BLOCKQUOTE") return `Comment on quote: ${shorten(element.textContent, 60)}`;
    if (element.classList.contains("diagram")) return "Comment on diagram";
    if (element.tagName === "PRE" || element.classList.contains("code-block")) return "Comment on code block";
    if (element.tagName === "P") return `Comment on paragraph: ${shorten(element.textContent, 60)}`;
    return `Comment on this part: ${shorten(element.textContent, 60)}`;
  }

  /* A list item's own text, without the items nested in it. */
  function ownText(item) {
    const clone = item.cloneNode(true);
    for (const nested of clone.querySelectorAll("ul, ol")) nested.remove();
    const text = textWithoutControls(clone);
    return text.trim() === "" ? item.textContent : text;
  }

  function blockQuote(element) {
    if (element.tagName === "LI") return tidy(ownText(element));
    if (element.tagName === "TABLE") {
      return $$("tr", element)
        .map((row) => $$("th, td", row).map((cell) => tidy(cell.textContent)).join(" | "))
        .join("\n");
    }
    if (element.classList.contains("diagram")) {
      const labels = $$(".nodeLabel, .edgeLabel, text", element)
        .map((label) => tidy(label.textContent))
        .filter((label, index, all) => label !== "" && all.indexOf(label) === index);
      const source = $("pre", element);
      const body = labels.length > 0 ? labels.join(", ") : source ? tidy(source.textContent) : "";
      return `Diagram: ${body}`.trim();
    }
    if (element.classList.contains("code-block")) return tidy($("pre", element).textContent);
    return tidy(textWithoutControls(element.cloneNode(true)));
  }

  /* The range a block comment paints: the code, not its Copy button. */
  function blockRange(element) {
    const range = document.createRange();
    range.selectNodeContents(element.classList.contains("code-block") ? $("pre", element) : element);
    return range;
  }

  const blockOf = (element) => blocks.find((block) => block.element === element);

  /* The innermost block holding a node, or null. */
  function blockAt(node) {
    let at = node.nodeType === Node.ELEMENT_NODE ? node : node.parentElement;
    while (at && at !== plan) {
      const block = blockOf(at);
      if (block) return block;
      at = at.parentElement;
    }
    return null;
  }

  /* Each button sits in the gutter level with its block's first line.
     Laid out again whenever the plan changes size: a window resize, a
     diagram drawn, a font loaded, the Plan tab shown again. */
  function layoutGutter() {
    if (planPanel.hidden) return;
    const top = gutter.getBoundingClientRect().top;
    for (const { element, button } of blocks) {
      const rect = element.getBoundingClientRect();
      let offset = 8;
      if (!element.classList.contains("diagram") && !element.classList.contains("code-block") &&
          !["TABLE", "PRE", "BLOCKQUOTE"].includes(element.tagName)) {
        const style = window.getComputedStyle(element);
        const line = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.6;
        offset = (line - button.offsetHeight) / 2;
      }
      button.style.top = `${Math.round(rect.top - top + offset)}px`;
    }
  }

  if (window.ResizeObserver) new ResizeObserver(() => layoutGutter()).observe(plan);
  window.addEventListener("resize", layoutGutter);
  if (document.fonts) document.fonts.ready.then(layoutGutter);
  layoutGutter();

  function setTarget(block, on) {
    if (!block) return;
    block.element.classList.toggle("is-comment-target", on);
    block.button.classList.toggle("is-shown", on);
  }

  let hovered = null;
  plan.addEventListener("mouseover", (event) => {
    const block = blockAt(event.target);
    if (block === hovered) return;
    if (hovered) hovered.button.classList.remove("is-hovered");
    hovered = block;
    if (hovered) hovered.button.classList.add("is-hovered");
  });
  planPanel.addEventListener("mouseleave", () => {
    if (hovered) hovered.button.classList.remove("is-hovered");
    hovered = null;
  });

  blocks.forEach((block, index) => {
    // A click with no pointer behind it (detail 0) came from the keyboard:
    // focus comes back to the button once the comment is saved.
    block.button.addEventListener("click", (event) =>
      openComposer({ block: block.element }, event.detail === 0 ? block.button : null),
    );
    block.button.addEventListener("focus", () => setTarget(block, block.button.matches(":focus-visible")));
    block.button.addEventListener("blur", () => setTarget(block, false));
    block.button.addEventListener("mouseenter", () => setTarget(block, true));
    block.button.addEventListener("mouseleave", () => {
      if (document.activeElement !== block.button) setTarget(block, false);
    });
    block.button.addEventListener("keydown", (event) => {
      const to = {
        ArrowDown: Math.min(index + 1, blocks.length - 1),
        ArrowUp: Math.max(index - 1, 0),
        Home: 0,
        End: blocks.length - 1,
      }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      focusBlock(blocks[to]);
    });
  });

  function focusBlock(block) {
    for (const each of blocks) each.button.tabIndex = each === block ? 0 : -1;
    block.button.focus();
  }

  /* ---- Selecting text --------------------------------------------------- */

  /* The current selection cut to the plan, or null. */
  function selectedRange() {
    const selection = document.getSelection();
    if (!selection || selection.rangeCount === 0 || selection.isCollapsed || planPanel.hidden) return null;
    const range = selection.getRangeAt(0).cloneRange();
    const whole = document.createRange();
    whole.selectNodeContents(plan);
    if (!range.intersectsNode(plan)) return null;
    if (range.compareBoundaryPoints(Range.START_TO_START, whole) < 0) {
      range.setStart(whole.startContainer, whole.startOffset);
    }
    if (range.compareBoundaryPoints(Range.END_TO_END, whole) > 0) {
      range.setEnd(whole.endContainer, whole.endOffset);
    }
    if (range.collapsed || rangeQuote(range) === "") return null;
    return range;
  }

  const rangeQuote = (range) => tidy(textWithoutControls(range.cloneContents()));

  function hideSelectionButton() {
    selectionButton.hidden = true;
  }

  /* The button sits just under the end of the selection (or above its start
     when the selection was made backwards), inside the plan's panel. */
  function placeSelectionButton() {
    const range = selectedRange();
    if (!range || closed || finished) {
      hideSelectionButton();
      return;
    }
    const selection = document.getSelection();
    const backwards =
      selection.anchorNode &&
      selection.focusNode &&
      (selection.anchorNode.compareDocumentPosition(selection.focusNode) & Node.DOCUMENT_POSITION_PRECEDING ||
        (selection.anchorNode === selection.focusNode && selection.focusOffset < selection.anchorOffset));
    const rects = Array.from(range.getClientRects()).filter((rect) => rect.width > 0 || rect.height > 0);
    if (rects.length === 0) {
      hideSelectionButton();
      return;
    }
    selectionButton.hidden = false;
    const panel = planPanel.getBoundingClientRect();
    const width = selectionButton.offsetWidth;
    const height = selectionButton.offsetHeight;
    const edge = backwards ? rects[0] : rects[rects.length - 1];
    const x = (backwards ? edge.left : edge.right) - panel.left - width / 2;
    const y = backwards ? edge.top - panel.top - height - 8 : edge.bottom - panel.top + 8;
    const left = Math.max(8, Math.min(x, panel.width - width - 8));
    selectionButton.style.left = `${Math.round(left)}px`;
    selectionButton.style.top = `${Math.round(Math.max(4, y))}px`;
  }

  let pointerDown = false;
  let selectionFrame = 0;
  const scheduleSelectionButton = () => {
    window.cancelAnimationFrame(selectionFrame);
    selectionFrame = window.requestAnimationFrame(placeSelectionButton);
  };
  plan.addEventListener("pointerdown", () => {
    pointerDown = true;
    hideSelectionButton();
  });
  document.addEventListener("pointerup", () => {
    if (!pointerDown) return;
    pointerDown = false;
    scheduleSelectionButton();
  });
  // Keyboard selections (caret browsing, Shift+arrows) show the button as
  // they change; a mouse selection once the button is released.
  document.addEventListener("selectionchange", () => {
    if (!pointerDown) scheduleSelectionButton();
  });
  window.addEventListener("resize", scheduleSelectionButton);
  // A click on the button must not clear the selection it is about.
  selectionButton.addEventListener("mousedown", (event) => event.preventDefault());
  selectionButton.addEventListener("click", (event) => commentOnSelection(event.detail === 0));

  /* Opens the composer for the selected text. After a keyboard start, focus
     comes back beside the passage, to its block's comment button. */
  function commentOnSelection(byKeyboard) {
    const range = selectedRange();
    if (!range) return false;
    const block = blockAt(range.startContainer);
    openComposer({ range }, byKeyboard && block ? block.button : null);
    return true;
  }

  /* Clicking a painted passage brings its comment into view. */
  function caretAt(x, y) {
    if (document.caretPositionFromPoint) {
      const position = document.caretPositionFromPoint(x, y);
      return position ? { node: position.offsetNode, offset: position.offset } : null;
    }
    if (document.caretRangeFromPoint) {
      const range = document.caretRangeFromPoint(x, y);
      return range ? { node: range.startContainer, offset: range.startOffset } : null;
    }
    return null;
  }

  plan.addEventListener("click", (event) => {
    const selection = document.getSelection();
    if ((selection && !selection.isCollapsed) || event.target.closest(".diagram, a, button")) return;
    const point = caretAt(event.clientX, event.clientY);
    if (!point) return;
    const hit = comments.filter((comment) => {
      try {
        return rangeOf(comment.anchor).isPointInRange(point.node, point.offset);
      } catch {
        return false;
      }
    });
    if (hit.length > 0) revealCard(hit[hit.length - 1]);
  });

  /* ---- Highlights --------------------------------------------------------- */

  const canPaint = typeof window.Highlight === "function" && window.CSS && CSS.highlights;
  let activeComment = null;
  /* A comment just revealed in the plan stays lit for a moment even if the
     pointer leaves its card on the way to the passage. */
  let pinnedComment = null;
  const PIN_MS = 2000;

  const rangeOf = (anchor) => anchor.range || blockRange(anchor.block);

  function paint() {
    for (const block of blocks) {
      block.count.textContent = "";
      block.button.classList.remove("has-comments");
      block.element.classList.remove("has-comments");
    }
    for (const comment of comments) {
      const block = comment.anchor.block ? blockOf(comment.anchor.block) : blockAt(comment.anchor.range.startContainer);
      if (!block) continue;
      block.count.textContent = String(Number(block.count.textContent || 0) + 1);
      block.button.classList.add("has-comments");
      if (comment.anchor.block) block.element.classList.add("has-comments");
    }
    if (!canPaint) return;
    const set = (name, ranges, priority) => {
      const highlight = new Highlight(...ranges);
      highlight.priority = priority;
      CSS.highlights.set(name, highlight);
    };
    set("planb-comment", comments.map((comment) => rangeOf(comment.anchor)), 0);
    set("planb-comment-active", activeComment ? [rangeOf(activeComment.anchor)] : [], 1);
    set("planb-comment-draft", draft ? [rangeOf(draft.anchor)] : [], 2);
  }

  function setActive(comment) {
    if (activeComment === comment) return;
    if (activeComment && activeComment.card) activeComment.card.classList.remove("is-active");
    activeComment = comment;
    if (comment && comment.card) comment.card.classList.add("is-active");
    paint();
  }

  /* Scrolls the plan to a comment's passage, outlines it for a moment and
     moves focus beside it, to its block's comment button. */
  function revealPassage(comment) {
    showPlan();
    const block = comment.anchor.block ? blockOf(comment.anchor.block) : blockAt(comment.anchor.range.startContainer);
    if (block) {
      for (const each of blocks) each.button.tabIndex = each === block ? 0 : -1;
      block.button.focus({ preventScroll: true });
    }
    const rect = rangeOf(comment.anchor).getBoundingClientRect();
    window.scrollBy({ top: rect.top - window.innerHeight / 3, behavior: smoothScroll() });
    setActive(comment);
    pinnedComment = comment;
    window.setTimeout(() => {
      if (pinnedComment !== comment) return;
      pinnedComment = null;
      if (activeComment === comment && !comment.card.matches(":hover") && !comment.card.contains(document.activeElement)) {
        setActive(null);
      }
    }, PIN_MS);
  }

  function revealCard(comment) {
    setActive(comment);
    comment.card.scrollIntoView({ block: "nearest", behavior: smoothScroll() });
    comment.card.classList.remove("is-flashing");
    void comment.card.offsetWidth;
    comment.card.classList.add("is-flashing");
  }

  const smoothScroll = () =>
    window.matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth";

  /* ---- Writing a comment ---------------------------------------------------- */

  function openComposer(anchor, returnFocus) {
    if (closed || finished) return;
    disarm();
    if (comments.length >= limits.comments) {
      commentsLimit.hidden = false;
      commentsLimit.scrollIntoView({ block: "nearest" });
      say(commentsLimit.textContent);
      return;
    }
    const full = anchor.range ? rangeQuote(anchor.range) : blockQuote(anchor.block);
    const quote = firstChars(full, limits.quote);
    // Writing already started stays: choosing another passage while the
    // composer is open moves the comment to that passage.
    draft = { anchor, quote, returnFocus };
    composerQuote.textContent = quote + (quote.length < full.length ? "…" : "");
    composerNote.hidden = quote.length === full.length;
    composer.hidden = false;
    hideSelectionButton();
    const selection = document.getSelection();
    if (selection) selection.removeAllRanges();
    clearFieldError(composerText, composerError);
    updateCounter(composerText, composerCounter, limits.comment);
    refresh();
    composerText.focus({ preventScroll: true });
    composer.scrollIntoView({ block: "nearest", behavior: smoothScroll() });
  }

  function closeComposer(restoreFocus) {
    if (!draft) return;
    const back = draft.returnFocus;
    draft = null;
    composer.hidden = true;
    composerText.value = "";
    clearFieldError(composerText, composerError);
    composerCounter.hidden = true;
    refresh();
    if (restoreFocus && back && back.isConnected) back.focus();
  }

  function saveComposer() {
    if (!draft) return;
    const text = composerText.value.trim();
    if (!checkCommentText(text, composerText, composerError)) return;
    const comment = { id: nextId++, anchor: draft.anchor, quote: draft.quote, text, card: null };
    comments.push(comment);
    comments.sort(byPosition);
    closeComposer(true);
    renderComments();
    // Started with the mouse: the focus must not stay in the emptied
    // composer, nor jump the page to a button beside the passage.
    if (document.activeElement === composerText) composerText.blur();
    say("Comment added.");
  }

  /* Comments in the order of their passages in the plan. */
  function byPosition(a, b) {
    const ra = rangeOf(a.anchor);
    const rb = rangeOf(b.anchor);
    try {
      return ra.compareBoundaryPoints(Range.START_TO_START, rb) || a.id - b.id;
    } catch {
      return a.id - b.id;
    }
  }

  function checkCommentText(text, field, slot) {
    if (text === "") {
      showFieldError(field, slot, "Write a comment first, or cancel.");
      return false;
    }
    const count = charCount(text);
    if (count > limits.comment) {
      showFieldError(
        field,
        slot,
        `A comment can be at most ${formatNumber(limits.comment)} characters; this one has ${formatNumber(count)}.`,
      );
      return false;
    }
    return true;
  }

  composerText.addEventListener("input", () => {
    clearFieldError(composerText, composerError);
    updateCounter(composerText, composerCounter, limits.comment);
    refresh();
  });
  composerText.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      saveComposer();
    } else if (event.key === "Escape") {
      event.preventDefault();
      closeComposer(true);
    }
  });
  byId("composer-save").addEventListener("click", saveComposer);
  byId("composer-cancel").addEventListener("click", () => closeComposer(true));

  /* ---- The list of comments -------------------------------------------------- */

  function button(label, className, onClick) {
    const element = document.createElement("button");
    element.type = "button";
    element.className = className;
    element.textContent = label;
    element.addEventListener("click", onClick);
    return element;
  }

  function renderComments() {
    commentList.replaceChildren(...comments.map((comment) => comment.card || buildCard(comment)));
    comments.forEach((comment, index) => {
      $(".comment-number", comment.card).textContent = String(index + 1);
    });
    commentsLimit.hidden = comments.length < limits.comments;
    refresh();
  }

  function buildCard(comment) {
    const card = document.createElement("li");
    card.className = "comment-card";
    comment.card = card;

    const head = document.createElement("div");
    head.className = "comment-head";
    const number = document.createElement("span");
    number.className = "comment-number";
    number.setAttribute("aria-hidden", "true");
    const quote = button("", "comment-quote", () => revealPassage(comment));
    quote.setAttribute("aria-label", `Show in the plan: ${shorten(comment.quote, 80)}`);
    quote.title = "Show in the plan";
    const quoteText = document.createElement("span");
    quoteText.className = "quote";
    quoteText.textContent = comment.quote;
    quote.append(quoteText);
    head.append(number, quote);

    const text = document.createElement("p");
    text.className = "comment-text";
    text.textContent = comment.text;

    const editor = document.createElement("div");
    editor.className = "comment-editor";
    editor.hidden = true;
    const field = document.createElement("textarea");
    field.className = "text-input text-area comment-field";
    field.rows = 3;
    field.id = `comment-field-${comment.id}`;
    const label = document.createElement("label");
    label.className = "visually-hidden";
    label.htmlFor = field.id;
    label.textContent = "Edit your comment";
    const foot = document.createElement("div");
    foot.className = "field-foot";
    const error = document.createElement("span");
    error.className = "field-error";
    error.id = `comment-error-${comment.id}`;
    error.hidden = true;
    const counter = document.createElement("span");
    counter.className = "char-counter";
    counter.hidden = true;
    field.setAttribute("aria-describedby", error.id);
    foot.append(error, counter);
    const editActions = document.createElement("div");
    editActions.className = "comment-actions";

    const actions = document.createElement("div");
    actions.className = "comment-actions";

    const startEdit = () => {
      disarm();
      field.value = comment.text;
      updateCounter(field, counter, limits.comment);
      editor.hidden = false;
      text.hidden = true;
      actions.hidden = true;
      card.classList.add("is-editing");
      field.focus();
      field.setSelectionRange(field.value.length, field.value.length);
      refresh();
    };
    const stopEdit = (focus) => {
      editor.hidden = true;
      text.hidden = false;
      actions.hidden = false;
      card.classList.remove("is-editing");
      clearFieldError(field, error);
      refresh();
      if (focus) editButton.focus();
    };
    const saveEdit = () => {
      const value = field.value.trim();
      if (!checkCommentText(value, field, error)) return;
      comment.text = value;
      text.textContent = value;
      stopEdit(true);
      say("Comment updated.");
    };
    const remove = () => {
      const at = comments.indexOf(comment);
      comments.splice(at, 1);
      if (activeComment === comment) activeComment = null;
      disarm();
      renderComments();
      say("Comment removed.");
      const next = comments[Math.min(at, comments.length - 1)];
      if (next) $(".comment-quote", next.card).focus();
      else byId("comments-title").focus();
    };

    const editButton = button("Edit", "link-button", startEdit);
    editButton.setAttribute("aria-label", `Edit comment: ${shorten(comment.text, 40)}`);
    const removeButton = button("Remove", "link-button link-danger", remove);
    removeButton.setAttribute("aria-label", `Remove comment: ${shorten(comment.text, 40)}`);
    actions.append(editButton, removeButton);
    editActions.append(
      button("Cancel", "btn btn-ghost btn-small", () => stopEdit(true)),
      button("Save", "btn btn-primary btn-small", saveEdit),
    );
    editor.append(label, field, foot, editActions);

    field.addEventListener("input", () => {
      clearFieldError(field, error);
      updateCounter(field, counter, limits.comment);
    });
    field.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        saveEdit();
      } else if (event.key === "Escape") {
        event.preventDefault();
        stopEdit(true);
      }
    });

    card.append(head, text, editor, actions);
    card.addEventListener("mouseenter", () => setActive(comment));
    card.addEventListener("mouseleave", () => {
      if (pinnedComment !== comment && !card.contains(document.activeElement)) setActive(null);
    });
    card.addEventListener("focusin", () => setActive(comment));
    card.addEventListener("focusout", (event) => {
      if (pinnedComment !== comment && !card.contains(event.relatedTarget)) setActive(null);
    });
    card.addEventListener("animationend", () => card.classList.remove("is-flashing"));
    return card;
  }

  /* ---- Fields, counters, status ---------------------------------------------- */

  function updateCounter(field, counter, max) {
    const count = charCount(field.value);
    counter.hidden = count < max * COUNTER_FROM;
    counter.textContent = `${formatNumber(count)} / ${formatNumber(max)}`;
    counter.classList.toggle("is-over", count > max);
  }

  function showFieldError(field, slot, message) {
    slot.textContent = message;
    slot.hidden = false;
    field.setAttribute("aria-invalid", "true");
    field.classList.add("has-error");
    field.focus();
  }

  function clearFieldError(field, slot) {
    slot.hidden = true;
    slot.textContent = "";
    field.removeAttribute("aria-invalid");
    field.classList.remove("has-error");
  }

  feedback.addEventListener("input", () => {
    clearFieldError(feedback, feedbackError);
    updateCounter(feedback, feedbackCounter, limits.feedback);
    disarm();
    clearVerdictMessage();
    refresh();
  });

  function say(text) {
    verdictMessage.classList.remove("is-error");
    verdictMessage.textContent = text;
  }

  function sayError(text) {
    verdictMessage.classList.add("is-error");
    verdictMessage.textContent = text;
  }

  function clearVerdictMessage() {
    if (!armed) say("");
  }

  function refresh() {
    const count = comments.length;
    commentCount.textContent = count > 0 ? String(count) : "";
    commentsEmpty.hidden = count > 0 || draft !== null;
    const parts = [count === 0 ? "No comments yet" : count === 1 ? "1 comment" : `${count} comments`];
    if (feedback.value.trim() !== "") parts.push("feedback written");
    reviewStatus.textContent = parts.join(" · ");
    const locked = busy || closed || finished;
    approve.disabled = locked;
    requestChanges.disabled = locked;
    approveCancel.disabled = locked;
    paint();
  }

  /* ---- Verdicts ---------------------------------------------------------------- */

  function arm() {
    armed = true;
    armedAt = window.performance.now();
    approve.classList.add("is-armed");
    approveLabel.textContent = "Confirm approval";
    approveCancel.hidden = false;
    const extra = comments.length > 0 || feedback.value.trim() !== "" ? ", with your notes" : "";
    say(`Approving lets the agent go ahead with this plan${extra}. Click Confirm approval to send it.`);
  }

  function disarm() {
    if (!armed) return;
    armed = false;
    approve.classList.remove("is-armed");
    approveLabel.textContent = "Approve";
    approveCancel.hidden = true;
    say("");
  }

  /* Unsaved writing would be lost by sending: the person saves or drops it
     first. */
  function unsavedWriting() {
    if (draft && composerText.value.trim() !== "") {
      sayError("Save or cancel the comment you are writing first.");
      composerText.focus();
      return true;
    }
    if (draft) closeComposer(false);
    const editing = comments.find((comment) => comment.card.classList.contains("is-editing"));
    if (editing) {
      sayError("Save or cancel the comment you are editing first.");
      $(".comment-field", editing.card).focus();
      return true;
    }
    return false;
  }

  function withinLimits() {
    const count = charCount(feedback.value.trim());
    if (count > limits.feedback) {
      showFieldError(
        feedback,
        feedbackError,
        `Feedback can be at most ${formatNumber(limits.feedback)} characters; this has ${formatNumber(count)}.`,
      );
      sayError("Your feedback is too long to send.");
      return false;
    }
    return true;
  }

  approve.addEventListener("click", () => {
    if (busy || closed || finished) return;
    if (!armed) {
      if (unsavedWriting() || !withinLimits()) return;
      arm();
      return;
    }
    if (window.performance.now() - armedAt < CONFIRM_DELAY_MS) return;
    if (unsavedWriting() || !withinLimits()) {
      disarm();
      return;
    }
    send("approve");
  });

  approveCancel.addEventListener("click", () => {
    disarm();
    approve.focus();
  });

  requestChanges.addEventListener("click", () => {
    if (busy || closed || finished) return;
    disarm();
    if (unsavedWriting() || !withinLimits()) return;
    if (feedback.value.trim() === "" && comments.length === 0) {
      const message = "To request changes, write some feedback or add at least one comment.";
      showFieldError(feedback, feedbackError, message);
      sayError(message);
      return;
    }
    send("changes");
  });

  function setBusy(verdict, on) {
    busy = on;
    const target = verdict === "approve" ? approve : requestChanges;
    target.classList.toggle("is-busy", on);
    if (verdict === "approve") approveLabel.textContent = on ? "Sending…" : "Confirm approval";
    else requestLabel.textContent = on ? "Sending…" : "Request changes";
    refresh();
  }

  async function send(verdict) {
    hideBanner();
    setBusy(verdict, true);
    const body = {
      rid,
      verdict,
      feedback: feedback.value.trim(),
      comments: comments.map((comment) => ({ quote: comment.quote, text: comment.text })),
    };
    let response;
    let answer = {};
    try {
      response = await fetch("/review", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        credentials: "same-origin",
        cache: "no-store",
      });
      answer = await response.json().catch(() => ({}));
    } catch {
      setBusy(verdict, false);
      disarm();
      showBanner("Could not reach planb to send your review. Check that the agent is still running, then try again.");
      return;
    }
    setBusy(verdict, false);
    disarm();
    const error = answer && answer.error ? sentence(String(answer.error)) : "";
    if (response.ok) {
      finish(verdict);
    } else if (response.status === 404 || response.status === 409) {
      closeReview(error || "This review is closed and no longer takes answers.");
    } else if (response.status === 422) {
      showBanner(error ? `Your review was not accepted: ${error}` : "Your review was not accepted.");
    } else {
      const detail = error ? `: ${error}` : ` (HTTP ${response.status})`;
      showBanner(`Your review could not be sent${detail}. Please try again.`);
    }
  }

  /* Server messages are lowercase fragments; on the page they read as
     sentences. */
  const sentence = (text) => text.charAt(0).toUpperCase() + text.slice(1);

  function showBanner(message) {
    banner.textContent = message;
    banner.hidden = false;
    banner.scrollIntoView({ block: "nearest", behavior: smoothScroll() });
  }

  function hideBanner() {
    banner.hidden = true;
    banner.textContent = "";
  }

  function closeReview(message) {
    closed = true;
    showBanner(message);
    form.classList.add("is-closed");
    hideSelectionButton();
    for (const control of $$("textarea, button", form)) {
      if (control.getAttribute("role") !== "tab") control.disabled = true;
    }
    refresh();
  }

  function finish(verdict) {
    finished = true;
    hideBanner();
    if (canPaint) {
      for (const name of ["planb-comment", "planb-comment-active", "planb-comment-draft"]) {
        CSS.highlights.delete(name);
      }
    }
    form.hidden = true;
    for (const hint of $$(".keyboard-hint, .review-lede")) hint.hidden = true;
    const card = form.closest(".card");
    card.classList.add("is-done");
    const done = byId(verdict === "approve" ? "done-approve" : "done-changes");
    done.hidden = false;
    document.title = `${verdict === "approve" ? "Approved" : "Changes requested"} · ${document.title}`;
    done.focus();
  }

  /* ---- Keyboard ------------------------------------------------------------------ */

  document.addEventListener("keydown", (event) => {
    const lightbox = byId("lightbox");
    if (event.defaultPrevented || (lightbox && lightbox.open) || closed || finished) return;
    if (event.key === "Escape" && armed) {
      disarm();
      approve.focus();
      return;
    }
    if (event.altKey || event.ctrlKey || event.metaKey || isTextEntry(event.target)) return;
    if ((event.key === "c" || event.key === "C") && commentOnSelection(true)) event.preventDefault();
  });

  window.addEventListener("beforeunload", (event) => {
    if (finished || closed) return;
    const unsent = comments.length > 0 || feedback.value.trim() !== "" || (draft && composerText.value.trim() !== "");
    if (unsent) {
      event.preventDefault();
      event.returnValue = "";
    }
  });

  refresh();
})();
