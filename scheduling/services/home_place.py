"""Where a session's home folder lives, for the session page (issue 13, docs/deploy.md).

A node whose agent keeps homes under a root every node shares (``DESKPOOL_HOME_ROOT``, told
at registration: ``Node.home_root_shared``) gives the student the same home on any node
sharing it; any other node keeps the home to itself, so a desktop started elsewhere (after a
requeue) starts with a different, empty one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..choices import TERMINAL_STATES
from ..models import Session


@dataclass(frozen=True)
class HomePlace:
    node: str
    shared: bool


def home_place(session: Session) -> HomePlace | None:
    """The node holding the session's home and whether other nodes share it; None before
    the session is placed and after it ended."""
    node = session.node
    if node is None or session.state in TERMINAL_STATES:
        return None
    return HomePlace(node=node.hostname, shared=node.home_root_shared)
