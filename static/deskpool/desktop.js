// The desktop page: noVNC through the portal's authenticated WebSocket proxy, full screen,
// the clipboard both ways, reconnection after a network blip, the session's timer and live
// banners (preemption grace, the time limit coming). Addresses and words come from the page
// (#page-config, in the reader's language).
import RFB from "../vendor/novnc/core/rfb.js";

const config = JSON.parse(document.getElementById("page-config").textContent);
const words = config.words;
const $ = (id) => document.getElementById(id);
const screen = $("screen");
const status = $("desktop-status");
const scheme = location.protocol === "https:" ? "wss://" : "ws://";
const openable = new Set(config.openable);
let session = config.session;

const say = (template, values) =>
  template.replace(/%\((\w+)\)s/g, (_, key) => String(values[key]));
const clock = (seconds) => {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const mmss = String(m).padStart(h ? 2 : 1, "0") + ":" + String(s % 60).padStart(2, "0");
  return h ? h + ":" + mmss : mmss;
};

// --- noVNC, with reconnection while the session can still be opened -----------------------
let rfb = null;
let retryDelay = 1000;
let refused = false; // the relay refused the handshake: trying again will not help

function connect() {
  // No credentials: the portal's relay logs in to the desktop itself and offers this page
  // security type None, so the desktop's password never reaches the browser.
  rfb = new RFB(screen, scheme + location.host + config.proxy_url);
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => {
    retryDelay = 1000;
    status.textContent = words.connected;
  });
  // The page never closes the connection itself, so every disconnect is unexpected (noVNC
  // calls a close by the server "clean"): try again while the session can still be opened.
  rfb.addEventListener("disconnect", () => {
    if (refused) return;
    status.textContent = words.disconnected;
    retry();
  });
  rfb.addEventListener("securityfailure", () => {
    refused = true;
    status.textContent = words.refused;
  });
  rfb.addEventListener("clipboard", (e) => fromDesktop(e.detail.text));
  window.deskpoolRfb = rfb;
}

async function stillOpenable() {
  try {
    const answer = await fetch(config.session_api, { credentials: "same-origin" });
    if (!answer.ok) return false;
    session = await answer.json();
    showTime();
    return openable.has(session.state);
  } catch {
    return true; // the network itself is down: keep trying
  }
}

function retry() {
  const seconds = Math.round(retryDelay / 1000);
  status.textContent = say(words.retrying, { seconds });
  setTimeout(async () => {
    if (await stillOpenable()) {
      connect();
    } else {
      status.textContent = words.ended;
    }
  }, retryDelay);
  retryDelay = Math.min(retryDelay * 2, 30000);
}

connect();

// --- full screen ---------------------------------------------------------------------------
$("fullscreen").addEventListener("click", () => {
  if (document.fullscreenElement) document.exitFullscreen();
  else screen.requestFullscreen?.().catch(() => {});
});

// --- clipboard both ways -------------------------------------------------------------------
const panel = $("clipboard-panel");
const toggle = $("clipboard-toggle");
const text = $("clipboard-text");
const note = $("clipboard-note");
toggle.addEventListener("click", () => {
  panel.hidden = !panel.hidden;
  toggle.setAttribute("aria-expanded", String(!panel.hidden));
  if (!panel.hidden) text.focus();
});

function fromDesktop(value) {
  text.value = value;
  note.textContent = words.copied;
  // Where the browser allows it (a secure page, focus), the system clipboard gets it too.
  navigator.clipboard?.writeText(value).catch(() => {});
}

$("clipboard-send").addEventListener("click", () => {
  if (!rfb) return;
  rfb.clipboardPasteFrom(text.value);
  note.textContent = words.sent;
});

// --- the session's timer and banners -------------------------------------------------------
const timer = $("session-timer");
const banner = $("desktop-banner");
const WARN_MINUTES = [15, 5];

function showTime() {
  const now = Date.now();
  const endsAt = session.ends_at ? new Date(session.ends_at) : null;
  timer.hidden = !endsAt;
  if (endsAt) timer.textContent = say(words.time_left, { time: clock((endsAt - now) / 1000) });
  let message = "";
  if (session.state === "PREEMPTING" && session.preempt_deadline) {
    const left = (new Date(session.preempt_deadline) - now) / 60000;
    message = say(words.preempting, { minutes: Math.max(1, Math.ceil(left)) });
  } else if (endsAt) {
    const minutes = (endsAt - now) / 60000;
    const warn = WARN_MINUTES.filter((m) => minutes <= m).pop();
    if (warn !== undefined && minutes > 0) message = say(words.limit_soon, { minutes: warn });
  }
  // The banner is an alert: its text changes only when the message does (minutes, not
  // seconds), so a screen reader is not interrupted every second.
  if (message !== banner.textContent) banner.textContent = message;
  banner.hidden = !message;
}
setInterval(showTime, 1000);
showTime();

// Live updates for this session: its state, grace deadline and time limit.
let liveDelay = 500;
function listen() {
  const ws = new WebSocket(scheme + location.host + config.updates_url);
  ws.onopen = () => {
    liveDelay = 500;
  };
  ws.onmessage = (event) => {
    const msg = JSON.parse(event.data);
    if (msg.type === "session.update" && msg.session.id === session.id) {
      session = msg.session;
      showTime();
      if (!openable.has(session.state)) status.textContent = words.ended;
    }
  };
  ws.onclose = () => {
    setTimeout(listen, liveDelay);
    liveDelay = Math.min(liveDelay * 2, 10000);
  };
}
listen();
