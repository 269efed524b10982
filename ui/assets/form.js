/*
 * planb ask_user form: the theme and the form. Served from /assets/form.js.
 *
 * Loaded synchronously in <head> so the remembered theme applies before the
 * first paint; the form starts on DOMContentLoaded. Diagrams and code
 * blocks are markdown.js's business; this script tells it when the theme
 * changes with a "planb:themechange" event on document.
 *
 * It talks to the local callback server with relative URLs only:
 *   POST /draft  {sid, answers}  autosave, ~800 ms after the last change
 *   POST /submit {sid, answers}  200 {status}, 422 {errors, general}, 404/409 {error}
 * The sid comes from the form's data-sid attribute. The only thing kept in
 * localStorage is the theme choice; answers stay on the server.
 */
(() => {
  "use strict";

  const THEME_KEY = "planb-theme";
  const DRAFT_DELAY_MS = 800;

  const root = document.documentElement;
  const darkQuery = window.matchMedia("(prefers-color-scheme: dark)");
  const $ = (selector, scope = document) => scope.querySelector(selector);
  const $$ = (selector, scope = document) => Array.from(scope.querySelectorAll(selector));

  /* ---- Theme ---------------------------------------------------------- */

  function readStoredTheme() {
    try {
      const theme = window.localStorage.getItem(THEME_KEY);
      return theme === "light" || theme === "dark" ? theme : null;
    } catch {
      return null;
    }
  }

  /* The person's explicit choice, or null to follow the system. */
  let chosenTheme = readStoredTheme();

  function currentTheme() {
    return chosenTheme || (darkQuery.matches ? "dark" : "light");
  }

  function applyTheme() {
    if (chosenTheme) root.dataset.theme = chosenTheme;
    else delete root.dataset.theme;
    // highlight.js ships one stylesheet per theme; an explicit choice
    // overrides their media queries.
    const light = document.getElementById("hljs-light");
    const dark = document.getElementById("hljs-dark");
    if (light && dark) {
      light.media = chosenTheme ? (chosenTheme === "light" ? "all" : "not all") : "(prefers-color-scheme: light)";
      dark.media = chosenTheme ? (chosenTheme === "dark" ? "all" : "not all") : "(prefers-color-scheme: dark)";
    }
    const toggle = document.getElementById("theme-toggle");
    if (toggle) toggle.setAttribute("aria-pressed", String(currentTheme() === "dark"));
  }

  applyTheme();

  const announceTheme = () => document.dispatchEvent(new CustomEvent("planb:themechange"));

  function initThemeToggle() {
    applyTheme();
    const toggle = document.getElementById("theme-toggle");
    if (toggle) {
      toggle.addEventListener("click", () => {
        chosenTheme = currentTheme() === "dark" ? "light" : "dark";
        try {
          window.localStorage.setItem(THEME_KEY, chosenTheme);
        } catch {
          // Storage may be disabled; the choice then lasts for this page.
        }
        applyTheme();
        announceTheme();
      });
    }
    darkQuery.addEventListener("change", () => {
      if (!chosenTheme) {
        applyTheme();
        announceTheme();
      }
    });
  }

  /* ---- The form ------------------------------------------------------- */

  function initForm(form) {
    const sid = form.dataset.sid;
    const tabs = $$('[role="tab"]', form);
    const panels = $$(".panel", form);
    const questions = $$("[data-question]", form);
    const back = document.getElementById("back");
    const next = document.getElementById("next");
    const submit = document.getElementById("submit");
    const submitLabel = $(".btn-label", submit);
    const progress = document.getElementById("progress");
    const saveStatus = document.getElementById("save-status");
    const banner = document.getElementById("banner");
    let active = 0;
    let draftTimer = null;
    let draftSequence = 0;
    let submitting = false;
    let closed = false;

    const questionById = (id) => document.getElementById("q-" + id);

    function valueOf(question) {
      switch (question.dataset.kind) {
        case "text":
        case "longtext": {
          const field = $(".text-input", question);
          return field.value.trim() === "" ? undefined : field.value;
        }
        case "single": {
          const checked = $(".option-input:checked", question);
          return checked ? checked.value : undefined;
        }
        case "multi": {
          const values = $$(".option-input:checked", question).map((input) => input.value);
          return values.length > 0 ? values : undefined;
        }
        case "scale": {
          if (question.dataset.unset === "true") return undefined;
          const value = Number($(".scale-input", question).value);
          return Number.isFinite(value) ? value : undefined;
        }
        default:
          return undefined;
      }
    }

    const isAnswered = (question) => valueOf(question) !== undefined;
    const isRequired = (question) => question.dataset.required === "true";

    function answers() {
      const result = {};
      for (const question of questions) {
        const value = valueOf(question);
        if (value !== undefined) result[question.dataset.question] = value;
      }
      return result;
    }

    /* Everything derived from the answers: progress, dots, Submit, the
       clear buttons and the scale read-outs. */
    function refresh() {
      const required = questions.filter(isRequired);
      const answered = required.filter(isAnswered).length;
      progress.textContent =
        required.length === 0
          ? "All questions are optional"
          : `${answered} of ${required.length} required answered`;
      progress.classList.toggle("is-complete", answered === required.length);
      submit.disabled = closed || submitting || answered < required.length;
      tabs.forEach((tab, index) => {
        const inPanel = $$("[data-question]", panels[index]);
        tab.classList.toggle("has-missing", inPanel.some((q) => isRequired(q) && !isAnswered(q)));
        tab.classList.toggle("has-error", inPanel.some((q) => q.classList.contains("has-error")));
      });
      for (const button of $$("[data-clear]", form)) {
        button.hidden = closed || !isAnswered(questionById(button.dataset.clear));
      }
      for (const question of questions) {
        if (question.dataset.kind === "scale") updateScale(question);
      }
    }

    function updateScale(question) {
      const input = $(".scale-input", question);
      const output = $(".scale-value", question);
      const unset = question.dataset.unset === "true";
      const min = Number(input.min);
      const max = Number(input.max);
      const value = Number(input.value);
      const decimals = Number(question.dataset.decimals) || 0;
      const shown = unset ? "Not set" : value.toFixed(decimals);
      output.textContent = shown;
      if (unset) input.setAttribute("aria-valuetext", "not set");
      else input.removeAttribute("aria-valuetext");
      const fill = max > min ? ((value - min) / (max - min)) * 100 : 0;
      input.style.setProperty("--fill", `${unset ? 0 : fill}%`);
    }

    /* ---- Tabs ---- */

    function activate(index, focus) {
      if (index < 0 || index >= panels.length) return;
      const changed = index !== active;
      active = index;
      panels.forEach((panel, i) => {
        panel.hidden = i !== index;
      });
      tabs.forEach((tab, i) => {
        tab.setAttribute("aria-selected", String(i === index));
        tab.tabIndex = i === index ? 0 : -1;
      });
      const last = index === panels.length - 1;
      back.hidden = index === 0;
      next.hidden = last;
      submit.hidden = !last;
      if (focus === "tab" && tabs[index]) tabs[index].focus();
      if (changed) {
        const top = form.getBoundingClientRect().top;
        if (top < 0) form.scrollIntoView({ block: "start" });
      }
    }

    tabs.forEach((tab, index) => tab.addEventListener("click", () => activate(index)));
    back.addEventListener("click", () => activate(active - 1, "tab"));
    next.addEventListener("click", () => activate(active + 1, "tab"));

    /* ---- Keyboard model ---- */

    function isTextEntry(element) {
      if (element.isContentEditable || element.tagName === "TEXTAREA" || element.tagName === "SELECT") {
        return true;
      }
      return element.tagName === "INPUT" && !["radio", "checkbox", "button", "submit"].includes(element.type);
    }

    function moveOption(input, key) {
      const group = $$(".option-input", input.closest(".options"));
      const at = group.indexOf(input);
      const target = {
        ArrowDown: Math.min(at + 1, group.length - 1),
        ArrowUp: Math.max(at - 1, 0),
        Home: 0,
        End: group.length - 1,
      }[key];
      group[target].focus();
    }

    document.addEventListener("keydown", (event) => {
      const dialog = document.getElementById("lightbox");
      if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
      if ((dialog && dialog.open) || closed) return;
      const target = event.target;
      const key = event.key;
      const last = panels.length - 1;
      if (target.getAttribute && target.getAttribute("role") === "tab") {
        const to = { ArrowLeft: active === 0 ? last : active - 1, ArrowRight: active === last ? 0 : active + 1, Home: 0, End: last }[key];
        if (to !== undefined) {
          event.preventDefault();
          activate(to, "tab");
        }
        return;
      }
      if (target.classList && target.classList.contains("option-input")) {
        if (["ArrowDown", "ArrowUp", "Home", "End"].includes(key)) {
          event.preventDefault();
          moveOption(target, key);
          return;
        }
        if (key === "Enter") {
          event.preventDefault();
          target.checked = target.type === "radio" ? true : !target.checked;
          target.dispatchEvent(new Event("change", { bubbles: true }));
          return;
        }
        if (key === "ArrowLeft" || key === "ArrowRight") {
          // A radio would change its selection; here the arrows switch tabs.
          event.preventDefault();
          if (tabs.length > 0) activate(active + (key === "ArrowLeft" ? -1 : 1), "tab");
        }
        return;
      }
      if (isTextEntry(target)) {
        // Enter in a one-line field must not submit the form.
        if (key === "Enter" && target.tagName === "INPUT" && target.type !== "range") event.preventDefault();
        return;
      }
      if ((key === "ArrowLeft" || key === "ArrowRight") && tabs.length > 0) {
        const to = active + (key === "ArrowLeft" ? -1 : 1);
        if (to >= 0 && to <= last) {
          event.preventDefault();
          activate(to, "tab");
        }
      }
    });

    /* ---- Option illustrations ---- */

    function showIllustration(panel, input) {
      const aside = $(".illustrations", panel);
      if (!aside) return;
      const option = input ? input.closest(".option") : null;
      const id = option ? option.dataset.illustration : undefined;
      for (const element of $$(".illustration", aside)) element.hidden = element.id !== id;
      const caption = $(".illustration-caption", aside);
      caption.hidden = !input;
      if (input) caption.textContent = input.value;
      $(".illustration-empty", aside).hidden = Boolean(input);
      const none = $(".illustration-none", aside);
      none.hidden = !input || Boolean(id);
      if (input && !id) $(".illustration-none-name", none).textContent = input.value;
      for (const each of $$(".option", panel)) each.classList.toggle("is-previewed", each === option);
    }

    for (const panel of panels) {
      if (!$(".illustrations", panel)) continue;
      const first =
        $(".option-input:checked", panel) ||
        $(".option[data-illustration] .option-input", panel);
      showIllustration(panel, first);
      panel.addEventListener("focusin", (event) => {
        if (event.target.classList.contains("option-input")) showIllustration(panel, event.target);
      });
      panel.addEventListener("mouseover", (event) => {
        const option = event.target.closest(".option");
        if (option) showIllustration(panel, $(".option-input", option));
      });
    }

    /* ---- Changes, errors, drafts ---- */

    function clearError(question) {
      if (!question.classList.contains("has-error")) return;
      question.classList.remove("has-error");
      $(".question-error", question).hidden = true;
      for (const control of $$("[aria-invalid]", question)) control.removeAttribute("aria-invalid");
    }

    function touchScale(question) {
      if (question.dataset.unset === "true") question.dataset.unset = "false";
    }

    function changed(event) {
      const question = event.target.closest("[data-question]");
      if (!question || closed) return;
      if (question.dataset.kind === "scale") touchScale(question);
      clearError(question);
      refresh();
      scheduleDraft();
    }

    form.addEventListener("input", changed);
    form.addEventListener("change", changed);

    for (const input of $$(".scale-input", form)) {
      const question = input.closest("[data-question]");
      // Touching the slider sets it even when the value does not move.
      const touch = () => {
        if (question.dataset.unset !== "true" || closed) return;
        touchScale(question);
        clearError(question);
        refresh();
        scheduleDraft();
      };
      input.addEventListener("pointerdown", touch);
      input.addEventListener("keydown", (event) => {
        if (["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Home", "End", "PageUp", "PageDown"].includes(event.key)) {
          touch();
        }
      });
    }

    for (const button of $$("[data-clear]", form)) {
      button.addEventListener("click", () => {
        const question = questionById(button.dataset.clear);
        if (question.dataset.kind === "scale") {
          question.dataset.unset = "true";
          $(".scale-input", question).focus();
        } else {
          const inputs = $$(".option-input", question);
          for (const input of inputs) input.checked = false;
          inputs[0].focus();
        }
        refresh();
        scheduleDraft();
      });
    }

    function setSaveStatus(state, text) {
      saveStatus.dataset.state = state;
      saveStatus.textContent = text;
    }

    function scheduleDraft() {
      if (closed) return;
      window.clearTimeout(draftTimer);
      draftTimer = window.setTimeout(() => saveDraft(false), DRAFT_DELAY_MS);
    }

    async function saveDraft(keepalive) {
      draftTimer = null;
      const sequence = ++draftSequence;
      setSaveStatus("saving", "Saving draft…");
      try {
        const response = await fetch("/draft", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ sid, answers: answers() }),
          credentials: "same-origin",
          cache: "no-store",
          keepalive,
        });
        if (sequence !== draftSequence || closed) return;
        if (response.ok) {
          const time = new Date().toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
          setSaveStatus("saved", `Draft saved ${time}`);
        } else {
          setSaveStatus("error", "Draft not saved");
        }
      } catch {
        if (sequence === draftSequence && !closed) setSaveStatus("error", "Draft not saved");
      }
    }

    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "hidden" && draftTimer !== null) {
        window.clearTimeout(draftTimer);
        saveDraft(true);
      }
    });

    /* Server messages are lowercase fragments ("an answer is required");
       on the page they read as sentences. */
    const sentence = (text) => {
      const value = String(text);
      return value.charAt(0).toUpperCase() + value.slice(1);
    };

    function showBanner(message, list) {
      banner.replaceChildren(document.createTextNode(sentence(message)));
      if (list && list.length > 0) {
        const ul = document.createElement("ul");
        for (const item of list) {
          const li = document.createElement("li");
          li.textContent = sentence(item);
          ul.append(li);
        }
        banner.append(ul);
      }
      banner.hidden = false;
    }

    function hideBanner() {
      banner.hidden = true;
      banner.replaceChildren();
    }

    function showErrors(body) {
      const general = Array.isArray(body.general) ? body.general.map(String) : [];
      const errors = body.errors && typeof body.errors === "object" ? body.errors : {};
      let first = null;
      for (const [id, message] of Object.entries(errors)) {
        const question = questionById(id);
        if (!question || !question.matches("[data-question]")) {
          general.push(`${id}: ${message}`);
          continue;
        }
        question.classList.add("has-error");
        const slot = $(".question-error", question);
        slot.textContent = sentence(message);
        slot.hidden = false;
        for (const control of $$("input, textarea", question)) control.setAttribute("aria-invalid", "true");
        if (!first || questions.indexOf(question) < questions.indexOf(first)) first = question;
      }
      refresh();
      if (general.length > 0) {
        showBanner(first ? "Some answers need attention:" : "Your answers could not be sent:", general);
      } else if (first) {
        showBanner("Some answers need attention. Please check the highlighted questions.");
      }
      if (first) {
        const firstPanel = panels.findIndex((panel) => panel.contains(first));
        activate(firstPanel);
        const control = $(".option-input:checked", first) || $("input, textarea", first);
        if (control) control.focus();
      }
    }

    function closeForm(message) {
      closed = true;
      window.clearTimeout(draftTimer);
      draftSequence += 1;
      showBanner(message);
      form.classList.add("is-closed");
      for (const control of $$("input, textarea, button", form)) control.disabled = true;
      setSaveStatus("closed", "");
      refresh();
    }

    function finish(late) {
      closed = true;
      window.clearTimeout(draftTimer);
      draftSequence += 1;
      const done = document.getElementById("done");
      if (late) {
        done.classList.add("is-late");
        $("#done-title").textContent = "Your answers were recorded";
        $("#done-text").textContent =
          "The agent had already stopped waiting and moved on, so it has not seen them yet. " +
          "They are kept in planb's history, and the agent may ask again. You can close this tab.";
      }
      form.hidden = true;
      form.closest(".card").classList.add("is-done");
      hideBanner();
      $$(".keyboard-hint").forEach((hint) => {
        hint.hidden = true;
      });
      done.hidden = false;
      document.title = "Sent · " + document.title;
      done.focus();
    }

    function setBusy(busy) {
      submitting = busy;
      submit.classList.toggle("is-busy", busy);
      submitLabel.textContent = busy ? "Sending…" : "Submit";
      refresh();
    }

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (submitting || closed || submit.disabled || active !== panels.length - 1) return;
      window.clearTimeout(draftTimer);
      draftTimer = null;
      draftSequence += 1;
      hideBanner();
      setBusy(true);
      let response;
      let body = {};
      try {
        response = await fetch("/submit", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ sid, answers: answers() }),
          credentials: "same-origin",
          cache: "no-store",
        });
        body = await response.json().catch(() => ({}));
      } catch {
        setBusy(false);
        showBanner("Could not reach planb to send your answers. Check that the agent is still running, then try again.");
        return;
      }
      setBusy(false);
      if (response.ok) {
        finish(body.status === "late");
      } else if (response.status === 422) {
        showErrors(body);
      } else if (response.status === 404 || response.status === 409) {
        closeForm(body.error ? String(body.error) : "This form is closed and no longer takes answers.");
      } else {
        const detail = body.error ? `: ${body.error}` : ` (HTTP ${response.status})`;
        showBanner(`Your answers could not be sent${detail}. Please try again.`);
      }
    });

    activate(0);
    refresh();
  }

  document.addEventListener("DOMContentLoaded", () => {
    initThemeToggle();
    const form = document.getElementById("ask-form");
    if (form) initForm(form);
  });
})();
