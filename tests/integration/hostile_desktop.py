"""A hostile desktop: what a student who replaced websockify and deskpool-audio could run.

It runs INSIDE a real deskpool/tiny container (its Debian python3, standard library only;
nothing of the project is importable there) and serves, as fast as the peer takes them:

- on 6080, a WebSocket that plays websockify's part of the RFB handshake with VNC
  authentication (any answer to the challenge is taken) and then, after the ClientInit,
  sends binary messages of ``CHUNK`` bytes (under the portal's 1 MiB limit) without end;
- on 6081, the sound exchange of ``nodeagent.desktop_audio`` (any answer taken), then PCM
  without end as an image from before Opus does, or with ``DESKTOP_SOUND=opus`` Opus
  packets of the largest length allowed (4,000 bytes, each after its length) without end.

``DESKTOP_RATE_BPS`` (bytes a second per connection) and ``DESKTOP_CHUNK`` (bytes a
message) make it a steadily repainting desktop instead, for ``python -m bench.data_plane``:
every viewer then gets the same bytes at the same pace, whichever way they travel.

Every 0.2 s it prints ``sent screen=<bytes> sound=<bytes>``: how much the peers have taken
so far (``sendall`` returns only once the kernel took it), which the test reads from the
container's log.
"""

import base64
import hashlib
import os
import socket
import struct
import sys
import threading
import time

CHUNK = int(os.environ.get("DESKTOP_CHUNK", 512 * 1024))
RATE = int(os.environ.get("DESKTOP_RATE_BPS", 0))  # per connection; 0: as fast as taken
SOUND = os.environ.get("DESKTOP_SOUND", "pcm")  # or "opus"
OPUS_PACKET = 4000  # nodeagent.desktop_audio.MAX_PACKET_BYTES
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
SENT = {"screen": 0, "sound": 0}


def read_exactly(conn, length):
    data = b""
    while len(data) < length:
        part = conn.recv(length - len(data))
        if not part:
            raise EOFError
        data += part
    return data


def ws_accept(conn):
    request = b""
    while b"\r\n\r\n" not in request:
        part = conn.recv(4096)
        if not part:
            raise EOFError
        request += part
    key = b""
    for line in request.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            key = value.strip()
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    conn.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )


def ws_send(conn, payload):
    length = len(payload)
    if length < 126:
        header = struct.pack(">BB", 0x82, length)
    elif length < 65536:
        header = struct.pack(">BBH", 0x82, 126, length)
    else:
        header = struct.pack(">BBQ", 0x82, 127, length)
    conn.sendall(header + payload)


def ws_recv(conn):
    """The next data message's payload (control frames skipped)."""
    while True:
        first, second = read_exactly(conn, 2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", read_exactly(conn, 2))
        elif length == 127:
            (length,) = struct.unpack(">Q", read_exactly(conn, 8))
        mask = read_exactly(conn, 4) if second & 0x80 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(read_exactly(conn, length)))
        opcode = first & 0x0F
        if opcode == 8:
            raise EOFError
        if opcode < 8:
            return data


def paced(send, payload):
    """Send ``payload`` again and again, at RATE bytes a second when set."""
    started, sent = time.monotonic(), 0
    while True:
        send(payload)
        sent += len(payload)
        if RATE:
            ahead = sent / RATE - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)


def log_in_as_websockify(conn):
    """websockify's part of the RFB login with VNC authentication (any answer to the
    challenge is taken); returns the browser's ClientInit, passed on by the gateway."""
    ws_accept(conn)
    ws_send(conn, b"RFB 003.008\n")
    ws_recv(conn)  # the gateway's version
    ws_send(conn, bytes([1, 2]))  # VNC authentication only
    ws_recv(conn)
    ws_send(conn, os.urandom(16))
    ws_recv(conn)  # any answer is taken
    ws_send(conn, struct.pack(">I", 0))
    return ws_recv(conn)


def screen(conn):
    log_in_as_websockify(conn)
    payload = b"s" * CHUNK

    def send(data):
        ws_send(conn, data)
        SENT["screen"] += len(data)

    paced(send, payload)


def sound(conn):
    if SOUND == "opus":
        conn.sendall(b"DPAUDIO2" + os.urandom(16))
        read_exactly(conn, 32)  # any answer is taken
        conn.sendall(b"OK" + struct.pack(">BIB", 2, 48000, 2))
        packet = struct.pack(">H", OPUS_PACKET) + b"\xfc" * OPUS_PACKET
        payload = packet * max(1, CHUNK // len(packet))
    else:
        conn.sendall(b"DPAUDIO1" + os.urandom(16))
        read_exactly(conn, 32)  # any answer is taken
        conn.sendall(b"OK" + struct.pack(">IBB", 48000, 2, 16))
        payload = b"\x01\x02" * (CHUNK // 2)

    def send(data):
        conn.sendall(data)
        SENT["sound"] += len(data)

    paced(send, payload)


def serve(port, handler):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(16)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=run, args=(conn, handler), daemon=True).start()


def run(conn, handler):
    try:
        handler(conn)
    except (OSError, EOFError, ValueError):
        pass
    finally:
        conn.close()


if __name__ == "__main__":
    for port, handler in ((6080, screen), (6081, sound)):
        threading.Thread(target=serve, args=(port, handler), daemon=True).start()
    while True:
        print(f"sent screen={SENT['screen']} sound={SENT['sound']}", flush=True)
        sys.stdout.flush()
        time.sleep(0.2)
