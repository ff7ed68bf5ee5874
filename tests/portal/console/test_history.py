"""The console's metric history page (``/console/history/``): admins only (404 for everyone
else), the picker, a table beside each chart with the same numbers as the CSV, times in the
admin's time zone, bad input refused next to its field, an empty range said so."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from people.models import Member
from scheduling.models import MetricRollup, MetricSource
from scheduling.models.metrics import HOURLY
from scheduling.services.metric_history import sources

pytestmark = pytest.mark.django_db

PAGE = "/console/history/"


def client_for(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def admin(admin_user) -> Client:
    return client_for(admin_user)


@pytest.fixture
def recorded():
    """Two hours of the pool and of node n1, hourly, ending one full hour ago."""
    ids = sources({key: {"kind": MetricSource.Kind.GROUP} for key in ("node:n1", "rack:r1")})
    ids |= sources({"pool": {"kind": MetricSource.Kind.POOL}})
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    buckets = [hour - timedelta(hours=1), hour]
    for key in ("pool", "node:n1"):
        for n, bucket in enumerate(buckets):
            MetricRollup.objects.create(
                source_id=ids[key], resolution=HOURLY, bucket=bucket, count=12,
                utilization_pct_avg=40.0 + n, utilization_pct_max=90.0,
                temperature_c_avg=61.5, started_avg=0.5,
            )  # fmt: skip
    return buckets


def test_the_page_is_for_admins_only(owner, make_user, admin, recorded):
    teacher = make_user("ines")
    for query in ("", "?of=node:n1&range=7d", "?of=pool&range=7d&format=csv"):
        assert admin.get(PAGE + query).status_code == 200, query
        for person in (None, owner, teacher):
            assert client_for(person).get(PAGE + query).status_code == 404, (query, person)


def test_the_picker_lists_the_groups_and_each_chart_has_its_table(admin, recorded):
    page = admin.get(PAGE, {"of": "node:n1", "range": "7d"}).content.decode()
    assert '<option value="node:n1" selected>n1</option>' in page
    assert '<option value="rack:r1">r1</option>' in page
    assert 'name="range" value="7d"' in page and "checked" in page
    assert "vendor/uplot/uPlot.iife.min.js" in page and "cdn" not in page.lower()
    assert 'id="history-data"' in page and 'type="application/json"' in page
    for chart in ("utilisation", "memory", "power", "temperature"):
        assert f'id="chart-{chart}-title"' in page
    assert 'id="table-utilisation"' in page and 'id="table-temperature"' in page
    assert 'id="table-power"' not in page  # nothing recorded: said in words, no empty table
    assert page.count('class="history-none"') == 2
    assert 'id="table-queue"' not in page  # the queue is the pool's
    table = re.search(r'<table id="table-utilisation">.*?</table>', page, re.S).group(0)
    assert "<caption" in table and '<th scope="col">' in table and '<th scope="row">' in table
    cells = re.findall(r"<td>([^<]*)</td>", table)
    assert cells == ["40", "90", "41", "90"]  # mean and peak, two hours
    # the nav links the page
    assert 'href="/console/history/" aria-current="page"' in page


def test_times_are_in_the_admins_time_zone(admin_user, admin, recorded):
    Member.objects.update_or_create(user=admin_user, defaults={"time_zone": "Asia/Shanghai"})
    page = admin.get(PAGE, {"of": "pool", "range": "7d"}).content.decode()
    local = timezone.localtime(recorded[0], timezone=timezone.get_fixed_timezone(8 * 60))
    assert f'<time datetime="{local.isoformat().replace("+08:00", "+08:00")}">' in page
    assert '"zone": "Asia/Shanghai"' in page
    body = admin.get(PAGE, {"of": "pool", "range": "7d", "format": "csv"}).content.decode()
    assert body.splitlines()[1].startswith(local.isoformat())


def test_the_pool_page_has_the_queue_and_desktops_and_the_csv_matches(admin, recorded):
    page = admin.get(PAGE, {"of": "pool", "range": "30d"}).content.decode()
    for chart in ("queue", "wait", "desktops"):
        assert f'id="chart-{chart}-title"' in page
    assert 'id="table-desktops"' in page
    csv_link = re.search(r'href="([^"]+)" id="history-csv"', page).group(1)
    response = admin.get(csv_link.replace("&amp;", "&"))
    assert response["Content-Type"].startswith("text/csv")
    assert re.fullmatch(
        r'attachment; filename="history-pool-30d-\d{8}-\d{4}\.csv"',
        response["Content-Disposition"],
    )
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    header = rows[0]
    started = header.index("Desktops: Started (desktops)")
    assert [row[started] for row in rows[1:]] == ["6.0", "6.0"]  # 0.5 a sample × 12


def test_an_empty_range_says_so(admin, recorded):
    page = admin.get(PAGE, {"of": "node:n1", "range": "1h"}).content.decode()
    assert 'id="history-empty"' in page and "<table" not in page


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"of": "node:nowhere"}, "of"),
        ({"of": "galaxy:x"}, "of"),
        ({"range": "2y"}, "range"),
        ({"range": ""}, "range"),
    ],
)
def test_bad_input_is_refused_next_to_its_field(admin, recorded, query, field):
    response = admin.get(PAGE, query)
    assert response.status_code == 400
    assert response.context["form"].errors[field]
    assert 'id="history-data"' not in response.content.decode()


def test_a_group_without_history_is_refused(admin):
    MetricSource.objects.create(key="node:n9", kind=MetricSource.Kind.GROUP)
    response = admin.get(PAGE, {"of": "pool", "range": "1d"})
    assert response.status_code == 400  # no pool series yet
    assert "There is no history" in str(response.context["form"].errors["of"])
