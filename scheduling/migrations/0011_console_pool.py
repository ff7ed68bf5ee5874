"""The console's pool pages: a reason on a cordon, node drains, and join tokens that expire,
can be revoked, and replace an existing node only when made to."""

from django.db import migrations, models

import scheduling.models.pool


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0010_alerts")]

    operations = [
        migrations.AddField(
            model_name="jointoken",
            name="created_by",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="jointoken",
            name="expires_at",
            field=models.DateTimeField(default=scheduling.models.pool.join_token_expiry),
        ),
        migrations.AddField(
            model_name="jointoken",
            name="may_replace",
            field=models.BooleanField(
                default=False,
                help_text="May take over a node already registered under its hostname.",
            ),
        ),
        migrations.AddField(
            model_name="jointoken",
            name="revoked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="cordon_reason",
            field=models.CharField(blank=True, max_length=500),
        ),
        migrations.AddField(
            model_name="node",
            name="drain_deadline",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="drain_reason",
            field=models.CharField(blank=True, max_length=500),
        ),
        migrations.AddField(
            model_name="node",
            name="drained_at",
            field=models.DateTimeField(
                blank=True, help_text="When the draining node was found empty.", null=True
            ),
        ),
        migrations.AddField(
            model_name="node",
            name="draining_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
