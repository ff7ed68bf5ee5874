from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import AuditEvent, DesktopProfile, Gpu, JoinToken, Node, Session, Slice
from .services.health import do_clear_cordon, do_cordon


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
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
    readonly_fields = ["cordoned", "failures_in_a_row"]
    actions = ["cordon", "clear_cordon"]

    @admin.action(description="Cordon (place nothing new)", permissions=["change"])
    def cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        actor = f"user:{request.user.get_username()}"
        done = [node.hostname for node in queryset if do_cordon(node, actor)]
        self.message_user(request, f"Cordoned: {', '.join(done) or 'none (already cordoned)'}.")

    @admin.action(description="Clear cordon", permissions=["change"])
    def clear_cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        actor = f"user:{request.user.get_username()}"
        cleared = [node.hostname for node in queryset if do_clear_cordon(node, actor)]
        if cleared:
            self.message_user(request, f"Cordon cleared on {', '.join(cleared)}.")
        else:
            self.message_user(request, "None of these nodes was cordoned.", messages.WARNING)


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["node", "index", "model", "memory_mb", "sharing", "simulated"]
    list_filter = ["sharing", "model", "simulated"]


@admin.register(Slice)
class SliceAdmin(admin.ModelAdmin):
    list_display = ["gpu", "kind", "profile", "memory_mb", "present"]
    list_filter = ["kind", "profile"]


@admin.register(DesktopProfile)
class DesktopProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "image", "gpu_count", "gpu_memory_min_mb", "active"]


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ["pk", "user", "profile", "purpose", "state", "node", "created_at"]
    list_filter = ["state", "purpose"]
    readonly_fields = [f.name for f in Session._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False  # sessions are created through the services, never by hand


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["at", "kind", "actor", "session", "node"]
    list_filter = ["kind"]


@admin.register(JoinToken)
class JoinTokenAdmin(admin.ModelAdmin):
    list_display = ["pk", "hostname", "created_at", "used_at", "used_by"]
    readonly_fields = ["token_hash", "used_at", "used_by"]
