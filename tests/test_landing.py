"""Where files land and which window each belongs to: a directory per window, a flat
directory, Hive-style partitions of the writer's clock (no Spark, no Airflow)."""

from __future__ import annotations

import datetime as dt
import os
import random
from pathlib import Path

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.landing import PARTITION_SEP, list_units, partitions_between
from airflow_iqp.store import open_store
from airflow_iqp.streams import Stream
from airflow_iqp.window.accounting import late_units
from airflow_iqp.window.config import QueryConfig
from airflow_iqp.window.plan import plan_window, store_plan
from airflow_iqp.window.readiness import batch_ready, claim_batch, count_wait_until, leave_to_tail, may_compute_ahead

T0 = dt.datetime(2027, 3, 1, 9, 58, tzinfo=dt.timezone.utc).timestamp()  # windows of 2 minutes from here
W = 120.0


def drop(directory: Path, name: str, at: float) -> Path:
    """A file as a writer leaves it: written, then its last-modified time is when it arrived."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("user,page\n1,a\n")
    os.utime(path, (at, at))
    return path


def names(units) -> list[str]:
    return [u.name for u in units]


def test_a_flat_directory_gives_each_file_to_the_window_it_arrived_in(tmp_path):
    rng = random.Random(7)
    arrivals = {f"click-{i:03d}.csv": T0 + rng.uniform(0, 3 * W) for i in range(60)}
    arrivals["edge.csv"] = T0 + W            # on the boundary: the later window's
    for name, at in arrivals.items():
        drop(tmp_path, name, at)
    drop(tmp_path, ".inflight.csv", T0 + 10)  # still being written
    stream = Stream("clicks", path=str(tmp_path), format="csv")
    seen: list[str] = []
    for k in range(3):
        start, end = T0 + k * W, T0 + (k + 1) * W
        units = list_units(tmp_path, (stream.for_window(start, end),))
        assert all(start <= u.mtime < end for u in units)
        assert [u.mtime for u in units] == sorted(u.mtime for u in units)  # arrival order
        seen += names(units)
    assert sorted(seen) == sorted(arrivals)            # every file in exactly one window
    assert "edge.csv" in names(list_units(tmp_path, (stream.for_window(T0 + W, T0 + 2 * W),)))
    assert len(list_units(tmp_path, (stream,))) == len(arrivals)  # no window bound: everything


def test_a_templated_path_is_a_directory_per_window_whatever_the_files_times(tmp_path):
    stream = Stream("clicks", path=str(tmp_path) + "/{{ data_interval_start | ts_nodash }}", format="csv")
    assert stream.templated and stream.for_window(T0, T0 + W) is stream
    drop(tmp_path / "w1", "old.csv", T0 - 10 * W)
    assert names(list_units(tmp_path / "w1", (stream.for_window(T0, T0 + W),))) == ["old.csv"]
    # A plain path listed for a window of a templated landing stays unbound too.
    plain = Stream("clicks", path=str(tmp_path / "w1"), format="csv")
    assert plain.for_window(T0, T0 + W, templated=True).window is None


def test_hive_partitions_of_the_writers_clock_map_to_windows_that_span_them(tmp_path):
    template = "dt=%Y-%m-%d/hour=%H"
    stream = Stream("clicks", path=str(tmp_path), format="csv", partitions=template)
    # The writer names a partition by its own clock: a file written just before 10:00 lands
    # in hour=09, one just after in hour=10; one window spans both.
    arrivals = {"a.csv": T0 + 30, "b.csv": T0 + 115, "c.csv": T0 + 125, "d.csv": T0 + 200, "e.csv": T0 + 400}
    for name, at in arrivals.items():
        part = dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime(template)
        drop(tmp_path / part, name, at)
    # The same file name in two partitions is two units.
    drop(tmp_path / "dt=2027-03-01" / "hour=10", "a.csv", T0 + 150)
    w1 = list_units(tmp_path, (stream.for_window(T0, T0 + W),))
    w2 = list_units(tmp_path, (stream.for_window(T0 + W, T0 + 2 * W),))
    assert names(w1) == [f"dt=2027-03-01{PARTITION_SEP}hour=09{PARTITION_SEP}a.csv",
                         f"dt=2027-03-01{PARTITION_SEP}hour=09{PARTITION_SEP}b.csv"]
    assert names(w2) == [f"dt=2027-03-01{PARTITION_SEP}hour=10{PARTITION_SEP}{n}" for n in ("c.csv", "a.csv", "d.csv")]
    assert w2[0].files == {"clicks": (str(tmp_path / "dt=2027-03-01" / "hour=10" / "c.csv"),)}
    # Unbound (explain, run-window): every partition there is.
    assert len(list_units(tmp_path, (stream,))) == 6
    # A writer whose clock runs behind the store's still has its files found.
    drop(tmp_path / "dt=2027-03-01" / "hour=09", "skewed.csv", T0 + W + 5)
    later = names(list_units(tmp_path, (stream.for_window(T0 + W, T0 + 2 * W),)))
    assert f"dt=2027-03-01{PARTITION_SEP}hour=09{PARTITION_SEP}skewed.csv" in later


def test_partitions_between_steps_by_the_templates_finest_field():
    assert partitions_between("dt=%Y-%m-%d/hour=%H", T0, T0 + 3 * 3600) == [
        "dt=2027-03-01/hour=09", "dt=2027-03-01/hour=10", "dt=2027-03-01/hour=11", "dt=2027-03-01/hour=12"]
    assert partitions_between("%Y%m%d", T0, T0 + 60) == ["20270301"]
    assert len(partitions_between("m=%M", T0, T0 + 600)) == 11


@pytest.mark.parametrize("kwargs, field", [
    ({"partitions": "daily"}, "streams.clicks.partitions"),
    ({"partitions": "/dt=%Y"}, "streams.clicks.partitions"),
    ({"partitions": "dt=%Y", "path": "/x/{{ ds }}"}, "streams.clicks.partitions"),
])
def test_a_bad_partition_template_names_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        Stream(**{"name": "clicks", "path": "/x", **kwargs})
    assert info.value.field == field


# --------------------------------------------------------------------- claims across windows


def flat_cfg(tmp_path, **over) -> QueryConfig:
    stream = Stream("clicks", path=str(tmp_path / "landing"), format="csv")
    base = dict(query="clicks", landing=str(tmp_path / "landing"), state_dir=str(tmp_path / "state"),
                streams=(stream.to_dict(),), units=None, rate=0.1,
                cost_hint={"kind": "linear", "per_unit": 0.1, "per_batch": 5.0},
                final_agg_hint={"kind": "linear", "base": 5.0, "per_batch": 0.5})
    return QueryConfig(**{**base, **over})


def bound(cfg: QueryConfig, start: float, end: float) -> QueryConfig:
    """What the plan task does for a plain landing path: the window's span bound to its streams."""
    from dataclasses import replace

    return replace(cfg, streams=tuple(s.for_window(start, end) for s in cfg.streams))


def test_each_file_of_a_flat_directory_is_claimed_once_across_consecutive_windows(tmp_path):
    landing = tmp_path / "landing"
    rng = random.Random(3)
    arrivals = sorted(T0 + rng.uniform(0, 3 * W) for _ in range(30))
    for i, at in enumerate(arrivals):
        drop(landing, f"c-{i:02d}.csv", at)
    claimed: list[str] = []
    for k in range(3):
        start, end = T0 + k * W, T0 + (k + 1) * W
        wp = plan_window(bound(flat_cfg(tmp_path), start, end), start, end, end + 60, now=start)
        store_plan(wp)
        last = wp.batches[-1]
        assert batch_ready(last, end + last.grace) == "time"
        for b in wp.batches:  # every batch fires by the window's end; the last claims the rest
            claim_batch(b, now=end)
        claims = open_store(tmp_path / "state").window("clicks", wp.window_id).claims()
        window_units = [u for m in claims.values() for u in m["units"]]
        assert window_units == [f"c-{i:02d}.csv" for i, at in enumerate(arrivals) if start <= at < end]
        claimed += window_units
    assert sorted(claimed) == [f"c-{i:02d}.csv" for i in range(30)]


def test_a_file_that_arrived_in_a_window_but_shows_up_after_its_last_claim_is_that_windows_late_data(tmp_path):
    landing = tmp_path / "landing"
    drop(landing, "early.csv", T0 + 10)
    cfg1 = bound(flat_cfg(tmp_path, units=1), T0, T0 + W)
    wp1 = plan_window(cfg1, T0, T0 + W, T0 + W + 60, now=T0)
    for b in wp1.batches:
        claim_batch(b, now=T0 + W)
    # Renamed into place after the claim, with the time it was written (inside window 1).
    drop(landing, "slow-writer.csv", T0 + W - 1)
    assert late_units(wp1.batches[-1], T0)["units"] == ["slow-writer.csv"]
    # The next window never takes it.
    cfg2 = bound(flat_cfg(tmp_path, units=1), T0 + W, T0 + 2 * W)
    wp2 = plan_window(cfg2, T0 + W, T0 + 2 * W, T0 + 2 * W + 60, now=T0 + W)
    for b in wp2.batches:
        claim_batch(b, now=T0 + 2 * W)
    claims2 = open_store(tmp_path / "state").window("clicks", wp2.window_id).claims()
    assert [u for m in claims2.values() for u in m["units"]] == []


def test_units_is_a_hint_the_last_batch_claims_every_file_that_arrived_past_the_count(tmp_path):
    landing = tmp_path / "landing"
    cfg = bound(flat_cfg(tmp_path, units=4, rate=4 / W), T0, T0 + W)
    wp = plan_window(cfg, T0, T0 + W, T0 + W + 60, now=T0)
    last = wp.batches[-1]
    for i in range(4):  # the count is reached early ...
        drop(landing, f"c-{i}.csv", T0 + 5 + i)
    for b in wp.batches[:-1]:
        claim_batch(b, now=T0 + 10)
    assert batch_ready(last, T0 + 20) is None and batch_ready(last, T0 + W - 1) is None
    for i in range(4, 7):  # ... and more files land before the window's end
        drop(landing, f"c-{i}.csv", T0 + 60 + i)
    assert batch_ready(last, T0 + W + cfg.grace) == "units"  # the count is there, and the window's end
    claim_batch(last, now=T0 + W)
    claims = open_store(tmp_path / "state").window("clicks", wp.window_id).claims()
    every = sorted(u for m in claims.values() for u in m["units"])
    assert every == [f"c-{i}.csv" for i in range(7)]
    assert {"c-4.csv", "c-5.csv", "c-6.csv"} <= set(claims[last.index]["units"])


def test_a_last_batch_may_be_computed_ahead_only_between_its_count_landing_and_its_claim(tmp_path):
    landing = tmp_path / "landing"
    cfg = bound(flat_cfg(tmp_path, units=8, rate=8 / W), T0, T0 + W)
    wp = plan_window(cfg, T0, T0 + W, T0 + W + 9, now=T0)  # too tight for one batch
    last = wp.batches[-1]
    assert len(wp.batches) > 1
    for i in range(7):
        drop(landing, f"c-{i}.csv", T0 + 5 + i)
    for b in wp.batches[:-1]:
        claim_batch(b, now=T0 + 20)
    assert not may_compute_ahead(last, T0 + 20)  # one unit of the count is missing
    drop(landing, "c-7.csv", T0 + 30)
    assert may_compute_ahead(last, T0 + 40)
    assert not may_compute_ahead(last, last.ready_ts)  # from its ready time on, the claim decides
    claim_batch(last, now=last.ready_ts)
    assert not may_compute_ahead(last, T0 + 40)  # claimed: a retry runs from its claim


def test_a_last_batch_is_not_computed_ahead_before_the_batch_before_it_has_claimed(tmp_path):
    landing = tmp_path / "landing"
    cfg = bound(flat_cfg(tmp_path, units=8, rate=8 / W), T0, T0 + W)
    wp = plan_window(cfg, T0, T0 + W, T0 + W + 9, now=T0)
    for i in range(8):
        drop(landing, f"c-{i}.csv", T0 + 5 + i)
    assert len(wp.batches) > 1 and not may_compute_ahead(wp.batches[-1], T0 + 20)
    for b in wp.batches[:-1]:
        claim_batch(b, now=T0 + 20)
    assert may_compute_ahead(wp.batches[-1], T0 + 20)


def test_a_batch_before_the_last_may_leave_its_units_to_the_result_ahead_once_the_count_has_landed(tmp_path):
    """``folding``: the batch before the last has not claimed, and the result computed ahead
    would take its units; that needs the window's count landed, and ends once it has claimed."""
    landing = tmp_path / "landing"
    cfg = bound(flat_cfg(tmp_path, units=8, rate=8 / W), T0, T0 + W)
    wp = plan_window(cfg, T0, T0 + W, T0 + W + 9, now=T0)
    entry, last = wp.batches
    for i in range(7):
        drop(landing, f"c-{i}.csv", T0 + 5 + i)
    assert not may_compute_ahead(last, T0 + 20, folding=entry)  # one unit of the count is missing
    drop(landing, "c-7.csv", T0 + 30)
    assert may_compute_ahead(last, T0 + 40, folding=entry)
    assert not may_compute_ahead(last, T0 + 40)  # without folding, the batch before it has not claimed
    assert not may_compute_ahead(last, last.ready_ts, folding=entry)  # from its ready time on, the claim decides
    leave_to_tail(entry)
    assert entry.window_state().claim_of(entry.index)["units"] == []
    assert not may_compute_ahead(last, T0 + 40, folding=entry)  # it has claimed (nothing): no longer to fold
    assert may_compute_ahead(last, T0 + 40)
    assert leave_to_tail(entry) is None  # claimed once


def test_a_batch_before_the_last_waits_for_the_count_only_where_folding_pays(tmp_path):
    """A batch whose time came before its planned units landed waits for the window's count
    while one batch over the rest and the merge would still finish by the plan's finish of
    running it and the last batch, never past the last batch's ready time. Once its planned
    units have landed, the rest of the count is due at the last batch's ready time: it waits
    only when it starts so late (the batch before it ran long) that the result computed from
    then finishes first."""
    from dataclasses import replace

    from airflow_iqp.window.replan import models_in_effect

    landing = tmp_path / "landing"
    cfg = bound(flat_cfg(tmp_path, units=8, rate=8 / W, cost_hint={"kind": "linear", "per_unit": 2.0,
                                                                      "per_batch": 1.0}), T0, T0 + W)
    wp = plan_window(cfg, T0, T0 + W, T0 + W + 9, now=T0)
    store_plan(wp)
    first, entry, last = wp.batches
    for i in range(first.cumulative):
        drop(landing, f"c-{i}.csv", T0 + 1 + i)
    claim_batch(first, now=first.ready_ts)
    for i in range(first.cumulative, entry.cumulative - 1):  # one of its planned units is late
        drop(landing, f"c-{i}.csv", T0 + 40 + i)
    now = entry.latest_start_ts
    until = count_wait_until(entry, last, now)
    cost, agg = models_in_effect(entry.window_state())
    rest = entry.expected_total - first.cumulative
    run = max(now + entry.cost, last.ready_ts) + last.remaining_cost
    assert now < until < last.ready_ts
    assert until + cost.cost(rest) + agg.cost(2) == pytest.approx(run)  # folding then finishes as running it would
    assert count_wait_until(entry, last, last.ready_ts - 0.1) == last.ready_ts  # never past the last batch's ready time
    assert run > entry.deadline_ts  # no plan meets this deadline at these costs
    drop(landing, f"c-{entry.cumulative - 1}.csv", T0 + 50)
    assert count_wait_until(entry, last, now) == now  # its units are in: the count is due when planned

    # Started late with its units in: from when running it and the last batch finishes later
    # than one batch over the rest started at the last batch's ready time, it waits until then.
    at_once = cost.cost(rest) + agg.cost(2)
    turn = last.ready_ts + at_once - entry.remaining_cost
    assert now < turn < last.ready_ts
    assert count_wait_until(entry, last, turn + 0.01) == last.ready_ts
    assert count_wait_until(entry, last, turn - 0.01) == turn - 0.01

    # The same window due later: the plan meets its deadline, and is not put at risk for the count.
    loose = plan_window(replace(cfg, state_dir=str(tmp_path / "loose")), T0, T0 + W, T0 + W + 25, now=T0)
    store_plan(loose)
    *_, entry, last = loose.batches
    os.remove(landing / f"c-{entry.cumulative - 1}.csv")
    now = entry.latest_start_ts
    assert max(now + entry.cost, last.ready_ts) + last.remaining_cost <= entry.deadline_ts
    assert count_wait_until(entry, last, now) == now


def test_a_wait_for_the_count_ends_when_the_batchs_late_planned_unit_lands(tmp_path):
    """A batch whose last planned unit is a moment late at its fire time starts waiting for
    the window's count, and stops as that unit lands: the rest of the count is then due when
    planned, too late for the result computed at once to finish first. It then runs as planned
    (nothing computed ahead, nothing claimed for it yet)."""
    import threading
    import time

    from airflow_iqp.spark.ahead import compute_ahead_instead

    landing = tmp_path / "landing"
    hint = {"kind": "linear", "per_unit": 2.0, "per_batch": 1.0}
    cfg = flat_cfg(tmp_path, units=8, rate=8 / W, cost_hint=hint)
    entry_at = plan_window(bound(cfg, T0, T0 + W), T0, T0 + W, T0 + W + 9, now=T0).batches[1].latest_start_ts - T0
    start = time.time() - entry_at - 0.05  # the window whose second batch's time has just come
    wp = plan_window(bound(cfg, start, start + W), start, start + W, start + W + 9, now=start)
    store_plan(wp)
    first, entry, last = wp.batches
    for i in range(entry.cumulative - 1):
        drop(landing, f"c-{i}.csv", start + 1 + i)
    claim_batch(first, now=first.ready_ts)
    now = time.time()
    until = count_wait_until(entry, last, now)
    assert until - now > 5  # the wait it starts, were the unit not to come
    lands = threading.Timer(0.3, lambda: drop(landing, f"c-{entry.cumulative - 1}.csv", time.time()))
    lands.start()
    computed: list = []
    try:
        assert compute_ahead_instead(None, entry.window_state(), entry, last, 0, None, computed) is False
    finally:
        lands.cancel()
    assert time.time() < until
    assert computed == [] and not entry.window_state().has_claim(entry.index)


def test_a_batch_started_late_waits_for_the_count_and_at_the_windows_end_leaves_its_units_to_the_last(tmp_path):
    """A batch whose planned units are in but whose time came so late that one batch over the
    rest, started at the window's end, is planned to finish first waits for the count; the
    count not landing, it claims nothing at the window's end and its units go to the last batch."""
    import time

    from airflow_iqp.spark.ahead import compute_ahead_instead

    landing = tmp_path / "landing"
    cfg = flat_cfg(tmp_path, units=8, rate=8 / W, cost_hint={"kind": "linear", "per_unit": 2.0, "per_batch": 1.0})
    end_at = plan_window(bound(cfg, T0, T0 + W), T0, T0 + W, T0 + W + 9, now=T0).batches[-1].ready_ts - T0
    start = time.time() - end_at + 0.8  # the last batch is ready 0.8 s from now
    wp = plan_window(bound(cfg, start, start + W), start, start + W, start + W + 9, now=start)
    store_plan(wp)
    first, entry, last = wp.batches
    for i in range(entry.cumulative):
        drop(landing, f"c-{i}.csv", start + 1 + i)
    claim_batch(first, now=first.ready_ts)
    assert count_wait_until(entry, last, time.time()) == last.ready_ts
    computed: list = []
    assert compute_ahead_instead(None, entry.window_state(), entry, last, 0, None, computed) is True
    assert time.time() >= last.ready_ts
    assert entry.window_state().claim_of(entry.index)["units"] == [] and computed == []


def test_a_result_is_computed_ahead_only_once_every_claimed_batch_has_its_partial(tmp_path):
    """The batch before the last has claimed but its job runs still: computing the result
    ahead is "not yet", to be tried again, not given up (None) as when it cannot apply."""
    from airflow_iqp.spark.ahead import NOT_YET, compute_ahead

    landing = tmp_path / "landing"
    cfg = bound(flat_cfg(tmp_path, units=8, rate=8 / W), T0, T0 + W)
    wp = plan_window(cfg, T0, T0 + W, T0 + W + 9, now=T0)
    for i in range(8):
        drop(landing, f"c-{i}.csv", T0 + 5 + i)
    for b in wp.batches[:-1]:
        claim_batch(b, now=T0 + 20)
    last = wp.batches[-1]
    assert compute_ahead(None, last.window_state(), last, 0, None) == NOT_YET  # no Spark reached
