"""The agent's state lines as the gateway splits and parses them: bounded, never trusting."""

from __future__ import annotations

from nodeagent.gateway.state_feed import LineSplitter, parse_state


def test_lines_split_anywhere_come_out_whole() -> None:
    splitter = LineSplitter(limit=100)
    assert splitter.feed(b'{"node_id"') == []
    assert splitter.feed(b": 1}\n{") == [b'{"node_id": 1}']
    assert splitter.feed(b'"node_id": 2}\n\n') == [b'{"node_id": 2}', b""]


def test_a_line_over_the_limit_is_dropped_whole_and_the_next_one_taken() -> None:
    splitter = LineSplitter(limit=10)
    kept: list[bytes] = []
    for chunk in (b"x" * 8, b"y" * 8, b"z" * 1000, b"\nshort\n"):
        kept += splitter.feed(chunk)
        assert len(splitter.buffer) <= 10 + len(chunk)  # never the whole long line
    assert kept == [b"short"]


def test_a_malformed_or_empty_line_gives_no_state() -> None:
    assert parse_state(b"") is None
    assert parse_state(b"not json") is None
    assert parse_state(b'{"node_id": -1}') is None
    assert parse_state(b'{"node_id": 1, "surprise": true}') is None
    state = parse_state(b'{"node_id": 3, "origins": ["https://a.example"]}')
    assert state is not None and state.node_id == 3
