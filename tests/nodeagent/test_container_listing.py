"""Listing a node's containers inspects only what changed (nodeagent/runtime/container_listing.py),
on the real engine: a second listing of unchanged containers makes no inspection, a container
that started is inspected again (its state is new), and one removed between the listing and
its inspection is left out instead of failing the listing."""

from __future__ import annotations

import pytest
from docker.models.containers import ContainerCollection

from nodeagent.protocol import LABEL_MANAGED, LABEL_NODE
from nodeagent.runtime.container_listing import ContainerListing
from tests.conftest import TEST_IMAGE

pytestmark = pytest.mark.docker


class CountingGets:
    """Counts the inspections (``containers.get``) a listing makes; can remove a container
    just before its inspection, as another thread of the agent might."""

    def __init__(self, client) -> None:  # type: ignore[no-untyped-def]
        self.client = client
        self.original = ContainerCollection.get
        self.ids: list[str] = []
        self.remove_first: str | None = None

    def get(self, collection, container_id: str):  # type: ignore[no-untyped-def]
        self.ids.append(container_id)
        if container_id == self.remove_first:
            self.client.api.remove_container(container_id, force=True)
        return self.original(collection, container_id)


def test_unchanged_containers_are_not_inspected_again(docker_client, node_name, monkeypatch):
    labels = {LABEL_MANAGED: "true", LABEL_NODE: node_name}
    made = [
        docker_client.containers.create(TEST_IMAGE, entrypoint=["sleep", "60"], labels=labels)
        for _ in range(3)
    ]
    gets = CountingGets(docker_client)
    # (client.containers is a new collection at each use: the class's method is wrapped)
    monkeypatch.setattr(
        ContainerCollection, "get", lambda collection, cid: gets.get(collection, cid)
    )
    listing = ContainerListing(docker_client)
    filters = {"label": [f"{key}={value}" for key, value in labels.items()]}

    first = listing.list(filters)
    assert sorted(c.id for c in first) == sorted(c.id for c in made)
    assert all(c.attrs["State"]["Status"] == "created" for c in first)  # inspected in full
    assert len(gets.ids) == 3

    gets.ids.clear()
    again = listing.list(filters)
    assert sorted(c.id for c in again) == sorted(c.id for c in made)
    assert gets.ids == []  # nothing changed: no inspection

    made[0].start()
    gets.ids.clear()
    started = {c.id: c for c in listing.list(filters)}
    assert gets.ids == [made[0].id]  # only the one whose state changed
    assert started[made[0].id].attrs["State"]["Running"] is True

    # One removed between the listing and its inspection is left out, not an error.
    gets.remove_first = made[1].id
    made[1].start()  # a new state: inspected again, and gone by then
    left = listing.list(filters)
    assert made[1].id not in {c.id for c in left}
    assert {c.id for c in left} == {made[0].id, made[2].id}
