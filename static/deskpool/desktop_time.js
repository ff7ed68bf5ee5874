// The desktop page's times, shared by its banner (desktop.js) and its drawer
// (desktop_drawer.js): a countdown, a clock time in the reader's zone, the words' %(name)s
// placeholders, and whether the profile lets the session be extended once more.

export const say = (template, values) =>
  template.replace(/%\((\w+)\)s/g, (_, key) => String(values[key]));

// Seconds as H:MM:SS (M:SS under an hour).
export const clock = (seconds) => {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const mmss = String(m).padStart(h ? 2 : 1, "0") + ":" + String(s % 60).padStart(2, "0");
  return h ? h + ":" + mmss : mmss;
};

// HH:MM in the reader's zone (the page's config.time_zone) and language.
export function hhmm(iso, zone) {
  const options = { hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
  const lang = document.documentElement.lang || undefined;
  try {
    return new Intl.DateTimeFormat(lang, { ...options, timeZone: zone }).format(new Date(iso));
  } catch {
    return new Intl.DateTimeFormat(lang, options).format(new Date(iso)); // an unknown zone
  }
}

// Why one more extension is refused before asking (null: it may be asked for): the session
// must be running, and its limit no later than the profile's last one that a step fits
// (scheduling.services.extend.profile_room, in the page's config). The other reasons
// (someone waiting, the quota) come from the server's answer.
export function extendRefusal(session, config, words) {
  if (session.state !== "RUNNING" || !session.ends_at) return words.not_running;
  if (!config.extend_last_end) return config.extend_refusal;
  if (new Date(session.ends_at) > new Date(config.extend_last_end)) return config.extend_refusal;
  return null;
}
