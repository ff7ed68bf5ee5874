from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the models are: the session payload names a warned session's
        # suspension time through the services, which scheduling.events cannot import.
        from . import events
        from .services.idle_view import suspends_at

        events.use_suspension_clock(suspends_at)
