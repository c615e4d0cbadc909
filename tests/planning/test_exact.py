"""The exact planner (method ``exact``): busy time, coarsening, speed. Against exhaustive
search and Function 1: ``test_planner_properties.py``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.exact import plan_exact
from airflow_iqp.planning.models import Busy, FixedRate, LinearCost, LinearFinalAgg, PiecewiseLinearCost
from airflow_iqp.planning.planner import build_plan
from tests.planning.oracle import TOL, check_plan, compositions
from tests.planning.test_planner_properties import SETTINGS, instance, linear_cost, piecewise_cost
from tests.planning.test_planner_shared import intervals


def assert_best_of(plan, plans):
    """``plan`` has the fewest batches of the ``plans`` that meet the deadline and costs no
    more than any of them with as many; if none meets it, it finishes no later than any."""
    met = [p for p in plans if p.feasible]
    assert plan.feasible == bool(met)
    if met:
        fewest = min(len(p.batches) for p in met)
        assert len(plan.batches) == fewest
        assert plan.total_cost <= min(p.total_cost for p in met if len(p.batches) == fewest) + TOL
    else:
        assert plan.earliest_finish <= min(p.earliest_finish for p in plans) + TOL


@SETTINGS
@given(instance(st.one_of(linear_cost, piecewise_cost()), max_total=8), intervals)
def test_other_queries_time_is_worked_around(inst, busy):
    """With busy time batches may be divided around, against every plan built in it."""
    arrival, cost, final_agg, window_end, deadline = inst
    plan = plan_exact(*inst, busy=busy)
    assert_best_of(plan, [build_plan(sizes, *inst, busy=busy) for sizes in compositions(arrival.total)])


def test_whole_batches_around_other_work_are_refused():
    busy = Busy(((2.0, 3.0),), whole=True)
    with pytest.raises(ConfigError, match="greedy"):
        plan_exact(FixedRate(1.0, 10, 1.0), LinearCost(0.5), LinearFinalAgg(), 10.0, 12.0, busy=busy)
    # Nothing busy: whole or not, it is the plan alone.
    alone = plan_exact(FixedRate(1.0, 10, 1.0), LinearCost(0.5), LinearFinalAgg(), 10.0, 12.0)
    assert plan_exact(FixedRate(1.0, 10, 1.0), LinearCost(0.5), LinearFinalAgg(), 10.0, 12.0,
                      busy=Busy(whole=True)).to_dict() == alone.to_dict()


@SETTINGS
@given(instance(st.one_of(linear_cost, piecewise_cost()), max_total=12), st.integers(2, 5))
def test_a_coarsened_window_is_exact_among_plans_on_its_steps(inst, max_units):
    arrival, cost, final_agg, window_end, deadline = inst
    n = arrival.total
    plan = plan_exact(*inst, max_units=max_units)
    check_plan(plan, arrival, cost, final_agg, window_end, deadline)
    if n <= max_units:
        assert "coarsened" not in plan.extra
        return
    step = plan.extra["coarsened"]
    assert step == -(-n // max_units) and "steps of" in plan.extra["note"]
    assert all(b.cumulative % step == 0 for b in plan.batches[:-1])
    on_steps = []
    for sizes in compositions(-(-n // step)):
        real = [s * step for s in sizes[:-1]]
        on_steps.append(build_plan([*real, n - sum(real)], *inst))
    assert_best_of(plan, on_steps)


def test_large_window_plans_fast():
    """5 000 units of a 1 000-piece concave cost at a tight deadline: well under a second
    (``benchmarks/plan_speed.py`` times it)."""
    import time

    pts = [(1.0 + 5 * i, 1.049 + 5 * i * 0.999) for i in range(1001)]
    cost = PiecewiseLinearCost(tuple(pts))
    arrival = FixedRate(1.0, 5000)
    window_end = arrival.time_of(5000)
    started = time.perf_counter()
    tightest = plan_exact(arrival, cost, LinearFinalAgg(base=1.0, per_batch=0.001), window_end, window_end)
    plan = plan_exact(arrival, cost, LinearFinalAgg(base=1.0, per_batch=0.001), window_end, tightest.earliest_finish)
    assert not tightest.feasible and plan.feasible and len(plan.batches) > 100
    assert time.perf_counter() - started < 10  # generous: a shared test machine
