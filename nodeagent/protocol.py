"""The agent protocol: every message between node agents and the portal, defined once.

These pydantic models are the single definition of the wire (``/api/agent/v1/``). The agent
builds what it sends from them and validates what it receives with them; the portal
validates agent requests with the same models (``portal/agents/api.py``) and builds its
answers from them; the OpenAPI schema at ``/api/schema/`` is generated from them. The agent
owns this module; the portal imports it, never the reverse (no Django here).

Endpoints (all JSON, all under ``/api/agent/v1/``):

``POST register/``
    :class:`Registration` -> :class:`RegistrationAnswer` (201 with ``node_token`` the first
    time, when ``join_token`` is in the body; 200 after, with ``Authorization: Node <token>``).
    A protocol version the portal does not speak: 409 :class:`ConflictAnswer`.
``POST heartbeat/``
    :class:`Heartbeat` -> :class:`HeartbeatAnswer`.
``GET desired/``
    -> :class:`DesiredState`: the sessions that should run on this node now (a container
    labelled ``deskpool.session=<id>`` whose id is not listed must stop), each with its
    ``placement``, and the warm desktops to keep started.
``POST sessions/<session_id>/report/``
    :class:`SessionReport` -> :class:`ReportAnswer`; 409 :class:`ConflictAnswer` when the
    portal no longer wants that session, or the report is about an earlier placement.
``POST warm/<key>/report/``
    :class:`WarmReport` -> :class:`ReportAnswer`; 409 when that warm desktop is not wanted.

Errors: 401 for a missing or wrong token; 400 :class:`ErrorAnswer` for a body that does not
match its model (every problem with its dotted field path); 415 for a body that is not JSON.

Unknown fields. Requests (agent -> portal, :class:`AgentMessage`) forbid them: a field the
portal does not know is answered 400 naming it, never silently dropped. So a new request
field reaches the portal first (or comes with a new protocol version). Answers (portal ->
agent, :class:`PortalMessage`) ignore them, so a newer portal may add answer fields that an
older agent does not read (as ``warm`` was added within version 1).

On the wire a message carries the fields that were set when it was made (:func:`to_wire`):
an optional field left out is absent, not ``null``. Field names here are the wire names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from .addresses import NODE_ADDRESS_MAX
from .protocol_courses import CourseFolders
from .protocol_files import HomeTask
from .protocol_gateway import GatewayAccess, RevokedTicket
from .protocol_gpu import GpuHealth, SliceMetrics
from .wire_types import (  # noqa: F401 - REASON_MAX_CHARS: the agent and tests read it here
    ID_MAX,
    INT32_MAX,
    REASON_MAX_CHARS,
    AgentMessage,
    Count,
    NodeAddress,
    NodeHostname,
    PcieLevel,
    Port,
    PortalMessage,
    Reason,
    SessionId,
    SmallCount,
    Uuid,
)

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
LABEL_INSTALLATION = "deskpool.installation"  # the portal's installation id (RegistrationAnswer)
# A warm key names containers, folders and files: the portal makes them from this alphabet.
WARM_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$"

# Inside every desktop image: websockify listens here, the VNC password file is mounted here.
DESKTOP_WEBSOCKIFY_PORT = 6080
DESKTOP_PASSWORD_MOUNT = "/run/deskpool/vnc"
DESKTOP_PASSWORD_FILE = f"{DESKTOP_PASSWORD_MOUNT}/passwd"
DESKTOP_HOME = "/home/desktop"
# The user every desktop image runs as, who owns the files of the homes.
DESKTOP_UID = DESKTOP_GID = 1000

# At most this many XID codes per GPU in one heartbeat; later ones are dropped (and logged).
XID_ERRORS_MAX = 32

ReportedState = Literal["STARTING", "RUNNING", "FAILED", "LOST", "ENDED"]
WarmState = Literal["READY", "FAILED"]
# A desktop's locale: the person's language (settings.LANGUAGES), or "" for the image's default.
DesktopLanguage = Literal["", "en", "zh-hans"]
SharingMode = Literal["mig", "share", "whole"]
RuntimeKind = Literal["docker", "simulated"]


def to_wire(message: BaseModel) -> dict[str, Any]:
    """The JSON object of a message: the fields set when it was made, by their wire names."""
    return message.model_dump(mode="json", exclude_unset=True)


# -- registration ---------------------------------------------------------------------------


class MigInstance(AgentMessage):
    """One MIG instance of a GPU in MIG mode; the portal offers it as a ``mig`` slice."""

    uuid: Uuid
    profile: str = Field(min_length=1, max_length=40, examples=["1g.10gb"])
    memory_mb: Count
    start: SmallCount | None = Field(default=None, description="Its first memory slice (NVML).")


class GpuInventory(AgentMessage):
    """One GPU as the agent's probe sees it (NVML, or a simulated fleet file)."""

    uuid: Uuid
    index: Count
    name: str = Field(
        min_length=1, max_length=100, description="As NVML reports it, e.g. NVIDIA A100-SXM4-80GB."
    )
    memory_mb: Count
    compute_capability: str = Field(max_length=10, examples=["8.0"])
    mig_mode: bool
    mig_instances: list[MigInstance]
    nvlink_peers: list[Uuid] = Field(description="UUIDs of GPUs on this node linked by NVLink.")
    pci_bus_id: str = Field(max_length=32, examples=["00000000:07:00.0"])
    sharing: SharingMode = Field(
        description="How the node's admin lets the pool use this GPU: its MIG instances, "
        "share_count time-sliced shares with share_memory_mb each, or the whole card."
    )
    share_count: int | None = Field(default=None, ge=1, le=64)
    share_memory_mb: int | None = Field(default=None, ge=1, le=INT32_MAX)
    simulated: bool
    # PCIe, where NVML reports it (None when the card does not; a simulated GPU leaves these
    # out). The current link drops to a lower generation while the GPU idles; max is what the
    # GPU and its slot can reach.
    pcie_link_gen: SmallCount | None = None
    pcie_link_width: SmallCount | None = None
    pcie_link_gen_max: SmallCount | None = None
    pcie_link_width_max: SmallCount | None = None
    pcie_topology: dict[Uuid, PcieLevel] | None = Field(
        default=None,
        description="Each other GPU of this node -> the closest common ancestor of the pair in "
        "the PCI tree; a pair NVML cannot place is left out.",
    )


class Registration(AgentMessage):
    """What the agent says about its node at every start."""

    protocol_version: int
    agent_version: str = Field(min_length=1, max_length=40)
    hostname: NodeHostname = Field(min_length=1, max_length=200)  # a hostname or IP address
    join_token: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="First registration only (one-time).",
    )
    address: NodeAddress = Field(
        min_length=1,
        max_length=NODE_ADDRESS_MAX,
        description="Where the portal reaches published ports: the node's management "
        "address, a hostname or an IP address only (no scheme, port, path or user); the "
        "portal accepts only addresses in its DESKPOOL_NODE_ADDRESS_NETWORKS.",
    )
    cpu_count: Count
    memory_mb: Count
    labels: dict[str, str] = Field(description="rack, cooling, network_plane, cpu_model, ...")
    runtime: RuntimeKind
    gpus: list[GpuInventory]
    gateway_port: Port | None = Field(
        default=None,
        description="Where the node's desktop gateway listens on its address (issue 34); "
        "absent: no gateway (an older agent).",
    )
    home_root_shared: bool = Field(
        default=False,
        description="True when the agent keeps homes under a root every node shares "
        "(DESKPOOL_HOME_ROOT): a desktop on another node sees the same home. Older agents "
        "send nothing: False, homes per node.",
    )


class RegistrationAnswer(PortalMessage):
    node_id: int
    node_token: str | None = Field(default=None, description="Only on the first registration.")
    heartbeat_interval_s: float
    poll_interval_s: float = Field(
        description="How often the agent looks at its own desktops (no request to the portal)."
    )
    wait_s: float = Field(
        default=0,
        ge=0,
        le=60,
        description="How long the agent's wait/ may be held: the slow fallback poll. Absent "
        "(0) from an older portal, which the agent then polls every poll_interval_s.",
    )
    installation_id: str = Field(
        default="",
        max_length=16,
        pattern=r"^[a-z0-9]*$",
        description="The portal's installation id: the agent names and labels its containers, "
        "volumes and networks with it and adopts or removes only those that carry it. Absent "
        "from an older portal.",
    )


# -- heartbeat -------------------------------------------------------------------------------


class GpuMetrics(AgentMessage):
    """One GPU's live readings; ``None`` where the card or driver does not report a value."""

    uuid: Uuid
    utilization_pct: float | None
    memory_used_mb: int | None
    temperature_c: float | None
    power_w: float | None
    # Optional within protocol version 1: an older agent leaves them out.
    power_limit_w: float | None = Field(default=None, description="The enforced power cap.")
    fan_pct: float | None = Field(default=None, description="None on passively cooled boards.")
    pcie_tx_kbps: int | None = Field(default=None, ge=0, description="KB/s, GPU -> host.")
    pcie_rx_kbps: int | None = Field(default=None, ge=0, description="KB/s, host -> GPU.")
    ecc_corrected_volatile: int | None = Field(
        default=None, ge=0, description="Since the driver loaded."
    )
    ecc_uncorrected_volatile: int | None = Field(default=None, ge=0)
    xid_errors: list[int] | None = Field(
        default=None,
        max_length=XID_ERRORS_MAX,
        description="XID codes since the previous heartbeat, oldest first; [] for none, "
        "None when the GPU is not watched.",
    )
    slices: list[SliceMetrics] | None = Field(
        default=None,
        max_length=64,
        description="Per-slice readings of a GPU in MIG mode, one per instance; absent or None "
        "for a GPU without MIG instances (and from an older agent).",
    )
    # A GPU in share mode only: its MPS control daemon, running with the caps or why not.
    share_health: str | None = Field(default=None, max_length=200)
    health: GpuHealth | None = Field(
        default=None,
        description="Lost GPU, pending page retirement or row remap; absent from an older agent.",
    )


# At most this many sessions' usage in one heartbeat (a node runs far fewer desktops).
USAGE_MAX = 500


class SessionUsage(AgentMessage):
    """One running session's own utilisation, for idle detection (docs/lifecycle.md);
    ``None`` where the agent has no figure. The simulated runtime sends SIMULATED figures."""

    session_id: SessionId
    gpu_pct: float | None = Field(
        default=None,
        ge=0,
        le=100,
        description="The session's own GPU slice: its MIG instance's activity where NVML "
        "reports it, else the summed utilisation of its container's processes on its GPUs.",
    )
    cpu_pct: float | None = Field(
        default=None,
        ge=0,
        le=100,
        description="The container's CPU use in percent of its CPU limit (of the node's CPUs "
        "without a limit), between two readings.",
    )
    home_used_bytes: int | None = Field(
        default=None, ge=0, description="Its disk-bounded home's use (statvfs); None: not bounded."
    )


class Heartbeat(AgentMessage):
    gpus: list[GpuMetrics]
    running_sessions: list[Annotated[int, Field(ge=0, le=ID_MAX)]]
    # Optional within protocol version 1: an older agent leaves it out.
    usage: list[SessionUsage] | None = Field(
        default=None,
        max_length=USAGE_MAX,
        description="Per running session: its GPU and CPU use since the previous heartbeat. "
        "The portal records it only for sessions placed on this node.",
    )


class HeartbeatAnswer(PortalMessage):
    ok: bool
    server_time: datetime


# -- desired state ---------------------------------------------------------------------------


class DesktopSpec(PortalMessage):
    """Image, limits and GPU of a desktop: what a session's and a warm desktop's share."""

    course: str = Field(description="Course code; empty when none.")
    image: str = Field(min_length=1)
    cpus: float = Field(ge=0)
    memory_mb: int = Field(ge=0)
    pids_limit: int = Field(ge=0)
    shm_mb: int = Field(ge=0)
    gpu_devices: list[str] = Field(
        description="GPU or MIG UUIDs; NVIDIA_VISIBLE_DEVICES gets exactly these."
    )


class DesiredSession(DesktopSpec):
    """A session whose desktop should run on this node."""

    session_id: SessionId
    user: str
    vnc_password: str = Field(min_length=1, max_length=8, description="VNC cuts longer ones.")
    home_volume: str = Field(min_length=1, description="Docker volume, kept across sessions.")
    home_quota_mb: int | None = Field(
        default=None, ge=0, description="Home quota in MB, disk-enforced (0: none; absent: node's)."
    )
    placement: str = Field(
        default="",
        max_length=40,
        description="Opaque, new at every placement of the session; a container of another "
        "placement is replaced, never adopted. Absent from an older portal.",
    )
    warm_key: str = Field(
        default="",
        max_length=40,
        description="A warm desktop of this node the session was placed on: claim that running "
        "container instead of starting one. Absent: start as usual.",
    )
    language: DesktopLanguage = Field(
        default="",
        description="The person's language: the desktop's locale (DESKPOOL_LANGUAGE) where the "
        "image has it. Empty or absent (an older portal): the image's default.",
    )
    revoked_tickets: list[RevokedTicket] = Field(
        default_factory=list, description="Its tickets whose holder lost the right (gateway)."
    )
    courses: CourseFolders = []  # read-only at /courses/<code> (protocol_courses)


class DesiredWarm(DesktopSpec):
    """A desktop to keep started, with no user yet, for a class booking."""

    key: str = Field(
        pattern=WARM_KEY_PATTERN,
        description="Stable while the portal wants it; a retry after a failure gets a new key.",
    )
    booking: int


class DesiredState(PortalMessage):
    sessions: list[DesiredSession]
    gateway: GatewayAccess | None = Field(
        default=None, description="The gateway's ticket keys and origins (protocol_gateway)."
    )
    warm: list[DesiredWarm] = Field(
        default_factory=list, description="Absent from an older portal."
    )
    home_tasks: list[HomeTask] = Field(
        default_factory=list, description="Home-file tasks (protocol_files); older: absent."
    )
    version: int = Field(
        default=0,
        ge=0,
        description="The node's desired-state version, read before this state: send it back "
        "as ``since`` in the next WaitRequest. Absent (0) from an older portal.",
    )


class WaitRequest(AgentMessage):
    """``POST wait/``: answer my desired state as soon as it is newer than ``since``, or
    after ``timeout_s`` at the latest. Carries the node's heartbeat when one is due, so an
    idle node costs the portal one request per wait (docs/agent-protocol.md)."""

    since: int = Field(ge=0, description="The version of the desired state the agent has.")
    timeout_s: float = Field(
        gt=0, le=60, description="The portal answers after this at the latest."
    )
    heartbeat: Heartbeat | None = Field(default=None, description="Absent when none is due.")
    unchanged_ok: bool = Field(
        default=False,
        description="At the timeout with nothing changed, answer 204 with no body instead of "
        "the whole desired state (the agent keeps the one it has).",
    )


# -- reports ---------------------------------------------------------------------------------


class SessionReport(AgentMessage):
    """What happened to one placement of a session's desktop."""

    state: ReportedState
    host: str = Field(default="", max_length=200)
    port: Port | None = None
    audio_port: Port | None = Field(
        default=None,
        description="RUNNING: the desktop's published sound port (nodeagent.desktop_audio), "
        "when its image serves sound.",
    )
    container_id: str = Field(default="", max_length=100)
    reason: Reason = ""
    placement: str = Field(
        default="",
        max_length=40,
        description="The placement the report is about (DesiredSession's).",
    )
    failure: str = Field(
        default="",
        max_length=40,
        pattern=r"^[a-z_]*$",
        description="FAILED: why, as a code of nodeagent.failures (not_enough_cpus, "
        "image_missing, ...); ``reason`` keeps the runtime's words. Absent from an older agent.",
    )


class BatchedReport(SessionReport):
    session_id: SessionId


MAX_BATCH = 500


class ReportBatch(AgentMessage):
    """``POST reports/``: session reports in the order they happened, applied in that order
    (a STARTING before its RUNNING), as one request instead of one each."""

    reports: list[BatchedReport] = Field(min_length=1, max_length=MAX_BATCH)


class BatchResult(PortalMessage):
    session_id: int
    outcome: Literal["applied", "conflict", "refused"] = Field(
        description="conflict: stop that desktop (as a 409); refused: not this node's session, "
        "or a report the portal cannot apply (as a 400 or 404), logged and dropped."
    )
    state: str | None = Field(default=None, description="The portal's state of the session.")
    detail: str = ""


class ReportBatchAnswer(PortalMessage):
    results: list[BatchResult] = Field(description="One per report, in the same order.")


class WarmReport(AgentMessage):
    """READY once a warm desktop answers a VNC handshake; FAILED when it could not start or died."""

    state: WarmState
    reason: Reason = ""
    port: Port | None = None
    container_id: str = Field(default="", max_length=100)


class ReportAnswer(PortalMessage):
    state: str = Field(description="The portal's state of the session or warm desktop.")


class DetailAnswer(PortalMessage):
    """An error answer with a sentence: 401 (token), 404 (not this node's), 415 (not JSON)."""

    detail: str


class ConflictAnswer(DetailAnswer):
    """409: stop that desktop (or, at registration: the protocol version is not spoken)."""

    state: str | None = Field(
        default=None, description="The portal's state of that session, if any."
    )


class FieldError(PortalMessage):
    field: str = Field(description="Dotted path of the field, e.g. gpus.0.uuid; (body): all.")
    message: str
    type: str = Field(description="pydantic's error type, e.g. missing, extra_forbidden.")


class ErrorAnswer(DetailAnswer):
    """400: the body does not match its message; ``detail`` sums up ``errors``."""

    errors: list[FieldError] = []
