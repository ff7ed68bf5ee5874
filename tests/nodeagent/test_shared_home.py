"""Homes on several nodes: ``DESKPOOL_HOME_ROOT`` (issue 13, docs/deploy.md).

With a home root every node mounts (NFS), a session's home volume is a bind of
``<root>/<home_volume>``, so a desktop started for the same session on another node (after
a requeue) finds the same files. The Docker tests run two runtimes standing for two nodes
against the one engine of this machine; on real nodes each has its own engine, and its own
volume object for the same folder. Here both "nodes" share one engine, which has one
volume of a name: the test removes node A's volume object before node B starts the
desktop, as if node B's engine had never seen it (removing a bind volume leaves the
folder's files, which the test also checks).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker.errors import NotFound

import nodeagent
from nodeagent.__main__ import main
from nodeagent.agent import Agent
from nodeagent.config import AgentConfig, ConfigError, parse_home_root
from nodeagent.portal_client import PortalClient
from nodeagent.probe.simulated import SimulatedProbe, load_fleet
from nodeagent.protocol import DESKTOP_HOME, LABEL_MANAGED, LABEL_NODE
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import StartFailed
from nodeagent.runtime.docker_desktops import DesktopContainers
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.runtime.simulated_runtime import SimulatedRuntime
from tests.nodeagent.conftest import desired_warm, remove_node_objects
from tests.nodeagent.test_warm import converge, node_containers

DEMO_FLEET = Path(nodeagent.__file__).parent / "fleets" / "demo.yaml"


@pytest.fixture
def home_root(tmp_path: Path) -> Path:
    root = tmp_path / "nfs-homes"
    root.mkdir()
    return root


@pytest.fixture
def node_b(docker_client, node_name: str) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A second node's name; its containers and volumes are removed afterwards."""
    name = f"{node_name}-b"
    yield name
    remove_node_objects(docker_client, name)


def runtime_for(client, node: str, sessions_dir: Path, home_root: Path | None) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        client,
        node_name=node,
        sessions_dir=sessions_dir / node,
        ready_timeout_s=30,
        home_root=home_root,
    )


@pytest.mark.docker
def test_a_session_started_on_another_node_keeps_its_home(
    docker_client, tiny_image, node_name, node_b, sessions_dir, home_root, make_session
) -> None:  # type: ignore[no-untyped-def]
    node_a = runtime_for(docker_client, node_name, sessions_dir, home_root)
    session = make_session(9301, image=tiny_image)
    folder = home_root / session.home_volume

    first = node_a.start(session)

    # The volume is a bind of the folder under the root, which the desktop user owns.
    volume = docker_client.volumes.get(session.home_volume)
    assert volume.attrs["Driver"] == "local"
    assert volume.attrs["Options"] == {"type": "none", "o": "bind", "device": str(folder)}
    assert folder.is_dir()
    assert (folder.stat().st_uid, folder.stat().st_gid) == (1000, 1000)
    container = docker_client.containers.get(first.container_id)
    mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
    assert mounts[DESKTOP_HOME]["Name"] == session.home_volume
    wrote = container.exec_run(["sh", "-c", f"echo chapter 2 > {DESKTOP_HOME}/thesis.txt"])
    assert wrote.exit_code == 0, wrote.output
    assert (folder / "thesis.txt").read_text() == "chapter 2\n"

    # Node A's desktop goes (the session is requeued); node B's engine has no such volume.
    node_a.stop(9301)
    volume.remove()
    with pytest.raises(NotFound):
        docker_client.volumes.get(session.home_volume)
    assert (folder / "thesis.txt").read_text() == "chapter 2\n"

    node_b_runtime = runtime_for(docker_client, node_b, sessions_dir, home_root)
    second = node_b_runtime.start(session)

    assert second.container_id != first.container_id
    again = docker_client.containers.get(second.container_id)
    assert again.labels[LABEL_NODE] == node_b
    read = again.exec_run(["cat", f"{DESKTOP_HOME}/thesis.txt"])
    assert (read.exit_code, read.output) == (0, b"chapter 2\n")
    node_b_runtime.stop(9301)


@pytest.mark.docker
def test_the_home_folder_is_made_once_for_the_desktop_user(
    docker_client, node_name, sessions_dir, home_root, make_session
) -> None:  # type: ignore[no-untyped-def]
    desktops = DesktopContainers(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, home_root=home_root
    )
    session = make_session(9305)
    folder = home_root / session.home_volume

    assert desktops.ensure_home_volume(session) is True
    stat = folder.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o777) == (1000, 1000, 0o700)
    volume = docker_client.volumes.get(session.home_volume)
    assert desktops.home_dir(volume) == folder  # where a warm claim mounts it from
    assert desktops.ensure_home_volume(session) is False
    with pytest.raises(StartFailed, match="folder name"):
        desktops.ensure_home_volume(make_session(9306, home_volume=".."))


@pytest.mark.docker
def test_a_failed_start_removes_its_new_volume_but_not_the_files(
    docker_client, tiny_image, node_name, sessions_dir, home_root, make_session
) -> None:  # type: ignore[no-untyped-def]
    runtime = runtime_for(docker_client, node_name, sessions_dir, home_root)
    # The tiny image exits at once with an empty password.
    session = make_session(9302, image=tiny_image, vnc_password="")
    folder = home_root / session.home_volume
    folder.mkdir(mode=0o700)
    os.chown(folder, 1000, 1000)
    (folder / "kept.txt").write_text("mine\n")

    with pytest.raises(StartFailed, match="78"):
        runtime.start(session)

    with pytest.raises(NotFound):
        docker_client.volumes.get(session.home_volume)
    assert (folder / "kept.txt").read_text() == "mine\n"


@pytest.mark.docker
def test_a_volume_made_before_the_root_was_set_is_used_as_it_is(
    docker_client, tiny_image, node_name, sessions_dir, home_root, make_session, caplog
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(9303, image=tiny_image)
    docker_client.volumes.create(
        session.home_volume, labels={LABEL_MANAGED: "true", LABEL_NODE: node_name}
    )
    runtime = runtime_for(docker_client, node_name, sessions_dir, home_root)

    with caplog.at_level(logging.WARNING, logger="nodeagent"):
        runtime.start(session)
        runtime.stop(9303)
        started = runtime.start(session)

    volume = docker_client.volumes.get(session.home_volume)
    assert not volume.attrs.get("Options")  # still the plain volume
    mounts = docker_client.containers.get(started.container_id).attrs["Mounts"]
    assert {m["Destination"]: m["Name"] for m in mounts if m.get("Name")} == {
        DESKTOP_HOME: session.home_volume
    }
    assert not (home_root / session.home_volume).exists()
    warnings = [r for r in caplog.records if "DESKPOOL_HOME_ROOT" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert session.home_volume in warnings[0].getMessage()


@pytest.mark.docker
def test_without_a_root_the_home_is_a_plain_named_volume(
    docker_client, tiny_image, node_name, sessions_dir, home_root, make_session
) -> None:  # type: ignore[no-untyped-def]
    runtime = runtime_for(docker_client, node_name, sessions_dir, None)
    session = make_session(9304, image=tiny_image)

    runtime.start(session)

    volume = docker_client.volumes.get(session.home_volume)
    assert volume.attrs["Driver"] == "local"
    assert not volume.attrs.get("Options")
    assert list(home_root.iterdir()) == []
    runtime.stop(9304)


# -- configuration and registration (no engine needed) ---------------------------------------


def test_the_home_root_must_be_an_existing_absolute_folder(tmp_path: Path) -> None:
    assert AgentConfig.from_env({}).home_root is None
    assert AgentConfig.from_env({"DESKPOOL_HOME_ROOT": str(tmp_path)}).home_root == tmp_path
    with pytest.raises(ConfigError, match="absolute"):
        parse_home_root("homes/nfs")
    with pytest.raises(ConfigError, match="not an existing directory"):
        parse_home_root(str(tmp_path / "not-mounted"))
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ConfigError, match="not an existing directory"):
        AgentConfig.from_env({"DESKPOOL_HOME_ROOT": str(a_file)})


def test_the_agent_refuses_to_start_with_a_bad_home_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DESKPOOL_HOME_ROOT", str(tmp_path / "missing"))

    assert main(["--runtime", "simulated", "--once"]) == 2

    err = capsys.readouterr().err
    assert "DESKPOOL_HOME_ROOT" in err and "not an existing directory" in err


@pytest.mark.parametrize("shared", [True, False])
def test_the_registration_says_whether_homes_are_shared(tmp_path: Path, shared: bool) -> None:
    config = AgentConfig(
        node_name="gpu-a01",
        state_dir=tmp_path,
        fleet_file=DEMO_FLEET,
        runtime="simulated",
        home_root=tmp_path if shared else None,
    )
    probe = SimulatedProbe(load_fleet(DEMO_FLEET).node("gpu-a01"), seed=1)
    runtime = SimulatedRuntime(node_name="gpu-a01", start_delay_s=0.0)
    agent = Agent(config, client=PortalClient("http://unused"), probe=probe, runtime=runtime)

    assert agent.registration(None).home_root_shared is shared


@pytest.mark.docker
def test_a_claimed_warm_desktop_mounts_the_shared_home_folder(
    docker_client, tiny_image, node_name, sessions_dir, home_root, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    """A bind volume's Mountpoint is empty until a container uses it: the claim mounts the
    folder under the root itself."""
    runtime = runtime_for(docker_client, node_name, sessions_dir, home_root)
    reconciler = Reconciler(runtime, fake_portal)
    converge(reconciler, [], [desired_warm("h13-1", image=tiny_image)])
    session = make_session(9307, image=tiny_image, vnc_password="homepw01", warm_key="h13-1")
    folder = home_root / session.home_volume
    folder.mkdir(mode=0o700)
    (folder / "thesis.txt").write_text("chapter 3\n")
    for path in (folder, folder / "thesis.txt"):
        os.chown(path, 1000, 1000)

    converge(reconciler, [session], [])

    assert fake_portal.states(9307) == ["STARTING", "RUNNING"]
    [container] = node_containers(docker_client, node_name)
    assert container.exec_run(["cat", f"{DESKTOP_HOME}/thesis.txt"]).output == b"chapter 3\n"
    wrote = container.exec_run(["sh", "-c", f"echo notes > {DESKTOP_HOME}/class.txt"])
    assert wrote.exit_code == 0, wrote.output
    assert (folder / "class.txt").read_text() == "notes\n"
    # A home made on another node is not seeded again with the image's skeleton.
    assert not (folder / ".bashrc").exists()
    converge(reconciler, [], [])
    assert node_containers(docker_client, node_name) == []
    assert (folder / "class.txt").read_text() == "notes\n"
