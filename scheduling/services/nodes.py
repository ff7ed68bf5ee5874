"""Node registration, inventory and heartbeats, as reported by node agents."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from nodeagent.protocol import (
    PROTOCOL_VERSION,
    GpuInventory,
    Heartbeat,
    Registration,
    SessionUsage,
    to_wire,
)

from ..choices import OPENABLE_STATES, AuditKind, SliceKind
from ..engine import gpu_compute_units, slice_milli
from ..locks import lock_unused_join_token
from ..models import Gpu, JoinToken, Node, Session, Slice, hash_token
from ..models.pool import join_token_expiry
from . import Conflict, ServiceError
from .audit import record
from .gpu_cordon import do_judge_gpu_reports
from .home_files_agent import record_home_usage
from .kick import schedule_soon
from .metric_history import record_heartbeat_metrics
from .mig_layout import layout_problem
from .node_address import check_node_address, check_node_hostname
from .session_activity import record_usage_many


def check_join_token(hostname: str, *, any_host: bool, hours: float, may_replace: bool) -> str:
    """Validate a new join token's terms; the hostname it is bound to ('' for any host)."""
    hostname = hostname.strip()
    if not hostname and not any_host:
        raise ServiceError(
            _("Enter the node's hostname, or tick “any host” to let any node use this token."),
            field="hostname",
        )
    if hostname and any_host:
        raise ServiceError(
            _("Either enter a hostname or tick “any host”, not both."), field="hostname"
        )
    if hostname:
        check_node_hostname(hostname)
    if not 1 <= hours <= 24 * 30:
        raise ServiceError(_("Enter a lifetime between 1 and 720 hours (30 days)."), field="hours")
    if may_replace and not hostname:
        raise ServiceError(
            _("A token that may replace a node must name that node's hostname."),
            field="may_replace",
        )
    if may_replace and not Node.objects.filter(hostname=hostname).exists():
        raise ServiceError(
            _("There is no node %(hostname)s to replace; untick “may replace”.")
            % {"hostname": hostname},
            field="may_replace",
        )
    return hostname


def do_create_join_token(
    hostname: str = "",
    *,
    actor: str,
    expires_at: datetime | None = None,
    may_replace: bool = False,
) -> str:
    """Create a one-time join token; the plain token is returned once and stored hashed."""
    plain = JoinToken.new_plain_token()
    with transaction.atomic():
        token = JoinToken.objects.create(
            token_hash=hash_token(plain),
            hostname=hostname,
            expires_at=expires_at or join_token_expiry(),
            may_replace=may_replace,
            created_by=actor,
        )
        record(
            AuditKind.JOIN_TOKEN_CREATED,
            actor,
            data={
                "token": token.pk,
                "before": None,
                "after": {
                    "hostname": hostname,
                    "expires_at": token.expires_at.isoformat(),
                    "may_replace": may_replace,
                },
                "hostname": hostname,
            },
        )
    return plain


def join_token_state(token: JoinToken, now: datetime | None = None) -> str:
    """unused, used, revoked or expired."""
    if token.used_at is not None:
        return "used"
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at <= (now or timezone.now()):
        return "expired"
    return "unused"


def do_revoke_join_token(token: JoinToken, actor: str) -> bool:
    """Revoke an unused token; False if it was used or revoked already."""
    with transaction.atomic():
        now = timezone.now()
        revoked = (
            JoinToken.objects.filter(pk=token.pk, used_at=None, revoked_at=None).update(
                revoked_at=now
            )
            == 1
        )
        if revoked:
            # No kind of its own yet: the creation kind, with what changed.
            record(
                AuditKind.JOIN_TOKEN_CREATED,
                actor,
                data={
                    "token": token.pk,
                    "action": "revoked",
                    "before": {"revoked_at": None},
                    "after": {"revoked_at": now.isoformat()},
                    "hostname": token.hostname,
                },
            )
    return revoked


def _check_join(token: JoinToken | None, hostname: str, now: datetime) -> None:
    """Refuse an unknown, used, revoked, expired or foreign token, and a takeover the token
    was not made for (plain-words messages for the agent's log)."""
    if token is None or token.revoked_at is not None:
        raise ServiceError(
            _("This join token is unknown, already used or revoked. Ask an admin for a new one."),
            code="auth",
        )
    if token.expires_at <= now:
        raise ServiceError(
            _("This join token expired at %(at)s (UTC). Ask an admin for a new one.")
            % {"at": token.expires_at.strftime("%Y-%m-%d %H:%M")},
            code="auth",
        )
    if token.hostname and token.hostname != hostname:
        raise ServiceError(
            _("This join token is for the node %(bound)s, not %(hostname)s. Ask an admin for one.")
            % {"bound": token.hostname, "hostname": hostname},
            code="auth",
        )
    if not token.may_replace and Node.objects.filter(hostname=hostname).exists():
        raise ServiceError(
            _(
                "A node named %(hostname)s is already registered and this join token may not "
                "replace it. Ask an admin for a token that may replace %(hostname)s."
            )
            % {"hostname": hostname},
            code="auth",
        )


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
    check_node_address(payload.address)


def do_register(
    payload: Registration | Mapping[str, Any], node: Node | None
) -> tuple[Node, str | None]:
    """Join a new node with its one-time token, or refresh a known node's inventory.

    ``payload`` is validated with the wire model (a mapping too: pydantic's ValidationError
    when it does not match), and every field of it is stored.
    """
    payload = Registration.model_validate(payload)
    check_registration(payload, node)
    check_claims(payload)
    plain_token = None
    with transaction.atomic():
        if node is None:
            token = lock_unused_join_token(hash_token(payload.join_token or ""))
            _check_join(token, payload.hostname, timezone.now())
            assert token is not None  # _check_join refuses a missing one
            plain_token = "dpn_" + secrets.token_urlsafe(32)
            node, _created = Node.objects.get_or_create(hostname=payload.hostname)
            node.token_hash = hash_token(plain_token)
            token.used_at = timezone.now()
            token.used_by = node
            token.save(update_fields=["used_at", "used_by"])
        now = timezone.now()
        if node.registered_at is not None and node.address != payload.address:
            # Where browsers reach the node's gateway: every change is audited (docs/audit.md).
            record(
                AuditKind.NODE_ADDRESS_CHANGED,
                f"node:{node.hostname}",
                node=node,
                data={"old": node.address, "new": payload.address},
            )
        node.address = payload.address
        node.labels = payload.labels
        node.cpu_count = payload.cpu_count
        node.memory_mb = payload.memory_mb
        node.runtime = payload.runtime
        node.agent_version = payload.agent_version
        node.protocol_version = payload.protocol_version
        node.home_root_shared = payload.home_root_shared
        node.gateway_port = payload.gateway_port
        node.registered_at = now
        node.last_heartbeat = now
        node.save()
        _sync_inventory(node, payload.gpus)
        record(
            AuditKind.NODE_REGISTERED,
            f"node:{node.hostname}",
            node=node,
            data={
                "gpus": len(payload.gpus),
                "runtime": payload.runtime,
                "address": payload.address,
            },
        )
        _after_commit_schedule()
    return node, plain_token


def _reported_uuids(gpus: list[GpuInventory]) -> set[str]:
    """Every GPU and MIG device UUID a registration lists."""
    return {gpu.uuid for gpu in gpus} | {m.uuid for gpu in gpus for m in gpu.mig_instances}


def _held_elsewhere(hostname: str, uuids: set[str]) -> dict[int, list[str]]:
    """Node id -> the listed UUIDs that another node holds now (a present GPU or slice)."""
    held: dict[int, list[str]] = {}
    gpus = Gpu.objects.filter(uuid__in=uuids, present=True).exclude(node__hostname=hostname)
    for node_id, uuid in gpus.values_list("node_id", "uuid"):
        held.setdefault(node_id, []).append(uuid)
    slices = Slice.objects.filter(device_uuid__in=uuids, present=True, gpu__present=True).exclude(
        gpu__node__hostname=hostname
    )
    for node_id, uuid in slices.values_list("gpu__node_id", "device_uuid"):
        if uuid not in held.get(node_id, []):
            held.setdefault(node_id, []).append(uuid)
    return held


def check_claims(payload: Registration) -> None:
    """Refuse a registration that lists a GPU or MIG device another node holds (a node is
    trusted only for itself): audited against the holder, which raises the "GPU claimed by
    another node" alert at the next evaluation (docs/security.md)."""
    held = _held_elsewhere(payload.hostname, _reported_uuids(payload.gpus))
    if not held:
        return
    for node_id, uuids in sorted(held.items()):
        record(
            AuditKind.NODE_CLAIM_REFUSED,
            f"node:{payload.hostname}",
            node=node_id,
            data={"claimed_by": payload.hostname, "uuids": sorted(uuids)},
        )
    raise Conflict(
        _(
            "This node lists GPUs that another node holds (%(uuids)s). A node may register "
            "only its own GPUs; an admin must remove them from the other node first."
        )
        % {"uuids": ", ".join(sorted(u for uuids in held.values() for u in uuids))}
    )


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
    if _held_elsewhere(node.hostname, _reported_uuids(gpus)):
        # Claimed by another node between check_claims and now: the transaction rolls back.
        raise Conflict(_("This node lists GPUs that another node holds; try again."))
    for reported in gpus:
        # A MIG layout the tables do not allow offers no slice (docs/mig.md).
        problem = layout_problem(reported)
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
                "mig_layout_problem": problem,
                "present": True,
            },
        )
        seen_gpus.append(gpu.pk)
        seen_slices = []
        starts = {m.uuid: m.start for m in reported.mig_instances}
        for kind, slot, profile, device_uuid, memory, milli in (
            [] if problem else _slices_for(reported)
        ):
            slice_, _created = Slice.objects.update_or_create(
                gpu=gpu,
                kind=kind,
                slot=slot,
                defaults={
                    "profile": profile,
                    "device_uuid": device_uuid,
                    "memory_mb": memory,
                    "milli": milli,
                    "mig_start": starts.get(device_uuid) if kind == SliceKind.MIG else None,
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
    with transaction.atomic():  # one commit for the node, its GPUs and their history
        Node.objects.filter(pk=node.pk).update(
            last_heartbeat=now, running_sessions=payload.running_sessions
        )
        do_judge_gpu_reports(node, payload.gpus, now)  # sick GPUs cordoned (gpu_cordon)
        by_uuid = {m.uuid: m for m in payload.gpus}
        for gpu in Gpu.objects.filter(node=node, uuid__in=by_uuid):
            gpu.metrics = to_wire(by_uuid[gpu.uuid])
            gpu.save(update_fields=["metrics"])
        record_heartbeat_metrics(node, payload.gpus, now)  # history (docs/monitoring.md)
        if not was_healthy:
            _after_commit_schedule()
    record_node_usage(node, payload.usage or [], now)


def record_node_usage(node: Node, usage: Sequence[SessionUsage], at: datetime) -> None:
    """Each session's GPU and CPU use as its agent reported it (idle detection,
    docs/lifecycle.md), recorded together in a fixed number of queries however many sessions
    the node runs. A node speaks only for itself: figures about a session that is not
    running on this node are ignored."""
    figures = {entry.session_id: entry for entry in usage}
    own = list(
        Session.objects.filter(node=node, pk__in=figures, state__in=OPENABLE_STATES).values_list(
            "pk", flat=True
        )
    )
    record_usage_many({pk: (figures[pk].gpu_pct, figures[pk].cpu_pct) for pk in own}, at)
    # What their homes hold, where the node's disk bounds them: a full home says so.
    homes = {pk: figures[pk].home_used_bytes for pk in own}
    record_home_usage(node, {pk: used for pk, used in homes.items() if used is not None}, at)


__all__ = [
    "check_join_token",
    "do_create_join_token",
    "do_revoke_join_token",
    "join_token_state",
    "do_heartbeat",
    "do_register",
    "node_for_token",
]
