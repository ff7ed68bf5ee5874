"""Telling node agents that what they should run changed (docs/agent-protocol.md, "wait").

Each node has a desired-state version in Redis. After every commit that changes what a node
should run (a session placed on it or leaving it, a warm desktop added or dropped), the
version is bumped and the node's id published on one pub/sub channel; the agent's open
long-poll (``portal.agents.wait``) wakes and answers the new desired state. The agent
sends back the version it has: a change made between its last answer and its next wait is
seen at once, not lost. If Redis is down, nothing is published and agents catch up at the
end of their wait (the slow fallback poll).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis
from django.db import transaction

from ..redis_client import shared_redis, wake_channel

log = logging.getLogger(__name__)


def version_key(node_id: int) -> str:
    return f"deskpool:node:{node_id}:desired"


def desired_version(node_id: int) -> int:
    """The node's desired-state version now (0 when never bumped or Redis is down)."""
    try:
        value = shared_redis().get(version_key(node_id))
    except redis.RedisError:
        log.warning("agent wake: the version of node %s is not readable", node_id)
        return 0
    return int(value) if value else 0


def wake_nodes(node_ids: Iterable[int | None]) -> None:
    """Wake these nodes' agents once the current transaction commits."""
    ids = sorted({n for n in node_ids if n})
    if ids:
        transaction.on_commit(lambda: _wake(ids))


def _wake(ids: list[int]) -> None:
    pipe = shared_redis().pipeline(transaction=False)
    for node_id in ids:
        pipe.incr(version_key(node_id))
    channel = wake_channel()
    for node_id in ids:
        pipe.publish(channel, str(node_id))
    try:
        pipe.execute()
    except redis.RedisError:
        log.warning("agent wake: nodes %s not woken (Redis); their wait will time out", ids)
