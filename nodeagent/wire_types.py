"""The field types of the agent protocol's messages (:mod:`nodeagent.protocol`): bounds the
portal's columns can hold, ids, ports and addresses. No Django."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from .addresses import node_address, node_hostname

# A report's ``reason`` is shown to the user and stored in 300 characters; the agent cuts
# longer ones (the portal answers a longer one with 400).
REASON_MAX_CHARS = 300

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

# What the portal keeps in a PostgreSQL integer column (PositiveIntegerField).
INT32_MAX = 2**31 - 1
# The largest id a PostgreSQL bigint primary key holds: a larger one names nothing (400).
ID_MAX = 2**63 - 1
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
SmallCount = Annotated[int, Field(ge=0, le=32767)]  # a PositiveSmallIntegerField
Port = Annotated[int, Field(ge=1, le=65535)]
SessionId = Annotated[int, Field(ge=1, le=ID_MAX)]
Uuid = Annotated[str, Field(min_length=1, max_length=100)]  # GPU or MIG UUID
Reason = Annotated[str, Field(max_length=REASON_MAX_CHARS)]


def cut_reason(reason: str) -> str:
    """At most REASON_MAX_CHARS: the portal refuses longer ones (400), and the report would be
    lost and the session stuck. Log tails make start failures long."""
    if len(reason) > REASON_MAX_CHARS:
        return reason[: REASON_MAX_CHARS - 1] + "…"
    return reason


PcieLevel = Annotated[
    str,
    Field(
        pattern=r"^(internal|single|multiple|hostbridge|node|system|level-[0-9]+)$",
        description="A value of PCIE_TOPOLOGY_LEVELS (level-N for one NVML adds later).",
    ),
]


NodeAddress = Annotated[str, AfterValidator(node_address)]
# A node's name: an RFC 1123 hostname or an IP address, as written (no HTML, newline, ...).
NodeHostname = Annotated[str, AfterValidator(node_hostname)]


def _refuse_nul(value: Any) -> Any:
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("must not contain NUL characters (\\x00)")
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_nul(key)
            _refuse_nul(item)
    elif isinstance(value, list):
        for item in value:
            _refuse_nul(item)
    return value


class AgentMessage(BaseModel):
    """A request body the agent sends: unknown fields are refused, text holds no NUL (the
    portal's database refuses it), numbers are finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return _refuse_nul(value)


class PortalMessage(BaseModel):
    """An answer the portal sends: fields an (older) agent does not know are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)
