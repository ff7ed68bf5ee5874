"""Home files, the agent's side (issue 27): the home tasks in a node's desired state and the
agent's report of each (nodeagent/protocol_files.py; the person's side is :mod:`.home_files`).

A node is trusted only for itself: another node's task (or an unknown one) is NotFound, as if
it did not exist; a task no longer PENDING is Conflict (the agent drops it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from nodeagent.protocol_files import HomeTask as WireHomeTask
from nodeagent.protocol_files import HomeTaskReport
from nodeagent.wire_types import cut_reason

from ..choices import AuditKind
from ..models import HomeTask, HomeTaskKind, HomeTaskState, HomeUsage, Node, Session
from ..models.sessions import home_volume_of
from . import Conflict, NotFound, ServiceError
from .audit import record
from .home_files import waiting_since

# The kinds a node carries out; a row of any other kind (none since migration 0027) is
# neither listed nor ended by a report.
_KINDS = (HomeTaskKind.LIST, HomeTaskKind.DELETE)


def desired_home_tasks(node: Node) -> list[WireHomeTask]:
    """The node's PENDING home tasks not yet timed out, oldest first, as the wire lists them
    in ``DesiredState.home_tasks``."""
    since = waiting_since(timezone.now())
    tasks = (
        HomeTask.objects.filter(
            node=node, state=HomeTaskState.PENDING, created_at__gte=since, kind__in=_KINDS
        )
        .select_related("user")
        .order_by("pk")
    )
    return [
        WireHomeTask(
            id=task.pk,
            kind=task.kind,  # type: ignore[arg-type]  # HomeTaskKind's values
            home_volume=home_volume_of(task.user),
            path=task.path,
        )
        for task in tasks
    ]


def record_home_usage(node: Node, used: Mapping[int, int], at: datetime) -> None:
    """What each session's home holds (session id -> bytes) as its node measured it with the
    heartbeat (a disk-bounded home's statvfs): its owner's :class:`HomeUsage`, the last
    measure the Files page and the desktop page read. The caller passes only the node's own
    sessions. Three queries however many sessions."""
    if not used:
        return
    owners = dict(Session.objects.filter(pk__in=used).values_list("pk", "user_id"))
    by_user = {owners[pk]: size for pk, size in used.items() if pk in owners}
    rows = list(HomeUsage.objects.filter(user_id__in=by_user))
    for row in rows:
        row.used_bytes, row.node_hostname, row.measured_at = by_user[row.user_id], node.hostname, at
    HomeUsage.objects.bulk_update(rows, ["used_bytes", "node_hostname", "measured_at"])
    missing = set(by_user) - {row.user_id for row in rows}
    HomeUsage.objects.bulk_create(
        [
            HomeUsage(user_id=user, used_bytes=size, node_hostname=node.hostname, measured_at=at)
            for user, size in by_user.items()
            if user in missing
        ],
        ignore_conflicts=True,
    )


def _pending(node: Node, task_id: int) -> HomeTask:
    """The node's own task, still PENDING; NotFound or Conflict otherwise."""
    task = HomeTask.objects.select_related("user").filter(pk=task_id, node=node).first()
    if task is None:
        raise NotFound(
            _("Home task %(id)s is not for %(node)s.") % {"id": task_id, "node": node.hostname}
        )
    if task.state != HomeTaskState.PENDING:
        raise _ended(task_id, task.state)
    if task.kind not in _KINDS:  # an older agent's upload or download: 400, never a 500
        raise ServiceError(
            _("Home task %(id)s is a %(kind)s; nodes carry out only list and delete tasks.")
            % {"id": task_id, "kind": task.kind},
            field="kind",
        )
    return task


def _ended(task_id: int, state: str) -> Conflict:
    return Conflict(_("Home task %(id)s is %(state)s; drop it.") % {"id": task_id, "state": state})


def do_home_report(node: Node, task_id: int, report: HomeTaskReport | Mapping[str, Any]) -> str:
    """End the node's PENDING task as its agent reports it; the task's state (DONE or FAILED).
    A deletion done is audited with the person as actor: their request, carried out by the
    node."""
    report = HomeTaskReport.model_validate(report)
    now = timezone.now()
    task = _pending(node, task_id)
    with transaction.atomic():
        if report.ok:
            ended = {
                "state": HomeTaskState.DONE,
                "entries": [entry.model_dump(mode="json") for entry in report.entries],
                "truncated": report.truncated,
            }
        else:
            reason = report.reason or _("The node could not do it.")
            ended = {"state": HomeTaskState.FAILED, "reason": cut_reason(reason)}
        # Conditional: a report racing the timeout (or a second report) changes nothing.
        pending = HomeTask.objects.filter(pk=task.pk, state=HomeTaskState.PENDING)
        if not pending.update(finished_at=now, **ended):
            raise _ended(task_id, HomeTask.objects.get(pk=task.pk).state)
        if report.ok and task.kind == HomeTaskKind.DELETE:
            record(
                AuditKind.HOME_DELETED,
                f"user:{task.user.get_username()}",
                node=node,
                data={"path": task.path, "node": node.hostname, "task": task.pk},
            )
        if report.used_bytes is not None:
            HomeUsage.objects.update_or_create(
                user=task.user,
                defaults={
                    "used_bytes": report.used_bytes,
                    "node_hostname": node.hostname,
                    "measured_at": now,
                },
            )
    return str(ended["state"])
