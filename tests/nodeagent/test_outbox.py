"""The report outbox holds a lone STARTING back briefly, so that it goes out with its RUNNING."""

from __future__ import annotations

from nodeagent import outbox
from nodeagent.outbox import ReportOutbox, report
from nodeagent.protocol import BatchResult, ReportBatch, ReportBatchAnswer


class BatchPortal:
    """The portal's ``reports/`` in process: records each batch as (session, state) pairs."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, str]]] = []

    def report(self, session_id, report):  # pragma: no cover - batches are used
        raise AssertionError("one by one")

    def report_warm(self, key, report):  # pragma: no cover
        raise AssertionError("no warm desktops here")

    def report_batch(self, batch: ReportBatch) -> ReportBatchAnswer:
        self.batches.append([(r.session_id, r.state) for r in batch.reports])
        return ReportBatchAnswer(
            results=[
                BatchResult(session_id=r.session_id, outcome="applied", state=r.state)
                for r in batch.reports
            ]
        )


def test_a_lone_starting_waits_for_its_running_and_goes_with_it():
    portal = BatchPortal()
    box = ReportOutbox(portal)
    box.post(1, report("STARTING", "p1"))  # desktop 1 is starting
    box.post(2, report("STARTING", "p2"))
    assert box.outcome(box.post(2, report("RUNNING", "p2"))) == "sent"
    # Desktop 2's answer went out without desktop 1's STARTING, still young and alone.
    assert portal.batches == [[(2, "STARTING"), (2, "RUNNING")]]
    assert box.outcome(box.post(1, report("RUNNING", "p1"))) == "sent"
    assert portal.batches[1] == [(1, "STARTING"), (1, "RUNNING")]


def test_a_slow_start_is_reported_starting_once_the_linger_is_over(monkeypatch):
    portal = BatchPortal()
    box = ReportOutbox(portal)
    box.post(1, report("STARTING", "p1"))
    box.flush()
    assert portal.batches == []  # young: held back
    monkeypatch.setattr(outbox, "STARTING_LINGER_S", 0.0)
    box.flush()  # the reconcile step's send, a second later
    assert portal.batches == [[(1, "STARTING")]]


def test_a_starting_with_a_later_report_of_its_session_is_never_held():
    portal = BatchPortal()
    box = ReportOutbox(portal)
    box.post(1, report("STARTING", "p1"))
    box.post(1, report("FAILED", "p1", reason="no image"))
    box.flush()
    assert portal.batches == [[(1, "STARTING"), (1, "FAILED")]]


def test_waiting_for_a_startings_own_answer_sends_it():
    portal = BatchPortal()
    box = ReportOutbox(portal)
    assert box.send(1, report("STARTING", "p1")) == "sent"
    assert portal.batches == [[(1, "STARTING")]]


def test_a_warm_claims_starting_is_held_back_longer_than_a_cold_starts():
    portal = BatchPortal()
    box = ReportOutbox(portal)
    claim = box.post(1, report("STARTING", "p1"), linger=outbox.CLAIM_STARTING_LINGER_S)
    cold = box.post(2, report("STARTING", "p2"))
    for ticket in (claim, cold):  # both older than a cold start's linger
        ticket.posted -= outbox.STARTING_LINGER_S + 0.1
    box.flush()
    assert portal.batches == [[(2, "STARTING")]]  # the claim's is still held
    assert box.outcome(box.post(1, report("RUNNING", "p1"))) == "sent"
    assert portal.batches[1] == [(1, "STARTING"), (1, "RUNNING")]  # together after all


def test_a_slow_claims_starting_goes_once_its_linger_is_over():
    portal = BatchPortal()
    box = ReportOutbox(portal)
    claim = box.post(1, report("STARTING", "p1"), linger=outbox.CLAIM_STARTING_LINGER_S)
    box.flush()
    assert portal.batches == []
    claim.posted -= outbox.CLAIM_STARTING_LINGER_S
    box.flush()
    assert portal.batches == [[(1, "STARTING")]]
