"""The agent protocol's home-file tasks: the Files page's listings and deletions, which the
node keeping a person's home carries out (docs/agent-protocol.md, "Home files"). Part of the
one definition of the wire with :mod:`nodeagent.protocol`, which lists the pending tasks in
``DesiredState.home_tasks``. No Django. A file's bytes are no task: uploads and downloads go
between the browser and the node's gateway (:mod:`nodeagent.gateway.files`), which opens the
paths :func:`home_path` allows.

The agent never listens for the portal: a task reaches it in its desired state, and it
answers by a call of its own (under ``/api/agent/v1/``, node token):

``POST home-tasks/<id>/report/``
    :class:`HomeTaskReport` -> :class:`HomeTaskAnswer`; 409 :class:`~nodeagent.protocol.
    ConflictAnswer` when the task is no longer pending (the agent drops it).

A task of another node is 404, as if it did not exist: a node is trusted only for itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from .wire_types import ID_MAX, AgentMessage, PortalMessage, Reason

# A path inside a home, as the Files page names it: at most this many characters.
HOME_PATH_MAX = 1024
# A file or folder name (what Linux file systems allow).
HOME_NAME_MAX = 255
# A listing holds at most this many entries (the first, by name); ``truncated`` says more.
HOME_LIST_MAX = 1000
# Bytes in a PostgreSQL bigint (sizes of files and homes).
BYTES_MAX = 2**63 - 1

HomeTaskKind = Literal["list", "delete"]
HomeEntryKind = Literal["file", "folder", "link", "other"]


def home_path(value: str) -> str:
    """A path relative to the home: '' (the home itself) or names joined by '/', none of them
    '.', '..' or empty, no leading '/', no NUL or other control character. The agent still
    opens it one name at a time without following links (a desktop can make any link)."""
    if value == "":
        return value
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must not contain control characters")
    parts = value.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError("must be names joined by '/', without '.', '..' or empty names")
    if any(len(part.encode()) > HOME_NAME_MAX for part in parts):
        raise ValueError(f"each name must be at most {HOME_NAME_MAX} bytes")
    return value


HomePath = Annotated[str, Field(max_length=HOME_PATH_MAX), AfterValidator(home_path)]
Bytes = Annotated[int, Field(ge=0, le=BYTES_MAX)]


class HomeTask(PortalMessage):
    """One thing to do in a person's home on this node, listed in ``DesiredState.home_tasks``
    until the agent reports it (or it times out on the portal)."""

    id: int = Field(ge=1, le=ID_MAX)
    kind: HomeTaskKind
    home_volume: str = Field(
        min_length=1, max_length=200, description="The home, as DesiredSession.home_volume."
    )
    path: HomePath = Field(
        default="",
        description="list: the folder ('' is the home); delete: the file or folder.",
    )


class HomeEntry(AgentMessage):
    """One name in a listed folder (links are listed, never followed)."""

    name: str = Field(min_length=1, max_length=HOME_NAME_MAX)
    kind: HomeEntryKind
    size: Bytes = Field(default=0, description="A file's size; 0 for anything else.")
    modified: datetime


class HomeTaskReport(AgentMessage):
    """``POST home-tasks/<id>/report/``: how the task ended."""

    ok: bool
    reason: Reason = Field(
        default="", description="When not ok: why, in a sentence the person is shown."
    )
    entries: list[HomeEntry] = Field(default_factory=list, max_length=HOME_LIST_MAX)
    truncated: bool = Field(default=False, description="list: the folder holds more entries.")
    used_bytes: Bytes | None = Field(
        default=None, description="What the whole home holds after the task, if measured."
    )


class HomeTaskAnswer(PortalMessage):
    state: str = Field(description="The portal's state of the task: DONE or FAILED.")
