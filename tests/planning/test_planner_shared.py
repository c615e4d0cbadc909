"""Planning in the executor time other queries leave (``Busy``): the joint planning of
several queries on one cluster, earliest deadline first."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_iqp.planning.models import Busy, FixedRate, LinearCost, LinearFinalAgg
from airflow_iqp.planning.planner import executed, plan_batches
from tests.planning.test_planner_properties import SETTINGS, instance, linear_cost

TOL = 1e-7


def overlap(pieces, busy: Busy) -> float:
    return sum(max(0.0, min(e, be) - max(s, bs)) for s, e in pieces for bs, be in busy.intervals)


def test_busy_time_by_hand():
    busy = Busy().plus([(15, 20), (10, 12), (11, 11.5)])
    assert busy.intervals == ((10, 12), (15, 20))
    assert busy.free(0, 30) == 23 and busy.free(11, 16) == 3 and busy.free(5, 4) == -1
    assert busy.before(20, 1) == 14 and busy.before(13, 2) == 9 and busy.before(30, 5) == 25
    assert busy.used(9, 3) == [(9, 10), (12, 14)] and busy.after(9, 3) == 14 and busy.after(12, 3) == 15
    assert busy.after(12, 4) == 21
    assert busy.after(21, 2) == 23
    # Nothing busy: plain arithmetic.
    idle = Busy()
    assert idle.free(1, 4) == 3 and idle.before(5, 2) == 3 and idle.after(5, 2) == 7 and idle.used(5, 2) == [(5, 7)]


intervals = st.lists(st.tuples(st.integers(0, 80), st.integers(1, 10)), max_size=6).map(
    lambda xs: Busy().plus([(s / 2, s / 2 + w / 2) for s, w in xs]))


@settings(max_examples=300, deadline=None)
@given(intervals, st.integers(0, 100).map(lambda t: t / 2), st.integers(0, 40).map(lambda d: d / 4))
def test_before_and_after_count_exactly_the_free_time(busy, t, d):
    assert abs(busy.free(busy.before(t, d), t) - d) <= TOL
    pieces = busy.used(t, d)
    assert abs(sum(e - s for s, e in pieces) - d) <= TOL and overlap(pieces, busy) <= TOL
    assert pieces[-1][1] == busy.after(t, d) and all(s >= t - TOL for s, _e in pieces)


@SETTINGS
@given(instance(linear_cost, max_total=120))
def test_with_nothing_busy_the_plan_is_the_plan_alone(inst):
    arrival, cost, final_agg, window_end, deadline = inst
    assert plan_batches(*inst, busy=Busy()).to_dict() == plan_batches(*inst).to_dict()


@SETTINGS
@given(instance(linear_cost, max_total=120), st.one_of(intervals, intervals.map(lambda b: Busy(b.intervals, True))))
def test_a_plan_in_the_time_left_runs_in_it_and_its_slack_is_measured_there(inst, busy):
    """Divisible work, or whole batches (``Busy.whole``: each batch in one free gap)."""
    arrival, cost, final_agg, window_end, deadline = inst
    plan = plan_batches(*inst, busy=busy)
    assert sum(plan.sizes) == arrival.total
    pieces = executed(plan, busy)
    assert overlap(pieces, busy) <= TOL  # never on the other queries' time
    if busy.whole:
        assert len(pieces) == len(plan.batches) + 1  # one piece per batch, and the merge
    finish = pieces[-1][1] if pieces else window_end
    assert abs(plan.slack - (deadline - finish)) <= 1e-6
    if plan.feasible:
        assert finish <= deadline + TOL
        # Each batch's latest start leaves it its cost in free time before the next one's
        # (whole: in one gap from there).
        for a, b in zip(plan.batches, plan.batches[1:]):
            assert busy.after(a.latest_start, a.cost) <= b.latest_start + TOL
            if busy.whole:
                assert overlap([(a.latest_start, a.latest_start + a.cost)], busy) <= TOL


def test_a_second_query_planned_after_the_first_avoids_its_time_and_cuts_its_last_batch_smaller():
    """Two queries over the same units, the first due 4 s after the window's end, the second
    6 s after: alone, the second would put 40 units after the end; planned after the first,
    whose tail and merge hold the executor just after the end, it keeps less for then."""
    arrival = FixedRate(rate=1.0, total=100)
    cost, agg = LinearCost(per_unit=0.05, per_batch=0.5), LinearFinalAgg(base=0.5, per_batch=0.1)
    end = arrival.time_of(100)
    first = plan_batches(arrival, cost, agg, end, end + 4)
    busy = Busy().plus(executed(first, Busy()))
    alone = plan_batches(arrival, cost, agg, end, end + 6)
    shared = plan_batches(arrival, cost, agg, end, end + 6, busy=busy)
    assert first.feasible and alone.feasible and shared.feasible
    assert shared.batches[-1].units < alone.batches[-1].units
    assert overlap(executed(shared, busy), busy) <= TOL
    # Run together on one executor the first's batches take their time, the second's the rest.
    assert executed(shared, busy)[-1][1] <= end + 6 + TOL


def test_whole_batches_take_one_gap_by_hand():
    busy = Busy(whole=True).plus([(15, 20), (10, 12)])
    assert busy.whole and busy.gaps(0, 30) == [(0, 10), (12, 15), (20, 30)]
    # The longest gap, not the sum: 3 s free between 11 and 16, but at most 3 s in one piece.
    assert busy.free(0, 30) == 10 and busy.free(11, 16) == 3 and busy.free(12, 22) == 3
    # 4 s ending by 20 do not fit in 12..15: they go before 10.
    assert busy.before(20, 4) == 6 and busy.before(20, 3) == 12
    assert busy.used(9, 3) == [(12, 15)] and busy.after(9, 4) == 24 and busy.after(0, 5) == 5
    # Placed by before(), it runs there, up to rounding: 4.0 - 2.45 is 1.5499999999999998.
    tight = Busy(((4.0, 4.5),), whole=True)
    start = tight.before(4.0, 1.55)
    assert tight.used(start, 1.55) == [(start, start + 1.55)] and tight.after(start, 1.55) <= 4.0 + 1e-9


@settings(max_examples=300, deadline=None)
@given(intervals.map(lambda b: Busy(b.intervals, whole=True)), st.integers(0, 100).map(lambda t: t / 2), st.integers(1, 40).map(lambda d: d / 4))
def test_whole_work_runs_in_one_free_gap(busy, t, d):
    s = busy.before(t, d)
    assert s + d <= t + TOL and overlap([(s, s + d)], busy) <= TOL
    # No later start would fit: nudging it later hits busy time or passes t.
    assert s + d >= t - TOL or overlap([(s + 0.25, s + 0.25 + d)], busy) > TOL
    pieces = busy.used(t, d)
    assert len(pieces) == 1 and abs(pieces[0][1] - pieces[0][0] - d) <= TOL
    assert overlap(pieces, busy) <= TOL and pieces[0][0] >= t - TOL
    assert busy.free(t, busy.after(t, d)) >= d - TOL
