from django.apps import AppConfig


class PeopleConfig(AppConfig):
    """People and courses. The app keeps the label ``portal`` its tables, migrations and
    permissions (``portal.view_course``) were made under, so moving here changed no data."""

    name = "people"
    label = "portal"
    verbose_name = "People"
    default_auto_field = "django.db.models.BigAutoField"
