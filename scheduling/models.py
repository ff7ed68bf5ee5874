"""The resource side: nodes, GPUs, slices, desktop profiles, sessions, allocations, audit."""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils import timezone

from portal.models import Course, visible_through

from .choices import (
    ON_NODE_STATES,
    PURPOSE_TIER,
    TERMINAL_STATES,
    AuditKind,
    Purpose,
    SessionState,
    SliceKind,
)
from .presenters import render

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


def hash_token(token: str) -> str:
    """Tokens are stored as SHA-256 digests; the plain token is shown once."""
    return hashlib.sha256(token.encode()).hexdigest()


class Node(models.Model):
    """A GPU node served by one agent."""

    hostname = models.CharField(max_length=200, unique=True)
    address = models.CharField(max_length=200, default="127.0.0.1")
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    labels = models.JSONField(default=dict, blank=True)
    cpu_count = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveIntegerField(default=0)
    runtime = models.CharField(max_length=20, default="docker")
    agent_version = models.CharField(max_length=40, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)
    cordoned = models.BooleanField(default=False)
    failures_in_a_row = models.PositiveIntegerField(
        default=0, help_text="Sessions reported FAILED since the last one reached RUNNING here."
    )
    # As the agent reports them (nodeagent.protocol: Registration, Heartbeat).
    protocol_version = models.PositiveIntegerField(null=True, blank=True)
    running_sessions = models.JSONField(
        default=list, blank=True, help_text="Session ids its agent ran at the last heartbeat."
    )

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname

    def is_healthy(self, now=None) -> bool:
        if self.cordoned or self.last_heartbeat is None:
            return False
        now = now or timezone.now()
        age = (now - self.last_heartbeat).total_seconds()
        return age <= settings.NODE_HEARTBEAT_TIMEOUT_S


class JoinToken(models.Model):
    """A one-time token with which a new agent registers its node."""

    token_hash = models.CharField(max_length=64, unique=True)
    hostname = models.CharField(max_length=200, blank=True, help_text="Blank: any hostname.")
    created_at = models.DateTimeField(default=timezone.now)
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL)

    def __str__(self) -> str:
        return f"join token {self.pk} for {self.hostname or 'any node'}"

    @staticmethod
    def new_plain_token() -> str:
        return "dpj_" + secrets.token_urlsafe(24)


class Gpu(models.Model):
    """One physical GPU as the node's agent reported it."""

    node = models.ForeignKey(Node, related_name="gpus", on_delete=models.CASCADE)
    uuid = models.CharField(max_length=100, unique=True)
    index = models.PositiveIntegerField()
    model = models.CharField(max_length=100)
    memory_mb = models.PositiveIntegerField()
    compute_capability = models.CharField(max_length=10, blank=True)
    sharing = models.CharField(max_length=10, choices=SliceKind.choices)
    nvlink_peers = models.JSONField(default=list, blank=True)
    compute_units = models.FloatField(
        default=1.0, help_text="Normalised compute: peak FP32 over an A100's (engine.compute)."
    )
    simulated = models.BooleanField(default=False)
    metrics = models.JSONField(default=dict, blank=True)
    present = models.BooleanField(default=True)
    # The rest of its inventory as the agent reports it (nodeagent.protocol.GpuInventory);
    # null where the agent does not say (a simulated GPU has no PCIe link).
    mig_mode = models.BooleanField(default=False)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    share_count = models.PositiveSmallIntegerField(null=True, blank=True)
    share_memory_mb = models.PositiveIntegerField(null=True, blank=True)
    pcie_link_gen = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_link_width = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_link_gen_max = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_link_width_max = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_topology = models.JSONField(
        null=True, blank=True, help_text="Other GPU's UUID -> closest common PCIe ancestor."
    )

    class Meta:
        ordering = ["node__hostname", "index"]

    def __str__(self) -> str:
        return f"{self.node.hostname}/gpu{self.index} {self.model}"


class Slice(models.Model):
    """A unit of GPU capacity one session can hold: a MIG instance, a share, a whole GPU."""

    gpu = models.ForeignKey(Gpu, related_name="slices", on_delete=models.CASCADE)
    kind = models.CharField(max_length=10, choices=SliceKind.choices)
    profile = models.CharField(max_length=40, blank=True, help_text="MIG profile, e.g. 1g.10gb")
    device_uuid = models.CharField(max_length=100, help_text="GPU or MIG UUID given to Docker")
    memory_mb = models.PositiveIntegerField()
    milli = models.PositiveIntegerField(default=1000, help_text="The part of its GPU, of 1000.")
    slot = models.PositiveIntegerField(default=0)
    present = models.BooleanField(default=True)

    class Meta:
        ordering = ["gpu__node__hostname", "gpu__index", "slot"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "kind", "slot"], name="slice_unique_slot"),
        ]

    def __str__(self) -> str:
        label = self.profile or f"{self.kind}{self.slot}"
        return f"{self.gpu} {label}"


class DesktopProfile(models.Model):
    """An entry of the admin's catalogue of desktops a user can ask for."""

    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    image = models.CharField(max_length=200)
    cpus = models.FloatField(default=2.0)
    memory_mb = models.PositiveIntegerField(default=4096)
    pids_limit = models.PositiveIntegerField(default=1024)
    shm_mb = models.PositiveIntegerField(default=512)
    gpu_count = models.PositiveIntegerField(default=1)
    gpu_memory_min_mb = models.PositiveIntegerField(default=0)
    compute_min = models.FloatField(default=0.0, help_text="Compute units per GPU, at least.")
    gpu_models = models.JSONField(
        default=list, blank=True, help_text="GPU model names allowed (substrings); empty = any."
    )
    allowed_kinds = models.JSONField(default=list, help_text="Slice kinds: mig, share, whole")
    max_duration_minutes = models.PositiveIntegerField(default=240)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SessionQuerySet(models.QuerySet["Session"]):
    def visible_to(self, user: User | AnonymousUser) -> SessionQuerySet:
        """Sessions this user may read: their own, all for admins, and guardian grants."""
        return visible_through(self, user, "scheduling.view_session", Q(user=user))

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


class Session(models.Model):
    """One desktop request, from the queue to its end."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="desktop_sessions", on_delete=models.CASCADE
    )
    profile = models.ForeignKey(DesktopProfile, on_delete=models.PROTECT)
    purpose = models.CharField(max_length=20, choices=Purpose.choices)
    course = models.ForeignKey("portal.Course", null=True, blank=True, on_delete=models.SET_NULL)
    state = models.CharField(
        max_length=20, choices=SessionState.choices, default=SessionState.QUEUED, db_index=True
    )
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    # Why it waits, moved or ended: a code of ``engine.reasons.Code`` and its parameters
    # (times as ISO 8601); ``scheduling.presenters`` renders them for the reader.
    reason_code = models.CharField(max_length=40, blank=True)
    reason_params = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    vnc_password = models.CharField(max_length=8, blank=True)
    desktop_host = models.CharField(max_length=200, blank=True)
    desktop_port = models.PositiveIntegerField(null=True, blank=True)
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
    def home_volume(self) -> str:
        return f"deskpool-home-{self.user.get_username()}"


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
    node = models.ForeignKey(Node, on_delete=models.PROTECT)
    slice = models.ForeignKey(Slice, null=True, blank=True, on_delete=models.PROTECT)
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


class AuditEvent(models.Model):
    """Every decision and state change, with who or what made it."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=40, choices=AuditKind.choices)
    actor = models.CharField(max_length=200, help_text="user:<name>, node:<host>, scheduler")
    session = models.ForeignKey(
        Session, null=True, blank=True, related_name="audit", on_delete=models.CASCADE
    )
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.kind} by {self.actor}"


class PoolPolicy(models.Model):
    """The admin's scheduling knobs: one row (``PoolPolicy.current()``)."""

    warn_percent = models.PositiveIntegerField(
        default=80, help_text="Alert when this share of GPU capacity is in use."
    )
    block_percent = models.PositiveIntegerField(
        default=90, help_text="Refuse new hobby requests above this share."
    )
    temperature_limit_c = models.FloatField(
        default=85.0, help_text="No new work on a GPU at or above this temperature."
    )
    protected_minutes = models.PositiveIntegerField(
        default=15, help_text="A session this young is never preempted."
    )
    grace_minutes = models.PositiveIntegerField(
        default=5, help_text="A preempted desktop keeps running this long."
    )
    aging_minutes_per_gpu_hour = models.FloatField(
        default=15.0, help_text="Fair share: this much waiting offsets one GPU-hour of usage."
    )
    usage_half_life_days = models.FloatField(
        default=7.0, help_text="Recent usage counts half after this many days."
    )
    booking_hold_hours = models.FloatField(
        default=24.0, help_text="Bookings starting within this many hours hold capacity."
    )
    alert_level = models.CharField(max_length=10, default="ok", editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "pool policy"

    def __str__(self) -> str:
        return f"pool policy (warn {self.warn_percent}%, block {self.block_percent}%)"

    def clean(self) -> None:
        if not 0 < self.warn_percent <= self.block_percent <= 100:
            raise ValidationError(
                "Thresholds must satisfy 0 < warning <= block <= 100 (percent of GPU capacity)."
            )

    @classmethod
    def current(cls) -> PoolPolicy:
        policy = cls.objects.order_by("pk").first()
        return policy if policy is not None else cls.objects.create()


class QuotaScope(models.TextChoices):
    USER = "user", "User"
    COURSE = "course", "Course"
    DEPARTMENT = "department", "Department"


class Quota(models.Model):
    """Limits for one user, course or department; key ``*`` is the scope's default."""

    scope = models.CharField(max_length=20, choices=QuotaScope.choices)
    key = models.CharField(
        max_length=150, help_text="Username, course code or department; * = everyone else."
    )
    max_sessions = models.PositiveIntegerField(
        null=True, blank=True, help_text="Concurrent desktops holding capacity."
    )
    max_gpu_hours_week = models.FloatField(
        null=True, blank=True, help_text="GPU-hours (compute units x hours) over 7 days."
    )
    max_slice_memory_mb = models.PositiveIntegerField(
        null=True, blank=True, help_text="Largest slice, in MB of GPU memory."
    )

    class Meta:
        ordering = ["scope", "key"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="one_quota_per_scope_key")
        ]

    def __str__(self) -> str:
        return f"{self.scope} quota for {self.key}"


class BookingQuerySet(models.QuerySet["Booking"]):
    def visible_to(self, user: User | AnonymousUser) -> BookingQuerySet:
        """Bookings of the courses this user may read (``Course.objects.visible_to``)."""
        return self.filter(course__in=Course.objects.visible_to(user))


class Booking(models.Model):
    """An instructor's booking: ``seats`` desktops of a profile for a course in a window."""

    course = models.ForeignKey("portal.Course", related_name="bookings", on_delete=models.CASCADE)
    profile = models.ForeignKey(DesktopProfile, on_delete=models.PROTECT)
    seats = models.PositiveIntegerField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    objects = BookingQuerySet.as_manager()

    class Meta:
        ordering = ["starts_at", "pk"]

    def __str__(self) -> str:
        return f"{self.course} x{self.seats} {self.profile.slug} {self.starts_at:%Y-%m-%d %H:%M}"

    def in_window(self, now=None) -> bool:
        now = now or timezone.now()
        return self.starts_at <= now < self.ends_at


class WarmState(models.TextChoices):
    STARTING = "STARTING", "Starting"  # wanted: the node's agent starts it
    READY = "READY", "Ready"  # answered a VNC handshake: a booked student can claim it
    FAILED = "FAILED", "Failed"  # did not start or died; tried again (new key) at retry_at


class WarmDesktop(models.Model):
    """A desktop started ahead, without a user, for a class booking; its slice (or node, for
    a CPU-only profile) is held by an :class:`Allocation` row linked to it.

    Rows live while the portal wants the desktop: a claim moves the hold to the session (with
    ``Session.warm_key``) and deletes the row; the booking's end or cancellation deletes it
    and, with it, the hold.
    """

    booking = models.ForeignKey(Booking, related_name="warm_desktops", on_delete=models.CASCADE)
    node = models.ForeignKey(Node, related_name="warm_desktops", on_delete=models.CASCADE)
    key = models.CharField(max_length=40, unique=True)
    state = models.CharField(max_length=10, choices=WarmState.choices, default=WarmState.STARTING)
    reason = models.CharField(max_length=300, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    container_id = models.CharField(max_length=100, blank=True)
    failures = models.PositiveIntegerField(default=0)
    retry_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["booking_id", "pk"]

    def __str__(self) -> str:
        return f"warm desktop {self.key} ({self.state}) on {self.node}"

    @property
    def held_slice(self) -> Slice | None:
        """The slice its live hold is on (None for a CPU-only desktop, or once claimed)."""
        hold = self.holds.filter(released_at=None).select_related("slice").first()
        return hold.slice if hold is not None else None
