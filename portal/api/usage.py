"""API for accounting (admins only): usage records, the usage report (JSON or CSV) and the
price list. Thin views over ``scheduling.services.accounting``."""

from __future__ import annotations

import io
from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, renderers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.fields import ChoiceField
from portal.api.schema import ErrorDetailSerializer
from portal.kit.person import PersonMixin
from scheduling.csv_export import SafeWriter
from scheduling.models import PriceRule, PriceUnit, UsageRecord
from scheduling.services.accounting import (
    GROUPS,
    PERIODS,
    check_price,
    check_report,
    do_price,
    records_matching,
    report_csv,
    row_fields,
    usage_report,
)
from scheduling.services.prices import check_correct, check_end, do_correct, do_end


def hours_field() -> serializers.DecimalField:
    """Hours as exact decimal strings, to the microsecond's sixth place."""
    return serializers.DecimalField(max_digits=20, decimal_places=6, read_only=True)


class CsvRenderer(renderers.BaseRenderer):
    """``?format=csv`` or ``Accept: text/csv``: the report's rows as CSV."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type=None, renderer_context=None) -> str:
        if isinstance(data, dict):  # an error: a line per field and message
            out = io.StringIO()
            writer = SafeWriter(out)
            writer.writerow(["field", "message"])
            for name, messages in data.items():
                for message in messages if isinstance(messages, list) else [messages]:
                    writer.writerow([name, str(message)])
            return out.getvalue()
        return report_csv(data or [])


class UsageRecordSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="username", read_only=True)
    gpu_hours = hours_field()
    cu_hours = hours_field()
    idle_gpu_hours = hours_field()

    class Meta:
        model = UsageRecord
        fields = [
            "id",
            "session",
            "run",
            "user",
            "course_code",
            "department",
            "purpose",
            "profile_slug",
            "booking_id",
            "slice_kind",
            "mig_profile",
            "gpu_model",
            "node_hostname",
            "slices",
            "gpu_share",
            "compute_units",
            "started_at",
            "ended_at",
            "end_state",
            "gpu_hours",
            "cu_hours",
            "idle_gpu_hours",
            "utilisation_pct",
        ]
        read_only_fields = fields


class RecordFilterSerializer(serializers.Serializer):
    user = serializers.CharField(required=False, help_text=_("A username."))
    course = serializers.CharField(required=False, help_text=_("A course code."))
    department = serializers.CharField(required=False)
    purpose = serializers.CharField(required=False)
    session = serializers.IntegerField(required=False, min_value=1)
    open = serializers.BooleanField(required=False, allow_null=True, default=None)
    booked = serializers.BooleanField(required=False, allow_null=True, default=None)
    since = serializers.DateField(required=False, help_text=_("Runs started on or after."))
    until = serializers.DateField(required=False, help_text=_("Runs started on or before."))


@extend_schema_view(
    list=extend_schema(
        summary="Usage records, one per run of a session (admins)",
        parameters=[RecordFilterSerializer],
    )
)
class UsageRecordViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = UsageRecordSerializer
    permission_classes = [IsAdminUser]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return UsageRecord.objects.none()
        filters = RecordFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        return records_matching(filters.validated_data)


class ReportQuerySerializer(serializers.Serializer):
    group = ChoiceField(choices=GROUPS)
    period = ChoiceField(choices=PERIODS)
    start = serializers.DateField(help_text=_("First day (inclusive)."))
    end = serializers.DateField(help_text=_("Last day (inclusive)."))


class ReportRowSerializer(serializers.Serializer):
    group = serializers.CharField()
    key = serializers.CharField(help_text=_("The department, course code or username."))
    period = serializers.CharField()
    period_start = serializers.DateField()
    runs = serializers.IntegerField()
    gpu_hours = hours_field()
    cu_hours = hours_field()
    idle_gpu_hours = hours_field()
    booked_gpu_hours = hours_field()
    cost = serializers.DecimalField(max_digits=20, decimal_places=2, read_only=True)
    currency = serializers.CharField()
    price_lines = serializers.CharField(
        help_text=_(
            "The price lines that priced the row: '#<id> <price> <currency>/<unit>: <cost>', "
            "by id, separated by '; '."
        )
    )


class UsageReportView(APIView):
    permission_classes = [IsAdminUser]
    renderer_classes = [renderers.JSONRenderer, renderers.BrowsableAPIRenderer, CsvRenderer]

    @extend_schema(
        summary="Use and cost per department, course or user, by week or month (admins)",
        parameters=[
            ReportQuerySerializer,
            OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"], required=False),
        ],
        responses={
            200: ReportRowSerializer(many=True),
            404: OpenApiResponse(ErrorDetailSerializer, description="An unknown format."),
        },
    )
    def get(self, request: Request) -> Response:
        query = ReportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        checked = check_report(data["group"], data["period"], data["start"], data["end"])
        rows = usage_report(checked.group, checked.period, checked.start, checked.end)
        response = Response([row_fields(row) for row in rows])
        if request.accepted_renderer.format == "csv":
            name = f"usage-{checked.group}-{checked.period}-{checked.start}-{checked.end}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class PriceRuleSerializer(serializers.ModelSerializer):
    profile: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, default=None, allow_null=True
    )

    class Meta:
        model = PriceRule
        fields = [
            "id",
            "slice_kind",
            "profile",
            "unit",
            "price",
            "currency",
            "valid_from",
            "valid_until",
            "note",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class PriceRuleCreateSerializer(serializers.Serializer):
    slice_kind = serializers.CharField(
        required=False, allow_blank=True, default="", help_text=_("mig, share, whole; empty: any")
    )
    profile = serializers.CharField(
        required=False, allow_blank=True, default="", help_text=_("A profile's slug; empty: any")
    )
    unit = ChoiceField(choices=PriceUnit.choices)
    price = serializers.DecimalField(max_digits=12, decimal_places=4)
    currency = serializers.CharField(max_length=3)
    valid_from = serializers.DateField()
    valid_until = serializers.DateField(required=False, allow_null=True, default=None)
    note = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class PriceEndSerializer(serializers.Serializer):
    valid_until = serializers.DateField(help_text=_("The line's new last day (inclusive)."))


class PriceCorrectSerializer(serializers.Serializer):
    price = serializers.DecimalField(max_digits=12, decimal_places=4, required=False)
    currency = serializers.CharField(max_length=3, required=False)
    note = serializers.CharField(max_length=300, required=False, allow_blank=True)
    valid_from = serializers.DateField(required=False)
    valid_until = serializers.DateField(required=False, allow_null=True)


@extend_schema_view(list=extend_schema(summary="The internal price list (admins)"))
class PriceRuleViewSet(PersonMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """The price list: list and add; ``POST <id>/end/`` and ``<id>/correct/``, checked as on
    the console's Prices page (``scheduling.services.prices``). Admins only."""

    serializer_class = PriceRuleSerializer
    permission_classes = [IsAdminUser]

    def get_queryset(self):
        return PriceRule.objects.select_related("profile", "created_by")

    @extend_schema(
        summary="Add a line to the price list; a change of price is a new line (admins)",
        request=PriceRuleCreateSerializer,
        responses={201: PriceRuleSerializer},
    )
    def create(self, request: Request) -> Response:
        form = PriceRuleCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        person = self.person
        rule = do_price(person, check_price(**form.validated_data))
        return Response(PriceRuleSerializer(rule).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="End a price line: its new last day (admins)",
        request=PriceEndSerializer,
        responses={200: PriceRuleSerializer},
    )
    @action(detail=True, methods=["post"])
    def end(self, request: Request, pk: str | None = None) -> Response:
        form = PriceEndSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        person = self.person
        rule = do_end(person, check_end(person, int(pk or 0), form.validated_data["valid_until"]))
        return Response(PriceRuleSerializer(rule).data)

    @extend_schema(
        summary="Correct a price line no closed report used: price, currency, note, dates "
        "(admins; fields left out keep their value)",
        request=PriceCorrectSerializer,
        responses={200: PriceRuleSerializer},
    )
    @action(detail=True, methods=["post"])
    def correct(self, request: Request, pk: str | None = None) -> Response:
        form = PriceCorrectSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        person = self.person
        rule = do_correct(person, check_correct(person, int(pk or 0), form.validated_data))
        return Response(PriceRuleSerializer(rule).data)
