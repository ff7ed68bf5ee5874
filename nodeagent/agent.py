"""The agent's life: register, then wait for the portal's word, reconcile and heartbeat
until told to stop (docs/agent-protocol.md)."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.config import AgentConfig
from nodeagent.course_files import CourseFolders
from nodeagent.credentials import (
    NodeCredential,
    forget_credential,
    load_credential,
    save_credential,
)
from nodeagent.gateway_link import GatewayLink
from nodeagent.home_tasks import HomeTaskRunner
from nodeagent.portal_client import (
    Conflict,
    PortalClient,
    PortalError,
    PortalUnavailable,
    Unauthorized,
)
from nodeagent.probe import GpuProbe
from nodeagent.probe.host import host_labels, merged_labels
from nodeagent.protocol import (
    AGENT_VERSION,
    PROTOCOL_VERSION,
    DesiredState,
    GpuInventory,
    Heartbeat,
    Registration,
    RegistrationAnswer,
    WaitRequest,
)
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import DesktopRuntime
from nodeagent.runtime.course_mounts import courses_root

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 1.0
DEFAULT_HEARTBEAT_INTERVAL_S = 5.0
# A heartbeat due within this is sent now; no wait is shorter than MIN_WAIT_S.
HEARTBEAT_SLACK_S = MIN_WAIT_S = 0.5
# Longest wait between retries while the portal is unreachable: one request per 10 s per
# node is no load for a portal coming back, and desktop states catch up within seconds of
# it answering again (a 60 s cap meant up to a minute more after a one-minute outage).
MAX_RETRY_S = 10.0
# ``--once`` waits this long for the home tasks it started.
ONCE_HOME_TASKS_S = 120.0


class AgentExit(RuntimeError):
    """The agent cannot go on; the message says why in plain words."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Backoff:
    """Exponential backoff with jitter for an unreachable portal."""

    base_s: float = 1.0
    cap_s: float = 60.0
    failures: int = 0

    def next_delay(self) -> float:
        delay = min(self.cap_s, self.base_s * 2**self.failures)
        self.failures += 1
        return float(delay * random.uniform(0.5, 1.0))

    def reset(self) -> None:
        self.failures = 0


class Agent:
    """One node agent: the glue between probe, runtime, reconciler and portal."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        client: PortalClient,
        probe: GpuProbe,
        runtime: DesktopRuntime,
        read_host_labels: Callable[[], dict[str, str]] = host_labels,
        gateway: GatewayLink | None = None,
    ) -> None:
        self.config = config
        # CPU and NUMA facts of the real host, read afresh at every registration.
        self.read_host_labels = read_host_labels
        self.client = client
        self.probe = probe
        self.runtime = runtime
        # The node's desktop gateway (nodeagent.gateway_link); None: run without one.
        self.gateway = gateway
        self.node_id = 0  # from the registration's answer
        self._registered_mig: list[tuple[Any, ...]] | None = None  # the last registered layout
        self.reconciler = Reconciler(
            runtime, client, start_workers=config.start_workers, on_running=self._feed_gateway
        )
        # The Files page's home tasks, beside the reconciler (nodeagent.home_tasks).
        self.home_tasks = HomeTaskRunner(runtime, client)
        # Course folders' node copies, pulled before each step (nodeagent.course_files).
        self.courses = CourseFolders(
            client,
            courses_root(config.sessions_dir()),
            installation=lambda: str(getattr(runtime, "installation", "")),
            in_use=getattr(runtime, "course_sources", set),
        )
        self.stopping = threading.Event()
        self.backoff = Backoff(cap_s=MAX_RETRY_S)

    # -- registration --------------------------------------------------------------------

    def registration(self, join_token: str | None) -> Registration:
        facts = self.probe.node_facts()
        fields: dict[str, object] = {
            "protocol_version": PROTOCOL_VERSION,
            "agent_version": AGENT_VERSION,
            "hostname": self.config.node_name,
            "address": self.config.publish_address,
            "cpu_count": facts.cpu_count,
            "memory_mb": facts.memory_mb,
            # Host facts under the fleet file's labels under DESKPOOL_LABELS: explicit wins.
            "labels": merged_labels(self.read_host_labels(), facts.labels, self.config.labels),
            "runtime": self.runtime.kind,
            "gpus": self.probe.inventory(),
            "home_root_shared": self.config.home_root is not None,
        }
        if self.gateway is not None and self.gateway.port is not None:
            fields["gateway_port"] = self.gateway.port
        if join_token:  # the first registration only; absent from the body otherwise
            fields["join_token"] = join_token
        return Registration.model_validate(fields)

    def register(self) -> RegistrationAnswer:
        """Register once: with the stored node token if there is one, else the join token."""
        path = self.config.credential_file()
        credential = load_credential(path)
        if credential is not None and credential.portal_url == self.config.portal_url:
            self.client.node_token = credential.node_token
            try:
                return self._register(join_token=None)
            except Unauthorized:
                if not self.config.join_token:
                    raise AgentExit(
                        f"the portal no longer accepts this node's credential ({path}); "
                        "set DESKPOOL_JOIN_TOKEN to a new join token to register again",
                        exit_code=3,
                    ) from None
                logger.warning("stored node credential refused; registering with the join token")
                forget_credential(path)
        if not self.config.join_token:
            raise AgentExit(
                f"no node credential in {path} and no DESKPOOL_JOIN_TOKEN: ask a portal admin "
                "for a join token",
                exit_code=3,
            )
        self.client.node_token = None
        try:
            return self._register(join_token=self.config.join_token)
        except Unauthorized as error:
            raise AgentExit(f"the portal refused the join token: {error}", exit_code=3) from None

    def _register(self, join_token: str | None) -> RegistrationAnswer:
        registration = self.registration(join_token)
        try:
            answer = self.client.register(registration)
        except Conflict as error:
            raise AgentExit(
                f"the portal does not speak agent protocol version {PROTOCOL_VERSION} "
                f"(agent {AGENT_VERSION}): {error}. Upgrade the agent or the portal.",
                exit_code=2,
            ) from None
        except (Unauthorized, PortalUnavailable):
            raise
        except PortalError as error:
            # 400: this agent sends what the portal does not take (e.g. a field a newer
            # agent has and an older portal does not know), or an answer it cannot read.
            raise AgentExit(
                f"the portal refused the registration of agent {AGENT_VERSION}: {error}",
                exit_code=2,
            ) from None
        self.node_id = answer.node_id
        self._registered_mig = mig_layout(registration.gpus)
        if self.gateway is not None:
            self.gateway.registered_port = registration.gateway_port
        if answer.node_token:
            save_credential(
                self.config.credential_file(),
                NodeCredential(self.config.portal_url, answer.node_id, answer.node_token),
            )
        # The portal's installation id names and labels what the runtime makes, and limits
        # what it adopts and removes to its own (another portal may share this engine).
        use_installation = getattr(self.runtime, "use_installation", None)
        if use_installation is not None:
            use_installation(answer.installation_id)
        logger.info(
            "registered as node %s with %d GPU(s), runtime %s%s",
            answer.node_id,
            len(self.probe.inventory()),
            self.runtime.kind,
            " (SIMULATED GPUs)" if self.probe.simulated else "",
        )
        return answer

    def register_until_answered(self) -> RegistrationAnswer | None:
        """Register, waiting out an unreachable portal; None if asked to stop meanwhile."""
        while not self.stopping.is_set():
            try:
                answer = self.register()
                self.backoff.reset()
                return answer
            except PortalUnavailable as error:
                delay = self.backoff.next_delay()
                logger.warning("portal unreachable (%s); retrying in %.1f s", error, delay)
                self.stopping.wait(delay)
        return None

    # -- the loop ------------------------------------------------------------------------

    def heartbeat_message(self) -> Heartbeat:
        managed = [c for c in self.runtime.list_managed() if c.running]
        running = [c.session_id for c in managed]
        busy = self.reconciler.busy_devices(running)
        # Each desktop's own GPU and CPU use (idle detection); left out when there is none,
        # so a heartbeat without desktops is what an older agent sends.
        usage = self.runtime.usage(managed)
        return Heartbeat(
            gpus=self.probe.metrics(busy),
            running_sessions=running,
            **({"usage": usage} if usage else {}),
        )

    def heartbeat(self) -> None:
        self.register_again_if_mig_changed()
        self.client.heartbeat(self.heartbeat_message())

    def register_again_if_mig_changed(self) -> None:
        """A GPU's MIG mode or instances changed since the registration (an admin set a new
        layout on a drained node, docs/deploy.md): register again, so that the portal
        checks the new layout and offers its instances (docs/mig.md)."""
        if self._registered_mig is None:
            return
        if mig_layout(self.probe.inventory()) != self._registered_mig:
            logger.info("the GPUs' MIG layout changed: registering again")
            self.register()

    def run(self, *, once: bool = False) -> None:
        """Run until :attr:`stopping` is set (or one round with ``once``). Desktops stay up.

        Two threads: :class:`PortalFollower` keeps the latest desired state, told by the
        portal's ``wait/`` (and carries the heartbeats); this one reconciles Docker with it
        when it changes, and every poll interval to notice desktops that died."""
        if once:
            try:
                answer: RegistrationAnswer | None = self.register()
            except PortalUnavailable as error:
                raise AgentExit(f"cannot register: {error}", exit_code=1) from None
            self._one_round()
            self._close()
            return
        if self.gateway is not None:  # before registering: the registration says its port
            self.gateway.start()
        answer = self.register_until_answered()
        if answer is None:
            if self.gateway is not None:
                self.gateway.close()
            return
        local_s = self.config.poll_interval_s or answer.poll_interval_s or DEFAULT_POLL_INTERVAL_S
        follower = PortalFollower(self, answer, poll_s=local_s)
        follower.start()
        step_backoff = Backoff(cap_s=MAX_RETRY_S)
        while not self.stopping.is_set():
            follower.changed.wait(local_s)
            follower.changed.clear()
            desired = follower.latest
            if desired is None:
                continue
            try:
                self.courses.sync(desired.sessions)
                summary = self.reconciler.step(desired.sessions, desired.warm)
                if not summary.is_quiet():
                    logger.info("reconcile: %s", summary)
                self._feed_gateway(desired)
                step_backoff.reset()
            except Exception:
                # E.g. the Docker engine restarting: log, back off, try the whole step again.
                wait_s = step_backoff.next_delay()
                logger.exception("reconcile step failed; retry in %.1f s", wait_s)
                self.stopping.wait(wait_s)
        self._close()
        if follower.exit is not None:
            raise follower.exit

    def _one_round(self) -> None:
        """Ask, reconcile, heartbeat once; wait for the desktops' reports to go out."""
        try:
            desired = self.client.desired()
            self.home_tasks.offer(desired.home_tasks)
            self.courses.sync(desired.sessions)
            summary = self.reconciler.step(desired.sessions, desired.warm)
            if not summary.is_quiet():
                logger.info("reconcile: %s", summary)
            self.heartbeat()
        except AgentExit:
            raise
        except PortalError as error:
            logger.error("portal: %s; desktops left alone", error)
        except Exception:
            logger.exception("reconcile step failed")
        self.reconciler.wait_idle(self.config.ready_timeout_s + 30)
        self.reconciler.flush_reports()
        self.home_tasks.wait_idle(ONCE_HOME_TASKS_S)

    def _feed_gateway(self, desired: DesiredState | None = None) -> None:
        """Tell the gateway what it may open: after each step, and when a desktop starts."""
        if self.gateway is not None:
            self.gateway.feed(self.node_id, desired, self.reconciler.running_desktops)

    def register_again_if_gateway_moved(self) -> None:
        """A restarted gateway listening on another port: register again (with the node
        token, as at every start), so that the portal sends browsers there."""
        if self.gateway is not None and self.gateway.moved():
            logger.info("the gateway listens on port %s now: registering again", self.gateway.port)
            self.register()

    def _close(self) -> None:
        self.home_tasks.close()
        self.reconciler.close(wait_for_actions=False)
        if self.gateway is not None:
            self.gateway.close()
        logger.info("agent stopped; desktops keep running")


def mig_layout(gpus: Sequence[GpuInventory]) -> list[tuple[Any, ...]]:
    """What of an inventory makes the MIG slices: each GPU's mode and instances."""
    return [
        (g.uuid, g.mig_mode, tuple((m.uuid, m.profile, m.start) for m in g.mig_instances))
        for g in gpus
    ]


class PortalFollower(threading.Thread):
    """Keeps the node's latest desired state: one ``wait/`` after another, each answered
    when the portal changes what this node should run (or at the end of the wait), each
    carrying the heartbeat when one is due. Against an older portal without ``wait/`` it
    polls ``desired/`` and sends heartbeats as before."""

    def __init__(self, agent: Agent, answer: RegistrationAnswer, *, poll_s: float) -> None:
        super().__init__(name="portal-follower", daemon=True)
        self.agent = agent
        self.poll_s = poll_s
        self.heartbeat_s = answer.heartbeat_interval_s or DEFAULT_HEARTBEAT_INTERVAL_S
        # Never longer than the heartbeat interval: an idle node still heartbeats in time.
        self.wait_s = min(answer.wait_s, self.heartbeat_s)
        self.latest: DesiredState | None = None
        self.changed = threading.Event()
        self.exit: AgentExit | None = None
        self.next_heartbeat = 0.0

    def run(self) -> None:
        agent = self.agent
        while not agent.stopping.is_set():
            try:
                agent.register_again_if_gateway_moved()
                self.latest = self._next(self.latest)
                self.changed.set()
                # Home tasks start here, not after the reconcile step: a Files page waits.
                agent.home_tasks.offer(self.latest.home_tasks)
                agent.backoff.reset()
            except PortalUnavailable as error:
                delay = agent.backoff.next_delay()
                logger.warning(
                    "portal unreachable (%s); desktops left alone, retry in %.1f s", error, delay
                )
                agent.stopping.wait(delay)
            except Unauthorized as error:
                logger.warning("portal refused our token (%s); registering again", error)
                try:
                    if agent.register_until_answered() is None:
                        return
                except AgentExit as exit_:
                    self.exit = exit_
                    agent.stopping.set()
                    return
                self.latest = None
            except AgentExit as exit_:  # registering again for the gateway's port failed
                self.exit = exit_
                agent.stopping.set()
                return
            except PortalError as error:
                if error.status_code == 404 and self.wait_s:
                    logger.warning("the portal has no wait/ (older portal): polling instead")
                    self.wait_s = 0
                    continue
                # E.g. an answer this agent cannot read (BadAnswer): desktops left alone.
                delay = agent.backoff.next_delay()
                logger.error("portal: %s; desktops left alone, retry in %.1f s", error, delay)
                agent.stopping.wait(delay)
            except Exception:
                delay = agent.backoff.next_delay()
                logger.exception("asking the portal failed; retry in %.1f s", delay)
                agent.stopping.wait(delay)

    def _heartbeat_due(self) -> Heartbeat | None:
        """The heartbeat, if it is due (within :data:`HEARTBEAT_SLACK_S`). Only then: a wait
        answered early (a class starting wakes the node again and again) must not bring the
        next heartbeat forward, or a busy node would heartbeat with every wake-up."""
        now = time.monotonic()
        if now < self.next_heartbeat - HEARTBEAT_SLACK_S:
            return None
        self.next_heartbeat = now + self.heartbeat_s * random.uniform(0.8, 1.0)
        return self.agent.heartbeat_message()

    def _wait_length(self) -> float:
        """A wait's length: at most ``wait_s`` (spread over the fleet), and over by the time
        the next heartbeat falls due, so that the wait after it carries the heartbeat in
        time."""
        until_due = self.next_heartbeat - time.monotonic()
        return max(MIN_WAIT_S, min(self.wait_s * random.uniform(0.9, 1.0), until_due))

    def _next(self, latest: DesiredState | None) -> DesiredState:
        client = self.agent.client
        if self.wait_s and latest is not None:
            heartbeat = self._heartbeat_due()
            timeout_s = self._wait_length()
            request = WaitRequest(
                since=latest.version, timeout_s=timeout_s, heartbeat=heartbeat, unchanged_ok=True
            )
            return client.wait(request) or latest  # None: unchanged (204)
        if latest is not None:  # polling: an older portal
            self.agent.stopping.wait(self.poll_s)
        desired = client.desired()
        if (heartbeat := self._heartbeat_due()) is not None:
            client.heartbeat(heartbeat)
        return desired
