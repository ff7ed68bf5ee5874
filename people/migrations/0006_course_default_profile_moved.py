"""Course.default_profile is now scheduling.CourseDesktop: scheduling's 0023 copied it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0005_api_tokens"),
        ("scheduling", "0023_course_desktop"),
    ]

    operations = [
        migrations.RemoveField(model_name="course", name="default_profile"),
    ]
