"""The VNC-through-websockify handshake, against the tiny desktop image."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from nodeagent.readiness import DesktopNotReady, wait_for_desktop
from nodeagent.runtime.docker_runtime import DockerRuntime

RFB_SECURITY_VNC_AUTH = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_nothing_listening_gives_up_at_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(DesktopNotReady, match="no VNC handshake"):
        wait_for_desktop("127.0.0.1", _free_port(), timeout_s=1.0)
    assert 0.8 < time.monotonic() - started < 5


def test_abort_reason_stops_waiting_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(DesktopNotReady, match="container exited"):
        wait_for_desktop(
            "127.0.0.1", _free_port(), timeout_s=30, abort_reason=lambda: "container exited"
        )
    assert time.monotonic() - started < 5


@pytest.mark.docker
def test_desktop_offers_vnc_password_auth_and_answers_repeatedly(
    docker_client, tiny_image, node_name, tmp_path: Path, make_session
) -> None:  # type: ignore[no-untyped-def]
    checks: list[object] = []

    def no_readiness(*args: object, **kwargs: object) -> None:
        checks.append(args)  # the runtime must not wait: this test does the waiting

    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=tmp_path, readiness=no_readiness
    )
    started = runtime.start(make_session(4201, image=tiny_image))
    assert started.port is not None and len(checks) == 1

    # More than five handshakes: TigerVNC's blacklist would refuse the sixth if it were on.
    for _ in range(7):
        handshake = wait_for_desktop("127.0.0.1", started.port, timeout_s=30)
        assert handshake.version in {"003.008", "003.007"}
        assert RFB_SECURITY_VNC_AUTH in handshake.security_types
