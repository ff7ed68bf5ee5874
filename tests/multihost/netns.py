"""Several hosts on this one machine: network namespaces, a real nginx, and the control plane.

The root namespace is the control-plane host: two ASGI workers (daphne, 127.0.0.1 only),
two Celery workers, one beat, and Debian's nginx rendered from ``deploy/nginx/deskpool.conf``
(TLS with a throw-away certificate) on ``10.231.0.1``, an address of the host's side of the
veth pairs. Each other host is a network namespace joined to the root one by a veth pair
(a /30 each, the host side its gateway):

    dp-mh-campus  10.231.0.2   students (the test's own threads enter it, see ``enter``)
    dp-mh-node1   10.231.0.6   a GPU node: a node agent (simulated runtime and GPUs) and its
                               desktop gateway on 10.231.0.6:7443, a stand-in desktop
    dp-mh-node2   10.231.0.10  another

From a namespace, 127.0.0.1 is the namespace's own loopback and the host's 127.0.0.1 is not
routable, so the agents and the students reach the portal only through nginx. The nodes'
/30s are the management network: nginx reaches their gateways there (``/gw/``), and the
campus's link is not forwarded to it (the campus reaches no node directly, as deployed).

The agents are the real agent and gateway with a SIMULATED runtime whose desktops say they
answer on the namespace's stand-in desktop (``stand_in_node.py``, ``stand_in_desktop.py``).

Everything is removed by :meth:`MultiHost.close` (processes, nginx, namespaces, veths)
whatever state the start reached; :func:`remove_leftovers` clears what a killed run left.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from tests.integration.stack import ASGI_WORKER, ROOT, free_port, wait_for

NGINX = "/usr/sbin/nginx"
SITE = ROOT / "deploy" / "nginx" / "deskpool.conf"
PREFIX = "dp-mh-"
HOST_ADDRESS = "10.231.0.1"  # where nginx listens (the campus namespace's gateway)
GATEWAY_PORT = 7443  # the agents' DESKPOOL_GATEWAY_PORT (the deployed site's port)
CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class Host:
    """One namespace: its name, its veth pair and its /30 (host side .1 of it)."""

    name: str
    index: int  # 0: 10.231.0.0/30, 1: 10.231.0.4/30, ...

    @property
    def netns(self) -> str:
        return PREFIX + self.name

    @property
    def host_if(self) -> str:
        return f"dpmh-{self.name}-h"[:15]

    @property
    def ns_if(self) -> str:
        return f"dpmh-{self.name}-n"[:15]

    @property
    def gateway(self) -> str:
        return f"10.231.0.{4 * self.index + 1}"

    @property
    def address(self) -> str:
        return f"10.231.0.{4 * self.index + 2}"


HOSTS = [Host("campus", 0), Host("node1", 1), Host("node2", 2)]
NODE_HOSTS = HOSTS[1:]  # the management network: the nodes' /30s


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def netns_usable() -> str | None:
    """None when namespaces can be made here, or why not."""
    if os.geteuid() != 0:
        return "the multi-host test makes network namespaces: run it as root"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    probe = PREFIX + "probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` does not work here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def remove_leftovers() -> None:
    """Namespaces and veths of this harness that an earlier, killed run left behind."""
    listed = _ip("netns", "list", check=False).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(PREFIX):
            _ip("netns", "del", name, check=False)
    for host in HOSTS:
        _ip("link", "del", host.host_if, check=False)


def enter(netns: str) -> None:
    """Move the calling thread (only it) into namespace ``netns``: its sockets are made there.

    The network namespace is a per-thread attribute on Linux (setns(2)), so a student thread
    of the test can live in the campus namespace while the rest of the test stays here."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns({netns}): {os.strerror(error)}")
    finally:
        os.close(fd)


def render_site(
    site: str,
    *,
    upstreams: list[int],
    http_port: int,
    https_port: int,
    cert: Path,
    key: Path,
    static_root: Path,
    logs: Path,
) -> str:
    """``deploy/nginx/deskpool.conf`` with the test's addresses, ports and paths.

    Every replaced line must be there, exactly once where it is unique: a change to the
    deployed file that the rendering no longer matches fails here, naming the line."""

    def once(text: str, old: str, new: str, count: int = 1) -> str:
        found = text.count(old)
        if found != count:
            raise AssertionError(f"{SITE}: expected {count} × {old!r}, found {found}")
        return text.replace(old, new)

    servers = re.findall(r"^    server 127\.0\.0\.1:\d+ .*;\n", site, flags=re.M)
    if not servers:
        raise AssertionError(f"{SITE}: no `server 127.0.0.1:<port> ...;` line in the upstream")
    options = re.sub(r"^\s*server \S+ ", "", servers[0]).strip()  # e.g. "max_fails=0;"
    site = once(
        site,
        "".join(servers),
        "".join(f"    server 127.0.0.1:{port} {options}\n" for port in upstreams),
    )
    site = once(site, "    listen 80;\n", f"    listen {HOST_ADDRESS}:{http_port};\n")
    site = once(site, "    listen [::]:80;\n", "")
    site = once(site, "    listen 443 ssl;\n", f"    listen {HOST_ADDRESS}:{https_port} ssl;\n")
    site = once(site, "    listen [::]:443 ssl;\n", "")
    site = once(site, "/etc/ssl/deskpool/fullchain.pem;", f"{cert};")
    site = once(site, "/etc/ssl/deskpool/privkey.pem;", f"{key};")
    site = once(site, "alias /var/lib/deskpool/static/;", f"alias {static_root}/;")
    # The data plane: only the nodes' addresses and their gateways' port are routed.
    nodes = "|".join(host.address.rsplit(".", 1)[1] for host in NODE_HOSTS)
    site = once(
        site,
        r"(?<gw_address>10\.20\.[0-9]{1,3}\.[0-9]{1,3})",
        rf"(?<gw_address>10\.231\.0\.(?:{nodes}))",
    )
    site = once(site, "(?<gw_port>7443)", f"(?<gw_port>{GATEWAY_PORT})")
    site = once(
        site,
        "access_log /var/log/nginx/access.log deskpool_gateway;",
        f"access_log {logs}/nginx-gateway.log deskpool_gateway;",
    )
    # A test port is not 443: the redirect keeps it (the deployed one needs no port).
    site = once(
        site,
        "return 301 https://$host$request_uri;",
        f"return 301 https://$host:{https_port}$request_uri;",
    )
    return site


def nginx_main_conf(workdir: Path, site: Path) -> str:
    """A main nginx.conf of the test's own (pid, logs and temp files under ``workdir``)."""
    return f"""
worker_processes 2;
pid {workdir}/nginx.pid;
error_log {workdir}/logs/nginx-error.log warn;
events {{ worker_connections 2048; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {workdir}/logs/nginx-access.log;
    client_body_temp_path {workdir}/nginx-tmp/body;
    proxy_temp_path {workdir}/nginx-tmp/proxy;
    fastcgi_temp_path {workdir}/nginx-tmp/fastcgi;
    uwsgi_temp_path {workdir}/nginx-tmp/uwsgi;
    scgi_temp_path {workdir}/nginx-tmp/scgi;
    include {site};
}}
"""


class MultiHost:
    """The control plane in the root namespace, nginx in front, agents in namespaces."""

    def __init__(self, workdir: Path, database_url: str, redis_url: str, asgi_workers: int = 2):
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.asgi_ports = [free_port() for _ in range(asgi_workers)]
        self.http_port = free_port()
        self.https_port = free_port()
        self.url = f"https://{HOST_ADDRESS}:{self.https_port}"
        # The session cookie's name behind the TLS proxy (portal/server/hardening.py)
        self.session_cookie = "__Host-sessionid"
        self.cert = workdir / "tls" / "cert.pem"
        self.key = workdir / "tls" / "key.pem"
        self.static_root = workdir / "var" / "static"
        self.hosts = {host.name: host for host in HOSTS}
        self.processes: dict[str, subprocess.Popen] = {}
        self.network_up = False
        clean = {
            k: v
            for k, v in os.environ.items()
            if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
        }
        self.env = {
            **clean,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DESKPOOL_VAR_DIR": str(workdir / "var"),
            "DESKPOOL_SERVE_STATIC": "0",  # nginx serves /static/
            "DESKPOOL_TRUSTED_PROXIES": "1",
            # As deployed (deploy/env/deskpool.env): nginx ends TLS, cookies are Secure.
            "DESKPOOL_BEHIND_TLS_PROXY": "1",
            "ALLOWED_HOSTS": f"{HOST_ADDRESS},127.0.0.1,localhost",
            "DESKPOOL_AGENT_POLL_INTERVAL_S": "0.25",
            "DESKPOOL_SCHEDULER_BEAT_SECONDS": "2",
            "PYTHONUNBUFFERED": "1",
            "SSL_CERT_FILE": str(self.cert),  # the agents trust the test's certificate
            # As deployed, a key of its own: production refuses to start without one.
            "SECRET_KEY_FILE": str(self._secret_key_file(workdir)),
            # The data plane as deployed: pages open the gateways through nginx's /gw/.
            "DESKPOOL_GATEWAY_URL": f"wss://{HOST_ADDRESS}:{self.https_port}/gw/{{address}}/{{port}}",
            "DESKPOOL_GATEWAY_ORIGINS": self.url,
        }

    @staticmethod
    def _secret_key_file(workdir: Path) -> Path:
        """A key file, as deployed, holding the test process's key: the test signs its
        students in here, and their login sessions must be valid in the workers."""
        from django.conf import settings

        path = workdir / "secret-key"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(settings.SECRET_KEY)
        path.chmod(0o600)
        return path

    # --- the network ------------------------------------------------------------------
    def network(self) -> None:
        """Make the namespaces and their veth pairs; the host side gets each gateway."""
        remove_leftovers()
        self.network_up = True
        for host in HOSTS:
            _ip("netns", "add", host.netns)
            _ip("link", "add", host.host_if, "type", "veth", "peer", "name", host.ns_if)
            _ip("link", "set", host.ns_if, "netns", host.netns)
            _ip("addr", "add", f"{host.gateway}/30", "dev", host.host_if)
            _ip("link", "set", host.host_if, "up")
            inside = ["netns", "exec", host.netns, "ip"]
            _ip(*inside, "addr", "add", f"{host.address}/30", "dev", host.ns_if)
            _ip(*inside, "link", "set", host.ns_if, "up")
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "route", "add", "default", "via", host.gateway)
        # The campus's link reaches this host's addresses (nginx) but is routed nowhere, so
        # not to a node, whatever this host's ip_forward says.
        campus = Path(f"/proc/sys/net/ipv4/conf/{HOSTS[0].host_if}/forwarding")
        campus.write_text("0\n")

    # --- processes --------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], netns: str | None = None, **env: str):
        if netns is not None:
            argv = ["ip", "netns", "exec", netns, *argv]
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.processes[name] = process
        return process

    def manage(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
        )

    def certificate(self) -> None:
        """A throw-away self-signed certificate for 10.231.0.1 (nginx's TLS server)."""
        self.cert.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=deskpool-multihost",
                "-addext",
                f"subjectAltName=IP:{HOST_ADDRESS}",
                "-keyout",
                str(self.key),
                "-out",
                str(self.cert),
            ],  # fmt: skip
            check=True,
            capture_output=True,
        )

    def start_asgi(self, n: int) -> None:
        port = self.asgi_ports[n]
        self._spawn(
            f"asgi{n + 1}",
            [*ASGI_WORKER, "-b", "127.0.0.1", "-p", str(port),
             "portal.asgi:application"],
        )  # fmt: skip

    def start_worker(self, n: int) -> None:
        self._spawn(
            f"worker{n + 1}",
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "--hostname",
             f"mh-worker{n + 1}@%h", "--concurrency", "2", "--loglevel", "INFO"],
        )  # fmt: skip

    def start_beat(self) -> None:
        self._spawn(
            "beat",
            [sys.executable, "-m", "celery", "-A", "portal", "beat", "--schedule",
             str(self.workdir / "celerybeat-schedule"), "--loglevel", "INFO"],
        )  # fmt: skip

    def start_nginx(self) -> None:
        (self.workdir / "nginx-tmp").mkdir(exist_ok=True)
        site = self.workdir / "deskpool.conf"
        site.write_text(
            render_site(
                SITE.read_text(),
                upstreams=self.asgi_ports,
                http_port=self.http_port,
                https_port=self.https_port,
                cert=self.cert,
                key=self.key,
                static_root=self.static_root,
                logs=self.logs,
            )
        )
        main = self.workdir / "nginx.conf"
        main.write_text(nginx_main_conf(self.workdir, site))
        checked = subprocess.run(
            [NGINX, "-t", "-p", str(self.workdir), "-c", str(main)],
            capture_output=True,
            text=True,
        )
        if checked.returncode != 0:
            raise RuntimeError(f"nginx -t refuses the rendered site:\n{checked.stderr}")
        self._spawn("nginx", [NGINX, "-p", str(self.workdir), "-c", str(main), "-g", "daemon off;"])

    def start(self) -> None:
        """Network, certificate, static files, then every process; returns when nginx
        answers through a worker."""
        self.network()
        self.certificate()
        self.manage("collectstatic", "--noinput")
        for n in range(len(self.asgi_ports)):
            self.start_asgi(n)
        self.start_worker(0)
        self.start_worker(1)
        self.start_beat()
        for n in range(len(self.asgi_ports)):
            self.wait_tcp("127.0.0.1", self.asgi_ports[n], f"asgi{n + 1}")
        self.start_nginx()
        self.wait_tcp(HOST_ADDRESS, self.https_port, "nginx")
        wait_for(lambda: self.get("/login/") == 200, 30, "the portal through nginx")

    def start_agent(self, host: str, join_token: str, fleet: Path) -> None:
        """The node agent of namespace ``host``, talking to the portal through nginx, with
        its gateway on the node's address and the stand-in desktop its sessions report."""
        node = self.hosts[host]
        self._spawn(
            f"desktop-{host}",
            [sys.executable, "-m", "tests.multihost.stand_in_desktop", node.address],
            netns=node.netns,
        )
        self._spawn(
            f"agent-{host}",
            [sys.executable, "-m", "tests.multihost.stand_in_node", "-v"],
            netns=node.netns,
            DESKPOOL_PORTAL_URL=self.url,
            DESKPOOL_PUBLISH_ADDRESS=node.address,
            DESKPOOL_GATEWAY_PORT=str(GATEWAY_PORT),
            # nginx reaches the node from this host's side of the node's link.
            DESKPOOL_GATEWAY_TRUSTED_PROXIES=f"{node.gateway}/32",
            DESKPOOL_NODE_NAME=host,
            DESKPOOL_STATE_DIR=str(self.workdir / f"agent-{host}"),
            DESKPOOL_FLEET_FILE=str(fleet),
            DESKPOOL_RUNTIME="simulated",
            DESKPOOL_POLL_INTERVAL="0.25",
            DESKPOOL_JOIN_TOKEN=join_token,
        )

    def kill(self, name: str) -> None:
        """SIGKILL process ``name`` and everything in its group (a crash: no clean-up runs)."""
        process = self.processes[name]
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    def alive(self, name: str) -> bool:
        process = self.processes.get(name)
        return process is not None and process.poll() is None

    # --- probes -----------------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))

    def get(self, path: str) -> int | None:
        import httpx

        with suppress(httpx.HTTPError):
            return httpx.get(self.url + path, verify=self.ssl_context(), timeout=5).status_code
        return None

    def wait_tcp(self, address: str, port: int, name: str, timeout: float = 60.0) -> None:
        def up() -> bool:
            process = self.processes.get(name)
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{self.log_tail(name)}")
            with suppress(OSError), socket.create_connection((address, port), timeout=1):
                return True
            return False

        wait_for(up, timeout, f"{name} on {address}:{port}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # --- the end ----------------------------------------------------------------------
    def stop(self, name: str, timeout: float = 15.0) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def close(self) -> None:
        """Stop everything (agents first, nginx last but one), then remove the network."""
        try:
            order = sorted(self.processes, key=lambda n: (not n.startswith("agent"), n == "nginx"))
            for name in order:
                with suppress(Exception):
                    self.stop(name)
        finally:
            if self.network_up:
                remove_leftovers()
                self.network_up = False
