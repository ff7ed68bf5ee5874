"""The warm pool on the agent: real dockerd, real containers of the tiny image.

The agent keeps the portal's warm desktops started, claims one for a session (the session's
password works afterwards and the warm desktop's random one no longer does), stops the ones
that leave the list, adopts a claimed one after a restart, and cleans up failures.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import pytest

from nodeagent.images.check_image import handshake
from nodeagent.protocol import LABEL_BOOKING, LABEL_MANAGED, LABEL_NODE, LABEL_SESSION, LABEL_WARM
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import claim_pipes, home_mounts, warm_container_name
from nodeagent.runtime.base import StartFailed
from nodeagent.runtime.desktop_network import remove_networks
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.runtime.simulated_runtime import SimulatedRuntime
from tests.nodeagent.conftest import desired_warm


def converge(reconciler: Reconciler, sessions: list, warm: list, steps: int = 1) -> None:  # type: ignore[type-arg]
    for _ in range(steps):
        reconciler.step(sessions, warm)
        assert reconciler.wait_idle(90), "reconcile actions did not finish"


def login(port: int, password: str) -> str:
    """A real VNC handshake through websockify, answering the challenge: OK or FAILED (n)."""
    return asyncio.run(handshake(f"ws://127.0.0.1:{port}/websockify", password))[2]


def node_containers(docker_client, node_name: str) -> list:  # type: ignore[no-untyped-def,type-arg]
    labels = [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={node_name}"]
    return docker_client.containers.list(all=True, filters={"label": labels})


@pytest.fixture
def docker_runtime(docker_client, node_name, sessions_dir) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=30
    )


@pytest.mark.docker
def test_warm_desktops_kept_claimed_dropped_and_adopted_after_restart(
    docker_runtime, docker_client, tiny_image, node_name, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    warm = [desired_warm(f"b7-{i}", image=tiny_image) for i in (1, 2, 3)]
    reconciler = Reconciler(docker_runtime, fake_portal)

    # Three warm desktops start, each answers a VNC handshake and is reported READY.
    converge(reconciler, [], warm)
    for w in warm:
        assert fake_portal.warm_states(w.key) == ["READY"]
    found = {c.labels[LABEL_WARM]: c for c in node_containers(docker_client, node_name)}
    assert sorted(found) == ["b7-1", "b7-2", "b7-3"]
    for container in found.values():
        assert container.status == "running"
        assert container.labels[LABEL_BOOKING] == "7"
        assert LABEL_SESSION not in container.labels  # nobody's desktop yet
        assert container.attrs["HostConfig"]["CapDrop"] == ["ALL"]
        assert container.attrs["Config"]["User"] == "1000:1000"
    # No home volume yet: a warm desktop's home is the agent's folder until it is claimed.
    assert docker_client.volumes.list(filters={"label": f"{LABEL_NODE}={node_name}"}) == []
    # Level-triggered: the same list again changes nothing.
    again = reconciler.step([], warm)
    assert again.is_quiet(), again
    assert len(node_containers(docker_client, node_name)) == 3

    # A student's session is placed on b7-1: the agent claims the running container.
    warm_port = next(r["port"] for k, r in fake_portal.warm_reports if k == "b7-1")
    warm_password = (sessions_dir / "wb7-1" / "passwd").read_text().strip()
    assert login(warm_port, warm_password) == "OK"
    session = make_session(
        7001, image=tiny_image, vnc_password="claimpw1", placement="88", warm_key="b7-1"
    )
    summary = reconciler.step([session], warm[1:])
    assert reconciler.wait_idle(60)
    assert summary.claiming == [7001] and summary.starting == []
    assert fake_portal.states(7001) == ["STARTING", "RUNNING"]
    running = fake_portal.last(7001)
    assert running["container_id"] == found["b7-1"].id  # the warm container, not a new one
    assert running["port"] == warm_port and running["placement"] == "88"
    # The session's password now opens the desktop; the warm desktop's random one does not.
    assert login(warm_port, "claimpw1") == "OK"
    assert login(warm_port, warm_password).startswith("FAILED")
    claim = json.loads((sessions_dir / "claims" / "b7-1.json").read_text())
    assert (claim["session_id"], claim["user"], claim["placement"]) == (7001, "alice", "88")
    assert [c.session_id for c in docker_runtime.list_managed()] == [7001]

    # b7-2 and b7-3 leave the list unclaimed: stopped and removed, with their folders.
    converge(reconciler, [session], [])
    assert [c.id for c in node_containers(docker_client, node_name)] == [found["b7-1"].id]
    assert not (sessions_dir / "wb7-2").exists() and not (sessions_dir / "wb7-3").exists()
    assert fake_portal.states(7001) == ["STARTING", "RUNNING"]  # the claimed one untouched
    reconciler.close()

    # A new agent process adopts the claimed desktop as session 7001's (claim record), starts
    # nothing, and the session's password still works.
    restarted = Reconciler(
        DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir), fake_portal
    )
    summary = restarted.step([session], [])
    assert restarted.wait_idle(60)
    assert summary.adopted == [7001] and summary.starting == [] and summary.claiming == []
    assert fake_portal.states(7001) == ["STARTING", "RUNNING", "RUNNING"]
    assert fake_portal.last(7001)["container_id"] == found["b7-1"].id
    assert login(warm_port, "claimpw1") == "OK"

    # The session ends: the claimed desktop goes with everything it had.
    converge(restarted, [], [])
    assert fake_portal.states(7001)[-1] == "ENDED"
    assert node_containers(docker_client, node_name) == []
    assert not (sessions_dir / "wb7-1").exists()
    assert not (sessions_dir / "claims" / "b7-1.json").exists()


@pytest.mark.docker
def test_failed_warm_start_leaves_nothing_and_is_not_retried_under_its_key(
    docker_runtime, docker_client, tiny_image, node_name, sessions_dir, fake_portal
) -> None:  # type: ignore[no-untyped-def]
    broken = desired_warm("b8-1", image="deskpool/no-such-image:latest")
    reconciler = Reconciler(docker_runtime, fake_portal)

    converge(reconciler, [], [broken], steps=3)

    assert fake_portal.warm_states("b8-1") == ["FAILED"]  # once, not every step
    assert "not present" in fake_portal.warm_reports[0][1]["reason"]
    assert node_containers(docker_client, node_name) == []
    assert not (sessions_dir / "wb8-1").exists()

    # A warm desktop that dies is reported FAILED, removed, and not started again.
    alive = desired_warm("b8-2", image=tiny_image)
    converge(reconciler, [], [alive])
    assert fake_portal.warm_states("b8-2") == ["READY"]
    docker_client.containers.get(warm_container_name(node_name, "b8-2")).kill()
    converge(reconciler, [], [alive], steps=3)
    assert fake_portal.warm_states("b8-2") == ["READY", "FAILED"]
    assert "137" in [r for k, r in fake_portal.warm_reports if k == "b8-2"][-1]["reason"]
    assert node_containers(docker_client, node_name) == []
    assert not (sessions_dir / "wb8-2").exists()


@pytest.mark.docker
def test_claim_of_a_gone_warm_desktop_starts_the_session_afresh(
    docker_runtime, docker_client, tiny_image, node_name, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(7101, image=tiny_image, vnc_password="freshpw1", warm_key="b9-1")

    converge(Reconciler(docker_runtime, fake_portal), [session], [])

    assert fake_portal.states(7101) == ["STARTING", "RUNNING"]
    [container] = node_containers(docker_client, node_name)
    assert container.labels[LABEL_SESSION] == "7101"
    assert login(fake_portal.last(7101)["port"], "freshpw1") == "OK"


def test_simulated_runtime_keeps_and_claims_warm_desktops(
    tmp_path: Path, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    runtime = SimulatedRuntime(node_name="sim", state_file=tmp_path / "s.json", start_delay_s=0)
    reconciler = Reconciler(runtime, fake_portal)
    converge(reconciler, [], [desired_warm("k1"), desired_warm("k2")])
    assert fake_portal.warm_states("k1") == ["READY"] and fake_portal.warm_states("k2") == ["READY"]

    session = make_session(31, warm_key="k1")
    summary = reconciler.step([session], [desired_warm("k2")])
    assert reconciler.wait_idle(10)
    assert summary.claiming == [31]
    assert fake_portal.states(31) == ["STARTING", "RUNNING"]
    assert [w.key for w in runtime.list_warm()] == ["k2"]

    converge(reconciler, [session], [])
    assert runtime.list_warm() == []
    assert [c.session_id for c in runtime.list_managed()] == [31]


def test_warm_desktop_the_portal_refuses_is_stopped(tmp_path: Path, fake_portal) -> None:  # type: ignore[no-untyped-def]
    runtime = SimulatedRuntime(node_name="sim", state_file=tmp_path / "s.json", start_delay_s=0)
    fake_portal.unwanted_warm.add("k9")
    reconciler = Reconciler(runtime, fake_portal)
    converge(reconciler, [], [desired_warm("k9")])
    assert [w.key for w in runtime.list_warm()] == ["k9"]  # the portal's 409 ...
    converge(reconciler, [], [])  # ... and the key's absence from the next list: stopped
    assert runtime.list_warm() == []


@pytest.mark.docker
def test_a_claimed_warm_desktop_gets_the_students_home_volume(
    docker_runtime, docker_client, tiny_image, node_name, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(docker_runtime, fake_portal)
    converge(reconciler, [], [desired_warm("b8-1", image=tiny_image)])
    [container] = node_containers(docker_client, node_name)
    # Before the claim: the image's skeleton home, in a folder of the agent's.
    assert container.exec_run(["test", "-f", "/home/desktop/.bashrc"]).exit_code == 0
    assert docker_client.volumes.list(filters={"label": f"{LABEL_NODE}={node_name}"}) == []

    # A returning student: their home volume already holds their work.
    returning = make_session(7101, image=tiny_image, vnc_password="homepw01", warm_key="b8-1")
    volume = docker_client.volumes.create(
        returning.home_volume, labels={LABEL_MANAGED: "true", LABEL_NODE: node_name}
    )
    saved = Path(volume.attrs["Mountpoint"]) / "thesis.txt"
    saved.write_text("chapter 1\n")
    os.chown(saved, 1000, 1000)
    os.chown(saved.parent, 1000, 1000)
    converge(reconciler, [returning], [])
    assert fake_portal.states(7101) == ["STARTING", "RUNNING"]
    # The running desktop now shows the volume, and what the student saves lands in it.
    assert container.exec_run(["cat", "/home/desktop/thesis.txt"]).output == b"chapter 1\n"
    wrote = container.exec_run(["sh", "-c", "echo notes > /home/desktop/class.txt"])
    assert wrote.exit_code == 0, wrote.output
    assert (saved.parent / "class.txt").read_text() == "notes\n"

    # The session ends: the desktop and its mounts go, the volume keeps the work.
    converge(reconciler, [], [])
    assert node_containers(docker_client, node_name) == []
    home = sessions_dir / "warm-homes" / "b8-1"
    assert not home.exists() and home_mounts.mount_count(home) == 0
    assert (saved.parent / "class.txt").read_text() == "notes\n"
    assert saved.read_text() == "chapter 1\n"


@pytest.mark.docker
def test_a_first_time_students_home_is_seeded_like_a_cold_start(
    docker_runtime, docker_client, tiny_image, node_name, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    reconciler = Reconciler(docker_runtime, fake_portal)
    converge(reconciler, [], [desired_warm("b9-1", image=tiny_image)])
    [container] = node_containers(docker_client, node_name)
    first = make_session(7201, image=tiny_image, vnc_password="newpw001", warm_key="b9-1")
    converge(reconciler, [first], [])
    assert fake_portal.states(7201) == ["STARTING", "RUNNING"]
    volume = docker_client.volumes.get(first.home_volume)  # created at the claim
    folder = Path(volume.attrs["Mountpoint"])
    assert (folder / ".bashrc").is_file()  # the image's skeleton, as Docker seeds a new volume
    assert (folder.stat().st_uid, (folder / ".bashrc").stat().st_uid) == (1000, 1000)
    wrote = container.exec_run(["sh", "-c", "echo hello > /home/desktop/first.txt"])
    assert wrote.exit_code == 0, wrote.output
    assert (folder / "first.txt").read_text() == "hello\n"
    converge(reconciler, [], [])
    assert node_containers(docker_client, node_name) == []
    assert (folder / "first.txt").read_text() == "hello\n"  # kept for the next session


def engine_calls(docker_client, monkeypatch) -> list[str]:  # type: ignore[no-untyped-def]
    """The Docker API calls made from now on, as "METHOD /path" (an exec's id as <exec>)."""
    calls: list[str] = []
    request = docker_client.api.request

    def counted(method: str, url: str, *args: object, **kwargs: object) -> object:
        path = re.sub(r"^.*?/v[0-9.]+/", "/", url).split("?")[0]
        calls.append(f"{method} {re.sub(r'^/exec/[0-9a-f]+/', '/exec/<exec>/', path)}")
        return request(method, url, *args, **kwargs)

    monkeypatch.setattr(docker_client.api, "request", counted)
    return calls


def assert_warm_desktop_gone(docker_client, node_name: str, sessions_dir: Path, key: str) -> None:  # type: ignore[no-untyped-def]
    assert node_containers(docker_client, node_name) == []
    home = sessions_dir / "warm-homes" / key
    assert not home.exists() and home_mounts.mount_count(home) == 0
    assert not (sessions_dir / f"w{key}").exists()
    assert not (sessions_dir / "claims" / f"{key}.json").exists()


@pytest.mark.docker
@pytest.mark.parametrize("installation", ["", "aaaa11112222"])
def test_a_claim_makes_three_engine_calls_and_proves_the_new_password(
    docker_client, tiny_image, node_name, sessions_dir, monkeypatch, make_session, installation
) -> None:  # type: ignore[no-untyped-def]
    """A class start claims dozens at once: what one claim asks the engine is counted, so a
    second look-up (a list, a reload) cannot come back unnoticed."""
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, installation=installation
    )
    warm = runtime.start_warm(desired_warm("c1-1", image=tiny_image))
    first = make_session(7301, image=tiny_image, vnc_password="countpw1", warm_key="c1-1")

    calls = engine_calls(docker_client, monkeypatch)
    claimed = runtime.claim("c1-1", first)

    name = warm_container_name(node_name, "c1-1", installation)
    assert calls == [
        f"GET /containers/{name}/json",  # the warm container: labels, state, ports, limits
        f"GET /volumes/{first.home_volume}",  # a first-time student's home: not there ...
        "POST /volumes/create",  # ... made, seeded with the skeleton kept from the start
    ]  # deskpool-claim: asked for through the password folder's pipes, not docker exec
    assert (claimed.session_id, claimed.container_id) == (7301, warm.container_id)
    assert claimed.running and claimed.port == warm.port
    assert login(warm.port, "countpw1") == "OK"
    volume = docker_client.volumes.get(first.home_volume)
    assert (Path(volume.attrs["Mountpoint"]) / ".bashrc").is_file()  # seeded all the same
    runtime.stop(7301)
    assert node_containers(docker_client, node_name) == []
    remove_networks(docker_client, node_name, installation)


@pytest.mark.docker
def test_a_warm_desktop_without_the_claim_pipes_is_claimed_with_docker_exec(
    docker_runtime, docker_client, tiny_image, node_name, sessions_dir, monkeypatch, make_session
) -> None:  # type: ignore[no-untyped-def]
    """One started by an agent from before the pipes (its password folder holds none): the
    claim runs deskpool-claim with docker exec, and the new password opens the desktop."""
    warm = docker_runtime.start_warm(desired_warm("c1-2", image=tiny_image))
    for pipe in ("claim", "claimed"):
        (sessions_dir / "wc1-2" / pipe).unlink()
    session = make_session(7302, image=tiny_image, vnc_password="execpw01", warm_key="c1-2")

    calls = engine_calls(docker_client, monkeypatch)
    docker_runtime.claim("c1-2", session)

    assert f"POST /containers/{warm.container_id}/exec" in calls, calls
    assert calls[-2:] == ["POST /exec/<exec>/start", "GET /exec/<exec>/json"], calls
    assert login(warm.port, "execpw01") == "OK"
    docker_runtime.stop(7302)
    assert node_containers(docker_client, node_name) == []


@pytest.mark.docker
def test_claim_of_a_removed_warm_container_fails_and_leaves_nothing(
    docker_runtime, docker_client, tiny_image, node_name, sessions_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    docker_runtime.start_warm(desired_warm("c2-1", image=tiny_image))
    docker_client.containers.get(warm_container_name(node_name, "c2-1")).remove(force=True)
    session = make_session(7401, image=tiny_image, vnc_password="gonepw01", warm_key="c2-1")

    with pytest.raises(StartFailed, match="warm desktop c2-1 is gone"):
        docker_runtime.claim("c2-1", session)

    assert_warm_desktop_gone(docker_client, node_name, sessions_dir, "c2-1")
    assert docker_client.volumes.list(filters={"label": f"{LABEL_NODE}={node_name}"}) == []
    assert docker_runtime.list_managed() == [] and docker_runtime.list_warm() == []


@pytest.mark.docker
def test_claim_fails_when_the_new_password_does_not_open_the_desktop(
    docker_runtime, docker_client, tiny_image, node_name, sessions_dir, monkeypatch, make_session
) -> None:  # type: ignore[no-untyped-def]
    """deskpool-claim's exit status is not the only proof: the claim logs in with the new
    password, so a desktop still on its warm password is never reported RUNNING."""
    warm = docker_runtime.start_warm(desired_warm("c3-1", image=tiny_image))
    warm_password = (sessions_dir / "wc3-1" / "passwd").read_text().strip()
    assert login(warm.port, warm_password) == "OK"  # a working desktop, on its own password
    # Says it applied the claim, and applied nothing.
    monkeypatch.setattr(claim_pipes, "ask", lambda directory, language: 0)
    session = make_session(7501, image=tiny_image, vnc_password="unusedpw", warm_key="c3-1")

    started = time.monotonic()
    with pytest.raises(StartFailed, match="refused the session's secret"):
        docker_runtime.claim("c3-1", session)

    assert time.monotonic() - started < 10  # a refusal is final: no wait for the timeout
    assert_warm_desktop_gone(docker_client, node_name, sessions_dir, "c3-1")
    # The student's home volume stays, as after any failed claim: the cold start that
    # follows (the reconcile's fallback) mounts it.
    docker_client.volumes.get(session.home_volume)
