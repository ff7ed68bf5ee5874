"""Course folders (docs/course-files.md): what each course's folder holds, and its cap.

A file's bytes are not here: they lie on the portal host's disk under
``settings.COURSE_FILES_ROOT``, named by their sha256 (``scheduling.services.course_files``);
node agents pull them (``portal/agents/course_files.py``) and mount them read-only into the
desktops of the course's people."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

COURSE_FILE_PATH_MAX = 1024


class CourseFolder(models.Model):
    """One course's folder: its version (one more at every change; the nodes' copies are
    named by it) and the size cap the console set (None: DESKPOOL_COURSE_FOLDER_MB)."""

    course = models.OneToOneField("portal.Course", related_name="folder", on_delete=models.CASCADE)
    version = models.PositiveIntegerField(default=0)
    cap_mb = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"course folder of {self.course_id} (version {self.version})"


class CourseFile(models.Model):
    """One file of a course's folder: its path inside the folder, size and sha256 (the name
    of its bytes in the store), who put it there and when."""

    course = models.ForeignKey("portal.Course", related_name="files", on_delete=models.CASCADE)
    path = models.CharField(max_length=COURSE_FILE_PATH_MAX)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, related_name="+", on_delete=models.SET_NULL
    )
    uploaded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["course", "path"], name="one_course_file_per_path")
        ]
        indexes = [models.Index(fields=["sha256"], name="course_file_sha256")]

    def __str__(self) -> str:
        return f"{self.path} ({self.size} bytes)"
