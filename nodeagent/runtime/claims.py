"""Claim records: which session claimed which warm desktop, kept on the node's disk.

Docker labels cannot change after a container is created, so when a session claims a warm
desktop (labelled ``deskpool.warm=<key>``, no session) the agent records the claim in
``claims/<key>.json`` under the node's sessions folder: session id, placement, user,
course. :meth:`DockerRuntime.list_managed` lists a claimed warm container as that session's
desktop from this record, so a restarted agent adopts it like any other.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from nodeagent.protocol import DesiredSession

logger = logging.getLogger(__name__)

CLAIMS_DIR_NAME = "claims"


class ClaimRecord(BaseModel):
    """One claim, as written to ``claims/<key>.json``; unknown keys are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    key: str = ""
    session_id: int
    placement: str = ""
    user: str = ""
    course: str = ""
    home_volume: str = ""  # the home mounted into it (its usage is measured; older: absent)


class ClaimRecords:
    """The claim records of one node (a folder of small JSON files, each written atomically)."""

    def __init__(self, sessions_dir: Path) -> None:
        self._directory = sessions_dir / CLAIMS_DIR_NAME

    def write(self, key: str, session: DesiredSession) -> None:
        record = ClaimRecord(
            key=key,
            session_id=session.session_id,
            placement=session.placement,
            user=session.user,
            course=session.course,
            home_volume=session.home_volume,
        )
        self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self._directory / f".{key}.json.new"
        temporary.write_text(record.model_dump_json())
        temporary.replace(self._directory / f"{key}.json")

    def by_key(self) -> dict[str, ClaimRecord]:
        """Every record by warm key (unreadable ones are skipped, with a warning)."""
        if not self._directory.is_dir():
            return {}
        found = ((path.stem, _read(path)) for path in self._directory.glob("*.json"))
        return {key: claim for key, claim in found if claim is not None}

    def get(self, key: str) -> ClaimRecord | None:
        """Warm desktop ``key``'s record, or None: one file read, where :meth:`by_key` reads
        them all (a class of 200 claims 200 desktops, each described once claimed)."""
        return _read(self._directory / f"{key}.json")

    def keys_of(self, session_id: int) -> list[str]:
        """The warm keys this session claimed (one, normally)."""
        return [key for key, claim in self.by_key().items() if claim.session_id == session_id]

    def remove(self, key: str) -> None:
        (self._directory / f"{key}.json").unlink(missing_ok=True)


def _read(path: Path) -> ClaimRecord | None:
    """The record in ``path``; None where there is none (or it was removed meanwhile) or it
    is unreadable (with a warning)."""
    try:
        return ClaimRecord.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, ValidationError) as error:
        logger.warning("ignoring unreadable claim record %s: %s", path, error)
        return None
