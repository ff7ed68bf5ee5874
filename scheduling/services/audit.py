"""The audit trail: the one place events are written, and the retention task's pruning.

Events are append-only (docs/audit.md): the database refuses UPDATE, and DELETE but of
events older than the retention period. Every event gets the address of the client whose
request is being served (``portal.server.middleware.ClientAddressMiddleware`` sets it, the field's
default reads it); outside a request (scheduler, tasks) it stays empty.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import AuditKind
from ..events import broadcast_audit
from ..models import MIN_RETENTION_DAYS, AuditEvent, AuditRetention
from ..models.audit import client_address
from . import ServiceError

log = logging.getLogger(__name__)

# The retention task deletes events this much older than the limit, so that the database's
# clock (which the trigger reads) running a little behind the portal's never refuses one.
RETENTION_SLACK = timedelta(hours=1)


@contextmanager
def requests_from(address: str | None) -> Iterator[None]:
    """Within the block, every event recorded carries ``address``."""
    token = client_address.set(address)
    try:
        yield
    finally:
        client_address.reset(token)


def _id(value: models.Model | int | None) -> int | None:
    return value.pk if isinstance(value, models.Model) else value


def record(
    kind: str,
    actor: str,
    *,
    session: models.Model | int | None = None,
    node: models.Model | int | None = None,
    data: Mapping[str, Any] | None = None,
    at: datetime | None = None,
) -> AuditEvent:
    """Write one audit event: what (``kind``), who (``actor``: user:<name>, node:<host>,
    scheduler), about which session and node (objects or ids), the details (before/after
    in ``data``), when, and from which address (the current request's, if any)."""
    event = AuditEvent.objects.create(
        kind=kind,
        actor=actor,
        session_id=_id(session),
        node_id=_id(node),
        data=dict(data or {}),
        at=at or timezone.now(),
    )
    broadcast_audit(kind)  # the console's pages refresh (after commit)
    return event


def record_many(
    kind: str, actor: str, events: Sequence[tuple[int | None, int | None, Mapping[str, Any]]]
) -> list[AuditEvent]:
    """Write several events of one kind by one actor at once, each ``(session id, node id,
    data)``, as :func:`record` would one by one (an agent's batch of reports)."""
    at = timezone.now()
    rows = [
        AuditEvent(kind=kind, actor=actor, session_id=s, node_id=n, data=dict(d), at=at)
        for s, n, d in events
    ]
    if rows:
        broadcast_audit(kind)
    return AuditEvent.objects.bulk_create(rows)


def check_retention_days(days: int) -> int:
    if days < MIN_RETENTION_DAYS:
        raise ServiceError(
            _(
                "Audit events must be kept at least %(min)d days (six months); "
                "%(days)d is too short. Set DESKPOOL_AUDIT_RETENTION_DAYS to %(min)d or more."
            )
            % {"min": MIN_RETENTION_DAYS, "days": days},
            field="days",
        )
    return days


def do_prune_audit(days: int | None = None, *, actor: str = "retention") -> int:
    """The retention task: store the retention period (the row the DELETE trigger reads),
    delete the events older than it, record how many. Returns the number deleted."""
    days = check_retention_days(settings.AUDIT_RETENTION_DAYS if days is None else days)
    cutoff = timezone.now() - timedelta(days=days) - RETENTION_SLACK
    with transaction.atomic():
        retention = AuditRetention.objects.order_by("pk").first()
        if retention is None:
            AuditRetention.objects.create(days=days)
        elif retention.days != days:
            retention.days = days
            retention.save(update_fields=["days"])
        deleted, _counts = AuditEvent.objects.filter(at__lt=cutoff).delete()
        record(
            AuditKind.AUDIT_PRUNED,
            actor,
            data={"deleted": deleted, "days": days, "before": cutoff.isoformat()},
        )
    log.info("audit retention: %d events older than %s deleted", deleted, cutoff)
    return deleted
