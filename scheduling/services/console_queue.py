"""The console's queue: the waiting requests by tier, and an admin's cancel and boost.

A boost sets ``Session.boosted_at``; the snapshot hands it to the engine, whose queue order
puts a boosted request before every unboosted one of its tier (earlier boosts first). Both
actions are audited with who and why, and ask for a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from ..choices import PURPOSE_TIER, WAITING_STATES, AuditKind, Purpose
from ..events import broadcast_session
from ..models import Session
from . import Conflict, NotFound, ServiceError
from .audit import record
from .kick import schedule_soon
from .sessions import do_stop

MAX_REASON_LENGTH = 500


@dataclass(frozen=True)
class TierQueue:
    """One tier's waiting requests, in the order the scheduler serves them."""

    purpose: str
    label: str
    sessions: list[Session]


def waiting_sessions():
    return Session.objects.filter(state__in=WAITING_STATES).select_related(
        "user", "course", "profile"
    )


def queue_by_tier() -> list[TierQueue]:
    """Thesis, coursework, hobby: each tier's waiting requests by queue position (blocked
    ones, which have none, last), then boost and age."""
    rows = waiting_sessions().order_by(
        F("queue_position").asc(nulls_last=True),
        F("boosted_at").asc(nulls_last=True),
        "created_at",
        "pk",
    )
    by_purpose: dict[str, list[Session]] = {p: [] for p in PURPOSE_TIER}
    for session in rows:
        by_purpose.setdefault(session.purpose, []).append(session)
    return [
        TierQueue(str(purpose), str(Purpose(purpose).label), by_purpose[purpose])
        for purpose in sorted(PURPOSE_TIER, key=lambda p: PURPOSE_TIER[p])
    ]


def _actor(admin: User) -> str:
    return f"user:{admin.get_username()}"


def check_queue_action(admin: User, session_id: int, reason: str) -> Session:
    """The waiting request an admin acts on, with a reason given: or a refusal that says
    what to do."""
    if not admin.is_staff:
        raise NotFound(_("No such request."))
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError(
            _("Give a reason: it is kept in the audit trail with your name."), field="reason"
        )
    if len(reason) > MAX_REASON_LENGTH:
        raise ServiceError(
            _("Keep the reason under %(n)d characters.") % {"n": MAX_REASON_LENGTH},
            field="reason",
        )
    session = waiting_sessions().filter(pk=session_id).first()
    if session is None:
        raise Conflict(
            _("Request %(id)s is no longer waiting: it started, ended or does not exist.")
            % {"id": session_id}
        )
    return session


def do_cancel_request(admin: User, session: Session, reason: str) -> Session:
    """Cancel a waiting request as its owner's stop would, and audit who and why."""
    with transaction.atomic():
        before = session.state
        cancelled = do_stop(admin, session)
        record(
            AuditKind.SESSION_CANCELLED,
            _actor(admin),
            session=session.pk,
            data={"reason": reason.strip(), "before": before, "after": cancelled.state},
        )
        schedule_soon()
    return cancelled


def do_boost_request(admin: User, session: Session, reason: str) -> Session:
    """Move a waiting request ahead of its tier's unboosted ones; audited, then a cycle."""
    now = timezone.now()
    with transaction.atomic():
        moved = Session.objects.filter(
            pk=session.pk, state__in=WAITING_STATES, boosted_at=None
        ).update(boosted_at=now)
        if moved != 1:
            raise Conflict(
                _("Request %(id)s is already boosted or no longer waiting.") % {"id": session.pk}
            )
        record(
            AuditKind.SESSION_BOOSTED,
            _actor(admin),
            session=session.pk,
            data={
                "reason": reason.strip(),
                "before": {"boosted_at": None, "queue_position": session.queue_position},
                "after": {"boosted_at": now.isoformat()},
            },
        )
        broadcast_session(session.pk)
        schedule_soon()
    session.boosted_at = now
    return session
