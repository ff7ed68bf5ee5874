"""The pool-wide figures every submit reads are read once a moment per process
(``scheduling.recent``): at a class start two hundred submits read the utilisation, the "Pool
usage" rule and the nodes' state once, not two hundred times. Each submit still passes
admission and the feasibility check; a person's own figures are never kept.

Real PostgreSQL; outside a transaction, as the servers run (inside one, a read is always
fresh)."""

from __future__ import annotations

import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduling.choices import PURPOSE_TIER, Purpose
from scheduling.engine.reasons import Code
from scheduling.models import AlertRule
from scheduling.recent import forget_all
from scheduling.services import ServiceError
from scheduling.services.alerts import ensure_default_rules
from scheduling.services.pool import admission_refusal
from scheduling.services.sessions import check_submit

pytestmark = pytest.mark.django_db(transaction=True)

HOBBY = PURPOSE_TIER[Purpose.HOBBY]


@pytest.fixture
def keep(settings):
    def set_keep(seconds: float) -> None:
        settings.POOL_READ_KEEP_S = seconds
        forget_all()

    yield set_keep
    forget_all()


def block_everything() -> None:
    """The "Pool usage" rule refuses hobby requests at any utilisation."""
    ensure_default_rules()
    AlertRule.objects.filter(metric="pool_usage").update(warning=0.0, critical=0.0)


def refused_now() -> bool:
    """A hobby request is refused by the pool's admission threshold."""
    refused = admission_refusal(HOBBY)
    return refused is not None and refused.code in (Code.POOL_BLOCK, Code.POOL_BLOCKED)


def sql_of(call) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        call()
    return [q["sql"] for q in queries.captured_queries]


def test_the_rule_and_the_utilisation_are_read_once_while_kept(keep, pool):
    keep(60.0)
    ensure_default_rules()
    first = sql_of(lambda: admission_refusal(HOBBY))
    assert any("scheduling_alertrule" in s for s in first), first
    assert any('SUM("scheduling_slice"."milli")' in s for s in first), first
    assert admission_refusal(HOBBY) is None

    block_everything()
    again: list = []
    assert sql_of(lambda: again.append(admission_refusal(HOBBY))) == []
    assert again == [None]  # the kept rule: not yet refused

    forget_all()  # as when the moment passes
    assert refused_now()


def test_a_kept_figure_is_read_again_once_the_moment_passed(keep, pool):
    keep(0.2)
    ensure_default_rules()
    assert admission_refusal(HOBBY) is None
    block_everything()
    time.sleep(0.3)
    assert refused_now()


def test_nothing_is_kept_at_zero_or_inside_a_transaction(keep, pool):
    keep(0.0)
    ensure_default_rules()
    assert admission_refusal(HOBBY) is None
    block_everything()
    assert refused_now()

    keep(60.0)
    AlertRule.objects.filter(metric="pool_usage").update(warning=80.0, critical=90.0)
    assert admission_refusal(HOBBY) is None  # kept from here on
    block_everything()
    with transaction.atomic():  # a transaction sees its own database
        assert refused_now()


def test_a_second_submit_check_reads_only_the_persons_own_figures(keep, make_user, profile, pool):
    keep(60.0)
    ensure_default_rules()
    first, second = make_user("first"), make_user("second")
    before = sql_of(lambda: check_submit(first, profile.pk, "hobby", None))
    after = sql_of(lambda: check_submit(second, profile.pk, "hobby", None))
    assert len(after) < len(before), (before, after)
    pool_wide = (
        "scheduling_alertrule",
        'SUM("scheduling_slice"."milli")',
        'FROM "scheduling_node"',
    )
    assert not [s for s in after if any(p in s for p in pool_wide)], after
    assert any("scheduling_quota" in s for s in after), after  # the person's quotas: every time

    block_everything()
    forget_all()
    with pytest.raises(ServiceError):
        check_submit(second, profile.pk, "hobby", None)
