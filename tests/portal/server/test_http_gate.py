"""The HTTP gate (portal.server.http_gate): people's requests enter a few at a time, in
arrival order; the node agents' API and other protocols pass at once."""

from __future__ import annotations

import asyncio

from portal.server.http_gate import HttpGate


class App:
    """An ASGI application that holds each request until released, counting who is inside."""

    def __init__(self) -> None:
        self.inside: list[str] = []
        self.most = 0
        self.peak = 0  # of every path
        self.entered: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, scope, receive, send) -> None:
        self.inside.append(scope["path"])
        self.entered.append(scope["path"])
        self.peak = max(self.peak, len(self.inside))
        self.most = max(self.most, sum(p.startswith(("/api/v1/", "/p/")) for p in self.inside))
        await self.release.wait()
        self.inside.remove(scope["path"])


def http(path: str, method: str = "GET") -> dict:
    return {"type": "http", "path": path, "method": method}


async def _nothing():
    return {}


async def _drop(message) -> None:
    return None


def test_people_enter_a_few_at_a_time_in_arrival_order_and_agents_pass():
    async def run() -> App:
        app = App()
        gate = HttpGate(app, 2)
        people = [
            asyncio.create_task(gate(http(f"/api/v1/sessions/{n}/"), _nothing, _drop))
            for n in range(6)
        ]
        await asyncio.sleep(0.05)
        assert len(app.inside) == 2  # the other four wait on the loop, not in the app
        agent = asyncio.create_task(gate(http("/api/agent/v1/reports/"), _nothing, _drop))
        socket = asyncio.create_task(gate({"type": "websocket", "path": "/ws/"}, _nothing, _drop))
        await asyncio.sleep(0.05)
        assert "/api/agent/v1/reports/" in app.inside  # past a full gate
        assert "/ws/" in app.inside
        app.release.set()
        await asyncio.gather(*people, agent, socket)
        return app

    app = asyncio.run(run())
    assert app.most == 2
    people = [p for p in app.entered if p.startswith("/api/v1/")]
    assert people == [f"/api/v1/sessions/{n}/" for n in range(6)]


def test_a_limit_of_zero_is_no_gate():
    async def run() -> App:
        app = App()
        gate = HttpGate(app, 0)
        tasks = [asyncio.create_task(gate(http(f"/p/{n}"), _nothing, _drop)) for n in range(5)]
        await asyncio.sleep(0.05)
        assert len(app.inside) == 5
        app.release.set()
        await asyncio.gather(*tasks)
        return app

    assert asyncio.run(run()).most == 5


def test_a_request_that_goes_away_while_waiting_leaves_no_place_taken():
    async def run() -> tuple[App, HttpGate]:
        app = App()
        gate = HttpGate(app, 1)
        held = asyncio.create_task(gate(http("/held"), _nothing, _drop))
        await asyncio.sleep(0.01)
        gone = asyncio.create_task(gate(http("/gone", "POST"), _nothing, _drop))
        after = asyncio.create_task(gate(http("/after", "POST"), _nothing, _drop))
        await asyncio.sleep(0.01)
        gone.cancel()
        app.release.set()
        await asyncio.gather(held, after)
        return app, gate

    app, gate = asyncio.run(run())
    assert app.entered == ["/held", "/after"]
    assert gate._slots is not None and gate._slots._value == 1  # its place is free again
