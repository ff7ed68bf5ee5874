"""Home files (issue 27): the Files page's tasks in a person's home (list a folder, delete),
which the node keeping the home carries out (nodeagent/protocol_files.py; docs/lifecycle.md
"Home files"). A file's bytes never pass here: uploads and downloads go through the node's
gateway with a ticket (:mod:`.home_transfers`).

The portal never reaches a node's disk: a task is a ``HomeTask`` row of the node keeping the
home, listed in that node's desired state while PENDING (creating one wakes the node's
agent), and ended by the agent's report (:mod:`.home_files_agent`) or, when the node does
not answer within ``HOME_TASK_TIMEOUT_S``, failed when the page next asks.

Sizes: MB is 1024 * 1024 bytes (the settings, ``Quota.max_home_mb`` and the sentences).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from nodeagent.home_files import HOME_FULL_AT, portal_own
from nodeagent.protocol_files import HOME_PATH_MAX, home_path
from nodeagent.wire_types import REASON_MAX_CHARS

from ..choices import SessionState
from ..models import (
    HomeTask,
    HomeTaskKind,
    HomeTaskState,
    HomeUsage,
    Node,
    Quota,
    QuotaScope,
    Session,
)
from . import ServiceError
from .agent_wake import wake_nodes
from .home_place import last_run_node

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MB = 1024 * 1024
PENDING_MAX = 5  # a person's tasks waiting for their node at once
TASK_KEPT = timedelta(days=1)  # a task's row (its listing, its reason)
# Desktops whose node keeps the home the person works in now (their files are there).
RUNNING_STATES = (SessionState.STARTING, SessionState.RUNNING, SessionState.PREEMPTING)


class FilesRefused(ServiceError):
    """A home task (or a transfer) the portal does not start; ``message`` says what to do
    next."""


@dataclass
class FilesPlace:
    """Where a person's home is, and what it may hold."""

    node: Node | None  # the node whose agent carries out the tasks; None: see reason
    shared: bool  # the home is under a root every node shares
    reason: str  # why there is no node ("" when there is one)
    used_bytes: int | None  # what the home held when last measured (None: never)
    measured_at: datetime | None
    quota_bytes: int  # 0: no quota
    running: bool  # a desktop of this person runs on that node now


def quota_bytes_of(user: User) -> int:
    """The person's home quota in bytes (0: none): their user-scope quota's ``max_home_mb``,
    else the user-scope default's (key ``*``), else ``HOME_QUOTA_MB``."""
    return quota_bytes_of_many([user.get_username()])[user.get_username()]


def quota_bytes_of_many(usernames: Iterable[str]) -> dict[str, int]:
    """:func:`quota_bytes_of` for several people by username, in one query (an agent's
    desired state names every desktop's home quota)."""
    names = set(usernames)
    limits = dict(
        Quota.objects.filter(
            scope=QuotaScope.USER, key__in=[*names, "*"], max_home_mb__isnull=False
        ).values_list("key", "max_home_mb")
    )
    default = limits.get("*", settings.HOME_QUOTA_MB)
    return {name: int(limits.get(name, default)) * MB for name in names}


def home_full(used_bytes: int | None, quota_bytes: int) -> bool:
    """Whether a home that held ``used_bytes`` when last measured is full of its quota (at
    HOME_FULL_AT of it: the node's disk refuses writes a little before the last byte)."""
    return bool(quota_bytes and used_bytes is not None and used_bytes >= quota_bytes * HOME_FULL_AT)


def home_is_full(user: User) -> bool:
    """Whether the person's home was full when last measured (the desktop page says so)."""
    usage = HomeUsage.objects.filter(user=user).first()
    return usage is not None and home_full(usage.used_bytes, quota_bytes_of(user))


def megabytes(size: int) -> str:
    """``size`` bytes as a sentence shows them: "12.5 MB" (at least 0.1 MB but for nothing;
    GB from 1,024 MB on)."""
    if size >= 1024 * MB:
        return _("%(size)s GB") % {"size": f"{size / (1024 * MB):.1f}"}
    value = max(size / MB, 0.1) if size else 0.0
    return _("%(size)s MB") % {"size": f"{value:.1f}" if value < 100 else f"{value:.0f}"}


def _answering(node: Node, now: datetime) -> bool:
    """The node's agent is alive (a heartbeat within NODE_HEARTBEAT_TIMEOUT_S); a cordoned
    or draining node still carries out home tasks."""
    if node.last_heartbeat is None:
        return False
    return (now - node.last_heartbeat).total_seconds() <= settings.NODE_HEARTBEAT_TIMEOUT_S


def files_place(user: User) -> FilesPlace:
    """The node for this person's home: (a) the node of a desktop of theirs starting or
    running now; else (b) where their latest desktop ran, if that node keeps homes to itself
    (``home_place.last_run_node``); else (c) when some node shares homes, one of those that
    answers; else none. A home whose node does not answer gets no node either."""
    now = timezone.now()
    usage = HomeUsage.objects.filter(user=user).first()
    node, reason, running = _home_node(user, now)
    return FilesPlace(
        node=node,
        shared=node is not None and node.home_root_shared,
        reason=reason,
        used_bytes=usage.used_bytes if usage else None,
        measured_at=usage.measured_at if usage else None,
        quota_bytes=quota_bytes_of(user),
        running=running,
    )


def _home_node(user: User, now: datetime) -> tuple[Node | None, str, bool]:
    desktop = (
        Session.objects.filter(user=user, state__in=RUNNING_STATES, node__isnull=False)
        .select_related("node")
        .order_by("-pk")
        .first()
    )
    node = desktop.node if desktop is not None else None
    if node is None:
        last = last_run_node(user)
        node = last if last is not None and not last.home_root_shared else None
    if node is not None:
        if not _answering(node, now):
            return None, _not_answering(node.hostname), False
        return node, "", desktop is not None
    shared = list(Node.objects.filter(home_root_shared=True).order_by("cordoned", "hostname"))
    if not shared:
        return None, _("Your home folder is made when your first desktop starts. Start a "
                       "desktop, then come back to add files."), False  # fmt: skip
    answering = [n for n in shared if _answering(n, now)]
    if not answering:
        return None, _not_answering(", ".join(n.hostname for n in shared[:3])), False
    return answering[0], "", False


def _not_answering(host: str) -> str:
    return _(
        "The node that keeps your home (%(host)s) is not answering. Your files are kept "
        "there; try again later."
    ) % {"host": host}


def checked_path(path: str) -> str:
    """A path in the home as a person typed it, or FilesRefused saying what is wrong."""
    if len(path) > HOME_PATH_MAX:
        raise FilesRefused(
            _("That path is too long: at most %(max)s characters.") % {"max": HOME_PATH_MAX}
        )
    try:
        return home_path(path)
    except ValueError:
        raise FilesRefused(
            _(
                "That path cannot be used: give names joined by '/', without '.', '..' or "
                "empty names and without control characters, each at most 255 bytes."
            )
        ) from None


def check_deletable(path: str) -> None:
    """Refuse (FilesRefused) deleting the portal's own files in a home (``.deskpool`` and what
    it holds, an upload's temporary file: ``nodeagent.home_files.portal_own``); the node's
    agent refuses them too."""
    if portal_own(path):
        raise FilesRefused(
            _(
                "%(name)s holds the portal's own files for your desktops (such as when each "
                "one stopped): it cannot be deleted."
            )
            % {"name": path}
        )


def start_task(user: User, kind: str, path: str = "") -> HomeTask:
    """Give the node keeping the person's home a task (list the folder ``path``, or delete
    ``path``) and wake its agent; FilesRefused when it cannot be done (no node, bad path, too
    many tasks waiting)."""
    _purge()
    if kind not in HomeTaskKind.values:
        raise FilesRefused(_("Choose list or delete."))
    path = checked_path(path)
    if kind == HomeTaskKind.DELETE and not path:
        raise FilesRefused(_("Choose a file or folder in your home."))
    if kind == HomeTaskKind.DELETE:
        check_deletable(path)
    place = files_place(user)
    if place.node is None:
        raise FilesRefused(place.reason)
    now = timezone.now()
    waiting = HomeTask.objects.filter(
        user=user,
        state=HomeTaskState.PENDING,
        created_at__gte=waiting_since(now),
    ).count()
    if waiting >= PENDING_MAX:
        raise FilesRefused(
            _(
                "%(count)s of your file tasks are waiting for %(host)s: wait for them to "
                "finish, then try again."
            )
            % {"count": waiting, "host": place.node.hostname}
        )
    with transaction.atomic():
        task = HomeTask.objects.create(
            user=user, node=place.node, kind=kind, path=path, created_at=now
        )
        wake_nodes([place.node.pk])
    return task


def task_for(user: User, task_id: int) -> HomeTask:
    """The person's own task (else ``HomeTask.DoesNotExist``); a PENDING one older than
    ``HOME_TASK_TIMEOUT_S`` is failed first: its node did not answer."""
    task = HomeTask.objects.select_related("node").get(pk=task_id, user=user)
    now = timezone.now()
    if task.state == HomeTaskState.PENDING and timed_out(task, now):
        reason = _(
            "%(host)s did not answer in time. Try again; if it keeps happening, the node may "
            "be down."
        ) % {"host": task.node.hostname}
        HomeTask.objects.filter(pk=task.pk, state=HomeTaskState.PENDING).update(
            state=HomeTaskState.FAILED, reason=reason[:REASON_MAX_CHARS], finished_at=now
        )
        task.refresh_from_db()
    return task


def waiting_since(now: datetime) -> datetime:
    """The oldest start a task still waiting for its node may have: one started earlier has
    timed out (``HOME_TASK_TIMEOUT_S``)."""
    return now - timedelta(seconds=settings.HOME_TASK_TIMEOUT_S)


def timed_out(task: HomeTask, now: datetime) -> bool:
    return task.created_at < waiting_since(now)


def _purge() -> None:
    """Forget old tasks (one delete on the indexed ``created_at``): a task's row (listing,
    reason) is kept TASK_KEPT."""
    now = timezone.now()
    HomeTask.objects.filter(created_at__lt=now - TASK_KEPT).delete()
