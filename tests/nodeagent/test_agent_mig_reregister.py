"""The agent registers again when a GPU's MIG layout changes (issue 37 item 2): an admin
sets a new layout on a drained node, and the portal checks and offers it at the next
heartbeat, without restarting the agent."""

from __future__ import annotations

from pathlib import Path

from nodeagent.protocol import GpuInventory, MigInstance

from .test_agent_loop import TinyPortal, make_agent


def relaid(gpus: list[GpuInventory]) -> list[GpuInventory]:
    """The first MIG GPU re-partitioned as one 7g instance."""
    first = next(i for i, g in enumerate(gpus) if g.mig_mode)
    whole = MigInstance(uuid="MIG-new-7g", profile="7g.80gb", memory_mb=81920, start=0)
    return [
        g.model_copy(update={"mig_instances": [whole]}) if i == first else g
        for i, g in enumerate(gpus)
    ]


def test_a_changed_mig_layout_is_registered_again_before_the_heartbeat(tmp_path: Path) -> None:
    portal = TinyPortal()
    agent = make_agent(portal, tmp_path)
    agent.register()
    agent.heartbeat()
    assert len(portal.bodies("register/")) == 1  # nothing changed: no new registration

    before = agent.probe.inventory()
    assert any(g.mig_mode for g in before), "the demo node has MIG GPUs"
    agent.probe.inventory = lambda: relaid(before)  # type: ignore[method-assign]
    agent.heartbeat()
    registrations = portal.bodies("register/")
    assert len(registrations) == 2
    assert any(
        [m["uuid"] for m in g["mig_instances"]] == ["MIG-new-7g"] for g in registrations[-1]["gpus"]
    )
    assert [p for _, p, _, _ in portal.requests][-2:] == ["register/", "heartbeat/"]
    agent.heartbeat()
    assert len(portal.bodies("register/")) == 2  # once per change
