"""Listing a node's containers without inspecting every one of them at every step.

docker-py's ``containers.list()`` inspects each container it lists (one engine call each;
``sparse=True`` skips that, but gives only the listing's summary). A reconcile step lists
the node's desktops twice (sessions and warm desktops), so a class of 40 warm desktops cost
80 inspections a step, and at a class start the busy engine made each step take over a
second, holding back the claims. :class:`ContainerListing` lists once (one call) and keeps
each container's inspection while its summary stays the same: its id, ``State`` (running,
exited, ...), its published ``Ports`` (a container started again may get others) and
``Status`` without its durations ("Up 42 seconds (healthy)" is kept as "Up (healthy)",
"Exited (137) 3 seconds ago" as "Exited (137)"). The durations are left out because they
change by themselves: every second for a container up less than a minute, every minute after
that, which made each step at a class start (warm desktops started a minute before) inspect
every warm desktop again, one engine call each, before it could claim one. A container whose
summary changed is inspected again, and one removed between the listing and its inspection is
left out (it is gone: the next step sees that) instead of failing the step.

Within :meth:`ContainerListing.held` (a reconcile step: its sessions' and its warm
desktops' look-ups), the engine's listing for the same filters is asked once on that thread
and reused: at a class start of two hundred desktops each listing is a large answer for the
engine to build, and the step needs one picture anyway.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

import docker
from docker.errors import NotFound
from docker.models.containers import Container

# More kept inspections than this (containers long gone) and the store starts afresh.
KEPT_MAX = 4096

_Key = tuple[str, str, str, str]
# The engine's Status is a word, a duration and parenthesised parts: "Up 5 minutes (healthy)",
# "Exited (0) About an hour ago", "Up Less than a second (Paused)", "Created".
_STATUS_PART = re.compile(r"\([^)]*\)")


def summary_key(summary: dict[str, Any]) -> _Key:
    """What of an engine listing's summary tells that a container's inspection changed: its
    id, state, published ports, and its status's first word and parenthesised parts (health,
    exit code, paused), not the durations that change with the clock."""
    status = str(summary.get("Status") or "")
    words = status.split(maxsplit=1)
    steady = " ".join(words[:1] + _STATUS_PART.findall(status))
    ports = repr(sorted(repr(sorted(p.items())) for p in summary.get("Ports") or []))
    return (str(summary["Id"]), str(summary.get("State")), steady, ports)


class ContainerListing:
    def __init__(self, client: docker.DockerClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[_Key, Container]] = {}
        self._held = threading.local()  # this thread's listings within held(), by filters

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """On this thread, until the block ends, each filters' listing is asked of the
        engine once (then reused); the inspections stay as :meth:`list` keeps them."""
        outer = getattr(self._held, "lists", None)
        self._held.lists = {} if outer is None else outer
        try:
            yield
        finally:
            self._held.lists = outer

    def _summaries(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        lists = getattr(self._held, "lists", None)
        if lists is None:
            return list(self._client.api.containers(all=True, filters=filters))
        key = repr(sorted((name, sorted(values)) for name, values in filters.items()))
        if key not in lists:
            lists[key] = list(self._client.api.containers(all=True, filters=filters))
        return lists[key]

    def list(self, filters: dict[str, Any]) -> list[Container]:
        """Every container (running or not) the filters select (a dict of lists, as the
        engine takes them), inspected."""
        found = []
        for summary in self._summaries(filters):
            key = summary_key(summary)
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
