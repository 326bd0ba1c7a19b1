// The web chat page: conversations in the sidebar, the thread, one WebSocket per open
// conversation (docs/webchat.md). No build step, no library. Model text arrives rendered
// and sanitized by the server (done.html, history's html) and only that goes in as HTML;
// everything else (user text, tool calls, cards, titles) goes in as textContent.
"use strict";

const csrf = document.querySelector('meta[name="csrf"]').content;
const $ = (id) => document.getElementById(id);
const thread = $("thread");
const input = $("input");
const send = $("send");

const state = {
  conversations: [],
  current: null,
  socket: null,
  running: false,
  streaming: null, // the answer bubble being streamed
  beside: null, // the text shown just now beside the calls that follow it (thinking_delta)
  shown: new Set(), // message ids in the thread
  cards: new Map(), // tool_call_id -> card element
  questions: new Map(), // request_id -> question element
  tools: new Map(), // tool_call_id -> tool line
  retry: 0,
  limits: null, // from hello: max_upload_bytes, max_attachments
  attached: [], // {id, name, size, chip}: uploaded, sent with the next message
  uploading: 0, // uploads under way
  recording: null, // the voice message being recorded: {recorder, stream, chunks, started, ...}
  hearing: null, // the ref of the voice message sent, until the server answers it
  voices: 0, // voice messages sent (their refs)
  sending: new Map(), // ref -> a message sent, until the server answers it: {text, attached, conversation}
  sent: 0, // messages sent (their refs)
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

async function api(method, path, body) {
  const headers = { "X-CSRF-Token": csrf };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) signedOut();
  if (!response.ok) {
    let message = `request failed (${response.status})`;
    try { message = (await response.json()).error || message; } catch (e) { /* not JSON */ }
    const failure = new Error(message);
    failure.status = response.status;
    throw failure;
  }
  return response.status === 204 ? null : response.json();
}

// The sign-in ended (idle, or ended on /signins): to the sign-in page, which leads back
// here, where the conversation and the draft come back (until 2026-12-06 it led to the
// inbox, and the draft was lost; found by review).
const RETURN_KEY = "chathub.return";

function signedOut() {
  try {
    sessionStorage.setItem(RETURN_KEY, JSON.stringify({ conversation: state.current, draft: input.value }));
  } catch (error) { /* storage refused: the sign-in still leads back */ }
  location.href = "/login?next=/chat";
  throw new Error("signed out");
}

function returned() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(RETURN_KEY) || "null");
    sessionStorage.removeItem(RETURN_KEY);
    return saved && typeof saved === "object" ? saved : {};
  } catch (error) {
    return {};
  }
}

// One file's bytes as the body (no form encoding); the server answers its id. ``more``:
// further query parameters (a voice message's ``voice=1&seconds=``).
async function uploadFile(conversation, file, name = file.name, more = "") {
  let response;
  try {
    response = await fetch(
      `/chat/conversations/${conversation}/files?name=${encodeURIComponent(name)}${more}`,
      {
        method: "POST",
        headers: { "X-CSRF-Token": csrf, "Content-Type": "application/octet-stream" },
        credentials: "same-origin",
        body: file,
      },
    );
  } catch (error) { // the connection broke (or the server closed it on a body too large)
    throw new Error(`The upload of ${name} did not get through; try again.`);
  }
  if (response.status === 401) signedOut();
  if (!response.ok) {
    let message = `The upload of ${name} failed (${response.status}).`;
    try { message = (await response.json()).error || message; } catch (e) { /* not JSON */ }
    throw new Error(message);
  }
  return response.json();
}

function scrollDown() {
  thread.scrollTop = thread.scrollHeight;
}

function notice(text, error) {
  // What a voice message said (the server's quoted "🎤 “…”" line) reads as the person's words.
  const heard = !error && text.startsWith("🎤 ");
  thread.append(el("div", error ? "notice error" : heard ? "notice heard" : "notice", text));
  scrollDown();
}

function setRunning(running) {
  state.running = running;
  showSendOrStop();
  $("status").textContent = running ? "working…" : "";
}

// The button does what it says: STOP while a turn runs and nothing is typed, SEND when a
// draft is there (it joins the running turn; until 2026-12-07 "Stop" sent the draft).
function showSendOrStop() {
  const stops = state.running && !hasDraft();
  send.textContent = stops ? "Stop" : "Send";
  send.classList.toggle("stop", stops);
}

// -- conversations -------------------------------------------------------------------

async function loadConversations() {
  state.conversations = (await api("GET", "/chat/conversations")).conversations;
  if (state.conversations.length === 0) {
    state.conversations = [await api("POST", "/chat/conversations", {})];
  }
  renderSidebar();
}

function renderSidebar() {
  const list = $("conversations");
  list.replaceChildren();
  for (const conversation of state.conversations) {
    const item = el("li", conversation.id === state.current ? "current" : "", conversation.title);
    item.dataset.id = conversation.id;
    item.title = conversation.title;
    item.addEventListener("click", () => {
      $("sidebar").classList.remove("open");
      select(conversation.id);
    });
    list.append(item);
  }
  const current = state.conversations.find((c) => c.id === state.current);
  $("title").textContent = current ? current.title : "chathub";
}

async function select(id) {
  if (state.socket) {
    const old = state.socket;
    old.onclose = null;
    old.onmessage = null;
    // Messages sent while it connected leave first, to the conversation they were written
    // in (closed at once, they were lost: neither sent nor given back; found by review).
    if (old.readyState === WebSocket.CONNECTING && old.queued) {
      old.addEventListener("open", () => old.close(), { once: true });
    } else {
      old.close();
    }
    state.socket = null;
  }
  if (state.current !== id) clearAttached(); // a conversation's files are its own
  if (state.current !== id) cancelRecording();
  heardBack();
  state.current = id;
  history.replaceState(null, "", `#c=${id}`);
  renderSidebar();
  clearThread();
  setRunning(false);
  // Subscribe first, then load the history: frames that arrive meanwhile wait, and what
  // the history already shows is not shown twice. The server says hello once it is
  // subscribed: the history is read after it (read while the socket still opened, what
  // happened in between was in neither until 2026-12-06; found by review), or after the
  // socket closed (the history is shown while it reconnects).
  const waiting = [];
  let loaded = false;
  let subscribed;
  const greeted = new Promise((resolve) => (subscribed = resolve));
  const socket = connect(id, (frame) => {
    if (frame.type === "hello") subscribed();
    loaded ? handle(frame) : waiting.push(frame);
  });
  socket.addEventListener("close", () => subscribed(), { once: true });
  await greeted;
  if (state.current !== id) return;
  try {
    await loadHistory(id, null);
  } catch (error) {
    if (state.current === id && error.status === 404) {
      await conversationGone(id);
      return;
    }
    if (state.current === id) notice(`Could not load the history: ${error.message}`, true);
  }
  // Another conversation chosen meanwhile: this one's frames are not shown in its thread
  // (until 2026-12-06 they were, and its history with them; found by review).
  if (state.current !== id) return;
  loaded = true;
  for (const frame of waiting) handle(frame);
}

// The conversation was deleted elsewhere (another tab, the API): it leaves the list and
// another one opens, which stops the reconnecting (until 2026-12-07 a tab whose socket
// dropped tried to reconnect to it for ever; found by review).
async function conversationGone(id) {
  try {
    await loadConversations(); // as they are now: another tab may have added some
  } catch (error) {
    state.conversations = state.conversations.filter((c) => c.id !== id);
    renderSidebar();
    $("status").textContent = "";
    notice(`This conversation was deleted, and the list could not be read: ${error.message}`, true);
    return;
  }
  await select(state.conversations[0].id);
  notice("The conversation open here was deleted (in another tab); this one is shown instead.");
}

// A new conversation keeps the scheduled jobs' cards still open: their calls wait on in
// this chat (until 2026-12-07 /new dropped them, and nobody was shown the decision).
function clearThread(keepJobs = false) {
  const jobs = keepJobs
    ? [...state.cards].filter(([, card]) => card.dataset.job && !card.classList.contains("closed"))
    : [];
  thread.replaceChildren(...jobs.map(([, card]) => card));
  state.shown.clear();
  state.cards.clear();
  for (const [id, card] of jobs) state.cards.set(id, card);
  state.questions.clear();
  state.tools.clear();
  state.streaming = null;
  state.beside = null;
}

async function loadHistory(id, before) {
  const query = before ? `?limit=50&before=${before}` : "?limit=50";
  const page = await api("GET", `/chat/conversations/${id}/messages${query}`);
  if (state.current !== id) return; // another conversation is shown now
  const nodes = [];
  if (page.next_before) {
    const earlier = el("button", "", "Load earlier messages");
    earlier.id = "earlier";
    earlier.type = "button";
    earlier.addEventListener("click", async () => {
      earlier.remove();
      await loadHistory(id, page.next_before);
    });
    nodes.push(earlier);
  }
  for (const message of page.messages) {
    if (state.shown.has(message.id)) continue;
    state.shown.add(message.id);
    if (message.role === "user") {
      if (!before) queuedBubble(message.text)?.remove(); // taken before the history was read
      nodes.push(userBubble(message.text, message.attachments));
    } else {
      // What the model wrote, then the calls it made beside it, as they came live.
      if (message.html) nodes.push(answerBubble(message.html));
      // As live: what it was called with, then how it ended (a question's answer, a
      // tool's result); until 2026-12-07 only its name and status came back.
      for (const tool of message.tools) {
        const start = toolStart(tool.name, tool.arguments);
        const ended = ["done", "failed", "rejected", "cancelled"].includes(tool.status);
        const line = el("div", "tool", ended ? `${start}\n${toolEnd(tool.name, tool.status, tool.preview)}` : start);
        // Known by its call: the frames replayed after the history do not show it twice
        // (until 2026-12-07 a call made while a reload read the history was; found by review).
        if (ended) line.dataset.ended = "1";
        state.tools.set(tool.tool_call_id, line);
        nodes.push(line);
      }
    }
  }
  const first = thread.querySelector(".msg, .tool, .notice, .card, .question");
  if (before && first) {
    for (const node of nodes) thread.insertBefore(node, first);
  } else {
    thread.prepend(...nodes);
    scrollDown();
  }
}

// A message shown waiting for its turn (``queued_message``), by its text.
function queuedBubble(text) {
  return [...thread.querySelectorAll(".msg.user.queued")].find((bubble) => bubble.dataset.text === text);
}

function userBubble(text, attachments) {
  const bubble = el("div", "msg user", text);
  if (attachments && attachments.length) {
    const files = el("div", "files");
    for (const file of attachments) {
      const sound = file.kind === "voice" || file.kind === "audio";
      const chip = el("span", "", sound ? `🎤 ${file.name}` : file.name);
      chip.title = file.path;
      files.append(chip);
    }
    bubble.append(files);
  }
  return bubble;
}

function answerBubble(html) {
  const bubble = el("div", "msg assistant");
  bubble.innerHTML = html; // rendered and sanitized by the server (bot/webchat/markdown.py)
  addCopyButtons(bubble);
  return bubble;
}

function addCopyButtons(bubble) {
  for (const pre of bubble.querySelectorAll("pre")) {
    const button = el("button", "copy", "Copy");
    button.type = "button";
    button.addEventListener("click", () => copy(pre.querySelector("code") || pre, button));
    pre.append(button);
  }
}

async function copy(code, button) {
  const text = code.textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch (error) {
    const area = el("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = "Copy"), 1500);
}

// -- the socket ----------------------------------------------------------------------

function connect(id, deliver) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/ws/chat?conversation=${id}`);
  state.socket = socket;
  socket.onmessage = (event) => {
    let frame;
    try { frame = JSON.parse(event.data); } catch (e) { return; }
    deliver(frame);
  };
  socket.onopen = () => { state.retry = 0; };
  socket.onclose = () => {
    if (state.socket !== socket) return;
    state.socket = null;
    const unanswered = [...state.sending.values()].filter((s) => s.conversation === id);
    state.sending.clear();
    if (unanswered.length) {
      for (const sending of unanswered.reverse()) restoreDraft(sending, true);
      notice("The connection dropped as the message left: if it is not shown above, send it again.", true);
    }
    $("status").textContent = "reconnecting…";
    const wait = Math.min(10000, 500 * 2 ** state.retry++);
    setTimeout(() => { if (state.current === id && !state.socket) select(id); }, wait);
  };
  return socket;
}

function frameOut(frame) {
  const socket = state.socket;
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify(frame));
    return true;
  }
  // Still connecting (a page just loaded, a conversation just chosen): it goes when the
  // socket opens. Until 2026-12-06 it was refused with "Not connected", draft kept, on a
  // slow machine; a socket that closes first gives the draft back as any other does.
  if (socket && socket.readyState === WebSocket.CONNECTING) {
    socket.queued = (socket.queued || 0) + 1;
    socket.addEventListener("open", () => socket.send(JSON.stringify(frame)), { once: true });
    return true;
  }
  notice("Not connected; trying again…", true);
  return false;
}

function handle(frame) {
  if (frame.ref && frame.ref === state.hearing && ["accepted", "error"].includes(frame.type)) {
    heardBack();
  }
  if (frame.ref && state.sending.has(frame.ref) && ["accepted", "error", "notice"].includes(frame.type)) {
    sentBack(frame.ref, frame);
  }
  if (frame.type === "question_answered") {  // a message sent may have been that answer
    for (const [ref, sending] of state.sending) {
      if (sending.text === frame.answer) { state.sending.delete(ref); break; }
    }
  }
  switch (frame.type) {
    case "hello": state.limits = frame.limits; break;
    case "turn_running": setRunning(frame.running); break;
    case "user_message": {
      setRunning(true);
      const waited = queuedBubble(frame.text);
      if (state.shown.has(frame.id)) {
        if (waited) waited.remove(); // the history shows it already
        break;
      }
      state.shown.add(frame.id);
      if (waited) { // its turn took it: now it is history, below what came before it
        waited.classList.remove("queued");
        thread.append(waited);
      } else {
        thread.append(userBubble(frame.text, frame.attachments));
      }
      break;
    }
    case "queued_message": // taken before this tab opened, waiting for its turn
      if (!thread.querySelector(`.msg.user.queued[data-queued="${frame.queued_id}"]`)) {
        const bubble = userBubble(frame.text, frame.attachments);
        bubble.classList.add("queued");
        bubble.title = "Waiting for its turn";
        bubble.dataset.queued = frame.queued_id;
        bubble.dataset.text = frame.text;
        thread.append(bubble);
      }
      break;
    case "text_delta":
      if (frame.depth !== 0) break;
      setRunning(true);
      if (!state.streaming) {
        state.streaming = el("div", "msg assistant streaming");
        thread.append(state.streaming);
      }
      state.streaming.append(document.createTextNode(frame.text));
      break;
    case "thinking_delta":
      // Streamed already when it came as text deltas: shown as rendered now (it stayed
      // raw Markdown until 2026-12-06); otherwise a line of its own.
      if (frame.depth !== 0) break;
      if (state.streaming && frame.html) {
        state.beside = state.streaming;
        state.streaming.innerHTML = frame.html; // rendered and sanitized by the server
        addCopyButtons(state.streaming);
        endStreaming();
      } else if (!state.streaming) {
        const line = el("div", "tool", `· ${frame.text}`);
        if (frame.html) state.beside = line;
        thread.append(line);
      }
      break;
    case "tool_start": {
      setRunning(true);
      endStreaming();
      // The text written beside this call is stored in one row with it: a call the
      // history showed had its text shown there too, so the copy just streamed goes
      // (until 2026-12-07 it was shown twice after a reload; found by review).
      const beside = state.beside;
      state.beside = null;
      if (state.tools.has(frame.tool_call_id)) { // the history showed it
        if (beside) beside.remove();
        break;
      }
      const line = el("div", "tool", toolStart(frame.name, frame.arguments));
      state.tools.set(frame.tool_call_id, line);
      thread.append(line);
      break;
    }
    case "tool_end": {
      const text = toolEnd(frame.name, frame.status, frame.preview);
      const line = state.tools.get(frame.tool_call_id);
      if (!line) thread.append(el("div", "tool", text));
      else if (!line.dataset.ended) line.textContent += `\n${text}`;
      if (line) line.dataset.ended = "1";
      // Its card or question, still open when the call ended (a stop): nothing to decide.
      closeCard(frame.tool_call_id, ENDED_UNDECIDED);
      closeQuestion(frame.tool_call_id, ENDED_UNANSWERED, false);
      break;
    }
    case "approval_required":
      if (!frame.asked_by) setRunning(true); // a job's card: this conversation runs nothing
      showCard(frame);
      break;
    case "approval_resolved": closeCard(frame.tool_call_id, frame.line); break;
    case "agent_question": setRunning(true); showQuestion(frame); break;
    case "question_answered": closeQuestion(frame.request_id, frame.answer); break;
    case "done":
      if (state.streaming) state.streaming.remove();
      state.streaming = null;
      if (!state.shown.has(frame.message_id)) {
        state.shown.add(frame.message_id);
        thread.append(answerBubble(frame.html));
      }
      setRunning(false);
      break;
    case "error":
      notice(frame.message, true);
      if (frame.code === "turn") { endStreaming(); setRunning(false); closeEverything(); }
      if (frame.ref && frame.ref.startsWith("card-")) enableChoices(frame.ref.slice(5));
      break;
    case "notice": notice(frame.text); break;
    case "new_session": clearThread(true); notice("New conversation."); break;
    case "lagged": select(state.current); return;
    default: break;
  }
  scrollDown();
}

function endStreaming() {
  if (state.streaming) state.streaming.classList.remove("streaming");
  state.streaming = null;
}

function toolStart(name, args) {
  return `⚙ ${name} ${preview(args)}`;
}

function toolEnd(name, status, result) {
  const icon = { done: "✓", failed: "✗", rejected: "⊘", cancelled: "⊘" }[status] || "•";
  return `  ${icon} ${name}: ${preview(result) || status}`;
}

function preview(text) {
  const flat = (text || "").replace(/\s+/g, " ").trim();
  return flat.length > 160 ? `${flat.slice(0, 159)}…` : flat;
}

function showCard(frame) {
  if (state.cards.has(frame.tool_call_id)) return;
  const card = el("div", "card");
  card.dataset.call = frame.tool_call_id;
  const who = frame.depth > 0 ? ` (agent ${frame.agent}, depth ${frame.depth})` : "";
  let what = `⚠ ${frame.tool}${who} wants to run with:`;
  if (frame.label === "Command") what = `⚠ ${frame.tool}${who} wants to run${frame.workdir ? ` in ${frame.workdir}` : ""}:`;
  if (frame.label === "Diff") what = `⚠ ${frame.tool}${who} wants to write ${frame.path || ""}${frame.new_file ? " (new file)" : ""}`;
  if (frame.asked_by) {
    what = `⏰ ${frame.asked_by} wants to run: ${frame.tool}`;
    card.dataset.job = "1";
  }
  card.append(el("div", "what", what), el("pre", "", frame.content));
  if (frame.deciders) card.append(el("div", "who", frame.deciders));
  const choices = el("div", "choices");
  for (const choice of frame.choices) {
    const button = el("button", `choice ${choice.choice}`, choice.label);
    button.type = "button";
    button.addEventListener("click", () => decide(card, frame.tool_call_id, choice));
    choices.append(button);
  }
  card.append(choices);
  state.cards.set(frame.tool_call_id, card);
  thread.append(card);
}

function decide(card, toolCallId, choice) {
  if (card.classList.contains("deciding")) return; // a double click decides once
  if (choice.choice !== "reject") {
    const approve = { type: "approve_tool", tool_call_id: toolCallId, ref: `card-${toolCallId}` };
    if (choice.bypass_secs !== null) approve.bypass_secs = choice.bypass_secs;
    if (frameOut(approve)) deciding(card);
    return;
  }
  if (card.querySelector(".reason")) return;
  const row = el("div", "choices reason");
  const reason = el("input");
  reason.placeholder = "Why not? (optional; the agent reads it)";
  reason.setAttribute("aria-label", "Reason");
  const confirm = el("button", "confirm-reject", "Reject");
  confirm.type = "button";
  const reject = () => {
    const frame = { type: "reject_tool", tool_call_id: toolCallId, reason: reason.value, ref: `card-${toolCallId}` };
    if (!card.classList.contains("deciding") && frameOut(frame)) deciding(card);
  };
  confirm.addEventListener("click", reject);
  reason.addEventListener("keydown", (event) => { if (event.key === "Enter") { event.preventDefault(); reject(); } });
  row.append(reason, confirm);
  card.append(row);
  reason.focus();
}

// Until 2026-12-06 a double click on Approve showed "This button has expired." though
// the call was approved, and a card or a question outlived the turn that asked (a stop),
// its buttons still there; found by review.
const ENDED_UNDECIDED = "⊘ The turn ended before a decision.";
const ENDED_UNANSWERED = "⊘ The turn ended before an answer.";

function deciding(card) {
  card.classList.add("deciding");
  for (const button of card.querySelectorAll(".choices button")) button.disabled = true;
}

// The card a refused decision was for (its frame's ref) gets its buttons back.
function enableChoices(toolCallId) {
  const card = state.cards.get(Number(toolCallId));
  if (!card || card.classList.contains("closed")) return;
  card.classList.remove("deciding");
  for (const button of card.querySelectorAll(".choices button")) button.disabled = false;
}

// What the conversation's own turn left open; a scheduled job's card waits on (its call
// is still pending: it closes on its own approval_resolved).
function closeEverything() {
  for (const [id, card] of state.cards) if (!card.dataset.job) closeCard(id, ENDED_UNDECIDED);
  for (const id of state.questions.keys()) closeQuestion(id, ENDED_UNANSWERED, false);
  // A stop drops the waiting messages (its notice says how many); one a failed turn left
  // waiting shows again when its own turn takes it.
  for (const bubble of thread.querySelectorAll(".msg.user.queued")) bubble.remove();
}

function closeCard(toolCallId, line) {
  const card = state.cards.get(toolCallId);
  if (!card || card.classList.contains("closed")) return;
  card.classList.add("closed");
  for (const part of card.querySelectorAll(".choices")) part.remove();
  card.append(el("div", "outcome", line));
}

function showQuestion(frame) {
  if (state.questions.has(frame.request_id)) return;
  const box = el("div", "question");
  box.append(el("div", "what", `? ${frame.question}`));
  const row = el("div", "answer");
  const answer = el("textarea");
  answer.rows = 2;
  answer.setAttribute("aria-label", "Answer");
  const button = el("button", "", "Answer");
  button.type = "button";
  const submit = () => {
    if (answer.value.trim()) frameOut({ type: "answer_question", request_id: frame.request_id, answer: answer.value });
  };
  button.addEventListener("click", submit);
  answer.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); submit(); }
  });
  row.append(answer, button);
  box.append(row);
  state.questions.set(frame.request_id, box);
  thread.append(box);
  // Not while a message is being typed: its next keys and Enter became the answer (found
  // by review on 2026-12-06).
  if (document.activeElement !== input || !input.value.trim()) answer.focus();
}

function closeQuestion(requestId, text, answered = true) {
  const box = state.questions.get(requestId);
  if (!box || box.classList.contains("closed")) return;
  box.classList.add("closed");
  box.querySelector(".answer")?.remove();
  box.append(el("div", "outcome", answered ? `↳ ${text}` : text));
}

// -- the composer --------------------------------------------------------------------

function hasDraft() {
  return input.value.trim() !== "" || state.attached.length > 0 || state.uploading > 0;
}

// Enter with nothing typed does nothing (a second Enter stopped the turn it had started):
// the STOP button and Esc stop.
function submitMessage() {
  const text = input.value;
  if (!hasDraft()) return;
  if (state.uploading > 0) {
    notice("Wait until the files are uploaded.", true);
    return;
  }
  const ref = `message-${++state.sent}`;
  const frame = { type: "message", text, ref };
  if (state.attached.length) frame.attachments = state.attached.map((file) => file.id);
  if (tooLong(frame)) return;
  if (frameOut(frame)) {
    // The draft comes back if the server refuses it or the connection drops first.
    state.sending.set(ref, { text, attached: state.attached, conversation: state.current });
    input.value = "";
    clearAttached();
  }
  showSendOrStop();
}

// Past the socket's frame size, said here and the draft kept: such a paste dropped the
// connection, and the page advised sending it again, which dropped it again (until
// 2026-12-07; found by review). A message past the hub's length is the server's to refuse.
function tooLong(frame) {
  const limits = state.limits || {};
  const bytes = new TextEncoder().encode(JSON.stringify(frame)).length;
  if (limits.max_frame_bytes && bytes > limits.max_frame_bytes) {
    notice(`This message is too large to send (${bytes} bytes; at most ${limits.max_frame_bytes}). Attach it as a file instead.`, true);
    return true;
  }
  return false;
}

// A message sent was answered (``frame``): taken by the server, or refused (its draft
// restored: its text, and its files unless they were what was refused).
function sentBack(ref, frame) {
  const sending = state.sending.get(ref);
  state.sending.delete(ref);
  if (!sending || frame.type !== "error" || sending.conversation !== state.current) return;
  restoreDraft(sending, frame.code !== "attachment");
}

function restoreDraft(sending, withFiles) {
  input.value = input.value.trim() ? `${sending.text}\n${input.value}` : sending.text;
  if (withFiles && !state.attached.length) for (const entry of sending.attached) showAttached(entry);
  showSendOrStop();
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  if (state.running && !hasDraft()) frameOut({ type: "stop" });
  else submitMessage();
});

// -- attachments: chosen, uploaded one by one, shown as chips, sent with the next message --

function clearAttached() {
  state.attached = [];
  $("chips").replaceChildren();
  showSendOrStop();
}

function chip(name) {
  const item = el("li", "chip uploading");
  item.append(el("span", "name", name));
  $("chips").append(item);
  return item;
}

async function attach(file) {
  const limits = state.limits || {};
  const most = limits.max_attachments || 10;
  if (state.attached.length + state.uploading >= most) {
    notice(`A message carries at most ${most} files.`, true);
    return;
  }
  if (limits.max_upload_bytes && file.size > limits.max_upload_bytes) {
    const limit = limits.max_upload_bytes;
    const said = limit >= 1024 * 1024 ? `${+(limit / (1024 * 1024)).toFixed(1)} MB` : `${limit} bytes`;
    notice(`${file.name} is over the limit of ${said}.`, true);
    return;
  }
  const conversation = state.current;
  const item = chip(file.name);
  state.uploading++;
  showSendOrStop();
  let uploaded;
  try {
    uploaded = await uploadFile(conversation, file);
  } catch (error) {
    item.remove();
    notice(error.message, true);
    return;
  } finally {
    state.uploading--;
    showSendOrStop();
  }
  if (state.current !== conversation || !item.isConnected) return; // switched meanwhile
  showAttached({ id: uploaded.id, name: uploaded.name, size: uploaded.size }, item);
}

// An uploaded file as a chip with its ✕ (``item``: its chip while uploading), sent with
// the next message.
function showAttached(entry, item = chip(entry.name)) {
  item.classList.remove("uploading");
  item.title = `${entry.name} (${entry.size} bytes)`;
  const remove = el("button", "", "✕");
  remove.type = "button";
  remove.setAttribute("aria-label", `Remove ${entry.name}`);
  remove.addEventListener("click", () => {
    state.attached = state.attached.filter((file) => file !== entry);
    item.remove();
    showSendOrStop();
  });
  item.append(remove);
  state.attached.push(entry);
  showSendOrStop();
}

$("attach").addEventListener("click", () => $("files").click());
$("files").addEventListener("change", () => {
  const chosen = [...$("files").files];
  $("files").value = ""; // the same file can be chosen again
  for (const file of chosen) attach(file);
});
input.addEventListener("input", showSendOrStop);
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    submitMessage();
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && state.recording) {
    event.preventDefault();
    cancelRecording(); // Esc while recording throws the recording away, and stops nothing else
    notice("Voice message cancelled.");
    return;
  }
  if (event.key !== "Escape") return;
  // Esc in a card's reason or a question's answer leaves that box for its card (not for
  // the page: a second Esc there stopped the turn, the card with it, until 2026-12-07;
  // found by review); it stops no turn.
  const target = event.target;
  const holder = target.closest ? target.closest(".card, .question") : null;
  if (holder) {
    if (target !== holder) {
      holder.tabIndex = -1;
      holder.focus();
    }
    return;
  }
  // Only the composer (its box, its buttons: SEND keeps the focus once clicked), or a page
  // with nothing focused, stops the turn.
  const nothing = target === document.body || target === document.documentElement;
  const composing = target.closest ? target.closest("#composer") !== null : target === input;
  if (state.running && (composing || nothing)) frameOut({ type: "stop" });
});

// -- voice messages: recorded with the microphone, uploaded as a voice note, sent at once;
// the server transcribes it and shows every tab the quoted "🎤 “…”" line (docs/voice.md) --

const mic = $("mic");
const recordingLine = $("recording");
// Opus in Ogg first (what Telegram and whisper servers know best), else in WebM (Chromium).
const VOICE_TYPES = [["audio/ogg;codecs=opus", "ogg"], ["audio/webm;codecs=opus", "webm"], ["audio/mp4", "m4a"]];

function extensionOf(type) {
  for (const [wanted, extension] of [["ogg", "ogg"], ["webm", "webm"], ["mp4", "m4a"], ["mpeg", "mp3"], ["wav", "wav"]]) {
    if ((type || "").includes(wanted)) return extension;
  }
  return "webm";
}

function micRefusal(error) {
  const name = error && error.name;
  if (name === "NotAllowedError" || name === "SecurityError") {
    return "The microphone was not allowed; allow it for this page to record a voice message.";
  }
  if (name === "NotFoundError" || name === "OverconstrainedError") return "No microphone was found.";
  if (name === "NotReadableError") return "The microphone is in use or could not be started.";
  return "The microphone could not be started.";
}

function showRecording(text, busy) {
  recordingLine.hidden = !text;
  recordingLine.textContent = text || "";
  recordingLine.classList.toggle("busy", Boolean(busy));
}

function minutes(seconds) {
  const whole = Math.floor(seconds);
  return `${Math.floor(whole / 60)}:${String(whole % 60).padStart(2, "0")}`;
}

// Busy (asking for the microphone, sending): clicks wait. Not ``disabled``, which would
// take the keyboard's focus away from the button.
function setMicBusy(busy) {
  mic.classList.toggle("busy", busy);
  mic.setAttribute("aria-disabled", busy ? "true" : "false");
}

function setRecording(on) {
  mic.classList.toggle("recording", on);
  mic.setAttribute("aria-pressed", on ? "true" : "false");
  const label = on ? "Stop recording and send the voice message" : "Record a voice message";
  mic.setAttribute("aria-label", label);
  mic.title = label;
}

async function startRecording() {
  const media = navigator.mediaDevices;
  if (!media || !media.getUserMedia || typeof MediaRecorder === "undefined") {
    notice("Voice messages need a microphone, which this browser does not offer this page (it needs HTTPS or localhost).", true);
    return;
  }
  setMicBusy(true); // until the browser (or the person) answers the microphone's question
  let stream;
  try {
    stream = await media.getUserMedia({ audio: true });
  } catch (error) {
    notice(micRefusal(error), true);
    return;
  } finally {
    setMicBusy(false);
  }
  const chosen = VOICE_TYPES.find(([type]) => MediaRecorder.isTypeSupported(type));
  let recorder;
  try {
    recorder = new MediaRecorder(stream, chosen ? { mimeType: chosen[0] } : undefined);
  } catch (error) {
    for (const track of stream.getTracks()) track.stop();
    notice("This browser cannot record a voice message.", true);
    return;
  }
  const recording = { recorder, stream, chunks: [], started: performance.now(), conversation: state.current, cancelled: false, timers: [] };
  state.recording = recording;
  recorder.ondataavailable = (event) => { if (event.data && event.data.size) recording.chunks.push(event.data); };
  recorder.onstop = () => recorded(recording);
  recorder.onerror = () => {
    recording.cancelled = true;
    stopRecording();
    notice("The recording failed; nothing was sent.", true);
  };
  recorder.start(1000);
  setRecording(true);
  const most = (state.limits || {}).max_voice_seconds;
  const tick = () => {
    const seconds = (performance.now() - recording.started) / 1000;
    const limit = most ? ` of ${minutes(most)}` : "";
    showRecording(`Recording ${minutes(seconds)}${limit} — the square sends it, Esc cancels`);
  };
  tick();
  recording.timers.push(setInterval(tick, 500));
  if (most) recording.timers.push(setTimeout(stopRecording, Math.max(1, most - 1) * 1000)); // at the limit: sent as it is
}

function stopRecording() {
  const recording = state.recording;
  if (!recording) return;
  state.recording = null;
  for (const timer of recording.timers) { clearInterval(timer); clearTimeout(timer); }
  recording.seconds = (performance.now() - recording.started) / 1000;
  setRecording(false);
  showRecording("");
  if (recording.recorder.state !== "inactive") recording.recorder.stop(); // then recorded()
  else recorded(recording);
  for (const track of recording.stream.getTracks()) track.stop();
}

function cancelRecording() {
  if (!state.recording) return;
  state.recording.cancelled = true;
  stopRecording();
}

async function recorded(recording) {
  if (recording.cancelled || recording.sent) return;
  recording.sent = true;
  const type = recording.recorder.mimeType || (recording.chunks[0] && recording.chunks[0].type) || "";
  const voice = new Blob(recording.chunks, { type });
  const name = `voice-message.${extensionOf(type)}`;
  const most = (state.limits || {}).max_voice_bytes;
  if (most && voice.size > most) {
    notice(`🎤 The voice message is too large to send (the limit is ${+(most / (1024 * 1024)).toFixed(1)} MB).`, true);
    return;
  }
  const conversation = recording.conversation;
  const ref = `voice-${++state.voices}`;
  setMicBusy(true);
  showRecording("Sending the voice message…", true);
  let uploaded;
  try {
    const seconds = Math.max(0, recording.seconds).toFixed(1);
    uploaded = await uploadFile(conversation, voice, name, `&voice=1&seconds=${seconds}`);
  } catch (error) {
    heardBack();
    notice(error.message, true);
    return;
  }
  if (state.current !== conversation) { heardBack(); return; } // switched meanwhile
  if (frameOut({ type: "message", text: "", attachments: [uploaded.id], ref })) {
    state.hearing = ref;
    showRecording("Transcribing…", true);
  } else {
    heardBack();
  }
}

// The voice message sent was answered (accepted, or refused with its sentence).
function heardBack() {
  state.hearing = null;
  setMicBusy(false);
  if (!state.recording) showRecording("");
}

mic.addEventListener("click", () => {
  if (mic.classList.contains("busy")) return;
  if (state.recording) stopRecording();
  else startRecording();
});

// A refused request is said, as for rename (until 2026-12-07 New and Delete said nothing:
// after a restart of the service, say, a click did nothing at all; found by review).
$("new").addEventListener("click", async () => {
  let conversation;
  try {
    conversation = await api("POST", "/chat/conversations", {});
  } catch (error) {
    notice(error.message, true);
    return;
  }
  state.conversations.unshift(conversation);
  $("sidebar").classList.remove("open");
  await select(conversation.id);
  input.focus();
});
$("rename").addEventListener("click", async () => {
  const current = state.conversations.find((c) => c.id === state.current);
  const title = prompt("Rename the conversation", current ? current.title : "");
  if (!title || !title.trim()) return;
  try {
    const renamed = await api("PATCH", `/chat/conversations/${state.current}`, { title });
    state.conversations = [renamed, ...state.conversations.filter((c) => c.id !== renamed.id)];
    renderSidebar();
  } catch (error) {
    notice(error.message, true);
  }
});
$("delete").addEventListener("click", async () => {
  if (!confirm("Delete this conversation? It disappears from the list.")) return;
  const deleted = state.current;
  try {
    await api("DELETE", `/chat/conversations/${deleted}`);
  } catch (error) {
    if (error.status !== 404) { // 404: deleted already (another tab); it goes here too
      notice(error.message, true);
      return;
    }
  }
  state.conversations = state.conversations.filter((c) => c.id !== deleted);
  try {
    if (state.conversations.length === 0) state.conversations = [await api("POST", "/chat/conversations", {})];
  } catch (error) {
    renderSidebar();
    notice(`The conversation was deleted, but a new one could not be started: ${error.message}`, true);
    return;
  }
  await select(state.conversations[0].id);
});
$("menu").addEventListener("click", () => $("sidebar").classList.toggle("open"));

(async () => {
  const back = returned();
  await loadConversations();
  const wanted = (location.hash.match(/^#c=(\d+)$/) || [])[1] || back.conversation;
  const start = state.conversations.find((c) => c.id === wanted) || state.conversations[0];
  if (typeof back.draft === "string" && back.draft && !input.value) input.value = back.draft;
  await select(start.id);
  input.focus();
})();
