"""``python -m bench.home_files``: what the agent's home-file operations cost on a node.

The Files page's tasks (nodeagent/protocol_files.py) are carried out by the agent on the
home's folder through :class:`nodeagent.home_files.HomeFolder`, one name at a time without
following links. This builds a home in a temporary folder (``--root``: on the disk the
homes live on, for instance ``/var/lib/docker/volumes``) holding ``--files`` files of
``--file-kb`` KB in folders of ``--per-folder``, then times, median of ``--runs``:

- ``list``: a listing of one folder of ``--per-folder`` entries (what every Files page view
  asks for);
- ``used``: the home's size (measured after every task, and before every upload against
  the quota: a walk of the whole home);
- ``write``: an upload of ``--upload-mb`` MB (new file beside it, renamed over; quota on, so
  it walks the home first);
- ``read``: a download of the same file, and the peak memory the read takes (tracemalloc).

The home is removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from nodeagent.home_files import MB, HomeFolder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.home_files", description=__doc__)
    parser.add_argument("--root", type=Path, default=None, help="where to build the home")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--per-folder", type=int, default=1_000)
    parser.add_argument("--file-kb", type=int, default=16)
    parser.add_argument("--upload-mb", type=int, default=64)
    parser.add_argument("--runs", type=int, default=10)
    return parser.parse_args(argv)


def build_home(home: Path, files: int, per_folder: int, file_kb: int) -> None:
    body = b"x" * (file_kb * 1024)
    for index in range(files):
        folder = home / f"folder-{index // per_folder:04d}"
        folder.mkdir(exist_ok=True)
        (folder / f"file-{index:06d}.bin").write_bytes(body)


def median_ms(runs: int, step: Callable[[], object]) -> tuple[float, float, float]:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        step()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), min(times), max(times)


def chunks(size: int) -> list[bytes]:
    piece = b"u" * MB
    return [piece] * (size // MB)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="deskpool-home-bench-", dir=args.root))
    home = base / "home"
    home.mkdir()
    try:
        began = time.perf_counter()
        build_home(home, args.files, args.per_folder, args.file_kb)
        print(
            f"home: {args.files:,} files of {args.file_kb} KB in folders of "
            f"{args.per_folder:,} at {base} (built in {time.perf_counter() - began:.1f} s)"
        )
        size = args.upload_mb * MB
        with HomeFolder.open(home) as folder:
            report = [
                ("list one folder", lambda: folder.list("folder-0000")),
                ("used bytes (whole home)", folder.used_bytes),
                (
                    f"write {args.upload_mb} MB (quota on)",
                    lambda: folder.write("upload.bin", chunks(size), size, quota_bytes=1 << 50),
                ),
                (f"read {args.upload_mb} MB", lambda: folder.read("upload.bin", size)),
            ]
            for name, step in report:
                median, low, high = median_ms(args.runs, step)
                print(f"{name}: median {median:.1f} ms ({low:.1f}-{high:.1f}), {args.runs} runs")
            tracemalloc.start()
            folder.read("upload.bin", size)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"read {args.upload_mb} MB: peak {peak / MB:.1f} MB of Python memory")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
