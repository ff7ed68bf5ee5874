// The desktop page: noVNC connected through the portal's authenticated WebSocket proxy.
import RFB from "../vendor/novnc/core/rfb.js";

const screen = document.getElementById("screen");
const status = document.getElementById("desktop-status");
const scheme = location.protocol === "https:" ? "wss://" : "ws://";
const url = scheme + location.host + "/ws/desktop/" + screen.dataset.sessionId + "/";

const rfb = new RFB(screen, url, { credentials: { password: screen.dataset.password } });
rfb.scaleViewport = true;
rfb.addEventListener("connect", () => { status.textContent = "connected"; });
rfb.addEventListener("disconnect", (e) => {
  status.textContent = e.detail.clean ? "disconnected" : "connection lost: reload to try again";
});
rfb.addEventListener("securityfailure", () => {
  status.textContent = "the desktop refused its password: stop and start a new session";
});
window.deskpoolRfb = rfb;
