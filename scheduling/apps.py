from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # AppConfig.ready: Django's one place to connect signals once every model is loaded
        # (account_audit reads the user model, which apps.py may not import at load).
        from scheduling.services import account_audit, gateway_revocation

        account_audit.connect()
        # Sign-outs and changed rights wake the nodes whose gateways carry the person's tickets.
        gateway_revocation.connect()
