"""What a node should run, and what its agent reports back about each desktop."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, get_args

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from nodeagent.failures import FAILURE_CODES, classify
from nodeagent.protocol import (
    BatchedReport,
    BatchResult,
    DesiredSession,
    DesiredState,
    DesktopLanguage,
    SessionReport,
)
from nodeagent.protocol_courses import CourseFolderRef

from ..choices import ON_NODE_STATES, TERMINAL_STATES, SessionState
from ..engine.reasons import Code, Reason
from ..locks import lock_sessions, one_snapshot
from ..models import Allocation, Node, Session
from . import Conflict, NotFound, ServiceError
from .agent_wake import desired_version
from .course_files_agent import folders_of_people
from .gateway_keys import gateway_access
from .gateway_revocation import revoked_tickets
from .health import do_record_session_failed, do_record_session_running
from .home_files import MB, quota_bytes_of_many
from .home_files_agent import desired_home_tasks
from .installation import installation_id
from .lifecycle import Move, do_transition, do_transition_many
from .warm import desired_warm

S = SessionState


def placement_id(session: Session) -> str:
    """An id for the session's current placement, new each time it is placed.

    The smallest of its live allocation ids: every placement creates its allocations (at
    least one, also for a CPU-only desktop) and a requeue releases them, so a session placed
    again, even on the same node, gets a new one. "" when it holds none (not placed, or
    ended). Uses the prefetched ``allocations`` when there are some.
    """
    live = [a.pk for a in session.allocations.all() if a.released_at is None]
    return str(min(live)) if live else ""


def desired_state(node: Node) -> DesiredState:
    """What the node's agent should run: its sessions and its warm desktops (and the home
    tasks it should carry out, its gateway's keys and the tickets it should refuse), read
    from one snapshot. Read apart, a warm desktop claimed
    between the two reads would be in neither list, and the agent would stop it and start
    the session cold.

    ``version`` is read first: a change committed after it is announced with a newer one, so
    the agent's next wait answers at once (docs/agent-protocol.md)."""
    version = desired_version(node.pk)
    # The homes' names carry the installation id, made at its first read (a write): read it
    # before the read-only snapshot, where making it would fail.
    installation_id()
    with one_snapshot():
        return DesiredState(
            sessions=with_revoked_tickets(node, desired_sessions(node)),
            warm=desired_warm(node),
            home_tasks=desired_home_tasks(node),
            # Only for a node with a gateway (an older agent's has none).
            **({"gateway": gateway_access(node)} if node.gateway_port is not None else {}),
            version=version,
        )


def with_revoked_tickets(node: Node, sessions: list[DesiredSession]) -> list[DesiredSession]:
    """The sessions, each with its gateway tickets whose holder lost the right."""
    revoked = revoked_tickets(node, [s.session_id for s in sessions])
    if not revoked:
        return sessions
    return [
        s.model_copy(update={"revoked_tickets": revoked[s.session_id]})
        if s.session_id in revoked
        else s
        for s in sessions
    ]


def desired_sessions(node: Node) -> list[DesiredSession]:
    """The sessions whose desktops should be running on this node now."""
    sessions = (
        Session.objects.filter(node=node, state__in=ON_NODE_STATES)
        .select_related("profile", "user__member", "course")
        .prefetch_related("allocations__slice")
        .order_by("pk")
    )
    found = list(sessions)
    folders = folders_of_people({s.user_id for s in found})  # docs/course-files.md
    quotas = quota_bytes_of_many(s.user.get_username() for s in found)
    return [_desired(s, folders.get(s.user_id, []), quotas[s.user.get_username()]) for s in found]


def _desired(s: Session, courses: list[CourseFolderRef], quota_bytes: int) -> DesiredSession:
    desired = DesiredSession(
        session_id=s.pk,
        user=s.user.get_username(),
        course=s.course.code if s.course else "",
        image=s.profile.image,
        cpus=s.profile.cpus,
        memory_mb=s.profile.memory_mb,
        pids_limit=s.profile.pids_limit,
        shm_mb=s.profile.shm_mb,
        gpu_devices=[
            a.slice.device_uuid
            for a in s.allocations.all()
            if a.slice is not None and a.released_at is None
        ],
        vnc_password=s.vnc_password,
        home_volume=s.home_volume,
        # The same quota the Files page holds the person to; the node's disk enforces it.
        home_quota_mb=quota_bytes // MB,
        placement=placement_id(s),
        # Claim that warm desktop instead of starting one; absent (not set) when none.
        **_warm_key(s),
        language=_language(s),
    )
    # Absent when none (as an older portal sends it): the course folders to mount.
    return desired.model_copy(update={"courses": courses}) if courses else desired


def _warm_key(s: Session) -> dict[str, Any]:
    return {"warm_key": s.warm_key} if s.warm_key else {}


def _language(s: Session) -> DesktopLanguage:
    """The language the person saved on their account page (the desktop's locale); empty when
    they chose none: the image's default (English)."""
    member = getattr(s.user, "member", None)
    language = member.language if member is not None else ""
    for known in get_args(DesktopLanguage):
        if language == known:
            return known
    return ""


def _actor(node: Node) -> str:
    return f"node:{node.hostname}"


def _agent_reason(report: SessionReport) -> Reason | None:
    """The agent's own words (a SIMULATED desktop, a lost one), kept with the state."""
    return Reason(Code.AGENT, {"detail": report.reason}) if report.reason else None


def start_failure(node: Node, report: SessionReport) -> tuple[Reason, dict[str, Any]]:
    """A FAILED report as the person sees it (``START_FAILED``: a plain cause, worded by the
    presenter) and as the admins do (the audit event's ``detail``: the runtime's words).
    An older agent sends no code: it is read from its words, as the agent reads them."""
    cause = report.failure if report.failure in FAILURE_CODES else classify(report.reason)
    reason = Reason(Code.START_FAILED, {"cause": cause, "node": node.hostname})
    return reason, {"detail": report.reason, "cause": cause}


def do_report(node: Node, session_id: int, report: SessionReport | Mapping[str, Any]) -> Session:
    """Apply an agent's report; Conflict means the portal no longer wants that desktop.

    ``report`` is validated with the wire model (a mapping too).
    """
    report = SessionReport.model_validate(report)
    session = Session.objects.filter(pk=session_id, node=node).first()
    if session is None:
        if Allocation.objects.filter(session_id=session_id, node=node).exists():
            # It was here once (requeued off a silent node, say): this desktop must stop.
            raise Conflict(
                _("Session %(id)s was moved off %(node)s; stop its desktop.")
                % {"id": session_id, "node": node.hostname}
            )
        raise NotFound(
            _("Session %(id)s is not assigned to %(node)s.")
            % {"id": session_id, "node": node.hostname}
        )
    reported_placement = report.placement
    if reported_placement and (current := placement_id(session)) and reported_placement != current:
        # About an earlier placement of this session on this node (requeued and placed here
        # again): applying it would end, or vouch for, the new one. Only that desktop stops.
        raise Conflict(
            _(
                "Session %(id)s was placed again (placement %(current)s); the report is about "
                "placement %(reported)s: stop that desktop."
            )
            % {"id": session_id, "current": current, "reported": reported_placement}
        )
    actor = _actor(node)
    state = report.state
    why = _agent_reason(report)
    if state in ("STARTING", "RUNNING") and session.state not in ON_NODE_STATES:
        raise Conflict(
            _("Session %(id)s is %(state)s; stop its desktop.")
            % {"id": session_id, "state": session.state}
        )
    if state == "STARTING":
        if session.state != S.PLACED:
            return session
        return do_transition(session_id, S.STARTING, actor=actor, reason=Reason(Code.STARTING))
    if state == "RUNNING":
        if session.state in (S.RUNNING, S.PREEMPTING):
            return session  # PREEMPTING: it runs on through its grace countdown
        running = do_transition(
            session_id,
            S.RUNNING,
            actor=actor,
            reason=why,
            # The node's registered management address, never one the report names (an
            # agent cannot point a desktop at another host); tickets' gateway URLs use it.
            **_running_fields(node, report, timezone.now()),
        )
        do_record_session_running(node)
        return running
    if session.state in TERMINAL_STATES:
        return session  # a late ENDED/FAILED/LOST after the portal already ended it
    target = {"ENDED": S.ENDED, "FAILED": S.FAILED, "LOST": S.LOST}[state]
    if target == S.ENDED and why is None and session.reason_code == Code.TIME_LIMIT:
        # Stopped at its time limit (timers.stop_overdue): the ended session still says why.
        why = Reason(Code.TIME_LIMIT, dict(session.reason_params or {}))
    if target != S.FAILED:
        return do_transition(session_id, target, actor=actor, reason=why)
    why, raw = start_failure(node, report)
    failed = do_transition(session_id, target, actor=actor, reason=why, audit_data=raw)
    do_record_session_failed(node)
    return failed


def do_report_batch(node: Node, reports: Sequence[BatchedReport]) -> list[BatchResult]:
    """Apply an agent's reports in order, in one transaction (one commit, one broadcast of
    every session they changed); each in a savepoint of its own, so one that conflicts
    rolls back alone and is answered ``conflict`` (stop that desktop), as a 409 would be.

    A STARTING followed in the same batch by another report about the same placement (a
    desktop that started between two sends: the usual case in a class start) is not
    applied on its own: PLACED goes straight to the later state, one transition and one
    broadcast instead of two, and the STARTING is answered as the later report is.

    The usual RUNNING and STARTING reports (a desktop of the current placement on this
    node, reported once in the batch: RUNNING of one PLACED or STARTING, STARTING of one
    PLACED) are applied together by ``lifecycle.do_transition_many``, in a fixed number of
    queries per state; a run of them is applied where the next other report comes, so the
    order the agent sent is kept (a run names each session once, so applying its STARTING
    reports before its RUNNING ones reorders nothing about any one session)."""
    superseded = _superseded(reports)
    applied: dict[int, BatchResult] = {}
    with transaction.atomic():
        plain = _plain_starts(node, reports, superseded)
        run: dict[int, Move] = {}
        for index, report in enumerate(reports):
            if index in superseded:
                continue
            if index in plain:
                run[index] = plain[index]
                continue
            applied |= _apply_starts(node, reports, run)
            run = {}
            applied[index] = _apply(node, report)
        applied |= _apply_starts(node, reports, run)
    return [applied[superseded.get(index, index)].model_copy() for index in range(len(reports))]


# What a report of each state may be applied together from (as do_report applies it).
_PLAIN_FROM = {"RUNNING": (S.PLACED, S.STARTING), "STARTING": (S.PLACED,)}


def _plain_starts(
    node: Node, reports: Sequence[BatchedReport], superseded: Mapping[int, int]
) -> dict[int, Move]:
    """The batch's RUNNING and STARTING reports that can be applied together: by position."""
    kept = [i for i in range(len(reports)) if i not in superseded]
    mentions = Counter(reports[i].session_id for i in kept)
    wanted = {reports[i].session_id for i in kept if reports[i].state in _PLAIN_FROM}
    sessions = {
        s.pk: s
        for s in Session.objects.filter(pk__in=wanted, node=node)
        .order_by()  # a look-up by id: no sort
        .prefetch_related("allocations")
    }
    plain: dict[int, Move] = {}
    now = timezone.now()
    for index in kept:
        report, session = reports[index], sessions.get(reports[index].session_id)
        if (
            session is None
            or mentions[session.pk] != 1
            or session.state not in _PLAIN_FROM.get(report.state, ())
            or (report.placement and report.placement != placement_id(session))
        ):
            continue
        if report.state == "STARTING":
            plain[index] = Move(session.pk, {}, Reason(Code.STARTING))
            continue
        plain[index] = Move(
            session.pk,
            # The node's registered address, never one the report names (see do_report).
            _running_fields(node, report, now),
            _agent_reason(report),
        )
    return plain


def _running_fields(node: Node, report: SessionReport, now: datetime) -> dict[str, Any]:
    """What a RUNNING report writes on its session."""
    return {
        "desktop_host": node.address,
        "desktop_port": report.port,
        "desktop_audio_port": report.audio_port,
        "container_id": report.container_id,
        "started_at": now,
    }


def _apply_starts(
    node: Node, reports: Sequence[BatchedReport], run: Mapping[int, Move]
) -> dict[int, BatchResult]:
    """A run of plain STARTING and RUNNING reports, together (one call per state); one by
    one if any changed meanwhile."""
    if not run:
        return {}
    states = {index: S(reports[index].state) for index in run}
    try:
        with transaction.atomic():
            # All of the run first, in one id order, then each state's part of it (a run
            # names each session once: one state's moves leave the other's rows as locked).
            locked = lock_sessions(move.session_id for move in run.values())
            for state in (S.STARTING, S.RUNNING):
                moves = [move for index, move in run.items() if states[index] == state]
                do_transition_many(moves, state, actor=_actor(node), on_node=node.pk, locked=locked)
            if S.RUNNING in states.values():
                do_record_session_running(node)
    except Conflict:
        return {index: _apply(node, reports[index]) for index in run}
    return {
        index: BatchResult(session_id=move.session_id, outcome="applied", state=states[index])
        for index, move in run.items()
    }


def _superseded(reports: Sequence[BatchedReport]) -> dict[int, int]:
    """STARTING reports with a later report about the same placement: their position, and
    the position of the last report about that placement (the one applied)."""
    last: dict[tuple[int, str], int] = {}
    superseded: dict[int, int] = {}
    for index in range(len(reports) - 1, -1, -1):
        key = (reports[index].session_id, reports[index].placement)
        if reports[index].state == "STARTING" and key in last:
            superseded[index] = last[key]
        last.setdefault(key, index)
    return superseded


def _apply(node: Node, report: BatchedReport) -> BatchResult:
    """One report of a batch, in a savepoint of its own."""
    try:
        with transaction.atomic():
            session = do_report(node, report.session_id, report)
    except Conflict as error:
        current = Session.objects.filter(pk=report.session_id).values_list("state", flat=True)
        return BatchResult(
            session_id=report.session_id,
            outcome="conflict",
            state=current.first(),
            detail=error.message,
        )
    except ServiceError as error:
        return BatchResult(session_id=report.session_id, outcome="refused", detail=error.message)
    return BatchResult(session_id=report.session_id, outcome="applied", state=session.state)
