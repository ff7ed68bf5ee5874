"""DRF serializers of the user API."""

from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers

from scheduling.choices import Purpose, SessionState
from scheduling.models import Booking, DesktopProfile, Gpu, Node, Session, Slice


class DesktopProfileSerializer(serializers.ModelSerializer):
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
        ]


class SessionCreateSerializer(serializers.Serializer):
    profile = serializers.IntegerField()
    purpose = serializers.ChoiceField(choices=Purpose.choices)
    course = serializers.CharField(required=False, allow_blank=True, allow_null=True)


class SessionSerializer(serializers.ModelSerializer):
    profile = serializers.IntegerField(source="profile_id", read_only=True)
    profile_name = serializers.CharField(source="profile.name", read_only=True)
    node = serializers.SerializerMethodField()
    slice = serializers.SerializerMethodField()
    desktop_url = serializers.SerializerMethodField()
    simulated = serializers.SerializerMethodField()

    class Meta:
        model = Session
        fields = [
            "id",
            "state",
            "purpose",
            "profile",
            "profile_name",
            "queue_position",
            "reason",
            "eta",
            "blocked",
            "preempt_deadline",
            "booking",
            "node",
            "slice",
            "desktop_url",
            "simulated",
            "created_at",
            "started_at",
            "ended_at",
        ]

    def get_node(self, session: Session) -> str | None:
        return session.node.hostname if session.node else None

    def get_slice(self, session: Session) -> str | None:
        held = [a.slice for a in session.allocations.all() if a.slice and not a.released_at]
        if not held:
            return None
        return ", ".join(f"gpu{s.gpu.index} {s.profile or s.kind}" for s in held)

    def get_desktop_url(self, session: Session) -> str | None:
        if session.state not in (SessionState.RUNNING, SessionState.PREEMPTING):
            return None
        return reverse("desktop", args=[session.pk])

    def get_simulated(self, session: Session) -> bool:
        return bool(session.node and session.node.runtime == "simulated")


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


class BookingCreateSerializer(serializers.Serializer):
    course = serializers.CharField()
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
        from scheduling.choices import ON_NODE_STATES

        return booking.sessions.filter(state__in=ON_NODE_STATES).count()
