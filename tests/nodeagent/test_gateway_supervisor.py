"""The agent runs its gateway as a child: starts it, learns its port, feeds it the state,
restarts it when it dies and ends it on close (nodeagent.gateway.supervisor)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodeagent.gateway.messages import GatewaySession, GatewayState
from nodeagent.gateway.supervisor import GatewaySupervisor, child_environment

STAND_IN = Path(__file__).parent / "fixtures" / "stand_in_gateway.py"


def stand_in(*flags: str) -> list[str]:
    return [sys.executable, str(STAND_IN), "--bind", "127.0.0.1", "--port", "0", *flags]


def state(*session_ids: int, node_id: int = 7) -> GatewayState:
    return GatewayState(
        node_id=node_id,
        sessions=[
            GatewaySession(session_id=s, host="127.0.0.1", port=20000 + s, password="pw")
            for s in session_ids
        ],
    )


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


def recorded(path: Path) -> list[tuple[int, GatewayState]]:
    """(pid, state) for each state line the stand-ins read, in order."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        pid, _, body = line.partition(" ")
        rows.append((int(pid), GatewayState.model_validate_json(body)))
    return rows


@pytest.fixture
def supervisors() -> Iterator[list[GatewaySupervisor]]:
    """Supervisors a test made; each is closed at the end, whatever happened."""
    made: list[GatewaySupervisor] = []
    yield made
    for supervisor in made:
        supervisor.close()


def test_the_child_says_where_it_listens_and_gets_each_changed_state_once(
    tmp_path: Path, supervisors: list[GatewaySupervisor]
) -> None:
    record = tmp_path / "states"
    supervisor = GatewaySupervisor("127.0.0.1", command=stand_in("--record", str(record)))
    supervisors.append(supervisor)

    port = supervisor.start()

    assert port is not None and supervisor.port == port
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # it listens there
    supervisor.update(state(21))
    eventually(lambda: len(recorded(record)) == 1)
    supervisor.update(state(21))  # the same: not written again
    supervisor.update(state(21, 22))
    eventually(lambda: len(recorded(record)) == 2)
    time.sleep(0.2)
    rows = recorded(record)
    assert [sorted(s.session_id for s in st.sessions) for _, st in rows] == [[21], [21, 22]]
    assert rows[0][1].sessions[0].password == "pw"  # the secret goes on the pipe


def test_a_killed_child_is_started_again_and_gets_the_last_state_again(
    tmp_path: Path, supervisors: list[GatewaySupervisor]
) -> None:
    record = tmp_path / "states"
    supervisor = GatewaySupervisor(
        "127.0.0.1", command=stand_in("--record", str(record)), restart_first_s=0.2
    )
    supervisors.append(supervisor)
    first_port = supervisor.start()
    supervisor.update(state(21))
    eventually(lambda: len(recorded(record)) == 1)
    first_pid = supervisor.pid
    assert first_pid is not None

    os.kill(first_pid, signal.SIGKILL)

    eventually(lambda: supervisor.listening and supervisor.pid not in (None, first_pid))
    eventually(lambda: len(recorded(record)) == 2)
    (pid_1, state_1), (pid_2, state_2) = recorded(record)
    assert pid_1 == first_pid and pid_2 == supervisor.pid and state_2 == state_1 == state(21)
    assert supervisor.starts == 2
    assert supervisor.port is not None and supervisor.port != first_port  # port 0: a new one


def test_restarts_back_off_while_the_child_keeps_failing(
    supervisors: list[GatewaySupervisor],
) -> None:
    command = [sys.executable, "-c", "import sys; sys.exit(3)"]
    supervisor = GatewaySupervisor(
        "127.0.0.1", command=command, restart_first_s=0.1, restart_max_s=0.4
    )
    supervisors.append(supervisor)

    assert supervisor.start() is None  # it never said where it listens
    time.sleep(2.0)

    # 0.1 + 0.2 + 0.4 + 0.4 + ...: about 6 starts in 2 s, not one per few milliseconds.
    assert 3 <= supervisor.starts <= 9
    assert supervisor.port is None


def test_a_child_that_never_says_where_it_listens_is_ended(
    supervisors: list[GatewaySupervisor],
) -> None:
    supervisor = GatewaySupervisor(
        "127.0.0.1", command=stand_in("--silent"), listen_timeout_s=0.5, restart_first_s=30
    )
    supervisors.append(supervisor)
    began = time.monotonic()

    assert supervisor.start() is None

    assert time.monotonic() - began < 5
    eventually(lambda: supervisor.pid is None)


def test_close_ends_the_child_by_closing_its_input(
    supervisors: list[GatewaySupervisor],
) -> None:
    supervisor = GatewaySupervisor("127.0.0.1", command=stand_in())
    supervisors.append(supervisor)
    supervisor.start()
    pid = supervisor.pid
    assert pid is not None

    began = time.monotonic()
    supervisor.close()

    assert time.monotonic() - began < 2  # it exited at the end of its input, no signal
    assert supervisor.pid is None and not _alive(pid)
    time.sleep(0.3)
    assert supervisor.starts == 1  # not started again


def test_close_kills_a_child_that_ignores_its_input_and_sigterm(
    supervisors: list[GatewaySupervisor],
) -> None:
    supervisor = GatewaySupervisor("127.0.0.1", command=stand_in("--stubborn"), stop_grace_s=0.3)
    supervisors.append(supervisor)
    supervisor.start()
    pid = supervisor.pid
    assert pid is not None

    supervisor.close()

    assert not _alive(pid)


def test_events_are_queued_in_order_and_a_malformed_line_is_skipped_once(
    supervisors: list[GatewaySupervisor], caplog: pytest.LogCaptureFixture
) -> None:
    supervisor = GatewaySupervisor("127.0.0.1", command=stand_in("--events", "3"))
    supervisors.append(supervisor)
    supervisor.start()

    eventually(lambda: supervisor.pending() == 3)
    events = supervisor.take(limit=2, timeout_s=1)
    events += supervisor.take(limit=500, timeout_s=1)

    assert [e.ticket for e in events] == [f"{n:022d}" for n in range(3)]
    assert supervisor.malformed == 1
    [warning] = [r for r in caplog.records if "no event" in r.getMessage()]
    assert "this is no event" in warning.getMessage()
    assert supervisor.take(timeout_s=0) == []


def test_what_a_crashed_child_left_open_is_reported_closed(
    supervisors: list[GatewaySupervisor],
) -> None:
    supervisor = GatewaySupervisor(
        "127.0.0.1", command=stand_in("--events", "2", "--crash"), restart_first_s=60
    )
    supervisors.append(supervisor)
    supervisor.start()

    eventually(lambda: supervisor.pending() == 4)
    events = supervisor.take(limit=500, timeout_s=1)

    assert [(e.kind, e.ticket) for e in events] == [
        ("opened", f"{0:022d}"), ("opened", f"{1:022d}"),
        ("closed", f"{0:022d}"), ("closed", f"{1:022d}"),
    ]  # fmt: skip
    assert all(e.reason == "the gateway stopped" for e in events[2:])


def test_a_full_queue_drops_the_oldest_events(supervisors: list[GatewaySupervisor]) -> None:
    supervisor = GatewaySupervisor("127.0.0.1", command=stand_in("--events", "30"), events_max=10)
    supervisors.append(supervisor)
    supervisor.start()

    eventually(lambda: supervisor.dropped == 20)

    assert [e.ticket for e in supervisor.take()] == [f"{n:022d}" for n in range(20, 30)]


def test_the_child_gets_no_secret_of_the_agent_in_its_environment() -> None:
    env = {"PATH": "/bin", "DESKPOOL_JOIN_TOKEN": "join-1", "DESKPOOL_NODE_NAME": "gpu-a01",
           "SOME_SECRET_KEY": "x", "DB_PASSWORD": "y"}  # fmt: skip
    assert child_environment(env) == {"PATH": "/bin", "DESKPOOL_NODE_NAME": "gpu-a01"}


@pytest.mark.skipif(
    importlib.util.find_spec("nodeagent.gateway.__main__") is None,
    reason="python -m nodeagent.gateway is not there yet",
)
def test_the_real_gateway_starts_listens_and_ends_on_close(
    supervisors: list[GatewaySupervisor],
) -> None:
    supervisor = GatewaySupervisor("127.0.0.1", 0)
    supervisors.append(supervisor)

    port = supervisor.start()

    assert port is not None
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    supervisor.update(state(21))
    time.sleep(0.3)
    assert supervisor.listening and supervisor.starts == 1  # the state did not end it
    pid = supervisor.pid
    assert pid is not None
    supervisor.close()
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_state_over_the_gateways_line_limit_is_not_sent(
    tmp_path: Path, supervisors: list[GatewaySupervisor], caplog: pytest.LogCaptureFixture
) -> None:
    record = tmp_path / "states"
    supervisor = GatewaySupervisor("127.0.0.1", command=stand_in("--record", str(record)))
    supervisors.append(supervisor)
    supervisor.start()
    supervisor.update(state(21))
    eventually(lambda: len(recorded(record)) == 1)

    huge = state(*range(1, 40_001))  # about 130 bytes each: over 4 MiB
    supervisor.update(huge)
    time.sleep(0.3)

    assert len(recorded(record)) == 1  # the gateway keeps the state it had
    assert any("over the gateway's" in r.getMessage() for r in caplog.records)
