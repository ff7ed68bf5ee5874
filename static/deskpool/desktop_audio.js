// The drawer's Sound: the desktop's sound through the portal's audio relay
// (portal/live/desktop_audio_relay.py). Browsers play sound only after a press on the page,
// so nothing is fetched or played until the person presses the button; pressing it again
// stops and closes the stream.
//
// The relay sends the format first ({"rate", "channels", "format": "s16le"}), then raw
// little-endian 16-bit PCM. Each message becomes an AudioBuffer queued right after the one
// before, a little ahead of now; a queue that ran dry (the desktop was silent: it sends
// nothing then) or ran too far ahead starts again just ahead of now. The level meter shows
// the loudest sample heard lately, so a person can tell "no sound is coming" from "my
// device is muted".
const AHEAD_S = 0.08; // a new run of sound starts this far ahead of now
const MAX_AHEAD_S = 0.6; // more queued than this: drop the queue's lead, keep it live
const METER_FALL = 0.85; // the meter's fall per message without louder sound
const RETRY_MAX_MS = 10000;
// The relay's close codes after which trying again cannot help: signed out, no longer
// allowed, this desktop has no sound.
const FINAL_CLOSES = { 4401: "signed_out", 4403: "forbidden", 4404: "sound_none" };

export function setUpAudio({ button, meter, note, url, words, canRetry }) {
  let context = null;
  let socket = null;
  let on = false;
  let format = null;
  let rest = new Uint8Array(0); // a message's bytes past its last whole frame
  let next = 0; // when the next buffer starts, in the context's time
  let level = 0;
  let retryDelay = 1000;
  let retryTimer = null;
  const queued = new Set(); // buffers scheduled and not yet played: stopped with the sound

  function show(text) {
    note.textContent = text;
  }

  function setOn(playing) {
    on = playing;
    button.setAttribute("aria-pressed", String(playing));
    button.textContent = playing ? words.sound_stop : words.sound_play;
  }

  function frames(data) {
    const bytes = new Uint8Array(rest.length + data.byteLength);
    bytes.set(rest, 0);
    bytes.set(new Uint8Array(data), rest.length);
    const frameBytes = 2 * format.channels;
    const whole = bytes.length - (bytes.length % frameBytes);
    rest = bytes.slice(whole);
    return new DataView(bytes.buffer, 0, whole);
  }

  function play(data) {
    const view = frames(data);
    const count = view.byteLength / (2 * format.channels);
    if (!count) return;
    const buffer = context.createBuffer(format.channels, count, format.rate);
    let peak = 0;
    for (let channel = 0; channel < format.channels; channel++) {
      const out = buffer.getChannelData(channel);
      for (let i = 0; i < count; i++) {
        const sample = view.getInt16((i * format.channels + channel) * 2, true) / 32768;
        out[i] = sample;
        peak = Math.max(peak, Math.abs(sample));
      }
    }
    level = Math.max(peak, level * METER_FALL);
    meter.value = level;
    const now = context.currentTime;
    if (next < now || next > now + MAX_AHEAD_S) next = now + AHEAD_S;
    const source = context.createBufferSource();
    source.buffer = buffer;
    source.connect(context.destination);
    source.addEventListener("ended", () => queued.delete(source));
    queued.add(source);
    source.start(next);
    next += buffer.duration;
  }

  function connect() {
    retryTimer = null;
    format = null;
    rest = new Uint8Array(0);
    socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    const mine = socket;
    show(words.sound_connecting);
    socket.addEventListener("message", (event) => {
      if (typeof event.data === "string") {
        format = JSON.parse(event.data);
        retryDelay = 1000;
        show(words.sound_playing);
      } else if (format) {
        play(event.data);
      }
    });
    socket.addEventListener("close", (event) => {
      if (socket !== mine) return; // closed by the page itself
      socket = null;
      meter.value = level = 0;
      if (!on) return;
      if (event.code in FINAL_CLOSES || !canRetry()) {
        setOn(false);
        show(words[FINAL_CLOSES[event.code]] || words.sound_ended);
        return;
      }
      show(words.sound_retrying);
      retryTimer = setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, RETRY_MAX_MS);
    });
  }

  function stop() {
    setOn(false);
    clearTimeout(retryTimer);
    const closing = socket;
    socket = null;
    closing?.close();
    // What was queued must not play when the sound is turned on again.
    for (const source of queued) source.stop();
    queued.clear();
    next = 0;
    context?.suspend();
    meter.value = level = 0;
    show(words.sound_off);
  }

  button.addEventListener("click", () => {
    if (on) {
      stop();
      return;
    }
    // Made and resumed inside the press: a browser lets a page play sound from then on.
    const Player = window.AudioContext || window.webkitAudioContext;
    if (!Player) {
      show(words.sound_unsupported);
      return;
    }
    context = context || new Player();
    context.resume();
    setOn(true);
    connect();
  });
  setOn(false);
  return { stop };
}
