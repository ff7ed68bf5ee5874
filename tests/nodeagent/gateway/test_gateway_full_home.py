"""An upload into a home the disk bounds (issue 36, item 2), through the real gateway process:
a home image of 64 MB (nodeagent/runtime/home_images.py) and a ticket without a quota, so
that only the disk says no. The gateway answers 507 with the full home's sentence (the page
says it in the person's language), leaves no temporary file and keeps the earlier files."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.home_files import HOME_FULL
from nodeagent.runtime import home_images
from nodeagent.runtime.docker_desktops import DesktopContainers
from tests.nodeagent.conftest import remove_node_objects
from tests.nodeagent.gateway.test_gateway_files import SID, files, leftovers, put, sign  # noqa: F401

pytestmark = pytest.mark.docker
MB = 1024 * 1024
QUOTA_MB = 64


@pytest.fixture
def home(docker_client: Any, tmp_path: Path) -> Iterator[Path]:
    """A 64 MB home image, made as the agent makes a home for the Files page's first upload."""
    node = f"test-{uuid.uuid4().hex[:10]}"
    homes = tmp_path / "homes"
    desktops = DesktopContainers(
        docker_client,
        node_name=node,
        sessions_dir=tmp_path / "sessions",
        homes_dir=homes,
        default_quota_mb=QUOTA_MB,
    )
    name = f"deskpool-test-home-{node}"
    folder = desktops.home_folder(name, create=True)
    assert folder is not None and home_images.is_mounted(folder)
    try:
        yield folder
    finally:
        remove_node_objects(docker_client, node)
        home_images.remove(homes, name)


def test_an_upload_the_disk_has_no_room_for_is_a_507_that_keeps_the_home(
    files: tuple[Any, bytes],  # noqa: F811
    home: Path,
) -> None:
    gateway, key = files
    earlier = b"e" * (8 * MB)
    (home / "earlier.bin").write_bytes(earlier)

    answer = put(gateway, sign(key, "upload", "big.bin"), b"b" * (80 * MB))
    assert answer.status == 507, answer.body
    reason = json.loads(answer.body)["reason"]
    assert reason.startswith(HOME_FULL) and "big.bin" in reason
    assert leftovers(home) == [] and not (home / "big.bin").exists()
    assert hashlib.sha256((home / "earlier.bin").read_bytes()).digest() == (
        hashlib.sha256(earlier).digest()
    )
    # Room again once the earlier file is gone: a file that fits goes through.
    (home / "earlier.bin").unlink()
    assert put(gateway, sign(key, "upload", "fits.bin"), b"f" * (40 * MB)).status == 201
