  /* review/3-comments.js: comments: painting their passages, the composer, and the list of cards. A part of the review page's one script
     (see review/1-page.js); it shares that script's scope. */

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
