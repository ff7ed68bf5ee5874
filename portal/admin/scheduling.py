"""The Django admin, for raw data. Every change it makes goes through the services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.utils.translation import gettext_lazy as _

from portal.kit.form_fields import NumbersAdmin
from portal.kit.forms import ServiceChecked
from scheduling.models import (
    AuditEvent,
    Booking,
    DesktopProfile,
    Gpu,
    IdlePolicy,
    JoinToken,
    LifecycleNotices,
    Node,
    PoolPolicy,
    Quota,
    Session,
    Slice,
    WarmDesktop,
)
from scheduling.services import ServiceError
from scheduling.services.admin_changes import do_save_audited
from scheduling.services.bookings import check_booking, do_cancel_booking, do_create_booking
from scheduling.services.catalogue_changes import (
    PROFILE_FIELDS,
    QUOTA_FIELDS,
    check_profile,
    check_quota,
    do_delete_profile,
    do_delete_quota,
    do_save_profile,
    do_save_quota,
)
from scheduling.services.health import do_clear_cordon
from scheduling.services.idle_policies import (
    POLICY_FIELDS,
    check_idle_policy,
    do_delete_idle_policy,
    do_save_idle_policy,
)
from scheduling.services.node_address import check_node_address, check_node_hostname


class AuditedAdmin(NumbersAdmin):
    """Every change an admin saves here is an audit event, with the fields that changed."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        do_save_audited(
            obj,
            {name: form.cleaned_data.get(name) for name in form.changed_data},
            actor=f"user:{request.user.get_username()}",
        )


class NodeForm(ServiceChecked, forms.ModelForm):
    """A node's hostname and address pass the checks its registration passes: a hostname
    or an IP address, the address in the management network (the admin's ``get_form`` makes
    the form's ``Meta``)."""

    def check(self, data: dict[str, Any]) -> None:
        if "hostname" in data:
            check_node_hostname(data["hostname"])
        if "address" in data:
            data["address"] = check_node_address(data["address"])


@admin.register(Node)
class NodeAdmin(AuditedAdmin):
    form = NodeForm
    list_display = [
        "hostname",
        "address",
        "runtime",
        "last_heartbeat",
        "cordoned",
        "failures_in_a_row",
    ]
    list_filter = ["cordoned"]
    exclude = ["token_hash"]
    # Changed only through the actions below, so that every change is audited.
    # Cordons and drains, with their reasons, are made in the console (/console/pool/).
    readonly_fields = [
        "cordoned",
        "cordon_reason",
        "failures_in_a_row",
        "draining_since",
        "drain_reason",
        "drain_deadline",
        "drained_at",
    ]
    actions = ["clear_cordon"]

    @admin.action(description=_("Clear cordon"), permissions=["change"])
    def clear_cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        actor = f"user:{request.user.get_username()}"
        why = str(_("cleared in the Django admin"))
        cleared = [node.hostname for node in queryset if do_clear_cordon(node, actor, why)]
        if cleared:
            self.message_user(
                request, _("Cordon cleared on %(nodes)s.") % {"nodes": ", ".join(cleared)}
            )
        else:
            self.message_user(request, _("None of these nodes was cordoned."), messages.WARNING)


@admin.register(Gpu)
class GpuAdmin(NumbersAdmin):
    list_display = ["node", "index", "model", "memory_mb", "sharing", "simulated"]
    list_filter = ["sharing", "model", "simulated"]


@admin.register(Slice)
class SliceAdmin(NumbersAdmin):
    list_display = ["gpu", "kind", "profile", "memory_mb", "present"]
    list_filter = ["kind", "profile"]


class CatalogueForm(ServiceChecked, forms.ModelForm):
    """A profile or quota is checked by the service the console uses (``catalogue_changes``),
    so both refuse the same things with the same words; the change is kept as ``checked``."""


class DesktopProfileForm(CatalogueForm):
    class Meta:
        model = DesktopProfile
        fields = list(PROFILE_FIELDS)

    def check(self, data: dict[str, Any]) -> Any:
        return check_profile(data, profile=self.instance)


class QuotaForm(CatalogueForm):
    class Meta:
        model = Quota
        fields = list(QUOTA_FIELDS)

    def check(self, data: dict[str, Any]) -> Any:
        return check_quota(data, quota=self.instance)


@admin.register(DesktopProfile)
class DesktopProfileAdmin(NumbersAdmin):
    """Saved through ``do_save_profile`` (audited with before and after), as in the console.
    A CPU-only profile (0 GPUs, no slice kinds) saves: ``allowed_kinds`` may be empty."""

    form = DesktopProfileForm
    list_display = ["name", "image", "gpu_count", "gpu_memory_min_mb", "active"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        do_save_profile(f"user:{request.user.get_username()}", form.checked, obj)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        do_delete_profile(f"user:{request.user.get_username()}", obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[DesktopProfile]) -> None:
        for profile in queryset:
            self.delete_model(request, profile)


@admin.register(Session)
class SessionAdmin(NumbersAdmin):
    list_display = ["pk", "user", "profile", "purpose", "state", "node", "created_at"]
    list_filter = ["state", "purpose"]
    readonly_fields = [f.name for f in Session._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False  # sessions are created through the services, never by hand


class IdlePolicyForm(CatalogueForm):
    """Checked by ``idle_policies.check_idle_policy``, as the console's idle policy form."""

    class Meta:
        model = IdlePolicy
        fields = list(POLICY_FIELDS)

    def check(self, data: dict[str, Any]) -> Any:
        return check_idle_policy(data, policy=self.instance)


@admin.register(IdlePolicy)
class IdlePolicyAdmin(NumbersAdmin):
    """The idle policy per profile and purpose (docs/lifecycle.md): saved and deleted through
    ``services.idle_policies`` (audited with before and after), as in the console."""

    form = IdlePolicyForm
    list_display = ["__str__", "enabled", "warn_after", "suspend_after", "end_after"]
    list_filter = ["enabled", "purpose"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        do_save_idle_policy(f"user:{request.user.get_username()}", form.checked, obj)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        do_delete_idle_policy(f"user:{request.user.get_username()}", obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[IdlePolicy]) -> None:
        for policy in queryset:
            self.delete_model(request, policy)


@admin.register(LifecycleNotices)
class LifecycleNoticesAdmin(NumbersAdmin):
    list_display = ["user", "email_warnings"]
    search_fields = ["user__username"]


@admin.register(WarmDesktop)
class WarmDesktopAdmin(NumbersAdmin):
    """The warm pool, to look at: the scheduling cycle makes and removes these rows."""

    list_display = ["key", "booking", "node", "held_slice", "state", "failures", "retry_at"]
    list_filter = ["state"]
    readonly_fields = [f.name for f in WarmDesktop._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.display(description=_("slice"))
    def held_slice(self, warm: WarmDesktop) -> str:
        return str(warm.held_slice or "-")


@admin.register(AuditEvent)
class AuditEventAdmin(NumbersAdmin):
    """The audit trail, to look at only: no add, change or delete here (the database refuses
    them too, docs/audit.md). Sessions and nodes are shown by id: they may be gone."""

    list_display = ["at", "kind", "actor", "session_ref", "node_ref", "address"]
    list_filter = ["kind"]
    search_fields = ["actor", "kind"]
    date_hierarchy = "at"
    fields = ("at", "kind", "actor", "session_ref", "node_ref", "address", "data")
    readonly_fields = fields

    @admin.display(description=_("session"))
    def session_ref(self, event: AuditEvent) -> str:
        return str(event.session_id or "-")

    @admin.display(description=_("node"))
    def node_ref(self, event: AuditEvent) -> str:
        return str(event.node_id or "-")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(JoinToken)
class JoinTokenAdmin(NumbersAdmin):
    """Join tokens, to look at: they are made by ``manage.py create_join_token``
    (``do_create_join_token``), which shows the plain token once and audits it."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    list_display = ["pk", "hostname", "created_at", "used_at", "used_by"]
    readonly_fields = ["token_hash", "used_at", "used_by"]


@admin.register(PoolPolicy)
class PoolPolicyAdmin(AuditedAdmin):
    list_display = [
        "__str__",
        "temperature_limit_c",
        "protected_minutes",
        "grace_minutes",
        "updated_at",
    ]
    readonly_fields = ["updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not PoolPolicy.objects.exists()  # one row

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Quota)
class QuotaAdmin(NumbersAdmin):
    """Saved and deleted through ``catalogue_changes`` (audited with before and after), as
    in the console."""

    form = QuotaForm
    list_display = list(QUOTA_FIELDS)
    list_filter = ["scope"]
    search_fields = ["key"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        do_save_quota(f"user:{request.user.get_username()}", form.checked, obj)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        do_delete_quota(f"user:{request.user.get_username()}", obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Quota]) -> None:
        for quota in queryset:
            self.delete_model(request, quota)


class BookingForm(forms.ModelForm):
    """A new booking is validated by ``check_booking``, as the API and pages do."""

    request: HttpRequest

    class Meta:
        model = Booking
        fields = ["course", "profile", "seats", "starts_at", "ends_at"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            self.checked = check_booking(
                self.request.user,  # type: ignore[arg-type]
                data["course"].code,
                data["profile"].pk,
                data["seats"],
                data["starts_at"],
                data["ends_at"],
            )
        except ServiceError as error:
            message = {error.field: error.message} if error.field else error.message
            raise ValidationError(message) from error
        return data


@admin.register(Booking)
class BookingAdmin(NumbersAdmin):
    """Bookings are made with ``check_booking``/``do_create_booking`` and ended with the
    "Cancel" action (``do_cancel_booking``, which also drops their warm desktops); a saved
    booking is not edited or deleted here."""

    form = BookingForm
    list_display = ["course", "profile", "seats", "starts_at", "ends_at", "cancelled_at"]
    list_filter = ["course"]
    actions = ["cancel"]

    def get_form(  # type: ignore[override]
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        form.request = request  # type: ignore[attr-defined]
        return form

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return [f.name for f in Booking._meta.fields]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: Any = None):
        try:
            return super().add_view(request, form_url, extra_context)
        except ServiceError as error:  # the pool changed between the check and the save
            self.message_user(request, error.message, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return  # every field is read-only once saved
        created = do_create_booking(request.user, form.checked)  # type: ignore[arg-type]
        obj.pk = created.pk
        obj.created_at = created.created_at
        obj.created_by = created.created_by

    @admin.action(description=_("Cancel (drops its warm desktops)"), permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Booking]) -> None:
        done = []
        for booking in queryset.select_related("course"):
            try:
                do_cancel_booking(request.user, booking)  # type: ignore[arg-type]
                done.append(str(booking.pk))
            except ServiceError as error:
                self.message_user(request, f"{booking}: {error.message}", messages.WARNING)
        if done:
            self.message_user(
                request, _("Cancelled: %(bookings)s.") % {"bookings": ", ".join(done)}
            )
