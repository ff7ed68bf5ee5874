"""A short excerpt of what someone typed, for an error message that names it.

Error messages may quote the input at fault ("There is no course “…”") but never all of it:
at most :data:`EXCERPT_MAX` characters, control characters dropped, an ellipsis where it was
cut. Pages escape it as they render it (Django's autoescape); JSON answers quote it as data.
"""

from __future__ import annotations

EXCERPT_MAX = 40


def excerpt(value: object, limit: int = EXCERPT_MAX) -> str:
    text = "".join(ch for ch in str(value) if ch.isprintable())
    return text if len(text) <= limit else text[: limit - 1] + "…"
