"""The warm desktops' binds, shared marks and unmounts as the kernel's calls, not the ``mount``
program (nodeagent/runtime/home_mounts.py): the same mounts, clear errors, no program started.
Real mounts on this machine's folders: they need root."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.runtime import course_mounts, home_mounts
from nodeagent.runtime.course_mounts import CourseMountError
from nodeagent.runtime.home_mounts import HomeMountError, mount_count

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")


@pytest.fixture
def no_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any ``subprocess.run`` in the module: the calls below must start no program."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a program was started: {args[0] if args else kwargs}")

    monkeypatch.setattr(home_mounts.subprocess, "run", refuse)


@pytest.fixture
def folders(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    source, target = tmp_path / "volume", tmp_path / "warm-home"
    source.mkdir()
    target.mkdir()
    (source / "thesis.txt").write_text("chapter one\n")
    yield source, target
    home_mounts.release(target)


def optional_fields(path: Path) -> list[list[str]]:
    """The optional fields (propagation) of each mount on ``path``, from mountinfo."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split(" ")
            if fields[4] == str(path):
                found.append(fields[6 : fields.index("-")])
    return found


def test_a_claim_binds_the_home_on_the_shared_folder_without_a_program(
    folders: tuple[Path, Path], no_programs: None
) -> None:
    source, target = folders
    home_mounts.make_shared(target)
    assert mount_count(target) == 1
    assert any(field.startswith("shared:") for field in optional_fields(target)[0])
    home_mounts.attach(source, target)
    assert mount_count(target) == 2
    assert (target / "thesis.txt").read_text() == "chapter one\n"
    home_mounts.release(target)  # both unmounted, then the folder removed
    assert not target.exists()
    assert (source / "thesis.txt").read_text() == "chapter one\n"  # never deleted through


def test_a_failed_bind_says_what_failed_and_why(folders: tuple[Path, Path]) -> None:
    source, target = folders
    with pytest.raises(HomeMountError) as failed:
        home_mounts.bind(source / "missing", target)
    message = str(failed.value)
    assert f"mount --bind {source / 'missing'} {target} failed" in message
    assert os.strerror(2) in message  # ENOENT, in words
    assert "a warm desktop's home needs the agent to run as root" in message
    assert mount_count(target) == 0


def test_a_course_folders_failure_is_a_course_mount_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(CourseMountError, match="course folders needs the agent"):
        home_mounts.make_shared(missing, needs=course_mounts.COURSE_NEEDS, error=CourseMountError)


def test_an_unmount_of_a_folder_with_nothing_mounted_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert home_mounts.unmount(tmp_path) == f"EINVAL: {os.strerror(22)}"
    stacked = tmp_path / "stacked"
    stacked.mkdir()
    home_mounts.bind(stacked, stacked)
    home_mounts.bind(stacked, stacked)
    assert mount_count(stacked) == 2
    with caplog.at_level(logging.ERROR):
        home_mounts.release(stacked)
    assert not stacked.exists() and not caplog.records


def test_a_sealed_course_copy_is_read_only(tmp_path: Path) -> None:
    """The seal (a bind by call, then the program's read-only remount) leaves the copy
    read-only, for root too."""
    copy = tmp_path / "copy"
    copy.mkdir()
    try:
        course_mounts.seal(copy)
        assert os.statvfs(copy).f_flag & os.ST_RDONLY
        with pytest.raises(OSError):
            (copy / "new.txt").write_text("no")
    finally:
        home_mounts.release(copy)
