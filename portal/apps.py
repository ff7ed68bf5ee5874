from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import account_audit

        account_audit.connect()
