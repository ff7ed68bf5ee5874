"""The gateway's home files: streaming HTTP/1.1 on the gateway's one port (issue 34). No Django.

The browser's file bytes go straight between it and the home on this node, never through
the portal, in constant memory: at most one chunk (:data:`CHUNK_BYTES`) and the stream's
bounded buffer (:data:`READ_LIMIT`) per transfer, the socket's drain awaited before the next.

``GET /files/download?ticket=…``
    The file the ticket's ``path`` names, with Content-Length, Content-Disposition (its
    name; RFC 5987 ``filename*`` for any name), ``X-Content-Type-Options: nosniff``. The
    page navigates here, so a browser sends no Origin; one that does must send an allowed one.
``OPTIONS /files/upload``
    The CORS preflight: answered for exactly an origin of the state's, else 403.
``PUT /files/upload`` (or ``POST``), the ticket in ``X-Deskpool-Ticket``
    A Content-Length body (no chunked encoding), written into a temporary file beside the
    ticket's ``path`` and renamed over it once all of it came (a broken upload leaves
    nothing). 413 at once when the home's quota (the ticket's ``quota``) has no room for
    it; 507 when the disk says no space. 201 with ``{"path", "size"}`` when done.

Both check the ticket as the sockets do (:func:`~.tickets.check_ticket`: signature, node,
purpose, expiry, once; then the state: the desktop runs here, the ticket is not revoked) and
open the home one name at a time without following links
(:class:`nodeagent.home_files.HomeFolder`). A refused upload is answered with ``{"code",
"reason"}`` (``code``: the close code of :mod:`.codes`), a refused download with a sentence
in plain text (:mod:`.http_wire`); one connection carries one request. What was
opened is reported as the sockets' links are (``opened``; ``closed`` with the bytes), and
revocation ends a transfer as it ends a link.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs

from nodeagent.gateway.codes import (
    CLOSE_BUSY,
    CLOSE_SESSION_ENDED,
    GATEWAY_DOWNLOAD_PATH,
    GATEWAY_UPLOAD_PATH,
)
from nodeagent.gateway.events import EventWriter
from nodeagent.gateway.http_wire import (
    REFUSAL_HEADER,
    STALL_S,
    Head,
    HttpError,
    answer,
    content_length,
    download_head,
    download_refusal,
    read_head,
)
from nodeagent.gateway.links import LinkEnded, Network, browser_address, gateway_event
from nodeagent.gateway.registry import Registry
from nodeagent.gateway.tickets import ReplayMemo, Ticket, TicketRefused, check_ticket
from nodeagent.home_files import HomeFileError, HomeFolder, HomeFull, Upload
from nodeagent.protocol_gateway import TRANSFER_DONE
from nodeagent.wire_types import cut_reason

log = logging.getLogger(__name__)

FILES_PATHS = {GATEWAY_UPLOAD_PATH: "upload", GATEWAY_DOWNLOAD_PATH: "download"}
TICKET_HEADER = "x-deskpool-ticket"
HEAD_WAIT_S = 10.0  # for them
CHUNK_BYTES = 1024 * 1024  # read from the file, or gathered for it, at a time
READ_LIMIT = 256 * 1024  # the stream stops reading the socket past twice this
LINGER_S = 1.0  # after a refusal, read and drop the body this long before closing
T = TypeVar("T")


@dataclass(eq=False)
class Transfer:
    """One upload or download under way: what the registry holds and may revoke."""

    ticket: Ticket
    address: str
    events: EventWriter
    task: asyncio.Task[Any] | None = None
    code: int | None = None
    why: str = ""
    opened: bool = False
    bytes_in: int = 0
    bytes_out: int = 0

    @property
    def purpose(self) -> str:
        return self.ticket.pur

    def end(self, code: int, why: str) -> None:
        """Revoked: the transfer stops now, an upload's temporary file is removed."""
        if self.code is None:
            self.code, self.why = code, why
        if self.task is not None:
            self.task.cancel()

    def report_opened(self) -> None:
        self.opened = True
        self.events.emit(gateway_event(self.ticket, "opened", address=self.address))

    def report_closed(self) -> None:
        self.events.emit(
            gateway_event(
                self.ticket,
                "closed",
                bytes_in=self.bytes_in,
                bytes_out=self.bytes_out,
                reason=cut_reason(f"{self.code}: {self.why}" if self.code else self.why),
            )
        )


def is_files_request(line: bytes) -> bool:
    """Whether a request line names a files path (the rest goes to the WebSocket server)."""
    parts = line.split(b" ")
    return len(parts) == 3 and parts[1].partition(b"?")[0].decode("latin-1") in FILES_PATHS


class FilesHandler:
    """Serves the files paths on connections the gateway's listener hands over (:meth:`take`)."""

    def __init__(
        self,
        registry: Registry,
        events: EventWriter,
        memo: ReplayMemo,
        trusted_proxies: Sequence[Network] = (),
    ) -> None:
        self.registry = registry
        self.events = events
        self.memo = memo  # the sockets' own: a ticket opens once on this node
        self.trusted_proxies = tuple(trusted_proxies)
        self.tasks: set[asyncio.Task[None]] = set()

    def take(self, transport: asyncio.Transport, received: bytes) -> None:
        """Serve the connection ``transport`` whose first bytes were ``received``."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(received)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        task = loop.create_task(self.serve(reader, writer))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        """The gateway stops: end every transfer."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One request, then the connection closes."""
        cors: dict[str, str] = {}
        answered = uploading = False
        try:
            async with asyncio.timeout(HEAD_WAIT_S):
                head = await read_head(reader)
            if FILES_PATHS.get(head.path) == "upload":
                uploading = True
                cors = self.cors(head)
                await self.upload(head, reader, writer, cors)
            else:
                await self.download(head, writer)
            answered = True
        except HttpError as error:
            if uploading:  # the page's script reads the reason
                body: object = {"code": error.code, "reason": str(error)}
            else:  # a person reads it, in the tab the download was to land in
                body = download_refusal(error)
            extra = cors if uploading else {REFUSAL_HEADER: str(error.code)}
            await answer(writer, error.status, body, extra)
            if cors:
                await linger(reader)
            answered = True
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError) as error:
            log.info("a files connection ended early: %s", error or type(error).__name__)
        finally:
            if answered:  # what is still buffered goes out, then the socket closes
                writer.close()
                with suppress(Exception):
                    async with asyncio.timeout(STALL_S):
                        await writer.wait_closed()
            writer.transport.abort()  # anything it did not finish is not to be finished

    def cors(self, head: Head) -> dict[str, str]:
        """An upload's CORS headers: the page's origin must be one of the state's."""
        origin = head.headers.get("origin")
        if origin is None or origin not in self.registry.state.origins:
            log.info("refused an upload from origin %r", (origin or "")[:100])
            raise HttpError(403, "Forbidden origin")
        return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}

    def admit(self, head: Head, text: str | None, purpose: str, writer: Any) -> Transfer:
        """A transfer for a good ticket, held by the registry; HttpError if refused."""
        try:
            ticket = check_ticket(
                text or "",
                keys=self.registry.keys,
                node_id=self.registry.state.node_id,
                purpose=purpose,
                memo=self.memo,
            )
            self.registry.room_for(ticket)
        except (TicketRefused, LinkEnded) as refused:
            log.info("refused a %s: %s (%d)", purpose, refused.args[0], refused.code)
            raise HttpError(status_of(refused.code), refused.args[0], refused.code) from refused
        peer = writer.get_extra_info("peername")
        address = browser_address(
            str(peer[0]) if peer else "", head.headers.get("x-real-ip"), self.trusted_proxies
        )
        transfer = Transfer(ticket, address, self.events, asyncio.current_task())
        self.registry.hold(transfer)
        return transfer

    def home_of(self, ticket: Ticket) -> Path:
        home_dir = self.registry.sessions[ticket.sid].home_dir
        if not home_dir:
            raise HttpError(409, "This desktop's home is not on this node.")
        return Path(home_dir)

    async def upload(
        self,
        head: Head,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        cors: dict[str, str],
    ) -> None:
        if head.method == "OPTIONS":
            await answer(writer, 204, None, cors | PREFLIGHT)
            return
        if head.method not in ("PUT", "POST"):
            raise HttpError(405, "Upload with PUT.")
        length = content_length(head)
        transfer = self.admit(head, head.headers.get(TICKET_HEADER), "upload", writer)
        upload: Upload | None = None
        try:
            with HomeFolder.open(self.home_of(transfer.ticket)) as home:
                upload = await in_thread(
                    home.begin_upload, transfer.ticket.path, length, transfer.ticket.quota,
                    undo=Upload.abort,
                )  # fmt: skip
            transfer.report_opened()
            if head.headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await receive(reader, upload, transfer)
            await in_thread(upload.finish)
            transfer.why = TRANSFER_DONE
            await answer(writer, 201, {"path": transfer.ticket.path, "size": length}, cors)
        except HomeFull as full:
            transfer.why = str(full)
            raise HttpError(413, str(full)) from full
        except HomeFileError as error:
            transfer.why = str(error)
            no_space = upload is not None and upload.no_space
            raise HttpError(507 if no_space else 409, str(error)) from error
        except asyncio.CancelledError:
            transfer.why = transfer.why or "the gateway stops"
            raise
        finally:
            if upload is not None:
                upload.abort()  # a no-op once finished
            self.finish(transfer)

    async def download(self, head: Head, writer: asyncio.StreamWriter) -> None:
        if head.method != "GET":
            raise HttpError(405, "Download with GET.")
        origin = head.headers.get("origin")  # a navigation sends none
        if origin is not None and origin not in self.registry.state.origins:
            raise HttpError(403, "It was asked for by a page this gateway does not serve")
        ticket = parse_qs(head.query).get("ticket", [""])[0]
        transfer = self.admit(head, ticket, "download", writer)
        try:
            try:
                with HomeFolder.open(self.home_of(transfer.ticket)) as home:
                    file, size = await in_thread(
                        home.open_file, transfer.ticket.path, undo=lambda got: got[0].close()
                    )
            except HomeFileError as error:
                transfer.why = str(error)
                raise HttpError(404, str(error)) from error
            with file:
                transfer.report_opened()
                writer.write(download_head(transfer.ticket.path, size))
                await send(writer, file, size, transfer)
                transfer.why = TRANSFER_DONE
        except asyncio.CancelledError:
            transfer.why = transfer.why or "the gateway stops"
            raise
        finally:
            self.finish(transfer)

    def finish(self, transfer: Transfer) -> None:
        self.registry.remove(transfer)
        if transfer.opened:
            transfer.report_closed()
        log.info(
            "session %s: %s of %d bytes in, %d out, ended (%s)",
            transfer.ticket.sid,
            transfer.purpose,
            transfer.bytes_in,
            transfer.bytes_out,
            transfer.why or "cut short",
        )


PREFLIGHT = {
    "Access-Control-Allow-Methods": "PUT, POST",
    "Access-Control-Allow-Headers": "X-Deskpool-Ticket, Content-Type",
    "Access-Control-Max-Age": "600",
}


def status_of(code: int) -> int:
    """The HTTP status of a refused ticket's close code."""
    if code == CLOSE_SESSION_ENDED:
        return 410
    if code == CLOSE_BUSY:
        return 429
    return 403


async def linger(reader: asyncio.StreamReader) -> None:
    """After a refusal: take what the browser still sends, for a moment, so that closing
    with unread bytes (a reset) does not lose the answer before the browser reads it."""
    with suppress(Exception):
        async with asyncio.timeout(LINGER_S):
            while await reader.read(READ_LIMIT):
                pass


async def in_thread(
    function: Callable[..., T], *args: Any, undo: Callable[[T], object] | None = None
) -> T:
    """``function(*args)`` on a thread. Cancelled, it waits for the thread's step to end (no
    file is closed under a write) and undoes what it returned; then the cancel goes on."""
    future = asyncio.ensure_future(asyncio.to_thread(function, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        try:
            late = await future
        except Exception:
            raise asyncio.CancelledError from None
        if undo is not None:
            undo(late)
        raise


async def receive(reader: asyncio.StreamReader, upload: Upload, transfer: Transfer) -> None:
    """The body into the upload, a gathered chunk at a time; ConnectionError if cut short."""
    remaining = upload.size
    while remaining:
        chunk = bytearray()
        while remaining and len(chunk) < CHUNK_BYTES:
            async with asyncio.timeout(STALL_S):
                data = await reader.read(min(READ_LIMIT, remaining))
            if not data:
                raise ConnectionResetError("the upload was cut short")
            chunk += data
            remaining -= len(data)
            transfer.bytes_in += len(data)
        await in_thread(upload.write, bytes(chunk))


async def send(writer: asyncio.StreamWriter, file: Any, size: int, transfer: Transfer) -> None:
    """``size`` bytes of the file, a chunk at a time, each after the socket drained."""
    remaining = size
    started = time.monotonic()
    while remaining:
        chunk = await in_thread(file.read, min(CHUNK_BYTES, remaining))
        if not chunk:  # it shrank meanwhile: the browser sees a cut download
            raise ConnectionAbortedError("the file shrank while it was sent")
        writer.write(chunk)
        remaining -= len(chunk)
        transfer.bytes_out += len(chunk)
        async with asyncio.timeout(STALL_S):
            await writer.drain()
    log.debug("sent %d bytes in %.1f s", size, time.monotonic() - started)
    writer.write_eof()
