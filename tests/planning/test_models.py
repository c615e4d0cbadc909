"""Cost, final-aggregation and arrival models: semantics, fit, JSON round trips."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import (
    CallableCost, EmpiricalArrival, FixedRate, LinearCost, LinearFinalAgg, PiecewiseLinearCost,
    PiecewiseLinearFinalAgg, ProfileArrival, arrival_from_dict, cost_model_from_dict, decreasing_sizes,
    final_agg_from_dict, fit_piecewise_linear,
)
from airflow_iqp.planning.planner import Plan, plan_batches


def test_linear_cost_and_capacity():
    c = LinearCost(per_unit=0.5, per_batch=2.0)
    assert c.cost(0) == 0 and c.cost(4) == 4.0
    assert c.capacity(1.9) == 0          # not even the overhead fits
    assert c.capacity(2.5) == 1
    assert c.capacity(4.0) == 4          # exact fit counts
    assert c.capacity(4.49) == 4


def test_capacity_is_exact_despite_float_division():
    c = LinearCost(per_unit=0.1)
    assert c.capacity(0.3) == 3          # 0.3 / 0.1 == 2.9999999999999996 in floats


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 100)), min_size=2, max_size=6, unique_by=lambda p: p[0]),
       st.floats(0, 200))
def test_capacity_is_the_largest_batch_that_fits(raw, d):
    pts = sorted(raw)
    ys = sorted(y for _, y in pts)
    cost = PiecewiseLinearCost(tuple((float(x), y / 4) for (x, _), y in zip(pts, ys)))
    n = cost.capacity(d)
    if n == 0:
        assert cost.cost(1) > d
    elif n < 10**9:
        assert cost.cost(n) <= d + 1e-9 < cost.cost(n + 1) or cost.cost(n + 1) <= d + 1e-9 is False


def test_piecewise_cost_interpolates_and_extends():
    c = PiecewiseLinearCost(((10.0, 20.0), (20.0, 25.0), (40.0, 30.0)))
    assert c.cost(15) == pytest.approx(22.5)
    assert c.cost(60) == pytest.approx(30 + 20 * 10 / 30)  # beyond: the mean slope, steeper than the last piece
    assert c.overhead == pytest.approx(15.0)       # first piece extended to zero units
    assert c.cost(1) == pytest.approx(15.5)
    assert c.capacity(22.5) == 15


def test_callable_cost_capacity_by_search():
    c = CallableCost(lambda n: 3 + n ** 0.5)
    assert c.capacity(13) == 100
    with pytest.raises(ConfigError, match="callable"):
        c.to_dict()


def test_fit_piecewise_linear_is_monotone_and_recovers_a_linear_model():
    samples = [(n, 20 + 0.1 * n) for n in (1, 5, 10, 50, 100)] + [(10, 20.9)]
    fit = fit_piecewise_linear(samples)
    assert fit.overhead == pytest.approx(20, abs=0.2)
    noisy = [(1, 5.0), (2, 4.0), (4, 6.0), (8, 9.0)]      # 2 units measured faster than 1
    fit = fit_piecewise_linear(noisy)
    ys = [y for _, y in fit.points]
    assert ys == sorted(ys) and ys[0] == ys[1] == pytest.approx(4.5)


def test_one_slow_run_among_three_does_not_move_the_fit():
    """A 5-unit batch measured once at 1.83 s, once more than a 20-unit one: the fit's pooling
    makes 5 to 20 units cost the same. Measured three times, its median drops the slow run."""
    once = [(1, 0.6), (5, 1.83), (20, 1.6), (72, 4.0)]
    assert decreasing_sizes(once) == {5.0, 20.0}
    flat = fit_piecewise_linear(once)
    assert flat.cost(5) == flat.cost(20)
    thrice = once + [(5, 0.9), (5, 0.95), (20, 1.62), (20, 1.58)]
    assert decreasing_sizes(thrice) == set()
    fit = fit_piecewise_linear(thrice)
    assert fit.cost(5) == pytest.approx(0.95) and fit.cost(20) == pytest.approx(1.6)
    # Within the tolerance (5 % of the larger size's median) sizes are not measured again.
    assert decreasing_sizes([(1, 0.31), (2, 0.30), (4, 0.5)]) == set()
    assert decreasing_sizes([(1, 0.40), (2, 0.30), (4, 0.35)]) == {1.0, 2.0, 4.0}


def test_fit_thins_breakpoints():
    samples = [(n, 10 + (n if n < 50 else 50 + (n - 50) * 0.2)) for n in range(1, 101, 3)]
    fit = fit_piecewise_linear(samples, max_pieces=2)
    assert len(fit.points) == 3
    assert fit.cost(100) == pytest.approx(samples[-1][1], rel=0.02)
    with pytest.raises(ConfigError, match="distinct batch sizes"):
        fit_piecewise_linear([(5, 1.0), (5, 1.2)])


def test_final_agg_only_when_more_than_one_batch():
    assert LinearFinalAgg(base=1, per_batch=0.5).cost(1) == 0
    assert LinearFinalAgg(base=1, per_batch=0.5).cost(4) == 3
    pw = PiecewiseLinearFinalAgg(((2.0, 1.0), (10.0, 5.0)))
    assert pw.cost(1) == 0 and pw.cost(2) == 1 and pw.cost(6) == 3 and pw.cost(12) == 6


def test_a_merge_of_more_partials_than_measured_grows_at_least_at_the_mean_slope():
    """Calibrated merges of 1-5 partials, the last measured cheaper than the one before it:
    the fit pools them flat at the end, and 50 partials must still cost more than 5."""
    fit = fit_piecewise_linear([(1, 0.42), (2, 0.45), (4, 0.60), (5, 0.54)], max_pieces=3)
    agg = PiecewiseLinearFinalAgg(fit.points, merge_single=True)
    assert agg.cost(5) == agg.cost(4) == pytest.approx(0.57)  # pooled: a flat last piece
    mean = (0.57 - 0.42) / 4
    assert agg.cost(50) == pytest.approx(0.57 + 45 * mean) and agg.cost(6) > agg.cost(5)
    steep = PiecewiseLinearFinalAgg(((1.0, 1.0), (2.0, 1.1), (3.0, 2.1)))  # its last piece is steeper
    assert steep.cost(5) == pytest.approx(4.1)


def test_a_batch_larger_than_measured_grows_at_least_at_the_mean_slope():
    """Batches of 1-60 units whose fit ends flat (noise pooled): a batch of 120 must cost
    more than one of 60, and capacity inverts that; a last piece steeper than the mean
    slope is extended as it is."""
    fit = fit_piecewise_linear([(1, 1.0), (20, 1.6), (40, 2.3), (60, 2.1)])
    assert fit.cost(60) == fit.cost(40) == pytest.approx(2.2)  # pooled: a flat last piece
    mean = (2.2 - 1.0) / 59
    assert fit.cost(120) == pytest.approx(2.2 + 60 * mean) and fit.cost(61) > fit.cost(60)
    assert fit.capacity(fit.cost(120)) == 120 and fit.capacity(2.2 + 1e-9) == 60
    steep = PiecewiseLinearCost(((1.0, 1.0), (2.0, 1.1), (3.0, 2.1)))
    assert steep.cost(5) == pytest.approx(4.1) and steep.capacity(4.1) == 5


def test_fixed_rate_arrival():
    a = FixedRate(rate=2.0, total=10, start=1.0)
    assert a.time_of(1) == 1.0 and a.time_of(10) == 5.5
    assert a.count_at(0.9) == 0 and a.count_at(1.0) == 1 and a.count_at(1.49) == 1 and a.count_at(5.5) == 10
    assert a.count_at(100) == 10


def test_profile_arrival():
    a = ProfileArrival(((0.0, 0.0), (10.0, 5.0), (20.0, 5.0), (30.0, 15.0)))
    assert a.total == 15
    assert a.time_of(5) == 10.0                   # first time the curve reaches 5, not the flat end
    assert a.time_of(6) == 21.0
    assert a.count_at(15.0) == 5 and a.count_at(25.0) == 10 and a.count_at(-1) == 0
    for n in range(1, 16):
        assert a.count_at(a.time_of(n)) >= n


def test_empirical_arrival():
    a = EmpiricalArrival((3.0, 1.0, 2.0))
    assert a.time_of(1) == 1.0 and a.time_of(3) == 3.0 and a.count_at(2.5) == 2


@pytest.mark.parametrize("model", [
    LinearCost(0.5, 2.0), PiecewiseLinearCost(((1.0, 2.0), (10.0, 5.0))),
])
def test_cost_json_round_trip(model):
    assert cost_model_from_dict(json.loads(json.dumps(model.to_dict()))) == model


@pytest.mark.parametrize("model", [LinearFinalAgg(1.0, 0.25), PiecewiseLinearFinalAgg(((2.0, 1.0), (4.0, 3.0)))])
def test_final_agg_json_round_trip(model):
    assert final_agg_from_dict(json.loads(json.dumps(model.to_dict()))) == model


@pytest.mark.parametrize("model", [
    FixedRate(1.5, 7, start=0.0), ProfileArrival(((0.0, 0.0), (4.0, 9.0))), EmpiricalArrival((0.5, 1.0)),
])
def test_arrival_json_round_trip(model):
    assert arrival_from_dict(json.loads(json.dumps(model.to_dict()))) == model


def test_plan_json_round_trip():
    plan = plan_batches(FixedRate(1.0, 10, 1.0), LinearCost(0.5), LinearFinalAgg(), 10.0, 11.0)
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.sizes == [4, 4, 2]


def test_merge_single_charges_the_final_step_after_one_batch():
    from airflow_iqp.planning.models import LinearFinalAgg, PiecewiseLinearFinalAgg, final_agg_from_dict

    paper = LinearFinalAgg(base=2.0, per_batch=0.5)
    always = LinearFinalAgg(base=2.0, per_batch=0.5, merge_single=True)
    assert paper.cost(1) == 0.0 and always.cost(1) == 2.5 and always.cost(0) == 0.0
    assert paper.cost(3) == always.cost(3) == 3.5
    pw = PiecewiseLinearFinalAgg(((1, 9.0), (4, 10.0)), merge_single=True)
    assert pw.cost(1) == 9.0 and pw.cost(0) == 0.0 and PiecewiseLinearFinalAgg(pw.points).cost(1) == 0.0
    for m in (always, pw):
        assert final_agg_from_dict(m.to_dict()) == m
    assert "merge_single" not in paper.to_dict()
    with pytest.raises(ConfigError, match="final_agg.merge_single"):
        final_agg_from_dict({"kind": "linear", "base": 1, "merge_single": "yes"})


def test_shared_startup_takes_the_merges_own_start_up_off_and_round_trips():
    lin = LinearFinalAgg(base=10.0, per_batch=0.5, merge_single=True, shared_startup=9.0)
    assert lin.cost(1) == pytest.approx(1.5) and lin.cost(4) == pytest.approx(3.0)
    assert LinearFinalAgg(base=1.0, shared_startup=5.0, merge_single=True).cost(2) == 0.0  # never below zero
    pw = PiecewiseLinearFinalAgg(((1, 9.0), (4, 10.0)), merge_single=True, shared_startup=8.0)
    assert pw.cost(1) == pytest.approx(1.0) and pw.cost(4) == pytest.approx(2.0)
    for agg in (lin, pw):
        assert final_agg_from_dict(agg.to_dict()) == agg
    assert "shared_startup" not in LinearFinalAgg(base=1.0).to_dict()
    with pytest.raises(ConfigError, match="final_agg.shared_startup"):
        final_agg_from_dict({"kind": "linear", "base": 1, "shared_startup": -1})


def test_scaled_multiplies_every_cost_and_refuses_a_bad_factor():
    from airflow_iqp.planning.models import LinearCost, PiecewiseLinearCost, scaled

    assert scaled(LinearCost(0.5, 2.0), 1.5).cost(4) == pytest.approx(1.5 * 4.0)
    pw = PiecewiseLinearCost(((1, 3.0), (10, 6.0), (50, 10.0)))
    for n in (1, 7, 10, 33, 80):
        assert scaled(pw, 2.0).cost(n) == pytest.approx(2.0 * pw.cost(n))
    assert scaled(pw, 2.0).capacity(12.0) == pw.capacity(6.0)
    assert scaled(LinearFinalAgg(base=1.0, per_batch=0.5), 3.0).cost(2) == pytest.approx(6.0)
    agg = PiecewiseLinearFinalAgg(((1, 9.0), (4, 10.0)), merge_single=True)
    assert scaled(agg, 0.5).cost(4) == pytest.approx(5.0) and scaled(agg, 0.5).cost(1) == pytest.approx(4.5)
    assert scaled(pw, 1) is pw
    for bad in (0, -1.0, float("nan"), float("inf"), "2"):
        with pytest.raises(ConfigError, match="cost_scale"):
            scaled(pw, bad)


def test_plus_fixed_adds_seconds_to_every_batch_or_merge():
    from airflow_iqp.planning.models import LinearCost, PiecewiseLinearCost, plus_fixed

    assert plus_fixed(LinearCost(0.5, 2.0), 1.5).cost(4) == pytest.approx(5.5)
    pw = plus_fixed(PiecewiseLinearCost(((1, 3.0), (10, 6.0))), 2.0)
    assert pw.cost(1) == pytest.approx(5.0) and pw.overhead == pytest.approx(4.0 + 2.0 / 3)
    assert plus_fixed(LinearFinalAgg(base=1.0, per_batch=0.5), 2.0).cost(2) == pytest.approx(4.0)
    assert plus_fixed(PiecewiseLinearFinalAgg(((1, 9.0), (4, 10.0))), 1.0).cost(4) == pytest.approx(11.0)
    m = LinearCost(0.5)
    assert plus_fixed(m, 0.0) is m
    with pytest.raises(ConfigError, match="dispatch"):
        plus_fixed(m, -1.0)
