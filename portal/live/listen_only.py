"""The live-update sockets only send: a frame a client sends (text, binary, invalid or huge)
is dropped without being decoded (docs/security.md, "Bad input")."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class ListenOnly:
    """Mixed into a consumer that only sends: what a client sends is dropped undecoded (a
    JSON consumer would raise on text that is not JSON, and on any binary frame)."""

    async def receive(self, text_data: Any = None, bytes_data: Any = None, **kwargs: Any) -> None:
        size = len(text_data or bytes_data or "")
        log.debug("dropped a %d-character frame on a listen-only socket", size)
