#!/usr/bin/env python3
"""Smoke-test a Deskpool desktop image the way the node agent runs it.

    /work/main/.venv/bin/python nodeagent/images/check_image.py deskpool/tiny:latest

Starts one container with the agent's flags (all capabilities dropped, uid 1000,
a named home volume, the VNC password as a read-only mounted file, websockify
published on 127.0.0.1), then:

* waits for the VNC handshake through websockify: RFB banner, version reply, and
  a security-type list that offers VNC authentication (type 2);
* if the ``cryptography`` package is importable, also answers the VNC challenge:
  the mounted password must pass and a wrong one must fail;
* claims the desktop as the agent claims a warm one (``deskpool-claim --language zh-hans``
  after a new password is written into the mounted folder): the new password must pass,
  the old one fail, the X session must run again (a new process group) under Xvnc still
  up, in zh_CN.UTF-8 where the image's label ``deskpool.languages`` names zh-hans, else in
  the image's C.UTF-8; an image that names zh-hans must also hold the zh_CN and en_US
  locales, a CJK font and fcitx5's pinyin;
* prints the time from ``docker run`` to the handshake, the claim's time, the container's
  memory after it settles, and how long ``docker stop`` takes (SIGTERM must suffice);
* removes the container, the volume and the password folder, whatever happened.

Exit status 0 when everything passed, 1 otherwise. Needs ``websockets``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import websockets
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

try:  # the one VNC answer, where the package (and cryptography) is installed
    from nodeagent.readiness import vnc_auth_response
except ImportError:
    vnc_auth_response = None  # type: ignore[assignment]

# Keep in step with nodeagent/protocol.py (this script runs without the package on the path).
DESKTOP_WEBSOCKIFY_PORT = 6080
DESKTOP_PASSWORD_MOUNT = "/run/deskpool/vnc"
DESKTOP_HOME = "/home/desktop"

VNC_AUTH = 2
CLAIM_LANGUAGE = "zh-hans"
CLAIM_LOCALE = "zh_CN.UTF-8"
# What an image whose deskpool.languages names zh-hans holds (run as a shell test).
CHINESE_CHECKS = {
    "zh_CN and en_US locales": "locale -a | grep -qx zh_CN.utf8 && locale -a | grep -qx en_US.utf8",
    "a CJK font": 'test -n "$(fc-list :lang=zh family)"',
    "fcitx5 with pinyin": "command -v fcitx5 && test -e /usr/share/fcitx5/inputmethod/pinyin.conf",
}
# The X session's leader (deskpool-start writes its pid) and its LANG, once it runs.
SESSION_LANG = (
    "s=$(cat /tmp/deskpool-runtime/session) && kill -0 $s && "
    "echo $s $(tr '\\0' '\\n' < /proc/$s/environ | sed -n 's/^LANG=//p')"
)


class CheckFailed(Exception):
    pass


def docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise CheckFailed(f"docker {' '.join(args[:2])} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


class WsReader:
    """Byte-stream reads over WebSocket messages: websockify frames VNC data however
    it arrived, so one RFB field may span messages or share one with the next."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.buf = b""

    async def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            msg = await self.ws.recv()
            self.buf += msg if isinstance(msg, bytes) else msg.encode("latin-1")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def vnc_response(password: str, challenge: bytes) -> bytes | None:
    """DES-encrypt the challenge the VNC way, or None when no DES is available."""
    return None if vnc_auth_response is None else vnc_auth_response(password, challenge)


async def handshake(url: str, password: str) -> tuple[str, list[int], str]:
    """One RFB handshake; returns (server version, security types, auth result)."""
    async with connect(
        url, subprotocols=[Subprotocol("binary")], open_timeout=2, close_timeout=1
    ) as ws:
        r = WsReader(ws)
        banner = await asyncio.wait_for(r.read(12), 5)
        if not banner.startswith(b"RFB 003.") or not banner.endswith(b"\n"):
            raise CheckFailed(f"unexpected RFB banner {banner!r}")
        await ws.send(banner)  # answer with the server's own version
        count = (await r.read(1))[0]
        if count == 0:
            length = int.from_bytes(await r.read(4), "big")
            reason = (await r.read(length)).decode(errors="replace")
            raise CheckFailed(f"server refused the connection: {reason}")
        types = list(await r.read(count))
        if VNC_AUTH not in types:
            return banner.decode().strip(), types, "no VNC auth offered"
        # Past this point the security list has been read: the handshake counts as done.
        # Go on only if we can answer the challenge; otherwise close cleanly.
        if vnc_response(password, b"\0" * 16) is None:
            return banner.decode().strip(), types, "skipped (no cryptography module)"
        await ws.send(bytes([VNC_AUTH]))
        challenge = await r.read(16)
        answer = vnc_response(password, challenge)
        assert answer is not None  # checked above
        await ws.send(answer)
        result = int.from_bytes(await r.read(4), "big")
        return banner.decode().strip(), types, "OK" if result == 0 else f"FAILED ({result})"


async def wait_for_handshake(url: str, password: str, deadline: float, cid: str):
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return await handshake(url, password)
        except CheckFailed:
            raise
        except (TimeoutError, OSError, websockets.exceptions.WebSocketException) as e:
            # docker-proxy accepts before websockify listens, and websockify drops the
            # client while Xvnc is still starting: both just mean "not yet".
            last_error = e
        if docker("inspect", "-f", "{{.State.Running}}", cid, check=False) != "true":
            raise CheckFailed("container exited before the handshake")
        await asyncio.sleep(0.05)
    raise CheckFailed(f"no handshake before the timeout (last error: {last_error!r})")


def check_claim(image: str, cid: str, url: str, vnc_dir: Path, old_password: str) -> None:
    """Claim the running desktop as the agent claims a warm one (see the module docstring)."""
    languages = docker(
        "image", "inspect", "-f", '{{index .Config.Labels "deskpool.languages"}}', image
    ).split()
    chinese = CLAIM_LANGUAGE in languages
    for what, test in CHINESE_CHECKS.items() if chinese else ():
        if subprocess.run(
            ["docker", "exec", cid, "sh", "-c", test], capture_output=True
        ).returncode:
            raise CheckFailed(f"the image names {CLAIM_LANGUAGE} but lacks {what}")
    xvnc = docker("exec", cid, "sh", "-c", "cat /tmp/.X1-lock").strip()
    before = docker("exec", cid, "sh", "-c", SESSION_LANG).split()
    password = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(8))
    (vnc_dir / "passwd.new").write_text(password + "\n")
    os.chmod(vnc_dir / "passwd.new", 0o444)
    os.replace(vnc_dir / "passwd.new", vnc_dir / "passwd")
    t0 = time.monotonic()
    docker("exec", cid, "/usr/local/bin/deskpool-claim", "--language", CLAIM_LANGUAGE)
    t_claim = time.monotonic() - t0
    new_auth = asyncio.run(handshake(url, password))[2]
    old_auth = asyncio.run(handshake(url, old_password))[2]
    after: list[str] = []
    for _ in range(100):  # deskpool-start starts the session again at once
        after = docker("exec", cid, "sh", "-c", SESSION_LANG, check=False).split()
        if after and after != before:
            break
        time.sleep(0.05)
    lang = after[1] if len(after) > 1 else "?"
    print(
        f"claim:       deskpool-claim --language {CLAIM_LANGUAGE} in {t_claim:.2f} s; "
        f"new password {new_auth}, old {old_auth}; session {before[:1]} -> {after[:1]}, "
        f"LANG={lang}{'; locales, CJK font, pinyin present' if chinese else ''}"
    )
    if vnc_auth_response is not None and (new_auth != "OK" or not old_auth.startswith("FAILED")):
        raise CheckFailed("after the claim the new password must pass and the old one fail")
    if not after or after[:1] == before[:1]:
        raise CheckFailed("the claim did not start the X session again")
    if docker("exec", cid, "sh", "-c", "cat /tmp/.X1-lock").strip() != xvnc:
        raise CheckFailed("Xvnc did not stay up through the claim")
    if lang != (CLAIM_LOCALE if chinese else "C.UTF-8"):
        raise CheckFailed(f"the claimed session runs in {lang}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("image")
    ap.add_argument("--timeout", type=float, default=30, help="seconds to wait for the handshake")
    ap.add_argument(
        "--settle",
        type=float,
        default=5,
        help="seconds to let the desktop finish starting before measuring memory",
    )
    ap.add_argument(
        "--max-stop",
        type=float,
        default=5,
        help="fail when `docker stop` takes longer than this (SIGTERM ignored)",
    )
    args = ap.parse_args()

    tag = secrets.token_hex(4)
    name = f"deskpool-check-{tag}"
    volume = f"deskpool-check-{tag}"
    password = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(8))

    # The folder that holds the mounted folder is root-only, so other host users cannot
    # read the password; the mounted folder and file themselves must be readable by
    # uid 1000 inside the container. This is the layout the agent should use too.
    secret_root = Path(tempfile.mkdtemp(prefix="deskpool-check-"))  # mode 0700
    vnc_dir = secret_root / "vnc"
    vnc_dir.mkdir(mode=0o755)
    (vnc_dir / "passwd").write_text(password + "\n")
    os.chmod(vnc_dir / "passwd", 0o444)
    os.chmod(vnc_dir, 0o755)

    cid = ""
    ok = False
    try:
        docker("volume", "create", volume)
        t0 = time.monotonic()
        cid = docker(
            "run",
            "-d",
            "--name",
            name,
            "--user",
            "1000:1000",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--pids-limit",
            "512",
            "--shm-size",
            "256m",
            "--memory",
            "2g",
            "--cpus",
            "1",
            "-v",
            f"{volume}:{DESKTOP_HOME}",
            "-v",
            f"{vnc_dir}:{DESKTOP_PASSWORD_MOUNT}:ro",
            "-p",
            f"127.0.0.1::{DESKTOP_WEBSOCKIFY_PORT}",
            args.image,
        )
        t_run = time.monotonic() - t0
        host_port = docker("port", cid, f"{DESKTOP_WEBSOCKIFY_PORT}/tcp").splitlines()[0]
        url = f"ws://{host_port}/websockify"

        version, types, auth = asyncio.run(
            wait_for_handshake(url, password, t0 + args.timeout, cid)
        )
        t_hs = time.monotonic() - t0
        print(f"image:       {args.image}")
        print(f"docker run:  {t_run:.2f} s (returned)")
        print(f"handshake:   {t_hs:.2f} s after docker run ({version}, security types {types})")
        print(f"vnc auth:    {auth}")
        if VNC_AUTH not in types:
            raise CheckFailed(f"VNC authentication (type 2) not offered: {types}")
        if auth.startswith("FAILED"):
            raise CheckFailed("the password from the mounted file was refused")
        if auth == "OK":
            wrong = password[::-1] if password[::-1] != password else password.swapcase()
            _, _, wrong_auth = asyncio.run(handshake(url, wrong))
            print(f"wrong pass:  {'refused' if wrong_auth.startswith('FAILED') else wrong_auth}")
            if not wrong_auth.startswith("FAILED"):
                raise CheckFailed("a wrong VNC password was accepted")

        # Before the settling: the claim starts the X session again, and an XFCE session
        # still starting refuses the polite logout that `docker stop` asks for.
        check_claim(args.image, cid, url, vnc_dir, password)

        time.sleep(args.settle)
        if docker("inspect", "-f", "{{.State.Running}}", cid) != "true":
            raise CheckFailed("container exited after the handshake")
        mem = docker("stats", "--no-stream", "--format", "{{.MemUsage}}", cid)
        pids = docker("stats", "--no-stream", "--format", "{{.PIDs}}", cid)
        print(f"memory:      {mem} after {args.settle:g} s ({pids} pids)")

        t1 = time.monotonic()
        docker("stop", "-t", "10", cid)
        t_stop = time.monotonic() - t1
        print(f"docker stop: {t_stop:.2f} s")
        if t_stop > args.max_stop:
            raise CheckFailed(f"docker stop took {t_stop:.1f} s: SIGTERM does not stop it")
        ok = True
    except CheckFailed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        if cid:
            logs = subprocess.run(
                ["docker", "logs", "--tail", "40", cid], capture_output=True, text=True
            )
            print("--- container log (last 40 lines) ---", file=sys.stderr)
            print(logs.stdout + logs.stderr, file=sys.stderr)
    finally:
        if cid:
            docker("rm", "-f", "-v", cid, check=False)
        docker("volume", "rm", "-f", volume, check=False)
        shutil.rmtree(secret_root, ignore_errors=True)
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
