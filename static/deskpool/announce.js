// The pages' one way to tell a screen reader about a live change (issue 38): a polite live
// region (#announcer, made here at load, out of sight, inside <main> so that it sits in a
// landmark), written at most once every QUIET_MS. A change inside that quiet time waits for
// its end, and only the newest waiting one is said then (a burst of queue positions becomes
// one sentence). `{ now: true }` is for the moments that must not wait: a desktop becoming
// ready, a preemption's first warning; it also drops what was waiting.
const QUIET_MS = 30000;

const region = document.createElement("p");
region.id = "announcer";
region.className = "visually-hidden";
region.setAttribute("aria-live", "polite");
region.setAttribute("aria-atomic", "true");
(document.querySelector("main") || document.body).append(region);

let lastSaid = -Infinity;
let waiting = null;

function write(text) {
  waiting = null;
  lastSaid = Date.now();
  region.textContent = text;
}

export function announce(text, { now = false } = {}) {
  if (!text) return;
  clearTimeout(waiting);
  waiting = null;
  const wait = lastSaid + QUIET_MS - Date.now();
  if (now || wait <= 0) {
    write(text);
  } else {
    waiting = setTimeout(() => write(text), wait);
  }
}
