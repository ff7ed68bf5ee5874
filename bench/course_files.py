"""``python -m bench.course_files``: what pulling a course folder costs a node.

The agent keeps a checked, read-only copy of each course folder its desktops need
(:class:`nodeagent.course_files.CourseFolders`, docs/course-files.md). This serves a folder
of ``--files`` files of ``--file-mb`` MB from memory (as the portal's agent API would, in
1 MiB chunks: the network left out) and times, into a temporary folder (``--root``: on the
disk the agent's state lives on):

- ``first``: the first pull of the whole folder (every file fetched, hashed and written);
- ``one changed``: the next version with one file changed (the others are linked from the
  copy in force, not fetched again);

with the agent process's peak RSS growth over the run. The folder is removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nodeagent.course_files import CourseFolders
from nodeagent.protocol_courses import CourseFileEntry, CourseManifest

CHUNK = 1024 * 1024


class MemorySource:
    """A course folder served from memory, as the portal's agent API serves it."""

    def __init__(self, files: int, file_mb: int) -> None:
        self.version = 1
        self.file_mb = file_mb
        self.bodies = {f"week{i % 10}/file-{i:04d}.bin": self._body(i, 0) for i in range(files)}
        self.by_sha = {hashlib.sha256(b).hexdigest(): b for b in self.bodies.values()}
        self.fetched = 0

    def _body(self, index: int, version: int) -> bytes:
        return (f"{index}:{version}:".encode() * CHUNK)[: self.file_mb * CHUNK]

    def change_one(self) -> None:
        self.version += 1
        self.bodies["week0/file-0000.bin"] = self._body(0, self.version)
        self.by_sha = {hashlib.sha256(b).hexdigest(): b for b in self.bodies.values()}

    def course_manifest(self, course_id: int) -> CourseManifest:
        shas = {id(b): sha for sha, b in self.by_sha.items()}
        return CourseManifest(
            id=course_id,
            code="cs101",
            version=self.version,
            files=[
                CourseFileEntry(path=p, size=len(b), sha256=shas[id(b)])
                for p, b in self.bodies.items()
            ],
        )

    def course_file(self, course_id: int, sha256: str, out: Callable[[bytes], object]) -> None:
        body = self.by_sha[sha256]
        self.fetched += 1
        for start in range(0, len(body), CHUNK):
            out(body[start : start + CHUNK])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.course_files", description=__doc__)
    parser.add_argument("--root", type=Path, default=None, help="where the copies go")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--file-mb", type=int, default=10)
    return parser.parse_args(argv)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    source = MemorySource(args.files, args.file_mb)
    root = Path(tempfile.mkdtemp(prefix="deskpool-bench-courses-", dir=args.root))
    try:
        folders = CourseFolders(source, root)
        before = peak_rss_mb()
        began = time.perf_counter()
        folders.pull(1)
        first = time.perf_counter() - began
        fetched_first = source.fetched
        source.change_one()
        began = time.perf_counter()
        folders.pull(1)
        again = time.perf_counter() - began
        total_mb = args.files * args.file_mb
        print(f"folder: {args.files} files of {args.file_mb} MB ({total_mb} MB) under {root}")
        print(
            f"first:       {first * 1000:8.1f} ms  {fetched_first} files fetched  "
            f"{total_mb / first:7.1f} MB/s"
        )
        print(f"one changed: {again * 1000:8.1f} ms  {source.fetched - fetched_first} file fetched")
        print(f"peak RSS growth over both pulls: {peak_rss_mb() - before:.1f} MB")
    finally:
        for path in root.rglob("*"):
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
