"""A desktop's sound on the agent: real dockerd, real deskpool/desktop containers.

The desktop image plays every program into PulseAudio's null sink and serves it on its
sound port (nodeagent/desktop_audio.py); the agent publishes that port on the management
address and reports it with RUNNING. Only the session's secret opens it, a claimed warm
desktop's included, and a tone played in the desktop comes out as Opus packets of 20 ms
that decode (with this host's libopus) to the same tone.
"""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from bench.desktop_audio import TONE_AMPLITUDE, decode_opus, opus_packets, play_tone
from bench.desktop_audio import listen as bench_listen
from nodeagent.desktop_audio import DESKTOP_AUDIO_PORT, OPUS, AudioFormat, AudioRefused
from nodeagent.outbox import running_report
from nodeagent.reconcile import Reconciler
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.conftest import desired_warm, wait_for_image

pytestmark = pytest.mark.docker

DESKTOP_IMAGE = "deskpool/desktop:latest"


@pytest.fixture(scope="module")
def desktop_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    return wait_for_image(docker_client, DESKTOP_IMAGE, "desktop")


@pytest.fixture
def runtime(docker_client, node_name, sessions_dir) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=60
    )


def listen(port: int, secret: str, seconds: float, during=None) -> tuple[AudioFormat, bytes, float]:  # type: ignore[no-untyped-def]
    """What comes in ``seconds`` once logged in (``during()`` started then), and how long
    after ``during`` started its first bytes came (s, or -1)."""
    started: list[float] = []

    def timed() -> None:
        started.append(time.time())
        if during is not None:
            during()

    found, heard, first = asyncio.run(bench_listen(port, seconds, timed, secret))
    return found, heard, first - started[0] if first else -1.0


def peak(pcm: bytes) -> int:
    samples = struct.unpack(f"<{len(pcm) // 2}h", pcm[: len(pcm) // 2 * 2])
    return max((abs(s) for s in samples), default=0)


# A decoded stream's first and last 0.1 s (48 kHz, 2 channels, 16 bits): the decoder's
# pre-skip, and the tone's start and end, steps that Opus overshoots (up to 9 % measured) as
# any lossy codec does.
EDGE_BYTES = 4800 * 4


def steady(pcm: bytes) -> bytes:
    """The decoded tone without its edges."""
    return pcm[EDGE_BYTES:-EDGE_BYTES]


def tone_frequency(pcm: bytes) -> float:
    """The left channel's frequency, from its upward zero crossings, without the edges."""
    left = struct.unpack(f"<{len(steady(pcm)) // 2}h", steady(pcm))[0::2]
    crossings = sum(1 for a, b in zip(left, left[1:], strict=False) if a < 0 <= b)
    return crossings / (len(left) / 48000)


def test_a_desktops_sound_is_published_reported_and_heard_with_its_secret_only(
    runtime, docker_client, desktop_image, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(4501, image=desktop_image, vnc_password="soundpw1", memory_mb=1024)
    started = runtime.start(session)

    # Published beside websockify's, on the management address only, and reported.
    assert started.audio_port is not None and started.audio_port != started.port
    attrs = docker_client.containers.get(started.container_id).attrs
    bound = attrs["NetworkSettings"]["Ports"][f"{DESKTOP_AUDIO_PORT}/tcp"]
    assert {b["HostIp"] for b in bound} == {"127.0.0.1"}
    report = running_report(started)
    assert (report.port, report.audio_port) == (started.port, started.audio_port)

    # A wrong secret is refused; the session's is heard.
    with pytest.raises(AudioRefused, match="refused the session's secret"):
        listen(started.audio_port, "notthis1", 1)
    container = docker_client.containers.get(started.container_id)
    found, heard, first = listen(
        started.audio_port, "soundpw1", 4, during=lambda: (time.sleep(1), play_tone(container, 2))
    )
    assert found == AudioFormat(rate=48000, channels=2, bits=0, codec=OPUS)
    # Silence is left out: nothing came before the tone started a second in.
    assert first >= 0.9, first
    # The tone's two seconds come through as about 100 packets of 20 ms, some 8 kB/s
    # (the PCM before Opus was 192 kB/s), and decode to the tone: its pitch, and its
    # loudness between its edges within what a lossy codec keeps (3 % over, measured).
    packets = opus_packets(heard)
    assert 90 <= len(packets) <= 110, len(packets)
    assert len(heard) < 2 * 16_000, len(heard)
    pcm = decode_opus(packets)
    assert 1.8 * 48000 * 4 <= len(pcm) <= 2.2 * 48000 * 4, len(pcm)
    assert abs(tone_frequency(pcm) - 440) < 2, tone_frequency(pcm)
    assert abs(peak(steady(pcm)) - TONE_AMPLITUDE) < 0.05 * TONE_AMPLITUDE, peak(pcm)
    assert peak(pcm) < 1.2 * TONE_AMPLITUDE, peak(pcm)


def test_a_desktop_without_sound_reports_no_sound_port(runtime, tiny_image, make_session) -> None:  # type: ignore[no-untyped-def]
    started = runtime.start(make_session(4502, image=tiny_image))
    assert started.port is not None and started.audio_port is None
    assert running_report(started).audio_port is None


def test_a_claimed_warm_desktops_sound_opens_with_the_sessions_secret(
    runtime, docker_client, desktop_image, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(runtime, fake_portal)
    warm = [desired_warm("b9-1", image=desktop_image, memory_mb=1024)]
    reconciler.step([], warm)
    assert reconciler.wait_idle(90)
    assert fake_portal.warm_states("b9-1") == ["READY"]
    warm_password = (sessions_dir / "wb9-1" / "passwd").read_text().strip()
    session = make_session(
        4503, image=desktop_image, vnc_password="claimsnd", warm_key="b9-1", memory_mb=1024
    )
    reconciler.step([session], [])
    assert reconciler.wait_idle(60)
    running = fake_portal.last(4503)
    assert running["state"] == "RUNNING" and running["audio_port"] is not None

    found, _heard, _first = listen(running["audio_port"], "claimsnd", 0.2)
    assert found.rate == 48000
    with pytest.raises(AudioRefused):
        listen(running["audio_port"], warm_password, 0.2)
    reconciler.step([], [])
    reconciler.close()
