"""Claim records (nodeagent/runtime/claims.py): one warm desktop's record is read alone, where
a listing reads them all."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nodeagent.protocol import DesiredSession
from nodeagent.runtime.claims import CLAIMS_DIR_NAME, ClaimRecords


def session(session_id: int) -> DesiredSession:
    return DesiredSession.model_validate(
        {
            "session_id": session_id, "user": f"student{session_id}", "course": "CS101",
            "image": "deskpool/tiny:latest", "cpus": 1, "memory_mb": 512, "pids_limit": 256,
            "shm_mb": 64, "gpu_devices": [], "vnc_password": "pw123456",
            "home_volume": f"home-{session_id}", "placement": f"p{session_id}",
        }
    )  # fmt: skip


def test_one_record_is_read_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    records = ClaimRecords(tmp_path)
    assert records.get("w1") is None  # no folder yet
    records.write("w1", session(7))
    records.write("w2", session(8))
    (tmp_path / CLAIMS_DIR_NAME / "w3.json").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        claim = records.get("w1")
        assert claim is not None and (claim.session_id, claim.placement) == (7, "p7")
        assert claim.home_volume == "home-7" and claim.user == "student7"
        assert records.get("w9") is None
    assert not caplog.records  # the unreadable w3 was not read
    with caplog.at_level(logging.WARNING):
        listed = records.by_key()
    assert sorted(listed) == ["w1", "w2"] and listed["w2"].session_id == 8
    assert "unreadable claim record" in caplog.text and "w3.json" in caplog.text
    assert records.get("w3") is None  # unreadable: none, with the same warning
    records.remove("w1")
    assert records.get("w1") is None and records.keys_of(8) == ["w2"]
