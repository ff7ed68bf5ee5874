"""HomeFolder: listing, reading, writing and deleting in one home, on real files; links
(which a desktop can plant anywhere) are never followed and nothing outside is touched.
Reading and writing go through ``open_file`` and ``begin_upload``, as the gateway's
downloads and uploads do (nodeagent/gateway/files.py)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC
from pathlib import Path

import pytest

from nodeagent import home_files
from nodeagent.home_files import MB, TEMP_PREFIX, HomeFileError, HomeFolder

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="ownership needs root")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    (folder / "docs" / "deep").mkdir(parents=True)
    (folder / "docs" / "a.txt").write_bytes(b"alpha")
    (folder / "docs" / "deep" / "b.bin").write_bytes(b"\x00" * 300)
    (folder / "z.txt").write_bytes(b"zz")
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the home, standing for /etc: it must never change."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "passwd").write_bytes(b"root:x:0:0")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def read_file(folder: HomeFolder, path: str) -> bytes:
    """A file's bytes, read as the gateway's download reads them."""
    file, _ = folder.open_file(path)
    with file:
        return file.read()


def write_file(
    folder: HomeFolder, path: str, chunks: Iterable[bytes], size: int, quota: int = 0
) -> None:
    """Exactly ``size`` bytes into ``path``, written as the gateway's upload writes them."""
    upload = folder.begin_upload(path, size, quota)
    try:
        for chunk in chunks:
            upload.write(chunk)
        upload.finish()
    finally:
        upload.abort()


def write(root: Path, path: str, data: bytes, quota: int = 0) -> None:
    with HomeFolder.open(root) as home:
        write_file(home, path, [data[:3], data[3:]], len(data), quota)


def refusal(action) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(HomeFileError) as caught:
        action()
    return str(caught.value)


# -- listing -----------------------------------------------------------------------------


def test_a_listing_has_folders_first_then_files_by_name(home: Path) -> None:
    (home / "a-folder").mkdir()
    (home / "link").symlink_to("/etc")

    with HomeFolder.open(home) as folder:
        listing = folder.list("")

    assert [(e.name, e.kind) for e in listing.entries] == [
        ("a-folder", "folder"),
        ("docs", "folder"),
        ("link", "link"),
        ("z.txt", "file"),
    ]
    z = listing.entries[-1]
    assert z.size == 2 and z.modified.tzinfo == UTC
    assert [e.size for e in listing.entries[:3]] == [0, 0, 0]  # a link's target is not read
    assert not listing.truncated and listing.skipped == 0


def test_a_subfolder_is_listed_by_its_path(home: Path) -> None:
    with HomeFolder.open(home) as folder:
        listing = folder.list("docs/deep")
    assert [(e.name, e.size) for e in listing.entries] == [("b.bin", 300)]


def test_a_listing_stops_at_the_limit_and_says_so(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(home_files, "HOME_LIST_MAX", 2)
    for name in ("c", "b", "a"):
        (home / "docs" / name).write_bytes(b"")

    with HomeFolder.open(home) as folder:
        listing = folder.list("docs")

    assert [e.name for e in listing.entries] == ["deep", "a"]
    assert listing.truncated


def test_names_that_are_not_utf8_are_left_out_and_counted(home: Path) -> None:
    os.close(os.open(os.fsencode(home) + b"/bad-\xff-name", os.O_CREAT | os.O_WRONLY, 0o644))

    with HomeFolder.open(home) as folder:
        listing = folder.list("")

    assert [e.name for e in listing.entries] == ["docs", "z.txt"]
    assert listing.skipped == 1


def test_listing_what_is_missing_or_a_file_is_a_sentence(home: Path) -> None:
    with HomeFolder.open(home) as folder:
        assert refusal(lambda: folder.list("nope")) == 'No folder named "nope" in your home.'
        assert refusal(lambda: folder.list("z.txt")) == '"z.txt" is not a folder.'
        assert "not a valid path" in refusal(lambda: folder.list("../outside"))


def test_a_missing_home_is_a_sentence(tmp_path: Path) -> None:
    def open_missing() -> None:
        with HomeFolder.open(tmp_path / "nobody"):
            pass

    assert refusal(open_missing) == "Your home folder does not exist on this node."


# -- links planted by the desktop --------------------------------------------------------


def test_a_link_in_the_path_is_never_followed(home: Path, outside: Path) -> None:
    (home / "etc").symlink_to(outside)
    (home / "docs" / "up").symlink_to("../..")
    before = snapshot(outside)

    with HomeFolder.open(home) as folder:
        for action in (
            lambda: folder.list("etc"),
            lambda: read_file(folder, "etc/passwd"),
            lambda: write_file(folder, "etc/passwd", [b"owned"], 5),
            lambda: folder.delete("etc/passwd"),
            lambda: folder.list("docs/up"),
            lambda: read_file(folder, "docs/up/outside/passwd"),
        ):
            assert "is a link; links are not followed" in refusal(action)

    assert snapshot(outside) == before


def test_the_home_itself_being_a_link_is_refused(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "linked-home").symlink_to(outside)

    def open_link() -> None:
        with HomeFolder.open(tmp_path / "linked-home"):
            pass

    assert "cannot be opened" in refusal(open_link)


def test_a_link_is_neither_downloaded_nor_replaced_by_an_upload(home: Path, outside: Path) -> None:
    (home / "secret").symlink_to(outside / "passwd")

    with HomeFolder.open(home) as folder:
        assert refusal(lambda: read_file(folder, "secret")) == (
            '"secret" is a link; a link cannot be downloaded.'
        )
        assert refusal(lambda: write_file(folder, "secret", [b"x"], 1)) == (
            '"secret" is a link; a link cannot be replaced by an upload.'
        )

    assert (outside / "passwd").read_bytes() == b"root:x:0:0"
    assert os.readlink(home / "secret") == str(outside / "passwd")
    assert not [p for p in home.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_deleting_a_link_deletes_the_link_only(home: Path, outside: Path) -> None:
    (home / "to-outside").symlink_to(outside)
    (home / "docs" / "to-outside").symlink_to(outside)

    with HomeFolder.open(home) as folder:
        folder.delete("to-outside")
        folder.delete("docs")  # a folder holding a link: rmtree removes the link only

    assert snapshot(outside) == {"passwd": b"root:x:0:0"}
    assert sorted(p.name for p in home.iterdir()) == ["z.txt"]


def test_a_fifo_is_not_read(home: Path) -> None:
    os.mkfifo(home / "pipe")  # opening it for reading would block without O_NONBLOCK
    with HomeFolder.open(home) as folder:
        assert "is not a regular file" in refusal(lambda: read_file(folder, "pipe"))


# -- reading -----------------------------------------------------------------------------


def test_a_file_is_read(home: Path) -> None:
    with HomeFolder.open(home) as folder:
        assert read_file(folder, "docs/a.txt") == b"alpha"
        assert read_file(folder, "docs/deep/b.bin") == b"\x00" * 300


def test_reading_refuses_folders_missing_files_and_the_home(home: Path) -> None:
    with HomeFolder.open(home) as folder:
        assert refusal(lambda: read_file(folder, "docs")) == (
            '"docs" is a folder; a folder cannot be downloaded.'
        )
        assert refusal(lambda: read_file(folder, "docs/none.txt")) == (
            'No file or folder named "docs/none.txt" in your home.'
        )
        assert "not the home itself" in refusal(lambda: read_file(folder, ""))


# -- writing -----------------------------------------------------------------------------


def test_an_upload_writes_a_new_file_and_replaces_an_old_one(home: Path) -> None:
    write(home, "docs/new.txt", b"hello world")
    write(home, "z.txt", b"replaced")

    assert (home / "docs" / "new.txt").read_bytes() == b"hello world"
    assert (home / "z.txt").read_bytes() == b"replaced"
    assert oct((home / "docs" / "new.txt").stat().st_mode & 0o777) == "0o644"
    assert not [p for p in home.rglob(f"{TEMP_PREFIX}*")]


@needs_root
def test_an_uploaded_file_belongs_to_the_desktop_user(home: Path) -> None:
    write(home, "docs/mine.txt", b"data")
    info = (home / "docs" / "mine.txt").stat()
    assert (info.st_uid, info.st_gid) == (1000, 1000)


def test_an_upload_needs_its_folder_and_never_replaces_a_folder(home: Path) -> None:
    assert refusal(lambda: write(home, "nofolder/x.txt", b"x")) == (
        'No folder named "nofolder" in your home.'
    )
    assert refusal(lambda: write(home, "docs", b"x")) == (
        '"docs" is a folder; a folder cannot be replaced by an upload.'
    )
    assert (home / "docs" / "a.txt").read_bytes() == b"alpha"


def test_an_upload_of_the_wrong_size_leaves_nothing(home: Path) -> None:
    with HomeFolder.open(home) as folder:
        short = refusal(lambda: write_file(folder, "docs/a.txt", [b"abc"], 10))
        long = refusal(lambda: write_file(folder, "docs/a.txt", [b"abc", b"def"], 4))

    assert short == 'The upload of "docs/a.txt" was cut short (3 of 10 bytes); try again.'
    assert long == 'The upload of "docs/a.txt" sent more than its 4 bytes; try again.'
    assert (home / "docs" / "a.txt").read_bytes() == b"alpha"
    assert sorted(p.name for p in (home / "docs").iterdir()) == ["a.txt", "deep"]


def test_a_failing_source_leaves_no_temporary_file(home: Path) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        yield b"part"
        raise ConnectionError("gone")

    with HomeFolder.open(home) as folder, pytest.raises(ConnectionError):
        write_file(folder, "docs/new.txt", chunks(), 100)

    assert sorted(p.name for p in (home / "docs").iterdir()) == ["a.txt", "deep"]


def test_the_quota_counts_the_home_less_the_file_replaced(home: Path) -> None:
    # The home holds 5 + 300 + 2 = 307 bytes.
    with HomeFolder.open(home) as folder:
        assert folder.used_bytes() == 307
    write(home, "z.txt", b"x" * 12, quota=317)  # 307 - 2 + 12 = 317: fits exactly
    full = refusal(lambda: write(home, "new.bin", b"y" * 2 * MB, quota=1 * MB))

    assert full == (
        "Your home folder is full: 0.1 MB of 1.0 MB used; this file needs 2.0 MB. "
        "Delete files, then upload again."
    )
    assert not (home / "new.bin").exists()
    assert not [p for p in home.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_used_bytes_does_not_follow_links(home: Path, tmp_path: Path) -> None:
    big = tmp_path / "big-outside"
    big.mkdir()
    (big / "huge").write_bytes(b"x" * 10_000)
    (home / "linked").symlink_to(big)
    (home / "linked-file").symlink_to(big / "huge")

    with HomeFolder.open(home) as folder:
        assert folder.used_bytes() == 307


# -- deleting ----------------------------------------------------------------------------


def test_files_and_folders_are_deleted_but_never_the_home(home: Path) -> None:
    with HomeFolder.open(home) as folder:
        folder.delete("z.txt")
        folder.delete("docs")
        assert refusal(lambda: folder.delete("")) == ("Your home folder itself cannot be deleted.")
        assert refusal(lambda: folder.delete("docs")) == (
            'No file or folder named "docs" in your home.'
        )
        assert folder.used_bytes() == 0
    assert home.is_dir() and not list(home.iterdir())


def test_a_long_path_is_shortened_in_sentences(home: Path) -> None:
    path = "/".join(["folder"] * 30)
    (home / path).mkdir(parents=True)
    with HomeFolder.open(home) as folder:
        sentence = refusal(lambda: read_file(folder, f"{path}/missing.txt"))
    assert sentence.startswith('No file or folder named "…') and len(sentence) < 130
    assert sentence.endswith('folder/folder/missing.txt" in your home.')
