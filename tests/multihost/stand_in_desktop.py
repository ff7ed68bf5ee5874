"""``python -m tests.multihost.stand_in_desktop ADDRESS``: a node's desktop, as its gateway
sees it, in the node's namespace (the multi-host test's simulated desktops report it).

On ``ADDRESS:5900`` (:data:`PORT`) it plays websockify's part of the RFB handshake with VNC
authentication, as ``tests/integration/hostile_desktop.py`` does (its WebSocket framing is
reused; any answer to the challenge is taken: the real login is tested against real
desktops in ``tests/nodeagent/gateway``), and answers the ClientInit with a ServerInit
(1280×800). It then stays quiet until the viewer asks for a FramebufferUpdate, and from
then on is hostile: it repaints without end, :data:`CHUNK` bytes a message, as fast as the
gateway takes them (a terminal scrolling forever, for a viewer that stopped reading).

Every 0.2 s, when it changed, it prints ``sent screen=<bytes>``: what the gateway took so far.
"""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time

from tests.integration.hostile_desktop import log_in_as_websockify, run, ws_recv, ws_send

PORT = 5900
CHUNK = 256 * 1024  # under the gateway's 1 MiB a message
WIDTH, HEIGHT = 1280, 800
# ServerInit: size, pixel format (32 bpp, depth 24, little-endian true colour), name.
NAME = b"deskpool stand-in"
SERVER_INIT = (
    struct.pack(">HH", WIDTH, HEIGHT)
    + struct.pack(">BBBBHHHBBBxxx", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
    + struct.pack(">I", len(NAME))
    + NAME
)
FRAMEBUFFER_UPDATE_REQUEST = 3
SENT = [0]


def screen(conn) -> None:
    client_init = log_in_as_websockify(conn)
    ws_send(conn, SERVER_INIT)
    asked = client_init[1:]
    while asked[:1] != bytes([FRAMEBUFFER_UPDATE_REQUEST]):
        asked = ws_recv(conn)
    payload = b"\x00" * CHUNK
    while True:
        ws_send(conn, payload)
        SENT[0] += len(payload)


def main() -> None:
    address = sys.argv[1]
    threading.Thread(target=serve_on, args=(address,), daemon=True).start()
    last = -1
    while True:
        if SENT[0] != last:
            last = SENT[0]
            print(f"sent screen={last}", flush=True)
        time.sleep(0.2)


def serve_on(address: str) -> None:
    """Listen on the node's address only (``hostile_desktop.serve`` takes every one)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, PORT))
    listener.listen(16)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=run, args=(conn, screen), daemon=True).start()


if __name__ == "__main__":
    main()
