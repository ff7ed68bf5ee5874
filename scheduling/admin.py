from django.contrib import admin

from .models import AuditEvent, DesktopProfile, Gpu, JoinToken, Node, Session, Slice


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "address", "runtime", "last_heartbeat", "cordoned"]
    exclude = ["token_hash"]


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
