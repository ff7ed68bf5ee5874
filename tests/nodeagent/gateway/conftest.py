"""Fixtures for the gateway's tests: the real gateway process and its ticket key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.protocol_gateway import GatewayKey
from tests.nodeagent.gateway.gateway_process import GatewayProcess, new_key


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path / "gateway.log")
    yield process
    process.stop()


@pytest.fixture
def ticket_key() -> tuple[GatewayKey, bytes]:
    """The node's ticket key: as the state carries it, and as bytes to sign with."""
    return new_key()
