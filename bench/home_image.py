"""``python -m bench.home_image``: what a disk-bounded home costs (issue 36, item 2).

On this machine's Docker engine (root, loop devices), for ``--runs`` homes each:

* **make an image**: :meth:`DesktopContainers.ensure_volume` of a new home with a
  ``--quota-mb`` quota (sparse file, ``mkfs.ext4``, mount, fit to the quota, the bind
  volume), against a plain volume's creation;
* **a cold start**: :meth:`DockerRuntime.start` of ``deskpool/tiny`` (create, start, VNC
  handshake) with a new image home, against one with a new plain volume.

Prints the median and the slowest of each, in milliseconds. Everything made is removed
(containers, volumes, images, mounts).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from nodeagent.protocol import LABEL_MANAGED, LABEL_NODE, DesiredSession
from nodeagent.runtime import home_images
from nodeagent.runtime.docker_desktops import docker_client
from nodeagent.runtime.docker_runtime import DockerRuntime

TINY = "deskpool/tiny:latest"


def session(session_id: int, quota_mb: int) -> DesiredSession:
    return DesiredSession(
        session_id=session_id,
        user="bench",
        course="bench",
        image=TINY,
        cpus=0.5,
        memory_mb=512,
        pids_limit=256,
        shm_mb=64,
        gpu_devices=[],
        vnc_password="benchpw1",
        home_volume=f"deskpool-bench-home-{uuid.uuid4().hex[:8]}",
        home_quota_mb=quota_mb,
    )


def timed(action: Callable[..., object], *args: object) -> float:
    began = time.perf_counter()
    action(*args)
    return (time.perf_counter() - began) * 1000


def summary(name: str, figures: list[float]) -> str:
    return (
        f"{name:<34} median {statistics.median(figures):8.1f} ms   slowest {max(figures):8.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quota-mb", type=int, default=10240)
    args = parser.parse_args()
    client = docker_client()
    node = f"bench-home-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="deskpool-bench-home-") as folder:
        base = Path(folder)
        homes = base / "homes"
        bounded = DockerRuntime(
            client, node_name=node, sessions_dir=base / "s1", homes_dir=homes, ready_timeout_s=60
        )
        plain = DockerRuntime(client, node_name=node, sessions_dir=base / "s2", ready_timeout_s=60)
        figures: dict[str, list[float]] = {}
        try:
            for run in range(args.runs):
                for kind, runtime in (("image", bounded), ("plain volume", plain)):
                    desktops = runtime._desktops
                    name = f"deskpool-bench-home-{uuid.uuid4().hex[:8]}"
                    made = timed(desktops.ensure_volume, name, "bench", args.quota_mb)
                    figures.setdefault(f"make a home ({kind})", []).append(made)
                    wanted = session(run * 2 + 1 + (kind == "image"), args.quota_mb)
                    started = timed(runtime.start, wanted)
                    figures.setdefault(f"cold start ({kind} home)", []).append(started)
                    runtime.stop(wanted.session_id)
        finally:
            labels = [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={node}"]
            for container in client.containers.list(all=True, filters={"label": labels}):
                container.remove(force=True)
            for volume in client.volumes.list(filters={"label": labels}):
                volume.remove(force=True)
            for image in homes.glob(f"*{home_images.IMAGE_SUFFIX}"):
                home_images.remove(homes, image.name[: -len(home_images.IMAGE_SUFFIX)])
    print(f"{args.runs} runs, quota {args.quota_mb} MB, image {TINY}, engine on this machine")
    for name, values in figures.items():
        print(summary(name, values))


if __name__ == "__main__":
    main()
