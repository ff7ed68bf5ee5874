"""Home files, the agent's side (issue 27): the home tasks in a node's desired state, an
upload's bytes the agent fetches, a download's bytes it sends, and its report
(nodeagent/protocol_files.py; the person's side is :mod:`.home_files`).

A node is trusted only for itself: another node's task (or an unknown one) is NotFound, as if
it did not exist; a task no longer PENDING is Conflict (the agent drops it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from nodeagent.protocol_files import HomeTask as WireHomeTask
from nodeagent.protocol_files import HomeTaskReport
from nodeagent.wire_types import cut_reason

from ..choices import AuditKind
from ..models import HomeTask, HomeTaskContent, HomeTaskKind, HomeTaskState, HomeUsage, Node
from ..models.sessions import home_volume_of
from . import Conflict, NotFound, ServiceError
from .audit import record
from .home_files import quota_bytes_of, transfer_max_bytes, waiting_since

CHUNK = 1024 * 1024  # bytes read at a time from a download's body

_AUDITED = {
    HomeTaskKind.UPLOAD: AuditKind.HOME_UPLOADED,
    HomeTaskKind.DOWNLOAD: AuditKind.HOME_DOWNLOADED,
    HomeTaskKind.DELETE: AuditKind.HOME_DELETED,
}


class TooLarge(ServiceError):
    """413: a download's bytes over the transfer limit."""

    def __init__(self, message: str):
        super().__init__(message, code="too_large")


def desired_home_tasks(node: Node) -> list[WireHomeTask]:
    """The node's PENDING home tasks not yet timed out, oldest first, as the wire lists them
    in ``DesiredState.home_tasks``."""
    since = waiting_since(timezone.now())
    tasks = (
        HomeTask.objects.filter(node=node, state=HomeTaskState.PENDING, created_at__gte=since)
        .select_related("user")
        .order_by("pk")
    )
    quotas: dict[int, int] = {}
    out = []
    for task in tasks:
        if task.user_id not in quotas:
            quotas[task.user_id] = quota_bytes_of(task.user)
        out.append(
            WireHomeTask(
                id=task.pk,
                kind=task.kind,  # type: ignore[arg-type]  # HomeTaskKind's values
                home_volume=home_volume_of(task.user),
                path=task.path,
                size=task.size,
                max_bytes=transfer_max_bytes(),
                quota_bytes=quotas[task.user_id],
            )
        )
    return out


def _pending(node: Node, task_id: int) -> HomeTask:
    """The node's own task, still PENDING; NotFound or Conflict otherwise."""
    task = HomeTask.objects.select_related("user").filter(pk=task_id, node=node).first()
    if task is None:
        raise NotFound(
            _("Home task %(id)s is not for %(node)s.") % {"id": task_id, "node": node.hostname}
        )
    if task.state != HomeTaskState.PENDING:
        raise _ended(task_id, task.state)
    return task


def _ended(task_id: int, state: str) -> Conflict:
    return Conflict(_("Home task %(id)s is %(state)s; drop it.") % {"id": task_id, "state": state})


def content_for_agent(node: Node, task_id: int) -> bytes:
    """A PENDING upload's bytes, for the node that writes them."""
    task = _pending(node, task_id)
    if task.kind != HomeTaskKind.UPLOAD:
        raise Conflict(_("Home task %(id)s is not an upload.") % {"id": task_id})
    data = HomeTaskContent.objects.filter(task=task).values_list("data", flat=True).first()
    if data is None:
        raise NotFound(_("Home task %(id)s has no content any more.") % {"id": task_id})
    return bytes(data)


def store_download(node: Node, task_id: int, stream: IO[bytes], length: int | None) -> int:
    """Keep a PENDING download's bytes read from ``stream`` (at most the transfer limit:
    TooLarge beyond it, before reading when ``length`` says so); their count."""
    task = _pending(node, task_id)
    if task.kind != HomeTaskKind.DOWNLOAD:
        raise Conflict(_("Home task %(id)s is not a download.") % {"id": task_id})
    limit = transfer_max_bytes()
    too_large = TooLarge(
        _("Home task %(id)s: a download may carry at most %(max)s bytes.")
        % {"id": task_id, "max": limit}
    )
    if length is not None and length > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while chunk := stream.read(min(CHUNK, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise too_large
    with transaction.atomic():
        if not HomeTask.objects.filter(pk=task.pk, state=HomeTaskState.PENDING).update(size=size):
            raise _ended(task_id, HomeTaskState.FAILED)  # timed out meanwhile
        HomeTaskContent.objects.update_or_create(task=task, defaults={"data": b"".join(chunks)})
    return size


def do_home_report(node: Node, task_id: int, report: HomeTaskReport | Mapping[str, Any]) -> str:
    """End the node's PENDING task as its agent reports it; the task's state (DONE or FAILED).
    A download reported done without its bytes is refused (ServiceError). The audit event
    (an upload written, a download's bytes received, a deletion) names the person as actor:
    their request, carried out by the node."""
    report = HomeTaskReport.model_validate(report)
    now = timezone.now()
    task = _pending(node, task_id)
    with transaction.atomic():
        has_content = HomeTaskContent.objects.filter(task=task).exists()
        if report.ok and task.kind == HomeTaskKind.DOWNLOAD and not has_content:
            raise ServiceError(
                _("Home task %(id)s is a download: send its content (PUT content/) first.")
                % {"id": task_id},
                field="ok",
            )
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
        if task.kind == HomeTaskKind.UPLOAD or (not report.ok and has_content):
            HomeTaskContent.objects.filter(task=task).delete()  # written, or never will be
        if report.ok and task.kind in _AUDITED:
            record(
                _AUDITED[HomeTaskKind(task.kind)],
                f"user:{task.user.get_username()}",
                node=node,
                data={"path": task.path, "size": task.size, "node": node.hostname, "task": task.pk},
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
