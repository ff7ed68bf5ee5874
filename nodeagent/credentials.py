"""The node credential the portal hands out at the first registration, kept on disk."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodeCredential:
    portal_url: str
    node_id: int
    node_token: str


def load_credential(path: Path) -> NodeCredential | None:
    """The stored credential, or None when there is none (or it cannot be read)."""
    try:
        data = json.loads(path.read_text())
        return NodeCredential(
            portal_url=str(data["portal_url"]),
            node_id=int(data["node_id"]),
            node_token=str(data["node_token"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_credential(path: Path, credential: NodeCredential) -> None:
    """Write the credential readable by the agent's user only."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(asdict(credential), handle)
    temporary.replace(path)


def forget_credential(path: Path) -> None:
    path.unlink(missing_ok=True)
