  /* review/4-verdict.js: the fields and their counters, the two verdicts and sending them, keyboard shortcuts. A part of the review page's one script
     (see review/1-page.js); it shares that script's scope. */

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
