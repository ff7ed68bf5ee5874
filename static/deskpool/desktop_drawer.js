// The desktop page's side drawer ("Controls"): the time left and the end time (in the
// reader's zone), Extend (disabled, with the reason, once the profile allows no more), Stop
// (asked in the page first, then where the session stands), full screen and the clipboard
// (desktop.js). Escape or Close closes it and gives the focus back to its button.
import { clock, extendRefusal, hhmm, say } from "./desktop_time.js";

const $ = (id) => document.getElementById(id);

// current(): the session as last heard of; update(session): the API's answer replaces it;
// extend(): the banner's Extend too, resolving to the words that answer it.
export function setUpDrawer({ config, words, current, update, extend }) {
  const drawer = $("drawer");
  const toggle = $("drawer-toggle");
  const left = $("drawer-left");
  const ends = $("drawer-ends");
  const extendButton = $("drawer-extend");
  const why = $("drawer-extend-why");
  const extendAnswer = $("drawer-extend-answer");
  const stopButton = $("drawer-stop");
  const ask = $("stop-confirm");
  const stopAnswer = $("stop-answer");
  const where = $("drawer-state");
  const openable = new Set(config.openable);
  const unstoppable = new Set(config.unstoppable);
  let extending = false;
  let stopping = false;

  function setOpen(open) {
    drawer.hidden = !open;
    toggle.setAttribute("aria-expanded", String(open));
    if (open) {
      show(new Date());
      $("drawer-close").focus();
    } else {
      toggle.focus();
    }
  }
  toggle.addEventListener("click", () => setOpen(drawer.hidden));
  $("drawer-close").addEventListener("click", () => setOpen(false));
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || drawer.hidden) return;
    if (!ask.hidden) {
      askToStop(false); // Escape answers the question first ("keep it running")
    } else {
      setOpen(false);
    }
    event.preventDefault();
  });

  function show(now) {
    const session = current();
    const running = openable.has(session.state);
    const endsAt = session.ends_at ? new Date(session.ends_at) : null;
    if (running && endsAt) {
      left.textContent = say(words.time_left, { time: clock((endsAt - now) / 1000) });
      ends.textContent = say(words.ends_at, { time: hhmm(session.ends_at, config.time_zone) });
    } else {
      left.textContent = running ? words.no_limit : "";
      ends.textContent = "";
    }
    const refusal = extendRefusal(session, config, words);
    extendButton.disabled = extending || refusal !== null;
    why.textContent = refusal || "";
    const stoppable = !stopping && !unstoppable.has(session.state);
    stopButton.disabled = !stoppable;
    if (!stoppable && !ask.hidden) askToStop(false);
    where.textContent = say(words.state, { state: config.states[session.state] || "" });
  }

  extendButton.addEventListener("click", async () => {
    extending = true;
    show(new Date());
    extendAnswer.textContent = await extend();
    extending = false;
    show(new Date());
  });

  // Stop asks in the page (not the browser's dialog): the question, then Stop or Keep.
  function askToStop(asking) {
    ask.hidden = !asking;
    stopButton.hidden = asking;
    if (asking) $("stop-no").focus();
    else if (!stopButton.disabled) stopButton.focus();
  }
  stopButton.addEventListener("click", () => askToStop(true));
  $("stop-no").addEventListener("click", () => askToStop(false));
  $("stop-yes").addEventListener("click", async () => {
    stopping = true;
    show(new Date()); // Stop disabled, the question gone
    where.focus(); // where it stands (tabindex -1), now and once the answer comes
    stopAnswer.textContent = "";
    try {
      const reply = await fetch(config.stop_api, {
        method: "POST",
        credentials: "same-origin",
        headers: { "X-CSRFToken": config.csrf_token, Accept: "application/json" },
      });
      const body = await reply.json().catch(() => ({}));
      if (reply.ok && body.id === current().id) {
        update(body); // STOPPING, then ENDED live
      } else {
        stopAnswer.textContent = body.detail || words.stop_failed;
        stopping = false;
      }
    } catch {
      stopAnswer.textContent = words.stop_failed; // the network
      stopping = false;
    }
    show(new Date());
  });

  return { show };
}
