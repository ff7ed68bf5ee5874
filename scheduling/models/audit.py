"""The audit trail: append-only, enforced by the database (docs/audit.md).

Triggers (migration 0008) refuse every UPDATE of ``scheduling_auditevent`` and every DELETE
but of events older than the retention period stored in the one ``AuditRetention`` row,
which only the retention task writes. Events keep the ids of their session and node without
a foreign-key constraint: deleting a session, a user or a node leaves their events alone.
"""

from __future__ import annotations

import contextvars

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..choices import AuditKind

# Six months: the shortest retention the database accepts (a check constraint).
MIN_RETENTION_DAYS = 183

# The address of the client whose request is being served (set by
# portal.server.middleware.ClientAddressMiddleware); None outside requests: scheduler, tasks.
client_address: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "deskpool_client_address", default=None
)


def current_client_address() -> str | None:
    """Every event written during a request carries its client's address, whichever code
    writes it (``services.audit.record`` or a plain ``AuditEvent.objects.create``)."""
    return client_address.get()


class AuditEvent(models.Model):
    """Every decision and state change, with who or what made it, and from which address."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=40, choices=AuditKind.choices)
    actor = models.CharField(max_length=200, help_text="user:<name>, node:<host>, scheduler")
    # No constraint and no cascade: the row keeps the id after its session or node is gone
    # (a cascade would be a DELETE and SET_NULL an UPDATE, both refused by the triggers).
    session = models.ForeignKey(
        "Session",
        null=True,
        blank=True,
        related_name="audit",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    node = models.ForeignKey(
        "Node",
        null=True,
        blank=True,
        related_name="+",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
    )
    data = models.JSONField(default=dict, blank=True)
    # The client's address for changes made through the pages and the API; null otherwise.
    address = models.GenericIPAddressField(null=True, blank=True, default=current_client_address)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.kind} by {self.actor}"


class AuditRetention(models.Model):
    """One row: how many days audit events are kept. The DELETE trigger reads it; the
    retention task (``services.audit.do_prune_audit``) writes it from the settings."""

    days = models.PositiveIntegerField(default=365)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(days__gte=MIN_RETENTION_DAYS), name="audit_retention_at_least_6_months"
            )
        ]

    def __str__(self) -> str:
        return f"audit kept {self.days} days"
