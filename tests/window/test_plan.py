"""The provider's window logic (airflow_iqp.window), on real files, without Airflow processes."""

import os
import time

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.window.accounting import late_units
from airflow_iqp.window.config import QueryConfig, window_id
from airflow_iqp.window.plan import plan_window
from airflow_iqp.window.readiness import LAST_UNIT_GRACE_S, batch_ready, claim_batch, fire_at
from airflow_iqp.store import open_store
from tests.support.batches import TPCH_STREAMS

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
                streams=TPCH_STREAMS,
                rate=1.0, cost_hint={"kind": "linear", "per_unit": 0.6, "per_batch": 25},
                final_agg_hint={"kind": "linear", "base": 25, "per_batch": 0.5},
                dispatch=0.0)  # the hints are each batch's whole cost here
    base.update(over)
    return QueryConfig(**base)


def test_plan_window_maps_batches_on_the_clock(tmp_path):
    wp = plan_window(cfg(tmp_path), START, START + 240, START + 340, now=START)
    assert wp.plan.feasible and not wp.backfill
    assert [b.units for b in wp.batches] == wp.plan.sizes and len(wp.batches) >= 3
    last = wp.batches[-1]
    assert last.last and last.ready_ts == START + 240 and last.cumulative == 240
    # Every batch keeps the orchestration margin between ready and latest start.
    assert all(b.latest_start_ts - b.ready_ts >= 10 - 1e-6 for b in wp.batches)
    assert wp.batches[0].remaining_cost == pytest.approx(wp.plan.total_cost)
    assert wp.batches[0].label.startswith(f"batch 1/{len(wp.batches)} · {wp.batches[0].units} units · ready ")
    assert wp.window_id == window_id(START) == "20270115T080000"


def test_backfill_of_a_complete_window_is_one_batch(tmp_path):
    c = cfg(tmp_path)
    land(tmp_path / "landing", 240)
    wp = plan_window(c, START, START + 240, START + 340, now=START + 10_000)
    assert wp.backfill and [b.units for b in wp.batches] == [240]
    assert batch_ready(wp.batches[0], START + 10_000) is not None


def test_readiness_lists_the_units_only_once_enough_names_are_there(tmp_path):
    from airflow_iqp.landing import count_names

    c = cfg(tmp_path)
    wp = plan_window(c, START, START + 240, START + 340, now=START)
    first = wp.batches[0]
    n = first.cumulative
    assert len(wp.batches) > 1 and n > 1
    landing = tmp_path / "landing"
    assert count_names(landing) == 0 and batch_ready(first, START + 1) is None
    land(landing, n - 1)
    (landing / f".{n - 1:06d}.tmp").mkdir()  # in flight: not counted
    assert count_names(landing) == n - 1 and batch_ready(first, START + 1) is None
    (landing / f"{n - 1:06d}").mkdir()  # a name, but not a complete unit yet: counted, then listed
    assert count_names(landing) == n and batch_ready(first, START + 1) is None
    for f in ("orders.parquet", "lineitem.parquet"):
        (landing / f"{n - 1:06d}" / f).write_bytes(b"x")
    assert batch_ready(first, START + 1) == "units"


def test_cost_model_comes_from_history_once_there_is_some(tmp_path):
    c = cfg(tmp_path)
    for units, secs in ((10, 21.0), (60, 23.0), (240, 30.0)):
        open_store(c.state_dir).record_cost(query="cq2", kind="batch", units=units, batches=1, wall_seconds=secs - 9,
                                            backend=c.backend, end_to_end_seconds=secs)
    wp = plan_window(c, START, START + 240, START + 340, now=START)
    assert "fitted to 3 batches measured from claim to partial" in wp.models
    assert wp.plan.sizes == [240]   # 30 s for the whole window: one batch after it fits
    other = plan_window(cfg(tmp_path, backend="spark-connect"), START, START + 240, START + 340, now=START)
    assert "hint" in other.models   # history of another backend does not count


def test_readiness_is_units_or_latest_start_whichever_first(tmp_path):
    wp = plan_window(cfg(tmp_path), START, START + 240, START + 340, now=START)
    b1, b2 = wp.batches[0], wp.batches[1]
    assert batch_ready(b1, START + 1, arrived=b1.cumulative - 1) is None
    assert batch_ready(b1, START + 1, arrived=b1.cumulative) == "units"
    assert batch_ready(b1, b1.latest_start_ts, arrived=0) == "time"
    # Batch 2 waits for batch 1's claim even when its units are there.
    assert batch_ready(b2, START + 1, arrived=240) is None
    claim_batch(b1)
    assert batch_ready(b2, START + 1, arrived=240) == "units"
    # The last batch never fires before the window's end plus grace: the count of units is
    # a hint, and reaching it early does not fire it.
    last = wp.batches[-1].with_(index=1)  # the batches before it have claimed
    assert last.ready_ts == START + 240 + last.grace
    assert batch_ready(last, START + 200, arrived=240) is None
    assert batch_ready(last, last.ready_ts - 0.01, arrived=240) is None
    assert batch_ready(last, last.ready_ts, arrived=240) == "units"
    # Short of the count, it gives the missing units a moment, within its latest start.
    assert batch_ready(last, last.ready_ts, arrived=239) is None
    assert fire_at(last.with_(latest_start_ts=last.ready_ts + 30)) == last.ready_ts + LAST_UNIT_GRACE_S
    assert fire_at(last.with_(latest_start_ts=last.ready_ts - 30)) == last.ready_ts
    assert batch_ready(last, fire_at(last), arrived=3) == "time"
    # Its latest start before the window's end (a re-plan with larger costs): it fires as the
    # window ends, and on its units when they are all there by then.
    early = last.with_(latest_start_ts=last.ready_ts - 30)
    assert batch_ready(early, early.ready_ts, arrived=240) == "units"
    assert batch_ready(early, early.ready_ts, arrived=239) == "time"
    # A batch before the last fires at its latest start, slack or not.
    assert batch_ready(b1.with_(latest_start_ts=b1.ready_ts), b1.ready_ts, arrived=0) == "time"


def test_claims_take_every_arrived_unit_once_and_late_units_are_recorded(tmp_path):
    c = cfg(tmp_path)
    landing = tmp_path / "landing"
    wp = plan_window(c, START, START + 240, START + 340, now=START)
    land(landing, 70)
    (landing / ".000070.tmp").mkdir()           # half-published: invisible
    m1 = claim_batch(wp.batches[0], now=START + 70)
    assert len(m1["units"]) == 70 and len(m1["files"]) == 140
    assert set(m1["arrived"].values()) == {START + 70}   # when the provider first saw them
    assert claim_batch(wp.batches[0]) == m1   # a retry re-reads its claim
    land(landing, 100, first=70)
    m2 = claim_batch(wp.batches[1])
    assert m2["units"][0] == "000070" and len(m2["units"]) == 100
    m3 = claim_batch(wp.batches[2])
    assert len(m3["units"]) == 0                        # nothing new: the batch will skip
    land(landing, 3, first=170, mtime=START - 999)      # a writer's mtime is not when they arrived
    ws = open_store(c.state_dir).window("cq2", wp.window_id)
    ws.note_seen(["000170", "000171", "000172"], START + 400)
    late = late_units(wp.batches[0], START)
    assert late["units"] == ["000170", "000171", "000172"] and late["arrival_times"] == [START + 400] * 3
    ws = open_store(c.state_dir).window("cq2", wp.window_id)
    claimed = [u for m in ws.claims().values() for u in m["units"]]
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
    assert len(entries) == 8 and [e.index for e in entries] == list(range(1, 9))
    planned = [e for e in entries if not e.spare]
    assert sum(e.units for e in planned) == 240 and len(planned) < 8
    assert wp.plan.extra["min_batch"]["size"] == planned[0].units
    # A MinBatch fires on its units or at its estimated input time, whichever first.
    first = entries[0]
    assert first.latest_start_ts == first.ready_ts
    assert batch_ready(first, first.ready_ts, arrived=3) == "time"
    assert entries[-1].last and not any(e.last for e in entries[:-1])
    # Least laxity first at the cluster's gate, as the paper's dynamic mode runs them.
    assert {e.turn_policy for e in entries} == {"llf"}
    assert {e.turn_policy for e in plan_window(cfg(tmp_path), START, START + 240, START + 600, now=START).batches} \
        == {"edf"}
    # Everything arrives: the planned batches claim it all, the spares find nothing.
    land(tmp_path / "landing", 240)
    for e in entries:
        m = claim_batch(e)
        assert bool(m["units"]) == (not e.spare)


def test_with_a_fused_tail_the_last_minbatch_is_the_tail_and_waits_for_the_window_s_end(tmp_path):
    """Spares after the last MinBatch would make it a batch like the others, fired at the
    tail's latest start (its start-up before the window's end): it ran beside the tail's
    start and overran the window's end while the last units waited for it."""
    c = cfg(tmp_path, mode="dynamic", rsf=1.0, max_batches=8, fuse_tail=True, dispatch=3.0,
            cost_hint={"kind": "linear", "per_unit": 0.05, "per_batch": 5},
            final_agg_hint={"kind": "linear", "base": 1.0, "per_batch": 0.1})
    wp = plan_window(c, START, START + 240, START + 250, now=START)
    entries = wp.batches
    assert not any(e.spare for e in entries) and len(entries) < 8
    *minbatches, tail = entries
    assert tail.last and tail.max_units is None and sum(e.units for e in entries) == 240
    assert all(e.max_units == e.units for e in minbatches)
    # Planned ready its start-up early, and its latest start with it; the task has paid the
    # start-up by then, so it may claim that much later.
    assert START + wp.plan.batches[-1].latest_start < START + 240 <= tail.ready_ts
    assert tail.latest_start_ts == pytest.approx(START + wp.plan.batches[-1].latest_start + 3.0)
    land(tmp_path / "landing", 239)
    assert batch_ready(tail, START + wp.plan.batches[-1].latest_start + 0.1, arrived=239) is None
    assert batch_ready(tail, START + 240 - 0.1, arrived=239) is None  # not on time before the end
    for e in minbatches:
        assert len(claim_batch(e)["units"]) == e.units
    land(tmp_path / "landing", 1, first=239)
    assert batch_ready(tail, START + 240, arrived=240) is not None
    assert len(claim_batch(tail)["units"]) == tail.units


def test_a_single_batch_pays_the_final_step_too(tmp_path):
    """The provider's final task runs even after one batch; the plan must budget for it."""
    from airflow_iqp.window.costs import cost_models

    c = cfg(tmp_path, final_agg_hint={"kind": "linear", "base": 20.0, "per_batch": 0.5})
    _cost, agg, _source = cost_models(c)
    assert agg.cost(1) == 20.5
    land(tmp_path / "landing", 240)  # a backfill: all input is there, one batch
    wp = plan_window(c, START, START + 240, START + 340, now=START + 10_000)
    assert wp.backfill and len(wp.batches) == 1
    assert wp.plan.final_agg_cost == 20.5


def test_one_batch_mode_plans_the_whole_window_after_its_end(tmp_path):
    wp = plan_window(cfg(tmp_path, mode="one_batch"), START, START + 240, START + 340, now=START)
    assert [b.units for b in wp.batches] == [240] and wp.plan.method == "one_batch"
    assert wp.batches[0].ready_ts == START + 240 and wp.batches[0].last
    with pytest.raises(ConfigError, match="mode"):
        cfg(tmp_path, mode="one-batch")


def test_a_fused_tail_plans_its_merge_without_a_second_start_up(tmp_path):
    """spark-submit: the merge runs in the last batch's JVM, so the plan may leave more for after the end."""
    from airflow_iqp.window.costs import cost_models

    plain = cfg(tmp_path)
    fused = cfg(tmp_path, fuse_tail=True)
    _c, agg, _s = cost_models(plain)
    _c, fagg, source = cost_models(fused)
    assert agg.cost(3) == 26.5 and fagg.cost(3) == pytest.approx(26.5 - 25) and "fused tail" in source
    # On Spark Connect nothing is shared: the session is open for both either way.
    _c, cagg, _s = cost_models(cfg(tmp_path, fuse_tail=True, backend="spark-connect"))
    assert cagg.cost(3) == 26.5
    p_plain = plan_window(plain, START, START + 240, START + 310, now=START)
    p_fused = plan_window(fused, START, START + 240, START + 310, now=START)
    assert not p_plain.plan.feasible and p_fused.plan.feasible
    assert p_fused.plan.final_agg_cost == pytest.approx(fagg.cost(len(p_fused.batches)))


def test_the_fused_tail_starts_its_lead_before_the_end_then_waits_in_process_and_claims(tmp_path):
    from airflow_iqp.window.readiness import split_tail, tail_started, wait_and_claim

    c = cfg(tmp_path, units=6, rate=6 / 240, cost_hint={"kind": "linear", "per_unit": 30, "per_batch": 5}, margin=0)
    wp = plan_window(c, START, START + 240, START + 320, now=START)  # 5 batches, one ready every 40-80 s
    end = wp.batches[-1].ready_ts
    assert end == START + 240 and len(wp.batches) > 3
    lead = 100.0
    mapped, tail = split_tail(wp.batches, lead)
    assert tail.last and tail.start_ts == end - lead
    assert tail.with_(start_ts=None, before=()) == wp.batches[-1]
    # The batches ready after the final task starts are its to run; the others are mapped.
    assert mapped + list(tail.before) == wp.batches[:-1] and tail.before
    assert all(b.ready_ts < tail.start_ts <= a.ready_ts for b in mapped for a in tail.before)
    assert split_tail(wp.batches, 0.0)[1].before == () and split_tail(wp.batches, 1e6)[0] == []
    assert mapped and split_tail([], lead) == ([], None)
    # The wait before the final task fires at its start, whatever has arrived.
    assert tail_started(tail, end - lead) == "lead" and tail_started(tail, end - lead - 0.1) is None
    assert batch_ready(tail, end - lead, arrived=0) is None
    landing = tmp_path / "landing"
    land(landing, 4)
    before = {u for b in mapped + list(tail.before) for u in claim_batch(b)["units"]}  # earlier batches claim
    # The last two units land while the final task waits for the window's end (here half a
    # second away); it claims them at that time.
    polls = []

    def sleep(s):
        polls.append(1)
        if len(polls) == 3:
            land(landing, 2, first=4)
        time.sleep(min(s, 0.05))

    at = time.time() + 0.5
    manifest = wait_and_claim(tail.with_(ready_ts=at, latest_start_ts=at), sleep=sleep)
    assert time.time() >= at and len(polls) >= 3
    assert manifest["units"] == [f"{i:06d}" for i in range(6) if f"{i:06d}" not in before]
    claims = open_store(c.state_dir).window(c.query, wp.window_id).claims()
    every = [u for m in claims.values() for u in m["units"]]
    assert sorted(every) == [f"{i:06d}" for i in range(6)] and len(every) == len(set(every))
    # A retry re-reads the claim instead of taking units that landed since.
    land(landing, 1, first=6)
    assert wait_and_claim(tail, sleep=sleep) == manifest


def test_a_before_batch_not_claimed_by_the_window_end_leaves_its_units_to_the_last_batch(tmp_path):
    """An earlier batch ran late, past the window's end: the next batch of the fused tail's
    ``before`` would run on its own after the end; it claims nothing and the last batch,
    which runs with the merge, takes its units (a retry keeps whatever it claimed)."""
    from airflow_iqp.window.readiness import fold_into_tail, split_tail, wait_and_claim

    c = cfg(tmp_path, units=6, rate=6 / 240, cost_hint={"kind": "linear", "per_unit": 30, "per_batch": 5}, margin=0)
    wp = plan_window(c, START, START + 240, START + 320, now=START)
    mapped, tail = split_tail(wp.batches, 1e6)
    assert not mapped and len(tail.before) >= 2
    first, late = tail.before[0], tail.before[1]
    land(tmp_path / "landing", first.cumulative)
    claim_batch(first)
    land(tmp_path / "landing", 6 - first.cumulative, first=first.cumulative)
    assert fold_into_tail(late, tail, tail.ready_ts - 0.01) is None  # before the end: it runs as planned
    assert fold_into_tail(late.with_(known_total=False), tail, tail.ready_ts + 1) is None
    assert fold_into_tail(late, tail, tail.ready_ts)["units"] == []
    for entry in tail.before[2:]:
        fold_into_tail(entry, tail, tail.ready_ts)
    ws = open_store(c.state_dir).window(c.query, wp.window_id)
    assert fold_into_tail(late, tail, tail.ready_ts + 5) is None  # claimed already: a retry changes nothing
    manifest = wait_and_claim(tail.with_(ready_ts=time.time()))  # the window's end has come
    assert manifest["units"] == [f"{i:06d}" for i in range(first.cumulative, 6)]
    assert [len(ws.claims()[b.index]["units"]) for b in tail.before[1:]] == [0] * (len(tail.before) - 1)


def test_dispatch_is_planned_per_batch_and_a_fused_tail_dispatches_before_the_end(tmp_path):
    from airflow_iqp.window.costs import cost_models
    from airflow_iqp.window.readiness import fire_at

    c = cfg(tmp_path, dispatch=3.0)
    cost, agg, source = cost_models(c)
    assert cost.cost(10) == pytest.approx(25 + 6 + 3) and agg.cost(2) == pytest.approx(26 + 3)
    assert "3 s of task dispatch" in source
    fused = cfg(tmp_path, dispatch=3.0, fuse_tail=True)
    _c, fagg, _s = cost_models(fused)
    assert fagg.cost(2) == pytest.approx(26 - 25)  # neither its own JVM nor its own task start
    # The final task runs the last batch: it is started (dispatched) before the window's end,
    # and on spark-submit its job's JVM too, so the batch before it has to be done by then.
    for backend, startup in (("spark-connect", 3.0), ("spark-submit", 25 + 3.0)):
        wp = plan_window(cfg(tmp_path, dispatch=3.0, fuse_tail=True, backend=backend), START, START + 240,
                         START + 340, now=START)
        *earlier, last = wp.batches
        assert wp.plan.batches[-1].ready == 240 - startup and earlier, backend
        assert earlier[-1].latest_start_ts + earlier[-1].cost <= last.latest_start_ts + 1e-6
        assert all(b.ready_ts <= START + 240 - startup for b in earlier)
        # Its input is complete only at the window's end: it never fires on time before then.
        assert last.ready_ts == START + 240 and fire_at(last) >= START + 240
        assert batch_ready(last, START + 240 - 1, arrived=0) is None
    with pytest.raises(ConfigError, match="dispatch"):
        cfg(tmp_path, dispatch=-1)


def test_a_fused_tail_waits_for_a_missing_unit_as_long_as_the_start_up_paid_in_its_lead_allows(tmp_path):
    """A unit due at the window's end lands a moment after it. A fused tail's plan counts the
    start-up its task pays in the lead (here Connect's dispatch) in the last batch's cost, from
    a ready time that much before the window's end; after the end that is paid, so the task
    may wait for the missing unit until the deadline less the work it has left."""
    c = cfg(tmp_path, dispatch=3.0, fuse_tail=True, backend="spark-connect", margin=0.0,
            cost_hint={"kind": "linear", "per_unit": 0.1, "per_batch": 0.5},
            final_agg_hint={"kind": "linear", "base": 0.2, "per_batch": 0.05})
    wp = plan_window(c, START, START + 240, START + 242, now=START)
    last, planned = wp.batches[-1], wp.plan.batches[-1]
    assert wp.plan.feasible and planned.ready == 240 - 3.0
    assert planned.latest_start < 240  # on the plan's axis, the start-up included
    assert last.latest_start_ts == pytest.approx(START + planned.latest_start + 3.0)
    assert last.latest_start_ts > START + 240
    # Its work after the claim (its cost less the start-up, then the merge) ends by the deadline.
    merge = wp.plan.total_cost - sum(b.cost for b in wp.plan.batches)
    assert last.latest_start_ts + last.cost - 3.0 + merge == pytest.approx(last.deadline_ts)
    assert fire_at(last) == pytest.approx(last.latest_start_ts)
    ready = last.with_(index=1)  # the batches before it have claimed
    assert batch_ready(ready, START + 240, arrived=239) is None  # one unit short: it waits for it
    assert batch_ready(ready, START + 240, arrived=240) == "units"
    assert batch_ready(ready, last.latest_start_ts, arrived=239) == "time"


def test_cost_scale_plans_as_if_the_calibrated_costs_were_that_much_longer(tmp_path):
    from airflow_iqp.window.costs import cost_models

    fit = {"cost": {"kind": "piecewise_linear", "points": [[1, 0.4], [100, 2.0], [300, 5.0]]},
           "final_agg": {"kind": "piecewise_linear", "points": [[1, 0.3], [4, 0.4]]}}
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    for state, factor in ((fast, 1.0), (slow, 1.5)):
        open_store(state).record_fit(query="cq3", backend="spark-connect", overhead_seconds=0.4,
                                     cost={"kind": "piecewise_linear", "points": [[x, y * factor]
                                                                                  for x, y in fit["cost"]["points"]]},
                                     final_agg={"kind": "piecewise_linear", "points": [[x, y * factor] for x, y in
                                                                                       fit["final_agg"]["points"]]})
    common = dict(query="cq3", streams=TPCH_STREAMS, units=300, rate=1.0, backend="spark-connect", fuse_tail=True,
                  margin=2.0, dispatch=0.0,
                  landing=str(tmp_path / "landing"))
    scaled_cfg = QueryConfig(**common, state_dir=str(fast), cost_scale=1.5)
    cost, agg, source = cost_models(scaled_cfg)
    assert cost.cost(200) == pytest.approx(1.5 * 3.5) and agg.cost(2) == pytest.approx(1.5 * (0.3 + 0.1 / 3))
    assert "costs x 1.5 (cost_scale)" in source
    # The same plan as from a calibration that measured every cost 1.5 times as long.
    plans = [plan_window(c, START, START + 300, START + 303, now=START)
             for c in (scaled_cfg, QueryConfig(**common, state_dir=str(slow)),
                       QueryConfig(**common, state_dir=str(fast)))]
    assert plans[0].plan.sizes == plans[1].plan.sizes
    assert [b.cost for b in plans[0].batches] == pytest.approx([b.cost for b in plans[1].batches])
    assert all(b.cost_scale == 1.5 for b in plans[0].batches) and plans[1].batches[0].cost_scale == 1
    # ... which leaves less for the last batch than the unscaled plan does.
    assert plans[0].plan.sizes[-1] < plans[2].plan.sizes[-1]
    for bad in (0, -1, "2", float("inf")):
        with pytest.raises(ConfigError, match="cost_scale"):
            QueryConfig(**common, state_dir=str(fast), cost_scale=bad)


def test_queries_ahead_on_the_cluster_shorten_the_plan_and_hold_back_the_last_batch(tmp_path):
    """``ahead``: the window is planned as if its deadline were that much sooner, and its last
    batch waits for its turn after the queries due before it."""
    end, deadline = START + 240, START + 400
    base = plan_window(cfg(tmp_path), START, end, deadline - 90, now=START)
    wp = plan_window(cfg(tmp_path, ahead=90.0), START, end, deadline, now=START)
    assert wp.plan.sizes == base.plan.sizes and len(wp.batches) > len(
        plan_window(cfg(tmp_path), START, end, deadline, now=START).batches)
    *earlier, last = wp.batches
    assert [b.latest_start_ts for b in earlier] == [b.latest_start_ts for b in base.batches[:-1]]
    assert last.turn_ts == end + 90 and last.latest_start_ts == base.batches[-1].latest_start_ts + 90
    assert all(b.turn_ts == 0.0 for b in earlier) and last.deadline_ts == deadline
    # Every unit has landed at the window's end, but the last batch's turn comes 90 s later.
    arrived = last.expected_total
    assert batch_ready(last, end + 5, arrived=arrived) is None
    assert fire_at(last) == pytest.approx(end + 90, abs=1e-6)  # its latest start is its turn, up to rounding
    assert batch_ready(last, fire_at(last), arrived=arrived) is not None
    with pytest.raises(ConfigError, match="ahead"):
        plan_window(cfg(tmp_path, ahead=160.0), START, end, deadline, now=START)
    with pytest.raises(ConfigError, match="ahead"):
        cfg(tmp_path, ahead=-1.0)


def test_queries_sharing_a_cluster_are_planned_jointly_earliest_deadline_first(tmp_path):
    """``shares``: the query due first plans as if alone; one due later plans in the executor
    time the first leaves (its batches and merge), and says so."""
    from airflow_iqp.planning.models import Busy
    from airflow_iqp.planning.planner import executed

    end = START + 240
    offsets = {"cq1": 35.0, "cq2": 45.0}  # alone, each fits one batch after the end (31.5 s)
    hint = {"cost_hint": {"kind": "linear", "per_unit": 0.1, "per_batch": 5}, "margin": 0.0,
            "final_agg_hint": {"kind": "linear", "base": 2, "per_batch": 0.5}}
    alone = {q: plan_window(cfg(tmp_path, query=q, **hint), START, end, end + offsets[q], now=START) for q in offsets}
    joint = {q: plan_window(cfg(tmp_path, query=q, shares=offsets, **hint), START, end, end + offsets[q], now=START)
             for q in offsets}
    assert joint["cq1"].plan.to_dict() == alone["cq1"].plan.to_dict() and "planned after" not in joint["cq1"].models
    # Whole batches (the gate runs one at a time): each of cq2's batches in one gap of cq1's.
    first = Busy(whole=True).plus(executed(joint["cq1"].plan))
    second = executed(joint["cq2"].plan, first)
    assert len(second) == len(joint["cq2"].plan.batches) + 1
    assert sum(max(0.0, min(e, be) - max(s, bs)) for s, e in second for bs, be in first.intervals) < 1e-7
    assert joint["cq2"].plan.feasible and second[-1][1] <= 240 + 45 + 1e-7
    assert joint["cq2"].plan.sizes != alone["cq2"].plan.sizes and "planned after cq1" in joint["cq2"].models
    # Alone, cq2's last batch and merge would run while cq1's do.
    alone2 = executed(alone["cq2"].plan)
    assert sum(max(0.0, min(e, be) - max(s, bs)) for s, e in alone2 for bs, be in first.intervals) > 1
    with pytest.raises(ConfigError, match="not both"):
        cfg(tmp_path, shares=offsets, ahead=5.0)
    with pytest.raises(ConfigError, match="shares"):
        cfg(tmp_path, shares={"cq1": "soon"})


def test_minbatches_are_sized_on_the_cluster_s_work_not_on_airflow_s_dispatch(tmp_path):
    """δRSF bounds the work that batching adds on the cluster: Airflow's dispatch, given or
    the backend's default before history, changes each batch's planned cost, not the sizes."""
    hints = dict(mode="dynamic", rsf=0.5, max_batches=40, cost_hint={"kind": "linear", "per_unit": 0.01,
                                                                      "per_batch": 0.3},
                 final_agg_hint={"kind": "linear", "base": 0.3, "per_batch": 0.05})
    plans = {d: plan_window(cfg(tmp_path / str(d), dispatch=d, **hints), START, START + 240, START + 300, now=START)
             for d in (0.0, 3.0, None)}
    sizes = {d: wp.plan.extra["min_batch"]["size"] for d, wp in plans.items()}
    assert sizes[0.0] < 120 and sizes[0.0] == sizes[3.0] == sizes[None], sizes
    assert plans[3.0].batches[0].cost == pytest.approx(plans[0.0].batches[0].cost + 3.0)


def test_dynamic_mode_s_last_minbatch_fits_what_the_queries_due_earlier_leave_of_the_deadline(tmp_path):
    """Each query's last MinBatch and merge run after the window's end, after those of the
    queries due earlier on the cluster (earliest deadline first): its MinBatches are sized
    to fit what they leave of its deadline, and the plan says so."""
    from airflow_iqp.planning.minbatch import after_end_cost, min_batch_size
    from airflow_iqp.planning.models import cost_model_from_dict, final_agg_from_dict

    hints = dict(mode="dynamic", rsf=0.5, units=100, margin=0.0,
                 cost_hint={"kind": "linear", "per_unit": 0.1, "per_batch": 1.0},
                 final_agg_hint={"kind": "linear", "base": 0.5, "per_batch": 0.1})
    end = START + 100
    offsets = {"cq1": 4.0, "cq2": 7.5}
    plans = {q: plan_window(cfg(tmp_path, query=q, shares=offsets, **hints), START, end, end + offsets[q], now=START)
             for q in offsets}
    alone = plan_window(cfg(tmp_path, query="cq2", **hints), START, end, end + offsets["cq2"], now=START)
    models = (cost_model_from_dict(alone.cost_model, "c"), final_agg_from_dict(alone.final_agg_model, "a"))
    free = min_batch_size(*models, 100, 0.5, max_batches=16)
    # cq1, due first, has its deadline's 4 s, which its smallest MinBatch within rsf fits.
    first = plans["cq1"].plan.extra
    assert first["min_batch"]["size"] == free.size and first["min_batch"]["bound_kept"]
    assert first["after_end"] == pytest.approx(after_end_cost(*models, 100, free.size)) and first["after_end"] <= 4.0
    # cq2 (alone, as cq1) has what cq1 leaves of its 7.5 s, which batches of that size no
    # longer fit: of those that do, the one that leaves the most of its deadline.
    left = 7.5 - first["after_end"]
    assert after_end_cost(*models, 100, free.size) > left and alone.plan.extra["min_batch"]["size"] == free.size
    second = plans["cq2"]
    assert second.planned_after == ["cq1"] and f"{left:.1f} s after the window's end" in second.models
    mb = second.plan.extra["min_batch"]
    assert mb == min_batch_size(*models, 100, 0.5, after_end=left, max_batches=16).to_dict()
    assert not mb["bound_kept"] and mb["size"] < free.size and second.plan.extra["after_end"] <= left
    assert "the deadline leaves" in second.models


def test_dynamic_mode_plans_with_the_default_hints(tmp_path):
    """MinBatches with the hints a DAG gets by default: the merge a single batch pays too
    (20.5 s) exceeds rsf x that batch's cost, and the plan still sizes its MinBatches."""
    d = QueryConfig(query="cq2", landing=str(tmp_path / "landing"), state_dir=str(tmp_path / "state"), units=120,
                    streams=TPCH_STREAMS,
                    rate=1.0, mode="dynamic")
    wp = plan_window(d, START, START + 120, START + 300, now=START)
    mb = wp.plan.extra["min_batch"]
    assert mb["bound_kept"] and 1 <= mb["size"] <= 120
    assert sum(e.units for e in wp.batches if not e.spare) == 120


def test_queries_naming_a_cluster_are_planned_jointly_from_its_registry(tmp_path):
    """``cluster=``: each plan reads the other queries registered on the cluster, with their
    own settings, and plans after those due earlier, as ``shares`` does with this one's."""
    from airflow_iqp.backends import SparkConnect, SparkSubmit
    from airflow_iqp.window.plan import register_on_cluster

    end = START + 240
    offsets = {"cq1": 35.0, "cq2": 45.0}
    hint = {"cost_hint": {"kind": "linear", "per_unit": 0.1, "per_batch": 5}, "margin": 0.0,
            "final_agg_hint": {"kind": "linear", "base": 2, "per_batch": 0.5}}
    shared = {q: plan_window(cfg(tmp_path, query=q, shares=offsets, **hint), START, end, end + offsets[q], now=START)
              for q in offsets}
    # Nothing registered yet: cq2 plans as if alone.
    alone = plan_window(cfg(tmp_path, query="cq2", cluster="c1", **hint), START, end, end + 45, now=START)
    assert alone.planned_after == [] and "planned after" not in alone.models
    for q in offsets:
        register_on_cluster(cfg(tmp_path, query=q, cluster="c1", **hint), START, end, end + offsets[q])
    joint = {q: plan_window(cfg(tmp_path, query=q, cluster="c1", **hint), START, end, end + offsets[q], now=START)
             for q in offsets}
    assert joint["cq1"].planned_after == [] and joint["cq1"].plan.to_dict() == shared["cq1"].plan.to_dict()
    assert joint["cq2"].planned_after == ["cq1"] and "from cluster c1's registry" in joint["cq2"].models
    assert joint["cq2"].plan.to_dict() == shared["cq2"].plan.to_dict()
    assert open_store(tmp_path / "state").window("cq2", window_id(START)).doc("plan") is None  # planning stores nothing

    # Each member is planned with its own settings: a slower cq1 leaves cq2 less time.
    slow = {**hint, "cost_hint": {"kind": "linear", "per_unit": 0.1, "per_batch": 9}}
    register_on_cluster(cfg(tmp_path, query="cq1", cluster="c1", **slow), START, end, end + 35)
    slower = plan_window(cfg(tmp_path, query="cq2", cluster="c1", **hint), START, end, end + 45, now=START)
    assert slower.plan.to_dict() != joint["cq2"].plan.to_dict()

    # Not planned with: another backend, another window length, a registration two windows old.
    for other in (dict(backend="spark-connect"), dict(length=120.0), dict(start=START - 3 * 240)):
        store = tmp_path / f"state-{len(other)}-{sorted(other)[0]}"
        c1 = cfg(tmp_path, query="cq1", cluster="c1", state_dir=str(store), backend=other.get("backend", "spark-submit"),
                 **hint)
        start = other.get("start", START)
        register_on_cluster(c1, start, start + other.get("length", 240.0), start + other.get("length", 240.0) + 35)
        wp = plan_window(cfg(tmp_path, query="cq2", cluster="c1", state_dir=str(store), **hint), START, end, end + 45,
                         now=START)
        assert wp.planned_after == [], other
    # The cluster names a directory of the store: a bad name is refused where it is given.
    with pytest.raises(ConfigError, match="cluster"):
        cfg(tmp_path, cluster="../c1")
    with pytest.raises(ConfigError, match="backend.cluster"):
        SparkSubmit(cluster="a/b")
    assert SparkConnect(cluster="c1").query_config()["cluster"] == "c1"


def test_a_plan_on_a_cluster_waits_for_the_queries_registering_its_window(tmp_path):
    """The plan tasks of a cluster's queries start together: a plan waits for the queries
    registered for the window before (a warm registry), or, on a first window, until no
    query has registered for ``settle`` seconds; never past ``most``, never for a window
    that has ended."""
    from airflow_iqp.window.plan import register_on_cluster, wait_for_cluster

    t = [START + 1.0]
    clock = lambda: t[0]  # noqa: E731
    mine = cfg(tmp_path, query="cq1", cluster="c1")
    # When the others register (their plan tasks starting): time -> (query, its window's start).
    arrivals = {START + 1.5: ("cq2", START), START + 2.5: ("q6", START)}

    def sleep(s):
        for at, (q, ws) in list(arrivals.items()):
            if t[0] < at <= t[0] + s:
                register_on_cluster(cfg(tmp_path, query=q, cluster="c1"), ws, ws + 60, ws + 70, now=at)
                del arrivals[at]
        t[0] += s

    register_on_cluster(mine, START, START + 60, START + 70, now=t[0])
    # A first window: 2 s with no new registration after q6's, at START + 2.5.
    assert wait_for_cluster(mine, START, 60.0, settle=2.0, clock=clock, sleep=sleep) == ["cq1", "cq2", "q6"]
    assert START + 4.5 <= t[0] < START + 4.8
    # The next window: it waits for the two registered for the one before, not for a quiet spell.
    nxt = START + 60
    t[0] = nxt + 1.0
    arrivals.update({nxt + 1.3: ("cq2", nxt), nxt + 3.0: ("q6", nxt)})
    register_on_cluster(mine, nxt, nxt + 60, nxt + 70, now=t[0])
    assert wait_for_cluster(mine, nxt, 60.0, settle=2.0, clock=clock, sleep=sleep) == ["cq1", "cq2", "q6"]
    assert nxt + 3.0 <= t[0] < nxt + 3.3
    # One that does not come back is waited for up to `most` seconds, once.
    later = nxt + 60
    t[0] = later + 1.0
    arrivals.update({later + 1.2: ("cq2", later)})
    register_on_cluster(mine, later, later + 60, later + 70, now=t[0])
    assert wait_for_cluster(mine, later, 60.0, most=5.0, clock=clock, sleep=sleep) == ["cq1", "cq2"]
    assert later + 6.0 <= t[0] < later + 6.3
    # A window that has ended (a backfill) and a query on no cluster do not wait.
    t[0] = later + 100
    assert wait_for_cluster(mine, later, 60.0, clock=clock, sleep=sleep) == ["cq1", "cq2"] and t[0] == later + 100
    assert wait_for_cluster(cfg(tmp_path, query="q9"), later, 60.0, clock=clock, sleep=sleep) == []
