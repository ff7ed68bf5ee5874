"""One sign-in backend's contribution to the settings (no Django imports)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Secret = Callable[[str, str], str]


@dataclass
class Part:
    """What one sign-in backend adds to the settings when it is enabled."""

    name: str
    backends: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
