// planb-retro: the scrubber and the live updates of the replay pages.
//
// The session page carries its cursors in #scrubber[data-cursors]; moving the
// range (mouse, Left/Right keys anywhere on the page, Prev/Next) fetches the
// state panel for that cursor from data-fragment and swaps it in without a
// reload, dims the later timeline entries and updates ?at= in the address
// bar. data-live names a server-sent event stream: on a session page each
// message is {cursor, html} for a new timeline entry; on the index any
// message means "something changed" and the lists are fetched again.
//
// A long session's page shows a window of its timeline. "Show earlier" and
// "Show later" are links that open the page at the nearest hidden entry;
// here they fetch the entries from their data-src instead and put them in
// the control's place, followed by a new control while more remain.
(() => {
  "use strict";

  function initScrubber(scrubber) {
    const range = document.getElementById("scrub");
    const label = document.getElementById("scrub-label");
    const permalink = document.getElementById("permalink");
    const panel = document.getElementById("state-panel");
    const timeline = document.getElementById("timeline");
    let cursors = scrubber.dataset.cursors ? scrubber.dataset.cursors.split(",").map(Number) : [];
    let request = 0;

    function mark(cursor) {
      for (const entry of timeline.querySelectorAll(".retro-entry")) {
        const c = Number(entry.dataset.cursor);
        entry.classList.toggle("is-future", c > cursor);
        entry.classList.toggle("is-current", c === cursor);
      }
    }

    async function show(position, push) {
      if (cursors.length === 0) return;
      position = Math.max(0, Math.min(cursors.length - 1, position));
      range.value = String(position);
      const cursor = cursors[position];
      label.textContent = `Event ${position + 1} of ${cursors.length} · log cursor ${cursor}`;
      permalink.href = `?at=${cursor}`;
      mark(cursor);
      // A person's move pins the position in the address; following the live
      // end keeps an address that already names a position in step with it,
      // and leaves one without ?at= meaning "the latest".
      if (push || new URLSearchParams(location.search).has("at")) {
        history.replaceState(null, "", `?at=${cursor}`);
      }
      const mine = ++request;
      panel.classList.add("is-loading");
      try {
        const response = await fetch(scrubber.dataset.fragment + cursor);
        if (!response.ok) return;
        const html = await response.text();
        if (mine === request) panel.innerHTML = html;
      } finally {
        if (mine === request) panel.classList.remove("is-loading");
      }
    }

    timeline.addEventListener("click", async (event) => {
      const link = event.target.closest(".retro-more a");
      if (!link) return;
      event.preventDefault();
      const more = link.closest(".retro-more");
      if (more.classList.contains("is-loading")) return;
      more.classList.add("is-loading");
      try {
        const response = await fetch(more.dataset.src);
        if (!response.ok) return;
        const holder = document.createElement("template");
        holder.innerHTML = await response.text();
        // A live entry may have arrived meanwhile: never show one twice.
        for (const entry of holder.content.querySelectorAll(".retro-entry")) {
          if (document.getElementById(entry.id)) entry.remove();
        }
        more.replaceWith(holder.content);
        mark(cursors[Number(range.value)]);
      } finally {
        more.classList.remove("is-loading");
      }
    });

    range.addEventListener("input", () => show(Number(range.value), true));
    document.getElementById("scrub-prev").addEventListener("click", () => show(Number(range.value) - 1, true));
    document.getElementById("scrub-next").addEventListener("click", () => show(Number(range.value) + 1, true));
    document.addEventListener("keydown", (event) => {
      if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
      const target = event.target;
      if (target === range) return; // the range handles its own arrows
      if (target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement) return;
      if (event.key === "ArrowLeft") { event.preventDefault(); show(Number(range.value) - 1, true); }
      if (event.key === "ArrowRight") { event.preventDefault(); show(Number(range.value) + 1, true); }
    });
    mark(cursors[Number(range.value)]);

    const live = scrubber.dataset.live;
    if (live && window.EventSource) {
      const source = new EventSource(live);
      source.addEventListener("entry", (message) => {
        const data = JSON.parse(message.data);
        if (cursors.includes(data.cursor)) return;
        const atEnd = Number(range.value) >= cursors.length - 1;
        const holder = document.createElement("template");
        holder.innerHTML = data.html;
        const entry = holder.content.firstElementChild;
        if (!entry) return;
        entry.classList.add("is-new");
        // While later entries are left out, "Show later" fetches this one
        // with them; appending it now would leave a gap before it.
        if (!timeline.querySelector(".retro-more[data-later]") && !document.getElementById(entry.id)) {
          timeline.appendChild(entry);
        }
        cursors.push(data.cursor);
        scrubber.dataset.cursors = cursors.join(",");
        range.max = String(cursors.length - 1);
        if (atEnd) {
          show(cursors.length - 1, false);
        } else {
          // The position stays; the new entry lies after it, so it is dimmed.
          const cursor = cursors[Number(range.value)];
          label.textContent = `Event ${Number(range.value) + 1} of ${cursors.length} · log cursor ${cursor}`;
          mark(cursor);
        }
      });
    }
  }

  // A page that follows the log (data-live on main) swaps in, on each
  // append, the fresh copy of every element marked data-swap.
  function initLive(main) {
    if (!window.EventSource) return;
    const source = new EventSource(main.dataset.live);
    let busy = false;
    source.addEventListener("append", async () => {
      if (busy) return;
      busy = true;
      try {
        const response = await fetch(location.href);
        if (!response.ok) return;
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        for (const current of document.querySelectorAll("[data-swap]")) {
          const fresh = current.id && page.getElementById(current.id);
          if (fresh) current.replaceWith(fresh);
        }
      } finally {
        busy = false;
      }
    });
  }

  // The task scrubber: moving it opens the task as of that event. It moves
  // by position among the task's events; the server turns the position
  // into the event's cursor (a task of a hundred thousand events would
  // otherwise carry all their cursors in the page).
  function initTaskScrubber(nav) {
    const range = document.getElementById("task-scrub");
    if (!range || !nav.dataset.base) return;
    range.addEventListener("change", () => {
      location.assign(nav.dataset.base + Number(range.value));
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const scrubber = document.getElementById("scrubber");
    if (scrubber) initScrubber(scrubber);
    const main = document.getElementById("main");
    if (main && main.dataset.live && !scrubber) initLive(main);
    const taskScrubber = document.getElementById("task-scrubber");
    if (taskScrubber) initTaskScrubber(taskScrubber);
  });
})();
