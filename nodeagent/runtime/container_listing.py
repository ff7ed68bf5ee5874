"""Listing a node's containers without inspecting every one of them at every step.

docker-py's ``containers.list()`` inspects each container it lists (one engine call each;
``sparse=True`` skips that, but gives only the listing's summary). A reconcile step lists
the node's desktops twice (sessions and warm desktops), so a class of 40 warm desktops cost
80 inspections a step, and at a class start the busy engine made each step take over a
second, holding back the claims. :class:`ContainerListing` lists once (one call) and keeps
each container's inspection while its summary (its id, ``State`` and ``Status``: running or
exited, "Up 5 minutes", "(healthy)", an exit code) stays the same; a container whose summary
changed is inspected again, and one removed between the listing and its inspection is left
out (it is gone: the next step sees that) instead of failing the step.
"""

from __future__ import annotations

import threading
from typing import Any

import docker
from docker.errors import NotFound
from docker.models.containers import Container

# More kept inspections than this (containers long gone) and the store starts afresh.
KEPT_MAX = 4096

_Key = tuple[str, str, str]


class ContainerListing:
    def __init__(self, client: docker.DockerClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[_Key, Container]] = {}

    def list(self, filters: dict[str, Any]) -> list[Container]:
        """Every container (running or not) the filters select, inspected."""
        found = []
        for summary in self._client.api.containers(all=True, filters=filters):
            key = (str(summary["Id"]), str(summary.get("State")), str(summary.get("Status")))
            with self._lock:
                kept = self._kept.get(key[0])
            if kept is not None and kept[0] == key:
                found.append(kept[1])
                continue
            try:
                container = self._client.containers.get(key[0])
            except NotFound:
                continue  # removed since the listing
            with self._lock:
                if len(self._kept) >= KEPT_MAX:
                    self._kept.clear()
                self._kept[key[0]] = (key, container)
            found.append(container)
        return found
