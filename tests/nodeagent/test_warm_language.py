"""A claimed warm desktop becomes the student's: their home, their language, their input method.

A warm desktop starts before anyone is known (the image's locale, the warm home). The claim
(``deskpool-claim --language``, one exec) applies the password and starts the X session
again, in the student's locale and home, while Xvnc stays up. Real engine, real containers:
the tiny image for the mechanics, deskpool/desktop for the locale and fcitx5.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nodeagent.protocol import LABEL_MANAGED, LABEL_NODE
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.software import DESKTOP_IMAGE
from tests.nodeagent.conftest import desired_warm, wait_for_image
from tests.nodeagent.test_studio_image import input_methods, session_environment
from tests.nodeagent.test_warm import login

pytestmark = [pytest.mark.docker]

# The running session's process group (deskpool-start records its leader).
SESSION_GROUP = "cat /tmp/deskpool-runtime/session"
# "pid group comm" of each live process of the container (one that ends while it is read, as
# the claim's listener does just after it answers, is left out).
PROCESSES = (
    "for p in /proc/[0-9]*; do s=$(cat $p/stat 2>/dev/null) || continue; s=${s##*) }; "
    "set -- $s; c=$(cat $p/comm 2>/dev/null) || continue; "
    '[ "$1" = Z ] || echo "${p#/proc/} $3 $c"; done'
)


def processes(container) -> list[tuple[int, int, str]]:  # type: ignore[no-untyped-def]
    """(pid, process group, name) of each live process in the container."""
    output = container.exec_run(["bash", "-c", PROCESSES]).output.decode()
    rows = [line.split(" ", 2) for line in output.splitlines()]
    return [(int(pid), int(group), name) for pid, group, name in rows]


def session_group(container) -> int:  # type: ignore[no-untyped-def]
    return int(container.exec_run(["sh", "-c", SESSION_GROUP]).output)


def wait_for(container, name: str, group: int) -> int:  # type: ignore[no-untyped-def]
    """The pid of process ``name`` in process group ``group``, once it runs (up to 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        found = [pid for pid, g, n in processes(container) if n == name and g == group]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {name} in process group {group} after 60 s"
        time.sleep(0.5)


def returning_student_volume(docker_client, node_name: str, name: str) -> Path:  # type: ignore[no-untyped-def]
    """A home volume that already holds the student's work (thesis.txt); its folder."""
    volume = docker_client.volumes.create(
        name, labels={LABEL_MANAGED: "true", LABEL_NODE: node_name}
    )
    folder = Path(volume.attrs["Mountpoint"])
    (folder / "thesis.txt").write_text("chapter 1\n")
    os.chown(folder / "thesis.txt", 1000, 1000)
    os.chown(folder, 1000, 1000)
    return folder


@pytest.fixture
def runtime(docker_client, node_name, sessions_dir) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=120
    )


def test_the_claim_starts_the_session_again_in_the_students_home_under_the_same_xvnc(
    runtime, docker_client, tiny_image, node_name, make_session
) -> None:  # type: ignore[no-untyped-def]
    warm = runtime.start_warm(desired_warm("l1-1", image=tiny_image))
    container = docker_client.containers.get(warm.container_id)
    xvnc = [pid for pid, _, name in processes(container) if name == "Xvnc"]
    warm_group = session_group(container)
    assert wait_for(container, "xterm", warm_group)  # the warm session runs
    session = make_session(
        7601, image=tiny_image, vnc_password="langpw01", warm_key="l1-1", language="zh-hans"
    )
    returning_student_volume(docker_client, node_name, session.home_volume)

    runtime.claim("l1-1", session)

    # The warm session is gone when the claim returns; another runs, under the same Xvnc.
    assert not [pid for pid, group, _ in processes(container) if group == warm_group]
    assert [pid for pid, _, name in processes(container) if name == "Xvnc"] == xvnc
    group = session_group(container)
    assert group != warm_group
    xterm = wait_for(container, "xterm", group)
    # It started in the student's home (the mount the claim made), not the warm one's folder.
    seen = container.exec_run(["cat", f"/proc/{xterm}/cwd/thesis.txt"])
    assert seen.output == b"chapter 1\n", seen.output
    # The tiny image has no zh_CN locale: the session stays in C.UTF-8.
    environ = container.exec_run(["cat", f"/proc/{xterm}/environ"]).output.split(b"\0")
    assert b"LANG=C.UTF-8" in environ
    assert login(warm.port, "langpw01") == "OK"
    runtime.stop(7601)


def test_deskpool_claim_refuses_bad_arguments_and_keeps_the_session(
    runtime, docker_client, tiny_image
) -> None:  # type: ignore[no-untyped-def]
    warm = runtime.start_warm(desired_warm("l2-1", image=tiny_image))
    container = docker_client.containers.get(warm.container_id)
    group = session_group(container)
    for bad in (["--language", "fr"], ["--language"], ["--restart"]):
        result = container.exec_run(["/usr/local/bin/deskpool-claim", *bad])
        assert result.exit_code == 64, (bad, result.output)
        assert b"deskpool-claim:" in result.output
    assert session_group(container) == group  # nothing restarted
    assert any(g == group for _, g, _ in processes(container))


@pytest.mark.parametrize(
    ("language", "locale"), [("zh-hans", "zh_CN.UTF-8"), ("en", "en_US.UTF-8"), ("", "C.UTF-8")]
)
def test_a_warm_desktop_claimed_runs_in_the_students_language_with_fcitx5(  # type: ignore[no-untyped-def]
    runtime, docker_client, node_name, make_session, language, locale
) -> None:
    wait_for_image(docker_client, DESKTOP_IMAGE, "desktop")
    key = f"l3-{['zh-hans', 'en', ''].index(language)}"
    limits = {"memory_mb": 1536, "cpus": 1.0, "pids_limit": 1024}
    warm = runtime.start_warm(desired_warm(key, image=DESKTOP_IMAGE, **limits))
    container = docker_client.containers.get(warm.container_id)
    before = session_environment(container)
    assert before["LANG"] == "C.UTF-8"  # nobody known yet: the image's locale
    session = make_session(
        7701, image=DESKTOP_IMAGE, vnc_password="langpw02", warm_key=key, language=language
    ).model_copy(update=limits)
    returning_student_volume(docker_client, node_name, session.home_volume)

    runtime.claim(key, session)

    environment = session_environment(container)  # the new session's (the old one is gone)
    assert environment["LANG"] == locale
    assert environment["DBUS_SESSION_BUS_ADDRESS"] != before["DBUS_SESSION_BUS_ADDRESS"]
    assert environment["XMODIFIERS"] == "@im=fcitx"
    assert container.exec_run(["cat", "/home/desktop/thesis.txt"]).output == b"chapter 1\n"
    fcitx5 = wait_for(container, "fcitx5", session_group(container))
    fcitx5_environ = container.exec_run(["cat", f"/proc/{fcitx5}/environ"]).output.split(b"\0")
    assert f"LANG={locale}".encode() in fcitx5_environ  # the input method follows
    if language == "zh-hans":
        group, available = input_methods(container, environment["DBUS_SESSION_BUS_ADDRESS"])
        assert "keyboard-us" in group and "pinyin" in group, group
        assert "pinyin" in available, available
    assert login(warm.port, "langpw02") == "OK"
    runtime.stop(7701)
