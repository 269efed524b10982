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
 *
 * The script is written in four parts by concern, review/1-page.js to
 * review/4-verdict.js, which the server joins in that order at compile time
 * (pages/assets.rs) into the one script it serves: they share one scope, so
 * each part uses the elements, helpers and state the parts before it
 * declare, and functions of later parts once the page runs. There is no
 * bundler; joining is all it takes.
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
