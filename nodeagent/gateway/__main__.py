"""``python -m nodeagent.gateway --bind ADDR --port PORT [--trusted-proxy CIDR ...]``.

The desktop gateway, a child of the agent: state lines in on standard input, a listening
line and then events out on standard output (:mod:`nodeagent.gateway.messages`), logs on
standard error. It ends when standard input ends (the agent died) or on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
import sys

from websockets.asyncio.server import serve

from nodeagent.gateway.carrying import CLOSE_TIMEOUT_S, MESSAGE_MAX_BYTES, QUEUE_MESSAGES
from nodeagent.gateway.events import EventWriter
from nodeagent.gateway.files import FilesHandler
from nodeagent.gateway.links import Network
from nodeagent.gateway.registry import Registry
from nodeagent.gateway.server import Gateway, connection_class
from nodeagent.gateway.state_feed import follow_states, open_stdin

log = logging.getLogger("nodeagent.gateway")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nodeagent.gateway",
        description="Deskpool's desktop gateway: state lines on stdin, events on stdout.",
    )
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        type=network,
        metavar="CIDR",
        help="a proxy network whose X-Real-IP header names the browser (repeatable)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    return parser.parse_args(argv)


def network(text: str) -> Network:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


async def run(args: argparse.Namespace) -> None:
    """Listen, follow the agent's states, until stdin ends or SIGTERM comes."""
    events = EventWriter(sys.stdout.fileno())
    registry = Registry()
    gateway = Gateway(registry, events, args.trusted_proxy)
    files = FilesHandler(registry, events, gateway.memo, args.trusted_proxy)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with serve(
        gateway.handle,
        args.bind,
        args.port,
        process_request=gateway.process_request,
        create_connection=connection_class(files),
        compression=None,
        max_size=MESSAGE_MAX_BYTES,
        max_queue=QUEUE_MESSAGES,
        close_timeout=CLOSE_TIMEOUT_S,
        server_header=None,
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        events.listening(port)
        log.info("listening on %s port %d", args.bind, port)
        states = asyncio.create_task(follow_states(await open_stdin(), registry.apply))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait((states, stopping), return_when=asyncio.FIRST_COMPLETED)
        for task in (states, stopping):
            task.cancel()
        await files.close()
    log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    # websockets logs each refused handshake at INFO with the request: keep its errors only.
    logging.getLogger("websockets").setLevel(logging.WARNING)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
