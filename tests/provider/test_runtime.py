"""The provider's window logic (airflow_iqp.runtime), on real files, without Airflow processes."""

import os

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.runtime import (
    LAST_UNIT_GRACE_S, QueryConfig, batch_ready, claim_batch, late_units, plan_window, window_id,
)
from airflow_iqp.state import WindowState, append_cost_history, read_claims

START = 1_800_000_000.0  # a window start, Unix seconds


def land(landing, n, first=0, mtime=None):
    """Publish units like replay does: complete directories only."""
    for i in range(first, first + n):
        d = landing / f"{i:06d}"
        d.mkdir(parents=True)
        for f in ("orders.parquet", "lineitem.parquet"):
            (d / f).write_bytes(b"x")
        if mtime is not None:
            os.utime(d, (mtime, mtime))


def cfg(tmp_path, **over):
    base = dict(query="cq2", landing=str(tmp_path / "landing"), state_dir=str(tmp_path / "state"), units=240,
                rate=1.0, cost_hint={"kind": "linear", "per_unit": 0.6, "per_batch": 25},
                final_agg_hint={"kind": "linear", "base": 25, "per_batch": 0.5})
    base.update(over)
    return QueryConfig(**base)


def test_plan_window_maps_batches_on_the_clock(tmp_path):
    wp = plan_window(cfg(tmp_path), START, START + 240, START + 340, now=START)
    assert wp.plan.feasible and not wp.backfill
    assert [b["units"] for b in wp.batches] == wp.plan.sizes and len(wp.batches) >= 3
    last = wp.batches[-1]
    assert last["last"] and last["ready_ts"] == START + 240 and last["cumulative"] == 240
    # Every batch keeps the orchestration margin between ready and latest start.
    assert all(b["latest_start_ts"] - b["ready_ts"] >= 10 - 1e-6 for b in wp.batches)
    assert wp.batches[0]["remaining_cost"] == pytest.approx(wp.plan.total_cost)
    assert wp.batches[0]["label"].startswith(f"batch 1/{len(wp.batches)} · {wp.batches[0]['units']} units · ready ")
    assert wp.window_id == window_id(START) == "20270115T080000"


def test_backfill_of_a_complete_window_is_one_batch(tmp_path):
    c = cfg(tmp_path)
    land(tmp_path / "landing", 240)
    wp = plan_window(c, START, START + 240, START + 340, now=START + 10_000)
    assert wp.backfill and [b["units"] for b in wp.batches] == [240]
    assert batch_ready(wp.batches[0], START + 10_000) is not None


def test_cost_model_comes_from_history_once_there_is_some(tmp_path):
    c = cfg(tmp_path)
    for units, secs in ((10, 21.0), (60, 23.0), (240, 30.0)):
        append_cost_history(c.state_dir, query="cq2", kind="batch", units=units, batches=1, wall_seconds=secs,
                            backend=c.backend)
    wp = plan_window(c, START, START + 240, START + 340, now=START)
    assert "fitted to 3 measured batches" in wp.models
    assert wp.plan.sizes == [240]   # 30 s for the whole window: one batch after it fits
    other = plan_window(cfg(tmp_path, backend="spark-connect"), START, START + 240, START + 340, now=START)
    assert "hint" in other.models   # history of another backend does not count


def test_readiness_is_units_or_latest_start_whichever_first(tmp_path):
    wp = plan_window(cfg(tmp_path), START, START + 240, START + 340, now=START)
    b1, b2 = wp.batches[0], wp.batches[1]
    assert batch_ready(b1, START + 1, arrived=b1["cumulative"] - 1) is None
    assert batch_ready(b1, START + 1, arrived=b1["cumulative"]) == "units"
    assert batch_ready(b1, b1["latest_start_ts"], arrived=0) == "time"
    # Batch 2 waits for batch 1's claim even when its units are there.
    assert batch_ready(b2, START + 1, arrived=240) is None
    WindowState(b1["state_dir"], "cq2", b1["window_id"]).claim_path(1).parent.mkdir(parents=True)
    claim_batch(b1)
    assert batch_ready(b2, START + 1, arrived=240) == "units"
    # The last batch needs the whole window.
    last = wp.batches[-1]
    assert batch_ready(last, START + 200, arrived=239) is None
    # With no slack (ready == latest start: an infeasible, best-effort plan), the last batch
    # still gives the units due at the window's end a moment to land before firing on time.
    tight = {**last, "latest_start_ts": last["ready_ts"]}
    assert batch_ready(tight, tight["ready_ts"], arrived=239) is None
    assert batch_ready(tight, tight["ready_ts"] + LAST_UNIT_GRACE_S, arrived=239) == "time"
    # A batch before the last fires at its latest start, slack or not.
    assert batch_ready({**b1, "latest_start_ts": b1["ready_ts"]}, b1["ready_ts"], arrived=0) == "time"


def test_claims_take_every_arrived_unit_once_and_late_units_are_recorded(tmp_path):
    c = cfg(tmp_path)
    landing = tmp_path / "landing"
    wp = plan_window(c, START, START + 240, START + 340, now=START)
    land(landing, 70)
    (landing / ".000070.tmp").mkdir()           # half-published: invisible
    m1 = claim_batch(wp.batches[0])
    assert len(m1["units"]) == 70 and len(m1["files"]) == 140
    assert claim_batch(wp.batches[0]) == m1   # a retry re-reads its claim
    land(landing, 100, first=70)
    m2 = claim_batch(wp.batches[1])
    assert m2["units"][0] == "000070" and len(m2["units"]) == 100
    m3 = claim_batch(wp.batches[2])
    assert len(m3["units"]) == 0                        # nothing new: the batch will skip
    land(landing, 3, first=170, mtime=START + 400)
    late = late_units(wp.batches[0], START)
    assert late["units"] == ["000170", "000171", "000172"] and late["arrival_times"] == [START + 400] * 3
    ws = WindowState(c.state_dir, "cq2", wp.window_id)
    claimed = [u for m in read_claims(ws).values() for u in m["units"]]
    assert len(claimed) == len(set(claimed)) == 170


def test_bad_configuration_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match="units"):
        cfg(tmp_path, units=0)
    with pytest.raises(ConfigError, match="cost_hint.kind"):
        cfg(tmp_path, cost_hint={"kind": "cubic"})
    with pytest.raises(ConfigError, match="deadline_offset"):
        plan_window(cfg(tmp_path), START, START + 240, START + 100, now=START)


def test_dynamic_mode_maps_minbatches_then_spares_that_skip(tmp_path):
    c = cfg(tmp_path, mode="dynamic", rsf=1.0, max_batches=8,
            cost_hint={"kind": "linear", "per_unit": 0.05, "per_batch": 5},
            final_agg_hint={"kind": "linear", "base": 1.0, "per_batch": 0.1})
    wp = plan_window(c, START, START + 240, START + 600, now=START)
    entries = wp.batches
    assert len(entries) == 8 and [e["index"] for e in entries] == list(range(1, 9))
    planned = [e for e in entries if not e.get("spare")]
    assert sum(e["units"] for e in planned) == 240 and len(planned) < 8
    assert wp.plan.extra["min_batch"]["size"] == planned[0]["units"]
    # A MinBatch fires on its units or at its estimated input time, whichever first.
    first = entries[0]
    assert first["latest_start_ts"] == first["ready_ts"]
    assert batch_ready(first, first["ready_ts"], arrived=3) == "time"
    assert entries[-1]["last"] and not any(e["last"] for e in entries[:-1])
    # Everything arrives: the planned batches claim it all, the spares find nothing.
    land(tmp_path / "landing", 240)
    for e in entries:
        m = claim_batch(e)
        assert bool(m["units"]) == (not e.get("spare"))


def test_a_single_batch_pays_the_final_step_too(tmp_path):
    """The provider's final task runs even after one batch; the plan must budget for it."""
    from airflow_iqp.runtime import cost_models

    c = cfg(tmp_path, final_agg_hint={"kind": "linear", "base": 20.0, "per_batch": 0.5})
    _cost, agg, _source = cost_models(c)
    assert agg.cost(1) == 20.5
    land(tmp_path / "landing", 240)  # a backfill: all input is there, one batch
    wp = plan_window(c, START, START + 240, START + 340, now=START + 10_000)
    assert wp.backfill and len(wp.batches) == 1
    assert wp.plan.final_agg_cost == 20.5
