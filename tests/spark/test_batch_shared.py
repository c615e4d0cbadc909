"""A group's shared batches on Spark: one read of each batch's units writes a partial per
query into that query's window, and each query's own merge equals DuckDB over the window,
on a retried batch too (airflow_iqp.spark.batch.execute_shared_batch)."""

from __future__ import annotations

import re

import pytest

from tests.spark.test_steps_sql_property import duckdb_text
from tests.support.events import EVENT_COLUMNS, STATIC, duckdb_events
from tests.support.reference import assert_same_rows, read_parquet_dir

from airflow_iqp.errors import DataError
from airflow_iqp.landing import list_units
from airflow_iqp.query import decompose
from airflow_iqp.query.store import Saved, save_query
from airflow_iqp.spark.batch import batch_work, execute_batch
from airflow_iqp.spark.merge import execute_final
from airflow_iqp.store import open_store
from airflow_iqp.streams import Stream, files_of

pytestmark = pytest.mark.spark

SQL = {"revenue": "SELECT country, sum(amount) AS revenue, count(*) AS n FROM events GROUP BY country",
       "buyers": "SELECT country, count(DISTINCT user_id) AS buyers FROM events GROUP BY country",
       "by_category": "SELECT c.cat_name, avg(e.qty) AS q FROM events e JOIN categories c ON e.cat_id = c.cat_id "
                      "GROUP BY c.cat_name"}
WINDOW = "20260101T000000"


def assert_tpch_result(ws, q: str, units, tpch_dir) -> None:
    """Query ``q``'s result in ``ws`` equals DuckDB's over ``units``, and is not empty."""
    from airflow_iqp.query.catalogue import get_query
    from tests.support.reference import duckdb_reference

    cols, ref = duckdb_reference(q, units, tpch_dir / "static")
    got = read_parquet_dir(ws.result_uri)
    assert list(got.column_names) == cols and len(ref) > 0
    assert_same_rows([tuple(r.values()) for r in got.to_pylist()], ref, get_query(q).ordered, q)


def assert_started_one_at_a_time(out: dict, members: tuple[str, ...]) -> None:
    """A group tail's members started in the order given, earliest deadline first, one at a
    time (``TAIL_LANES``): each after the one before it had written its result."""
    from airflow_iqp.spark.group_tail import TAIL_LANES

    assert TAIL_LANES == 1
    started = [out["started"][q] for q in members]
    assert started == sorted(started)
    for before, q in zip(members, members[1:]):
        assert out["started"][q] >= out["members"][before]["written_at"], (q, before, started)


def test_each_query_of_a_group_gets_its_own_partials_and_result_from_one_read(spark, events_dir, tmp_path):
    store = open_store(tmp_path / "state")
    streams = (Stream("events", path=str(events_dir / "events")),)
    static = {t: str(events_dir / f"{t}.parquet") for t in STATIC}
    for q, sql in SQL.items():
        query = decompose(sql, id=q, streams=["events"], static=list(STATIC), schemas={"events": EVENT_COLUMNS, **STATIC})
        save_query(store, Saved(query, streams, static))
    units = list_units(events_dir / "events", streams)
    group = store.window("shop", WINDOW)
    for b, chunk in ((1, units[:2]), (2, units[2:5]), (3, units[5:])):
        group.claim(b, [u.name for u in chunk], files_of(chunk, streams))
    members = tuple(SQL)
    # Before its shared batch ran, a member's merge finds the batch's claim without a partial.
    first = execute_batch(spark, batch_work(group, 1, members=members), backend="spark-submit")
    assert first["members"] == list(members) and first["units"] == 2
    with pytest.raises(DataError, match="no partial"):
        store.window("revenue", WINDOW).adopt_claim(2, group.claim_of(2))
        execute_final(spark, store.window("revenue", WINDOW), backend="spark-submit")
    for b in (2, 3, 2):  # batch 2 twice: a retry replaces its partials, and counts nothing twice
        execute_batch(spark, batch_work(group, b, members=members), backend="spark-submit")
    for q, sql in SQL.items():
        ws = store.window(q, WINDOW)
        assert ws.claims() == group.claims()  # the group's claims, taken as the query's own
        assert sorted(ws.written_partials()) == [1, 2, 3]
        assert ws.metrics(2)["group"] == "shop" and ws.metrics(2)["units"] == 3
        manifest = execute_final(spark, ws, backend="spark-submit")
        assert sorted(manifest["units"]) == sorted(u.name for u in units)
        cols, ref = duckdb_events(duckdb_text(sql), events_dir)
        got = read_parquet_dir(ws.result_uri)
        assert list(got.column_names) == cols
        assert_same_rows([tuple(r.values()) for r in got.to_pylist()], ref, False, q)
    # The group's window holds the batches' metrics, and the group's history their cost.
    assert group.metrics(3)["members"] == list(members)
    recorded = store.cost_history("shop", "batch")
    assert len(recorded) == 4 and {r["units"] for r in recorded} == {1, 2, 3}


def test_members_reading_different_streams_of_a_unit_each_see_their_own(spark, tpch_dir, units, tmp_path):
    """TPC-H units hold orders and lineitem: a group of a query over orders only (CQ1), one
    over lineitem only (Q6) and one joining both (Q4) reads each unit's files once, and each
    result equals DuckDB's over the same units."""
    from airflow_iqp.inputs.tpch import streams_at
    from airflow_iqp.query.catalogue import get_query

    store = open_store(tmp_path / "state")
    streams = streams_at(tpch_dir / "units")
    members = ("cq1", "q6", "q4")
    for q in members:
        save_query(store, Saved(get_query(q), streams, str(tpch_dir / "static")))
    group = store.window("tpch_group", WINDOW)
    for b, chunk in ((1, units[:4]), (2, units[4:])):
        group.claim(b, [u.name for u in chunk], files_of(chunk, streams))
        execute_batch(spark, batch_work(group, b, members=members), backend="spark-submit")
    for q in members:
        ws = store.window(q, WINDOW)
        execute_final(spark, ws, backend="spark-submit")
        assert_tpch_result(ws, q, units, tpch_dir)


def test_a_group_s_fused_tail_runs_the_last_shared_batch_and_every_member_s_merge_in_one_job(
        spark, tpch_dir, units, tmp_path, capsys):
    """``run_tail`` with a group's entry: batch 2, ready after the tail started, runs as a
    shared batch; each member's part is rehearsed while there is time; the last
    batch is claimed once by the group when the window's last units land, read once, and
    merged into each member's result, earliest deadline first; no member's partial of it
    is written. A retry writes the same results from the same claims, a member past its
    deadline after those still in time."""
    import shutil
    import time

    from airflow_iqp.inputs.tpch import streams_at
    from airflow_iqp.query.catalogue import get_query
    from airflow_iqp.spark.tail import run_tail
    from airflow_iqp.window.readiness import claim_batch, split_tail
    from tests.support.batches import make_batch
    from tests.support.landing import land_later

    landing, state = tmp_path / "landing", tmp_path / "state"
    landing.mkdir()
    store = open_store(state)
    streams = streams_at(landing)
    members = ("cq1", "q6", "q4")  # orders only, lineitem only, both
    static = str(tpch_dir / "static")
    for q in members:
        save_query(store, Saved(get_query(q), streams, static))
    now, far = time.time(), time.time() + 3600
    entries = [make_batch(query="tpch_group", window_id=WINDOW, index=i, of=3, units=n, cumulative=c,
                          expected_total=len(units), last=i == 3, ready_ts=now + r, latest_start_ts=far,
                          deadline_ts=far, landing=str(landing), state_dir=str(state), static=static,
                          streams=tuple(s.to_dict() for s in streams), members=members, label=f"batch {i}/3")
               for i, n, c, r in ((1, 2, 2, 0.0), (2, 2, 4, 1.0), (3, 2, 6, 2.0))]
    mapped, tail = split_tail(entries, lead=1.5)
    assert [b.index for b in tail.before] == [2] and tail.members == members
    for u in units[:3]:
        shutil.copytree(u, landing / u.name)
    claim_batch(mapped[0])
    group = store.window("tpch_group", WINDOW)
    execute_batch(spark, batch_work(group, 1, members=members), backend="spark-submit")

    # The last batch may claim 16 s from now: room, even on a slow machine, for batch 2, the
    # reads of the members' partials and three rehearsals, all over 0.9 s before that.
    tail = tail.with_(ready_ts=time.time() + 16.0, remaining_cost=0.3)
    lander = land_later(units[3:], landing)
    out = run_tail(spark, group, tail, backend="spark-submit")
    lander.join()
    # The members' parts were rehearsed earliest deadline first, each while there was room
    # before the last batch's input (on a slow machine the room may end before q4's), and
    # left nothing behind.
    said = re.search(r"rehearsed on 2 units: (.*)", capsys.readouterr().out)
    assert said, "no member's part was rehearsed"
    rehearsed = [part.split()[0] for part in said.group(1).split(", ")]
    assert rehearsed and rehearsed == list(members[:len(rehearsed)]), rehearsed
    assert not [p for p in state.rglob("*rehearsal*")]
    assert list(out["members"]) == list(members)
    claims = group.claims()
    assert sum(len(c["units"]) for c in claims.values()) == len(units) and set(claims) == {1, 2, 3}
    assert_started_one_at_a_time(out, members)
    for q in members:
        ws = store.window(q, WINDOW)
        assert ws.claims() == claims and ws.has_partial(2) and not ws.has_partial(3)
        assert out["members"][q]["batches"] == [1, 2, 3]
        assert sorted(out["members"][q]["units"]) == sorted(u.name for u in units)
        assert_tpch_result(ws, q, units, tpch_dir)
    # A retry: the same claims, the same results. cq1's deadline has passed by then: it
    # yields to the members still in time, and q6 runs first.
    past = tail.with_(member_deadlines=(time.time() - 1.0, far, far), member_seconds=(0.1, 0.1, 0.1))
    again = run_tail(spark, group, past, backend="spark-submit")
    assert group.claims() == claims
    for q in members:
        assert again["members"][q]["units"] == out["members"][q]["units"]
        assert again["members"][q]["revision"] == 1
    assert min(again["started"], key=again["started"].get) == "q6"
    assert all(again["started"][q] >= again["members"]["q6"]["written_at"] for q in ("cq1", "q4"))


def test_a_shared_batch_hands_the_members_due_later_over_to_the_group_s_tail(spark, tpch_dir, units, tmp_path):
    """Once the last batch may claim, a group's batch stops between members (``stop``): the
    members left get no partial of it, and the group's tail runs each one's step on that
    batch's units together with the last batch's, earliest deadline first. Every result
    covers each unit once and equals DuckDB's; the handed-over batch records no cost, and
    a retry of the tail, which reads that batch's units again, writes the same results."""
    from airflow_iqp.inputs.tpch import streams_at
    from airflow_iqp.query.catalogue import get_query
    from airflow_iqp.spark.group_tail import execute_group_tail

    store = open_store(tmp_path / "state")
    streams = streams_at(tpch_dir / "units")
    members = ("cq1", "q6", "q4")
    static = str(tpch_dir / "static")
    for q in members:
        save_query(store, Saved(get_query(q), streams, static))
    group = store.window("tpch_group", WINDOW)
    for b, chunk in ((1, units[:2]), (2, units[2:4]), (3, units[4:])):
        group.claim(b, [u.name for u in chunk], files_of(chunk, streams))
    execute_batch(spark, batch_work(group, 1, members=members), backend="spark-submit")
    asked = []

    def stop() -> bool:  # asked as each member would start: the last batch may claim once cq1 has started
        asked.append(1)
        return len(asked) > 1

    kept: dict = {}
    second = execute_batch(spark, batch_work(group, 2, members=members), backend="spark-submit", stop=stop,
                           keep=kept)
    assert second["left"] == ["q6", "q4"] and list(kept) == [2]  # its units, still cached, for the tail
    assert [store.window(q, WINDOW).has_partial(2) for q in members] == [True, False, False]
    assert [r["units"] for r in store.cost_history("tpch_group", "batch")] == [2]  # batch 1's only
    out = execute_group_tail(spark, group, 3, members, None, backend="spark-submit", before=(2,), kept=kept)
    assert_started_one_at_a_time(out, members)
    for q in members:
        ws = store.window(q, WINDOW)
        assert not ws.has_partial(3) and ws.has_partial(2) == (q == "cq1")
        assert out["members"][q]["batches"] == [1, 2, 3]
        assert sorted(out["members"][q]["units"]) == sorted(u.name for u in units)
        assert_tpch_result(ws, q, units, tpch_dir)
    again = execute_group_tail(spark, group, 3, members, None, backend="spark-submit", before=(2,))
    for q in members:
        assert again["members"][q]["units"] == out["members"][q]["units"] and again["members"][q]["revision"] == 1


def _group_tail_of_two(spark, store, landing, tpch_dir, units, members, count: int, ready_in: float):
    """A group window whose batch 1 (three units) is claimed and written, and its fused
    tail: the last batch, due ``ready_in`` seconds from now, the window's count ``count``,
    with no room to rehearse, so that the tail only waits, computes ahead, claims."""
    import shutil
    import time

    from airflow_iqp.inputs.tpch import streams_at
    from airflow_iqp.query.catalogue import get_query
    from airflow_iqp.window.readiness import claim_batch, split_tail
    from tests.support.batches import make_batch

    streams = streams_at(landing)
    static = str(tpch_dir / "static")
    for q in members:
        save_query(store, Saved(get_query(q), streams, static))
    now, far = time.time(), time.time() + 3600
    entries = [make_batch(query="tpch_group", window_id=WINDOW, index=i, of=2, units=n, cumulative=c,
                          expected_total=count, last=i == 2, ready_ts=now + r, latest_start_ts=far, deadline_ts=far,
                          landing=str(landing), state_dir=str(store.location), static=static,
                          streams=tuple(s.to_dict() for s in streams), members=members, label=f"batch {i}/2")
               for i, n, c, r in ((1, 3, 3, 0.0), (2, count - 3, count, ready_in))]
    mapped, tail = split_tail(entries, lead=1.0)
    assert not tail.before
    for u in units[:3]:
        shutil.copytree(u, landing / u.name)
    claim_batch(mapped[0])
    group = store.window("tpch_group", WINDOW)
    execute_batch(spark, batch_work(group, 1, members=members), backend="spark-submit")
    # A tail planned to take a minute has no room to rehearse before its ready time.
    return group, tail.with_(ready_ts=time.time() + ready_in, remaining_cost=60.0)


def test_a_group_s_fused_tail_computes_its_members_results_once_the_count_has_landed(
        spark, tpch_dir, units, tmp_path, capsys):
    """Every unit of the window's count is in before the last batch's ready time: the group's
    tail reads them once and computes each member's result ahead, earliest deadline first,
    claims at the ready time all the same, finds the claim reads the files it computed
    from, and writes those rows; each result equals DuckDB's and no partial of the last
    batch is written."""
    import shutil

    from airflow_iqp.spark.tail import run_tail

    landing, store = tmp_path / "landing", open_store(tmp_path / "state")
    landing.mkdir()
    members = ("cq1", "q6", "q4")
    group, tail = _group_tail_of_two(spark, store, landing, tpch_dir, units, members, count=len(units), ready_in=10.0)
    for u in units[3:]:
        shutil.copytree(u, landing / u.name)
    out = run_tail(spark, group, tail, backend="spark-submit")
    said = capsys.readouterr().out
    ahead = re.findall(r"(\w+): computed its result ahead from", said)
    # Each member computed ahead before the ready time, in the tail's order; on a slow
    # machine the ready time may come before the last members'.
    assert ahead and ahead == list(members[:len(ahead)]), said
    claim = group.claim_of(2)
    assert claim["claimed_at"] >= tail.ready_ts  # the count is a hint: the claim waited for the ready time
    assert claim["units"] == [u.name for u in units[3:]]
    assert_started_one_at_a_time(out, members)
    for q in members:
        ws, manifest = store.window(q, WINDOW), out["members"][q]
        assert ("computed_ahead_at" in manifest) == (q in ahead)
        if q in ahead:
            assert manifest["computed_ahead_at"] <= claim["claimed_at"] <= manifest["written_at"]
        assert manifest["batches"] == [1, 2] and sorted(manifest["units"]) == sorted(u.name for u in units)
        assert not ws.has_partial(2)
        assert_tpch_result(ws, q, units, tpch_dir)


def test_a_unit_landing_after_a_group_s_results_were_computed_ahead_is_in_every_result(
        spark, tpch_dir, units, tmp_path, capsys, monkeypatch):
    """The window's count is reached before the ready time, the group's tail computes ahead,
    then one more unit lands: the claim takes it, differs from what was computed, and every
    member runs its step on the claimed units and its merge as usual. No unit is lost."""
    import shutil

    from airflow_iqp.spark import tail as tail_module

    landing, store = tmp_path / "landing", open_store(tmp_path / "state")
    landing.mkdir()
    members = ("cq1", "q6", "q4")
    group, tail = _group_tail_of_two(spark, store, landing, tpch_dir, units, members, count=len(units) - 1,
                                     ready_in=10.0)
    for u in units[3:-1]:
        shutil.copytree(u, landing / u.name)
    compute = tail_module.compute_group_ahead

    def then_a_late_writer(*args):  # one more unit lands once the results have been computed
        out = compute(*args)
        shutil.copytree(units[-1], landing / units[-1].name)
        return out

    monkeypatch.setattr(tail_module, "compute_group_ahead", then_a_late_writer)
    out = tail_module.run_tail(spark, group, tail, backend="spark-submit")
    said = capsys.readouterr().out
    assert "computed its result ahead from" in said and "the claim differs" in said
    assert group.claim_of(2)["units"] == [u.name for u in units[3:]]
    for q in members:
        ws, manifest = store.window(q, WINDOW), out["members"][q]
        assert "computed_ahead_at" not in manifest
        assert sorted(manifest["units"]) == sorted(u.name for u in units)
        assert_tpch_result(ws, q, units, tpch_dir)
