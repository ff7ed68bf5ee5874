"""The storm's students try a dropped live-updates handshake again (no root needed).

Issue 25, item 12: one handshake through nginx closed without a close frame
(``ConnectionClosedError`` from the request's send), which the storm did not count as
retryable: that student's thread aborted the barrier and all 60 failed. It is one student's
retry now, bounded and recorded.
"""

from __future__ import annotations

import time

import pytest
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from . import test_multihost as storm


class _Student:
    cookie = "c"


@pytest.fixture
def asker() -> storm.Asker:
    return storm.Asker(student=_Student(), n=7)


def test_a_handshake_closed_without_a_close_frame_is_tried_again_and_counted(
    monkeypatch: pytest.MonkeyPatch, asker: storm.Asker
) -> None:
    attempts: list[int] = []
    opened = object()

    def flaky(stack, student):  # type: ignore[no-untyped-def]
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionClosedError(None, None)  # "no close frame received or sent"
        return opened

    monkeypatch.setattr(storm, "updates_socket", flaky)
    monkeypatch.setattr(storm.time, "sleep", lambda s: None)

    assert storm.connect_with_retries(None, asker, time.monotonic() + 60) is opened
    assert len(attempts) == 2
    assert asker.ws_failures == ["ConnectionClosedError: no close frame received or sent"]


def test_the_tries_are_bounded_and_the_last_error_is_raised(
    monkeypatch: pytest.MonkeyPatch, asker: storm.Asker
) -> None:
    def refused(stack, student):  # type: ignore[no-untyped-def]
        raise InvalidStatus(type("R", (), {"status_code": 502})())  # type: ignore[arg-type]

    monkeypatch.setattr(storm, "updates_socket", refused)
    monkeypatch.setattr(storm.time, "sleep", lambda s: None)

    with pytest.raises(InvalidStatus):
        storm.connect_with_retries(None, asker, time.monotonic() + 60, tries=3)
    assert len(asker.ws_failures) == 3
