"""The real gateway process in front of a real desktop (deskpool/tiny on the Docker engine,
started by the agent's runtime with its password file and published port): a good ticket
logs in for real, and revocation closes an open screen within 2 s."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.gateway.codes import (
    CLOSE_SESSION_ENDED,
    CLOSE_SIGNED_OUT,
    CLOSE_TICKET_REPLAYED,
    CLOSE_UNREACHABLE,
)
from nodeagent.runtime.base import ManagedContainer
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.gateway.browser import (
    closed_with,
    log_in_screen,
    open_socket,
    pointer_events,
    refusal,
)
from tests.nodeagent.gateway.gateway_process import (
    GatewayProcess,
    revoked,
    session,
    state_for,
    ticket_for,
)

pytestmark = pytest.mark.docker

SESSION_ID = 4301
PASSWORD = "s3cretpw"  # tests/nodeagent/conftest.py's desired_session
REVOKED_WITHIN_S = 2.0  # the bound on revocation


@pytest.fixture
def desktop(  # type: ignore[no-untyped-def]
    docker_client, tiny_image, node_name, sessions_dir, make_session
) -> Iterator[ManagedContainer]:
    """A running tiny desktop, its websockify published on 127.0.0.1, as the agent starts it."""
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=60
    )
    started = runtime.start(make_session(SESSION_ID, image=tiny_image, vnc_password=PASSWORD))
    assert started.port is not None
    yield started
    runtime.stop(SESSION_ID)


def listed(desktop: ManagedContainer, **fields: object):  # type: ignore[no-untyped-def]
    assert desktop.port is not None
    return session(SESSION_ID, desktop.port, password=PASSWORD, **fields)


def test_a_good_ticket_logs_in_to_the_desktop_and_reports_open_input_and_close(
    gateway, ticket_key, desktop
) -> None:
    key, key_bytes = ticket_key
    gateway.send_state(state_for(key, listed(desktop)))
    text, ticket = ticket_for(key_bytes, SESSION_ID)

    async def view() -> tuple[int, int]:
        async with await open_socket(gateway.url + "/screen") as browser:
            await browser.send(text)
            size = await log_in_screen(browser)
            await pointer_events(browser, 3)
            return size

    width, height = asyncio.run(view())
    assert width > 0 and height > 0  # the desktop's ServerInit: really logged in
    opened = gateway.event("opened")
    assert (opened["ticket"], opened["session_id"], opened["purpose"]) == (
        ticket.jti,
        SESSION_ID,
        "screen",
    )
    assert opened["address"] == "127.0.0.1"
    closed = gateway.event("closed")
    assert closed["input_events"] == 3 and closed["input_at"] is not None
    assert closed["bytes_in"] > 0 and closed["bytes_out"] > 24
    assert PASSWORD not in gateway.log() and text not in gateway.log()


def test_behind_a_trusted_proxy_the_address_is_its_x_real_ip(
    tmp_path: Path, ticket_key, desktop
) -> None:
    key, key_bytes = ticket_key
    gateway = GatewayProcess(tmp_path / "proxied.log", "--trusted-proxy", "127.0.0.0/8")
    try:
        gateway.send_state(state_for(key, listed(desktop)))

        async def view() -> None:
            headers = {"X-Real-IP": "203.0.113.9"}
            async with await open_socket(
                gateway.url + "/screen", additional_headers=headers
            ) as browser:
                await browser.send(ticket_for(key_bytes, SESSION_ID)[0])
                await log_in_screen(browser)

        asyncio.run(view())
        assert gateway.event("opened")["address"] == "203.0.113.9"
    finally:
        gateway.stop()


def test_a_ticket_that_opened_once_is_refused_the_second_time(gateway, ticket_key, desktop) -> None:
    key, key_bytes = ticket_key
    gateway.send_state(state_for(key, listed(desktop)))
    text, _ticket = ticket_for(key_bytes, SESSION_ID)

    async def twice() -> int | None:
        async with await open_socket(gateway.url + "/screen") as browser:
            await browser.send(text)
            await log_in_screen(browser)
            return await refusal(gateway.url + "/screen", text)

    assert asyncio.run(twice()) == CLOSE_TICKET_REPLAYED


async def open_screen(gateway: GatewayProcess, text: str):  # type: ignore[no-untyped-def]
    browser = await open_socket(gateway.url + "/screen")
    await browser.send(text)
    await log_in_screen(browser)
    return browser


def test_a_state_without_the_session_closes_its_screen_within_2_s(
    gateway, ticket_key, desktop
) -> None:
    key, key_bytes = ticket_key
    gateway.send_state(state_for(key, listed(desktop)))

    async def scenario() -> int | None:
        browser = await open_screen(gateway, ticket_for(key_bytes, SESSION_ID)[0])
        gateway.send_state(state_for(key))  # the desktop was stopped
        return await closed_with(browser, within=REVOKED_WITHIN_S)

    assert asyncio.run(scenario()) == CLOSE_SESSION_ENDED
    assert gateway.event("closed")["reason"].startswith(str(CLOSE_SESSION_ENDED))


def test_a_revoked_ticket_closes_its_screen_within_2_s_and_leaves_the_others(
    gateway, ticket_key, desktop
) -> None:
    key, key_bytes = ticket_key
    gateway.send_state(state_for(key, listed(desktop)))
    signed_out_text, signed_out = ticket_for(key_bytes, SESSION_ID)

    async def scenario() -> tuple[int | None, bool]:
        revoked_browser = await open_screen(gateway, signed_out_text)
        other = await open_screen(gateway, ticket_for(key_bytes, SESSION_ID)[0])
        gateway.send_state(
            state_for(key, listed(desktop, revoked=[revoked(signed_out, "signed_out")]))
        )
        code = await closed_with(revoked_browser, within=REVOKED_WITHIN_S)
        await pointer_events(other, 1)  # the other viewer still passes bytes
        still_open = other.close_code is None
        await other.close()
        return code, still_open

    assert asyncio.run(scenario()) == (CLOSE_SIGNED_OUT, True)


def test_a_wrong_secret_or_a_closed_port_is_4502(gateway, ticket_key, desktop) -> None:
    key, key_bytes = ticket_key
    wrong = session(SESSION_ID, desktop.port or 0, password="wrongpw1")
    gateway.send_state(state_for(key, wrong, session(SESSION_ID + 1, 1)))

    async def both() -> list[int | None]:
        return [
            await refusal(gateway.url + "/screen", ticket_for(key_bytes, SESSION_ID)[0]),
            await refusal(gateway.url + "/screen", ticket_for(key_bytes, SESSION_ID + 1)[0]),
        ]

    codes = asyncio.run(both())
    assert codes == [CLOSE_UNREACHABLE, CLOSE_UNREACHABLE]
    assert "wrongpw1" not in gateway.log()


def test_counted_input_is_reported_while_the_screen_stays_open(
    gateway, ticket_key, desktop
) -> None:
    key, key_bytes = ticket_key
    gateway.send_state(state_for(key, listed(desktop)))

    async def scenario() -> dict[str, object]:
        browser = await open_screen(gateway, ticket_for(key_bytes, SESSION_ID)[0])
        await pointer_events(browser, 2)
        # The report comes every few seconds while there was input, not only at the close.
        event = await asyncio.to_thread(gateway.event, "input")
        await browser.close()
        return event

    event = asyncio.run(scenario())
    assert event["input_events"] == 2 and event["input_at"] is not None
    assert gateway.event("closed")["input_events"] == 0  # reported already


def test_sigterm_closes_open_screens_and_reports_them_before_the_process_ends(
    gateway, ticket_key, desktop
) -> None:
    key, key_bytes = ticket_key
    gateway.send_state(state_for(key, listed(desktop)))

    async def scenario() -> int | None:
        browser = await open_screen(gateway, ticket_for(key_bytes, SESSION_ID)[0])
        gateway.process.terminate()
        return await closed_with(browser)

    assert asyncio.run(scenario()) == 1001  # going away: the page retries elsewhere
    assert gateway.event("closed")["session_id"] == SESSION_ID
    assert gateway.process.wait(10) == 0
