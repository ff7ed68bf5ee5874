"""An audit event's details in words (the console's audit log): keys and code values are
labelled in the reader's language; names stay as they are (scheduling/labels.py)."""

from __future__ import annotations

from django.utils import translation

from scheduling.labels import detail_rows


def test_a_desktop_opening_reads_who_whose_and_as_what_in_both_languages():
    data = {"viewer": "admin", "owner": "ada", "as": "admin"}
    with translation.override("en"):
        assert detail_rows(data) == [
            ("as", "Opened as", "an admin"),
            ("owner", "Owner", "ada"),
            ("viewer", "Viewer", "admin"),  # a user called admin keeps their name
        ]
    with translation.override("zh-hans"):
        assert detail_rows(data) == [
            ("as", "打开身份", "管理员"),
            ("owner", "所有者", "ada"),
            ("viewer", "查看者", "admin"),
        ]


def test_a_node_address_change_and_a_start_failure_have_labelled_keys():
    with translation.override("zh-hans"):
        rows = detail_rows({"address": "10.0.0.6", "failures_in_a_row": 3})
    assert rows == [("address", "地址", "10.0.0.6"), ("failures_in_a_row", "连续失败次数", "3")]
