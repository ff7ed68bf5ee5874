"""The bookings API: single bookings, booking series and the feasibility check.

Thin viewsets over :mod:`scheduling.services.bookings` and
:mod:`scheduling.services.booking_series`; a refusal answers through the API exception
handler (``portal.api.errors``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from people.models import COURSE_CODE_MAX, Course
from portal.api.fields import ChoiceField
from portal.api.serializers import BookingCreateSerializer, BookingSerializer
from portal.kit.person import PersonMixin, signed_in
from scheduling.models import Booking, BookingSeries
from scheduling.services import Conflict
from scheduling.services.booking_series import (
    SeriesPlan,
    check_series,
    do_cancel_series,
    do_create_series,
    without_conflicts,
)
from scheduling.services.bookings import (
    check_booking,
    check_booking_change,
    do_cancel_booking,
    do_change_booking,
    do_create_booking,
    fit_words,
)


class BookingChangeSerializer(serializers.Serializer):
    profile = serializers.IntegerField(required=False)
    seats = serializers.IntegerField(required=False)
    starts_at = serializers.DateTimeField(required=False)
    ends_at = serializers.DateTimeField(required=False)


class SeriesRequestSerializer(serializers.Serializer):
    course = serializers.CharField(max_length=COURSE_CODE_MAX)
    profile = serializers.IntegerField()
    seats = serializers.IntegerField()
    weekly = serializers.BooleanField(default=False)
    first_date = serializers.DateField()
    last_date = serializers.DateField(required=False, allow_null=True)
    starts = serializers.TimeField(help_text="Time of day, in time_zone.")
    ends = serializers.TimeField(help_text="Time of day, in time_zone.")
    skip_dates = serializers.ListField(child=serializers.DateField(), default=list)
    time_zone = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=64,
        help_text="Blank: the person's time zone.",
    )


class SeriesCreateSerializer(SeriesRequestSerializer):
    without_conflicts = serializers.BooleanField(
        default=False, help_text="Skip the dates that do not fit and book the rest."
    )


class AlternativeSerializer(serializers.Serializer):
    kind = ChoiceField(choices=["seats", "time", "profile"])
    seats = serializers.IntegerField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    profile = serializers.IntegerField()
    profile_name = serializers.CharField()
    text = serializers.CharField()


class DateCheckSerializer(serializers.Serializer):
    date = serializers.DateField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    fits = serializers.BooleanField()
    code = serializers.CharField()
    most_seats = serializers.IntegerField()
    reason = serializers.CharField()
    alternatives = AlternativeSerializer(many=True)


class BookingSeriesSerializer(serializers.ModelSerializer):
    course = serializers.CharField(source="course.code", read_only=True)
    profile = serializers.IntegerField(source="profile_id", read_only=True)
    bookings: serializers.PrimaryKeyRelatedField[Booking] = serializers.PrimaryKeyRelatedField(
        many=True, read_only=True
    )

    class Meta:
        model = BookingSeries
        fields = [
            "id",
            "course",
            "profile",
            "seats",
            "weekly",
            "first_date",
            "last_date",
            "starts",
            "ends",
            "time_zone",
            "skip_dates",
            "created_at",
            "cancelled_at",
            "bookings",
        ]


SeriesCheckSerializer = inline_serializer(
    "SeriesCheck",
    {
        "fits": serializers.BooleanField(),
        "conflicts": serializers.IntegerField(),
        "cautions": serializers.ListField(
            child=serializers.CharField(),
            help_text="What fits but looks like a mistake (an overlapping booking of the "
            "course, more seats than its roster): the page asks to confirm these.",
        ),
        "dates": DateCheckSerializer(many=True),
    },
)


def plan_data(plan: SeriesPlan) -> dict[str, Any]:
    """The per-date check as JSON, reasons in the reader's language and time zone."""
    return {
        "fits": plan.fits,
        "conflicts": len(plan.conflicts),
        "cautions": list(plan.cautions),
        "dates": [
            {
                "date": d.day,
                "starts_at": d.starts_at,
                "ends_at": d.ends_at,
                "fits": d.fits,
                "code": d.fit.code,
                "most_seats": d.fit.most_seats,
                "reason": fit_words(d.fit, d.profile_name),
                "alternatives": [
                    {
                        "kind": a.kind,
                        "seats": a.seats,
                        "starts_at": a.starts_at,
                        "ends_at": a.ends_at,
                        "profile": a.profile_id,
                        "profile_name": a.profile_name,
                        "text": text,
                    }
                    for a, text in zip(d.alternatives, d.alternative_words, strict=True)
                ],
            }
            for d in plan.dates
        ],
    }


def _check(
    request: Request, serializer_class: type[SeriesRequestSerializer]
) -> tuple[SeriesPlan, dict]:
    form = serializer_class(data=request.data)
    form.is_valid(raise_exception=True)
    data = form.validated_data
    plan = check_series(
        signed_in(request.user),
        data["course"],
        data["profile"],
        data["seats"],
        data["first_date"],
        data.get("last_date"),
        data["weekly"],
        data["starts"],
        data["ends"],
        data["skip_dates"],
        time_zone=data.get("time_zone") or None,
    )
    return plan, data


class BookingViewSet(
    PersonMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Class bookings: instructors see and make their courses' bookings; admins all."""

    serializer_class = BookingSerializer

    def get_queryset(self):
        return Booking.objects.visible_to(self.request.user).select_related("course", "profile")

    def get_serializer_class(self):
        return BookingCreateSerializer if self.action == "create" else BookingSerializer

    @extend_schema(request=BookingCreateSerializer, responses={201: BookingSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        form = BookingCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        user = self.person
        checked = check_booking(
            user,
            data["course"],
            data["profile"],
            data["seats"],
            data["starts_at"],
            data["ends_at"],
        )
        booking = do_create_booking(user, checked)
        return Response(BookingSerializer(booking).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=BookingChangeSerializer, responses={200: BookingSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        booking = self.get_object()
        form = BookingChangeSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        user = self.person
        change = check_booking_change(
            user,
            booking,
            seats=data.get("seats"),
            starts_at=data.get("starts_at"),
            ends_at=data.get("ends_at"),
            profile_id=data.get("profile"),
        )
        booking = do_change_booking(user, change)
        return Response(BookingSerializer(booking).data)

    @extend_schema(request=None, responses={200: BookingSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        booking = self.get_object()
        booking = do_cancel_booking(self.person, booking)
        return Response(BookingSerializer(booking).data)


class BookingSeriesViewSet(
    PersonMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Booking series (once or weekly over a term) of the courses a person may read."""

    serializer_class = BookingSeriesSerializer

    def get_queryset(self):
        courses = Course.objects.visible_to(self.request.user)
        return (
            BookingSeries.objects.filter(course__in=courses)
            .select_related("course")
            .prefetch_related("bookings")
        )

    @extend_schema(request=SeriesCreateSerializer, responses={201: BookingSeriesSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        plan, data = _check(request, SeriesCreateSerializer)
        user = self.person
        if data["without_conflicts"] and plan.conflicts:
            plan = without_conflicts(user, plan)
        if not plan.fits:
            raise Conflict(" ".join(f"{d.day.isoformat()}: {d.words}" for d in plan.conflicts))
        series = do_create_series(user, plan)
        return Response(
            BookingSeriesSerializer(self.get_queryset().get(pk=series.pk)).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(request=SeriesRequestSerializer, responses={200: SeriesCheckSerializer})
    @action(detail=False, methods=["post"])
    def check(self, request: Request) -> Response:
        plan, _ = _check(request, SeriesRequestSerializer)
        return Response(plan_data(plan))

    @extend_schema(request=None, responses={200: BookingSeriesSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        series = self.get_object()
        do_cancel_series(self.person, series)
        return Response(BookingSeriesSerializer(self.get_queryset().get(pk=series.pk)).data)
