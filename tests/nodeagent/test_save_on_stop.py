"""Save before stop: the desktop's save hooks run when the agent stops a desktop.

docs/lifecycle.md, Suspend: "the container stops ...; the home is kept, and the work is saved
where the desktop allows". The agent stops a desktop dropped from the desired state with
SIGTERM and its stop grace (DESKPOOL_AGENT_STOP_GRACE_S) before SIGKILL; the image's
deskpool-save (nodeagent/images/files/deskpool-save) then runs the image's and the user's
save hooks, logs the XFCE session out and ends the programs. Real engine, real XFCE desktop
image, a real home volume, the agent's own reconcile step with an in-process portal.
"""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import pytest
from docker.errors import NotFound

from nodeagent.config import AgentConfig, ConfigError
from nodeagent.protocol import DESKTOP_HOME, LABEL_MANAGED, LABEL_NODE, LABEL_SESSION
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import container_name
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.conftest import wait_for_image

DESKTOP_IMAGE = "deskpool/desktop:latest"
HOOKS = f"{DESKTOP_HOME}/.config/deskpool/save.d"

# A user's hook: proves it ran as the desktop user, with the display still up, and what
# limit it was told.
NOTE_HOOK = """#!/bin/sh
{
    echo "uid $(id -u)"
    [ -S /tmp/.X11-unix/X1 ] && echo "display up"
    echo "limit $DESKPOOL_SAVE_TIMEOUT_S"
} > "$HOME/saved-by-hook"
"""
# A program of the user's that saves on SIGTERM (step 3 of deskpool-save).
SAVES_ON_SIGTERM = (
    "trap 'echo saved > $HOME/saved-on-sigterm; exit 0' TERM; while :; do sleep 0.2; done"
)
# A hook that hangs and even ignores the SIGTERM that cuts it off: SIGKILL ends it.
HANGING_HOOK = """#!/bin/sh
trap 'echo "SIGTERM" >> "$HOME/hang.log"' TERM
echo "started, limit $DESKPOOL_SAVE_TIMEOUT_S" >> "$HOME/hang.log"
while :; do sleep 0.1; done
echo "finished" >> "$HOME/hang.log"
"""
AFTER_HOOK = """#!/bin/sh
echo "ran" > "$HOME/after-the-hang"
"""

pytestmark = [pytest.mark.docker, pytest.mark.lifecycle]


@pytest.fixture(scope="session")
def desktop_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    """The XFCE desktop image (waits for a build in progress, then skips); one built before
    save-on-stop fails the test: it would stop without running any hook."""
    image = docker_client.images.get(wait_for_image(docker_client, DESKTOP_IMAGE, "desktop"))
    entrypoint = image.attrs["Config"]["Entrypoint"] or []
    if "-g" in entrypoint:
        pytest.fail(f"{DESKTOP_IMAGE} predates save-on-stop: run nodeagent/images/build.sh all")
    return DESKTOP_IMAGE


def runtime(docker_client, node_name: str, sessions_dir: Path, grace_s: float) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir,
        ready_timeout_s=60,
        stop_grace_s=grace_s,
    )


def converge(reconciler: Reconciler, desired: list) -> float:  # type: ignore[type-arg]
    """One reconcile step and its actions; how long they took."""
    started = time.monotonic()
    reconciler.step(desired)
    assert reconciler.wait_idle(120), "reconcile actions did not finish"
    return time.monotonic() - started


def desktop_session(make_session, session_id: int, image: str):  # type: ignore[no-untyped-def]
    # XFCE needs more than the tiny image's 256 MB.
    return make_session(session_id, image=image, memory_mb=1024, cpus=1.0, pids_limit=512)


def run_in(container, script: str, *, detach: bool = False) -> None:  # type: ignore[no-untyped-def]
    """Run a shell script in the desktop as its user (uid 1000, the container's user)."""
    result = container.exec_run(["sh", "-c", script], detach=detach)
    if not detach:
        assert result.exit_code == 0, result.output


def add_hook(container, name: str, text: str) -> None:  # type: ignore[no-untyped-def]
    run_in(
        container,
        f"mkdir -p {HOOKS} && cat > {HOOKS}/{name} <<'EOF'\n{text}EOF\nchmod +x {HOOKS}/{name}",
    )


def home_files(docker_client, image: str, volume: str, *names: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """What these files of a home volume hold ("" when missing), read through a container of
    the same image that is created with the volume and never started."""
    reader = docker_client.containers.create(
        image, volumes={volume: {"bind": DESKTOP_HOME, "mode": "ro"}}, network_disabled=True
    )
    found = {}
    try:
        for name in names:
            try:
                stream, _ = reader.get_archive(f"{DESKTOP_HOME}/{name}")
            except NotFound:
                found[name] = ""
                continue
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.extractfile(tar.getmembers()[0])
                assert member is not None, name
                found[name] = member.read().decode().strip()
    finally:
        reader.remove(force=True)
    return found


def session_containers(docker_client, node_name: str, session_id: int) -> list:  # type: ignore[no-untyped-def,type-arg]
    labels = [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={node_name}", f"{LABEL_SESSION}={session_id}"]
    return docker_client.containers.list(all=True, filters={"label": labels})


def test_stopping_a_desktop_runs_the_save_hooks_into_the_kept_home(
    docker_client, desktop_image, node_name, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    grace_s = 20
    session = desktop_session(make_session, 6101, desktop_image)
    reconciler = Reconciler(runtime(docker_client, node_name, sessions_dir, grace_s), fake_portal)
    converge(reconciler, [session])
    assert fake_portal.states(6101) == ["STARTING", "RUNNING"]
    container = docker_client.containers.get(container_name(node_name, 6101))
    assert f"DESKPOOL_STOP_GRACE_S={grace_s}" in container.attrs["Config"]["Env"]
    add_hook(container, "10-note", NOTE_HOOK)
    run_in(container, SAVES_ON_SIGTERM, detach=True)
    time.sleep(0.5)  # the detached program sets its trap

    # The session leaves the desired state (suspended, ended): the agent's stop path.
    took = converge(reconciler, [])

    assert fake_portal.states(6101)[-1] == "ENDED"
    assert took < grace_s, f"the stop took {took:.1f} s, the whole grace: nothing saved in time"
    assert session_containers(docker_client, node_name, 6101) == []  # no leak
    files = home_files(
        docker_client,
        desktop_image,
        session.home_volume,
        "saved-by-hook",
        "saved-on-sigterm",
        ".deskpool/stopped-at",
    )
    note = files["saved-by-hook"].splitlines()
    assert note[:2] == ["uid 1000", "display up"], files
    # Told its limit: the hook timeout (5 s), as the grace leaves time for it.
    assert note[2] == "limit 5.000", files
    assert files["saved-on-sigterm"] == "saved", files
    # The image's own hook: when the desktop last stopped the orderly way, and which session.
    stopped_at, which = (files[".deskpool/stopped-at"].splitlines() + ["", ""])[:2]
    assert time.strptime(stopped_at, "%Y-%m-%dT%H:%M:%SZ"), files
    assert which == "session 6101", files
    reconciler.close()


def test_a_hanging_hook_is_cut_off_and_the_stop_ends_within_the_grace(
    docker_client, desktop_image, node_name, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    grace_s = 20
    session = desktop_session(make_session, 6102, desktop_image)
    reconciler = Reconciler(runtime(docker_client, node_name, sessions_dir, grace_s), fake_portal)
    converge(reconciler, [session])
    container = docker_client.containers.get(container_name(node_name, 6102))
    add_hook(container, "10-hang", HANGING_HOOK)
    add_hook(container, "20-after", AFTER_HOOK)

    took = converge(reconciler, [])

    assert fake_portal.states(6102)[-1] == "ENDED"
    assert session_containers(docker_client, node_name, 6102) == []
    files = home_files(
        docker_client, desktop_image, session.home_volume, "hang.log", "after-the-hang"
    )
    # Cut off at its 5 s: SIGTERM (which it ignored), then SIGKILL; it never finished.
    assert files["hang.log"].splitlines() == ["started, limit 5.000", "SIGTERM"], files
    # The next hook still ran, and the whole stop ended well within the grace.
    assert files["after-the-hang"] == "ran", files
    assert 5 <= took < grace_s - 5, f"the stop took {took:.1f} s"
    reconciler.close()


def test_a_desktop_that_died_is_removed_without_a_grace(
    docker_client, desktop_image, node_name, sessions_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = desktop_session(make_session, 6103, desktop_image)
    reconciler = Reconciler(runtime(docker_client, node_name, sessions_dir, 20), fake_portal)
    converge(reconciler, [session])
    container = docker_client.containers.get(container_name(node_name, 6103))
    add_hook(container, "10-note", NOTE_HOOK)
    container.kill()  # as the OOM killer or a crash would: no SIGTERM, nothing saved

    converge(reconciler, [session])  # LOST; the dead container goes, the home stays

    assert fake_portal.states(6103)[-1] == "LOST"
    assert session_containers(docker_client, node_name, 6103) == []
    files = home_files(docker_client, desktop_image, session.home_volume, "saved-by-hook")
    assert files == {"saved-by-hook": ""}
    reconciler.close()


def test_the_stop_grace_is_read_and_checked() -> None:
    assert AgentConfig().stop_grace_s == 20.0
    assert AgentConfig.from_env({"DESKPOOL_AGENT_STOP_GRACE_S": "45"}).stop_grace_s == 45.0
    for bad in ("0", "-3", "soon", "nan", "301", "inf"):
        with pytest.raises(ConfigError, match="DESKPOOL_AGENT_STOP_GRACE_S"):
            AgentConfig.from_env({"DESKPOOL_AGENT_STOP_GRACE_S": bad})
