"""The process's Redis client for locks, versions and wake-ups (``settings.LOCK_REDIS_URL``)."""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings


@lru_cache(maxsize=1)
def shared_redis() -> redis.Redis:
    """One client (with its own connection pool) per process; thread-safe."""
    # redis-py caps a pool at 100 connections and fails past that; one per thread is fine.
    return redis.Redis.from_url(settings.LOCK_REDIS_URL, socket_timeout=5, max_connections=1000)


def wake_channel() -> str:
    """The pub/sub channel of agent wake-ups. Pub/sub is not per Redis database, so the
    channel names the database: two portals on one Redis server never wake each other."""
    db = shared_redis().connection_pool.connection_kwargs.get("db", 0)
    return f"deskpool:{db}:agent-wake"
