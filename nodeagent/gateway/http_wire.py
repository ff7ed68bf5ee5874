"""The gateway's HTTP/1.1 on the wire, for the home files (:mod:`.files`): a request's head
read within bounds, and the answers written. No Django.

A refused upload is answered with JSON ``{"code", "reason"}`` (the page's script reads it);
a refused download with a plain-text sentence a person can read, since the browser shows it
in the tab the download was to land in, its close code in ``X-Deskpool-Refusal``.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from dataclasses import dataclass
from urllib.parse import quote

from nodeagent.gateway.codes import CLOSE_TICKET_INVALID

HEAD_MAX_BYTES = 16 * 1024  # a request's line and headers, at most
STALL_S = 60.0  # a body, or a browser's reading, that makes no progress this long ends it
REFUSAL_HEADER = "X-Deskpool-Refusal"  # a plain-text refusal's close code


class HttpError(Exception):
    """Answer with ``status`` and the reason; nothing was opened (or it is undone)."""

    def __init__(self, status: int, reason: str, code: int = 0) -> None:
        super().__init__(reason)
        self.status = status
        self.code = code


@dataclass
class Head:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # names in lower case


REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    410: "Gone",
    411: "Length Required",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    507: "Insufficient Storage",
}


async def read_head(reader: asyncio.StreamReader) -> Head:
    """The request line and headers (at most :data:`HEAD_MAX_BYTES`); HttpError if malformed."""
    try:
        data = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as error:
        raise HttpError(431, "The request's headers are too long.") from error
    if len(data) > HEAD_MAX_BYTES:
        raise HttpError(431, "The request's headers are too long.")
    lines = data.decode("latin-1").split("\r\n")[:-2]
    try:
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise HttpError(400, "Not an HTTP request.") from None
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(400, "HTTP/1.1 only.")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        name = name.strip().lower()
        if not colon or not name or name in headers and name in ("content-length", "origin"):
            raise HttpError(400, "A malformed header.")
        headers[name] = value.strip()
    path, _, query = target.partition("?")
    return Head(method, path, query, headers)


def content_length(head: Head) -> int:
    if "transfer-encoding" in head.headers:
        raise HttpError(411, "Send the file with a Content-Length, not chunked.")
    text = head.headers.get("content-length")
    if text is None:
        raise HttpError(411, "Send the file with a Content-Length.")
    if not text.isdigit() or len(text) > 18:
        raise HttpError(400, "A malformed Content-Length.", CLOSE_TICKET_INVALID)
    return int(text)


def download_head(path: str, size: int) -> bytes:
    """The download's status line and headers."""
    name = posixpath.basename(path)
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Length": str(size),
        "Content-Disposition": (
            f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"
        ),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "no-store",
    }
    return response_head(200, headers)


def response_head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}"]
    lines += [f"{name}: {value}" for name, value in (headers | {"Connection": "close"}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def download_refusal(error: HttpError) -> str:
    """What a person reads in the tab of a download the gateway refused (in English: the
    gateway has no catalogue; the portal's own refusals are pages in the person's language)."""
    why = str(error).strip().rstrip(".") or REASONS.get(error.status, "refused").lower()
    why = why[0].upper() + why[1:]
    return (
        f"The file could not be downloaded. {why}.\n\n"
        "A download link works once and for a few minutes only: go back to the Files page "
        "or your desktop's drawer and choose Download again.\n"
    )


async def answer(
    writer: asyncio.StreamWriter, status: int, body: object, headers: dict[str, str]
) -> None:
    """A whole (small) response: JSON ``body``, plain text if ``body`` is a str, or none."""
    fields = dict(headers)
    if isinstance(body, str):
        data = body.encode()
        fields["Content-Type"] = "text/plain; charset=utf-8"
        fields["X-Content-Type-Options"] = "nosniff"
        fields["Content-Security-Policy"] = "default-src 'none'; sandbox"
    else:
        data = b"" if body is None else json.dumps(body).encode()
        if body is not None:
            fields["Content-Type"] = "application/json"
    fields["Content-Length"] = str(len(data))
    fields["Cache-Control"] = "no-store"
    try:
        writer.write(response_head(status, fields) + data)
        async with asyncio.timeout(STALL_S):
            await writer.drain()
        writer.write_eof()
    except (ConnectionError, TimeoutError, RuntimeError):
        pass
