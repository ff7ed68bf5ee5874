"""Under ASGI a request's middleware and view run in one thread: one switch from the event
loop into the sync chain, none back to the loop for the view (portal.server.sync_handler),
and not a switch through the loop for each async-capable middleware (each waits for a busy
loop in a class-start storm)."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import AsyncToSync, SyncToAsync, async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler

from portal.server.sync_handler import OneThreadASGIHandler


def chain_of(handler: ASGIHandler) -> list[str]:
    """The ASGI middleware chain, outermost first: middleware class names and the
    adapters Django put between them (``SyncToAsync``, ``AsyncToSync``)."""
    steps: list[str] = []
    node = handler._middleware_chain
    while node is not None and len(steps) < 100:
        if isinstance(node, SyncToAsync):
            steps.append("SyncToAsync")
            node = node.func
        elif isinstance(node, AsyncToSync):
            steps.append("AsyncToSync")
            node = node.awaitable
        elif hasattr(node, "__wrapped__"):  # convert_exception_to_response's wrapper
            node = node.__wrapped__
        elif hasattr(node, "get_response"):
            steps.append(type(node).__name__)
            node = node.get_response
        else:
            steps.append(node.__name__)
            break
    return steps


def test_djangos_own_asgi_chain_has_one_switch_in_and_one_back_for_the_view():
    steps = chain_of(ASGIHandler())
    adapters = [(n, s) for n, s in enumerate(steps) if s in ("SyncToAsync", "AsyncToSync")]
    # Into the sync chain at the top; back to the loop only for Django's own view caller.
    assert adapters == [(0, "SyncToAsync"), (len(steps) - 2, "AsyncToSync")], steps
    assert steps[-1] == "_get_response_async"
    assert {"AxesMiddleware", "MessageMiddleware", "JsonDepthLimit"} <= set(steps)


def test_the_portals_handler_runs_middleware_and_view_without_a_switch():
    steps = chain_of(OneThreadASGIHandler())
    assert not [s for s in steps if s in ("SyncToAsync", "AsyncToSync")], steps
    assert steps[-1] == "_get_response"
    assert {"AxesMiddleware", "MessageMiddleware", "JsonDepthLimit"} <= set(steps)


@pytest.mark.django_db(transaction=True)
def test_a_request_through_the_portals_handler_runs_in_one_thread_off_the_loop():
    threads: list[int] = []

    class Recording(OneThreadASGIHandler):
        def _get_response(self, request):  # the view's caller, innermost in the chain
            threads.append(threading.get_ident())
            return super()._get_response(request)

    handler = Recording()
    outer = handler._middleware_chain

    def chain(request):
        threads.append(threading.get_ident())
        return outer(request)

    handler._middleware_chain = chain
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/login/",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    loop_thread: list[int] = []

    async def run() -> tuple[dict, dict]:
        loop_thread.append(threading.get_ident())
        talk = ApplicationCommunicator(handler, scope)
        await talk.send_input({"type": "http.request", "body": b"", "more_body": False})
        return await talk.receive_output(10), await talk.receive_output(10)

    start, body = async_to_sync(run)()
    assert start["status"] == 200, start
    assert b'name="username"' in body["body"]
    # The middleware and the view in one thread, which is not the event loop's.
    assert len(threads) == 2 and threads[0] == threads[1], threads
    assert threads[0] not in loop_thread
