"""The pool: nodes, their GPUs and slices, join tokens, and the catalogue of desktops."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from ..choices import SliceKind


def hash_token(token: str) -> str:
    """Tokens are stored as SHA-256 digests; the plain token is shown once."""
    return hashlib.sha256(token.encode()).hexdigest()


JOIN_TOKEN_LIFETIME = timedelta(hours=24)


def join_token_expiry() -> datetime:
    """A join token's default end: 24 hours after it is made."""
    return timezone.now() + JOIN_TOKEN_LIFETIME


class Node(models.Model):
    """A GPU node served by one agent."""

    hostname = models.CharField(max_length=200, unique=True)
    address = models.CharField(max_length=200, default="127.0.0.1")
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    labels = models.JSONField(default=dict, blank=True)
    cpu_count = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveIntegerField(default=0)
    runtime = models.CharField(max_length=20, default="docker")
    agent_version = models.CharField(max_length=40, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)
    cordoned = models.BooleanField(default=False)
    cordon_reason = models.CharField(max_length=500, blank=True)
    # A drain: no new work; its sessions end, or are requeued at the deadline (none: wait).
    draining_since = models.DateTimeField(null=True, blank=True)
    drain_reason = models.CharField(max_length=500, blank=True)
    drain_deadline = models.DateTimeField(null=True, blank=True)
    drained_at = models.DateTimeField(
        null=True, blank=True, help_text="When the draining node was found empty."
    )
    failures_in_a_row = models.PositiveIntegerField(
        default=0, help_text="Sessions reported FAILED since the last one reached RUNNING here."
    )
    # As the agent reports them (nodeagent.protocol: Registration, Heartbeat).
    protocol_version = models.PositiveIntegerField(null=True, blank=True)
    running_sessions = models.JSONField(
        default=list, blank=True, help_text="Session ids its agent ran at the last heartbeat."
    )
    home_root_shared = models.BooleanField(
        default=False,
        help_text="Its agent keeps homes under a root every node shares (DESKPOOL_HOME_ROOT): "
        "a desktop on another node sees the same home.",
    )
    # The desktop gateway (issue 34): where it listens on the node's address (None: an agent
    # without one), and the id of the ticket key the portal signs with now (raised to rotate).
    gateway_port = models.PositiveIntegerField(null=True, blank=True)
    gateway_key_id = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname

    @property
    def takes_new_work(self) -> bool:
        """Neither cordoned nor draining: new desktops and bookings may count on it."""
        return not self.cordoned and self.draining_since is None

    def is_healthy(self, now=None) -> bool:
        if self.cordoned or self.last_heartbeat is None:
            return False
        now = now or timezone.now()
        age = (now - self.last_heartbeat).total_seconds()
        return age <= settings.NODE_HEARTBEAT_TIMEOUT_S


class JoinToken(models.Model):
    """A one-time token with which a new agent registers its node."""

    token_hash = models.CharField(max_length=64, unique=True)
    hostname = models.CharField(max_length=200, blank=True, help_text="Blank: any hostname.")
    created_at = models.DateTimeField(default=timezone.now)
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL)
    expires_at = models.DateTimeField(default=join_token_expiry)
    may_replace = models.BooleanField(
        default=False, help_text="May take over a node already registered under its hostname."
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"join token {self.pk} for {self.hostname or 'any node'}"

    @staticmethod
    def new_plain_token() -> str:
        return "dpj_" + secrets.token_urlsafe(24)


class Gpu(models.Model):
    """One physical GPU as the node's agent reported it."""

    node = models.ForeignKey(Node, related_name="gpus", on_delete=models.CASCADE)
    uuid = models.CharField(max_length=100, unique=True)
    index = models.PositiveIntegerField()
    model = models.CharField(max_length=100)
    memory_mb = models.PositiveIntegerField()
    compute_capability = models.CharField(max_length=10, blank=True)
    sharing = models.CharField(max_length=10, choices=SliceKind.choices)
    nvlink_peers = models.JSONField(default=list, blank=True)
    compute_units = models.FloatField(
        default=1.0, help_text="Normalised compute: peak FP32 over an A100's (engine.compute)."
    )
    simulated = models.BooleanField(default=False)
    metrics = models.JSONField(default=dict, blank=True)
    present = models.BooleanField(default=True)
    # Sick: it takes no new work until an admin uncordons it (scheduling.services.gpu_cordon);
    # the causes as scheduling.rules.gpu_health names them, comma-separated.
    cordoned = models.BooleanField(default=False)
    cordon_reason = models.CharField(max_length=500, blank=True)
    cordoned_at = models.DateTimeField(null=True, blank=True)
    # The rest of its inventory as the agent reports it (nodeagent.protocol.GpuInventory);
    # null where the agent does not say (a simulated GPU has no PCIe link).
    mig_mode = models.BooleanField(default=False)
    pci_bus_id = models.CharField(max_length=32, blank=True)
    share_count = models.PositiveSmallIntegerField(null=True, blank=True)
    share_memory_mb = models.PositiveIntegerField(null=True, blank=True)
    pcie_link_gen = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_link_width = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_link_gen_max = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_link_width_max = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_topology = models.JSONField(
        null=True, blank=True, help_text="Other GPU's UUID -> closest common PCIe ancestor."
    )
    # Why the portal refuses its reported MIG layout (scheduling.services.mig_layout): while
    # set, the GPU offers no slice. Null: accepted, or not in MIG mode.
    mig_layout_problem = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["node__hostname", "index"]

    def __str__(self) -> str:
        return f"{self.node.hostname}/gpu{self.index} {self.model}"


class Slice(models.Model):
    """A unit of GPU capacity one session can hold: a MIG instance, a share, a whole GPU."""

    gpu = models.ForeignKey(Gpu, related_name="slices", on_delete=models.CASCADE)
    kind = models.CharField(max_length=10, choices=SliceKind.choices)
    profile = models.CharField(max_length=40, blank=True, help_text="MIG profile, e.g. 1g.10gb")
    device_uuid = models.CharField(max_length=100, help_text="GPU or MIG UUID given to Docker")
    memory_mb = models.PositiveIntegerField()
    milli = models.PositiveIntegerField(default=1000, help_text="The part of its GPU, of 1000.")
    slot = models.PositiveIntegerField(default=0)
    present = models.BooleanField(default=True)
    # A MIG instance's first memory slice as its agent reported it (null: not reported).
    mig_start = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["gpu__node__hostname", "gpu__index", "slot"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "kind", "slot"], name="slice_unique_slot"),
        ]

    def __str__(self) -> str:
        label = self.profile or f"{self.kind}{self.slot}"
        return f"{self.gpu} {label}"


class DesktopProfile(models.Model):
    """An entry of the admin's catalogue of desktops a user can ask for."""

    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    image = models.CharField(max_length=200)
    cpus = models.FloatField(default=2.0)
    memory_mb = models.PositiveIntegerField(default=4096)
    pids_limit = models.PositiveIntegerField(default=1024)
    shm_mb = models.PositiveIntegerField(default=512)
    gpu_count = models.PositiveIntegerField(default=1)
    gpu_memory_min_mb = models.PositiveIntegerField(default=0)
    compute_min = models.FloatField(default=0.0, help_text="Compute units per GPU, at least.")
    gpu_models = models.JSONField(
        default=list, blank=True, help_text="GPU model names allowed (substrings); empty = any."
    )
    # Empty for a CPU-only profile (gpu_count 0), hence blank.
    allowed_kinds = models.JSONField(
        default=list, blank=True, help_text="Slice kinds: mig, share, whole; none if CPU-only."
    )
    max_duration_minutes = models.PositiveIntegerField(default=240)
    # docs/lifecycle.md: one extension adds this much (0: none), up to this total.
    extend_step_minutes = models.PositiveIntegerField(
        default=60, blank=True, help_text="Minutes one extension adds (0: none; empty: 60)."
    )
    max_total_minutes = models.PositiveIntegerField(
        default=480,
        blank=True,
        help_text="The longest a session may run, extensions included (empty: 480).",
    )
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
