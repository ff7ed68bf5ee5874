"""HTTP client for the portal's agent API (``/api/agent/v1/``, see :mod:`nodeagent.protocol`)."""

from __future__ import annotations

from typing import Any, cast

import httpx

from nodeagent.protocol import (
    DesiredState,
    Heartbeat,
    Registration,
    RegistrationAnswer,
    SessionReport,
    WarmReport,
)

API_PREFIX = "/api/agent/v1/"
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)


class PortalError(RuntimeError):
    """The portal answered with an error the agent cannot act on."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class PortalUnavailable(PortalError):
    """No answer (connection refused, timeout) or a 5xx: try again later."""


class Unauthorized(PortalError):
    """401/403: the join token or node token is missing, wrong or revoked."""


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
        answer = cast(RegistrationAnswer, self._request("POST", "register/", registration))
        if token := answer.get("node_token"):
            self.node_token = token
        return answer

    def heartbeat(self, heartbeat: Heartbeat) -> dict[str, Any]:
        return self._request("POST", "heartbeat/", heartbeat)

    def desired(self) -> DesiredState:
        return cast(DesiredState, self._request("GET", "desired/"))

    def report(self, session_id: int, report: SessionReport) -> str:
        """Report a session's state; returns the portal's state. Conflict: stop that session."""
        answer = self._request("POST", f"sessions/{session_id}/report/", report)
        return str(answer.get("state", ""))

    def report_warm(self, key: str, report: WarmReport) -> str:
        """Report a warm desktop's state. Conflict: the portal no longer wants it."""
        answer = self._request("POST", f"warm/{key}/report/", report)
        return str(answer.get("state", ""))

    def _request(self, method: str, path: str, body: object | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Node {self.node_token}"} if self.node_token else {}
        try:
            response = self._http.request(method, path, json=body, headers=headers)
        except httpx.TransportError as error:
            raise PortalUnavailable(
                f"portal unreachable: {type(error).__name__}: {error}"
            ) from error
        return _answer_of(response)


def _answer_of(response: httpx.Response) -> dict[str, Any]:
    try:
        data: Any = response.json()
    except ValueError:
        data = {}
    body = data if isinstance(data, dict) else {}
    detail = str(body.get("detail") or response.text[:200] or response.reason_phrase)
    where = f"{response.request.method} {response.request.url.path}"
    status = response.status_code
    if status in (401, 403):
        raise Unauthorized(f"{where}: {status} {detail}", status_code=status)
    if status == 409:
        state = body.get("state")
        raise Conflict(f"{where}: 409 {detail}", state=str(state) if state is not None else None)
    if status >= 500:
        raise PortalUnavailable(f"{where}: {status} {detail}", status_code=status)
    if status >= 400:
        raise PortalError(f"{where}: {status} {detail}", status_code=status)
    return body
