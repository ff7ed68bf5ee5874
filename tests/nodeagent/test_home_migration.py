"""Homes belong to one installation (issue 36, item 1), on the real Docker engine.

Homes are ``deskpool-<installation>-home-<user>`` and carry the installation's label: two
portals' desktops on one engine see different homes, and a desktop never mounts a home
labelled with another installation. ``python -m nodeagent migrate-homes`` carries the homes
of before (``deskpool-home-<user>``) over: engine volumes copied byte for byte (owners,
modes, times, links, hidden files), shared-root folders renamed; a second run does nothing,
a running desktop's home is refused, a dry run changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker.errors import NotFound

from nodeagent.__main__ import main
from nodeagent.config import AgentConfig
from nodeagent.home_migration import (
    HomeMigration,
    MigrationRecord,
    Row,
    record_of,
    warn_old_homes,
)
from nodeagent.home_names import home_volume_name
from nodeagent.protocol import DESKTOP_HOME, LABEL_INSTALLATION, LABEL_MANAGED, LABEL_NODE
from nodeagent.runtime import StartFailed
from nodeagent.runtime.desktop_network import ensure_network
from nodeagent.runtime.docker_desktops import DesktopContainers
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.conftest import TINY_IMAGE

pytestmark = pytest.mark.docker

OURS = "aaaa11112222"
THEIRS = "bbbb33334444"

# Every entry of a home with its owner, group, mode, time, and (not a folder) size, type and
# link target; then every file's checksum.
LISTING = r"""cd "$1"
find . \( -type d -printf '%p|%U|%G|%m|%T@|dir\n' \) -o \
  \( ! -type d -printf '%p|%U|%G|%m|%T@|%s|%y|%l\n' \) | sort
find . -type f -exec sha256sum {} + | sort
"""
# An old home: a hidden file, a symlink, a file of uid 1000 with mode 0600, a folder, bytes
# that are not text, and times of 2020.
FILL = r"""set -e
cd /v
echo 'export EDITOR=vim' > .bashrc
echo 'chapter 1' > notes.txt
ln -s notes.txt link
echo secret > secret.txt
mkdir -p thesis/figures
head -c 200000 /dev/urandom > thesis/figures/plot.bin
chown -R 1000:1000 . && chmod 0600 secret.txt && chmod 0700 .
touch -h -d '2020-01-02 03:04:05' notes.txt link thesis/figures/plot.bin thesis
"""


def in_volume(client, volume: str, script: str, *args: str) -> str:  # type: ignore[no-untyped-def]
    """Run ``script`` as root with the volume at /v; its output."""
    output = client.containers.run(
        TINY_IMAGE,
        entrypoint=["sh", "-c", script, "sh", *args],
        user="0:0",
        network_disabled=True,
        volumes={volume: {"bind": "/v", "mode": "rw"}},
        remove=True,
    )
    return output.decode()


def old_home(client, node: str, user: str, labels: dict[str, str] | None = None) -> str:  # type: ignore[no-untyped-def]
    """An old home volume (``deskpool-home-<user>``) of the node, filled with FILL."""
    name = f"deskpool-home-{user}"
    client.volumes.create(
        name=name, labels={LABEL_MANAGED: "true", LABEL_NODE: node, **(labels or {})}
    )
    in_volume(client, name, FILL)
    return name


@pytest.fixture
def user() -> str:
    """A campus username: no engine volume could be named after it before (its "@")."""
    return f"ann.{uuid.uuid4().hex[:8]}@campus.edu"


@pytest.fixture
def old_user() -> str:
    """A username an old engine volume could hold (``[a-zA-Z0-9_.-]``)."""
    return f"ann_{uuid.uuid4().hex[:8]}.b"


@pytest.fixture
def homes(docker_client, node_name, sessions_dir) -> DesktopContainers:  # type: ignore[no-untyped-def]
    return DesktopContainers(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, installation=OURS
    )


@pytest.fixture
def record(tmp_path: Path) -> MigrationRecord:
    return MigrationRecord(tmp_path / "state" / "home-migration.json")


@pytest.fixture
def cleanup(docker_client) -> Iterator[list[str]]:  # type: ignore[no-untyped-def]
    """Volume names to remove afterwards (also those the test did not label)."""
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(NotFound):
            docker_client.volumes.get(name).remove(force=True)


def only(rows: list[Row], user: str) -> Row:
    [row] = [r for r in rows if r.user == user]
    return row


def test_homes_are_named_after_the_installation_and_the_user() -> None:
    assert home_volume_name(OURS, "ada") == f"deskpool-{OURS}-home-ada"
    assert home_volume_name(OURS, "ann@campus.edu") == f"deskpool-{OURS}-home-ann_40campus.edu"
    # "_" is escaped too, so no two usernames give one name.
    assert home_volume_name(OURS, "a_40b") != home_volume_name(OURS, "a@b")
    assert home_volume_name(OURS, "a_b") == f"deskpool-{OURS}-home-a_5fb"
    assert home_volume_name(OURS, "李") == f"deskpool-{OURS}-home-_e6_9d_8e"
    long = home_volume_name(OURS, "x" * 150)
    assert len(long) < 160 and long != home_volume_name(OURS, "x" * 149)
    with pytest.raises(ValueError):
        home_volume_name("", "ada")


def test_the_engine_takes_every_name(docker_client, cleanup) -> None:  # type: ignore[no-untyped-def]
    for name in ("ann@campus.edu", "a b+c", "李", "-x", "y" * 150, "_"):
        volume = home_volume_name(OURS, name)
        cleanup.append(volume)
        assert docker_client.volumes.create(name=volume).name == volume


def test_two_installations_desktops_on_one_engine_see_different_homes(
    docker_client, tiny_image, node_name, sessions_dir, make_session, user
) -> None:  # type: ignore[no-untyped-def]
    runtimes = {
        installation: DockerRuntime(
            docker_client,
            node_name=node_name,
            sessions_dir=sessions_dir / installation,
            ready_timeout_s=30,
            installation=installation,
        )
        for installation in (OURS, THEIRS)
    }
    started = {
        installation: runtime.start(
            make_session(
                4301, image=tiny_image, user=user, home_volume=home_volume_name(installation, user)
            )
        )
        for installation, runtime in runtimes.items()
    }
    try:
        ours = docker_client.containers.get(started[OURS].container_id)
        theirs = docker_client.containers.get(started[THEIRS].container_id)
        wrote = ours.exec_run(["sh", "-c", f"echo mine > {DESKTOP_HOME}/only-ours.txt"])
        assert wrote.exit_code == 0
        assert ours.exec_run(["cat", f"{DESKTOP_HOME}/only-ours.txt"]).output == b"mine\n"
        assert theirs.exec_run(["test", "-e", f"{DESKTOP_HOME}/only-ours.txt"]).exit_code == 1
        for installation in (OURS, THEIRS):
            home = docker_client.volumes.get(home_volume_name(installation, user))
            assert home.attrs["Labels"][LABEL_INSTALLATION] == installation
    finally:
        for runtime in runtimes.values():
            runtime.stop(4301)


def test_a_desktop_never_mounts_another_installations_home(
    docker_client, tiny_image, node_name, sessions_dir, make_session, user
) -> None:  # type: ignore[no-untyped-def]
    theirs = DesktopContainers(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, installation=THEIRS
    )
    name = home_volume_name(THEIRS, user)
    theirs.ensure_volume(name, user)
    ours = DockerRuntime(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir / "ours",
        ready_timeout_s=30,
        installation=OURS,
    )
    with pytest.raises(StartFailed, match="belongs to another Deskpool installation"):
        ours.start(make_session(4302, image=tiny_image, user=user, home_volume=name))
    assert ours.list_managed() == []
    with pytest.raises(StartFailed, match=THEIRS):
        ours.home_folder(name, create=False)


def test_an_old_home_is_carried_over_byte_for_byte_and_only_once(
    docker_client, tiny_image, node_name, homes, record, old_user
) -> None:  # type: ignore[no-untyped-def]
    old = old_home(docker_client, node_name, old_user)
    new = home_volume_name(OURS, old_user)
    before = in_volume(docker_client, old, LISTING, "/v")
    assert "./.bashrc|1000|1000|644" in before and "./link|" in before and "|l|notes.txt" in before
    assert "./secret.txt|1000|1000|600|" in before

    [row] = HomeMigration(homes, record).run()
    assert (row.user, row.old, row.new) == (old_user, old, new)
    assert row.outcome == "copied and checked" and not row.problem
    assert row.entries == 7 and row.size is not None and row.size > 200000
    assert in_volume(docker_client, new, LISTING, "/v") == before
    assert in_volume(docker_client, old, LISTING, "/v") == before  # the old one untouched
    labels = docker_client.volumes.get(new).attrs["Labels"]
    assert labels[LABEL_INSTALLATION] == OURS
    assert json.loads(record.path.read_text())[old]["state"] == "done"

    # A second run copies nothing: a file written since in the new home stays, none comes.
    in_volume(docker_client, new, "echo later > /v/later.txt && rm /v/notes.txt")
    [again] = HomeMigration(homes, MigrationRecord(record.path)).run()
    assert again.outcome == "migrated before" and not again.problem
    after = in_volume(docker_client, new, "ls -A /v")
    assert "later.txt" in after and "notes.txt" not in after

    # --remove-old removes the old volume, and only then.
    [removed] = HomeMigration(homes, record).remove_old()
    assert removed.outcome == "old volume removed"
    with pytest.raises(NotFound):
        docker_client.volumes.get(old)


def test_a_run_cut_short_resumes_and_a_full_new_home_is_never_merged(
    docker_client, tiny_image, node_name, homes, record, old_user
) -> None:  # type: ignore[no-untyped-def]
    old = old_home(docker_client, node_name, old_user)
    new = home_volume_name(OURS, old_user)
    homes.ensure_volume(new, old_user)
    in_volume(docker_client, new, "echo half > /v/notes.txt")

    # The new home holds files no migration put there: skipped, said, nothing merged.
    [skipped] = HomeMigration(homes, record).run()
    assert skipped.problem and skipped.outcome == f"skipped: {new} already holds files"
    assert in_volume(docker_client, new, "ls -A /v") == "notes.txt\n"

    # The same files left by a copy cut short (the record says so): the copy is finished.
    record.put(old, new=new, state="copying")
    [resumed] = HomeMigration(homes, record).run()
    assert resumed.outcome == "copied and checked (resumed)" and not resumed.problem
    before = in_volume(docker_client, old, LISTING, "/v")
    assert in_volume(docker_client, new, LISTING, "/v") == before


def test_a_home_whose_user_has_a_desktop_running_is_refused(
    docker_client, tiny_image, node_name, sessions_dir, homes, record, make_session, old_user
) -> None:  # type: ignore[no-untyped-def]
    old = old_home(docker_client, node_name, old_user)
    runtime = DockerRuntime(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir / "desktops",
        ready_timeout_s=30,
        installation=OURS,
    )
    runtime.start(make_session(4303, image=tiny_image, old_user=old_user, home_volume=old))
    try:
        [row] = HomeMigration(homes, record).run()
    finally:
        runtime.stop(4303)
    assert row.problem and row.outcome.startswith(f"refused: a desktop of {old_user} runs")
    with pytest.raises(NotFound):
        docker_client.volumes.get(home_volume_name(OURS, old_user))
    assert not record.path.exists()
    # Stopped, it goes.
    assert HomeMigration(homes, record).run()[0].outcome == "copied and checked"


def test_another_installations_old_home_is_left_alone(
    docker_client, tiny_image, node_name, homes, record, old_user
) -> None:  # type: ignore[no-untyped-def]
    old_home(docker_client, node_name, old_user, {LABEL_INSTALLATION: THEIRS})
    [row] = HomeMigration(homes, record).run()
    assert row.problem and row.outcome == f"skipped: it belongs to installation {THEIRS}"
    with pytest.raises(NotFound):
        docker_client.volumes.get(home_volume_name(OURS, old_user))


def test_a_shared_root_folder_is_renamed(
    docker_client, tiny_image, node_name, sessions_dir, record, tmp_path, user, old_user
) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "nfs-homes"
    root.mkdir()
    homes = DesktopContainers(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir,
        installation=OURS,
        home_root=root,
    )
    # A folder only (the Files page made it: no volume could be named after "@"), and a
    # folder with the old bind volume a desktop of this node made.
    for name in (user, old_user):
        old = root / f"deskpool-home-{name}"
        old.mkdir()
        (old / ".profile").write_text("PATH=$PATH:~/bin\n")
    options = {"type": "none", "o": "bind", "device": str(root / f"deskpool-home-{old_user}")}
    docker_client.volumes.create(
        name=f"deskpool-home-{old_user}",
        driver="local",
        driver_opts=options,
        labels={LABEL_MANAGED: "true", LABEL_NODE: node_name},
    )
    inodes = {
        name: (root / f"deskpool-home-{name}/.profile").stat().st_ino for name in (user, old_user)
    }

    rows = HomeMigration(homes, record).run()
    for name in (user, old_user):
        new = root / home_volume_name(OURS, name)
        assert only(rows, name).outcome == "renamed (shared root)" and not only(rows, name).problem
        assert not (root / f"deskpool-home-{name}").exists()
        assert (new / ".profile").stat().st_ino == inodes[name]  # renamed, not copied
        volume = docker_client.volumes.get(new.name)
        assert volume.attrs["Options"]["device"] == str(new)
    # Again: the old volume is left (until --remove-old), nothing else to do.
    [again] = HomeMigration(homes, record).run()
    assert (again.user, again.outcome) == (old_user, "migrated before")


def test_the_dry_run_changes_nothing(
    docker_client, tiny_image, node_name, sessions_dir, record, tmp_path, user, old_user
) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "nfs-homes"
    root.mkdir()
    homes = DesktopContainers(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir,
        installation=OURS,
        home_root=root,
    )
    plain = old_home(docker_client, node_name, old_user)  # made before the root was set
    folder = root / f"deskpool-home-{user}-b"
    folder.mkdir()
    rows = HomeMigration(homes, record, dry_run=True).run()
    assert only(rows, old_user).outcome == f"would copy into {home_volume_name(OURS, old_user)}"
    renamed = root / home_volume_name(OURS, f"{user}-b")
    assert only(rows, f"{user}-b").outcome == f"would rename {folder} to {renamed}"
    assert folder.is_dir() and not renamed.exists() and not record.path.exists()
    for name in (home_volume_name(OURS, old_user), renamed.name):
        with pytest.raises(NotFound):
            docker_client.volumes.get(name)
    assert docker_client.volumes.get(plain)


def test_the_command_prints_a_summary(
    docker_client, tiny_image, node_name, tmp_path, monkeypatch, capsys, old_user
) -> None:  # type: ignore[no-untyped-def]
    old_home(docker_client, node_name, old_user)
    monkeypatch.setenv("DESKPOOL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DESKPOOL_HOME_IMAGES", "off")
    argv = ["migrate-homes", "--node", node_name, "--installation", OURS]
    assert main([*argv, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"installation {OURS}, node {node_name} (dry run)" in printed
    assert "USER" in printed and f"would copy into {home_volume_name(OURS, old_user)}" in printed
    assert main(argv) == 0
    assert "copied and checked" in capsys.readouterr().out
    assert (tmp_path / "state" / f"home-migration-{node_name}.json").exists()
    assert main(["migrate-homes", "--node", node_name, "--installation", "no/such"]) == 2
    # Without --installation: the one id on the node's desktop network.
    assert main(["migrate-homes", "--node", node_name]) == 2
    ensure_network(docker_client, node_name, (), OURS)
    assert main(["migrate-homes", "--node", node_name, "--dry-run"]) == 0
    assert f"installation {OURS}, node {node_name} (dry run)" in capsys.readouterr().out


def test_the_agent_says_at_its_start_when_old_homes_wait(
    docker_client, tiny_image, node_name, homes, caplog, tmp_path, old_user
) -> None:  # type: ignore[no-untyped-def]
    config = AgentConfig(node_name=node_name, state_dir=tmp_path / "state")
    with caplog.at_level(logging.INFO, logger="nodeagent.home_migration"):
        warn_old_homes(docker_client, config)
        assert caplog.text == ""
        old_home(docker_client, node_name, old_user)
        warn_old_homes(docker_client, config)
        assert f"node {node_name} has 1 home(s) named deskpool-home-<user>" in caplog.text
        assert "python -m nodeagent migrate-homes" in caplog.text
        caplog.clear()
        HomeMigration(homes, record_of(config)).run()
        warn_old_homes(docker_client, config)
    assert "has 1 home" not in caplog.text
    assert "1 old home volume(s) already carried over" in caplog.text
