"""Live updates to browsers over Channels, built here and sent only after the commit.

Every payload a page receives is declared in this module. Services call
:func:`broadcast_session` and the others below; each queues the send with
``transaction.on_commit``, so a rolled-back change is never announced. Pages subscribe
through ``portal.live.consumers.UpdatesConsumer``, which joins the groups named here.

:func:`session_payload` is also the user API's representation of a session
(``portal.api.serializers.SessionSerializer``), so a page and the API never disagree.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any, Literal, TypedDict, TypeVar

from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models import Prefetch, QuerySet, prefetch_related_objects
from django.urls import reverse
from rest_framework.fields import DateTimeField

from .choices import OPENABLE_STATES
from .idle_lookup import suspends_at
from .layer_sender import sender
from .models import Alert, Allocation, Session
from .models.policy import QuotaRequest
from .presenters import render

log = logging.getLogger(__name__)

ADMIN_GROUP = "pool-admins"


class IdlePayload(TypedDict):
    state: str  # active | idle | warned | suspended | ended
    since: str | None  # when it changed
    suspends_at: str | None  # warned: when it is suspended unless used; else None


class SessionPayload(TypedDict):
    id: int
    state: str
    purpose: str
    profile: int
    profile_name: str
    queue_position: int | None
    reason: str  # rendered in the reader's language and time zone
    reason_code: str
    reason_params: dict[str, Any]
    eta: str | None
    blocked: bool
    preempt_deadline: str | None
    booking: int | None
    node: str | None
    slice: str | None
    desktop_url: str | None
    simulated: bool
    created_at: str
    started_at: str | None
    ended_at: str | None
    ends_at: str | None  # the time limit: started_at + the profile's max duration + extensions
    idle: IdlePayload  # the idle policy's verdict (docs/lifecycle.md)


class SessionUpdate(TypedDict):
    type: Literal["session.update"]
    session: SessionPayload


class AdminAudit(TypedDict):
    """To the admins' console pages: an audit event was written (its kind only); pages
    showing what changed fetch themselves again."""

    type: Literal["admin.audit"]
    kind: str


class AdminSessionState(TypedDict):
    id: int
    state: str


class AdminSession(TypedDict):
    """To the admins' console pages: sessions changed, all those of one commit in one
    message (no personal data: the pages fetch what they show through their own,
    admin-only, fragment URLs)."""

    type: Literal["admin.session"]
    sessions: list[AdminSessionState]


class ClassSessions(TypedDict):
    """To a course's live class (``portal.live.class_consumers.ClassConsumer``): these of its
    sessions changed, all those of one commit in one message; the consumer renders each
    row for its listener."""

    type: Literal["class.sessions"]
    sessions: list[int]


class QuotaRequestPayload(TypedDict):
    id: int
    course: str
    hours: float
    reason: str
    state: str  # pending | granted | refused | withdrawn
    state_label: str  # in the reader's language
    answer: str
    answered_by: str | None
    answered_at: str | None
    created_at: str


class QuotaUpdate(TypedDict):
    type: Literal["quota.update"]
    request: QuotaRequestPayload


class AlertPayload(TypedDict):
    id: int
    rule: int
    rule_name: str
    metric: str
    scope: str
    subject: str  # gpu:<uuid>, node:<host>, rack:<name>, pool
    level: str  # warning | critical
    state: str  # firing | acknowledged | resolved
    value: float | None
    raised_at: str
    escalated_at: str | None
    acknowledged_at: str | None
    acknowledged_by: str | None
    resolved_at: str | None
    resolved_by: str | None  # None on a resolved alert: it recovered by itself


class AlertUpdate(TypedDict):
    type: Literal["alert.update"]
    alert: AlertPayload


Payload = SessionUpdate | AdminSession | ClassSessions | AdminAudit | QuotaUpdate | AlertUpdate


def user_group(user_id: int) -> str:
    return f"user-{user_id}"


def course_group(course_id: int) -> str:
    """A course's live class (``portal.live.class_consumers.ClassConsumer``)."""
    return f"course-{course_id}"


_TIME = DateTimeField()


def _time(value: datetime | None) -> str | None:
    return None if value is None else _TIME.to_representation(value)


def _idle(session: Session) -> IdlePayload:
    return IdlePayload(
        state=session.idle_state,
        since=_time(session.idle_since),
        suspends_at=_time(suspends_at(session)),
    )


SessionsQS = TypeVar("SessionsQS", bound=QuerySet[Session])


def payload_reads(sessions: SessionsQS) -> SessionsQS:
    """``sessions`` with what :func:`session_payload` reads beside each: the profile, node and
    person joined, and the allocations with their slices and GPUs joined in one more query
    (``prefetch_related("allocations__slice__gpu")`` made one query per level: a placed
    desktop's poll was five queries, not three)."""
    return sessions.select_related("profile", "node", "user").prefetch_related(
        Prefetch("allocations", queryset=Allocation.objects.select_related("slice__gpu"))
    )


def session_payload(session: Session) -> SessionPayload:
    """A session as pages and the API show it. Read it with :func:`payload_reads`."""
    held = [a.slice for a in session.allocations.all() if a.slice and not a.released_at]
    return SessionPayload(
        id=session.pk,
        state=session.state,
        purpose=session.purpose,
        profile=session.profile_id,
        profile_name=session.profile.name,
        queue_position=session.queue_position,
        reason=render(session.reason_code, session.reason_params),
        reason_code=session.reason_code,
        reason_params=dict(session.reason_params or {}),
        eta=_time(session.eta),
        blocked=session.blocked,
        preempt_deadline=_time(session.preempt_deadline),
        booking=session.booking_id,
        node=session.node.hostname if session.node else None,
        slice=", ".join(f"gpu{s.gpu.index} {s.profile or s.kind}" for s in held) or None,
        desktop_url=(
            reverse("desktop", args=[session.pk]) if session.state in OPENABLE_STATES else None
        ),
        simulated=bool(session.node and session.node.runtime == "simulated"),
        created_at=_TIME.to_representation(session.created_at),
        started_at=_time(session.started_at),
        ended_at=_time(session.ended_at),
        ends_at=_time(session.ends_at),
        idle=_idle(session),
    )


def send_after_commit(group: str, payload: Payload) -> None:
    """The one way to send to browsers: queued until the surrounding transaction commits."""
    transaction.on_commit(lambda: _send(group, payload))


def _send(group: str, payload: Payload) -> None:
    """Queue the message; this process's sender sends it, in order, without blocking the
    write that caused it (a page missing one update refreshes on the next)."""
    if get_channel_layer() is None:
        return
    sender().submit(group, dict(payload))


_changed = threading.local()  # this thread's sessions changed, not yet broadcast


def broadcast_created(session: Session) -> None:
    """:func:`broadcast_session` for a session this transaction created: sent as stored
    here (its profile and person selected, placed nowhere yet), not read back. Its
    allocations are known to be none (nothing could place it before it was committed), and
    set so without a query, for the caller's answer too. Kept for the broadcast only once
    committed (the hook before the broadcast's own)."""
    prefetch_related_objects([session], Prefetch("allocations", Allocation.objects.none()))

    def keep() -> None:
        _changed.__dict__.setdefault("created", {})[session.pk] = session

    transaction.on_commit(keep)
    broadcast_session(session.pk)


def broadcast_session(session_id: int) -> None:
    """After commit, send the session's state to its owner's open pages, and say that it
    changed to its course's live class and to the admins' console pages.

    Sessions changed in one transaction (a cycle placing 200) are read back together, in
    one query, by the first of their commit hooks; each later hook finds nothing left; the
    course's class and the admins get one message for all of them. A hook dropped with a
    rolled-back savepoint loses nothing: another one sends."""
    changed: set[int] = _changed.__dict__.setdefault("ids", set())
    changed.add(session_id)
    transaction.on_commit(_broadcast_changed)


def _broadcast_changed() -> None:
    ids = getattr(_changed, "ids", None)
    created: dict[int, Session] = _changed.__dict__.pop("created", {})
    if not ids:
        return
    _changed.ids = set()
    known = [created[pk] for pk in sorted(ids & created.keys())]
    others = ids - created.keys()  # none after a submit: nothing to read back
    read = payload_reads(Session.objects.filter(pk__in=others)) if others else []
    sessions = sorted([*known, *read], key=lambda s: s.pk)
    by_course: dict[int, list[int]] = {}
    states: list[AdminSessionState] = []
    for session in sessions:
        payload = SessionUpdate(type="session.update", session=session_payload(session))
        _send(user_group(session.user_id), payload)
        if session.course_id is not None:
            by_course.setdefault(session.course_id, []).append(session.pk)
        states.append(AdminSessionState(id=session.pk, state=session.state))
    for course_id, ids in by_course.items():
        _send(course_group(course_id), ClassSessions(type="class.sessions", sessions=ids))
    if states:
        _send(ADMIN_GROUP, AdminSession(type="admin.session", sessions=states))


def broadcast_audit(kind: str) -> None:
    """After commit, tell the admins' console pages that something was recorded."""
    send_after_commit(ADMIN_GROUP, AdminAudit(type="admin.audit", kind=kind))


def quota_request_payload(request: QuotaRequest) -> QuotaRequestPayload:
    """A quota request as its pages and the API show it. Select ``course``, ``answered_by``."""
    return QuotaRequestPayload(
        id=request.pk,
        course=request.course.code,
        hours=request.hours,
        reason=request.reason,
        state=request.state,
        state_label=str(request.get_state_display()),
        answer=request.answer,
        answered_by=request.answered_by.get_username() if request.answered_by else None,
        answered_at=_time(request.answered_at),
        created_at=_TIME.to_representation(request.created_at),
    )


def broadcast_quota_request(request_id: int) -> None:
    """After commit, send a quota request's state to its student's open pages."""
    transaction.on_commit(lambda: _broadcast_quota_request(request_id))


def _broadcast_quota_request(request_id: int) -> None:
    request = (
        QuotaRequest.objects.select_related("course", "answered_by").filter(pk=request_id).first()
    )
    if request is None:
        return
    payload = QuotaUpdate(type="quota.update", request=quota_request_payload(request))
    _send(user_group(request.student_id), payload)


def alert_payload(alert: Alert) -> AlertPayload:
    """An alert as the console and the API show it. Select ``rule`` and the two people."""
    return AlertPayload(
        id=alert.pk,
        rule=alert.rule_id,
        rule_name=alert.rule.name,
        metric=alert.rule.metric,
        scope=alert.rule.scope,
        subject=alert.subject,
        level=alert.level,
        state=alert.state,
        value=alert.value,
        raised_at=_TIME.to_representation(alert.raised_at),
        escalated_at=_time(alert.escalated_at),
        acknowledged_at=_time(alert.acknowledged_at),
        acknowledged_by=alert.acknowledged_by.get_username() if alert.acknowledged_by else None,
        resolved_at=_time(alert.resolved_at),
        resolved_by=alert.resolved_by.get_username() if alert.resolved_by else None,
    )


def broadcast_alert(alert_id: int) -> None:
    """After commit, send an alert's state to every admin's open pages."""
    transaction.on_commit(lambda: _broadcast_alert(alert_id))


def _broadcast_alert(alert_id: int) -> None:
    alert = (
        Alert.objects.select_related("rule", "acknowledged_by", "resolved_by")
        .filter(pk=alert_id)
        .first()
    )
    if alert is not None:
        _send(ADMIN_GROUP, AlertUpdate(type="alert.update", alert=alert_payload(alert)))
