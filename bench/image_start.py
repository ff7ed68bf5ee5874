"""``python -m bench.image_start``: size and cold start of the desktop images, median of 10.

For each image (default: deskpool/desktop and deskpool/studio) it prints the image's size,
then starts ``--runs`` desktops one at a time through the agent's own
:class:`~nodeagent.runtime.docker_runtime.DockerRuntime` (as :mod:`bench.agent` does: a new
container and a new home volume each time, nothing warm) and times, from the start call:

1. RUNNING: the VNC handshake answers through websockify (what the agent reports and the
   student's page waits for);
2. desktop up: the X session's programs run in the container: ``xfce4-session`` and
   ``xfce4-panel``, and for an image with the pinyin input method, ``fcitx5`` too.

``--drop-caches`` empties the kernel's page cache before each start (needs root): the image's
files come from disk, as on a node that has not started that image for a while. The person's
language is ``zh-hans`` (``--language``), so the studio starts in Chinese with fcitx5.
Every container and volume it makes is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from bench.agent import Bench
from nodeagent.runtime import container_name
from nodeagent.software import DESKTOP_IMAGE, STUDIO_IMAGE, programs_of

# The processes that show the desktop is up (their command lines start with these).
SESSION_PROGRAMS = ("xfce4-session", "xfce4-panel")
INPUT_METHOD = "fcitx5"
LIST_PROGRAMS = 'for p in /proc/[0-9]*; do tr "\\0" " " < $p/cmdline 2>/dev/null; echo; done'


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.image_start", description=__doc__)
    parser.add_argument("--images", nargs="+", default=[DESKTOP_IMAGE, STUDIO_IMAGE])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--language", default="zh-hans", choices=["", "en", "zh-hans"])
    parser.add_argument("--drop-caches", action="store_true", help="cold page cache (root)")
    parser.add_argument("--cpus", type=float, default=2.0)
    parser.add_argument("--memory-mb", type=int, default=4096)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--node", default=f"bench-{os.getpid()}")
    return parser.parse_args(argv)


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def programs_running(container) -> set[str]:  # type: ignore[no-untyped-def]
    result = container.exec_run(["sh", "-c", LIST_PROGRAMS])
    lines = result.output.decode(errors="replace").splitlines()
    return {line.split(" ", 1)[0].rsplit("/", 1)[-1] for line in lines if line.strip()}


def one_start(bench: Bench, args: argparse.Namespace, image: str) -> tuple[float, float]:
    """Seconds to RUNNING and to the desktop's programs, for one new desktop."""
    wanted = set(SESSION_PROGRAMS)
    if "pinyin" in programs_of(image):
        wanted.add(INPUT_METHOD)
    bench.args.image = image
    session = bench.session().model_copy(update={"language": args.language})
    if args.drop_caches:
        drop_caches()
    started = time.perf_counter()
    bench.runtime.start(session)
    running = time.perf_counter() - started
    container = bench.client.containers.get(container_name(args.node, session.session_id))
    deadline = started + args.timeout_s
    while not wanted <= programs_running(container):
        if time.perf_counter() > deadline:
            raise SystemExit(f"{image}: {sorted(wanted)} not all running after {args.timeout_s} s")
        time.sleep(0.1)
    up = time.perf_counter() - started
    bench.runtime.stop(session.session_id)
    return running, up


def spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f} s, "
        f"min {min(values):.2f}, max {max(values):.2f} (n={len(values)})"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    try:
        for image in args.images:
            size = bench.client.images.get(image).attrs["Size"]
            print(f"{image}: {size / 1e6:.0f} MB")
            runs = [one_start(bench, args, image) for _ in range(args.runs)]
            cache = "page cache dropped before each" if args.drop_caches else "page cache warm"
            print(f"  start -> RUNNING (VNC handshake): {spread([r for r, _ in runs])}; {cache}")
            print(f"  start -> desktop up:              {spread([u for _, u in runs])}")
    finally:
        bench.clean_up()
    return 0


if __name__ == "__main__":
    sys.exit(main())
