"""Desktop sessions and the holds they (or warm desktops) have on slices (the audit trail is
in audit.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils import timezone

from nodeagent.home_names import home_volume_name
from people.models import visible_through

from ..choices import (
    ON_NODE_STATES,
    PURPOSE_TIER,
    TERMINAL_STATES,
    IdleState,
    Purpose,
    SessionState,
)
from ..presenters import render
from .installation import installation_id

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


class SessionQuerySet(models.QuerySet["Session"]):
    def visible_to(self, user: User | AnonymousUser) -> SessionQuerySet:
        """Sessions this user may read: their own, all for admins, and guardian grants."""
        return visible_through(self, user, "scheduling.view_session", Q(user=user))

    def own(self, user: User | AnonymousUser, pk: object) -> Session | None:
        """Session ``pk`` when it is ``user``'s own, else None: found without building the
        grants query of :meth:`visible_to` (a person reading their own session is the common
        case: a class polling its desktops, the session pages), and without a sort (``first()``
        sorts, and Django compiles the sort against every selected column). Callers fall back
        to :meth:`visible_to` for the sessions others granted."""
        if not user.is_authenticated:
            return None
        return next(iter(self.filter(user=user.pk, pk=pk).order_by()), None)

    def seen_by(
        self, user: User | AnonymousUser, ids: Sequence[int], *, to_open: bool = False
    ) -> dict[int, Session]:
        """Those of sessions ``ids`` this user may read (``to_open``: open), by id: their own
        first, without the grants query (as :meth:`own`), then the rest through
        :meth:`visible_to` (:meth:`openable_by`). An id they may not see is left out."""
        found: dict[int, Session] = {}
        if user.is_authenticated:
            found = {s.pk: s for s in self.filter(user=user.pk, pk__in=ids).order_by()}
        others = [pk for pk in ids if pk not in found]
        if others:
            wider = self.openable_by(user) if to_open else self.visible_to(user)
            found |= {s.pk: s for s in wider.filter(pk__in=others).order_by()}
        return found

    def openable_by(self, user: User | AnonymousUser) -> SessionQuerySet:
        """Sessions whose desktop this user may open: only the owner's, and admins'."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(user=user)

    def on_node(self) -> SessionQuerySet:
        return self.filter(state__in=ON_NODE_STATES)

    def active(self) -> SessionQuerySet:
        return self.exclude(state__in=TERMINAL_STATES)


def home_volume_of(user: User) -> str:
    """A person's home: the Docker volume (or the folder under DESKPOOL_HOME_ROOT) every
    desktop of theirs mounts, and the one their home tasks work in:
    ``deskpool-<installation>-home-<user>`` (:func:`nodeagent.home_names.home_volume_name`;
    the installation id is read once per process), so that two portals sharing a Docker
    engine or a home root never mount each other's homes."""
    return home_volume_name(installation_id(), user.get_username())


class Session(models.Model):
    """One desktop request, from the queue to its end."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="desktop_sessions", on_delete=models.CASCADE
    )
    profile = models.ForeignKey("DesktopProfile", on_delete=models.PROTECT)
    purpose = models.CharField(max_length=20, choices=Purpose.choices)
    course = models.ForeignKey("portal.Course", null=True, blank=True, on_delete=models.SET_NULL)
    state = models.CharField(
        max_length=20, choices=SessionState.choices, default=SessionState.QUEUED, db_index=True
    )
    node = models.ForeignKey("Node", null=True, blank=True, on_delete=models.SET_NULL)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    # Why it waits, moved or ended: a code of ``engine.reasons.Code`` and its parameters
    # (times as ISO 8601); ``scheduling.presenters`` renders them for the reader.
    reason_code = models.CharField(max_length=40, blank=True)
    reason_params = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    vnc_password = models.CharField(max_length=8, blank=True)
    desktop_host = models.CharField(max_length=200, blank=True)
    desktop_port = models.PositiveIntegerField(null=True, blank=True)
    # The desktop's sound (nodeagent.desktop_audio) on the same host; None: its image has none.
    desktop_audio_port = models.PositiveIntegerField(null=True, blank=True)
    container_id = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    booking = models.ForeignKey(
        "Booking", null=True, blank=True, related_name="sessions", on_delete=models.SET_NULL
    )
    eta = models.DateTimeField(null=True, blank=True, help_text="Estimated start while waiting.")
    blocked = models.BooleanField(default=False, help_text="Waiting on a quota or a rule.")
    preempt_deadline = models.DateTimeField(null=True, blank=True)
    preempted_for = models.ForeignKey(
        "self", null=True, blank=True, related_name="+", on_delete=models.SET_NULL
    )
    compute_units = models.FloatField(
        default=0.0, help_text="CU held while placed (sum over its slices), for accounting."
    )
    warm_key = models.CharField(
        max_length=40, blank=True, help_text="The warm desktop this placement claimed, if any."
    )
    boosted_at = models.DateTimeField(
        null=True, blank=True, help_text="An admin's boost: served before its tier's others."
    )
    # docs/lifecycle.md: the time limit's extensions, and the idle policy's verdict.
    extended_minutes = models.PositiveIntegerField(
        default=0, help_text="Minutes added to the profile's time limit by extensions."
    )
    idle_state = models.CharField(
        max_length=12, choices=IdleState.choices, default=IdleState.ACTIVE
    )
    idle_since = models.DateTimeField(null=True, blank=True)

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"session {self.pk} ({self.user}, {self.state})"

    @property
    def tier(self) -> int:
        return PURPOSE_TIER[Purpose(self.purpose)]

    @property
    def course_code(self) -> str:
        return self.course.code if self.course is not None else ""

    @property
    def reason(self) -> str:
        """The reason rendered in the active language and time zone."""
        return render(self.reason_code, self.reason_params)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def ends_at(self) -> datetime | None:
        """The current time limit: started + the profile's maximum + the extensions (None
        before it starts or once it has ended)."""
        if self.started_at is None or self.state in TERMINAL_STATES:
            return None
        minutes = self.profile.max_duration_minutes + self.extended_minutes
        return self.started_at + timedelta(minutes=minutes)

    @property
    def home_volume(self) -> str:
        return home_volume_of(self.user)


class Allocation(models.Model):
    """A hold on one slice (or, for CPU-only desktops, on a node): a session's or a warm
    desktop's. Every hold is a row of this one table, so one partial unique index covers all.

    A warm desktop's hold moves to the student's session when it is claimed (one conditional
    UPDATE, ``services.warm``); deleting an unclaimed warm desktop deletes its hold.
    """

    session = models.ForeignKey(
        Session, null=True, blank=True, related_name="allocations", on_delete=models.CASCADE
    )
    warm = models.ForeignKey(
        "WarmDesktop", null=True, blank=True, related_name="holds", on_delete=models.CASCADE
    )
    node = models.ForeignKey("Node", on_delete=models.PROTECT)
    slice = models.ForeignKey("Slice", null=True, blank=True, on_delete=models.PROTECT)
    created_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Whatever races, one slice's capacity is held by at most one live allocation.
            models.UniqueConstraint(
                fields=["slice"],
                condition=Q(released_at__isnull=True),
                name="one_active_allocation_per_slice",
            ),
            # A hold belongs to exactly one holder: a session or a warm desktop.
            models.CheckConstraint(
                condition=Q(session__isnull=False, warm__isnull=True)
                | Q(session__isnull=True, warm__isnull=False),
                name="allocation_has_one_holder",
            ),
        ]

    def __str__(self) -> str:
        holder = f"session {self.session_id}" if self.session_id else f"warm {self.warm_id}"
        return f"allocation of {self.slice or self.node} to {holder}"
