from django.db import migrations


class Migration(migrations.Migration):
    """What the agent reports of its inventory (filled by the wire-schema work)."""

    dependencies = [("scheduling", "0004_warm_pool")]

    operations = []
