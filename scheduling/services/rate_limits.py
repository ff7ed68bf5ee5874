"""How often a person may submit and stop desktop sessions (docs/security.md, "Rate limits").

Each person has one bucket per action (``submit``, ``stop``) in Redis (``LOCK_REDIS_URL``,
the embedded Redis by default), so the limit holds across every ASGI process: a burst of
``SESSION_RATE_BURST`` requests at once, then one every ``SESSION_RATE_PERIOD_S`` seconds
(the generic cell rate algorithm, one atomic script per request). A request over the limit
raises :class:`RateLimited` before anything is written: no session, no audit event, no
container. Only a person's own requests (the API and the pages) are counted; the services'
other callers (the scheduler, the console, the benchmarks' direct calls) are not.

Redis that does not answer lets the request through (logged): the limit protects the pool, it
must not take the portal down with it.
"""

from __future__ import annotations

import logging
import math
import time

import redis
from django.conf import settings
from django.contrib.auth.models import User
from django.utils.translation import ngettext

from ..redis_client import shared_redis
from . import ServiceError

log = logging.getLogger(__name__)

SUBMIT = "submit"
STOP = "stop"
ACTIONS = frozenset({SUBMIT, STOP})

# KEYS[1]: the bucket; ARGV: now, period, burst (seconds, seconds, count). The bucket holds
# the "theoretical arrival time" (TAT) of the next request: a request is allowed when
# TAT - now stays within burst - 1 periods, and moves the TAT one period on. Returns "0"
# when allowed, otherwise the seconds to wait (as a string: Lua numbers become integers).
_GCRA = """
local now = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or ARGV[1])
if tat < now then tat = now end
local wait = tat - now - (burst - 1) * period
if wait > 0 then return tostring(wait) end
local next_tat = tat + period
redis.call('SET', KEYS[1], tostring(next_tat), 'PX', math.ceil((next_tat - now) * 1000) + 1000)
return '0'
"""


class RateLimited(ServiceError):
    """Too many requests in a short time; ``retry_after`` says after how many seconds the
    next one is taken (the API's ``Retry-After``)."""

    def __init__(self, retry_after: int):
        super().__init__(rate_limit_message(retry_after), code="throttled")
        self.retry_after = retry_after


def rate_limit_message(seconds: int) -> str:
    return ngettext(
        "You sent too many requests in a short time. Try again in %(seconds)d second.",
        "You sent too many requests in a short time. Try again in %(seconds)d seconds.",
        seconds,
    ) % {"seconds": seconds}


def _key(user: User, action: str) -> str:
    return f"deskpool:rate:{action}:{user.pk}"


def check_session_rate(user: User, action: str, now: float | None = None) -> None:
    """Count one ``action`` (SUBMIT or STOP) of ``user``; raise :class:`RateLimited` when it
    is over the limit. A period of 0 turns the limit off."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    period = float(settings.SESSION_RATE_PERIOD_S)
    burst = int(settings.SESSION_RATE_BURST)
    if period <= 0:
        return
    moment = time.time() if now is None else now
    try:
        answer = shared_redis().eval(_GCRA, 1, _key(user, action), repr(moment), period, burst)
    except redis.RedisError as error:
        log.warning("session rate limit not checked (Redis: %s); request let through", error)
        return
    wait = float(answer)
    if wait > 0:
        raise RateLimited(max(1, math.ceil(wait)))
