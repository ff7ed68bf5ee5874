"""The RFB input counter (nodeagent/rfb_input.py) on synthetic client -> server streams,
split at every byte, in random chunks and one message at a time (issue 15)."""

from __future__ import annotations

import random
import struct

import pytest

from nodeagent.rfb_input import InputCounter

pytestmark = pytest.mark.lifecycle

CLIENT_INIT = b"\x01"
SET_PIXEL_FORMAT = bytes([0, 0, 0, 0]) + bytes(16)
SET_ENCODINGS = struct.pack(">BBH", 2, 0, 3) + struct.pack(">iii", 0, 7, -223)
UPDATE_REQUEST = struct.pack(">BBHHHH", 3, 1, 0, 0, 1280, 800)
KEY = struct.pack(">BBHI", 4, 1, 0, 0x61)
POINTER = struct.pack(">BBHH", 5, 1, 100, 200)
QEMU_KEY = struct.pack(">BBHII", 255, 0, 1, 0x61, 30)
CONTINUOUS = struct.pack(">BBHHHH", 150, 1, 0, 0, 1280, 800)
XVP = bytes([250, 0, 1, 2])


def cut_text(text: bytes, *, extended: bool = False) -> bytes:
    length = -len(text) if extended else len(text)
    return struct.pack(">B3xi", 6, length) + text


def fence(payload: bytes) -> bytes:
    return struct.pack(">B3xIB", 248, 0x80000000, len(payload)) + payload


def desktop_size(screens: int) -> bytes:
    return struct.pack(">BxHHBx", 251, 1024, 768, screens) + bytes(16 * screens)


# 3 keys (one QEMU), 4 pointer events, and every other kind noVNC sends, a clipboard text
# full of bytes that look like key events among them.
STREAM = b"".join(
    [
        SET_PIXEL_FORMAT,
        SET_ENCODINGS,
        UPDATE_REQUEST,
        POINTER,
        KEY,
        cut_text(KEY * 40),
        CONTINUOUS,
        fence(POINTER * 5),
        POINTER,
        desktop_size(2),
        QEMU_KEY,
        cut_text(POINTER * 3, extended=True),
        XVP,
        POINTER,
        struct.pack(">BBH", 2, 0, 0),  # SetEncodings with none
        KEY,
        POINTER,
        UPDATE_REQUEST,
    ]
)
EXPECTED = 7


def count(chunks: list[bytes]) -> InputCounter:
    counter = InputCounter(skip=len(CLIENT_INIT))
    returned = sum(counter.feed(chunk) for chunk in chunks)
    assert returned == counter.events
    return counter


def test_a_whole_stream_in_one_chunk() -> None:
    counter = count([CLIENT_INIT + STREAM])
    assert (counter.events, counter.lost) == (EXPECTED, False)
    assert counter.take() == EXPECTED and counter.events == 0


def test_split_at_every_byte_and_in_two_at_every_place() -> None:
    data = CLIENT_INIT + STREAM
    assert count([data[i : i + 1] for i in range(len(data))]).events == EXPECTED
    for cut in range(len(data) + 1):
        assert count([data[:cut], data[cut:]]).events == EXPECTED, cut


def test_random_chunks_over_many_repetitions() -> None:
    data = CLIENT_INIT + STREAM * 50
    chance = random.Random(15)
    for _ in range(50):
        chunks, position = [], 0
        while position < len(data):
            size = chance.randint(0, 40)
            chunks.append(data[position : position + size])
            position += size
        assert count(chunks).events == EXPECTED * 50


def test_a_large_clipboard_is_skipped_not_kept() -> None:
    counter = InputCounter()
    header = struct.pack(">B3xi", 6, 1 << 20)  # a 1 MiB text, its header split
    counter.feed(header[:5])
    counter.feed(header[5:] + KEY * 1000)
    counter.feed(KEY * ((1 << 20) // 8 - 1000))  # the rest of the text: not counted
    assert counter.events == 0 and len(counter._head) == 0
    counter.feed(KEY + POINTER)
    assert counter.events == 2


def test_an_unknown_type_stops_counting_for_good() -> None:
    counter = count([CLIENT_INIT + KEY + bytes([99]) + KEY + POINTER])
    assert (counter.events, counter.lost) == (1, True)
    assert counter.feed(KEY) == 0 and counter.events == 1


def test_an_unknown_qemu_submessage_stops_counting() -> None:
    counter = InputCounter()
    counter.feed(POINTER + bytes([255]))
    assert not counter.lost
    counter.feed(bytes([1, 0, 0]) + KEY)
    assert (counter.events, counter.lost) == (1, True)
