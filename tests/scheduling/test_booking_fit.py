"""The booking feasibility check: pure engine, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling import engine
from scheduling.engine import fit_codes

NINE = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)

MIG = engine.Needs(profile_id=1, gpu_count=1, kinds=("mig",), gpu_memory_min_mb=9000, name="MIG")
SHARE = engine.Needs(profile_id=2, gpu_count=1, kinds=("share",), name="Share")
EITHER = engine.Needs(profile_id=3, gpu_count=1, kinds=("mig", "share"), name="Either")
CPU = engine.Needs(profile_id=4, gpu_count=0, kinds=(), cpus=2, memory_mb=4096, name="CPU")


def slices(n: int, kind: str = "mig", start: int = 0, **fields) -> list[engine.PoolSlice]:
    return [
        engine.PoolSlice(
            slice_id=start + i,
            node_id=1,
            kind=kind,
            memory_mb=fields.get("memory_mb", 9984),
            gpu_model=fields.get("gpu_model", "NVIDIA A100"),
            available=fields.get("available", True),
        )
        for i in range(n)
    ]


def held(booking_id: int, needs: engine.Needs, seats: int, starts=NINE, hours=2):
    return engine.HeldBooking(
        booking_id, needs, seats, starts, starts + hours * HOUR, f"C{booking_id}"
    )


def test_three_overlapping_100_seat_bookings_on_108_slices_only_the_first_fits():
    pool = engine.Pool(tuple(slices(108)))
    first = engine.booking_fit(pool, MIG, 100, NINE, NINE + 2 * HOUR)
    assert first.fits and first.code == fit_codes.FITS
    confirmed = [held(1, MIG, 100)]
    second = engine.booking_fit(pool, MIG, 100, NINE, NINE + 2 * HOUR, confirmed)
    assert not second.fits
    assert second.code == fit_codes.TAKEN_BY_BOOKINGS
    assert second.most_seats == 8
    assert second.blocking == ("C1",)
    third = engine.booking_fit(pool, MIG, 100, NINE + HOUR, NINE + 3 * HOUR, confirmed)
    assert not third.fits and third.most_seats == 8


def test_a_booking_that_does_not_overlap_takes_nothing():
    pool = engine.Pool(tuple(slices(108)))
    later = [held(1, MIG, 100, starts=NINE + 2 * HOUR)]
    assert engine.booking_fit(pool, MIG, 100, NINE, NINE + 2 * HOUR, later).fits


def test_another_profile_takes_only_the_slices_the_two_share():
    # 10 MIG + 10 shares; a 10-seat booking that can use either leaves the new MIG booking
    # its 10 MIG slices only if it goes on the shares: the flow finds that.
    pool = engine.Pool(tuple(slices(10, "mig") + slices(10, "share", start=100)))
    others = [held(1, EITHER, 10)]
    assert engine.booking_fit(pool, MIG, 10, NINE, NINE + HOUR, others).fits
    # Another 5 share seats leave the EITHER booking 5 shares; it takes 5 MIG slices.
    others.append(held(2, SHARE, 5))
    fit = engine.booking_fit(pool, MIG, 10, NINE, NINE + HOUR, others)
    assert not fit.fits and fit.most_seats == 5
    assert fit.blocking == ("C1",)  # the share-only booking shares no slice with MIG


def test_the_tightest_piece_of_the_window_decides():
    pool = engine.Pool(tuple(slices(10)))
    others = [held(1, MIG, 6, starts=NINE, hours=1), held(2, MIG, 3, starts=NINE + HOUR, hours=1)]
    fit = engine.booking_fit(pool, MIG, 5, NINE, NINE + 2 * HOUR, others)
    assert not fit.fits and fit.most_seats == 4  # 10 - 6 in the first hour
    assert engine.booking_fit(pool, MIG, 4, NINE, NINE + 2 * HOUR, others).fits


def test_cordoned_slices_and_wrong_models_do_not_count():
    pool = engine.Pool(tuple(slices(5) + slices(5, start=10, available=False)))
    fit = engine.booking_fit(pool, MIG, 6, NINE, NINE + HOUR)
    assert not fit.fits and fit.code == fit_codes.POOL_TOO_SMALL and fit.capacity == 5
    h100 = engine.Needs(profile_id=9, gpu_count=1, kinds=("mig",), gpu_models=("H100",))
    assert engine.booking_fit(pool, h100, 1, NINE, NINE + HOUR).code == fit_codes.NO_FITTING_SLICES


def test_a_two_gpu_profile_counts_two_slices_a_seat():
    pool = engine.Pool(tuple(slices(9, "whole")))
    two = engine.Needs(profile_id=5, gpu_count=2, kinds=("whole",))
    fit = engine.booking_fit(pool, two, 5, NINE, NINE + HOUR)
    assert not fit.fits and fit.most_seats == 4


def test_cpu_only_profiles_book_node_cpu_and_memory():
    pool = engine.Pool((), (engine.PoolNode(1, cpus=20, memory_mb=65536),))
    assert engine.booking_fit(pool, CPU, 10, NINE, NINE + HOUR).fits
    fit = engine.booking_fit(pool, CPU, 10, NINE, NINE + HOUR, [held(1, CPU, 4)])
    assert not fit.fits and fit.code == fit_codes.TAKEN_BY_BOOKINGS and fit.most_seats == 6


def test_alternatives_fewer_seats_another_time_another_profile():
    pool = engine.Pool(tuple(slices(10, "mig") + slices(10, "share", start=100)))
    others = [held(1, MIG, 8, starts=NINE, hours=2)]
    windows = [(NINE + k * HOUR / 2, NINE + HOUR + k * HOUR / 2) for k in range(-4, 9)]
    found = engine.booking_alternatives(
        pool, MIG, 5, NINE, NINE + HOUR, others, windows=windows, profiles=[SHARE, EITHER]
    )
    kinds = {a.kind: a for a in found}
    assert kinds[fit_codes.ALTERNATIVE_SEATS].seats == 2
    # The nearest window that fits ends when the other booking starts: 08:00–09:00.
    assert kinds[fit_codes.ALTERNATIVE_TIME].starts_at == NINE - HOUR
    assert kinds[fit_codes.ALTERNATIVE_PROFILE].profile_id == SHARE.profile_id


def test_no_alternative_when_nothing_fits():
    pool = engine.Pool(tuple(slices(2)))
    assert engine.booking_alternatives(pool, SHARE, 5, NINE, NINE + HOUR) == []
