"""Home files: the tasks the Files page gives the node that keeps a person's home (list,
upload, download, delete; nodeagent/protocol_files.py), their bytes while they travel, and
what each person's home was last measured to hold."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class HomeTaskKind(models.TextChoices):
    LIST = "list", _("List")
    UPLOAD = "upload", _("Upload")
    DOWNLOAD = "download", _("Download")
    DELETE = "delete", _("Delete")


class HomeTaskState(models.TextChoices):
    PENDING = "PENDING", _("Waiting for the node")
    DONE = "DONE", _("Done")
    FAILED = "FAILED", _("Failed")


class HomeTask(models.Model):
    """One task in one person's home on one node. PENDING tasks are in the node's desired
    state; the agent's report ends them (DONE or FAILED), or the portal fails them when the
    node does not answer in time."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, related_name="home_tasks", on_delete=models.CASCADE
    )
    node = models.ForeignKey("Node", related_name="home_tasks", on_delete=models.CASCADE)
    kind = models.CharField(max_length=10, choices=HomeTaskKind.choices)
    path = models.CharField(max_length=1024, blank=True)
    size = models.BigIntegerField(default=0, help_text="upload, download: the file's bytes.")
    state = models.CharField(
        max_length=10, choices=HomeTaskState.choices, default=HomeTaskState.PENDING
    )
    reason = models.CharField(max_length=300, blank=True)
    entries = models.JSONField(default=list, blank=True, help_text="list: what the folder holds.")
    truncated = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["node", "state"], name="home_task_node_state")]

    def __str__(self) -> str:
        return f"{self.kind} {self.path or '~'} ({self.state})"


class HomeTaskContent(models.Model):
    """The bytes of an upload (until the agent fetched them) or a download (until the person
    fetched them, or they expire), apart from the task so that listing tasks never reads them."""

    task = models.OneToOneField(HomeTask, related_name="content", on_delete=models.CASCADE)
    data = models.BinaryField()

    def __str__(self) -> str:
        return f"bytes of home task {self.task_id}"


class HomeUsage(models.Model):
    """What a person's home held when a node last measured it (after every task)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, related_name="home_usage", on_delete=models.CASCADE
    )
    used_bytes = models.BigIntegerField(default=0)
    node_hostname = models.CharField(max_length=200, blank=True)
    measured_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.used_bytes} bytes in the home of user {self.user_id}"
