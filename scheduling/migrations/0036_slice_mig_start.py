# MIG checked (issue 37 item 2): the first memory slice of each MIG instance, as reported.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0035_gpu_cordon"),
    ]

    operations = [
        migrations.AddField(
            model_name="slice",
            name="mig_start",
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
    ]
