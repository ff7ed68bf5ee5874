"""The node's copies of course folders (nodeagent/course_files.py) without an engine: a file
that does not match its manifest is refused and nothing switches, a failed pull waits before
it is tried again, a new version links the files it had, versions no desktop mounts are
pruned (docs/course-files.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from nodeagent import course_files
from nodeagent.course_files import CourseFolders
from nodeagent.portal_client import PortalUnavailable
from nodeagent.protocol_courses import CourseFileEntry, CourseFolderRef, CourseManifest
from nodeagent.runtime.course_mounts import current_copy

from .conftest import desired_session


class Source:
    """The portal's two course calls, from memory; ``lie`` sends other bytes than listed."""

    def __init__(self) -> None:
        self.files = {"a.txt": b"alpha\n", "sub/b.txt": b"beta\n"}
        self.version = 1
        self.lie = False
        self.down = False
        self.asked: list[str] = []

    def course_manifest(self, course_id: int) -> CourseManifest:
        self.asked.append("manifest")
        if self.down:
            raise PortalUnavailable("portal unreachable")
        entries = [
            CourseFileEntry(path=p, size=len(b), sha256=hashlib.sha256(b).hexdigest())
            for p, b in self.files.items()
        ]
        return CourseManifest(id=course_id, code="cs101", version=self.version, files=entries)

    def course_file(self, course_id: int, sha256: str, out: Callable[[bytes], object]) -> None:
        self.asked.append(sha256)
        body = next(b for b in self.files.values() if hashlib.sha256(b).hexdigest() == sha256)
        out(b"tampered" if self.lie else body)


def session_with(version: int):  # type: ignore[no-untyped-def]
    ref = CourseFolderRef(id=7, code="cs101", version=version)
    return desired_session(1).model_copy(update={"courses": [ref]})


def test_a_file_unlike_its_manifest_is_refused_and_nothing_switches(tmp_path: Path) -> None:
    source = Source()
    source.lie = True
    folders = CourseFolders(source, tmp_path)
    folders.sync([session_with(1)])
    assert current_copy(tmp_path, "", 7) is None
    assert not list((tmp_path / "-7").glob("v*"))  # no version in place, none half made


def test_a_failed_pull_waits_before_it_is_tried_again(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    now = [1000.0]
    monkeypatch.setattr(course_files.time, "monotonic", lambda: now[0])
    source = Source()
    source.down = True
    folders = CourseFolders(source, tmp_path)
    folders.sync([session_with(1)])
    folders.sync([session_with(1)])  # the next step, a second later: not asked again
    assert source.asked == ["manifest"]
    now[0] += course_files.RETRY_FIRST_S + 1
    source.down = False
    folders.sync([session_with(1)])
    copy = current_copy(tmp_path, "", 7)
    assert copy is not None and (copy / "sub" / "b.txt").read_bytes() == b"beta\n"


def test_a_new_version_links_what_it_had_and_the_old_one_goes_unless_mounted(
    tmp_path: Path,
) -> None:
    source = Source()
    mounted: set[Path] = set()
    folders = CourseFolders(source, tmp_path, in_use=lambda: mounted)
    folders.sync([session_with(1)])
    first = current_copy(tmp_path, "", 7)
    assert first is not None
    mounted.add(first)  # a desktop runs with version 1

    source.files["c.txt"] = b"gamma\n"
    source.version = 2
    source.asked.clear()
    folders.sync([session_with(2)])
    second = current_copy(tmp_path, "", 7)
    assert second is not None and second.name == "v2"
    assert source.asked == ["manifest", hashlib.sha256(b"gamma\n").hexdigest()]  # one fetched
    assert (second / "a.txt").stat().st_ino == (first / "a.txt").stat().st_ino  # linked
    assert first.is_dir()  # still mounted: kept
    assert (second / "a.txt").stat().st_mode & 0o777 == 0o444  # read-only, as is the folder
    assert second.stat().st_mode & 0o777 == 0o555

    mounted.clear()
    folders.prune(second.parent)
    assert not first.exists() and second.is_dir()
