"""The gateway process without a desktop: its lines, its end, the state it keeps, and every
refusal before anything is opened upstream (a listener stands in for the desktop and counts
the connections it gets)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from nodeagent.gateway.codes import (
    CLOSE_BUSY,
    CLOSE_FORBIDDEN,
    CLOSE_SESSION_ENDED,
    CLOSE_SIGNED_OUT,
    CLOSE_TICKET_EXPIRED,
    CLOSE_TICKET_FOREIGN,
    CLOSE_TICKET_INVALID,
    CLOSE_TICKET_REPLAYED,
)
from tests.nodeagent.gateway.browser import closed_with, open_socket, refusal
from tests.nodeagent.gateway.gateway_process import (
    NODE_ID,
    ORIGIN,
    GatewayProcess,
    new_key,
    revoked,
    session,
    state_for,
    ticket_for,
)


class SilentDesktop:
    """A TCP listener that takes connections, counts them and never answers."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0


@asynccontextmanager
async def silent_desktop() -> AsyncIterator[SilentDesktop]:
    desktop = SilentDesktop()
    held: list[asyncio.StreamWriter] = []

    async def take(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        desktop.connections += 1
        held.append(writer)

    server = await asyncio.start_server(take, "127.0.0.1", 0)
    desktop.port = server.sockets[0].getsockname()[1]
    async with server:
        yield desktop
        for writer in held:
            writer.close()


def test_the_first_line_names_the_port_and_the_end_of_stdin_ends_the_process(gateway) -> None:
    assert gateway.port > 0
    assert gateway.process.stdin is not None
    gateway.process.stdin.close()  # the agent died
    assert gateway.process.wait(10) == 0
    assert gateway.lines.empty()  # nothing else on stdout


def test_sigterm_ends_the_process_cleanly(gateway) -> None:
    gateway.process.terminate()
    assert gateway.process.wait(10) == 0
    assert "stopped" in gateway.log()


def test_before_any_state_every_origin_is_refused(gateway) -> None:
    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(open_socket(gateway.url + "/screen"))
    assert refused.value.response.status_code == 403


def test_an_unknown_path_is_404_and_a_foreign_or_missing_origin_403(gateway, ticket_key) -> None:
    gateway.send_state(state_for(ticket_key[0]))

    async def status(path: str, origin: str | None) -> int:
        try:
            if origin is None:
                await connect(gateway.url + path, open_timeout=10)
            else:
                await open_socket(gateway.url + path, origin)
        except InvalidStatus as refused:
            return refused.response.status_code
        return 101

    async def statuses() -> list[int]:
        for _ in range(100):  # the state line may not have been applied yet
            if await status("/screen", ORIGIN) == 101:
                break
            await asyncio.sleep(0.05)
        return [
            await status("/nowhere", ORIGIN),
            await status("/screen", "https://evil.example.com"),
            await status("/sound", ORIGIN + ".evil.example.com"),
            await status("/screen", None),
            await status("/screen?x=1", ORIGIN),
        ]

    assert asyncio.run(statuses()) == [404, 403, 403, 403, 101]


def wait_until_applied(gateway: GatewayProcess) -> None:
    """Until the gateway takes the Origin of the state just sent."""

    async def upgrade() -> bool:
        try:
            browser = await open_socket(gateway.url + "/screen")
        except InvalidStatus:
            return False
        await browser.close()
        return True

    deadline = time.monotonic() + 10
    while not asyncio.run(upgrade()):
        assert time.monotonic() < deadline, gateway.log()
        time.sleep(0.05)


def test_refused_tickets_close_with_their_code_and_open_nothing(gateway, ticket_key) -> None:
    key, key_bytes = ticket_key
    _other_key, other_bytes = new_key()
    now = int(time.time())
    _kept, kept = ticket_for(key_bytes, 1)
    signed_out_text, signed_out = ticket_for(key_bytes, 1)
    forbidden_text, forbidden = ticket_for(key_bytes, 1)

    async def scenario() -> tuple[dict[str, int | None], int]:
        async with silent_desktop() as desktop:
            listed = session(
                1,
                desktop.port,
                revoked=[revoked(signed_out, "signed_out"), revoked(forbidden, "forbidden")],
            )
            gateway.send_state(state_for(key, listed))
            await asyncio.to_thread(wait_until_applied, gateway)
            screen = gateway.url + "/screen"
            replayed, _ = ticket_for(key_bytes, 2)  # 2: not in the state
            codes = {
                "garbage": await refusal(screen, "not a ticket"),
                "binary": await refusal(screen, ticket_for(key_bytes, 1)[0].encode()),
                "forged": await refusal(screen, ticket_for(other_bytes, 1)[0]),
                "tampered": await refusal(screen, tamper(ticket_for(key_bytes, 1)[0])),
                "unknown key": await refusal(screen, ticket_for(key_bytes, 1, kid=99)[0]),
                "other node": await refusal(screen, ticket_for(key_bytes, 1, nid=NODE_ID + 1)[0]),
                "for sound": await refusal(screen, ticket_for(key_bytes, 1, purpose="sound")[0]),
                "expired": await refusal(
                    screen, ticket_for(key_bytes, 1, iat=now - 60, exp=now - 30)[0]
                ),
                "from the future": await refusal(
                    screen, ticket_for(key_bytes, 1, iat=now + 60, exp=now + 90)[0]
                ),
                "session gone": await refusal(screen, replayed),
                "replayed": await refusal(screen, replayed),
                "signed out": await refusal(screen, signed_out_text),
                "forbidden": await refusal(screen, forbidden_text),
                "no ticket": await refusal(screen, None),
            }
            return codes, desktop.connections

    codes, upstream_connections = asyncio.run(scenario())
    assert codes == {
        "garbage": CLOSE_TICKET_INVALID,
        "binary": CLOSE_TICKET_INVALID,
        "forged": CLOSE_TICKET_INVALID,
        "tampered": CLOSE_TICKET_INVALID,
        "unknown key": CLOSE_TICKET_FOREIGN,
        "other node": CLOSE_TICKET_FOREIGN,
        "for sound": CLOSE_TICKET_FOREIGN,
        "expired": CLOSE_TICKET_EXPIRED,
        "from the future": CLOSE_TICKET_EXPIRED,
        "session gone": CLOSE_SESSION_ENDED,
        "replayed": CLOSE_TICKET_REPLAYED,
        "signed out": CLOSE_SIGNED_OUT,
        "forbidden": CLOSE_FORBIDDEN,
        "no ticket": CLOSE_TICKET_INVALID,
    }
    assert upstream_connections == 0
    log = gateway.log()
    assert "s3cretpw" not in log and signed_out_text not in log and kept.jti not in log


def tamper(text: str) -> str:
    """The ticket with its claims changed (another session) and the old signature."""
    claims, signature = text.split(".")
    raw = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    raw["sid"] += 1
    forged = base64.urlsafe_b64encode(json.dumps(raw).encode()).rstrip(b"=").decode()
    return f"{forged}.{signature}"


def test_a_desktop_takes_at_most_eight_screens_and_four_sounds(gateway, ticket_key) -> None:
    key, key_bytes = ticket_key

    async def scenario() -> tuple[list[int | None], int]:
        async with silent_desktop() as desktop:
            gateway.send_state(state_for(key, session(1, desktop.port, audio_port=desktop.port)))
            await asyncio.to_thread(wait_until_applied, gateway)
            held = []
            for _ in range(8):
                browser = await open_socket(gateway.url + "/screen")
                await browser.send(ticket_for(key_bytes, 1)[0])
                held.append(browser)
            while desktop.connections < 8:  # each is logging in to the (silent) desktop
                await asyncio.sleep(0.05)
            ninth = await refusal(gateway.url + "/screen", ticket_for(key_bytes, 1)[0])
            for browser in held:
                await browser.close()
            return [ninth], desktop.connections

    codes, connections = asyncio.run(scenario())
    assert codes == [CLOSE_BUSY]
    assert connections == 8


def test_a_malformed_or_over_long_state_line_is_logged_and_the_old_state_kept(
    gateway, ticket_key
) -> None:
    key, _key_bytes = ticket_key
    gateway.send_state(state_for(key))
    wait_until_applied(gateway)
    gateway.send_line(b"{this is not JSON")
    gateway.send_line(b'{"node_id": 7, "origins": ["x"], "sessions": [{"password": "s3cretpw"}]}')
    gateway.send_line(b"[" + b" " * (5 * 1024 * 1024) + b"]")
    log = gateway.wait_for_log("over 4194304 bytes")
    assert log.count("a malformed state line") == 2
    assert "s3cretpw" not in log
    wait_until_applied(gateway)  # the old origins still hold
    assert gateway.process.poll() is None


def test_a_browser_that_never_sends_its_ticket_is_closed(gateway, ticket_key) -> None:
    gateway.send_state(state_for(ticket_key[0]))
    wait_until_applied(gateway)

    async def silent() -> int | None:
        async with await open_socket(gateway.url + "/sound") as browser:
            return await closed_with(browser)

    assert asyncio.run(silent()) == CLOSE_TICKET_INVALID


def test_a_sound_ticket_for_a_desktop_without_sound_is_4404(gateway, ticket_key) -> None:
    key, key_bytes = ticket_key

    async def scenario() -> int | None:
        async with silent_desktop() as desktop:
            gateway.send_state(state_for(key, session(1, desktop.port)))
            await asyncio.to_thread(wait_until_applied, gateway)
            return await refusal(gateway.url + "/sound", ticket_for(key_bytes, 1, "sound")[0])

    assert asyncio.run(scenario()) == 4404


def test_the_ticket_text_never_reaches_the_log_even_when_signed_with_a_foreign_key(
    gateway, ticket_key
) -> None:
    key, _key_bytes = ticket_key
    gateway.send_state(state_for(key))
    wait_until_applied(gateway)
    text, _ticket = ticket_for(b"k" * 32, 1)
    assert asyncio.run(refusal(gateway.url + "/screen", text)) == CLOSE_TICKET_INVALID
    assert text.split(".")[1] not in gateway.log()


def test_the_process_ends_when_its_parent_goes_while_a_socket_is_open(gateway, ticket_key) -> None:
    gateway.send_state(state_for(ticket_key[0]))
    wait_until_applied(gateway)

    async def scenario() -> int | None:
        browser = await open_socket(gateway.url + "/screen")
        assert gateway.process.stdin is not None
        gateway.process.stdin.close()
        return await closed_with(browser)

    code = asyncio.run(scenario())
    assert gateway.process.wait(10) == 0
    assert code in (1001, CLOSE_TICKET_INVALID)
