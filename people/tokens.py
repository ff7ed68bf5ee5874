"""API tokens: many per person, each with a name, a lifetime and a revocation (docs/security.md).

Only the SHA-256 digest of a token is stored; the plain token is shown once, when it is
issued (scheduling.services.api_tokens). A password change or a disabled account revokes
every token of the person: the receiver below sees both on the user's save.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models.signals import post_save
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def live(self, now: datetime | None = None) -> ApiTokenQuerySet:
        """Neither revoked nor expired."""
        return self.filter(revoked_at=None, expires_at__gt=now or timezone.now())

    def revoke(self, now: datetime | None = None) -> int:
        """Revoke those not revoked yet; how many were."""
        return self.filter(revoked_at=None).update(revoked_at=now or timezone.now())


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        verbose_name=_("person"),
    )
    name = models.CharField(_("name"), max_length=100, blank=True)
    key_hash = models.CharField(_("SHA-256 of the token"), max_length=64, unique=True)
    # The token's first characters, to tell tokens apart in a list (not enough to use one).
    prefix = models.CharField(_("starts with"), max_length=12)
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    expires_at = models.DateTimeField(_("expires"))
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        indexes = [models.Index(fields=["user", "revoked_at"], name="apitoken_user_live")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id})"


def _revoke_on_password_change_or_disable(
    sender: type[models.Model], instance: Any, created: bool, **kwargs: Any
) -> None:
    """``set_password`` keeps the new password in ``_password`` until the save has run; an
    inactive account may not keep a working token."""
    if created:
        return
    if getattr(instance, "_password", None) is not None or not instance.is_active:
        ApiToken.objects.filter(user=instance).revoke()


post_save.connect(
    _revoke_on_password_change_or_disable,
    sender=settings.AUTH_USER_MODEL,
    dispatch_uid="scheduling.services.api_tokens.revoke",
)
