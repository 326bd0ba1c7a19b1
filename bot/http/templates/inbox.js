// Progressive enhancement of the Agent Inbox: the page works without this script.
// With it, action forms are sent in the background and the live part is refreshed
// (every few seconds, unless someone is typing in it or reading an opened result).
"use strict";
(function () {
  const live = () => document.getElementById("live");
  let busy = false;

  async function refresh(url) {
    const target = live();
    if (!target || busy) return;
    const response = await fetch(url || window.location.pathname + window.location.search, {
      credentials: "same-origin", headers: { "accept": "text/html" },
    });
    if (signedOut(response)) return;
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = doc.getElementById("live");
    if (fresh) { target.replaceWith(fresh); bind(); }
  }

  function signedOut(response) {
    // A sign-in that ended (expired, revoked elsewhere) leads to the sign-in page, which
    // brings the visitor back here: nothing on this page would change until then.
    const toLogin = response.redirected && new URL(response.url).pathname === "/login";
    if (response.status !== 401 && !toLogin) return false;
    window.location.assign("/login");
    return true;
  }

  function refused(form, text) {
    // The server's own sentence (a stale form token, a call decided meanwhile), shown
    // where the page shows its messages; the buttons work again.
    form.querySelectorAll("button").forEach((b) => { b.disabled = false; });
    const note = document.createElement("p");
    note.className = "flash error";
    note.setAttribute("role", "status");
    note.textContent = text.trim() || "That did not work; reload the page and try again.";
    const target = live();
    if (target) {
      target.querySelectorAll("p.flash").forEach((p) => p.remove());
      target.prepend(note);
    }
  }

  function busyReading() {
    // Someone typing an answer or reading an opened result: do not swap the page under them.
    const el = document.activeElement;
    const typing = el && live() && live().contains(el) && (el.value || "").length > 0;
    return typing || (live() && live().querySelector("details[open]") !== null);
  }

  async function submit(event) {
    const form = event.target;
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) { event.preventDefault(); return; }
    event.preventDefault();
    const body = new URLSearchParams(new FormData(form));
    if (event.submitter && event.submitter.name) body.set(event.submitter.name, event.submitter.value);
    busy = true;
    form.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    try {
      // Not form.action: the buttons are named "action", which would shadow it.
      const response = await fetch(form.getAttribute("action"), {
        method: "POST", body, credentials: "same-origin",
        headers: { "content-type": "application/x-www-form-urlencoded" },
      });
      busy = false;
      if (signedOut(response)) return;
      if (!response.ok) { refused(form, await response.text()); return; }
      // The server answers 303 to the inbox with a flash message; fetch followed it.
      await refresh(response.redirected ? response.url : undefined);
      if (response.redirected) history.replaceState(null, "", response.url);
    } catch (err) {
      busy = false;
      form.submit();  // fall back to the plain form
    }
  }

  function bind() {
    document.querySelectorAll("form.js-action").forEach((form) => {
      if (!form.dataset.bound) { form.dataset.bound = "1"; form.addEventListener("submit", submit); }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    bind();
    if (live()) setInterval(() => { if (!busyReading() && !document.hidden) refresh(); }, 4000);
  });
})();
