"""The gateway's home folders (issue 36, item 2): a home volume's folder is asked once while
its desktop runs, and asked again once the desktop is gone, because a home carried into a
disk-bounded image at its next start lives in another folder then."""

from __future__ import annotations

from pathlib import Path

from nodeagent.gateway_link import GatewayLink
from nodeagent.portal_client import PortalClient
from nodeagent.protocol import DesiredState
from nodeagent.runtime.base import ManagedContainer
from tests.nodeagent.test_gateway_link import FakeGateway, desired_session


def test_a_home_folder_is_asked_again_after_its_desktop_is_gone(tmp_path: Path) -> None:
    folders = {"home-7": tmp_path / "volumes" / "home-7" / "_data"}
    asked: list[str] = []

    def home_folder(volume: str, *, create: bool) -> Path | None:
        asked.append(volume)
        return folders.get(volume)

    gateway = FakeGateway()
    link = GatewayLink(gateway, PortalClient("http://127.0.0.1:9"), home_folder=home_folder)
    desktop = ManagedContainer(session_id=7, container_id="c7", running=True, status="running",
                               host="127.0.0.1", port=5901)  # fmt: skip
    with_7 = DesiredState.model_validate({"sessions": [desired_session(7)]})
    link.feed(1, with_7, lambda: {7: desktop})
    link.feed(1, with_7, lambda: {7: desktop})
    assert asked == ["home-7"]  # once while it runs
    assert gateway.states[-1].sessions[0].home_dir == str(folders["home-7"])

    link.feed(1, DesiredState.model_validate({"sessions": []}), dict)  # the desktop is gone
    folders["home-7"] = tmp_path / "homes" / "home-7"  # carried into an image at its start
    link.feed(1, with_7, lambda: {7: desktop})
    assert asked == ["home-7", "home-7"]
    assert gateway.states[-1].sessions[0].home_dir == str(tmp_path / "homes" / "home-7")
