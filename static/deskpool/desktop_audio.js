// The drawer's Sound: the desktop's sound through the gateway on its node, opened with a
// single-use ticket from the portal (live_socket.js; a new ticket for every try). Browsers
// play sound only after a press on the page, so nothing is fetched or played until the person
// presses the button; pressing it again stops and closes the stream.
//
// The gateway sends the format first ({"format": "opus" | "s16le", "rate", "channels"}),
// then the sound: one Opus packet of 20 ms per message, decoded with WebCodecs' AudioDecoder
// (each packet an EncodedAudioChunk, its timestamp 20 ms after the one before), or, from a
// desktop image built before Opus, raw little-endian 16-bit PCM. Each decoded piece becomes
// an AudioBuffer queued right after the one before, a little ahead of now; a queue that ran
// dry (the desktop was silent: it sends nothing then) or ran too far ahead starts again just
// ahead of now. The level meter shows the loudest sample heard lately, so a person can tell
// "no sound is coming" from "my device is muted".
import { liveSocket, ticketOpener } from "./live_socket.js";

const AHEAD_S = 0.08; // a new run of sound starts this far ahead of now
const MAX_AHEAD_S = 0.6; // more queued than this: drop the queue's lead, keep it live
const METER_FALL = 0.85; // the meter's fall per message without louder sound
const RETRY_MAX_MS = 10000;
const OPUS_PACKET_US = 20000; // what each of the desktop's Opus packets holds
// Why the sound stopped for good, as the page's words name it (the rest say sound_ended).
const FINAL_WORDS = {
  signed_out: "signed_out",
  forbidden: "forbidden",
  not_found: "sound_none",
  sound_none: "sound_none",
  gave_up: "sound_gave_up",
  ticket_invalid: "ticket_refused",
  ticket_foreign: "ticket_refused",
  too_large: "too_large",
};

// ticket: what ticketOpener() needs ({ api, csrf }); wire: the page's #live-wire.
export function setUpAudio({ button, meter, note, ticket, wire, words, canRetry }) {
  let context = null;
  let live = null; // the reconnecting socket while the sound is on
  let on = false;
  let format = null;
  let rest = new Uint8Array(0); // a message's bytes past its last whole frame
  let decoder = null; // WebCodecs' AudioDecoder, while an Opus stream is open
  let timestamp = 0; // the next Opus packet's, in microseconds
  let next = 0; // when the next buffer starts, in the context's time
  let level = 0;
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

  function playPcm(data) {
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
    schedule(buffer, peak);
  }

  // One decoded piece of the Opus stream, as planar floats, into the queue.
  function playDecoded(decoded) {
    const count = decoded.numberOfFrames;
    const channels = decoded.numberOfChannels;
    if (!count || !context) {
      decoded.close();
      return;
    }
    const buffer = context.createBuffer(channels, count, decoded.sampleRate);
    let peak = 0;
    for (let channel = 0; channel < channels; channel++) {
      const out = new Float32Array(count);
      decoded.copyTo(out, { planeIndex: channel, format: "f32-planar" });
      for (let i = 0; i < count; i++) peak = Math.max(peak, Math.abs(out[i]));
      buffer.copyToChannel(out, channel);
    }
    decoded.close();
    schedule(buffer, peak);
  }

  function openDecoder() {
    closeDecoder();
    timestamp = 0;
    decoder = new AudioDecoder({
      output: playDecoded,
      // A packet the decoder refuses ends this stream; the socket's retry opens a new one.
      error: () => live?.socket?.close(),
    });
    decoder.configure({
      codec: "opus",
      sampleRate: format.rate,
      numberOfChannels: format.channels,
    });
  }

  function closeDecoder() {
    if (decoder && decoder.state !== "closed") decoder.close();
    decoder = null;
  }

  function playOpus(data) {
    if (!decoder || decoder.state !== "configured") return;
    decoder.decode(
      new EncodedAudioChunk({ type: "key", timestamp, data: new Uint8Array(data) }),
    );
    timestamp += OPUS_PACKET_US;
  }

  function schedule(buffer, peak) {
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

  function listen(socket) {
    format = null;
    rest = new Uint8Array(0);
    closeDecoder();
    socket.addEventListener("message", (event) => {
      if (typeof event.data === "string") {
        format = JSON.parse(event.data);
        if (format.format === "opus") {
          if (!window.AudioDecoder) {
            // Retrying cannot help: say so and stop for good.
            stop();
            show(words.sound_no_decoder);
            return;
          }
          openDecoder();
        }
        live?.settled();
        show(words.sound_playing);
      } else if (format?.format === "opus") {
        playOpus(event.data);
      } else if (format) {
        playPcm(event.data);
      }
    });
  }

  function closed(why) {
    closeDecoder();
    meter.value = level = 0;
    if (why.retryIn !== null) {
      show(words.sound_retrying);
      return;
    }
    live = null;
    setOn(false);
    show(why.detail || words[FINAL_WORDS[why.reason]] || words.sound_ended);
  }

  function connect() {
    show(words.sound_connecting);
    live = liveSocket({
      wire,
      open: ticketOpener({ ...ticket, purpose: "sound" }),
      opened: listen,
      closed,
      canRetry,
      maxDelayMs: RETRY_MAX_MS,
    });
  }

  function stop() {
    setOn(false);
    live?.stop();
    live = null;
    closeDecoder();
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
