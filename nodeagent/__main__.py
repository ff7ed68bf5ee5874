"""``python -m nodeagent [--fleet FILE] [--node NAME] [--once]``: run the Deskpool node agent.

``python -m nodeagent migrate-homes [--dry-run] [--remove-old]``: carry the homes of before
the installation id over (:mod:`nodeagent.home_migration`, docs/deploy.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path
from types import FrameType

from nodeagent.addresses import node_hostname
from nodeagent.agent import Agent, AgentExit
from nodeagent.config import AgentConfig, ConfigError, parse_runtime
from nodeagent.gateway.supervisor import GatewaySupervisor, gateway_command
from nodeagent.gateway_link import GatewayLink
from nodeagent.home_migration import main as migrate_homes
from nodeagent.home_migration import warn_old_homes
from nodeagent.mps import MpsSupervisor
from nodeagent.portal_client import PortalClient
from nodeagent.probe import make_probe
from nodeagent.probe.nvml import NvmlUnavailable
from nodeagent.probe.simulated import FleetError
from nodeagent.runtime import RuntimeUnavailable, docker_client, make_runtime
from nodeagent.runtime.base import DesktopRuntime


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nodeagent",
        description="Deskpool node agent. Configured by DESKPOOL_* variables; flags win. "
        "'python -m nodeagent migrate-homes --help': carry old homes over.",
    )
    parser.add_argument("--fleet", type=Path, help="simulated fleet YAML (DESKPOOL_FLEET_FILE)")
    parser.add_argument("--node", help="node name (DESKPOOL_NODE_NAME; default: hostname)")
    parser.add_argument("--portal", help="portal URL (DESKPOOL_PORTAL_URL)")
    parser.add_argument("--runtime", help="docker, simulated or auto (DESKPOOL_RUNTIME)")
    parser.add_argument("--once", action="store_true", help="register, reconcile once, exit")
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    return parser.parse_args(argv)


def config_from(args: argparse.Namespace) -> AgentConfig:
    config = AgentConfig.from_env()
    if args.fleet is not None:
        config = replace(config, fleet_file=args.fleet)
    if args.node:
        config = replace(config, node_name=args.node)
    if args.portal:
        config = replace(config, portal_url=args.portal.rstrip("/"))
    if args.runtime:
        config = replace(config, runtime=parse_runtime(args.runtime))
    return config


def gateway_for(
    config: AgentConfig,
    client: PortalClient,
    *,
    once: bool,
    runtime: DesktopRuntime | None = None,
) -> GatewayLink | None:
    """The node's one desktop gateway, on its management address; none for ``--once`` (it
    serves no one) or with ``DESKPOOL_GATEWAY=off``."""
    if once or not config.gateway_enabled:
        return None
    supervisor = GatewaySupervisor(
        config.publish_address,
        command=gateway_command(
            config.publish_address, config.gateway_port, config.gateway_trusted_proxies
        ),
    )
    home_folder = runtime.home_folder if runtime is not None else None
    return GatewayLink(supervisor, client, home_folder=home_folder)


def configure_logging(node_name: str, verbose: bool) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.INFO,
        format=f"%(asctime)s %(levelname)s [{node_name}] %(name)s: %(message)s",
    )
    for noisy in ("httpx", "httpcore", "urllib3", "websockets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["migrate-homes"]:
        return migrate_homes(argv[1:])
    args = parse_args(argv)
    try:
        config = config_from(args)
    except ConfigError as error:
        print(f"deskpool agent: {error}", file=sys.stderr)
        return 2
    try:
        node_hostname(config.node_name)
    except ValueError as error:
        print(f"deskpool agent: the node name {config.node_name!r} {error}", file=sys.stderr)
        return 2
    configure_logging(config.node_name, args.verbose)
    log = logging.getLogger("nodeagent")
    try:
        # The GPUs in share mode: one MPS control daemon each, for the probe and the runtime.
        mps = MpsSupervisor.from_config(config)
        probe = make_probe(config, mps)
        runtime = make_runtime(config, mps)
    except (FleetError, NvmlUnavailable, RuntimeUnavailable) as error:
        log.error("%s", error)
        if isinstance(error, NvmlUnavailable):
            log.error("no NVIDIA driver here: pass --fleet FILE to run a simulated node")
        return 2
    if runtime.kind == "docker":
        warn_old_homes(docker_client(), config)
    client = PortalClient(config.portal_url)
    gateway = gateway_for(config, client, once=args.once, runtime=runtime)
    agent = Agent(config, client=client, probe=probe, runtime=runtime, gateway=gateway)

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info(
            "%s received: stopping the agent (desktops keep running)", signal.Signals(signum).name
        )
        agent.stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        agent.run(once=args.once)
    except AgentExit as error:
        log.error("%s", error)
        return error.exit_code
    finally:
        if gateway is not None:
            gateway.close()  # also when the agent exits early: the gateway goes with it
        client.close()
        probe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
