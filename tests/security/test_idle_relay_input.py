"""Idle detection's inputs from real processes (issue 15): through a real portal (daphne),
Celery worker and Docker agent with a real tiny desktop, the relay counts the keyboard and
mouse events a browser sends (not the clipboard text that looks like them, not the screen
requests), marks the viewer connected and gone, and the agent's heartbeats bring the
desktop's own CPU figures (no GPU here: None) into the activity store."""

from __future__ import annotations

import struct

import pytest

from scheduling.models import SessionActivity
from scheduling.services.nodes import do_create_join_token
from tests.conftest import TEST_IMAGE, give_thesis_grant
from tests.integration.conftest import (  # noqa: F401 - fixtures
    docker_engine,
    require_image,
    stack,
    stack_options,
)
from tests.integration.stack import wait_for, write_fleet
from tests.security.test_relay_auth import Rfb, open_relay, sign_in

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.lifecycle]

KEY_DOWN = struct.pack(">BBHI", 4, 1, 0, 0x61)
KEY_UP = struct.pack(">BBHI", 4, 0, 0, 0x61)
POINTER = struct.pack(">BBHH", 5, 0, 10, 20)
FLUSH_WAIT_S = 30  # the relay sends its counts every 5 s


def activity(session_id: int) -> SessionActivity | None:
    return SessionActivity.objects.filter(session_id=session_id).first()


def test_the_relay_counts_input_and_viewers_and_the_agent_reports_cpu(
    stack,  # noqa: F811
    owner,
    profile,
    docker_engine,  # noqa: F811
    require_image,  # noqa: F811
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    require_image(TEST_IMAGE)
    stack.start_agent(
        do_create_join_token(stack.node, actor="test"),
        write_fleet(tmp_path / "fleet.yaml", stack.node, 2),
    )
    give_thesis_grant(owner)
    browser = sign_in(stack.url, "ada")
    created = browser.post(
        "/api/v1/sessions/",
        json={"profile": profile.pk, "purpose": "thesis"},
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
    )
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    api = f"/api/v1/sessions/{session_id}/"
    wait_for(lambda: browser.get(api).json()["state"] == "RUNNING", 90, "RUNNING")

    # The agent's heartbeats: the container's CPU (a reading needs two), no GPU figure.
    def cpu_samples() -> list:
        row = activity(session_id)
        return [s for s in row.samples if s[2] is not None] if row else []

    samples = wait_for(cpu_samples, 60, "a CPU sample from the agent")
    assert all(gpu is None and 0 <= cpu <= 100 for _, gpu, cpu in samples)

    with open_relay(stack.url, browser, session_id) as connection:
        rfb = Rfb(connection)
        rfb.log_in()
        wait_for(lambda: activity(session_id).viewers == 1, FLUSH_WAIT_S, "a viewer")  # type: ignore[union-attr]
        assert activity(session_id).input_events == 0  # type: ignore[union-attr]
        # 2 keys and 3 pointer events, in one message with a screen request and a clipboard
        # text made of key events, then a pointer event split over two messages.
        clipboard = KEY_DOWN * 4
        connection.send(
            KEY_DOWN
            + struct.pack(">BBHHHH", 3, 1, 0, 0, 64, 64)
            + POINTER * 2
            + struct.pack(">B3xI", 6, len(clipboard))
            + clipboard
            + KEY_UP
            + POINTER[:3]
        )
        connection.send(POINTER[3:])
        wait_for(
            lambda: activity(session_id).input_events >= 5,  # type: ignore[union-attr]
            FLUSH_WAIT_S,
            "the counted input",
        )
        row = activity(session_id)
        assert row is not None and row.input_events == 5 and row.last_input_at is not None
        assert rfb.frame() == 0  # the desktop still answers: the bytes went through

        connection.send(POINTER)  # counted at the close at the latest
    wait_for(lambda: activity(session_id).viewers == 0, FLUSH_WAIT_S, "the viewer gone")  # type: ignore[union-attr]
    wait_for(lambda: activity(session_id).input_events == 6, FLUSH_WAIT_S, "the last event")  # type: ignore[union-attr]
