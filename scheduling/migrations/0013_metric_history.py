"""Placeholder in the chain of migrations (filled by the change it is named after)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0012_console_queue")]

    operations: list = []
