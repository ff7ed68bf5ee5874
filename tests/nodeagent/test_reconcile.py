"""The reconcile step, with an in-process fake portal: simulated runtime and real Docker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from nodeagent.images.check_image import handshake
from nodeagent.outbox import CLAIM_STARTING_LINGER_S
from nodeagent.protocol import LABEL_NODE, LABEL_PLACEMENT
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import container_name
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.runtime.simulated_runtime import SimulatedRuntime

from .conftest import desired_warm


def converge(reconciler: Reconciler, desired: list, steps: int = 1) -> None:  # type: ignore[type-arg]
    for _ in range(steps):
        reconciler.step(desired)
        assert reconciler.wait_idle(90), "reconcile actions did not finish"


@pytest.fixture
def simulated(tmp_path: Path) -> SimulatedRuntime:
    return SimulatedRuntime(
        node_name="sim-node", state_file=tmp_path / "sim.json", start_delay_s=0.01
    )


# -- simulated runtime (no engine needed) ---------------------------------------------------


def test_missing_session_is_started_and_reported_running(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(simulated, fake_portal)
    session = make_session(1)

    converge(reconciler, [session], steps=3)

    assert fake_portal.states(1) == ["STARTING", "RUNNING"]
    running = fake_portal.last(1)
    assert running["port"] is None and "SIMULATED" in running["reason"]
    assert [c.session_id for c in simulated.list_managed()] == [1]


def test_undesired_session_is_stopped_and_reported_ended(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(simulated, fake_portal)
    converge(reconciler, [make_session(1), make_session(2)])

    converge(reconciler, [make_session(2)], steps=2)

    assert fake_portal.states(1) == ["STARTING", "RUNNING", "ENDED"]
    assert fake_portal.states(2) == ["STARTING", "RUNNING"]
    assert [c.session_id for c in simulated.list_managed()] == [2]


def test_dead_desktop_is_reported_lost_once_and_not_restarted(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(simulated, fake_portal)
    session = make_session(3)
    converge(reconciler, [session])
    simulated.simulate_exit(3, 137, oom_killed=True)

    converge(reconciler, [session], steps=3)

    assert fake_portal.states(3) == ["STARTING", "RUNNING", "LOST"]
    assert "OOMKilled" in fake_portal.last(3)["reason"]
    assert simulated.list_managed() == []


def test_restarted_agent_adopts_its_desktops_without_duplicates(
    tmp_path, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "sim.json"
    before = Reconciler(SimulatedRuntime(node_name="n", state_file=state), fake_portal)
    converge(before, [make_session(4)])
    before.close()

    runtime = SimulatedRuntime(node_name="n", state_file=state)
    after = Reconciler(runtime, fake_portal)
    summary = after.step([make_session(4)])
    converge(after, [make_session(4)], steps=2)

    assert summary.adopted == [4] and summary.starting == []
    assert fake_portal.states(4) == ["STARTING", "RUNNING", "RUNNING"]
    assert len(runtime.list_managed()) == 1


def test_failed_start_is_reported_and_not_retried(tmp_path, fake_portal, make_session) -> None:  # type: ignore[no-untyped-def]
    runtime = SimulatedRuntime(node_name="n", known_images={"deskpool/tiny:latest"})
    reconciler = Reconciler(runtime, fake_portal)

    converge(reconciler, [make_session(5, image="nope:latest")], steps=3)

    assert fake_portal.states(5) == ["STARTING", "FAILED"]
    assert "not present" in fake_portal.last(5)["reason"]
    assert runtime.list_managed() == []


def test_conflict_on_adopted_desktop_stops_it(simulated, fake_portal, make_session) -> None:  # type: ignore[no-untyped-def]
    simulated.start(make_session(6))
    fake_portal.unwanted.add(6)

    converge(Reconciler(simulated, fake_portal), [make_session(6)])

    assert simulated.list_managed() == []


def test_conflict_on_starting_means_no_start(simulated, fake_portal, make_session) -> None:  # type: ignore[no-untyped-def]
    fake_portal.unwanted.add(7)

    converge(Reconciler(simulated, fake_portal), [make_session(7)], steps=2)

    assert simulated.list_managed() == []


def test_reports_wait_for_the_portal_and_keep_their_order(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(simulated, fake_portal)
    fake_portal.down = True
    converge(reconciler, [make_session(8)])
    assert [c.session_id for c in simulated.list_managed()] == [8]  # started anyway
    assert fake_portal.reports == []

    fake_portal.down = False
    converge(reconciler, [make_session(8)])

    assert fake_portal.states(8) == ["STARTING", "RUNNING"]


def test_ten_desktops_start_in_parallel_and_a_slow_start_does_not_block_a_stop(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    simulated.start(make_session(100))
    simulated.start_delay_s = 1.0
    reconciler = Reconciler(simulated, fake_portal)
    wanted = [make_session(i) for i in range(1, 11)]

    started = time.monotonic()
    reconciler.step(wanted)  # 100 is not wanted: it must stop while the ten start
    deadline = time.monotonic() + 0.8
    while 100 in {c.session_id for c in simulated.list_managed()} and time.monotonic() < deadline:
        time.sleep(0.02)
    assert 100 not in {c.session_id for c in simulated.list_managed()}
    assert reconciler.wait_idle(10)
    elapsed = time.monotonic() - started

    assert elapsed < 3.0, f"ten 1 s starts took {elapsed:.1f} s: not parallel"
    assert all(fake_portal.states(i) == ["STARTING", "RUNNING"] for i in range(1, 11))
    assert fake_portal.states(100) == ["ENDED"]


def test_a_busy_portal_does_not_hold_back_the_next_starts(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    """Twelve desktops, two start workers, and a portal that does not answer yet: all twelve
    start, because a start worker goes on to the next desktop instead of waiting for the
    answer to its RUNNING report (before, they started two at a time, a round trip apart).
    Each stays in flight until answered; then all are reported, and the desktop the portal
    no longer wants is stopped."""
    fake_portal.answering.clear()
    fake_portal.unwanted.add(5)
    reconciler = Reconciler(simulated, fake_portal, start_workers=2)
    reconciler.step([make_session(i) for i in range(1, 13)])
    deadline = time.monotonic() + 10
    while len(simulated.list_managed()) < 12 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(simulated.list_managed()) == 12
    assert fake_portal.reports == []  # nothing answered yet
    assert reconciler.in_flight() == set(range(1, 13))

    fake_portal.answering.set()
    assert reconciler.wait_idle(10)
    assert reconciler.in_flight() == set()
    assert all(fake_portal.states(i) == ["STARTING", "RUNNING"] for i in range(1, 13) if i != 5)
    assert sorted(c.session_id for c in simulated.list_managed()) == [
        i for i in range(1, 13) if i != 5
    ]


def test_a_warm_claims_starting_lingers_longer_than_a_cold_starts(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(simulated, fake_portal)
    reconciler.step([], [desired_warm("k1")])
    assert reconciler.wait_idle(30)
    lingers: dict[tuple[int, str], float | None] = {}
    post = reconciler._outbox.post

    def spy(session_id, body, *, linger=None):  # type: ignore[no-untyped-def]
        lingers[(session_id, body.state)] = linger
        return post(session_id, body, linger=linger)

    reconciler._outbox.post = spy  # type: ignore[method-assign]
    converge(reconciler, [make_session(1, warm_key="k1"), make_session(2)], steps=2)

    assert fake_portal.states(1) == ["STARTING", "RUNNING"]
    assert fake_portal.states(2) == ["STARTING", "RUNNING"]
    assert lingers[(1, "STARTING")] == CLAIM_STARTING_LINGER_S  # the claim's
    assert lingers[(2, "STARTING")] is None  # a cold start's: the outbox's default
    assert [c.container_id for c in simulated.list_managed() if c.session_id == 1] == [
        "simulated-sim-node-wk1"
    ]  # claimed, not started afresh


# -- placements: a session requeued and placed here again ----------------------------------


def test_container_of_an_earlier_placement_is_replaced_not_adopted(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(simulated, fake_portal)
    converge(reconciler, [make_session(20, placement="p1", vnc_password="oldpass1")])

    # Requeued and placed on this node again between two polls: new placement, new password.
    summary = reconciler.step([make_session(20, placement="p2", vnc_password="newpass2")])
    assert reconciler.wait_idle(10)

    assert summary.replaced == [20] and summary.adopted == [] and summary.lost == []
    assert [(r["state"], r.get("placement")) for sid, r in fake_portal.reports if sid == 20] == [
        ("STARTING", "p1"), ("RUNNING", "p1"), ("STARTING", "p2"), ("RUNNING", "p2"),
    ]  # fmt: skip
    [container] = simulated.list_managed()
    assert container.placement == "p2"
    converge(reconciler, [make_session(20, placement="p2")], steps=2)
    assert fake_portal.states(20)[-1] == "RUNNING" and len(fake_portal.states(20)) == 4


def test_restarted_agent_replaces_an_earlier_placement_too(
    tmp_path, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "sim.json"
    before = Reconciler(SimulatedRuntime(node_name="n", state_file=state), fake_portal)
    converge(before, [make_session(21, placement="p1")])
    before.close()

    runtime = SimulatedRuntime(node_name="n", state_file=state)
    summary = Reconciler(runtime, fake_portal).step([make_session(21, placement="p2")])

    assert summary.replaced == [21] and summary.adopted == []


def test_dead_desktop_of_an_earlier_placement_is_not_reported_lost(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(simulated, fake_portal)
    converge(reconciler, [make_session(22, placement="p1")])
    simulated.simulate_exit(22, 137)

    converge(reconciler, [make_session(22, placement="p2")], steps=2)

    assert "LOST" not in fake_portal.states(22)
    assert fake_portal.last(22)["state"] == "RUNNING" and fake_portal.last(22)["placement"] == "p2"


def test_a_failed_placement_does_not_stop_the_next_one_on_the_same_node(
    fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    runtime = SimulatedRuntime(node_name="n", known_images={"deskpool/tiny:latest"})
    reconciler = Reconciler(runtime, fake_portal)
    converge(reconciler, [make_session(23, placement="p1", image="gone:latest")], steps=2)
    assert fake_portal.states(23) == ["STARTING", "FAILED"]

    converge(reconciler, [make_session(23, placement="p2")], steps=2)

    assert fake_portal.states(23) == ["STARTING", "FAILED", "STARTING", "RUNNING"]


def test_without_placements_containers_are_adopted_as_before(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    # An older agent's container has no placement label; an older portal sends none.
    simulated.start(make_session(24))
    summary = Reconciler(simulated, fake_portal).step([make_session(24, placement="p9")])
    assert summary.adopted == [24] and summary.replaced == []

    simulated.start(make_session(25, placement="p1"))
    summary = Reconciler(simulated, fake_portal).step([make_session(25)])
    assert summary.adopted == [25] and summary.replaced == []
    assert "placement" not in fake_portal.last(25)


def test_a_refused_old_report_does_not_stop_the_new_placement(
    simulated, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(simulated, fake_portal)
    fake_portal.down = True
    converge(reconciler, [make_session(26, placement="p1")])  # reports held back
    fake_portal.down = False
    fake_portal.refuse_placements.add("p1")  # the portal has moved on to p2

    converge(reconciler, [make_session(26, placement="p2")], steps=2)

    assert [c.placement for c in simulated.list_managed()] == ["p2"]
    assert [(r["state"], r["placement"]) for sid, r in fake_portal.reports if sid == 26] == [
        ("STARTING", "p2"), ("RUNNING", "p2"),
    ]  # fmt: skip


# -- real Docker -----------------------------------------------------------------------------


@pytest.fixture
def docker_runtime(docker_client, node_name, sessions_dir) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=30
    )


@pytest.mark.docker
def test_docker_start_stop_lost_and_adopt(
    docker_runtime, docker_client, tiny_image, node_name, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    keep, end, die = (make_session(i, image=tiny_image) for i in (5001, 5002, 5003))
    reconciler = Reconciler(docker_runtime, fake_portal)

    # start
    converge(reconciler, [keep, end, die])
    for sid in (5001, 5002, 5003):
        assert fake_portal.states(sid) == ["STARTING", "RUNNING"]
        report = fake_portal.last(sid)
        assert report["host"] == "127.0.0.1" and isinstance(report["port"], int)
        assert docker_client.containers.get(report["container_id"]).status == "running"

    # lost: the desktop is killed behind the agent's back
    docker_client.containers.get(container_name(node_name, 5003)).kill()
    # stop: 5002 is no longer desired
    converge(reconciler, [keep, die], steps=2)
    assert fake_portal.states(5002)[-1] == "ENDED"
    assert fake_portal.states(5003)[-1] == "LOST"
    assert "137" in fake_portal.last(5003)["reason"]
    assert sorted(c.session_id for c in docker_runtime.list_managed()) == [5001]
    reconciler.close()

    # adopt: a new agent process finds 5001 and does not start a second one
    restarted = Reconciler(
        DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir), fake_portal
    )
    summary = restarted.step([keep])
    converge(restarted, [keep])
    assert summary.adopted == [5001] and summary.starting == []
    assert fake_portal.states(5001) == ["STARTING", "RUNNING", "RUNNING"]
    assert (
        len(
            docker_client.containers.list(
                all=True, filters={"name": container_name(node_name, 5001)}
            )
        )
        == 1
    )


@pytest.mark.docker
def test_docker_failed_start_cleans_up(
    docker_runtime, docker_client, node_name, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(5004, image="deskpool/no-such-image:latest")

    converge(Reconciler(docker_runtime, fake_portal), [session], steps=2)

    assert fake_portal.states(5004) == ["STARTING", "FAILED"]
    assert (
        docker_client.containers.list(all=True, filters={"name": container_name(node_name, 5004)})
        == []
    )
    assert docker_client.volumes.list(filters={"name": session.home_volume}) == []
    assert not (sessions_dir / "s5004").exists()


@pytest.mark.docker
def test_docker_ten_desktops_start_together(
    docker_runtime, tiny_image, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    wanted = [make_session(5100 + i, image=tiny_image) for i in range(10)]

    converge(Reconciler(docker_runtime, fake_portal), wanted)

    assert all(fake_portal.states(s.session_id) == ["STARTING", "RUNNING"] for s in wanted)
    ports = {fake_portal.last(s.session_id)["port"] for s in wanted}
    assert len(ports) == 10


@pytest.mark.docker
def test_docker_placed_again_on_the_same_node_gets_a_new_desktop_with_the_new_password(
    docker_runtime, docker_client, tiny_image, node_name, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    first = make_session(5200, image=tiny_image, placement="41", vnc_password="oldpass1")
    converge(Reconciler(docker_runtime, fake_portal), [first])
    old_id = fake_portal.last(5200)["container_id"]
    assert docker_client.containers.get(old_id).labels[LABEL_PLACEMENT] == "41"

    # The node went silent, the session was requeued and placed here again; the agent,
    # restarted meanwhile, never saw it leave. Same home volume, new password, new slice.
    again = first.model_copy(
        update={"placement": "57", "vnc_password": "newpass2", "gpu_devices": ["MIG-other"]}
    )
    restarted = Reconciler(
        DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir), fake_portal
    )
    summary = restarted.step([again])
    assert restarted.wait_idle(60)

    assert summary.replaced == [5200] and summary.adopted == []
    running = fake_portal.last(5200)
    assert (running["state"], running["placement"]) == ("RUNNING", "57")
    assert running["container_id"] != old_id
    assert docker_client.containers.list(all=True, filters={"id": old_id}) == []
    [container] = docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_NODE}={node_name}"}
    )
    assert container.id == running["container_id"]
    assert container.labels[LABEL_PLACEMENT] == "57"
    assert "DESKPOOL_SIMULATED_GPU_DEVICES=MIG-other" in container.attrs["Config"]["Env"]
    url = f"ws://127.0.0.1:{running['port']}/websockify"
    assert asyncio.run(handshake(url, "newpass2"))[2] == "OK"
    assert asyncio.run(handshake(url, "oldpass1"))[2].startswith("FAILED")
    assert "ENDED" not in fake_portal.states(5200) and "LOST" not in fake_portal.states(5200)
