"""A quota the disk enforces (issue 36, item 2), on the real engine.

A node-local home is a loop-mounted ext4 image (nodeagent/runtime/home_images.py), its
volume a bind of the mount; a desktop runs with a read-only root and capped tmpfs folders.
These tests write past the quota from the desktop, from a sparse file and through the Files
page's upload, and check that the writes fail with "No space left on device", that what was
written before reads back whole, and that the node's disk barely moves. Each test's images
are unmounted and deleted afterwards, and no loop device of theirs is left.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nodeagent.home_files import HOME_FULL, HomeFileError, HomeFolder, HomeFull
from nodeagent.protocol import LABEL_MANAGED, LABEL_NODE, LABEL_USER
from nodeagent.reconcile import Reconciler
from nodeagent.runtime import home_images, home_mounts
from nodeagent.runtime.docker_desktops import DesktopContainers
from nodeagent.runtime.docker_runtime import DockerRuntime
from tests.nodeagent.conftest import desired_warm, remove_node_objects
from tests.nodeagent.test_warm import converge, node_containers

QUOTA_MB = 64
MB = 1024 * 1024
NO_SPACE = b"No space left on device"


def loop_devices_under(folder: Path) -> list[str]:
    """The loop devices whose backing file lies under ``folder`` (``losetup -l``)."""
    listed = subprocess.run(
        ["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in listed.splitlines() if str(folder) in line]


@pytest.fixture
def homes_dir(tmp_path: Path, docker_client, node_name: str) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """The node's homes folder; afterwards its desktops are removed, its images unmounted
    and deleted, and no loop device of theirs may be left."""
    path = tmp_path / "homes"
    yield path
    remove_node_objects(docker_client, node_name)  # before the unmounts: nothing holds them
    warm_homes = tmp_path / "state" / "sessions" / "warm-homes"
    if warm_homes.is_dir():
        for home in warm_homes.iterdir():
            home_mounts.release(home)
    if path.is_dir():
        for image in path.glob(f"*{home_images.IMAGE_SUFFIX}"):
            home_images.remove(path, image.name[: -len(home_images.IMAGE_SUFFIX)])
    assert loop_devices_under(path) == []


def runtime_with_images(docker_client, node_name, sessions_dir, homes_dir, **more) -> DockerRuntime:  # type: ignore[no-untyped-def]
    return DockerRuntime(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir,
        ready_timeout_s=30,
        homes_dir=homes_dir,
        default_quota_mb=QUOTA_MB,
        **more,
    )


def desktops_with_images(docker_client, node_name, sessions_dir, homes_dir) -> DesktopContainers:  # type: ignore[no-untyped-def]
    return DesktopContainers(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir,
        homes_dir=homes_dir,
        default_quota_mb=QUOTA_MB,
    )


def run(container, command: str) -> tuple[int, bytes]:  # type: ignore[no-untyped-def]
    """``command`` in the desktop, as its user."""
    done = container.exec_run(["sh", "-c", command], user="1000:1000")
    return done.exit_code, done.output


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


@pytest.mark.docker
def test_a_desktop_cannot_write_past_its_quota_and_keeps_what_it_wrote(
    docker_client, tiny_image, node_name, sessions_dir, homes_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    runtime = runtime_with_images(docker_client, node_name, sessions_dir, homes_dir)
    session = make_session(9601, image=tiny_image, home_quota_mb=QUOTA_MB)
    managed = runtime.start(session)
    container = docker_client.containers.get(managed.container_id)
    volume = docker_client.volumes.get(session.home_volume)
    point = home_images.mount_point(homes_dir, session.home_volume)
    assert volume.attrs["Options"] == {"type": "none", "o": "bind", "device": str(point)}
    assert volume.attrs["Labels"][LABEL_USER] == "alice"

    code, output = run(container, "head -c 1048576 /dev/urandom > ~/keep && sha256sum ~/keep")
    assert code == 0, output
    digest = output.split()[0]
    node_free = free_bytes(homes_dir)

    # A plain write past the quota (1 GiB asked for).
    code, output = run(container, "dd if=/dev/zero of=$HOME/big bs=1M count=1024")
    assert code != 0 and NO_SPACE in output, output
    # A sparse file of 11 GB takes nothing, and its blocks cannot pass the quota either.
    code, output = run(
        container, "rm ~/big && truncate -s 11G ~/sparse && stat -c %s ~/sparse"
    )  # fmt: skip
    assert code == 0 and output.strip() == str(11 * 1024 * MB).encode(), output
    code, output = run(container, "dd if=/dev/zero of=$HOME/sparse bs=1M count=1024 conv=notrunc")
    assert code != 0 and NO_SPACE in output, output
    code, output = run(container, "du -k ~/sparse")
    assert int(output.split()[0]) <= QUOTA_MB * 1024, output

    # The node's disk gave the home no more than its quota (and ext4's own blocks): the image
    # holds no more real blocks, and of the 2 GiB asked for the disk lost far less (other
    # programs on this machine write too: the bound leaves them room).
    image = home_images.image_path(homes_dir, session.home_volume)
    assert image.stat().st_blocks * 512 <= (QUOTA_MB + 16) * MB
    assert node_free - free_bytes(homes_dir) <= 512 * MB
    # What was written before reads back whole.
    code, output = run(container, "sha256sum ~/keep")
    assert code == 0 and output.split()[0] == digest, output
    space = home_images.space(point)
    assert space is not None and space.full
    assert QUOTA_MB * MB <= space.size_bytes <= (QUOTA_MB + 4) * MB
    # The heartbeat's usage carries what the home holds: the portal says the home is full.
    [usage] = runtime.usage(runtime.list_managed())
    assert usage.session_id == 9601 and usage.home_used_bytes is not None
    # (writeback may add an extent block or two meanwhile)
    assert abs(usage.home_used_bytes - space.used_bytes) <= MB


@pytest.mark.docker
def test_the_root_is_read_only_and_tmp_stops_at_its_cap(
    docker_client, tiny_image, node_name, sessions_dir, homes_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    runtime = runtime_with_images(docker_client, node_name, sessions_dir, homes_dir, tmpfs_mb=16)
    managed = runtime.start(make_session(9602, image=tiny_image))
    container = docker_client.containers.get(managed.container_id)
    assert container.attrs["HostConfig"]["ReadonlyRootfs"] is True

    code, output = run(container, "touch /usr/x")
    assert code != 0 and b"Read-only file system" in output, output
    code, output = run(container, "dd if=/dev/zero of=/tmp/fill bs=1M count=32")
    assert code != 0 and NO_SPACE in output, output
    code, output = run(container, "dd if=/dev/zero of=/var/tmp/fill bs=1M count=32")
    assert code != 0 and NO_SPACE in output, output
    # The home, a session's default quota (the node's), is writable.
    code, output = run(container, "echo notes > ~/notes.txt && cat ~/notes.txt")
    assert (code, output) == (0, b"notes\n")


@pytest.mark.docker
def test_an_older_plain_volume_is_carried_into_an_image_whole(
    docker_client, tiny_image, node_name, sessions_dir, homes_dir, make_session
) -> None:  # type: ignore[no-untyped-def]
    session = make_session(9603, image=tiny_image, home_quota_mb=QUOTA_MB)
    labels = {LABEL_MANAGED: "true", LABEL_NODE: node_name, LABEL_USER: "alice"}
    old = docker_client.volumes.create(session.home_volume, labels=labels)
    folder = Path(old.attrs["Mountpoint"])
    (folder / "thesis").mkdir()
    (folder / "thesis" / "chapter1.txt").write_text("it was a dark and stormy night\n")
    (folder / "secret.txt").write_text("mine\n")
    os.chmod(folder / "secret.txt", 0o600)
    (folder / "latest").symlink_to("thesis/chapter1.txt")
    for path in (folder, folder / "thesis", folder / "thesis" / "chapter1.txt"):
        os.chown(path, 1000, 1000)
    os.chown(folder / "secret.txt", 1000, 1000)
    os.lchown(folder / "latest", 1000, 1000)

    runtime = runtime_with_images(docker_client, node_name, sessions_dir, homes_dir)
    managed = runtime.start(session)
    container = docker_client.containers.get(managed.container_id)

    volume = docker_client.volumes.get(session.home_volume)
    point = home_images.mount_point(homes_dir, session.home_volume)
    assert volume.attrs["Options"]["device"] == str(point)
    assert volume.attrs["Labels"] == labels
    code, output = run(
        container, "cat ~/latest && stat -c '%a %u' ~/secret.txt && cat ~/secret.txt"
    )
    assert (code, output) == (0, b"it was a dark and stormy night\n600 1000\nmine\n")
    assert os.readlink(point / "latest") == "thesis/chapter1.txt"
    code, output = run(container, "dd if=/dev/zero of=$HOME/big bs=1M count=200")
    assert code != 0 and NO_SPACE in output, output
    assert (point / "thesis" / "chapter1.txt").read_text() == "it was a dark and stormy night\n"


@pytest.mark.docker
def test_a_larger_quota_grows_the_home_and_a_smaller_one_shrinks_nothing(
    docker_client, node_name, sessions_dir, homes_dir
) -> None:  # type: ignore[no-untyped-def]
    desktops = desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)
    name = f"deskpool-test-home-{node_name}"
    volume, created = desktops.ensure_volume(name, "alice", QUOTA_MB)
    point = home_images.mount_point(homes_dir, name)
    assert created and desktops.home_dir(volume) == point
    work = point / "work.bin"
    work.write_bytes(os.urandom(40 * MB))
    digest = hashlib.sha256(work.read_bytes()).hexdigest()

    _, created = desktops.ensure_volume(name, "alice", 2 * QUOTA_MB)
    grown = home_images.space(point)
    assert not created and grown is not None
    assert grown.size_bytes >= 2 * QUOTA_MB * MB and not grown.full
    (point / "more.bin").write_bytes(b"\0" * (60 * MB))  # more than the old quota held

    desktops.ensure_volume(name, "alice", QUOTA_MB // 2)
    kept = home_images.space(point)
    assert kept is not None and kept.size_bytes == grown.size_bytes
    assert hashlib.sha256(work.read_bytes()).hexdigest() == digest


@pytest.mark.docker
def test_the_agents_start_mounts_the_images_a_reboot_unmounted(
    docker_client, node_name, sessions_dir, homes_dir
) -> None:  # type: ignore[no-untyped-def]
    desktops = desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)
    name = f"deskpool-test-home-{node_name}"
    desktops.ensure_volume(name, "alice", QUOTA_MB)
    point = home_images.mount_point(homes_dir, name)
    (point / "kept.txt").write_text("kept\n")
    subprocess.run(["umount", str(point)], check=True)
    # Unmounted, the folder is root's and closed: a desktop cannot fill the node's disk there.
    assert not home_images.is_mounted(point)
    assert (point.stat().st_uid, point.stat().st_mode & 0o777) == (0, 0)

    desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)  # a new agent
    assert home_images.is_mounted(point)
    assert (point / "kept.txt").read_text() == "kept\n"
    assert desktops.home_folder(name, create=False) == point


@pytest.mark.docker
def test_an_upload_into_a_full_home_is_refused_with_a_sentence(
    docker_client, node_name, sessions_dir, homes_dir
) -> None:  # type: ignore[no-untyped-def]
    desktops = desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)
    name = f"deskpool-test-home-{node_name}"
    folder = desktops.home_folder(name, create=True)  # the Files page's first upload
    assert folder == home_images.mount_point(homes_dir, name)
    assert (folder.stat().st_uid, folder.stat().st_mode & 0o777) == (1000, 0o700)
    (folder / "earlier.txt").write_text("written before\n")

    size = 2 * QUOTA_MB * MB
    with HomeFolder.open(folder) as home:
        upload = home.begin_upload("big.bin", size)  # no quota on the ticket: the disk's
    chunk = b"\0" * MB
    with pytest.raises(HomeFileError) as refused:
        for _ in range(size // MB):
            upload.write(chunk)
    upload.abort()
    assert upload.no_space
    assert "home folder is full" in str(refused.value)
    assert sorted(p.name for p in folder.iterdir()) == ["earlier.txt"]  # nothing half-written
    assert (folder / "earlier.txt").read_text() == "written before\n"


@pytest.mark.docker
def test_a_claimed_warm_desktop_gets_the_bounded_home(
    docker_client, tiny_image, node_name, sessions_dir, homes_dir, fake_portal, make_session
) -> None:  # type: ignore[no-untyped-def]
    runtime = runtime_with_images(docker_client, node_name, sessions_dir, homes_dir)
    reconciler = Reconciler(runtime, fake_portal)
    converge(reconciler, [], [desired_warm("q1-1", image=tiny_image)])
    [container] = node_containers(docker_client, node_name)
    session = make_session(
        9604, image=tiny_image, vnc_password="quotapw1", warm_key="q1-1", home_quota_mb=QUOTA_MB
    )
    converge(reconciler, [session], [])
    assert fake_portal.states(9604) == ["STARTING", "RUNNING"]
    point = home_images.mount_point(homes_dir, session.home_volume)
    assert (point / ".bashrc").is_file()  # seeded with the image's skeleton, in the image
    code, output = run(container, "echo notes > ~/notes.txt")
    assert code == 0, output
    code, output = run(container, "dd if=/dev/zero of=$HOME/big bs=1M count=200")
    assert code != 0 and NO_SPACE in output, output
    assert (point / "notes.txt").read_text() == "notes\n"

    converge(reconciler, [], [])
    assert node_containers(docker_client, node_name) == []
    assert home_images.is_mounted(point)  # the image stays mounted for the next session
    assert (point / "notes.txt").read_text() == "notes\n"


@pytest.mark.docker
def test_an_older_volume_larger_than_its_quota_is_carried_whole_and_is_full(
    docker_client, node_name, sessions_dir, homes_dir
) -> None:  # type: ignore[no-untyped-def]
    name = f"deskpool-test-home-{node_name}"
    labels = {LABEL_MANAGED: "true", LABEL_NODE: node_name}
    old = docker_client.volumes.create(name, labels=labels)
    work = Path(old.attrs["Mountpoint"]) / "dataset.bin"
    work.write_bytes(os.urandom(80 * MB))  # more than the 64 MB quota: written before it held
    digest = hashlib.sha256(work.read_bytes()).hexdigest()

    desktops = desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)
    volume, created = desktops.ensure_volume(name, "alice", QUOTA_MB)
    point = home_images.mount_point(homes_dir, name)
    assert not created and desktops.home_dir(volume) == point
    assert hashlib.sha256((point / "dataset.bin").read_bytes()).hexdigest() == digest
    space = home_images.space(point)
    assert space is not None and space.used_bytes >= 80 * MB
    # The next start with the same quota shrinks nothing: the file is still whole.
    desktops.ensure_volume(name, "alice", QUOTA_MB)
    assert hashlib.sha256((point / "dataset.bin").read_bytes()).hexdigest() == digest


@pytest.mark.docker
def test_a_new_10_gb_home_takes_a_few_megabytes_of_the_nodes_disk(
    docker_client, node_name, sessions_dir, homes_dir
) -> None:  # type: ignore[no-untyped-def]
    desktops = desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)
    name = f"deskpool-test-home-{node_name}"
    desktops.ensure_volume(name, "alice", 10240)
    image = home_images.image_path(homes_dir, name)
    space = home_images.space(home_images.mount_point(homes_dir, name))
    assert space is not None and space.size_bytes >= 10240 * MB  # the files may take 10 GB
    assert image.stat().st_blocks * 512 < 16 * MB  # sparse: the journal is not written out


@pytest.mark.docker
def test_a_second_home_of_a_quota_is_made_at_its_size_at_once(
    docker_client, node_name, sessions_dir, homes_dir, caplog
) -> None:  # type: ignore[no-untyped-def]
    """The first home of a quota is made at the quota and grown by ext4's own blocks; the
    image size that took is kept, and the next home of that quota is made at it, with the
    same room and no grow (a class's forty new homes at its first start)."""
    quota_mb = QUOTA_MB + 13  # a quota no other test made a home for in this process
    desktops = desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)
    caplog.set_level("INFO", logger="nodeagent.runtime.home_images")
    rooms: list[int] = []
    for who in ("alice", "bob"):
        caplog.clear()
        name = f"deskpool-test-home-{node_name}-{who}"
        desktops.ensure_volume(name, who, quota_mb)
        space = home_images.space(home_images.mount_point(homes_dir, name))
        assert space is not None
        assert quota_mb * MB <= space.size_bytes <= (quota_mb + 4) * MB
        rooms.append(home_images.image_path(homes_dir, name).stat().st_size)
        grown = [r for r in caplog.records if "grown from" in r.getMessage()]
        assert bool(grown) == (who == "alice"), [r.getMessage() for r in caplog.records]
    assert rooms[0] == rooms[1]  # the image sizes (ext4 made at once gives a little more room)


@pytest.mark.docker
def test_the_nodes_quota_is_learned_at_start_so_its_first_home_is_not_grown(
    docker_client, node_name, sessions_dir, homes_dir, caplog
) -> None:  # type: ignore[no-untyped-def]
    """At the agent's start a throwaway home of the node's quota is made and removed; the
    first real home of that quota (a class's first claims) is then made at its size at once:
    no resize2fs. The throwaway leaves no file, mount or loop device behind."""
    quota_mb = QUOTA_MB + 29  # a quota no other test made a home for in this process
    caplog.set_level("INFO", logger="nodeagent.runtime.home_images")
    desktops = DesktopContainers(
        docker_client,
        node_name=node_name,
        sessions_dir=sessions_dir,
        homes_dir=homes_dir,
        default_quota_mb=quota_mb,
    )
    learned = [r.getMessage() for r in caplog.records if home_images.PROBE_PREFIX in r.getMessage()]
    assert any("grown from" in m for m in learned), learned  # the throwaway took the grow
    assert sorted(p.name for p in homes_dir.iterdir()) == []
    assert loop_devices_under(homes_dir) == []
    caplog.clear()
    name = f"deskpool-test-home-{node_name}"
    desktops.ensure_volume(name, "alice", None)  # None: the node's quota
    space = home_images.space(home_images.mount_point(homes_dir, name))
    assert space is not None and quota_mb * MB <= space.size_bytes <= (quota_mb + 4) * MB
    assert not [r for r in caplog.records if "grown from" in r.getMessage()]


@pytest.mark.docker
def test_starts_that_make_the_same_home_at_once_make_one_image(
    docker_client, node_name, sessions_dir, homes_dir
) -> None:  # type: ignore[no-untyped-def]
    desktops = desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)
    name = f"deskpool-test-home-{node_name}"
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: desktops.ensure_volume(name, "alice", QUOTA_MB), range(4)))
    assert [created for _, created in made].count(True) == 1
    assert {desktops.home_dir(volume) for volume, _ in made} == {
        home_images.mount_point(homes_dir, name)
    }
    assert len(loop_devices_under(homes_dir)) == 1
    assert home_mounts.mount_count(home_images.mount_point(homes_dir, name)) == 1


@pytest.mark.docker
def test_an_upload_into_a_home_without_room_for_a_name_says_it_is_full(
    docker_client, node_name, sessions_dir, homes_dir
) -> None:  # type: ignore[no-untyped-def]
    desktops = desktops_with_images(docker_client, node_name, sessions_dir, homes_dir)
    folder = desktops.home_folder(f"deskpool-test-home-{node_name}", create=True)
    assert folder is not None
    # Every inode taken (a 64 MB home has 16,384): no new name fits, however short.
    for number in range(100_000):
        try:
            (folder / f"{number:05d}").touch()
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
            break
    else:
        pytest.fail("the disk never refused a new name")
    with HomeFolder.open(folder) as home, pytest.raises(HomeFull) as refused:
        home.begin_upload("notes.txt", 10).abort()
    assert str(refused.value).startswith(HOME_FULL)
