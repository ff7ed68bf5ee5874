"""Desktops that run out of memory, for real: the kernel's OOM killer inside the container's
memory cgroup, Docker's ``State.OOMKilled``, and what the agent tells the portal."""

from __future__ import annotations

import pytest

from nodeagent.failures import OUT_OF_MEMORY
from nodeagent.outbox import report, warm_report
from nodeagent.protocol import LABEL_MANAGED, LABEL_NODE, REASON_MAX_CHARS
from nodeagent.readiness import DesktopNotReady
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import ManagedContainer, StartFailed
from nodeagent.runtime.docker_runtime import DockerRuntime

from .test_reconcile import converge

# The desktop's main process is tini's child (tini is PID 1): deskpool-start. Raising its
# oom_score_adj (allowed to the owner, uid 1000, without any capability) makes it the OOM
# killer's choice over the hog; tini then exits with its status, 137.
TARGET_MAIN_PROCESS = (
    'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = deskpool-start ] && '
    "echo 1000 > $p/oom_score_adj && echo ${p#/proc/}; done"
)
# Reads a newline-free endless stream into one line: grows until the cgroup limit.
MEMORY_HOG = ["tail", "/dev/zero"]


@pytest.fixture
def docker_runtime(docker_client, node_name, sessions_dir) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=30
    )


def _container(docker_client, container_id: str):  # type: ignore[no-untyped-def]
    container = docker_client.containers.get(container_id)
    container.reload()
    return container


@pytest.mark.docker
def test_desktop_killed_by_the_oom_killer_is_reported_lost_with_an_oom_reason(
    docker_runtime, docker_client, tiny_image, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(6001, image=tiny_image, memory_mb=256, placement="1")
    reconciler = Reconciler(docker_runtime, fake_portal)
    converge(reconciler, [session])
    assert fake_portal.states(6001) == ["STARTING", "RUNNING"]
    container = _container(docker_client, fake_portal.last(6001)["container_id"])

    target = container.exec_run(["sh", "-c", TARGET_MAIN_PROCESS])
    assert target.exit_code == 0 and target.output.strip(), target.output
    container.exec_run(MEMORY_HOG)  # SIGKILLed with the container's other processes
    container.wait(timeout=30)  # the engine notes the exit a moment after the exec returns

    state = _container(docker_client, container.id).attrs["State"]
    assert (state["Status"], state["OOMKilled"], state["ExitCode"]) == ("exited", True, 137)

    converge(reconciler, [session], steps=2)

    assert fake_portal.states(6001) == ["STARTING", "RUNNING", "LOST"]
    lost = fake_portal.last(6001)
    assert "out of memory" in lost["reason"] and "OOM" in lost["reason"], lost
    assert "memory limit 256 MB" in lost["reason"]
    assert lost["placement"] == "1"
    assert docker_runtime.list_managed() == []  # dead container removed, home volume kept
    assert docker_client.volumes.get(session.home_volume)


@pytest.mark.docker
def test_desktop_with_too_little_memory_fails_to_start_with_an_oom_reason(
    docker_client, node_name, sessions_dir, tiny_image, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    # 32 MB is less than the tiny desktop needs (websockify alone ~23 MB). Measured on kernel
    # 6.18, cgroup v1, no swap: the kernel does not OOM-kill anything as it starts; it keeps
    # reclaiming the programs' file pages (memory.failcnt +300,000/s, oom_kill 0), the desktop
    # hangs at its limit without answering, and only after 10-40 s does the OOM killer end
    # websockify (then exit 137, OOMKilled). Either way the person must read that it was
    # memory: a desktop that stopped answering at its limit, or one the OOM killer ended.
    session = make_session(6002, image=tiny_image, memory_mb=32)
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=10
    )

    converge(Reconciler(runtime, fake_portal), [session], steps=2)

    assert fake_portal.states(6002) == ["STARTING", "FAILED"]
    failed = fake_portal.last(6002)
    assert "out of memory" in failed["reason"] and "memory limit 32 MB" in failed["reason"]
    assert failed["failure"] == OUT_OF_MEMORY, failed
    assert len(failed["reason"]) <= REASON_MAX_CHARS  # with the log tail it would be longer
    assert runtime.list_managed() == []


def _never_answers(host: str, port: int, timeout_s: float, **_: object) -> None:
    raise DesktopNotReady(f"no VNC handshake on {host}:{port} within {timeout_s:.0f} s")


@pytest.mark.parametrize(("held_mb", "out_of_memory"), [(28, True), (8, False)])
@pytest.mark.docker
def test_a_desktop_that_does_not_answer_at_its_memory_limit_fails_as_out_of_memory(
    docker_client, node_name, sessions_dir, tiny_image, held_mb, out_of_memory
) -> None:  # type: ignore[no-untyped-def]
    # The state the kernel leaves a starved desktop in, made steady: anonymous memory held
    # just under the 32 MB limit (measured: use 97% of it, nothing OOM-killed), nothing
    # answering. With 8 MB held it is an ordinary timeout, not memory.
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, readiness=_never_answers
    )
    hold = f"b = bytearray({held_mb} << 20)\nimport time\ntime.sleep(120)"
    container = docker_client.containers.run(
        tiny_image, ["python3", "-c", hold], entrypoint=[], detach=True, mem_limit="32m",
        user="1000:1000", cap_drop=["ALL"], labels={LABEL_MANAGED: "true", LABEL_NODE: node_name},
    )  # fmt: skip
    for _ in range(50):  # until python holds it (it needs a moment to start)
        stats = container.stats(stream=False, one_shot=True)["memory_stats"]
        if stats.get("usage", 0) >= held_mb << 20:
            break
    adopted = ManagedContainer(
        session_id=6004, container_id=container.id, running=True, status="running",
        host="127.0.0.1", port=6080,
    )  # fmt: skip

    with pytest.raises(StartFailed) as failed:
        runtime.wait_ready(adopted)

    reason = str(failed.value)
    assert reason.startswith("no VNC handshake") is not out_of_memory, reason
    assert ("out of memory" in reason) is out_of_memory, reason
    assert ("memory limit 32 MB" in reason) is out_of_memory, reason
    assert (failed.value.code == OUT_OF_MEMORY) is out_of_memory, failed.value.code
    assert _container(docker_client, container.id).attrs["State"]["OOMKilled"] is False


@pytest.mark.docker
def test_a_program_killed_for_memory_inside_a_desktop_leaves_the_desktop_running(
    docker_runtime, docker_client, tiny_image, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    # The hog is the biggest process: the OOM killer takes it, the desktop lives on and the
    # agent has nothing to report. (Docker marks OOMKilled only when the container exits.)
    session = make_session(6003, image=tiny_image, memory_mb=256)
    reconciler = Reconciler(docker_runtime, fake_portal)
    converge(reconciler, [session])
    container = _container(docker_client, fake_portal.last(6003)["container_id"])

    assert container.exec_run(MEMORY_HOG).exit_code == 137

    summary = reconciler.step([session])
    assert reconciler.wait_idle(10)
    assert summary.is_quiet()
    assert _container(docker_client, container.id).attrs["State"]["Running"] is True
    assert fake_portal.states(6003) == ["STARTING", "RUNNING"]


def test_exit_reasons_tell_an_oom_death_from_an_earlier_oom_kill() -> None:
    def dead(**fields: object) -> ManagedContainer:
        base = {"session_id": 1, "container_id": "c", "running": False, "status": "exited"}
        return ManagedContainer(host="127.0.0.1", port=None, **{**base, **fields})  # type: ignore[arg-type]

    died = dead(exit_code=137, oom_killed=True, memory_limit_mb=512).exit_reason()
    assert died.startswith("desktop ran out of memory") and "memory limit 512 MB" in died
    # Measured on Docker 20.10: a hog OOM-killed inside a desktop, then `docker stop`:
    # ExitCode 143 and OOMKilled true. The desktop did not die of it.
    later = dead(exit_code=143, oom_killed=True).exit_reason()
    assert later.startswith("desktop container exited with code 143") and "OOM" in later
    assert "exited with code 137" in dead(exit_code=137).exit_reason()  # docker kill


def test_long_reasons_are_cut_to_what_the_portal_accepts() -> None:
    body = report("FAILED", "", reason="x" * 1000)
    assert len(body.reason) == REASON_MAX_CHARS and body.reason.endswith("…")
    assert report("FAILED", "", reason="short").reason == "short"
    warm = warm_report("FAILED", reason="y" * 1000)
    assert len(warm.reason) == REASON_MAX_CHARS and warm.reason.endswith("…")
