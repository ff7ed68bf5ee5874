from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The faces (templates tags, the demo seed command, the Django admin's registrations).
    It holds no models: people and courses are the ``people`` app, labelled ``portal``."""

    name = "portal"
    label = "portal_faces"
    verbose_name = "Portal"
    default_auto_field = "django.db.models.BigAutoField"
