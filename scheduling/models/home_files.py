"""Home files: the tasks the Files page gives the node that keeps a person's home (list a
folder, delete; nodeagent/protocol_files.py), and what each person's home was last measured to
hold. A file's bytes never come here: uploads and downloads go through the node's gateway
(nodeagent/gateway/files.py, with tickets from scheduling/services/home_transfers.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class HomeTaskKind(models.TextChoices):
    LIST = "list", _("List")
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
