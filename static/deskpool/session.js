// Live sessions on the home and session pages. Every session on the page is the server's one
// rendering of it (templates/portal/_session.html); a live update carries that fragment,
// rendered in this reader's language and time zone, and this script only swaps it in.
// The socket is the pages' one reconnecting socket (live_socket.js), its path and close codes
// the server's (#live-wire). What changed in a card (its state, queue position, reason,
// estimated start: the parts marked data-announce) is told through the page's polite,
// throttled announcer (announce.js); a desktop becoming ready is told at once.
import { announce } from "./announce.js";
import { liveUpdates, readWire, updatesPath } from "./live_socket.js";

(function () {
  "use strict";
  const configNode = document.getElementById("page-config");
  if (!configNode) return;
  const config = JSON.parse(configNode.textContent);
  const live = document.getElementById("live");
  const list = document.getElementById("session-list");
  const empty = document.getElementById("no-sessions");

  const cards = () => document.querySelectorAll(".session-card");
  const cardOf = (id) => document.querySelector('.session-card[data-session-id="' + id + '"]');

  function parse(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    const node = template.content.firstElementChild;
    // Rendered outside a request, the fragment's forms carry no CSRF token: use the page's.
    node.querySelectorAll('input[name="csrfmiddlewaretoken"]').forEach((input) => {
      if (!input.value) input.value = config.csrf_token;
    });
    return node;
  }

  // What a screen reader is told of a card: its marked parts, in the reader's language.
  function summary(card) {
    return Array.from(card.querySelectorAll("[data-announce]"))
      .map((node) => node.textContent.replace(/\s+/g, " ").trim())
      .filter(Boolean)
      .join(" — ");
  }

  // A change worth telling: the card's marked parts changed; the moment its desktop can be
  // opened (data-ready, the sentence saying so) is told at once.
  function tell(old, fresh) {
    const ready = fresh.dataset.ready && !(old && old.dataset.ready);
    if (ready) {
      announce(fresh.dataset.ready + " — " + summary(fresh), { now: true });
    } else if (!old || summary(old) !== summary(fresh)) {
      announce(summary(fresh));
    }
  }

  // Keyboard focus inside a replaced card moves to the same control in the new one.
  function keepFocus(old, fresh) {
    const focused = document.activeElement;
    if (!focused || !old.contains(focused)) return null;
    const same = Array.from(fresh.querySelectorAll(focused.tagName)).find(
      (node) => node.textContent.trim() === focused.textContent.trim()
    );
    if (same) return same;
    fresh.tabIndex = -1;
    return fresh;
  }

  function apply(update) {
    const old = cardOf(update.id);
    const variant = old ? old.dataset.variant : list ? "item" : null;
    if (!variant) return;
    const fresh = parse(variant === "detail" ? update.html : update.html_item);
    tell(old, fresh);
    if (old) {
      const focus = keepFocus(old, fresh);
      old.replaceWith(fresh);
      if (focus) focus.focus();
    } else {
      list.append(fresh);
      if (empty) empty.hidden = true;
    }
    tick();
  }

  // The grace countdown of a preempted desktop.
  function tick() {
    document.querySelectorAll("[data-deadline]").forEach((line) => {
      const left = Math.max(0, Math.round((new Date(line.dataset.deadline) - Date.now()) / 1000));
      const out = line.querySelector("[data-countdown]");
      if (out) out.textContent = Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0");
    });
    // Time left before each desktop's limit, in whole minutes rounded up (as the server wrote
    // it, in the reader's language: the page's words).
    document.querySelectorAll("[data-ends-at]").forEach((out) => {
      const ms = new Date(out.dataset.endsAt) - Date.now();
      const minutes = Math.max(0, Math.ceil(ms / 60000));
      const h = Math.floor(minutes / 60);
      const text = h ? config.words.left_hm : config.words.left_m;
      if (text) out.textContent = text.replace("%(h)s", h).replace("%(m)s", minutes % 60);
    });
  }
  setInterval(tick, 1000);
  tick();

  // After a dropped socket (its ASGI worker was restarted, a network blip, a handshake
  // nginx or the worker dropped) connect again: the wait doubles from 0.5 s up to 10 s and
  // each wait is jittered (between half of it and all of it), so that the pages a killed
  // worker dropped do not all come back at the same instant. An opened socket starts over.
  // Signed out (the wire's final closes), the page stops trying and says so.
  // Each attempt names the cards the page shows now: the socket first sends each of them as
  // it is (what changed before it opened, or while it was down), then every change.
  liveUpdates({
    path: () => {
      const shown = Array.from(cards(), (card) => card.dataset.sessionId);
      return updatesPath(readWire(), config.fragment, shown);
    },
    live() {
      if (live) live.textContent = config.words.live;
    },
    message(msg) {
      if (msg.type === "session.update" && (msg.html || msg.html_item)) {
        apply({ id: msg.session.id, html: msg.html, html_item: msg.html_item });
      }
    },
    closed(why) {
      if (!live) return;
      live.textContent = why.final ? config.words.stopped : config.words.reconnecting;
    },
  });
})();
