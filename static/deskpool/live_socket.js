// One reconnecting socket for every page (issue 34, item 6): the desktop's screen and sound
// through the node's gateway (ticketed), and the portal's live updates.
//
// liveSocket({ wire, open, opened, closed, ... }) asks open() for a WebSocket, hands it to
// opened(), and when it closes says why to closed(why) and tries again after a backoff with
// jitter, until a close or a refusal is final (signed out, forbidden, the desktop has ended...,
// the codes the page reads from the server: #live-wire, nodeagent/gateway/codes.py), until
// canRetry() says the desktop can no longer be opened, or after maxTries failures in a row.
// With answerWithinMs, a try that is not settled() within that time (the socket never opened,
// or opened and stayed silent) is closed and counts as a failure with reason "timeout".
//
// why = { reason, code, final, detail, retryIn }: reason is a close code's name
// (wire.close_codes), "unclean" (the connection broke), "closed" (a close with a code the wire
// does not name), "timeout" (no answer within answerWithinMs), "gave_up", "ended" (canRetry()
// said no), or the ticket's refusal
// ("signed_out", "forbidden", "not_found", "not_running", "portal_unreachable"); detail is
// the portal's own sentence, in the reader's language, where it gave one; retryIn is the wait
// in ms before the next try, or null once the socket stopped for good.

// The wire the server rendered into the page ({{ live_wire|json_script:"live-wire" }}).
export function readWire(id = "live-wire") {
  return JSON.parse(document.getElementById(id).textContent);
}

const scheme = () => (location.protocol === "https:" ? "wss://" : "ws://");

// The portal's live updates (wire.updates_path), for the session card's form a page shows
// (?fragment=, portal/kit/session_fragment.py), or for every form when none is named; with
// the ids of the session cards the page shows (?sessions=, at most wire.catch_up_max), the
// socket first sends each of them as it is now: the page catches up on what it missed before
// the socket opened, or while it was down, without a request of its own.
export function updatesPath(wire, fragment = null, sessions = []) {
  const asked = [];
  if (fragment) asked.push("fragment=" + encodeURIComponent(fragment));
  const ids = sessions.slice(0, wire.catch_up_max).map(encodeURIComponent);
  if (ids.length) asked.push("sessions=" + ids.join(","));
  return asked.length ? wire.updates_path + "?" + asked.join("&") : wire.updates_path;
}

// A course's live class (wire.course_path).
export function coursePath(wire, code) {
  return wire.course_path.replace("{code}", encodeURIComponent(code));
}

// A path on this origin (the portal's sockets, or a gateway behind the portal's nginx) as a
// socket URL; a full ws:// or wss:// URL stays as it is.
export function socketUrl(url) {
  return url.startsWith("/") ? scheme() + location.host + url : url;
}

// Why a socket or a ticket was refused, for closed(); thrown by an open() callback.
export class Refusal extends Error {
  constructor(reason, { final = false, detail = null, code = null } = {}) {
    super(reason);
    this.reason = reason;
    this.final = final;
    this.detail = detail;
    this.code = code;
  }
}

// An open() for one of the portal's own sockets at a path of the wire (the live updates, a
// course's class): no ticket, the login session's cookie says who asks. ``path``: the path, or
// a function asked for it at each attempt (a page's cards change between two attempts).
export function pathOpener(path) {
  return async () => new WebSocket(socketUrl(typeof path === "function" ? path() : path));
}

// The ticket endpoint's answers that end the socket for good (the rest are tried again).
const FINAL_ANSWERS = { 401: "signed_out", 403: "forbidden", 404: "not_found" };
const ANSWERS = { ...FINAL_ANSWERS, 409: "not_running" };

// An open() for a gateway socket: asks the portal for a new single-use ticket, opens the
// socket the answer names, sends the ticket as its first message, and resolves with the socket
// once that is sent. The gateway says nothing before it has read the ticket, and the caller's
// opened() runs in the same task as the open event (only microtasks between), so noVNC or the
// player has its handlers in place before any message of the desktop can arrive.
export function ticketOpener({ api, purpose, csrf }) {
  return async function open() {
    let answer;
    let body = {};
    try {
      answer = await fetch(api, {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "Content-Type": "application/json",
          Accept: "application/json",
          "X-CSRFToken": csrf,
        },
        body: JSON.stringify({ purpose }),
      });
      body = await answer.json().catch(() => ({}));
    } catch {
      throw new Refusal("portal_unreachable"); // the network: try again
    }
    if (answer.status !== 201 || !body.ticket || !body.url) {
      const reason = ANSWERS[answer.status] || "portal_unreachable";
      throw new Refusal(reason, {
        final: answer.status in FINAL_ANSWERS,
        detail: typeof body.detail === "string" ? body.detail : null,
      });
    }
    return await new Promise((resolve, reject) => {
      const socket = new WebSocket(socketUrl(body.url));
      socket.binaryType = "arraybuffer";
      // Closed before it opened: the gateway could not be reached (or refused the handshake).
      const failed = (event) => {
        socket.removeEventListener("open", opened);
        reject(new Refusal("unclean", { code: event.code }));
      };
      const opened = () => {
        socket.removeEventListener("close", failed);
        socket.send(body.ticket);
        resolve(socket);
      };
      socket.addEventListener("open", opened, { once: true });
      socket.addEventListener("close", failed, { once: true });
    });
  };
}

// A close event as a refusal: its code's name in the wire, final or not.
function refusalOf(event, closeCodes, final = []) {
  const name = Object.keys(closeCodes).find((key) => closeCodes[key] === event.code);
  if (name) return new Refusal(name, { final: final.includes(name), code: event.code });
  return new Refusal(event.wasClean ? "closed" : "unclean", { code: event.code });
}

// Equal jitter: between half the delay and the whole of it, so that a class whose sockets
// all broke at once does not come back in step.
function jittered(delay, random) {
  return Math.round(delay / 2 + (random() * delay) / 2);
}

export function liveSocket({
  wire,
  open,
  opened,
  closed = () => {},
  canRetry = async () => true,
  firstDelayMs = 1000,
  maxDelayMs = 30000,
  maxTries = 8,
  answerWithinMs = null,
  random = Math.random,
}) {
  const closeCodes = wire.close_codes;
  let stopped = false;
  let current = null;
  let timer = null;
  let delay = firstDelayMs;
  let failures = 0;
  let tryNumber = 0; // the try under way; a try given up on (timed out) is left behind
  let watchdog = null;

  // The try did not settle in time: drop it (a late socket is closed) and count a failure.
  function timedOut(mine) {
    watchdog = null;
    if (stopped || mine !== tryNumber) return;
    tryNumber += 1;
    const late = current;
    current = null;
    late?.close();
    ended(new Refusal("timeout"));
  }

  async function attempt() {
    timer = null;
    tryNumber += 1;
    const mine = tryNumber;
    clearTimeout(watchdog);
    if (answerWithinMs) watchdog = setTimeout(() => timedOut(mine), answerWithinMs);
    let socket;
    try {
      socket = await open();
    } catch (error) {
      if (stopped || mine !== tryNumber) return;
      await ended(error instanceof Refusal ? error : new Refusal("unclean"));
      return;
    }
    if (stopped || mine !== tryNumber) {
      socket.close();
      return;
    }
    current = socket;
    // A listener, not onclose: noVNC sets the socket's onclose itself.
    socket.addEventListener("close", (event) => {
      if (socket !== current) return; // closed by the page (stop()) or already replaced
      current = null;
      if (!stopped) ended(refusalOf(event, closeCodes, wire.final));
    });
    opened(socket);
  }

  async function ended(refusal) {
    clearTimeout(watchdog);
    watchdog = null;
    const why = {
      reason: refusal.reason,
      code: refusal.code,
      final: refusal.final,
      detail: refusal.detail,
      retryIn: null,
    };
    if (!why.final) {
      failures += 1;
      if (failures > maxTries) {
        why.reason = "gave_up";
        why.final = true;
      } else if (!(await canRetry())) {
        why.reason = "ended";
        why.final = true;
      }
    }
    if (stopped) return;
    if (why.final) {
      stopped = true;
      closed(why);
      return;
    }
    why.retryIn = jittered(delay, random);
    delay = Math.min(delay * 2, maxDelayMs);
    closed(why);
    timer = setTimeout(attempt, why.retryIn);
  }

  attempt();
  return {
    // The socket is doing its job (noVNC connected, the sound's format came, an update
    // socket opened): the next failure starts the backoff from the beginning again.
    settled() {
      clearTimeout(watchdog);
      watchdog = null;
      failures = 0;
      delay = firstDelayMs;
    },
    // The page closes it: no more tries, no more callbacks.
    stop() {
      stopped = true;
      clearTimeout(timer);
      clearTimeout(watchdog);
      const closing = current;
      current = null;
      closing?.close();
    },
    get socket() {
      return current;
    },
  };
}

// The portal's live updates, or a course's class, for a page: each message (JSON) to
// message(msg), live() once the socket is open (the page says it is live, catches up on what
// it missed), closed(why) when it drops (why.final: signed out or forbidden, no more tries;
// else it is tried again, the wait doubling from 0.5 s up to 10 s, jittered).
export function liveUpdates({
  path,
  message,
  live = () => {},
  closed = () => {},
  wire = readWire(),
}) {
  const updates = liveSocket({
    wire,
    open: pathOpener(path),
    opened(socket) {
      socket.addEventListener("open", () => {
        updates.settled();
        live();
      });
      socket.addEventListener("message", (event) => message(JSON.parse(event.data)));
    },
    closed,
    firstDelayMs: 500,
    maxDelayMs: 10000,
    maxTries: Infinity,
  });
  return updates;
}
