"""The node agents' face: the agent API (``/api/agent/v1/``, :mod:`.api`) and its long-poll
(``POST /api/agent/v1/wait/``, :mod:`.wait`, a plain ASGI application in ``portal.asgi``).

Web layer only: every body is a model of ``nodeagent.protocol``, every decision a call into
``scheduling.services`` (docs/agent-protocol.md).
"""
