"""HTTP client for the portal's agent API (``/api/agent/v1/``, see :mod:`nodeagent.protocol`).

Every request body is made from its protocol model (:func:`~nodeagent.protocol.to_wire`);
every answer is validated with its model before the agent acts on it: an answer that does
not match is :class:`BadAnswer`, and the agent leaves its desktops alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from nodeagent.protocol import (
    ConflictAnswer,
    DesiredState,
    Heartbeat,
    HeartbeatAnswer,
    Registration,
    RegistrationAnswer,
    ReportAnswer,
    ReportBatch,
    ReportBatchAnswer,
    SessionReport,
    WaitRequest,
    WarmReport,
    to_wire,
)
from nodeagent.protocol_courses import CourseManifest
from nodeagent.protocol_files import HomeTaskAnswer, HomeTaskReport
from nodeagent.protocol_gateway import GatewayEventBatch, GatewayEventsAnswer

API_PREFIX = "/api/agent/v1/"
A = TypeVar("A", bound=BaseModel)  # the answer's protocol model
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)
COURSE_FILE_CHUNK = 1024 * 1024
WAIT_GRACE_S = 15.0  # a wait's answer may come this much later than its timeout


class PortalError(RuntimeError):
    """The portal answered with an error the agent cannot act on."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class PortalUnavailable(PortalError):
    """No answer (connection refused, timeout) or a 5xx: try again later."""


class Unauthorized(PortalError):
    """401/403: the join token or node token is missing, wrong or revoked."""


class BadAnswer(PortalError):
    """The portal answered with a body the agent cannot read (not its protocol model)."""


class Conflict(PortalError):
    """409: the portal disagrees (protocol version, or a session it no longer wants)."""

    def __init__(self, message: str, state: str | None = None) -> None:
        super().__init__(message, status_code=409)
        self.state = state


class PortalClient:
    """One agent's connection to the portal. Thread-safe (httpx.Client is)."""

    def __init__(
        self,
        base_url: str,
        *,
        node_token: str | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + API_PREFIX, timeout=timeout, transport=transport
        )
        self.node_token = node_token

    def close(self) -> None:
        self._http.close()

    def register(self, registration: Registration) -> RegistrationAnswer:
        """Register (first time with ``join_token`` in the body, later with the node token)."""
        answer = self._request("POST", "register/", RegistrationAnswer, registration)
        if answer.node_token:
            self.node_token = answer.node_token
        return answer

    def heartbeat(self, heartbeat: Heartbeat) -> HeartbeatAnswer:
        return self._request("POST", "heartbeat/", HeartbeatAnswer, heartbeat)

    def desired(self) -> DesiredState:
        return self._request("GET", "desired/", DesiredState)

    def wait(self, request: WaitRequest) -> DesiredState | None:
        """The desired state once it is newer than ``request.since`` (or after the timeout);
        None when the portal answers that it did not change (204, for ``unchanged_ok``)."""
        timeout = httpx.Timeout(request.timeout_s + WAIT_GRACE_S, connect=3.0)
        try:
            response = self._send("POST", "wait/", request, timeout)
        except httpx.TransportError as error:
            raise PortalUnavailable(
                f"portal unreachable: {type(error).__name__}: {error}"
            ) from error
        if response.status_code == 204 and request.unchanged_ok:
            return None
        return _answer_of(response, DesiredState)

    def report(self, session_id: int, report: SessionReport) -> str:
        """Report a session's state; returns the portal's state. Conflict: stop that session."""
        return self._request("POST", f"sessions/{session_id}/report/", ReportAnswer, report).state

    def report_batch(self, batch: ReportBatch) -> ReportBatchAnswer:
        """Many session reports in one request, applied in order; one result each."""
        return self._request("POST", "reports/", ReportBatchAnswer, batch)

    def report_warm(self, key: str, report: WarmReport) -> str:
        """Report a warm desktop's state. Conflict: the portal no longer wants it."""
        return self._request("POST", f"warm/{key}/report/", ReportAnswer, report).state

    # -- home files (nodeagent.protocol_files) ------------------------------------------

    def report_home_task(self, task_id: int, report: HomeTaskReport) -> HomeTaskAnswer:
        """How a home task ended. Conflict: the portal no longer waits for it (drop it)."""
        return self._request("POST", f"home-tasks/{task_id}/report/", HomeTaskAnswer, report)

    # -- course folders (nodeagent.protocol_courses) -------------------------------------

    def course_manifest(self, course_id: int) -> CourseManifest:
        return self._request("GET", f"courses/{course_id}/manifest/", CourseManifest)

    def course_file(self, course_id: int, sha256: str, out: Callable[[bytes], object]) -> None:
        """Stream one file of a course folder into ``out``, chunk by chunk."""
        path = f"courses/{course_id}/files/{sha256}/"
        try:
            with self._http.stream("GET", path, headers=self._headers()) as response:
                if response.status_code != 200:
                    response.read()
                    _raise_for_status(response, _json_of(response))
                for chunk in response.iter_bytes(COURSE_FILE_CHUNK):
                    out(chunk)
        except httpx.TransportError as error:
            raise _unreachable(error) from error

    # -- the desktop gateway (nodeagent.protocol_gateway) --------------------------------

    def gateway_events(self, batch: GatewayEventBatch) -> GatewayEventsAnswer:
        """What the node's gateway opened and closed, in order (the portal audits them)."""
        return self._request("POST", "gateway-events/", GatewayEventsAnswer, batch)

    def _request(
        self,
        method: str,
        path: str,
        answer: type[A],
        body: BaseModel | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> A:
        try:
            response = self._send(method, path, body, timeout)
        except httpx.TransportError as error:
            raise _unreachable(error) from error
        except RuntimeError as error:
            if not self._http.is_closed:
                raise
            # The agent is stopping: a desktop's action thread reporting after the close is
            # told the portal is out of reach (its report is kept), not handed httpx's error.
            raise PortalUnavailable("the agent is stopping: its portal client is closed") from error
        return _answer_of(response, answer)

    def _send(
        self, method: str, path: str, body: BaseModel | None, timeout: httpx.Timeout | None
    ) -> httpx.Response:
        json = to_wire(body) if body is not None else None
        return self._http.request(
            method, path, json=json, headers=self._headers(), timeout=timeout or self._http.timeout
        )

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Node {self.node_token}"} if self.node_token else {}


def _unreachable(error: httpx.TransportError) -> PortalUnavailable:
    return PortalUnavailable(f"portal unreachable: {type(error).__name__}: {error}")


def _json_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _answer_of(response: httpx.Response, answer: type[A]) -> A:
    try:
        data: Any = response.json()
    except ValueError:
        data = None
    _raise_for_status(response, data)
    try:
        return answer.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(body)'}: {e['msg']}"
            for e in error.errors(include_url=False, include_input=False)[:5]
        )
        where = f"{response.request.method} {response.request.url.path}"
        raise BadAnswer(
            f"{where}: {response.status_code} answer is not a valid {answer.__name__}: {problems}",
            status_code=response.status_code,
        ) from None


def _raise_for_status(response: httpx.Response, data: Any) -> None:
    """The typed error of an error answer (``data``: its JSON body, if any)."""
    body = data if isinstance(data, dict) else {}
    detail = str(body.get("detail") or response.text[:200] or response.reason_phrase)
    where = f"{response.request.method} {response.request.url.path}"
    status = response.status_code
    if status in (401, 403):
        raise Unauthorized(f"{where}: {status} {detail}", status_code=status)
    if status == 409:
        try:
            state = ConflictAnswer.model_validate(body).state
        except ValidationError:
            state = None  # a 409 without the portal's usual body still means: stop
        raise Conflict(f"{where}: 409 {detail}", state=state)
    if status >= 500:
        raise PortalUnavailable(f"{where}: {status} {detail}", status_code=status)
    if status >= 400:
        raise PortalError(f"{where}: {status} {detail}", status_code=status)
