  /* review/2-anchors.js: what a comment can be about: the plan's blocks with their gutter buttons, and selected text. A part of the review page's one script
     (see review/1-page.js); it shares that script's scope. */

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
