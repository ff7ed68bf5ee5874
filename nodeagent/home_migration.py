"""``python -m nodeagent migrate-homes``: carry the homes of before the installation id over.

Homes were ``deskpool-home-<username>``; they are ``deskpool-<installation>-home-<user>``
now (:func:`nodeagent.home_names.home_volume_name`), so that two portals sharing a Docker
engine or a home root never mount each other's. An old home carries no installation id, so
the node's admin says which installation owns them, by running this with the agent stopped
(docs/deploy.md, "Upgrading: homes carry the installation id"). For each old home:

* an engine volume (``deskpool-home-<user>``): the new home is made the one way homes are
  made (``DesktopContainers.ensure_volume``), the files are copied into it by a helper
  container with both volumes mounted (``cp -a``: owners, modes, times, links, hidden
  files), and the copy is checked (entries and bytes the same on both sides). The old
  volume stays (Docker cannot rename one) until ``--remove-old``;
* a folder under the shared home root (``DESKPOOL_HOME_ROOT``): renamed (one file system:
  ``os.rename``, nothing copied), once for every node sharing the root.

It refuses a home whose user has a desktop running on this node, skips one whose new home
already holds files (never merging two homes) and one labelled with another installation.
What it did is kept in ``<state dir>/home-migration-<node>.json``: a second run copies
nothing again, and a run cut short resumes (its new home is known to hold only the copy).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import docker
from docker.errors import DockerException, ImageNotFound, NotFound

from nodeagent.config import AgentConfig, ConfigError
from nodeagent.home_names import LEGACY_HOME_PREFIX, home_volume_name, legacy_home_user
from nodeagent.protocol import LABEL_INSTALLATION, LABEL_MANAGED, LABEL_NODE, LABEL_USER
from nodeagent.runtime.base import RuntimeUnavailable, StartFailed
from nodeagent.runtime.docker_runtime import DockerRuntime, docker_client

logger = logging.getLogger(__name__)

HELPER_IMAGE = "deskpool/tiny:latest"
# Copies the old home into the new one and counts both sides: entries, then bytes of files.
_COPY = r"""set -eu
cp -a /old/. /new/
for side in /old /new; do
  entries=$(find "$side" -mindepth 1 | wc -l)
  bytes=$(find "$side" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }')
  echo "count $side $entries $bytes"
done
"""
_COUNT = r"""set -eu
echo "count /new $(find /new -mindepth 1 | wc -l) 0"
"""


class HomeMaker(Protocol):
    """What the migration needs of the node's runtime (``DesktopContainers``)."""

    client: docker.DockerClient
    node: str
    installation: str
    home_root: Path | None

    def ensure_volume(self, name: str, user: str = "") -> tuple[Any, bool]: ...


@dataclass
class Row:
    """One old home, and what became of it."""

    user: str
    old: str
    new: str
    outcome: str = ""
    entries: int | None = None
    size: int | None = None
    problem: bool = False  # refused, skipped or failed: the admin has to look


class MigrationRecord:
    """``old name -> {"new", "state": copying|done, "entries", "bytes"}``, on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data: dict[str, dict[str, Any]] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def state(self, old: str) -> str:
        return str(self.data.get(old, {}).get("state", ""))

    def put(self, old: str, **values: Any) -> None:
        self.data[old] = {**self.data.get(old, {}), **values}
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        temporary.replace(self.path)


class HomeMigration:
    """Carries one node's old homes over to ``homes.installation``: :meth:`run`."""

    def __init__(
        self,
        homes: HomeMaker,
        record: MigrationRecord,
        *,
        image: str = HELPER_IMAGE,
        dry_run: bool = False,
    ) -> None:
        if not homes.installation:
            raise ValueError("the migration needs this portal's installation id")
        self.homes = homes
        self.client = homes.client
        self.record = record
        self.image = image
        self.dry_run = dry_run

    # -- what there is -----------------------------------------------------------------

    def old_homes(self) -> dict[str, str]:
        return find_old_homes(self.client, self.homes.node, self.homes.home_root)

    def _volume(self, name: str) -> Any:
        try:
            return self.client.volumes.get(name)
        except NotFound:
            return None

    def _running_reason(self, old: str, user: str) -> str:
        """Why this home may not be moved now ("" when it may): a desktop running."""
        running = self.client.containers.list(filters={"volume": old})
        running += self.client.containers.list(
            filters={"label": [f"{LABEL_MANAGED}=true", f"{LABEL_USER}={user}"]}
        )
        if running:
            names = ", ".join(sorted({c.name for c in running}))
            return f"refused: a desktop of {user} runs on this node ({names}); stop it first"
        return ""

    # -- doing -------------------------------------------------------------------------

    def run(self) -> list[Row]:
        rows = []
        for old, user in self.old_homes().items():
            row = Row(user, old, home_volume_name(self.homes.installation, user))
            try:
                self._migrate(row)
            except (DockerException, OSError, StartFailed) as error:
                row.outcome, row.problem = f"failed: {error}", True
            rows.append(row)
        return rows

    def _migrate(self, row: Row) -> None:
        volume = self._volume(row.old)
        owner = ((volume.attrs.get("Labels") or {}) if volume is not None else {}).get(
            LABEL_INSTALLATION, ""
        )
        if owner and owner != self.homes.installation:
            row.outcome, row.problem = f"skipped: it belongs to installation {owner}", True
            return
        if self.record.state(row.old) == "done":
            row.outcome = "migrated before"
            return
        if why := self._running_reason(row.old, row.user):
            row.outcome, row.problem = why, True
            return
        root = self.homes.home_root
        folder = root / row.old if root is not None else None
        if folder is not None and (volume is None or self._binds(volume, folder)):
            if folder.is_dir():
                self._rename(row, folder)
            elif root is not None and (root / row.new).is_dir():
                # Renamed on another node sharing the root: only this node's old volume is left.
                row.outcome = "renamed before (shared root)"
                if not self.dry_run:
                    self.record.put(row.old, new=row.new, state="done")
            else:
                row.outcome, row.problem = f"failed: its folder {folder} is missing", True
        elif volume is not None:
            self._copy(row)

    def _binds(self, volume: Any, folder: Path) -> bool:
        options = volume.attrs.get("Options") or {}
        return options.get("o") == "bind" and Path(options.get("device", "")) == folder

    def _rename(self, row: Row, folder: Path) -> None:
        """A shared-root home: the folder renamed (same file system), its volume made."""
        root = self.homes.home_root
        assert root is not None
        target = root / row.new
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            row.outcome, row.problem = f"skipped: {target} already holds files", True
            return
        if self.dry_run:
            row.outcome = f"would rename {folder} to {target}"
            return
        if target.is_dir():
            target.rmdir()  # an empty folder a Files page visit made
        os.rename(folder, target)
        self.homes.ensure_volume(row.new, row.user)
        self.record.put(row.old, new=row.new, state="done")
        row.outcome = "renamed (shared root)"

    def _copy(self, row: Row) -> None:
        """An engine volume: copied into the new home, checked, then recorded as done."""
        resuming = self.record.state(row.old) == "copying"
        if not resuming and self._holds_files(row.new):
            row.outcome, row.problem = f"skipped: {row.new} already holds files", True
            return
        if self.dry_run:
            row.outcome = f"would copy into {row.new}"
            return
        self.record.put(row.old, new=row.new, state="copying")
        self.homes.ensure_volume(row.new, row.user)
        counts = self._helper(_COPY, row.old, row.new)
        old, copied = counts["/old"], counts["/new"]
        row.entries, row.size = old
        if copied != old:
            row.problem = True
            row.outcome = (
                f"failed: the copy holds {copied[0]} entries, {copied[1]} bytes; the old "
                f"home {old[0]} entries, {old[1]} bytes (the old home is untouched)"
            )
            return
        self.record.put(row.old, state="done", entries=old[0], bytes=old[1])
        row.outcome = "copied and checked" + (" (resumed)" if resuming else "")

    def _holds_files(self, new: str) -> bool:
        """Whether the new home already holds anything (its volume, or its shared folder)."""
        if self._volume(new) is not None:
            return self._helper(_COUNT, None, new)["/new"][0] > 0
        root = self.homes.home_root
        return root is not None and (root / new).is_dir() and any((root / new).iterdir())

    def _helper(self, script: str, old: str | None, new: str) -> dict[str, tuple[int, int]]:
        """Run ``script`` as root in a helper container with ``old`` (read only, at /old)
        and ``new`` (at /new) mounted, without a network; its ``count`` lines."""
        volumes = {new: {"bind": "/new", "mode": "rw"}}
        if old is not None:
            volumes[old] = {"bind": "/old", "mode": "ro"}
        try:
            self.client.images.get(self.image)
        except ImageNotFound:
            raise StartFailed(
                f"the helper image {self.image} is not on this node: build it "
                "(nodeagent/images/build.sh) or name another with --image"
            ) from None
        container = self.client.containers.run(
            self.image,
            entrypoint=["sh", "-c", script],
            user="0:0",
            network_disabled=True,
            volumes=volumes,
            labels={LABEL_MANAGED: "migration"},
            security_opt=["no-new-privileges"],
            detach=True,
        )
        try:
            status = container.wait()
            output = container.logs().decode(errors="replace")
        finally:
            container.remove(force=True)
        if status.get("StatusCode") != 0:
            raise StartFailed(f"the helper container failed: {output.strip()[-300:]}")
        counts = {}
        for line in output.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "count":
                counts[parts[1]] = (int(parts[2]), int(parts[3]))
        return counts

    def remove_old(self) -> list[Row]:
        """Remove the old volumes of the homes carried over (``--remove-old``)."""
        rows = []
        for old, user in self.old_homes().items():
            row = Row(user, old, home_volume_name(self.homes.installation, user))
            volume = self._volume(old)
            if self.record.state(old) != "done" or volume is None:
                row.outcome = "kept: not migrated yet" if volume is not None else "no volume"
                row.problem = volume is not None
            elif why := self._running_reason(old, user):
                row.outcome, row.problem = why, True
            elif self.dry_run:
                row.outcome = "would remove the old volume"
            else:
                volume.remove()
                row.outcome = "old volume removed"
            rows.append(row)
        return rows


def find_old_homes(
    client: docker.DockerClient, node: str, home_root: Path | None
) -> dict[str, str]:
    """``old name -> user`` of every home of before the installation id: this node's engine
    volumes (several nodes' agents may share one engine) and the shared root's folders."""
    found: dict[str, str] = {}
    mine = {"name": LEGACY_HOME_PREFIX, "label": f"{LABEL_NODE}={node}"}
    for volume in client.volumes.list(filters=mine):
        if (user := legacy_home_user(volume.name)) is not None:
            found[volume.name] = user
    if home_root is not None:
        for entry in sorted(home_root.iterdir()):
            user = legacy_home_user(entry.name)
            if user is not None and entry.is_dir() and not entry.is_symlink():
                found[entry.name] = user
    return dict(sorted(found.items()))


def record_of(config: AgentConfig) -> MigrationRecord:
    """The node's migration record, ``<state dir>/home-migration-<node>.json``."""
    return MigrationRecord(config.state_dir.resolve() / f"home-migration-{config.node_name}.json")


def warn_old_homes(client: docker.DockerClient, config: AgentConfig) -> None:
    """Say at the agent's start when homes of before wait to be carried over (until they
    are, their people's desktops start with an empty home), or wait to be removed."""
    try:
        old = find_old_homes(client, config.node_name, config.home_root)
    except (DockerException, OSError) as error:
        logger.warning("could not look for homes of before the installation id: %s", error)
        return
    record = record_of(config)
    waiting = [name for name in old if record.state(name) != "done"]
    if waiting:
        logger.warning(
            "node %s has %d home(s) named deskpool-home-<user>, from before homes carried the "
            "installation id: their people's desktops start with an empty home until the "
            "node's admin runs 'python -m nodeagent migrate-homes' (docs/deploy.md)",
            config.node_name,
            len(waiting),
        )
    elif old:
        logger.info(
            "node %s keeps %d old home volume(s) already carried over: "
            "'python -m nodeagent migrate-homes --remove-old' removes them",
            config.node_name,
            len(old),
        )


def table(rows: list[Row]) -> Iterator[str]:
    """The summary, one line per old home."""
    header = ("USER", "OLD HOME", "NEW HOME", "ENTRIES", "BYTES", "OUTCOME")
    lines = [(r.user, r.old, r.new, _number(r.entries), _number(r.size), r.outcome) for r in rows]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(5)]
    for line in [header, *lines]:
        yield "  ".join([*(cell.ljust(widths[i]) for i, cell in enumerate(line[:5])), line[5]])
    if not rows:
        yield "no old homes (deskpool-home-<user>) on this node"


def _number(value: int | None) -> str:
    return "-" if value is None else str(value)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m nodeagent migrate-homes",
        description="Carry this node's homes of before the installation id "
        "(deskpool-home-<user>) over to deskpool-<installation>-home-<user>. Run it with the "
        "agent stopped and the node drained (docs/deploy.md).",
    )
    parser.add_argument(
        "--installation",
        help="the portal's installation id (default: the one this node's desktop network carries)",
    )
    parser.add_argument("--node", help="node name (DESKPOOL_NODE_NAME; default: hostname)")
    parser.add_argument("--dry-run", action="store_true", help="say what it would do only")
    parser.add_argument(
        "--remove-old",
        action="store_true",
        help="remove the old volumes of the homes already carried over (after checking them)",
    )
    parser.add_argument("--image", default=HELPER_IMAGE, help="helper image with cp and find")
    return parser.parse_args(argv)


def known_installation(client: docker.DockerClient, node: str) -> str:
    """The installation id on this node's networks and containers, when there is one only."""
    wanted = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={node}"]}
    found = {
        n.attrs.get("Labels", {}).get(LABEL_INSTALLATION)
        for n in client.networks.list(filters=wanted)
    }
    found |= {
        c.labels.get(LABEL_INSTALLATION) for c in client.containers.list(all=True, filters=wanted)
    }
    found.discard(None)
    found.discard("")
    return found.pop() if len(found) == 1 else ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        config = AgentConfig.from_env()
        if args.node:
            config = replace(config, node_name=args.node)
        client = docker_client()
    except (ConfigError, RuntimeUnavailable) as error:
        print(f"migrate-homes: {error}", file=sys.stderr)
        return 2
    node = config.node_name
    installation = args.installation or known_installation(client, node)
    if not installation or not (installation.isascii() and installation.isalnum()):
        print(
            "migrate-homes: give the portal's installation id with --installation ID (on the "
            "portal: python manage.py shell -c 'from scheduling.services.installation import "
            "installation_id; print(installation_id())')",
            file=sys.stderr,
        )
        return 2
    runtime = DockerRuntime.from_config(config, client)
    runtime.use_installation(installation)
    record = record_of(config)
    migration = HomeMigration(runtime._desktops, record, image=args.image, dry_run=args.dry_run)
    rows = migration.remove_old() if args.remove_old else migration.run()
    print(f"installation {installation}, node {node}" + (" (dry run)" if args.dry_run else ""))
    for line in table(rows):
        print(line)
    return 1 if any(r.problem for r in rows) else 0
