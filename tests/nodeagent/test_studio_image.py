"""The desktop images hold what nodeagent.software says, and a desktop (deskpool/desktop and
deskpool/studio) speaks its person's language.

Every program listed for an image answers its version command inside that image (the
profiles name only listed programs: tests/portal/test_seed_profiles.py). A session started
by the agent with the person's language runs its X session in that locale, with fcitx5's
pinyin input method loaded. Real engine, real images (nodeagent/images/build.sh all).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from nodeagent.protocol import DESKTOP_HOME
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import container_name
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.software import (
    DESKTOP_IMAGE,
    IMAGE_PROGRAMS,
    PROGRAMS,
    STUDIO_CUDA_IMAGE,
    STUDIO_IMAGE,
)
from tests.nodeagent.conftest import wait_for_image

pytestmark = [pytest.mark.docker]

# The X session's environment, read from the process that runs it (/proc, no ps needed).
SESSION_ENV = (
    'for p in /proc/[0-9]*; do [ "$p" = /proc/$$ ] && continue; '
    'case "$(tr "\\0" " " < $p/cmdline 2>/dev/null)" in '
    'xfce4-session*) tr "\\0" "\\n" < $p/environ; exit 0 ;; esac; done; exit 1'
)


@pytest.mark.parametrize("image", sorted(IMAGE_PROGRAMS))
def test_every_listed_program_answers_its_version_in_the_image(docker_client, image) -> None:  # type: ignore[no-untyped-def]
    wait_for_image(docker_client, image, "studio-cuda" if image == STUDIO_CUDA_IMAGE else "all")
    # As the desktop's user, without the desktop's entrypoint (no password, no display).
    container = docker_client.containers.run(
        image, entrypoint=["sleep", "300"], user="1000:1000", network_disabled=True, detach=True
    )
    answers = {}
    try:
        for key in IMAGE_PROGRAMS[image]:
            result = container.exec_run(list(PROGRAMS[key].version_command))
            answers[key] = (result.exit_code, result.output.decode(errors="replace").strip())
    finally:
        container.remove(force=True)
    failed = {key: answer for key, answer in answers.items() if answer[0] != 0 or not answer[1]}
    assert not failed, f"{image}: {failed}"
    assert list(answers) == list(IMAGE_PROGRAMS[image])


def python_in(docker_client, image: str, script: str) -> str:  # type: ignore[no-untyped-def]
    """What ``script`` prints when run by the image's Python as the desktop's user, offline."""
    output = docker_client.containers.run(
        image,
        entrypoint=["python3", "-c", script],
        user="1000:1000",
        network_disabled=True,
        remove=True,
    )
    return output.decode()


def test_the_studio_holds_a_cpu_pytorch_that_computes(docker_client) -> None:  # type: ignore[no-untyped-def]
    wait_for_image(docker_client, STUDIO_IMAGE, "studio")
    product = "(torch.ones(3, 3) @ torch.ones(3)).tolist()"
    output = python_in(
        docker_client, STUDIO_IMAGE, f"import torch; print(torch.cuda.is_available(), {product})"
    )
    # No GPU here: the CPU build computes, and says so.
    assert output.split(None, 1) == ["False", "[3.0, 3.0, 3.0]\n"]


def test_the_cuda_studio_holds_pytorchs_cuda_build_computing_on_the_cpu(docker_client) -> None:  # type: ignore[no-untyped-def]
    wait_for_image(docker_client, STUDIO_CUDA_IMAGE, "studio-cuda")
    script = (
        "import numpy, torch; "
        "print(torch.__file__.startswith('/opt/deskpool-torch/'), torch.version.cuda, "
        "torch.cuda.is_available(), (torch.from_numpy(numpy.ones(3)) * 2).sum().item())"
    )
    # The wheels' torch, not Debian's, built for CUDA 13; no GPU here, so the CPU computes
    # (with Debian's numpy).
    wheels, cuda, available, total = python_in(docker_client, STUDIO_CUDA_IMAGE, script).split()
    assert (wheels, available, total) == ("True", "False", "6.0")
    assert re.fullmatch(r"13\.\d+", cuda), cuda


def session_environment(container) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The X session's environment, once XFCE's session manager runs (up to 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        result = container.exec_run(["sh", "-c", SESSION_ENV])
        if result.exit_code == 0:
            lines = result.output.decode().splitlines()
            return dict(line.split("=", 1) for line in lines if "=" in line)
        assert time.monotonic() < deadline, "no xfce4-session in the desktop after 60 s"
        time.sleep(1)


def fcitx5(container, bus: str, method: str, *args: str) -> str:  # type: ignore[no-untyped-def]
    """The answer of the session's fcitx5 to one D-Bus call of its controller ("" while it is
    not running yet)."""
    result = container.exec_run(
        [
            "dbus-send",
            "--session",
            "--print-reply",
            "--dest=org.fcitx.Fcitx5",
            "/controller",
            f"org.fcitx.Fcitx.Controller1.{method}",
            *args,
        ],
        environment={"DBUS_SESSION_BUS_ADDRESS": bus},
    )
    return result.output.decode() if result.exit_code == 0 else ""


def input_methods(container, bus: str) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    """The input methods of the session's default group, and those fcitx5 has (up to 60 s:
    XFCE starts fcitx5 from its autostart entries)."""
    deadline = time.monotonic() + 60
    while True:
        group = fcitx5(container, bus, "InputMethodGroupInfo", "string:Default")
        available = fcitx5(container, bus, "AvailableInputMethods")
        if group and available or time.monotonic() > deadline:
            break
        time.sleep(1)
    strings = re.compile(r'^\s*string "([^"]*)"', re.MULTILINE)
    return strings.findall(group), strings.findall(available)


@pytest.mark.parametrize("image", [DESKTOP_IMAGE, STUDIO_IMAGE])
@pytest.mark.parametrize(
    ("language", "locale"), [("zh-hans", "zh_CN.UTF-8"), ("en", "en_US.UTF-8"), ("", "C.UTF-8")]
)
def test_a_desktop_runs_in_its_persons_language_with_pinyin(  # type: ignore[no-untyped-def]
    docker_client, node_name, sessions_dir: Path, fake_portal, make_session, language, locale, image
) -> None:
    """Both desktop images, the CPU-only one too (Dockerfile.desktop holds the locales, the
    font and fcitx5; studio builds on it). A warm desktop's claim: test_warm_language.py."""
    wait_for_image(docker_client, image, "studio" if image == STUDIO_IMAGE else "desktop")
    session_id = 6301 + ["zh-hans", "en", ""].index(language)
    session = make_session(
        session_id, image=image, memory_mb=1536, cpus=1.0, pids_limit=1024
    ).model_copy(update={"language": language})
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, ready_timeout_s=120
    )
    reconciler = Reconciler(runtime, fake_portal)
    try:
        reconciler.step([session])
        assert reconciler.wait_idle(180), "the start did not finish"
        assert fake_portal.states(session_id) == ["STARTING", "RUNNING"], fake_portal.last(
            session_id
        )
        container = docker_client.containers.get(container_name(node_name, session_id))
        environment = session_environment(container)
        assert environment["LANG"] == locale
        assert environment["HOME"] == DESKTOP_HOME
        assert environment["XMODIFIERS"] == "@im=fcitx"
        if language == "zh-hans":
            # fcitx5 runs in the person's session, pinyin next to the keyboard in its group
            # (Ctrl+Space switches), and the pinyin engine is there to switch to.
            group, available = input_methods(container, environment["DBUS_SESSION_BUS_ADDRESS"])
            assert "keyboard-us" in group and "pinyin" in group, group
            assert "pinyin" in available, available
    finally:
        reconciler.step([])
        reconciler.wait_idle(120)
        reconciler.close()
