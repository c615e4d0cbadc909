"""Windows whose number of units is not known in advance (``units=None``), without Airflow:
the estimate, the spare entries, the re-plan after each claim, and the last batch that takes
everything present at the window's end plus ``grace``."""

from __future__ import annotations

import os
import re

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.window.config import QueryConfig, clock
from airflow_iqp.window.costs import expected_units
from airflow_iqp.window.plan import plan_window, store_plan
from airflow_iqp.window.readiness import batch_ready, claim_batch, fire_at
from airflow_iqp.window.replan import effective
from airflow_iqp.store import open_store
from airflow_iqp.streams import Stream

START = 1_800_000_000.0
STREAM = Stream("events", format="csv", pattern="*.csv").to_dict()


def cfg(tmp_path, **over):
    base = dict(query="rev", landing=str(tmp_path / "landing"), state_dir=str(tmp_path / "state"), units=None,
                rate=0.5, streams=(STREAM,), grace=5.0, margin=2.0,
                cost_hint={"kind": "linear", "per_unit": 0.05, "per_batch": 4},
                final_agg_hint={"kind": "linear", "base": 3, "per_batch": 0.2},
                dispatch=0.0)  # the hints are each batch's whole cost here
    base.update(over)
    return QueryConfig(**base)


def land(landing, names, mtime):
    landing.mkdir(parents=True, exist_ok=True)
    for n in names:
        (landing / n).write_text("k,x\na,1\n")
        os.utime(landing / n, (mtime, mtime))
    (landing / "_SUCCESS").write_text("")
    (landing / (names[-1] + ".crc")).write_text("x")


def history(state, counts):
    for i, c in enumerate(counts):
        open_store(state).window("rev", f"2026010{i}T000000").write_doc(
            "arrivals", {"offsets": [0.0] * c, "units": [f"u{j}" for j in range(c)]})


def test_the_estimate_is_the_median_of_earlier_windows_else_the_rate_hint(tmp_path):
    c = cfg(tmp_path)
    assert expected_units(c, 120) == (60, "rate hint")
    history(tmp_path / "state", [40, 70, 50])
    assert expected_units(c, 120) == (50, "median of 3 earlier windows")
    assert expected_units(cfg(tmp_path, units=9), 120) == (9, "units")
    # A first window with no hint at all: the units present so far at the rate they came.
    first = cfg(tmp_path / "none", rate=None)
    assert expected_units(first, 120) == (1, "the units present, no history yet")
    assert expected_units(first, 120, present=5, elapsed=30) == (20, "the rate so far, no history yet")
    assert expected_units(first, 120, present=5, elapsed=300) == (5, "the rate so far, no history yet")


def test_a_first_window_without_units_rate_or_history_is_planned_from_what_has_arrived(tmp_path):
    land(tmp_path / "landing", ["a.csv", "b.csv", "c.csv"], START + 5)
    wp = plan_window(cfg(tmp_path, rate=None), START, START + 120, START + 150, now=START + 30)
    assert "12 units expected (the rate so far, no history yet)" in wp.models
    assert wp.batches[-1].last and wp.batches[-1].ready_ts == START + 125


def test_an_unknown_total_maps_checkpoints_and_a_last_batch_at_the_end_plus_grace(tmp_path):
    history(tmp_path / "state", [40, 40, 40])
    wp = plan_window(cfg(tmp_path), START, START + 120, START + 150, now=START)
    assert "40 units expected (median of 3 earlier windows)" in wp.models
    last = wp.batches[-1]
    assert last.last and last.known_total is False and last.ready_ts == START + 125
    assert fire_at(last) == START + 125
    checks = [b for b in wp.batches if b.spare]
    assert [b.latest_start_ts for b in checks] == [START + 40, START + 80]
    assert [b.index for b in wp.batches] == list(range(1, len(wp.batches) + 1))
    assert wp.cost_model == {"kind": "linear", "per_unit": 0.05, "per_batch": 4.0}


def _claimed(c, wp) -> list[str]:
    claims = open_store(c.state_dir).window("rev", wp.window_id).claims()
    return [u for m in claims.values() for u in m["units"]]


def test_a_checkpoint_runs_a_batch_only_when_the_rest_would_not_fit_after_the_window(tmp_path):
    history(tmp_path / "state", [40, 40, 40])
    # One batch after the window fits the estimate (4 + 0.3 x 40 + a 3.2 s merge + 2 s margin <= 22 s),
    # not 30 % more (4 + 0.3 x 53 + 3.2 > 22 s).
    c = cfg(tmp_path, cost_hint={"kind": "linear", "per_unit": 0.3, "per_batch": 4}, grace=0.0)
    wp = plan_window(c, START, START + 120, START + 142, now=START)
    store_plan(wp)
    assert [b.units for b in wp.batches if not b.spare] == [40]
    landing = tmp_path / "landing"
    land(landing, [f"w-{i:03d}.csv" for i in range(13)], START + 20)       # on the estimate's pace
    check1 = wp.batches[0]
    assert batch_ready(check1, START + 39) is None and batch_ready(check1, START + 40) == "time"
    assert claim_batch(check1, START + 40)["units"] == []                               # the rest still fits after the end
    land(landing, [f"w-{i:03d}.csv" for i in range(13, 35)], START + 60)    # 35 by 80 s: 30 % ahead
    check2 = wp.batches[1]
    assert batch_ready(check2, START + 80) == "time"
    claim = claim_batch(check2, START + 80)
    assert len(claim["units"]) == 35                                        # 52 expected now: run what is in
    doc = open_store(c.state_dir).window("rev", wp.window_id).doc("replan")
    assert doc["after"] == 2 and doc["ran"] and doc["expected_total"] == 53
    # The labels say the re-plan: in time order, the last batch with the units it now plans.
    labels = [effective(b).label for b in wp.batches]
    readies = [re.search(r"ready (\d\d:\d\d:\d\d)", x).group(1) for x in labels if "dropped" not in x]
    assert readies == sorted(readies), labels
    assert labels[-1].endswith(f"· {doc['sizes'][-1]} units · ready {clock(wp.batches[-1].ready_ts)} "
                               f"(re-plan at {clock(START + 80)} after batch 2)"), labels
    land(landing, [f"w-{i:03d}.csv" for i in range(35, 52)], START + 110)
    last = wp.batches[-1]
    assert batch_ready(last, START + 119.9) is None and batch_ready(last, START + 120) == "time"
    claim_batch(last, START + 120)
    units = _claimed(c, wp)
    assert len(units) == len(set(units)) == 52 and not any(u.startswith("_") or u.endswith(".crc") for u in units)


def test_thirty_percent_fewer_units_lose_nothing(tmp_path):
    history(tmp_path / "state", [40, 40, 40])
    c = cfg(tmp_path)
    wp = plan_window(c, START, START + 120, START + 150, now=START)
    store_plan(wp)
    land(tmp_path / "landing", [f"w-{i:03d}.csv" for i in range(28)], START + 30)
    for b in wp.batches[:-1]:
        if batch_ready(b, fire_at(b)):
            claim_batch(b, fire_at(b))
    last = wp.batches[-1]
    assert batch_ready(last, START + 125) == "time"
    claim_batch(last, START + 125)
    units = _claimed(c, wp)
    assert len(units) == len(set(units)) == 28


def test_the_late_batch_of_the_window_before_fires_lateness_after_its_end_and_claims_what_is_left(tmp_path):
    from airflow_iqp.window.accounting import late_entry

    c = cfg(tmp_path, units=12, late="merge", lateness=15.0)
    assert late_entry(c, START + 120, START + 240) is None                      # nothing planned before
    wp = plan_window(c, START, START + 120, START + 150, now=START)
    store_plan(wp)
    assert late_entry(cfg(tmp_path, units=12), START + 120, START + 240) is None  # late="record"
    entry = late_entry(c, START + 120, START + 240)
    last = wp.batches[-1]
    assert entry.late and entry.last and entry.index == last.index + 1
    assert entry.window_id == wp.window_id and entry.ready_ts == START + 120 + 5 + 15
    assert fire_at(entry) == entry.ready_ts and batch_ready(entry, entry.ready_ts - 1) is None
    land(tmp_path / "landing", [f"w-{i}.csv" for i in range(12)], START + 50)
    for b in wp.batches:
        claim_batch(b, START + 121)
    land(tmp_path / "landing", ["w-late-1.csv", "w-late-2.csv"], START + 130)
    # Not before the window's first revision is written (its final step may still run) ...
    assert batch_ready(entry, entry.ready_ts) is None
    assert batch_ready(entry, entry.deadline_ts + 15) == "time"   # ... unless it never is
    open_store(c.state_dir).window("rev", wp.window_id).write_manifest({"units": []})
    assert batch_ready(entry, entry.ready_ts) == "time"
    assert sorted(claim_batch(entry)["units"]) == ["w-late-1.csv", "w-late-2.csv"]
    with pytest.raises(ConfigError, match="'record' or 'merge'"):
        cfg(tmp_path, late="drop")


def test_the_window_that_just_ended_counts_by_its_landed_units_until_its_arrivals_are_recorded(tmp_path):
    c = cfg(tmp_path)
    first = plan_window(c, START, START + 120, START + 150, now=START)
    store_plan(first)
    land(tmp_path / "landing", [f"w-{i}.csv" for i in range(17)], START + 60)
    # The next window is planned as it opens, while the first one's last batch still runs.
    second = plan_window(c, START + 120, START + 240, START + 270, now=START + 120.5)
    assert "17 units expected (median of 1 earlier windows)" in second.models
    assert "rate hint" in plan_window(c, START + 120, START + 240, START + 270, now=START + 119).models


def test_a_checkpoint_past_an_infeasible_deadline_re_plans_the_earliest_finish(tmp_path):
    """A deadline a few seconds after the window's end, and a checkpoint that fires after it
    (a busy cluster): the re-plan runs what arrived and plans the rest to finish earliest."""
    from airflow_iqp.window.replan import replan

    c = cfg(tmp_path, grace=0.0, cost_hint={"kind": "linear", "per_unit": 0.5, "per_batch": 60})
    wp = plan_window(c, START, START + 30, START + 33, now=START + 1)
    store_plan(wp)
    assert not wp.plan.feasible
    land(tmp_path / "landing", ["a.csv", "b.csv"], START + 5)
    checkpoint = next(b for b in wp.batches if b.spare)
    run_now, doc = replan(checkpoint, 0, 2, START + 42)
    assert isinstance(run_now, bool)  # it decides, rather than raising
    assert doc["feasible"] is False and doc["expected_total"] >= 2
