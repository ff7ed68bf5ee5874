"""API for alerts and their rules, admins only: thin viewsets over
``scheduling.services.alert_changes`` (docs/alerts.md)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from portal.kit.person import PersonMixin
from scheduling.events import alert_payload
from scheduling.models import Alert, AlertRule, AlertState
from scheduling.models.alerts import Metric, Scope
from scheduling.services.alert_changes import (
    check_acknowledge,
    check_resolve,
    check_rule,
    do_acknowledge,
    do_resolve,
    do_save_rule,
)
from scheduling.services.alerts import ensure_default_rules


class AlertSerializer(serializers.Serializer):
    """The same fields as the ``alert.update`` live payload."""

    id = serializers.IntegerField(read_only=True)
    rule = serializers.IntegerField(read_only=True)
    rule_name = serializers.CharField(read_only=True)
    metric = serializers.ChoiceField(choices=Metric.choices, read_only=True)
    scope = serializers.ChoiceField(choices=Scope.choices, read_only=True)
    subject = serializers.CharField(read_only=True)
    level = serializers.CharField(read_only=True)
    state = serializers.ChoiceField(choices=AlertState.choices, read_only=True)
    value = serializers.FloatField(read_only=True, allow_null=True)
    raised_at = serializers.DateTimeField(read_only=True)
    escalated_at = serializers.DateTimeField(read_only=True, allow_null=True)
    acknowledged_at = serializers.DateTimeField(read_only=True, allow_null=True)
    acknowledged_by = serializers.CharField(read_only=True, allow_null=True)
    resolved_at = serializers.DateTimeField(read_only=True, allow_null=True)
    resolved_by = serializers.CharField(read_only=True, allow_null=True)

    def to_representation(self, instance: Alert) -> dict[str, Any]:
        return dict(alert_payload(instance))


class AlertRuleSerializer(serializers.ModelSerializer):
    """A rule as read; writes are validated by ``check_rule`` (plain-words errors)."""

    class Meta:
        model = AlertRule
        fields = [
            "id",
            "name",
            "metric",
            "scope",
            "warning",
            "critical",
            "recovery",
            "sustained_minutes",
            "enabled",
            "extra_recipients",
            "updated_at",
        ]
        read_only_fields = ["id", "updated_at"]


@extend_schema_view(
    list=extend_schema(
        summary="Alerts, newest first (admins only)",
        parameters=[
            OpenApiParameter(
                "state",
                str,
                enum=["open", *AlertState.values],
                description="Only alerts in this state; open = firing or acknowledged.",
            )
        ],
    ),
    retrieve=extend_schema(summary="One alert (admins only)"),
)
class AlertViewSet(
    PersonMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = AlertSerializer
    permission_classes = [permissions.IsAdminUser]

    def get_queryset(self):
        alerts = Alert.objects.select_related("rule", "acknowledged_by", "resolved_by")
        state = self.request.query_params.get("state")
        if state == "open":
            return alerts.open()
        if state:
            if state not in AlertState.values:
                allowed = ", ".join(["open", *AlertState.values])
                raise ValidationError(
                    {"state": [_("Filter by one of: %(allowed)s.") % {"allowed": allowed}]}
                )
            return alerts.filter(state=state)
        return alerts

    @extend_schema(summary="Acknowledge a firing alert", request=None, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str | None = None) -> Response:
        person = self.person
        alert = do_acknowledge(person, check_acknowledge(person, int(pk or 0)))
        return Response(AlertSerializer(self.get_queryset().get(pk=alert.pk)).data)

    @extend_schema(summary="Resolve an open alert by hand", request=None, responses=AlertSerializer)
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str | None = None) -> Response:
        person = self.person
        alert = do_resolve(person, check_resolve(person, int(pk or 0)))
        return Response(AlertSerializer(self.get_queryset().get(pk=alert.pk)).data)


@extend_schema_view(
    list=extend_schema(summary="Alert rules (admins only; the defaults are made on first use)"),
    retrieve=extend_schema(summary="One alert rule (admins only)"),
)
class AlertRuleViewSet(
    PersonMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = AlertRuleSerializer
    permission_classes = [permissions.IsAdminUser]

    def get_queryset(self):
        return AlertRule.objects.all()

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        ensure_default_rules()
        return super().list(request, *args, **kwargs)

    def _save(self, request: Request, rule: AlertRule | None) -> AlertRule:
        if not isinstance(request.data, dict):
            raise ValidationError({"non_field_errors": [_("Send the rule as a JSON object.")]})
        person = self.person
        return do_save_rule(person, check_rule(person, dict(request.data), rule))

    @extend_schema(
        summary="Create an alert rule",
        request=AlertRuleSerializer,
        responses={201: AlertRuleSerializer},
    )
    def create(self, request: Request) -> Response:
        rule = self._save(request, None)
        return Response(AlertRuleSerializer(rule).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Change an alert rule", request=AlertRuleSerializer)
    def update(self, request: Request, pk: str | None = None) -> Response:
        rule = self._save(request, self.get_object())
        return Response(AlertRuleSerializer(rule).data)

    @extend_schema(summary="Change some fields of an alert rule", request=AlertRuleSerializer)
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        return self.update(request, pk)
