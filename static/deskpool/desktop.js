// The desktop page: noVNC connected through the portal's authenticated WebSocket proxy.
import RFB from "../vendor/novnc/core/rfb.js";

const screen = document.getElementById("screen");
const status = document.getElementById("desktop-status");
const scheme = location.protocol === "https:" ? "wss://" : "ws://";
const url = scheme + location.host + "/ws/desktop/" + screen.dataset.sessionId + "/";

const rfb = new RFB(screen, url, { credentials: { password: screen.dataset.password } });
rfb.scaleViewport = true;
// The words come from the page (data-text-*), in the reader's language.
const text = screen.dataset;
rfb.addEventListener("connect", () => { status.textContent = text.textConnected; });
rfb.addEventListener("disconnect", (e) => {
  status.textContent = e.detail.clean ? text.textDisconnected : text.textLost;
});
rfb.addEventListener("securityfailure", () => {
  status.textContent = text.textRefused;
});
window.deskpoolRfb = rfb;
