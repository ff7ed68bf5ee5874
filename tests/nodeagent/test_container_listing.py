"""Listing a node's containers inspects only what changed (nodeagent/runtime/container_listing.py),
on the real engine: a second listing of unchanged containers makes no inspection, a container
that started is inspected again (its state is new), and one removed between the listing and
its inspection is left out instead of failing the listing."""

from __future__ import annotations

import time

import pytest
from docker.models.containers import ContainerCollection

from nodeagent.protocol import LABEL_MANAGED, LABEL_NODE, LABEL_WARM
from nodeagent.runtime.container_listing import ContainerListing, summary_key
from nodeagent.runtime.docker_desktops import DesktopContainers
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


def test_a_status_whose_duration_changed_is_not_inspected_again(
    docker_client, node_name, monkeypatch
):  # type: ignore[no-untyped-def]
    """The engine's Status says how long a container has been up ("Up Less than a second",
    "Up 2 seconds"): a listing a few seconds later finds the same container in the same state
    and makes no inspection (at a class start, each step inspected every warm desktop again
    for it)."""
    labels = {LABEL_MANAGED: "true", LABEL_NODE: node_name}
    made = docker_client.containers.run(
        TEST_IMAGE, entrypoint=["sleep", "60"], labels=labels, detach=True
    )
    gets = CountingGets(docker_client)
    monkeypatch.setattr(
        ContainerCollection, "get", lambda collection, cid: gets.get(collection, cid)
    )
    listing = ContainerListing(docker_client)
    filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
    statuses = [docker_client.api.containers(filters=filters)[0]["Status"]]
    assert [c.id for c in listing.list(filters)] == [made.id]
    assert gets.ids == [made.id]
    time.sleep(2.1)  # the engine's duration has moved on by at least two seconds
    statuses.append(docker_client.api.containers(filters=filters)[0]["Status"])
    assert statuses[0] != statuses[1]
    assert [c.attrs["State"]["Running"] for c in listing.list(filters)] == [True]
    assert gets.ids == [made.id]  # no second inspection


@pytest.mark.parametrize(
    "before, after",
    [
        ("Up 5 minutes (health: starting)", "Up 5 minutes (healthy)"),
        ("Exited (0) 2 seconds ago", "Exited (137) 2 seconds ago"),
        ("Up 3 seconds", "Up 3 seconds (Paused)"),
    ],
)
def test_a_status_that_says_something_new_makes_a_new_key(before, after):  # type: ignore[no-untyped-def]
    one = {"Id": "c1", "State": "running", "Ports": []}
    assert summary_key({**one, "Status": before}) != summary_key({**one, "Status": after})
    assert summary_key({**one, "Status": "Up 3 seconds"}) == summary_key(
        {**one, "Status": "Up About an hour"}
    )
    moved = {**one, "Status": "Up 1 second", "Ports": [{"PrivatePort": 6080, "PublicPort": 1}]}
    assert summary_key(moved) != summary_key(
        {**moved, "Ports": [{"PrivatePort": 6080, "PublicPort": 2}]}
    )


def test_a_steps_look_ups_share_one_engine_listing(docker_client, node_name, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """Within ``held`` (a reconcile step) the node's sessions and its warm desktops are
    looked up from one listing of the engine; the labels a look-up adds are picked from it
    as the engine's filter would (``key`` present, ``key=value`` equal). Outside it, each
    look-up asks the engine again."""
    base = {LABEL_MANAGED: "true", LABEL_NODE: node_name}
    plain = docker_client.containers.create(TEST_IMAGE, entrypoint=["sleep", "60"], labels=base)
    warm = docker_client.containers.create(
        TEST_IMAGE, entrypoint=["sleep", "60"], labels={**base, LABEL_WARM: "k1"}
    )
    listings: list[object] = []
    original = docker_client.api.containers

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        listings.append(kwargs.get("filters"))
        return original(*args, **kwargs)

    monkeypatch.setattr(docker_client.api, "containers", counted)
    desktops = DesktopContainers(docker_client, node_name=node_name, sessions_dir=tmp_path)
    with desktops.one_listing():
        every = {c.id for c in desktops.labelled()}
        warm_ones = {c.id for c in desktops.labelled(LABEL_WARM)}
        keyed = {c.id for c in desktops.labelled(f"{LABEL_WARM}=k1")}
        other_key = {c.id for c in desktops.labelled(f"{LABEL_WARM}=k2")}
    assert every == {plain.id, warm.id}
    assert (warm_ones, keyed, other_key) == ({warm.id}, {warm.id}, set())
    assert len(listings) == 1
    desktops.labelled()
    desktops.labelled(LABEL_WARM)
    assert len(listings) == 3  # outside a step: each asks the engine
