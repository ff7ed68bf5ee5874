"""Under ASGI the middleware runs in one thread: one switch from the event loop into the
sync chain and one to the view, not a switch through the loop for each async-capable
middleware (each waits for a busy loop in a class-start storm)."""

from __future__ import annotations

from asgiref.sync import AsyncToSync, SyncToAsync
from django.core.handlers.asgi import ASGIHandler


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


def test_the_middleware_runs_in_one_thread_switch_under_asgi():
    steps = chain_of(ASGIHandler())
    adapters = [(n, s) for n, s in enumerate(steps) if s in ("SyncToAsync", "AsyncToSync")]
    # Into the sync chain at the top; back to the loop only for Django's own view caller.
    assert adapters == [(0, "SyncToAsync"), (len(steps) - 2, "AsyncToSync")], steps
    assert steps[-1] == "_get_response_async"
    assert {"AxesMiddleware", "MessageMiddleware", "JsonDepthLimit"} <= set(steps)
