"""``python -m bench.home_files``: what the agent's home tasks cost on a node.

The Files page's tasks (list, delete: nodeagent/protocol_files.py) are carried out by the
agent on the home's folder through :class:`nodeagent.home_files.HomeFolder`, one name at a
time without following links. This builds a home in a temporary folder (``--root``: on the
disk the homes live on, for instance ``/var/lib/docker/volumes``) holding ``--files`` files
of ``--file-kb`` KB in folders of ``--per-folder``, then times, median of ``--runs``:

- ``list``: a listing of one folder of ``--per-folder`` entries (what every Files page view
  asks for);
- ``used``: the home's size (measured after every task, and by the gateway before every
  upload against the quota: a walk of the whole home).

Uploads and downloads go through the node's gateway: ``python -m bench.gateway_files``.

The home is removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nodeagent.home_files import HomeFolder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.home_files", description=__doc__)
    parser.add_argument("--root", type=Path, default=None, help="where to build the home")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--per-folder", type=int, default=1_000)
    parser.add_argument("--file-kb", type=int, default=16)
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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="deskpool-bench-home-", dir=args.root))
    home = base / "home"
    home.mkdir()
    try:
        began = time.perf_counter()
        build_home(home, args.files, args.per_folder, args.file_kb)
        print(
            f"home: {args.files:,} files of {args.file_kb} KB in folders of "
            f"{args.per_folder:,} at {base} (built in {time.perf_counter() - began:.1f} s)"
        )
        with HomeFolder.open(home) as folder:
            report = [
                ("list one folder", lambda: folder.list("folder-0000")),
                ("used bytes (whole home)", folder.used_bytes),
            ]
            for name, step in report:
                median, low, high = median_ms(args.runs, step)
                print(f"{name}: median {median:.1f} ms ({low:.1f}-{high:.1f}), {args.runs} runs")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
