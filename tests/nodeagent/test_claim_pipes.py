"""A warm desktop's claim through the two pipes of its password folder (claim_pipes), with a
thread in the desktop's place: what the agent writes, what it makes of each answer, and that
it says so when nothing listens (the caller then claims with docker exec). The real listener,
deskpool-start's, is tested with real containers in test_warm.py and test_warm_language.py."""

from __future__ import annotations

import os
import select
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.runtime import claim_pipes
from nodeagent.runtime.base import StartFailed


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    claim_pipes.make(tmp_path)
    return tmp_path


def desktop(
    folder: Path, answer: Callable[[str], bytes | None]
) -> tuple[threading.Thread, list[str]]:
    """A listener as deskpool-start is one: reads the language line from ``claim``, then
    writes ``answer(language)`` to ``claimed`` (None: writes nothing, and never closes it
    either, within the test)."""
    heard: list[str] = []
    listening = threading.Event()

    def run() -> None:
        reading = os.open(folder / claim_pipes.CLAIM_PIPE, os.O_RDONLY | os.O_NONBLOCK)
        listening.set()
        select.select([reading], [], [], 5)
        heard.append(os.read(reading, 100).decode())
        os.close(reading)
        said = answer(heard[0].rstrip("\n"))
        if said is None:
            time.sleep(1.0)
            return
        with open(folder / claim_pipes.CLAIMED_PIPE, "wb") as answering:
            answering.write(said)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert listening.wait(5)
    return thread, heard


def test_the_pipes_are_fifos_only_root_writes_the_ask_and_the_desktop_the_answer(
    folder: Path,
) -> None:
    modes = {p.name: os.stat(p).st_mode for p in folder.iterdir()}
    assert set(modes) == {"claim", "claimed"}
    assert all(stat.S_ISFIFO(mode) for mode in modes.values())
    assert stat.S_IMODE(modes["claim"]) == 0o644
    assert stat.S_IMODE(modes["claimed"]) == 0o622


def test_the_language_goes_out_and_deskpool_claims_status_comes_back(folder: Path) -> None:
    thread, heard = desktop(folder, lambda language: b"0\n")
    assert claim_pipes.ask(folder, "zh-hans") == 0
    thread.join(5)
    assert heard == ["zh-hans\n"]

    thread, heard = desktop(folder, lambda language: b"70\n")  # the old session did not go
    assert claim_pipes.ask(folder, "") == 70
    thread.join(5)
    assert heard == ["\n"]  # the image's default language: an empty line


def test_nothing_listening_or_no_pipes_means_claim_with_docker_exec(
    tmp_path: Path, folder: Path
) -> None:
    started = time.monotonic()
    assert claim_pipes.ask(folder, "en") is None  # pipes, nobody reading
    assert claim_pipes.ask(tmp_path / "none", "en") is None  # no pipes at all
    assert time.monotonic() - started < 1  # at once, not after a timeout


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"", "with '', not a status"),  # closed without a word
        (b"yes\n", "with 'yes', not a status"),
        (b"-1\n", "with '-1', not a status"),
    ],
)
def test_an_answer_that_is_no_status_fails_the_claim(folder: Path, answer: bytes, why: str) -> None:
    thread, _ = desktop(folder, lambda language: answer)
    with pytest.raises(StartFailed, match=why):
        claim_pipes.ask(folder, "en")
    thread.join(5)


def test_a_desktop_that_never_answers_fails_the_claim_in_bounded_time(folder: Path) -> None:
    thread, _ = desktop(folder, lambda language: None)
    started = time.monotonic()
    with pytest.raises(StartFailed, match="did not answer its claim"):
        claim_pipes.ask(folder, "en", timeout_s=0.3)
    assert time.monotonic() - started < 1
    thread.join(5)
