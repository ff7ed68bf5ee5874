"""Changes admins make to the pool's settings (policy, quotas): saved, audited, applied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models, transaction

from ..choices import AuditKind
from .audit import record
from .kick import schedule_soon


def do_save_audited(obj: models.Model, changed: Mapping[str, Any], *, actor: str) -> None:
    """Save a policy or quota row an admin edited, audit what changed, ask for a cycle."""
    with transaction.atomic():
        obj.save()
        record(
            AuditKind.POLICY_CHANGED,
            actor,
            data={
                "model": obj._meta.model_name,
                "object": str(obj),
                "changed": {name: str(value) for name, value in changed.items()},
            },
        )
        schedule_soon()
