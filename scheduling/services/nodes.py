"""Node registration, inventory and heartbeats, as reported by node agents."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from nodeagent.protocol import PROTOCOL_VERSION, GpuInventory, Heartbeat, Registration, to_wire

from ..choices import AuditKind, SliceKind
from ..engine import gpu_compute_units, slice_milli
from ..locks import lock_unused_join_token
from ..models import Gpu, JoinToken, Node, Slice, hash_token
from . import Conflict, ServiceError
from .audit import record
from .kick import schedule_soon
from .metric_history import record_heartbeat_metrics


def do_create_join_token(hostname: str = "", *, actor: str) -> str:
    """Create a one-time join token; the plain token is returned once and stored hashed."""
    plain = JoinToken.new_plain_token()
    JoinToken.objects.create(token_hash=hash_token(plain), hostname=hostname)
    record(AuditKind.JOIN_TOKEN_CREATED, actor, data={"hostname": hostname})
    return plain


def node_for_token(token: str) -> Node | None:
    if not token:
        return None
    return Node.objects.filter(token_hash=hash_token(token)).first()


def check_registration(payload: Registration, node: Node | None) -> None:
    if payload.protocol_version != PROTOCOL_VERSION:
        raise Conflict(
            _(
                "This portal speaks agent protocol %(ours)s; the agent sent %(theirs)s. "
                "Install the agent version that matches the portal."
            )
            % {"ours": PROTOCOL_VERSION, "theirs": payload.protocol_version}
        )
    if node is None and not payload.join_token:
        raise ServiceError(_("A new node needs a join token; ask an admin for one."), code="auth")
    if node is not None and node.hostname != payload.hostname:
        raise ServiceError(_("This node credential belongs to another hostname."), code="auth")


def do_register(
    payload: Registration | Mapping[str, Any], node: Node | None
) -> tuple[Node, str | None]:
    """Join a new node with its one-time token, or refresh a known node's inventory.

    ``payload`` is validated with the wire model (a mapping too: pydantic's ValidationError
    when it does not match), and every field of it is stored.
    """
    payload = Registration.model_validate(payload)
    check_registration(payload, node)
    plain_token = None
    with transaction.atomic():
        if node is None:
            token = lock_unused_join_token(hash_token(payload.join_token or ""))
            if token is None or (token.hostname and token.hostname != payload.hostname):
                raise ServiceError(
                    _(
                        "This join token is unknown, already used, or for another node. "
                        "Ask an admin for a new one."
                    ),
                    code="auth",
                )
            plain_token = "dpn_" + secrets.token_urlsafe(32)
            node, _created = Node.objects.get_or_create(hostname=payload.hostname)
            node.token_hash = hash_token(plain_token)
            token.used_at = timezone.now()
            token.used_by = node
            token.save(update_fields=["used_at", "used_by"])
        now = timezone.now()
        node.address = payload.address
        node.labels = payload.labels
        node.cpu_count = payload.cpu_count
        node.memory_mb = payload.memory_mb
        node.runtime = payload.runtime
        node.agent_version = payload.agent_version
        node.protocol_version = payload.protocol_version
        node.registered_at = now
        node.last_heartbeat = now
        node.save()
        _sync_inventory(node, payload.gpus)
        record(
            AuditKind.NODE_REGISTERED,
            f"node:{node.hostname}",
            node=node,
            data={"gpus": len(payload.gpus), "runtime": payload.runtime},
        )
        _after_commit_schedule()
    return node, plain_token


def _after_commit_schedule() -> None:
    schedule_soon()


def _slices_for(gpu: GpuInventory) -> list[tuple[str, int, str, str, int, int]]:
    """(kind, slot, profile, device uuid, memory, milli) for each slice this GPU offers.

    ``milli`` is the part of the GPU the slice is: MIG from the model's profile table
    (``scheduling.engine.compute.slice_milli``), a share 1000 / shares, a whole GPU 1000.
    """
    name = gpu.name
    if gpu.sharing == "mig" and gpu.mig_mode:
        return [
            (
                SliceKind.MIG,
                slot,
                mig.profile,
                mig.uuid,
                mig.memory_mb,
                slice_milli("mig", name, mig.profile),
            )
            for slot, mig in enumerate(gpu.mig_instances)
        ]
    if gpu.sharing == "share":
        count = max(1, gpu.share_count or 1)
        memory = gpu.share_memory_mb or gpu.memory_mb // count
        milli = slice_milli("share", name, shares=count)
        return [(SliceKind.SHARE, slot, "", gpu.uuid, memory, milli) for slot in range(count)]
    return [(SliceKind.WHOLE, 0, "", gpu.uuid, gpu.memory_mb, 1000)]


def _sync_inventory(node: Node, gpus: list[GpuInventory]) -> None:
    seen_gpus = []
    for reported in gpus:
        gpu, _created = Gpu.objects.update_or_create(
            uuid=reported.uuid,
            defaults={
                "node": node,
                "index": reported.index,
                "model": reported.name,
                "memory_mb": reported.memory_mb,
                "compute_capability": reported.compute_capability,
                "sharing": reported.sharing,
                "nvlink_peers": reported.nvlink_peers,
                "compute_units": gpu_compute_units(reported.name)[0],
                "simulated": reported.simulated,
                "mig_mode": reported.mig_mode,
                "pci_bus_id": reported.pci_bus_id,
                "share_count": reported.share_count,
                "share_memory_mb": reported.share_memory_mb,
                "pcie_link_gen": reported.pcie_link_gen,
                "pcie_link_width": reported.pcie_link_width,
                "pcie_link_gen_max": reported.pcie_link_gen_max,
                "pcie_link_width_max": reported.pcie_link_width_max,
                "pcie_topology": reported.pcie_topology,
                "present": True,
            },
        )
        seen_gpus.append(gpu.pk)
        seen_slices = []
        for kind, slot, profile, device_uuid, memory, milli in _slices_for(reported):
            slice_, _created = Slice.objects.update_or_create(
                gpu=gpu,
                kind=kind,
                slot=slot,
                defaults={
                    "profile": profile,
                    "device_uuid": device_uuid,
                    "memory_mb": memory,
                    "milli": milli,
                    "present": True,
                },
            )
            seen_slices.append(slice_.pk)
        # Slices that vanished are kept (allocations refer to them) but no longer offered.
        Slice.objects.filter(gpu=gpu).exclude(pk__in=seen_slices).update(present=False)
    Gpu.objects.filter(node=node).exclude(pk__in=seen_gpus).update(present=False)


def do_heartbeat(node: Node, payload: Heartbeat | Mapping[str, Any]) -> None:
    """Record that the node is alive, with its GPU metrics (each GPU's as sent, in
    ``Gpu.metrics``) and the sessions its agent runs (validated like ``do_register``)."""
    payload = Heartbeat.model_validate(payload)
    was_healthy = node.is_healthy()
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(
        last_heartbeat=now, running_sessions=payload.running_sessions
    )
    by_uuid = {m.uuid: m for m in payload.gpus}
    for gpu in Gpu.objects.filter(node=node, uuid__in=by_uuid):
        gpu.metrics = to_wire(by_uuid[gpu.uuid])
        gpu.save(update_fields=["metrics"])
    record_heartbeat_metrics(node, payload.gpus, now)  # history (docs/monitoring.md)
    if not was_healthy:
        _after_commit_schedule()


__all__ = [
    "do_create_join_token",
    "do_heartbeat",
    "do_register",
    "node_for_token",
]
