"""Messages between the node agent and the portal's agent API (``/api/agent/v1/``).

The agent owns these schemas; the portal imports them, never the reverse. Every
message is plain JSON. Field names here are the wire names.

Endpoints (all JSON, all under ``/api/agent/v1/``):

``POST register/``
    Body :class:`Registration`. First start: ``join_token`` in the body (one-time,
    created by an admin). Later starts: no join token, ``Authorization: Node <token>``.
    Answer :class:`RegistrationAnswer` (``node_token`` only on the first registration).
    A protocol version the portal does not speak gets 409 with ``detail``.
``POST heartbeat/``
    Body :class:`Heartbeat`. Answer ``{"ok": true, "server_time": iso8601}``.
``GET desired/``
    Answer :class:`DesiredState`: the sessions that should run on this node now.
    A container labelled ``deskpool.session=<id>`` whose id is not listed must stop.
    Each session carries its ``placement``, an id that changes every time the session is
    placed (requeued and placed again, even on the same node): a container labelled
    ``deskpool.placement`` with another value belongs to an earlier placement, with an
    old VNC password and slice, and is replaced, never adopted.
``POST warm/<key>/report/``
    Body :class:`WarmReport` about one warm desktop of :attr:`DesiredState.warm` (READY once
    it answers a VNC handshake, FAILED when it could not start or died). Answer
    ``{"state": <portal's warm state>}``; 409 when the portal no longer wants that warm
    desktop (stop it).
``POST sessions/<session_id>/report/``
    Body :class:`SessionReport`. Answer ``{"state": <portal state>}``; 409 with
    ``{"detail", "state"}`` when the portal no longer wants that session (stop it), or when
    the report's ``placement`` is not the session's current one (stop that placement's
    desktop, not a newer one).

Warm pool: ``desired/`` may also carry ``warm``, a list of :class:`DesiredWarm`: desktops to
keep started, without a user, for a class booking that starts soon or is running. A session
placed on a warm desktop's slice carries that desktop's ``warm_key``: the agent claims the
running container (writes the session's VNC password into its mounted password folder and
applies it) instead of starting a new one. An older agent ignores ``warm`` and ``warm_key``
and starts the session's desktop as usual; an older portal sends neither.

Backward compatibility within protocol version 1: ``placement`` is optional both ways. A
portal that sends none gets the old behaviour (containers are adopted by session id); a
report without one is applied to the current placement; a container without the label (an
older agent made it) is adopted.

Errors: 401 for a missing or wrong token, 400 with field errors for a bad body.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

PROTOCOL_VERSION = 1
AGENT_VERSION = "0.1.0"

# Label keys on every desktop container and volume the agent creates.
LABEL_SESSION = "deskpool.session"
LABEL_USER = "deskpool.user"
LABEL_NODE = "deskpool.node"
LABEL_COURSE = "deskpool.course"
LABEL_MANAGED = "deskpool.managed"
LABEL_PLACEMENT = "deskpool.placement"
# Warm desktops (no session yet): the portal's key, and the booking they were started for.
LABEL_WARM = "deskpool.warm"
LABEL_BOOKING = "deskpool.booking"
# A warm key names containers, folders and files: the portal makes them from this alphabet.
WARM_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$"

# Inside every desktop image: websockify listens here, the VNC password file is mounted here.
DESKTOP_WEBSOCKIFY_PORT = 6080
DESKTOP_PASSWORD_MOUNT = "/run/deskpool/vnc"
DESKTOP_PASSWORD_FILE = f"{DESKTOP_PASSWORD_MOUNT}/passwd"
DESKTOP_HOME = "/home/desktop"

# A report's ``reason`` is shown to the user and stored in 300 characters; longer is cut.
REASON_MAX_CHARS = 300

ReportedState = Literal["STARTING", "RUNNING", "FAILED", "LOST", "ENDED"]
SharingMode = Literal["mig", "share", "whole"]


class MigInstance(TypedDict):
    uuid: str
    profile: str  # e.g. "1g.10gb"
    memory_mb: int


class GpuInventory(TypedDict):
    uuid: str
    index: int
    name: str  # as NVML reports it, e.g. "NVIDIA A100-SXM4-80GB"
    memory_mb: int
    compute_capability: str  # "8.0"
    mig_mode: bool
    mig_instances: list[MigInstance]
    nvlink_peers: list[str]  # UUIDs of GPUs on this node linked by NVLink
    pci_bus_id: str
    # How the node's admin lets the pool use this GPU: MIG instances, N time-sliced
    # shares with a memory cap each, or the whole card.
    sharing: SharingMode
    share_count: NotRequired[int]
    share_memory_mb: NotRequired[int]
    simulated: bool
    # PCIe, where NVML reports it (None when the card does not; a simulated GPU leaves these
    # out). The current link drops to a lower generation while the GPU idles; max is what the
    # GPU and its slot can reach.
    pcie_link_gen: NotRequired[int | None]
    pcie_link_width: NotRequired[int | None]
    pcie_link_gen_max: NotRequired[int | None]
    pcie_link_width_max: NotRequired[int | None]
    # UUID of each other GPU on this node -> the closest common ancestor of the two in the
    # PCI tree: one of PCIE_TOPOLOGY_LEVELS' values; a pair NVML cannot place is left out.
    pcie_topology: NotRequired[dict[str, str]]


class Registration(TypedDict):
    protocol_version: int
    agent_version: str
    hostname: str
    join_token: NotRequired[str]
    address: str  # where the portal reaches published desktop ports
    cpu_count: int
    memory_mb: int
    labels: dict[str, str]  # rack, cooling, network_plane, ...
    runtime: Literal["docker", "simulated"]
    gpus: list[GpuInventory]


class RegistrationAnswer(TypedDict):
    node_id: int
    node_token: NotRequired[str]
    heartbeat_interval_s: float
    poll_interval_s: float


# nvmlDeviceGetTopologyCommonAncestor's levels, nearest first (nvidia-smi topo: PIX, PXB, PHB,
# NODE, SYS).
PCIE_TOPOLOGY_LEVELS = {
    0: "internal",  # the same board (a dual-GPU card)
    10: "single",  # one PCIe switch between them
    20: "multiple",  # several PCIe switches, no host bridge
    30: "hostbridge",  # the same PCIe host bridge
    40: "node",  # the same NUMA node, different host bridges
    50: "system",  # across the CPUs' interconnect
}

# At most this many XID codes per GPU in one heartbeat; later ones are dropped (and logged).
XID_ERRORS_MAX = 32


class GpuMetrics(TypedDict):
    uuid: str
    utilization_pct: float | None
    memory_used_mb: int | None
    temperature_c: float | None
    power_w: float | None
    # Optional within protocol version 1: an older agent leaves them out; None where the card
    # or driver does not report the value.
    power_limit_w: NotRequired[float | None]  # the enforced power cap
    fan_pct: NotRequired[float | None]  # None on passively cooled (most data-centre) boards
    pcie_tx_kbps: NotRequired[int | None]  # KB/s, kilobytes per second, GPU -> host
    pcie_rx_kbps: NotRequired[int | None]  # KB/s, host -> GPU
    ecc_corrected_volatile: NotRequired[int | None]  # since the driver last loaded
    ecc_uncorrected_volatile: NotRequired[int | None]
    # XID codes the driver reported for this GPU since the previous metrics read (the last
    # heartbeat), oldest first, at most XID_ERRORS_MAX; [] for none, None when not watched.
    xid_errors: NotRequired[list[int] | None]


class Heartbeat(TypedDict):
    gpus: list[GpuMetrics]
    running_sessions: list[int]


class DesiredSession(TypedDict):
    session_id: int
    user: str
    course: str
    image: str
    cpus: float
    memory_mb: int
    pids_limit: int
    shm_mb: int
    gpu_devices: list[str]  # GPU or MIG UUIDs; NVIDIA_VISIBLE_DEVICES gets exactly these
    vnc_password: str  # at most 8 characters (VNC truncates longer ones)
    home_volume: str  # docker volume name, kept across sessions
    # Opaque, new at every placement of the session (the portal: its first allocation id).
    placement: NotRequired[str]
    # The key of the warm desktop (of DesiredState.warm, on this node) the session was placed
    # on: claim that running container instead of starting one. Absent: start as usual.
    warm_key: NotRequired[str]


class DesiredWarm(TypedDict):
    """A desktop to keep started, with no user yet, for a class booking."""

    key: str  # stable while the portal wants it; a retry after a failure gets a new key
    booking: int
    course: str
    image: str
    cpus: float
    memory_mb: int
    pids_limit: int
    shm_mb: int
    gpu_devices: list[str]  # the slice it holds, as in DesiredSession


WarmState = Literal["READY", "FAILED"]


class WarmReport(TypedDict):
    state: WarmState
    reason: NotRequired[str]  # at most REASON_MAX_CHARS
    port: NotRequired[int | None]
    container_id: NotRequired[str]


class DesiredState(TypedDict):
    sessions: list[DesiredSession]
    warm: NotRequired[list[DesiredWarm]]  # absent from an older portal


class SessionReport(TypedDict):
    state: ReportedState
    host: NotRequired[str]
    port: NotRequired[int | None]
    container_id: NotRequired[str]
    reason: NotRequired[str]  # at most REASON_MAX_CHARS
    placement: NotRequired[str]  # the placement the report is about (DesiredSession's)
