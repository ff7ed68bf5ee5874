"""A course's default profile moves from Course (people, app label portal) to CourseDesktop
here, so that model links point one way: scheduling -> people. The rows are copied;
portal's 0006 then drops the old column."""

import django.db.models.deletion
from django.db import migrations, models


def copy_defaults(apps, schema_editor):
    Course = apps.get_model("portal", "Course")
    CourseDesktop = apps.get_model("scheduling", "CourseDesktop")
    CourseDesktop.objects.bulk_create(
        CourseDesktop(course_id=course_id, profile_id=profile_id)
        for course_id, profile_id in Course.objects.exclude(default_profile=None).values_list(
            "pk", "default_profile"
        )
    )


def copy_back(apps, schema_editor):
    Course = apps.get_model("portal", "Course")
    CourseDesktop = apps.get_model("scheduling", "CourseDesktop")
    for course_id, profile_id in CourseDesktop.objects.values_list("course", "profile"):
        Course.objects.filter(pk=course_id).update(default_profile=profile_id)


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0005_api_tokens"),
        ("scheduling", "0022_account_audit_kinds"),
    ]

    operations = [
        migrations.CreateModel(
            name="CourseDesktop",
            fields=[
                (
                    "course",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="default_desktop",
                        serialize=False,
                        to="portal.course",
                    ),
                ),
                (
                    "profile",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="scheduling.desktopprofile",
                    ),
                ),
            ],
        ),
        migrations.RunPython(copy_defaults, copy_back),
    ]
