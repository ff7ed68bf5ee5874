"""The heartbeat's metric fields: additive within protocol version 1 (docs/agent-protocol.md)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nodeagent.protocol import PROTOCOL_VERSION, Heartbeat, to_wire

OLD_AGENT_GPU = {  # what an agent of the first release sends: the four original readings
    "uuid": "GPU-old", "utilization_pct": 12.0, "memory_used_mb": 512, "temperature_c": 40.0,
    "power_w": 80.0,
}  # fmt: skip


def test_an_older_agent_without_the_new_fields_is_still_accepted() -> None:
    beat = Heartbeat.model_validate({"gpus": [OLD_AGENT_GPU], "running_sessions": [3]})
    [gpu] = beat.gpus
    assert gpu.slices is None and gpu.fan_pct is None and gpu.xid_errors is None
    assert to_wire(beat)["gpus"] == [OLD_AGENT_GPU]  # nothing added on the wire
    assert PROTOCOL_VERSION == 1


def test_slice_readings_are_validated_like_every_request_field() -> None:
    mig = {"uuid": "MIG-1", "memory_used_mb": 2048, "utilization_pct": None}
    beat = Heartbeat.model_validate(
        {"gpus": [OLD_AGENT_GPU | {"slices": [mig]}], "running_sessions": []}
    )
    assert to_wire(beat)["gpus"][0]["slices"] == [mig]
    for bad in (
        {"memory_used_mb": -1},
        {"utilization_pct": 101.0},
        {"processes": -1},
        {"cores": 2},
    ):
        with pytest.raises(ValidationError):
            Heartbeat.model_validate(
                {"gpus": [OLD_AGENT_GPU | {"slices": [mig | bad]}], "running_sessions": []}
            )
