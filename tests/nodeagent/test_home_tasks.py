"""Home tasks: the runner (each task once, reports, 409 and an unreachable portal), its wire
calls, the agent feeding it, and a home written through a real Docker volume."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeagent.home_files import MB, HomeFolder
from nodeagent.home_tasks import LOST_PORTAL, HomeTaskRunner
from nodeagent.portal_client import Conflict, PortalClient, PortalError, PortalUnavailable
from nodeagent.protocol_files import HomeTask, HomeTaskAnswer, HomeTaskReport
from nodeagent.runtime.docker_runtime import DockerRuntime
from nodeagent.runtime.simulated_runtime import SimulatedRuntime
from tests.nodeagent.test_agent_loop import TinyPortal, make_agent

HOME = "deskpool-home-alice"


def task(task_id: int, kind: str, path: str = "", **fields: Any) -> HomeTask:
    return HomeTask.model_validate(
        {"id": task_id, "kind": kind, "home_volume": HOME, "path": path, **fields}
    )


class FakeFiles:
    """The portal's three home-task calls in memory, recording what the agent sends."""

    def __init__(self) -> None:
        self.uploads: dict[int, list[bytes]] = {}
        self.puts: dict[int, bytes] = {}
        self.reports: list[tuple[int, HomeTaskReport]] = []
        self.calls: list[tuple[str, int]] = []
        self.conflict: set[int] = set()  # every call about these tasks answers 409
        self.unreachable: set[str] = set()  # "put", "report": no answer
        self.gate = threading.Event()  # cleared: uploads wait for it
        self.gate.set()
        self._lock = threading.Lock()

    def _call(self, what: str, task_id: int) -> None:
        with self._lock:
            self.calls.append((what, task_id))
        if task_id in self.conflict:
            raise Conflict("409 task is not pending", state="FAILED")
        if what in self.unreachable:
            raise PortalUnavailable("portal unreachable: ConnectError")

    @contextmanager
    def home_task_content(self, task_id: int) -> Iterator[Iterator[bytes]]:
        self.gate.wait(10)
        self._call("get", task_id)
        yield iter(self.uploads[task_id])

    def put_home_task_content(self, task_id: int, data: bytes) -> None:
        self._call("put", task_id)
        self.puts[task_id] = data

    def report_home_task(self, task_id: int, report: HomeTaskReport) -> HomeTaskAnswer:
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
    run(runner, task(1, "list"), task(2, "download", "notes.txt"))

    assert files.report_of(1) == HomeTaskReport(ok=True, used_bytes=0)
    assert files.report_of(2).reason == 'No file or folder named "notes.txt" in your home.'
    assert runtime.home_folder(HOME, create=False) is None


def test_upload_list_download_delete(
    runner: HomeTaskRunner, runtime: SimulatedRuntime, files: FakeFiles, caplog: Any
) -> None:
    files.uploads[1] = [b"hello ", b"world"]
    caplog.set_level(logging.INFO, logger="nodeagent.home_tasks")

    run(runner, task(1, "upload", "notes.txt", size=11, quota_bytes=1000))
    run(runner, task(2, "list"), task(3, "download", "notes.txt", max_bytes=100))
    run(runner, task(4, "delete", "notes.txt"))

    folder = runtime.home_folder(HOME, create=False)
    assert folder is not None and not (folder / "notes.txt").exists()
    assert files.report_of(1) == HomeTaskReport(ok=True, used_bytes=11)
    listing = files.report_of(2)
    assert [(e.name, e.kind, e.size) for e in listing.entries] == [("notes.txt", "file", 11)]
    assert files.puts[3] == b"hello world"
    assert files.report_of(3) == HomeTaskReport(ok=True, used_bytes=11)
    assert files.report_of(4) == HomeTaskReport(ok=True, used_bytes=0)
    # One line per task, without the file's contents.
    lines = [r.getMessage() for r in caplog.records if r.name == "nodeagent.home_tasks"]
    assert len(lines) == 4 and lines[0].startswith("home task 1 upload: wrote 11 bytes")
    assert not any("hello" in line for line in lines)


def test_a_task_is_started_once_however_often_it_is_listed(
    runner: HomeTaskRunner, files: FakeFiles
) -> None:
    files.uploads[1] = [b"abc"]
    upload = task(1, "upload", "a.txt", size=3)
    files.gate.clear()  # the upload is under way while the task is listed again
    for _ in range(5):
        runner.offer([upload, task(2, "list")])
    files.gate.set()
    runner.wait_idle(30)
    run(runner, upload, task(2, "list"))

    assert files.count("get", 1) == 1
    assert [i for i, _ in files.reports] in ([1, 2], [2, 1])
    # An id no longer listed is forgotten (the portal never lists it again).
    runner.offer([])
    assert not runner._started


def test_an_upload_of_another_size_than_announced_is_refused(
    runner: HomeTaskRunner, runtime: SimulatedRuntime, files: FakeFiles
) -> None:
    files.uploads[1] = [b"only four"]
    run(runner, task(1, "upload", "a.txt", size=100))

    report = files.report_of(1)
    assert not report.ok and "was cut short (9 of 100 bytes)" in report.reason
    folder = runtime.home_folder(HOME, create=False)
    assert folder is not None and list(folder.iterdir()) == []


def test_an_upload_over_the_quota_is_refused_with_the_sentence(
    runner: HomeTaskRunner, files: FakeFiles
) -> None:
    files.uploads[1] = [b"x" * 3000]
    run(runner, task(1, "upload", "big.bin", size=3000, quota_bytes=2 * 1024 * 1024 - 1))
    files.uploads[2] = [b"y" * 2 * 1024 * 1024]
    run(runner, task(2, "upload", "bigger.bin", size=2 * 1024 * 1024, quota_bytes=2 * 1024 * 1024))

    assert files.report_of(1).ok
    assert files.report_of(2) == HomeTaskReport(
        ok=False,
        reason="Your home folder is full: 0.1 MB of 2.0 MB used; this file needs 2.0 MB. "
        "Delete files, then upload again.",
        used_bytes=3000,  # what the home holds goes with a refusal too
    )
    assert files.count("get", 2) == 1  # the refusal came before the first byte was written


def test_a_task_the_portal_no_longer_wants_is_dropped(
    runner: HomeTaskRunner, files: FakeFiles
) -> None:
    files.conflict = {1, 2}
    files.uploads[1] = [b"abc"]
    run(runner, task(1, "upload", "a.txt", size=3), task(2, "list"))

    assert files.count("get", 1) == 1 and files.count("report", 1) == 0  # 409 on the content
    assert files.count("report", 2) == 1  # 409 on the report: not tried again
    assert files.reports == []


def test_an_unreachable_portal_gets_the_report_once_more_then_the_task_is_dropped(
    runner: HomeTaskRunner, files: FakeFiles
) -> None:
    files.unreachable = {"report"}
    run(runner, task(1, "list"))
    assert files.count("report", 1) == 2


def test_a_download_the_portal_cannot_take_is_reported_failed(
    runner: HomeTaskRunner, runtime: SimulatedRuntime, files: FakeFiles
) -> None:
    folder = runtime.home_folder(HOME, create=True)
    assert folder is not None
    (folder / "big.bin").write_bytes(b"x" * 3 * MB)
    files.unreachable = {"put"}
    run(runner, task(1, "download", "big.bin", max_bytes=2 * MB))
    run(runner, task(2, "download", "big.bin", max_bytes=5 * MB))

    assert files.count("put", 1) == 0
    assert files.report_of(1).reason == (
        '"big.bin" is 3.0 MB; files of at most 2.0 MB can be downloaded here.'
    )
    assert files.report_of(2) == HomeTaskReport(ok=False, reason=LOST_PORTAL)


# -- the wire ----------------------------------------------------------------------------


def wire_client(handler: Any) -> PortalClient:
    client = PortalClient("http://portal.test/", transport=httpx.MockTransport(handler))
    client.node_token = "tok"
    return client


def test_the_three_calls_on_the_wire() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "GET":
            return httpx.Response(200, content=b"bytes!")
        if request.method == "PUT":
            return httpx.Response(204)
        return httpx.Response(200, json={"state": "DONE"})

    client = wire_client(handler)
    with client.home_task_content(5) as chunks:
        assert b"".join(chunks) == b"bytes!"
    client.put_home_task_content(6, b"file")
    answer = client.report_home_task(7, HomeTaskReport(ok=False, reason="No."))

    assert answer.state == "DONE"
    assert [(r.method, r.url.path) for r in seen] == [
        ("GET", "/api/agent/v1/home-tasks/5/content/"),
        ("PUT", "/api/agent/v1/home-tasks/6/content/"),
        ("POST", "/api/agent/v1/home-tasks/7/report/"),
    ]
    assert all(r.headers["Authorization"] == "Node tok" for r in seen)
    assert seen[1].headers["Content-Type"] == "application/octet-stream"
    assert seen[1].content == b"file"
    assert json.loads(seen[2].content) == {"ok": False, "reason": "No."}  # the fields set


def test_error_answers_are_typed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        status = {"5": 409, "6": 404}[request.url.path.split("/")[-3]]
        return httpx.Response(status, json={"detail": "no", "state": "DONE"})

    client = wire_client(handler)
    with pytest.raises(Conflict), client.home_task_content(5):
        pass
    with pytest.raises(PortalError) as caught:
        client.put_home_task_content(6, b"x")
    assert caught.value.status_code == 404


# -- the agent feeds the runner ----------------------------------------------------------


class FilesPortal(TinyPortal):
    """TinyPortal with home tasks in its desired state and their three endpoints."""

    def __init__(self, tasks: list[dict[str, Any]], uploads: dict[int, bytes]) -> None:
        super().__init__()
        self.tasks = tasks
        self.uploads = uploads
        self.received: dict[int, bytes] = {}
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
            task_id = int(path.split("/")[1])
            if request.method == "GET":
                return httpx.Response(200, content=self.uploads[task_id])
            if request.method == "PUT":
                self.received[task_id] = request.content
                return httpx.Response(204)
            self.requests.append(("POST", path, None, json.loads(request.content)))
            self.reported.set()
            return httpx.Response(200, json={"state": "DONE"})
        return super().__call__(request)


def test_one_round_carries_out_the_home_tasks(tmp_path: Path) -> None:
    portal = FilesPortal(
        [{"id": 8, "kind": "upload", "home_volume": HOME, "path": "a.txt", "size": 4}],
        {8: b"four"},
    )
    agent = make_agent(portal, tmp_path)

    agent.run(once=True)

    assert portal.bodies("home-tasks/8/report/") == [{"ok": True, "used_bytes": 4}]
    folder = agent.runtime.home_folder(HOME, create=False)
    assert folder is not None and (folder / "a.txt").read_bytes() == b"four"


def test_the_following_loop_starts_home_tasks_from_its_waits(tmp_path: Path) -> None:
    portal = FilesPortal([{"id": 9, "kind": "list", "home_volume": HOME}], {})
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
        home.write("hello.txt", [b"from the ", b"Files page"], 19)
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
