"""API for thesis grants, quota requests and what is left of one's quota: thin viewsets over
``scheduling.services.grants``, ``quota_requests`` and ``quota_view``."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from people.models import ThesisGrant
from portal.api.fields import ChoiceField
from portal.kit.person import PersonMixin
from scheduling.events import quota_request_payload
from scheduling.models.policy import QuotaRequest
from scheduling.services.grants import check_grant, check_revoke, do_grant, do_revoke
from scheduling.services.quota_requests import (
    GRANT,
    REFUSE,
    check_answer,
    check_ask,
    do_answer,
    do_ask,
    visible_quota_requests,
)
from scheduling.services.quota_view import quota_left


class ThesisGrantSerializer(serializers.ModelSerializer):
    student = serializers.CharField(source="student.username", read_only=True)
    granted_by = serializers.CharField(
        source="granted_by.username", read_only=True, default=None, allow_null=True
    )
    revoked_by = serializers.CharField(
        source="revoked_by.username", read_only=True, default=None, allow_null=True
    )
    active = serializers.SerializerMethodField()

    class Meta:
        model = ThesisGrant
        fields = [
            "id",
            "student",
            "granted_by",
            "until",
            "note",
            "created_at",
            "revoked_at",
            "revoked_by",
            "closed_at",
            "active",
        ]
        read_only_fields = fields

    def get_active(self, grant: ThesisGrant) -> bool:
        return grant.revoked_at is None and grant.until >= timezone.localdate()


class ThesisGrantCreateSerializer(serializers.Serializer):
    student = serializers.CharField(max_length=150, help_text="The student's username.")
    until = serializers.DateField(help_text="The last day of the grant (inclusive).")
    note = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


@extend_schema_view(
    list=extend_schema(summary="Thesis grants you gave or hold (all for admins)"),
    retrieve=extend_schema(summary="One thesis grant"),
)
class ThesisGrantViewSet(
    PersonMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = ThesisGrantSerializer

    def get_queryset(self):
        return ThesisGrant.objects.visible_to(self.request.user).select_related(
            "student", "granted_by", "revoked_by"
        )

    @extend_schema(
        summary="Grant a student thesis status (faculty and admins)",
        request=ThesisGrantCreateSerializer,
        responses={201: ThesisGrantSerializer},
    )
    def create(self, request: Request) -> Response:
        form = ThesisGrantCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        person = self.person
        data: dict[str, Any] = dict(form.validated_data)
        grant = do_grant(person, check_grant(person, data["student"], data["until"], data["note"]))
        return Response(ThesisGrantSerializer(grant).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Revoke a grant (its grantor or an admin)",
        request=None,
        responses={200: ThesisGrantSerializer},
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        person = self.person
        grant = do_revoke(person, check_revoke(person, int(pk or 0)))
        return Response(ThesisGrantSerializer(grant).data)


class QuotaRequestSerializer(serializers.Serializer):
    """The same fields as the ``quota.update`` live payload, plus the student."""

    id = serializers.IntegerField(read_only=True)
    student = serializers.CharField(read_only=True)
    course = serializers.CharField(read_only=True)
    hours = serializers.FloatField(read_only=True)
    reason = serializers.CharField(read_only=True)
    state = serializers.CharField(read_only=True)
    state_label = serializers.CharField(read_only=True)
    answer = serializers.CharField(read_only=True)
    answered_by = serializers.CharField(read_only=True, allow_null=True)
    answered_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)

    def to_representation(self, instance: QuotaRequest) -> dict[str, Any]:
        return {**quota_request_payload(instance), "student": instance.student.get_username()}


class QuotaAskSerializer(serializers.Serializer):
    course = serializers.CharField(help_text="The code of a course you are enrolled in.")
    hours = serializers.FloatField(help_text="Extra GPU-hours asked for.")
    reason = serializers.CharField(max_length=2000, help_text="What they are for.")


class QuotaAnswerSerializer(serializers.Serializer):
    decision = ChoiceField(choices=[GRANT, REFUSE])
    hours = serializers.FloatField(
        required=False, allow_null=True, help_text="Hours to grant (default: all asked)."
    )
    answer = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


@extend_schema_view(
    list=extend_schema(summary="Your quota requests and those of the courses you answer for"),
    retrieve=extend_schema(summary="One quota request"),
)
class QuotaRequestViewSet(
    PersonMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = QuotaRequestSerializer

    def get_queryset(self):
        requests = visible_quota_requests(self.request.user).select_related(
            "student", "course", "answered_by"
        )
        course = self.request.query_params.get("course")
        return requests.filter(course__code=course) if course else requests

    @extend_schema(
        summary="Ask a course's teachers for more GPU-hours",
        request=QuotaAskSerializer,
        responses={201: QuotaRequestSerializer},
    )
    def create(self, request: Request) -> Response:
        form = QuotaAskSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        person = self.person
        data = form.validated_data
        made = do_ask(person, check_ask(person, data["course"], data["hours"], data["reason"]))
        return Response(QuotaRequestSerializer(made).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Grant (all or fewer hours) or refuse a request (teachers, allowed TAs, admins)",
        request=QuotaAnswerSerializer,
        responses={200: QuotaRequestSerializer},
    )
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, pk: str | None = None) -> Response:
        form = QuotaAnswerSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        person = self.person
        data = form.validated_data
        reply = check_answer(
            person, int(pk or 0), data["decision"], data.get("hours"), data["answer"]
        )
        answered = do_answer(person, reply)
        return Response(QuotaRequestSerializer(answered).data)


class QuotaLeftSerializer(serializers.Serializer):
    open_sessions = serializers.IntegerField()
    max_open_sessions = serializers.IntegerField()
    holding = serializers.IntegerField(help_text="Desktops holding capacity now.")
    max_concurrent = serializers.IntegerField(allow_null=True)
    gpu_hours_week = serializers.FloatField(help_text="GPU-hours used over the last 7 days.")
    max_gpu_hours_week = serializers.FloatField(
        allow_null=True, help_text="Weekly limit, granted extra hours included (null: none)."
    )
    extra_gpu_hours = serializers.FloatField(help_text="Extra GPU-hours granted this week.")
    hours_left = serializers.FloatField(allow_null=True)


class MyQuotaView(PersonMixin, APIView):
    @extend_schema(summary="What is left of your quotas", responses={200: QuotaLeftSerializer})
    def get(self, request: Request) -> Response:
        return Response(QuotaLeftSerializer(quota_left(self.person)).data)
