"""The desktop gateway's tickets (issue 34): one row per ticket the portal signed, so that the
gateway's reports can be audited against who it was issued to, and a ticket whose holder lost
the right can be revoked (``scheduling.services.gateway_revocation``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class TicketPurpose(models.TextChoices):
    SCREEN = "screen"
    SOUND = "sound"
    UPLOAD = "upload"
    DOWNLOAD = "download"


class TicketVia(models.TextChoices):
    OWNER = "owner"
    ADMIN = "admin"


class GatewayTicketQuerySet(models.QuerySet["GatewayTicket"]):
    def live(self, now=None) -> GatewayTicketQuerySet:  # type: ignore[no-untyped-def]
        """Not closed, and either opened or still good to open."""
        now = now or timezone.now()
        return self.filter(closed_at=None).filter(
            Q(opened_at__isnull=False) | Q(expires_at__gte=now)
        )


class GatewayTicket(models.Model):
    """A ticket the portal signed for one person to open one desktop's screen or sound (or
    one home file) through its node's gateway; opened and closed as the gateway reports."""

    jti = models.CharField(max_length=32, unique=True)
    node = models.ForeignKey("Node", related_name="gateway_tickets", on_delete=models.CASCADE)
    session = models.ForeignKey("Session", related_name="gateway_tickets", on_delete=models.CASCADE)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="gateway_tickets", on_delete=models.CASCADE
    )
    purpose = models.CharField(max_length=10, choices=TicketPurpose.choices)
    path = models.CharField(max_length=1024, blank=True)
    via = models.CharField(max_length=5, choices=TicketVia.choices)
    # The Django login session it was issued under, or "token:<id>" for an API token: what
    # revocation checks. Never shown (a session key is a credential).
    login_session = models.CharField(max_length=64, blank=True)
    issued_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    opened_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    address = models.CharField(max_length=100, blank=True, help_text="The browser's, at opening.")

    objects = GatewayTicketQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(
                fields=["node", "session"],
                condition=Q(closed_at=None),
                name="gateway_ticket_node_open",
            ),
            models.Index(
                fields=["user"], condition=Q(closed_at=None), name="gateway_ticket_user_open"
            ),
            models.Index(fields=["expires_at"], name="gateway_ticket_expires"),
        ]

    def __str__(self) -> str:
        return f"{self.purpose} ticket of session {self.session_id} for user {self.user_id}"
