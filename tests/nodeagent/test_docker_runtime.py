"""DockerRuntime against the real engine and the tiny desktop image."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.protocol import (
    DESKTOP_HOME,
    DESKTOP_PASSWORD_MOUNT,
    LABEL_COURSE,
    LABEL_MANAGED,
    LABEL_NODE,
    LABEL_PLACEMENT,
    LABEL_SESSION,
    LABEL_USER,
)
from nodeagent.runtime import StartFailed, container_name, node_name_part
from nodeagent.runtime.docker_runtime import DockerRuntime

pytestmark = pytest.mark.docker


@pytest.fixture
def runtime(docker_client, node_name: str, sessions_dir: Path) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=30
    )


def test_started_desktop_is_locked_down_and_labelled(
    runtime, docker_client, tiny_image, node_name, sessions_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(4101, image=tiny_image, vnc_password="pw123456", placement="77")

    started = runtime.start(session)

    assert started.running and started.port is not None and started.host == "127.0.0.1"
    attrs = docker_client.containers.get(container_name(node_name, 4101)).attrs
    assert attrs["Id"] == started.container_id
    # A container also carries its image's labels (build.sh's deskpool.source): set aside.
    image_labels = docker_client.images.get(tiny_image).labels or {}
    own = {k: v for k, v in attrs["Config"]["Labels"].items() if image_labels.get(k) != v}
    assert own == {
        LABEL_MANAGED: "true", LABEL_SESSION: "4101", LABEL_USER: "alice",
        LABEL_NODE: node_name, LABEL_COURSE: "cs101", LABEL_PLACEMENT: "77",
    }  # fmt: skip
    host = attrs["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert attrs["Config"]["User"] == "1000:1000"
    assert host["NanoCpus"] == 500_000_000
    assert host["Memory"] == 256 * 1024 * 1024
    assert host["PidsLimit"] == 256
    assert host["ShmSize"] == 64 * 1024 * 1024
    assert host["PortBindings"]["6080/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": ""}]
    bound = attrs["NetworkSettings"]["Ports"]["6080/tcp"]
    assert {b["HostIp"] for b in bound} == {"127.0.0.1"}
    # The password is a read-only file mount, never in the environment.
    assert not any("pw123456" in item for item in attrs["Config"]["Env"])
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts[DESKTOP_PASSWORD_MOUNT]["RW"] is False
    assert mounts[DESKTOP_HOME]["Name"] == session.home_volume
    password_file = Path(mounts[DESKTOP_PASSWORD_MOUNT]["Source"]) / "passwd"
    assert password_file.read_text() == "pw123456\n"
    assert password_file.parent.parent.stat().st_mode & 0o777 == 0o700
    # No NVIDIA runtime on this engine: the container must not see any GPU.
    assert "NVIDIA_VISIBLE_DEVICES=void" in attrs["Config"]["Env"]
    assert [c.session_id for c in runtime.list_managed()] == [4101]


def test_stop_removes_container_and_password_but_keeps_home(
    runtime, docker_client, tiny_image, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(4102, image=tiny_image)
    started = runtime.start(session)
    mounts = docker_client.containers.get(started.container_id).attrs["Mounts"]
    [password_dir] = [
        Path(m["Source"]) for m in mounts if m["Destination"] == DESKTOP_PASSWORD_MOUNT
    ]
    assert (password_dir / "passwd").exists()

    runtime.stop(4102)

    assert runtime.list_managed() == []
    assert not password_dir.exists()
    assert docker_client.volumes.get(session.home_volume).name == session.home_volume
    runtime.stop(4102)  # stopping twice is harmless


def test_missing_image_fails_cleanly(
    runtime, docker_client, node_name, sessions_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(4103, image="deskpool/does-not-exist:latest")

    with pytest.raises(StartFailed, match="not present"):
        runtime.start(session)

    assert (
        docker_client.containers.list(all=True, filters={"name": container_name(node_name, 4103)})
        == []
    )
    assert not (sessions_dir / "s4103").exists()


def test_desktop_that_exits_at_once_is_removed_with_its_new_volume(
    runtime, docker_client, tiny_image, node_name, sessions_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    # The image exits with status 78 when the password file is empty.
    session = make_session(4104, image=tiny_image, vnc_password="")

    with pytest.raises(StartFailed, match="78"):
        runtime.start(session)

    assert (
        docker_client.containers.list(all=True, filters={"name": container_name(node_name, 4104)})
        == []
    )
    assert not (sessions_dir / "s4104").exists()
    assert docker_client.volumes.list(filters={"name": session.home_volume}) == []


def test_failed_start_keeps_a_home_volume_that_existed_before(
    runtime, docker_client, tiny_image, node_name, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(4105, image=tiny_image, vnc_password="")
    docker_client.volumes.create(
        name=session.home_volume, labels={LABEL_MANAGED: "true", LABEL_NODE: node_name}
    )

    with pytest.raises(StartFailed):
        runtime.start(session)

    assert docker_client.volumes.get(session.home_volume).name == session.home_volume


def test_home_volume_survives_into_the_next_session(
    runtime, docker_client, tiny_image, make_session
) -> None:  # type: ignore[no-untyped-def]
    first = make_session(4106, image=tiny_image)
    started = runtime.start(first)
    container = docker_client.containers.get(started.container_id)
    assert container.exec_run(["sh", "-c", f"echo kept > {DESKTOP_HOME}/note"]).exit_code == 0
    runtime.stop(4106)

    second = runtime.start(make_session(4107, image=tiny_image, home_volume=first.home_volume))

    result = docker_client.containers.get(second.container_id).exec_run(
        ["cat", f"{DESKTOP_HOME}/note"]
    )
    assert result.output.decode().strip() == "kept"


def test_containers_of_other_nodes_are_not_listed(
    docker_client, tiny_image, node_name, sessions_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    mine = DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir)
    other = DockerRuntime(docker_client, node_name=f"{node_name}-b", sessions_dir=sessions_dir)
    try:
        other.start(make_session(4108, image=tiny_image))
        assert mine.list_managed() == []
        assert [c.session_id for c in other.list_managed()] == [4108]
    finally:
        other.stop(4108)
        for volume in docker_client.volumes.list(filters={"label": f"{LABEL_NODE}={node_name}-b"}):
            volume.remove(force=True)


def test_container_names_carry_a_docker_safe_node_name() -> None:
    assert container_name("gpu-a01", 7) == "deskpool-gpu-a01-s7"
    # Cleaned-up names get a hash, so names that clean up alike stay apart.
    odd = {name: node_name_part(name) for name in ("GPU A", "gpu_a", "gpu-a", "gpu a/1", "ä")}
    assert len(set(odd.values())) == len(odd)
    for part in odd.values():
        assert part[0].isalnum() and set(part) <= set("abcdefghijklmnopqrstuvwxyz0123456789_.-")
    assert len(node_name_part("n" * 300)) <= 47


def test_two_nodes_on_one_engine_run_the_same_session_id_side_by_side(
    docker_client, tiny_image, node_name, sessions_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    # The demo runs five agents on one engine; session ids of two portals (or a stale one)
    # may meet there. Each node names, lists and stops only its own container.
    other_name = f"{node_name}-b"
    mine = DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir / "a")
    other = DockerRuntime(docker_client, node_name=other_name, sessions_dir=sessions_dir / "b")
    try:
        a = mine.start(make_session(4109, image=tiny_image))
        b = other.start(make_session(4109, image=tiny_image))

        assert a.container_id != b.container_id and a.port != b.port
        assert docker_client.containers.get(container_name(node_name, 4109)).id == a.container_id
        assert docker_client.containers.get(container_name(other_name, 4109)).id == b.container_id
        mine.stop(4109)
        assert mine.list_managed() == []
        assert [c.container_id for c in other.list_managed()] == [b.container_id]
        assert docker_client.containers.get(b.container_id).status == "running"
    finally:
        other.stop(4109)
        for volume in docker_client.volumes.list(filters={"label": f"{LABEL_NODE}={other_name}"}):
            volume.remove(force=True)


def test_stop_finds_a_container_by_label_whatever_its_name(
    runtime, docker_client, tiny_image, node_name, make_session
) -> None:  # type: ignore[no-untyped-def]
    # E.g. one an older agent named deskpool-s<id>: adopted by label, so stopped by label.
    container = docker_client.containers.create(
        tiny_image,
        entrypoint=["sleep", "300"],
        labels={LABEL_MANAGED: "true", LABEL_NODE: node_name, LABEL_SESSION: "4110"},
    )
    container.start()
    assert [c.session_id for c in runtime.list_managed()] == [4110]

    runtime.stop(4110)

    assert runtime.list_managed() == []
