"""Reasons are data: a code with parameters, rendered for the reader by one presenter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone, translation

from scheduling.engine.reasons import Code, Reason
from scheduling.presenters import QUOTA_CODES, SENTENCES, refusal, render, render_reason, stored

DEADLINE = datetime(2026, 12, 3, 10, 42, tzinfo=UTC)


def test_every_code_has_a_sentence_and_renders_without_parameters():
    assert set(SENTENCES) | QUOTA_CODES == set(Code)
    for code in Code:
        text = render(code, {})
        assert isinstance(text, str)
        assert code in (Code.AGENT, Code.NOTE) or text, code


def test_times_are_stored_as_iso_and_shown_in_the_readers_zone():
    reason = Reason(Code.PREEMPTED, {"for_tier": "booked", "deadline": DEADLINE})
    fields = stored(reason)
    assert fields == {
        "reason_code": "preempted",
        "reason_params": {"for_tier": "booked", "deadline": "2026-12-03T10:42:00Z"},
    }
    with timezone.override("Asia/Shanghai"):
        shanghai = render(fields["reason_code"], fields["reason_params"])
    with timezone.override("UTC"):
        utc = render(fields["reason_code"], fields["reason_params"])
    assert "preempted for a booked class request" in shanghai
    assert "18:42" in shanghai and "10:42" in utc


def test_a_naive_time_is_refused_when_the_reason_is_made():
    with pytest.raises(ValueError):
        Reason(Code.PREEMPTED, {"deadline": datetime(2026, 12, 3, 10, 42)})


def test_waiting_says_who_is_ahead_and_when_it_starts(monkeypatch):
    # Today (in the reader's zone) the time alone; another day, with its date. The clock is
    # set to a morning: two hours ahead of a real late evening is tomorrow.
    morning = timezone.localtime().replace(hour=9, minute=0)
    monkeypatch.setattr(timezone, "now", lambda: morning)
    today = morning.replace(hour=12, minute=34)
    tomorrow = today + timedelta(days=1)
    for eta, shown in ((today, "12:34"), (tomorrow, f"{tomorrow:%Y-%m-%d} 12:34")):
        params = {"tier": "coursework", "ahead": 3, "higher": 2, "eta": eta}
        text = render_reason(Reason(Code.WAITING, params))
        assert text.startswith("waiting for a free slice: 3 ahead of you in coursework, 2 in")
        assert text.endswith(f"estimated start {shown}")
    assert render(Code.WAITING, {"tier": "hobby", "ahead": 0}) == (
        "waiting for a free slice: next in hobby"
    )


def test_quota_reasons_read_as_blocked_on_a_session_and_as_a_refusal_at_submit():
    reason = Reason(
        Code.QUOTA_GPU_HOURS, {"scope": "course", "key": "cs101", "limit": 40.0, "used": 41.25}
    )
    assert render_reason(reason) == (
        "Held by a quota: course cs101's quota of 40 GPU-hours this week is used (41.2 used)"
    )
    assert refusal(reason) == "Course cs101's quota of 40 GPU-hours this week is used (41.2 used)."


def test_odd_stored_data_never_breaks_a_page():
    assert render("no-such-code", {}) == "no-such-code"
    assert render("", {}) == ""
    assert "?" in render(Code.PREEMPTED, {"deadline": "not a time"})
    assert render(Code.TIME_LIMIT, {"minutes": 90}) == "stopping: the time limit of 90 min is up"


def test_rendering_follows_the_active_language():
    # The zh-Hans catalogue (locale/zh_Hans) translates every reason.
    with translation.override("zh-hans"):
        assert render(Code.SUBMITTED, {}) == "正在等待调度"
    with translation.override("en"):
        assert render(Code.SUBMITTED, {}) == "waiting for the scheduler"
