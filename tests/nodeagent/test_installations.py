"""Two portals on one Docker engine leave each other's desktops alone (issue 25, item 10).

Each portal's agents name and label their containers, volumes and networks with the
portal's installation id and adopt or remove only their own, even under the same node name.
"""

from __future__ import annotations

import pytest

from nodeagent.protocol import LABEL_INSTALLATION, LABEL_NODE
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import container_name
from nodeagent.runtime.desktop_network import network_name, remove_networks
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.test_reconcile import converge

pytestmark = pytest.mark.docker


def test_a_reconcile_of_one_installation_does_not_stop_the_others_desktops(
    docker_client, tiny_image, node_name, sessions_dir, make_session, fake_portal
) -> None:  # type: ignore[no-untyped-def]
    ours = DockerRuntime(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir / "a",
        ready_timeout_s=30,
        installation="aaaa11112222",
    )
    theirs = DockerRuntime(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir / "b",
        ready_timeout_s=30,
        installation="bbbb33334444",
    )
    try:
        a = Reconciler(ours, fake_portal)
        wanted = make_session(4201, image=tiny_image)
        converge(a, [wanted], steps=2)
        b = theirs.start(make_session(4201, image=tiny_image))

        [mine] = ours.list_managed()
        assert mine.container_id != b.container_id
        assert [c.container_id for c in theirs.list_managed()] == [b.container_id]
        container = docker_client.containers.get(mine.container_id)
        assert container.name == container_name(node_name, 4201, "aaaa11112222")
        assert container.labels[LABEL_INSTALLATION] == "aaaa11112222"
        network = docker_client.networks.get(network_name(node_name, "aaaa11112222"))
        assert network.attrs["Labels"][LABEL_INSTALLATION] == "aaaa11112222"
        home = docker_client.volumes.get(wanted.home_volume)
        assert home.attrs["Labels"][LABEL_INSTALLATION] == "aaaa11112222"

        # Our portal wants nothing any more: only our desktop goes.
        converge(a, [], steps=2)
        assert ours.list_managed() == []
        assert docker_client.containers.get(b.container_id).status == "running"
        assert fake_portal.states(4201) == ["STARTING", "RUNNING", "ENDED"]
        a.close()

        # Their agent restarts: it adopts its own desktop (and only that one).
        again = DockerRuntime(
            docker_client,
            node_name=node_name,
            sessions_dir=sessions_dir / "b",
            ready_timeout_s=30,
        )
        again.use_installation("bbbb33334444")
        restarted = Reconciler(again, fake_portal)
        summary = restarted.step([make_session(4201, image=tiny_image)])
        assert restarted.wait_idle(60)
        assert summary.adopted == [4201] and summary.starting == []
        assert [c.container_id for c in again.list_managed()] == [b.container_id]
        restarted.close()
    finally:
        theirs.stop(4201)
        for installation in ("aaaa11112222", "bbbb33334444"):
            remove_networks(docker_client, node_name, installation)
        for volume in docker_client.volumes.list(filters={"label": f"{LABEL_NODE}={node_name}"}):
            volume.remove(force=True)


def test_an_agent_without_an_installation_id_leaves_labelled_desktops_alone(
    docker_client, tiny_image, node_name, sessions_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    # An agent of an older portal (no id) next to a newer portal's agent of the same name.
    old = DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir / "a")
    new = DockerRuntime(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir / "b",
        installation="cccc55556666",
    )
    try:
        started = new.start(make_session(4202, image=tiny_image))
        assert old.list_managed() == []
        old.stop(4202)
        assert docker_client.containers.get(started.container_id).status == "running"
    finally:
        new.stop(4202)
        remove_networks(docker_client, node_name, "cccc55556666")
