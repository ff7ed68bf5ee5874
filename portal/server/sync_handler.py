"""Django's ASGI handler with the whole request in one thread: the middleware and the view.

Django's own ``ASGIHandler`` builds its middleware chain for async: with every middleware
sync (as here: ``tests/portal/server/test_middleware_chain.py``), a request goes from the
event loop into a thread for the middleware, back to the event loop for Django's view
caller (``_get_response_async``) and into the thread again for the (sync) view: two more
trips through the event loop than the work needs. In a class-start storm the event loop
is busy (two hundred sockets, every response) and waits its turn for the interpreter lock,
so each trip waits too. Every view of the portal is sync, so this handler builds the chain
for sync, as under WSGI, and runs ``get_response`` in the request's thread: one trip in,
one out. Everything else (the body, the signals, the disconnect watch, the response) is
Django's ``ASGIHandler``.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase


class OneThreadASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        # The request's own thread (ThreadSensitiveContext, entered by ASGIHandler.__call__).
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
