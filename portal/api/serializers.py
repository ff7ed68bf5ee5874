"""DRF serializers of the user API."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from nodeagent.protocol_files import HOME_PATH_MAX
from people.models import COURSE_CODE_MAX
from scheduling.choices import ON_NODE_STATES, IdleState, Purpose, SessionState
from scheduling.events import session_payload
from scheduling.models import Booking, DesktopProfile, Gpu, Node, Session, Slice


class DesktopProfileSerializer(serializers.ModelSerializer):
    available = serializers.SerializerMethodField(
        help_text="False when no healthy node of the pool could ever run this profile: a "
        "request for it is refused."
    )
    unavailable_reason = serializers.SerializerMethodField(
        help_text="Why it is not available, in the reader's language; empty when it is."
    )

    def get_available(self, profile: DesktopProfile) -> bool:
        return profile.pk not in self.context.get("unavailable", {})

    def get_unavailable_reason(self, profile: DesktopProfile) -> str:
        return str(self.context.get("unavailable", {}).get(profile.pk, ""))

    class Meta:
        model = DesktopProfile
        fields = [
            "id",
            "slug",
            "name",
            "description",
            "cpus",
            "memory_mb",
            "gpu_count",
            "gpu_memory_min_mb",
            "compute_min",
            "gpu_models",
            "allowed_kinds",
            "max_duration_minutes",
            "available",
            "unavailable_reason",
        ]


class SessionCreateSerializer(serializers.Serializer):
    profile = serializers.IntegerField()
    # Not DRF's '"<input>" is not a valid choice.': the input is not repeated back.
    purpose = serializers.ChoiceField(
        choices=Purpose.choices,
        error_messages={"invalid_choice": _("Purpose must be one of: thesis, coursework, hobby.")},
    )
    course = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, max_length=COURSE_CODE_MAX
    )


class TicketRequestSerializer(serializers.Serializer):
    # Not DRF's '"<input>" is not a valid choice.': the input is not repeated back.
    purpose = serializers.ChoiceField(
        choices=[(p, p) for p in ("screen", "sound", "upload", "download")],
        help_text="What the ticket opens: the desktop's screen or its sound, or one file of "
        "its owner's home up or down (``path``).",
        error_messages={
            "required": _("Say what to open: screen, sound, upload or download."),
            "invalid_choice": _("Purpose must be one of: screen, sound, upload, download."),
            "null": _("Say what to open: screen, sound, upload or download."),
        },
    )
    path = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=HOME_PATH_MAX,
        default="",
        help_text="upload, download: the file in the home (folders and name joined by '/').",
    )
    size = serializers.IntegerField(
        required=False, min_value=0, default=0, help_text="upload: the file's size in bytes."
    )


class TicketSerializer(serializers.Serializer):
    """A ticket to a node's desktop gateway: open ``url`` and send ``ticket`` first, before
    ``expires_at``, once."""

    ticket = serializers.CharField(help_text="The signed ticket (send it, never store it).")
    url = serializers.CharField(
        help_text="The node's gateway, with the path: ws:// or wss:// for the screen and the "
        "sound (send the ticket first), http:// or https:// for a file (download: "
        "?ticket=<ticket>; upload: PUT with the ticket in X-Deskpool-Ticket)."
    )
    expires_at = serializers.DateTimeField(help_text="Not to be opened after this.")


class IdleSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=IdleState.choices)
    since = serializers.DateTimeField(allow_null=True)
    suspends_at = serializers.DateTimeField(
        allow_null=True,
        help_text="Warned: when it is suspended unless it is used (the warning + the policy's "
        "suspend_after); otherwise null.",
    )


class SessionSerializer(serializers.Serializer):
    """A session as the API shows it: ``scheduling.events.session_payload``, the same dict
    live updates carry. The fields below declare it for the OpenAPI schema."""

    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=SessionState.choices)
    purpose = serializers.ChoiceField(choices=Purpose.choices)
    profile = serializers.IntegerField()
    profile_name = serializers.CharField()
    queue_position = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField(help_text="The reason in the reader's language and zone.")
    reason_code = serializers.CharField(help_text="A code of scheduling.engine.reasons.Code.")
    reason_params = serializers.DictField(help_text="Its parameters; times in ISO 8601.")
    eta = serializers.DateTimeField(allow_null=True)
    blocked = serializers.BooleanField()
    preempt_deadline = serializers.DateTimeField(allow_null=True)
    booking = serializers.IntegerField(allow_null=True)
    node = serializers.CharField(allow_null=True)
    slice = serializers.CharField(allow_null=True)
    desktop_url = serializers.CharField(allow_null=True)
    simulated = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    ends_at = serializers.DateTimeField(
        allow_null=True,
        help_text="The current time limit: started_at + the profile's max duration + extensions.",
    )
    idle = IdleSerializer(help_text="The idle policy's verdict and when it changed.")

    def to_representation(self, instance: Session) -> dict:
        return dict(session_payload(instance))


class SliceSerializer(serializers.ModelSerializer):
    in_use = serializers.SerializerMethodField()

    class Meta:
        model = Slice
        fields = ["id", "kind", "profile", "device_uuid", "memory_mb", "present", "in_use"]

    def get_in_use(self, slice_: Slice) -> bool:
        return slice_.pk in self.context.get("held", set())


class GpuSerializer(serializers.ModelSerializer):
    slices = SliceSerializer(many=True, read_only=True)

    class Meta:
        model = Gpu
        fields = [
            "id",
            "uuid",
            "index",
            "model",
            "memory_mb",
            "sharing",
            "simulated",
            "metrics",
            "present",
            "slices",
        ]


class NodeSerializer(serializers.ModelSerializer):
    gpus = GpuSerializer(many=True, read_only=True)
    healthy = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id",
            "hostname",
            "address",
            "labels",
            "cpu_count",
            "memory_mb",
            "runtime",
            "last_heartbeat",
            "cordoned",
            "healthy",
            "gpus",
        ]

    def get_healthy(self, node: Node) -> bool:
        return node.is_healthy()


class PoolSerializer(serializers.Serializer):
    """``GET /api/v1/pool/``: the nodes with their GPUs and slices, and the pool's use."""

    nodes = NodeSerializer(many=True)
    slices_total = serializers.IntegerField()
    slices_in_use = serializers.IntegerField()
    utilisation = serializers.FloatField(help_text="Share of the pool in use, 0 to 1.")
    alert_level = serializers.CharField(
        help_text='ok, warn or block: the level of the "Pool usage" alert rule\'s open alert.'
    )
    warn_percent = serializers.FloatField(help_text='The "Pool usage" rule\'s warning level.')
    block_percent = serializers.FloatField(
        help_text='The "Pool usage" rule\'s critical level: new hobby requests are refused.'
    )


class BookingCreateSerializer(serializers.Serializer):
    course = serializers.CharField(max_length=COURSE_CODE_MAX)
    profile = serializers.IntegerField()
    seats = serializers.IntegerField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()


class BookingSerializer(serializers.ModelSerializer):
    course = serializers.CharField(source="course.code", read_only=True)
    profile = serializers.IntegerField(source="profile_id", read_only=True)
    profile_name = serializers.CharField(source="profile.name", read_only=True)
    seats_running = serializers.SerializerMethodField()

    class Meta:
        model = Booking
        fields = [
            "id",
            "course",
            "profile",
            "profile_name",
            "seats",
            "seats_running",
            "starts_at",
            "ends_at",
            "cancelled_at",
        ]

    def get_seats_running(self, booking: Booking) -> int:
        return booking.sessions.filter(state__in=ON_NODE_STATES).count()
