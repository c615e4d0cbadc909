"""A claim plans the rest of its window again with the costs measured since the window was
planned: consecutive windows, where the next is planned while the last batch of the one
before still runs."""

from __future__ import annotations

import os

import pytest

from airflow_iqp.store import open_store
from airflow_iqp.streams import Stream
from airflow_iqp.window.config import QueryConfig
from airflow_iqp.window.plan import plan_window, store_plan
from airflow_iqp.window.readiness import batch_ready, claim_batch, fire_at
from airflow_iqp.window.replan import effective, fresh_models

START = 1_800_000_000.0
STREAM = Stream("events", format="csv", pattern="*.csv").to_dict()


def true_batch(units: int) -> float:
    """What a batch takes from claim to partial on the machine: start-up, then the work."""
    return 9.0 + 0.025 * units


def cfg(tmp_path, **over) -> QueryConfig:
    """120 units a window, no cost hint: the built-in spark-submit default plans the first."""
    base = dict(query="clicks", landing=str(tmp_path / "landing"), state_dir=str(tmp_path / "state"), units=120,
                streams=(STREAM,))
    return QueryConfig(**{**base, **over})


def measured(c: QueryConfig, units: int, window: str) -> None:
    open_store(c.state_dir).record_cost(query=c.query, kind="batch", units=units, batches=1, wall_seconds=1.0,
                                        end_to_end_seconds=true_batch(units), window=window)


def land(landing, count: int, mtime: float) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (landing / f"e-{i:03d}.csv").write_text("k,x\na,1\n")
        os.utime(landing / f"e-{i:03d}.csv", (mtime, mtime))


def test_the_next_window_s_claim_costs_its_batch_with_what_the_window_before_measured_after_its_plan(tmp_path):
    c = cfg(tmp_path)
    measured(c, 5, "w1")  # the window before: its first batch had finished when this one opened
    wp = plan_window(c, START, START + 120, START + 200, now=START)
    store_plan(wp)
    assert "1 batches of 5 units" in wp.models
    (only,) = wp.batches
    # One measured size gives the start-up, not the cost per unit: far above what it takes.
    assert only.cost > 1.25 * true_batch(120)
    measured(c, 115, "w1")  # that window's last batch, written after this window's plan
    fresh = fresh_models(only)
    assert fresh is not None and "2 batches measured from claim to partial" in fresh[2]
    land(tmp_path / "landing", 120, START + 60)
    assert batch_ready(only, fire_at(only)) is not None
    claim = claim_batch(only, fire_at(only))
    assert len(claim["units"]) == 120
    now = effective(only)
    assert now.cost == pytest.approx(true_batch(120), rel=0.25)
    assert now.cost == pytest.approx(fresh[0].cost(120))
    doc = open_store(c.state_dir).window(c.query, wp.window_id).doc("replan")
    assert doc["models"] == fresh[2] and doc["cost_model"] == fresh[0].to_dict()


def test_a_plan_whose_costs_have_not_changed_is_not_planned_again(tmp_path):
    c = cfg(tmp_path)
    measured(c, 5, "w1")
    measured(c, 115, "w1")
    wp = plan_window(c, START, START + 120, START + 200, now=START)
    store_plan(wp)
    assert all(fresh_models(b) is None for b in wp.batches)
    land(tmp_path / "landing", 120, START + 60)
    for b in wp.batches:
        claim_batch(b, fire_at(b))
    assert open_store(c.state_dir).window(c.query, wp.window_id).doc("replan") is None
    assert [effective(b) for b in wp.batches] == wp.batches


def test_the_rest_of_a_window_is_planned_again_after_its_first_batch_with_newer_costs(tmp_path):
    """The demo's first window on a new deployment: two batches on the built-in default; the
    same query's other window measured both sizes before this one's first batch fired."""
    c = cfg(tmp_path)
    wp = plan_window(c, START, START + 120, START + 200, now=START)
    store_plan(wp)
    first, last = wp.batches[0], wp.batches[-1]
    assert len(wp.batches) == 2 and "built-in spark-submit default" in wp.models
    measured(c, 5, "w0")
    measured(c, 115, "w0")
    land(tmp_path / "landing", first.cumulative, START + 5)
    at = START + 10
    assert batch_ready(first, at) == "units"
    claim = claim_batch(first, at)
    fresh = fresh_models(last)
    assert fresh is None  # what the claim planned with is in effect now
    runs, rest = effective(first), effective(last)
    assert runs.cost == pytest.approx(true_batch(len(claim["units"])), rel=0.25)
    assert rest.cost == pytest.approx(true_batch(120 - len(claim["units"])), rel=0.25)
    assert rest.cost < last.cost and rest.expected_total == 120
    # The last batch keeps the window's count, and still fires no earlier than its end.
    assert fire_at(rest) >= START + 120


@pytest.mark.parametrize("fuse_tail", [False, True])
def test_a_fused_tail_s_re_plan_counts_its_start_up_in_the_lead_as_the_first_plan_does(tmp_path, fuse_tail):
    """A fused tail's task starts before the window's end and pays its start-up there, so
    the first plan has its last batch ready that much earlier. The re-plan after the first
    batch does too: with the measured costs (cheaper than the built-in default) it keeps a
    deadline the first plan met. Without a fused tail, the same deadline cannot be met."""
    c = cfg(tmp_path, fuse_tail=fuse_tail)
    wp = plan_window(c, START, START + 120, START + 140, now=START)
    store_plan(wp)
    assert wp.plan.feasible == fuse_tail
    measured(c, 5, "w0")
    measured(c, 115, "w0")
    first = wp.batches[0]
    land(tmp_path / "landing", first.cumulative, START + 5)
    claim_batch(first, max(START + 10, fire_at(first)))
    doc = open_store(c.state_dir).window(c.query, wp.window_id).doc("replan")
    assert doc["feasible"] == fuse_tail, doc["sizes"]
    if fuse_tail:  # every unit after the first batch in the tail, which still fires at the window's end
        assert doc["sizes"] == [120 - len(open_store(c.state_dir).window(c.query, wp.window_id).claim_of(1)["units"])]
        assert fire_at(effective(wp.batches[-1])) >= START + 120
        # Its latest claim is the re-plan's latest start plus that start-up, paid by then: it
        # may wait past the window's end for a unit still missing from the count.
        tail = effective(wp.batches[-1])
        assert tail.latest_start_ts > START + 120 and fire_at(tail) > START + 120
