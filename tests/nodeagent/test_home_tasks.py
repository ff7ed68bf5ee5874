"""Home tasks (list, delete): the runner (each task once, reports, 409 and an unreachable
portal), its wire call, the agent feeding it, and a home written through a real Docker
volume. Uploads and downloads are no task: tests/nodeagent/gateway/test_gateway_files.py."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeagent.home_files import HomeFolder
from nodeagent.home_tasks import HomeTaskRunner
from nodeagent.portal_client import Conflict, PortalClient, PortalError, PortalUnavailable
from nodeagent.protocol_files import HomeTask, HomeTaskAnswer, HomeTaskReport
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.runtime.simulated_runtime import SimulatedRuntime
from tests.nodeagent.test_agent_loop import TinyPortal, make_agent

HOME = "deskpool-aaaa11112222-home-alice"  # home_volume_name("aaaa11112222", "alice")


def task(task_id: int, kind: str, path: str = "", **fields: Any) -> HomeTask:
    return HomeTask.model_validate(
        {"id": task_id, "kind": kind, "home_volume": HOME, "path": path, **fields}
    )


class FakeFiles:
    """The portal's home-task call in memory, recording what the agent sends."""

    def __init__(self) -> None:
        self.reports: list[tuple[int, HomeTaskReport]] = []
        self.calls: list[tuple[str, int]] = []
        self.conflict: set[int] = set()  # every call about these tasks answers 409
        self.unreachable: set[str] = set()  # "report": no answer
        self.gate = threading.Event()  # cleared: reports wait for it
        self.gate.set()
        self._lock = threading.Lock()

    def _call(self, what: str, task_id: int) -> None:
        with self._lock:
            self.calls.append((what, task_id))
        if task_id in self.conflict:
            raise Conflict("409 task is not pending", state="FAILED")
        if what in self.unreachable:
            raise PortalUnavailable("portal unreachable: ConnectError")

    def report_home_task(self, task_id: int, report: HomeTaskReport) -> HomeTaskAnswer:
        self.gate.wait(10)
        self._call("report", task_id)
        with self._lock:
            self.reports.append((task_id, report))
        return HomeTaskAnswer(state="DONE" if report.ok else "FAILED")

    def report_of(self, task_id: int) -> HomeTaskReport:
        (report,) = [r for i, r in self.reports if i == task_id]
        return report

    def count(self, what: str, task_id: int) -> int:
        return self.calls.count((what, task_id))


@pytest.fixture
def runtime(tmp_path: Path) -> SimulatedRuntime:
    return SimulatedRuntime(node_name="gpu-a01", homes_dir=tmp_path / "homes")


@pytest.fixture
def files() -> FakeFiles:
    return FakeFiles()


@pytest.fixture
def runner(runtime: SimulatedRuntime, files: FakeFiles) -> Iterator[HomeTaskRunner]:
    runner = HomeTaskRunner(runtime, files, retry_s=0)
    yield runner
    runner.close()


def run(runner: HomeTaskRunner, *tasks: HomeTask) -> None:
    runner.offer(tasks)
    runner.wait_idle(30)


def test_a_home_that_does_not_exist_lists_empty_and_is_not_made(
    runner: HomeTaskRunner, runtime: SimulatedRuntime, files: FakeFiles
) -> None:
    run(runner, task(1, "list"), task(2, "delete", "notes.txt"))

    assert files.report_of(1) == HomeTaskReport(ok=True, used_bytes=0)
    assert files.report_of(2).reason == 'No file or folder named "notes.txt" in your home.'
    assert runtime.home_folder(HOME, create=False) is None


def test_list_then_delete(
    runner: HomeTaskRunner, runtime: SimulatedRuntime, files: FakeFiles, caplog: Any
) -> None:
    folder = runtime.home_folder(HOME, create=True)
    assert folder is not None
    (folder / "notes.txt").write_bytes(b"hello world")
    caplog.set_level(logging.INFO, logger="nodeagent.home_tasks")

    run(runner, task(1, "list"))
    run(runner, task(2, "delete", "notes.txt"))

    assert not (folder / "notes.txt").exists()
    listing = files.report_of(1)
    assert [(e.name, e.kind, e.size) for e in listing.entries] == [("notes.txt", "file", 11)]
    assert listing.used_bytes == 11
    assert files.report_of(2) == HomeTaskReport(ok=True, used_bytes=0)
    # One line per task, without the file's contents.
    lines = [r.getMessage() for r in caplog.records if r.name == "nodeagent.home_tasks"]
    assert len(lines) == 2 and lines[1].startswith("home task 2 delete: deleted")
    assert not any("hello" in line for line in lines)


def test_a_task_is_started_once_however_often_it_is_listed(
    runner: HomeTaskRunner, files: FakeFiles
) -> None:
    deletion = task(1, "delete", "a.txt")
    files.gate.clear()  # the tasks are under way while they are listed again
    for _ in range(5):
        runner.offer([deletion, task(2, "list")])
    files.gate.set()
    runner.wait_idle(30)
    run(runner, deletion, task(2, "list"))

    assert files.count("report", 1) == 1 and files.count("report", 2) == 1
    assert [i for i, _ in files.reports] in ([1, 2], [2, 1])
    # An id no longer listed is forgotten (the portal never lists it again).
    runner.offer([])
    assert not runner._started


def test_a_task_the_portal_no_longer_wants_is_dropped(
    runner: HomeTaskRunner, files: FakeFiles
) -> None:
    files.conflict = {2}
    run(runner, task(2, "list"))

    assert files.count("report", 2) == 1  # 409 on the report: not tried again
    assert files.reports == []


def test_an_unreachable_portal_gets_the_report_once_more_then_the_task_is_dropped(
    runner: HomeTaskRunner, files: FakeFiles
) -> None:
    files.unreachable = {"report"}
    run(runner, task(1, "list"))
    assert files.count("report", 1) == 2


# -- the wire ----------------------------------------------------------------------------


def wire_client(handler: Any) -> PortalClient:
    client = PortalClient("http://portal.test/", transport=httpx.MockTransport(handler))
    client.node_token = "tok"
    return client


def test_the_report_on_the_wire() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"state": "DONE"})

    answer = wire_client(handler).report_home_task(7, HomeTaskReport(ok=False, reason="No."))

    assert answer.state == "DONE"
    assert [(r.method, r.url.path) for r in seen] == [
        ("POST", "/api/agent/v1/home-tasks/7/report/")
    ]
    assert seen[0].headers["Authorization"] == "Node tok"
    assert json.loads(seen[0].content) == {"ok": False, "reason": "No."}  # the fields set


def test_error_answers_are_typed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        status = {"5": 409, "6": 404}[request.url.path.split("/")[-3]]
        return httpx.Response(status, json={"detail": "no", "state": "DONE"})

    client = wire_client(handler)
    with pytest.raises(Conflict) as conflict:
        client.report_home_task(5, HomeTaskReport(ok=True))
    assert conflict.value.state == "DONE"
    with pytest.raises(PortalError) as caught:
        client.report_home_task(6, HomeTaskReport(ok=True))
    assert caught.value.status_code == 404


# -- the agent feeds the runner ----------------------------------------------------------


class FilesPortal(TinyPortal):
    """TinyPortal with home tasks in its desired state and their report endpoint."""

    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        super().__init__()
        self.tasks = tasks
        self.reported = threading.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/agent/v1/")
        if path in ("desired/", "wait/"):
            self.requests.append((request.method, path, None, None))
            if path == "wait/" and self.reported.wait(0.05):
                return httpx.Response(204)
            return httpx.Response(
                200, json={"version": 1, "sessions": [], "home_tasks": self.tasks}
            )
        if path.startswith("home-tasks/"):
            self.requests.append(("POST", path, None, json.loads(request.content)))
            self.reported.set()
            return httpx.Response(200, json={"state": "DONE"})
        return super().__call__(request)


def test_one_round_carries_out_the_home_tasks(tmp_path: Path) -> None:
    portal = FilesPortal([{"id": 8, "kind": "delete", "home_volume": HOME, "path": "a.txt"}])
    agent = make_agent(portal, tmp_path)
    folder = agent.runtime.home_folder(HOME, create=True)
    assert folder is not None
    (folder / "a.txt").write_bytes(b"four")
    (folder / "b.txt").write_bytes(b"kept")

    agent.run(once=True)

    assert portal.bodies("home-tasks/8/report/") == [{"ok": True, "used_bytes": 4}]
    assert sorted(p.name for p in folder.iterdir()) == ["b.txt"]


def test_the_following_loop_starts_home_tasks_from_its_waits(tmp_path: Path) -> None:
    portal = FilesPortal([{"id": 9, "kind": "list", "home_volume": HOME}])
    agent = make_agent(portal, tmp_path)
    loop = threading.Thread(target=agent.run)
    loop.start()
    try:
        assert portal.reported.wait(30)
    finally:
        agent.stopping.set()
        loop.join(30)
    assert not loop.is_alive()
    assert portal.bodies("home-tasks/9/report/") == [{"ok": True, "used_bytes": 0}]


# -- a real Docker volume ----------------------------------------------------------------


@pytest.mark.docker
def test_a_file_written_into_a_new_volume_is_seen_by_a_desktop(
    docker_client, tiny_image, node_name, sessions_dir
) -> None:  # type: ignore[no-untyped-def]
    runtime = DockerRuntime(docker_client, node_name=node_name, sessions_dir=sessions_dir)
    volume = f"deskpool-test-home-{uuid.uuid4().hex[:8]}"
    assert runtime.home_folder(volume, create=False) is None

    folder = runtime.home_folder(volume, create=True)
    assert folder is not None
    with HomeFolder.open(folder) as home:
        upload = home.begin_upload("hello.txt", 19)  # as the gateway's upload writes
        for chunk in (b"from the ", b"Files page"):
            upload.write(chunk)
        upload.finish()
        assert home.used_bytes() == 19
    assert runtime.home_folder(volume, create=False) == folder

    made = docker_client.volumes.get(volume)
    assert made.attrs["Labels"]["deskpool.node"] == node_name  # removed with the node's
    output = docker_client.containers.run(
        tiny_image,
        ["sh", "-c", "stat -c '%u:%g %a' /home/desktop /home/desktop/hello.txt; "
         "cat /home/desktop/hello.txt; echo; touch /home/desktop/from-desktop"],
        user="1000:1000",
        entrypoint=[],
        volumes={volume: {"bind": "/home/desktop", "mode": "rw"}},
        remove=True,
    ).decode()  # fmt: skip

    assert output.splitlines() == ["1000:1000 700", "1000:1000 644", "from the Files page"]
    assert (folder / "from-desktop").exists()  # the desktop user can write its home


@pytest.mark.docker
def test_a_shared_home_is_a_folder_under_the_root(
    docker_client, node_name, sessions_dir, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "homes"
    root.mkdir()
    runtime = DockerRuntime(
        docker_client, node_name=node_name, sessions_dir=sessions_dir, home_root=root
    )
    volume = f"deskpool-test-home-{uuid.uuid4().hex[:8]}"

    assert runtime.home_folder(volume, create=False) is None
    assert runtime.home_folder(volume, create=True) == root / volume
    info = (root / volume).stat()
    assert (info.st_uid, info.st_mode & 0o777) == (1000, 0o700)
