"""Celery beat with a lock: one beat sends the periodic tasks, a second one stands by.

``CELERY_BEAT_SCHEDULER`` names :class:`LockedScheduler`. Each beat tries to hold one Redis
lock (``deskpool:beat:lock``, with an expiry, renewed while it runs); only the holder sends
due tasks. A second beat started by mistake, or on purpose as a hot standby, sends nothing
until the holder stops or dies, then takes over within the lock's expiry
(``DESKPOOL_BEAT_LOCK_S``). The tasks themselves stay harmless if sent twice (each expires
after one period; the scheduling cycle is single-flight), so the lock keeps the load down,
not correctness up.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import redis
from celery.beat import PersistentScheduler
from django.conf import settings
from redis.exceptions import LockError

from scheduling.redis_client import shared_redis

log = logging.getLogger(__name__)

BEAT_LOCK = "deskpool:beat:lock"


class LockedScheduler(PersistentScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock_s = float(settings.BEAT_LOCK_S)
        self.lock = shared_redis().lock(
            BEAT_LOCK, timeout=self.lock_s, blocking=False, thread_local=False
        )
        self.held = False
        self.standby_logged = False
        self.renew_at = 0.0

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if not self.leading():
            return min(self.lock_s / 3, float(self.max_interval))
        return float(super().tick(*args, **kwargs))

    def leading(self) -> bool:
        """Hold (or renew) the lock; False while another beat holds it."""
        now = time.monotonic()
        if self.held and now < self.renew_at:
            return True
        was_held = self.held
        try:
            self.held = self.lock.reacquire() if self.held else self.lock.acquire()
        except LockError:
            self.held = False  # expired while we were stuck, and another beat took it
        except redis.RedisError as error:
            log.warning("beat: the lock is not reachable (%s); sending nothing", error)
            self.held = False
        if self.held:
            self.renew_at = now + self.lock_s / 3
            if not was_held:
                log.info("beat: holding %s; this beat sends the periodic tasks", BEAT_LOCK)
        elif was_held or not self.standby_logged:
            self.standby_logged = True
            log.info("beat: another beat holds %s; standing by", BEAT_LOCK)
        return self.held

    def close(self) -> None:
        if self.held:
            # Expired already: the other beat may hold it now.
            with contextlib.suppress(LockError, redis.RedisError):
                self.lock.release()
            self.held = False
        super().close()
