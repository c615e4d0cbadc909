"""The job code (claims, atomic partials, metrics, coverage checks) driven in one SparkSession."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.batches import tpch_files, tpch_window
from tests.support.reference import assert_same_rows, duckdb_reference
from tests.support.tasks import rewrite_claim

from airflow_iqp.errors import DataError
from airflow_iqp.spark.batch import batch_work, execute_batch
from airflow_iqp.spark.merge import execute_final
from airflow_iqp.query.catalogue import get_query
from airflow_iqp.spark.steps import run_batch, run_final, write_atomic
from airflow_iqp.spark.window import split_consecutive
from airflow_iqp.store import WindowState, open_store

pytestmark = pytest.mark.spark

#: The backend the jobs run here are recorded as, in their metrics and the cost history.
BACKEND = "spark-submit"


def result_rows(spark, ws: WindowState) -> list[tuple]:
    return [tuple(r) for r in spark.read.parquet(ws.result_uri).collect()]


def run_window_inprocess(spark, qid, units, static, state, window="w", k=3) -> WindowState:
    query = get_query(qid)
    ws = tpch_window(state, qid, window)
    for b, chunk in enumerate(split_consecutive(units, k)):
        ws.claim(b, [u.name for u in chunk], tpch_files(chunk, query.streams))
        execute_batch(spark, batch_work(ws, b, str(static)), backend=BACKEND)
    execute_final(spark, ws, backend=BACKEND, expect_units=len(units))
    return ws


def test_pyspark_python_version_equals_jvm_version(spark):
    import pyspark

    assert spark.version == pyspark.__version__
    # spark.version asks the JVM session; JavaSparkContext.version() is the JVM's SPARK_VERSION
    assert spark.sparkContext._jsc.version() == pyspark.__version__


def test_units_keep_orders_with_their_lineitems(units):
    for u in units:
        o = pq.read_table(u / "orders.parquet", columns=["o_orderkey", "o_eventtime"])
        li = pq.read_table(u / "lineitem.parquet", columns=["l_orderkey", "l_eventtime"])
        assert set(li.column("l_orderkey").to_pylist()) <= set(o.column("o_orderkey").to_pylist())
        assert len(o) > 0 and len(li) > 0
        # event times lie in the unit's slot of the window (1 s per unit by default)
        i = int(u.name)
        for col in (o.column("o_eventtime"), li.column("l_eventtime")):
            secs = [t.timestamp() - 1767225600 for t in col.to_pylist()]
            assert i <= min(secs) and max(secs) < i + 1


def test_retried_batch_leaves_the_result_unchanged(spark, units, tpch_dir, tmp_path):
    ws = run_window_inprocess(spark, "q4", units, tpch_dir / "static", tmp_path)
    before = result_rows(spark, ws)
    manifest_before = ws.claim_of(1)
    # a retry of batch 1: the claim returns the same manifest, the job overwrites only its partial
    again = ws.claim(1, ["000000"], ["/other"])
    assert again == manifest_before
    other_partial = sorted(os.listdir(ws.partial_uri(0)))
    execute_batch(spark, batch_work(ws, 1, str(tpch_dir / "static")), backend=BACKEND)
    assert sorted(os.listdir(ws.partial_uri(0))) == other_partial
    execute_final(spark, ws, backend=BACKEND, expect_units=len(units))
    after = result_rows(spark, ws)
    assert_same_rows(after, before, ordered=True, label="q4 after retry")
    cols, ref = duckdb_reference("q4", units, tpch_dir / "static")
    assert_same_rows(after, ref, ordered=True, label="q4 vs duckdb")
    hist = ws.store.cost_history(query="q4")
    assert [r["kind"] for r in hist] == ["batch", "batch", "batch", "final", "batch", "final"]
    # Claimed and run outside Airflow (no attempts on record): no span from claim to output.
    assert all(r["end_to_end_seconds"] is None for r in hist)
    metrics = ws.metrics(1)
    assert metrics["units"] == 2 and metrics["rows_in"] > 0 and metrics["bytes"] > 0
    assert metrics["rows_out"] == len(spark.read.parquet(ws.partial_uri(1)).collect())
    assert metrics["task_seconds"] is not None and metrics["task_seconds"] > 0
    assert metrics["cpu_seconds"] > 0 and metrics["wall_seconds"] > 0
    result_manifest = ws.manifest()
    assert result_manifest["units"] == [u.name for u in units]
    assert result_manifest["batches"] == [0, 1, 2]
    assert len(result_manifest["files"]) == 2 * len(units)


def test_the_cost_history_has_each_batch_from_claim_to_partial_and_the_merge_from_the_last_batch(
        spark, units, tpch_dir, tmp_path):
    """As the provider runs a window, each task recording its attempt before its job: the
    history's spans hold the task's start, which the job's own step seconds leave out."""
    import time
    from types import SimpleNamespace

    from airflow_iqp.store import batch_name
    from airflow_iqp.window.accounting import record_attempt

    ws = tpch_window(tmp_path, "q4", "w")
    for b, chunk in enumerate(split_consecutive(units, 2)):
        ws.claim(b, [u.name for u in chunk], tpch_files(chunk, get_query("q4").streams))
        record_attempt(ws, batch_name(b), SimpleNamespace(task_id="batch.submit", map_index=b, try_number=1))
        time.sleep(0.3)  # the task starting
        execute_batch(spark, batch_work(ws, b, str(tpch_dir / "static")), backend=BACKEND)
    record_attempt(ws, "final", SimpleNamespace(task_id="final", map_index=-1, try_number=1))
    time.sleep(0.3)
    execute_final(spark, ws, backend=BACKEND, expect_units=len(units))
    *batches, final = ws.store.cost_history(query="q4")
    ends = []
    for b, record in enumerate(batches):
        claimed, written = ws.claim_of(b)["claimed_at"], ws.metrics(b)["written_at"]
        assert record["end_to_end_seconds"] == pytest.approx(written - claimed)
        assert record["end_to_end_seconds"] >= record["wall_seconds"] + 0.3
        ends.append(written)
    manifest = ws.manifest()
    assert final["end_to_end_seconds"] == manifest["end_to_end_seconds"]
    assert final["end_to_end_seconds"] == pytest.approx(manifest["written_at"] - max(ends))
    assert final["end_to_end_seconds"] >= final["wall_seconds"] + 0.3


def test_a_fused_tail_merges_its_batch_in_one_job_writes_no_partial_and_a_retry_counts_nothing_twice(
        spark, units, tpch_dir, tmp_path):
    from airflow_iqp.spark.tail import execute_tail

    qid, static = "cq2", str(tpch_dir / "static")
    query = get_query(qid)
    ws = tpch_window(tmp_path, qid, "w")
    chunks = split_consecutive(units, 3)
    for b, chunk in enumerate(chunks):
        ws.claim(b, [u.name for u in chunk], tpch_files(chunk, query.streams))
    for b in (0, 1):
        execute_batch(spark, batch_work(ws, b, static), backend=BACKEND)
    manifest = execute_tail(spark, ws, 2, static, backend=BACKEND)
    # The result covers the tail's units; its batch was merged in the same job, never written.
    assert not ws.has_partial(2) and manifest["units"] == [u.name for u in units]
    assert manifest["batches"] == [0, 1, 2]
    cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    assert_same_rows(result_rows(spark, ws), ref, ordered=query.ordered, label="fused tail vs duckdb")
    # A retry computes it again from the same claim: the same result, nothing counted twice.
    execute_tail(spark, ws, 2, static, backend=BACKEND)
    assert_same_rows(result_rows(spark, ws), ref, ordered=query.ordered, label="fused tail retried")
    # The merge's cost history has no record with a batch's work in it.
    assert [r["kind"] for r in ws.store.cost_history(query=qid)] == ["batch", "batch"]


def test_a_fused_tail_merges_the_partials_read_ahead_unless_one_was_written_again(spark, units, tpch_dir, tmp_path):
    """What a fused tail reads while it waits (``read_written``) is the written partials
    folded into one cached state, folded again when a partial appears; the merge uses it
    only if no partial was written again since (a retried batch's new directory): the
    result is right either way."""
    import time

    from airflow_iqp.spark.merge import ahead_or_paths
    from airflow_iqp.spark.steps import parquet_rows
    from airflow_iqp.spark.tail import execute_tail, read_written, release

    qid, static = "cq3", str(tpch_dir / "static")
    query = get_query(qid)
    ws = tpch_window(tmp_path, qid, "w")
    for b, chunk in enumerate(split_consecutive(units, 3)):
        ws.claim(b, [u.name for u in chunk], tpch_files(chunk, query.streams))
    assert read_written(spark, ws) is None
    execute_batch(spark, batch_work(ws, 0, static), backend=BACKEND)
    ahead = read_written(spark, ws)
    assert list(ahead["dirs"]) == [ws.partial_uri(0)]
    execute_batch(spark, batch_work(ws, 1, static), backend=BACKEND)
    paths = [ws.partial_uri(b) for b in (0, 1)]
    assert ahead_or_paths(ahead, ws, paths) == paths  # batch 1's partial came after it
    first = ahead
    # Too near the window's end for a fold as long as the last: batch 1's partial is read
    # beside batch 0's state.
    assert first["fold_seconds"] > 0
    beside = read_written(spark, ws, first, until=time.time() + first["fold_seconds"] / 2)
    assert beside["cached"] is first["cached"] and first["df"].storageLevel.useMemory
    assert ahead_or_paths(beside, ws, paths) is beside["df"]
    assert read_written(spark, ws, beside, until=time.time() + first["fold_seconds"] / 2) is beside
    ahead = read_written(spark, ws, beside)  # room again: folded
    assert read_written(spark, ws, ahead) is ahead  # nothing new: not read again
    assert ahead_or_paths(ahead, ws, paths) is ahead["df"]
    # One state, cached: CQ3 counts per supplier, and the two batches' suppliers overlap.
    assert ahead["cached"] is ahead["df"] and ahead["df"].storageLevel.useMemory
    assert not first["df"].storageLevel.useMemory
    assert ahead["df"].count() < sum(parquet_rows(p) for p in paths)
    assert "InMemoryTableScan" in ahead["df"].unionByName(ahead["df"])._jdf.queryExecution().executedPlan().toString()
    cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    execute_tail(spark, ws, 2, static, backend=BACKEND, written=ahead)
    assert_same_rows(result_rows(spark, ws), ref, ordered=query.ordered, label="tail merged with the read-ahead")
    execute_batch(spark, batch_work(ws, 1, static), backend=BACKEND)  # batch 1 retried
    assert ahead_or_paths(ahead, ws, paths) == paths
    execute_tail(spark, ws, 2, static, backend=BACKEND, written=ahead)
    assert_same_rows(result_rows(spark, ws), ref, ordered=query.ordered, label="tail after a partial written again")
    refolded = read_written(spark, ws, ahead)  # batch 1's new version: folded from the files again
    assert refolded is not ahead and not ahead["df"].storageLevel.useMemory
    release(refolded)
    assert not refolded["df"].storageLevel.useMemory


def test_a_fused_tail_runs_the_batches_ready_after_it_started_then_the_last_as_units_land(
        spark, units, tpch_dir, tmp_path):
    """``run_tail`` with ``before``: the final task, started early, runs batch 2 when its units
    are in and batch 3 (with the merge) when the window's last units land, from a real
    landing directory; with a gate (``slots=1``) the last batch's ``turn_ts`` does not hold it."""
    import time

    from airflow_iqp.spark.tail import run_tail
    from airflow_iqp.window.readiness import claim_batch, split_tail
    from tests.support.batches import make_batch
    from tests.support.landing import land_later

    qid, static = "cq3", str(tpch_dir / "static")
    landing, state = tmp_path / "landing", tmp_path / "state"
    landing.mkdir()
    now = time.time()
    far = now + 3600  # no batch fires on time alone here: each waits for its units
    entries = [make_batch(query=qid, window_id="w", index=i, of=3, units=n, cumulative=c, expected_total=len(units),
                          last=i == 3, ready_ts=now + r, latest_start_ts=far, deadline_ts=far, landing=str(landing),
                          state_dir=str(state), static=static, cost=1.0, label=f"batch {i}/3")
               for i, n, c, r in ((1, 2, 2, 0.0), (2, 2, 4, 1.0), (3, 2, 6, 2.0))]
    # ``ahead``: without the gate the tail would wait for this, minutes after its units are in
    entries[-1] = entries[-1].with_(turn_ts=now + 300)
    mapped, tail = split_tail(entries, lead=1.5)
    assert [b.index for b in mapped] == [1] and [b.index for b in tail.before] == [2]
    for u in units[:3]:
        shutil.copytree(u, landing / u.name)
    claim_batch(mapped[0])  # the mapped batch's sensor: the 3 units there are
    ws = tpch_window(state, qid, "w")
    execute_batch(spark, batch_work(ws, 1, static), backend=BACKEND)

    # The last batch may claim 2 s from now: batch 2, reached before then, runs on its own
    # (reached after it, it would leave its units to the last batch: fold_into_tail).
    tail = tail.with_(ready_ts=time.time() + 2.0)
    lander = land_later(units[3:], landing)  # the rest arrives while the final task waits
    t0 = time.time()
    manifest = run_tail(spark, ws, tail, slots=1, backend=BACKEND)
    lander.join()
    assert time.time() - t0 < 240  # the gate's turn, not turn_ts 300 s away
    claims = ws.claims()
    assert [len(claims[i]["units"]) for i in (1, 2, 3)] == [3, 1, 2]  # batch 2 fired when 4 units were in
    assert ws.has_partial(2) and not ws.has_partial(3)  # the last is merged, not written
    assert manifest["batches"] == [1, 2, 3] and manifest["units"] == [u.name for u in units]
    cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    assert_same_rows(result_rows(spark, ws), ref, ordered=get_query(qid).ordered, label="tail with before")
    # A retry re-reads every claim and recomputes no written partial: the result is the same.
    written = ws.partial_versions()
    run_tail(spark, ws, tail, slots=1, backend=BACKEND)
    assert ws.partial_versions() == written
    assert_same_rows(result_rows(spark, ws), ref, ordered=get_query(qid).ordered, label="tail retried")


def test_a_fused_tail_rehearses_in_the_wait_before_a_batch_it_runs(spark, units, tpch_dir, tmp_path, capsys):
    """A single query's tail whose batch before the last ends just before the window's end
    has no room to rehearse after it: it folds the written partials and rehearses its last
    step in the wait before that batch, at most ``REHEARSALS`` times in all, and the result
    is the window's."""
    import re
    import time

    from airflow_iqp.spark.tail import REHEARSAL_ROOM, REHEARSALS, run_tail
    from airflow_iqp.window.readiness import claim_batch, split_tail
    from tests.support.batches import make_batch
    from tests.support.landing import land_later

    qid, static = "cq3", str(tpch_dir / "static")
    landing, state = tmp_path / "landing", tmp_path / "state"
    landing.mkdir()
    far = time.time() + 3600
    entries = [make_batch(query=qid, window_id="w", index=i, of=3, units=n, cumulative=c, expected_total=len(units),
                          last=i == 3, ready_ts=far + r, latest_start_ts=far + 60, deadline_ts=far + 60,
                          landing=str(landing), state_dir=str(state), static=static, cost=0.5, remaining_cost=0.5,
                          label=f"batch {i}/3")
               for i, n, c, r in ((1, 3, 3, 0.0), (2, 2, 5, 10.0), (3, 1, 6, 11.0))]
    mapped, tail = split_tail(entries, lead=5.0)
    assert [b.index for b in tail.before] == [2]
    for u in units[:3]:
        shutil.copytree(u, landing / u.name)
    claim_batch(mapped[0])
    ws = tpch_window(state, qid, "w")
    execute_batch(spark, batch_work(ws, 1, static), backend=BACKEND)
    for u in units[3:5]:
        shutil.copytree(u, landing / u.name)
    # Batch 2's input is there, and due 12 s from now; the window ends 0.1 s after that, when
    # the last unit lands: room to rehearse before batch 2, none after it.
    room = REHEARSAL_ROOM * tail.remaining_cost / tail.cost_scale
    due = time.time() + 12 + room
    tail = tail.with_(ready_ts=due + 0.1, before=(tail.before[0].with_(ready_ts=due),))
    lander = land_later(units[5:], landing, every=due - time.time())
    manifest = run_tail(spark, ws, tail, backend=BACKEND)
    lander.join()
    out = capsys.readouterr().out
    assert out.index("batch 3/3: rehearsed on unit") < out.index("batch 2/3: 2 units in")
    runs = [r for line in re.findall(r"rehearsed on unit \S+ in ([\d., ]+) s", out) for r in line.split(", ")]
    assert 1 <= len(runs) <= REHEARSALS
    assert manifest["batches"] == [1, 2, 3] and manifest["units"] == [u.name for u in units]
    _cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    assert_same_rows(result_rows(spark, ws), ref, ordered=get_query(qid).ordered, label="tail rehearsed before 2")
    assert not [p for p in Path(state).rglob("*") if "rehearsal" in p.name]


def test_a_unit_in_two_partials_is_an_error_naming_both_batches(spark, units, tpch_dir, tmp_path):
    ws = run_window_inprocess(spark, "cq1", units, tpch_dir / "static", tmp_path, k=2)
    # forge a third batch covering a unit of batch 1 (a claim would refuse it)
    rewrite_claim(ws, 2, units=[units[4].name], files=[], claimed_at=0)
    shutil.copytree(ws.partial_uri(1), ws.partial_uri(2))
    with pytest.raises(DataError, match=rf"unit {units[4].name} is covered by two partials, batch 1 and batch 2"):
        execute_final(spark, ws, backend=BACKEND)


def test_a_claimed_batch_without_partial_blocks_the_final(spark, units, tpch_dir, tmp_path):
    ws = run_window_inprocess(spark, "cq1", units, tpch_dir / "static", tmp_path, k=2)
    ws.claim(3, [], [])  # a batch that found nothing to claim needs no partial
    assert execute_final(spark, ws, backend=BACKEND)["units"] == [u.name for u in units]
    ws.claim(2, ["999999"], [])
    with pytest.raises(DataError, match=r"batch\(es\) \[2\] claimed input but have no partial"):
        execute_final(spark, ws, backend=BACKEND)


def failing(qid: str):
    """A catalogued query over the TPC-H streams with ``on_bad_unit="fail"``: a bad file fails the batch."""
    from dataclasses import replace

    from airflow_iqp.query.store import Saved
    from tests.support.batches import TPCH

    return Saved(get_query(qid), tuple(replace(st, on_bad_unit="fail") for st in TPCH))


def test_corrupt_parquet_names_the_file(spark, units, tmp_path):
    bad = tmp_path / "000099" / "orders.parquet"
    bad.parent.mkdir()
    data = (units[0] / "orders.parquet").read_bytes()
    bad.write_bytes(data[: len(data) // 2])  # truncated: no footer
    files = tpch_files(units[:1], ["orders"]) + [str(bad)]
    with pytest.raises(DataError, match=rf"{bad}: not a readable parquet file"):
        run_batch(spark, failing("cq2"), files, None)
    garbage = tmp_path / "000098" / "orders.parquet"
    garbage.parent.mkdir()
    garbage.write_bytes(b"PAR1" + b"\x00" * 100 + b"PAR1")
    with pytest.raises(DataError, match=rf"{garbage}: not a readable parquet file"):
        run_batch(spark, failing("cq2"), [str(garbage)], None)


def test_wrong_schema_names_the_file_and_column(spark, units, tmp_path):
    table = pq.read_table(units[0] / "lineitem.parquet")
    renamed = tmp_path / "000001" / "lineitem.parquet"
    renamed.parent.mkdir()
    pq.write_table(table.rename_columns(["x_" + c if c == "l_suppkey" else c for c in table.column_names]), renamed)
    with pytest.raises(DataError, match=rf"{renamed}: wrong schema for stream lineitem: column l_suppkey is missing"):
        run_batch(spark, failing("cq3"), [str(renamed)], None)
    retyped = tmp_path / "000002" / "lineitem.parquet"
    retyped.parent.mkdir()
    idx = table.schema.get_field_index("l_quantity")
    pq.write_table(table.set_column(idx, "l_quantity", table.column(idx).cast(pa.float64())), retyped)
    with pytest.raises(DataError, match=rf"{retyped}: .*column l_quantity is double, expected DECIMAL\(15,2\)"):
        run_batch(spark, failing("q1"), [str(retyped)], None)


def test_empty_window_gives_zero_count_or_empty_result(spark, tpch_dir, tmp_path):
    for qid, want in (("cq1", [(0,)]), ("cq2", []), ("q4", [])):
        df = run_batch(spark, qid, [], tpch_dir / "static")
        path = write_atomic(df, tmp_path / qid / "batch-0000")
        got = [tuple(r) for r in run_final(spark, qid, [str(path)]).collect()]
        assert got == want, qid
        cols, ref = duckdb_reference(qid, [], tpch_dir / "static")
        assert_same_rows(got, ref, ordered=True, label=f"{qid} empty")


def _writer(path) -> str:
    """Who wrote a result's parquet file: Spark (parquet-mr) or Arrow (parquet-cpp)."""
    files = sorted(p for p in path.iterdir() if p.suffix == ".parquet")
    return pq.ParquetFile(files[0]).metadata.created_by


def test_a_small_result_is_collected_and_reads_back_as_sparks_own_write(spark, tmp_path):
    """``write_atomic`` with a row estimate under its bound writes one Arrow file laid out as Spark's (one
    part file, ``_SUCCESS``) that Spark and DuckDB read back with Spark's own write's
    columns, types and rows: decimals, dates, time stamps (INT96 with a zone, not without), NULLs. Over the bound,
    or with time stamps both with and without a time zone, Spark writes it."""
    import duckdb

    from airflow_iqp.spark.steps import COLLECT_MAX_ROWS

    df = spark.sql("""SELECT * FROM VALUES
        (1, 'DE', CAST(12.34 AS DECIMAL(15,2)), DATE '1995-03-15', TIMESTAMP '2026-11-25 10:00:00', 0.5),
        (2, NULL, CAST(-1.00 AS DECIMAL(15,2)), NULL, NULL, NULL)
        AS t(id, country, revenue, day, hour, share) ORDER BY id""")
    write_atomic(df, tmp_path / "spark")
    write_atomic(df, tmp_path / "arrow", rows_estimate=2)
    assert "parquet-mr" in _writer(tmp_path / "spark") and "parquet-cpp" in _writer(tmp_path / "arrow")
    names = sorted(p.name for p in (tmp_path / "arrow").iterdir())
    assert len(names) == 2 and names[0] == "_SUCCESS" and names[1].startswith("part-00000-")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left
    back = {k: spark.read.parquet(str(tmp_path / k)) for k in ("spark", "arrow")}
    assert back["arrow"].schema.simpleString() == back["spark"].schema.simpleString()
    assert back["arrow"].collect() == back["spark"].collect() == df.collect()
    con = duckdb.connect()
    ddb = {}
    for k in back:
        cur = con.execute(f"SELECT * FROM read_parquet('{tmp_path / k}/*.parquet') ORDER BY id")
        ddb[k] = (cur.description, cur.fetchall())
    assert ddb["arrow"] == ddb["spark"] and len(ddb["arrow"][1]) == 2
    # Time stamps without a zone stay so (not INT96, which Spark reads back as zoned).
    ntz = spark.sql("SELECT 1 AS id, CAST(TIMESTAMP '2026-11-25 10:00:00' AS TIMESTAMP_NTZ) AS at")
    write_atomic(ntz, tmp_path / "ntz_spark")
    write_atomic(ntz, tmp_path / "ntz_arrow", rows_estimate=1)
    assert "parquet-cpp" in _writer(tmp_path / "ntz_arrow")
    back_ntz = {k: spark.read.parquet(str(tmp_path / k)) for k in ("ntz_spark", "ntz_arrow")}
    assert back_ntz["ntz_arrow"].schema.simpleString() == back_ntz["ntz_spark"].schema.simpleString() \
        == "struct<id:int,at:timestamp_ntz>"
    assert back_ntz["ntz_arrow"].collect() == back_ntz["ntz_spark"].collect() == ntz.collect()
    write_atomic(df, tmp_path / "big", rows_estimate=COLLECT_MAX_ROWS + 1)
    write_atomic(df, tmp_path / "unknown", rows_estimate=None)
    mixed = spark.sql("SELECT TIMESTAMP '2026-11-25 10:00:00' AS a, CAST(TIMESTAMP '2026-11-25 10:00:00' "
                      "AS TIMESTAMP_NTZ) AS b")
    write_atomic(mixed, tmp_path / "mixed", rows_estimate=1)
    for k in ("big", "unknown", "mixed"):
        assert "parquet-mr" in _writer(tmp_path / k), k
    assert spark.read.parquet(str(tmp_path / "mixed")).schema.simpleString() == "struct<a:timestamp,b:timestamp_ntz>"


def test_the_merge_rows_estimate_bounds_a_fused_tails_result_and_picks_the_writer(
        spark, units, tpch_dir, tmp_path, monkeypatch):
    """The estimate is the written partials' rows plus the tail's input rows at the written
    batches' largest ratio of partial to input rows; unknown tail rows give None. The
    fused tail's small result is collected; with the bound below it, Spark writes it; the
    rows are DuckDB's either way."""
    from airflow_iqp.spark import steps
    from airflow_iqp.spark.merge import merge_rows_estimate
    from airflow_iqp.spark.tail import execute_tail

    qid, static = "q10", str(tpch_dir / "static")
    query = get_query(qid)
    ws = tpch_window(tmp_path, qid, "w")
    for b, chunk in enumerate(split_consecutive(units, 3)):
        ws.claim(b, [u.name for u in chunk], tpch_files(chunk, query.streams))
    metrics = [execute_batch(spark, batch_work(ws, b, static), backend=BACKEND) for b in (0, 1)]
    paths = [ws.partial_uri(b) for b in (0, 1)]
    written = sum(m["rows_out"] for m in metrics)
    ratio = max(m["rows_out"] / m["rows_in"] for m in metrics)
    assert written > 0 and merge_rows_estimate(ws, paths) == written
    assert merge_rows_estimate(ws, paths, 1000, tail=True) == written + round(1000 * ratio)
    assert merge_rows_estimate(ws, [], 1000, tail=True) == 1000  # nothing written: the input rows
    assert merge_rows_estimate(ws, paths, None, tail=True) is None  # remote files: not inspected
    _cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    execute_tail(spark, ws, 2, static, backend=BACKEND)
    assert "parquet-cpp" in _writer(Path(ws.result_uri))
    assert_same_rows(result_rows(spark, ws), ref, ordered=query.ordered, label="q10 collected")
    monkeypatch.setattr(steps, "COLLECT_MAX_ROWS", written - 1)
    execute_tail(spark, ws, 2, static, backend=BACKEND)
    assert "parquet-mr" in _writer(Path(ws.result_uri))
    assert_same_rows(result_rows(spark, ws), ref, ordered=query.ordered, label="q10 written by Spark")


def test_a_fused_tail_rehearses_before_the_windows_end_and_leaves_no_trace(spark, units, tpch_dir, tmp_path, capsys):
    """``rehearse_tail`` runs the tail's plan on a claimed unit with the written partials
    while the window's end is far enough, and writes nothing in the window's state: no
    claim, partial, result or cost history. Too near the end, or with nothing claimed,
    it does not run."""
    import time

    from airflow_iqp.spark.tail import REHEARSAL_ROOM, REHEARSALS, read_written, rehearse_tail
    from tests.support.batches import make_batch

    qid, static = "cq3", str(tpch_dir / "static")
    query = get_query(qid)
    ws = tpch_window(tmp_path, qid, "w")
    tail = make_batch(query=qid, window_id="w", index=3, of=3, state_dir=str(tmp_path), static=static,
                      ready_ts=time.time() + 600, cost=0.5, remaining_cost=1.0, cost_scale=2.0, label="batch 3/3")
    assert rehearse_tail(spark, ws, tail) == []  # nothing claimed yet
    for b, chunk in enumerate(split_consecutive(units, 3)[:2], start=1):
        ws.claim(b, [u.name for u in chunk], tpch_files(chunk, query.streams))
        execute_batch(spark, batch_work(ws, b, static), backend=BACKEND)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    history = ws.store.cost_history(query=qid)
    written = read_written(spark, ws)
    runs = rehearse_tail(spark, ws, tail, slots=1, written=written)
    assert len(runs) == REHEARSALS and all(r > 0 for r in runs)  # ten minutes of room: every rehearsal
    printed = capsys.readouterr().out.split("rehearsed on unit")[1].split(" in ")[1].split(" s")[0]
    assert printed == ", ".join(f"{r:.2f}" for r in runs)
    assert len(rehearse_tail(spark, ws, tail, written=written, rehearsals=1)) == 1  # what is left of them
    # Before a batch the tail runs ahead of the last, the room is before that batch's input.
    assert rehearse_tail(spark, ws, tail, written=written, before=time.time()) == []
    assert sorted(str(p) for p in tmp_path.rglob("*") if "_turns" not in p.parts) == \
        [p for p in before if "_turns" not in p]
    assert ws.store.cost_history(query=qid) == history and ws.manifest() is None
    assert not os.path.exists(ws.result_uri)
    near = tail.with_(ready_ts=time.time() + REHEARSAL_ROOM * 1.0 / 2.0 - 0.1)  # expected: 1.0 / cost_scale
    assert rehearse_tail(spark, ws, near) == []


def _tail_of_two(spark, units, tpch_dir, tmp_path, qid: str, first: int, count: int, ready_in: float,
                 run_first: bool = True, middle: int = 0):
    """(window, fused tail) of a window of batch 1 (its ``first`` units claimed and, with
    ``run_first``, written) and a last batch due ``ready_in`` seconds from now, the window's
    count ``count``; with no room to rehearse or fold, so that the tail only waits, computes
    ahead, claims. With ``middle``, a batch of that many units between them, ready 1 s
    from now, which the tail runs (its ``before``)."""
    import time

    from airflow_iqp.window.readiness import claim_batch, split_tail
    from tests.support.batches import make_batch

    static = str(tpch_dir / "static")
    landing, state = tmp_path / "landing", tmp_path / "state"
    landing.mkdir()
    now = time.time()
    sizes = [(first, 0.0), *([(middle, 1.0)] if middle else []), (count - first - middle, ready_in)]
    of = len(sizes)
    entries = [make_batch(query=qid, window_id="w", index=i, of=of, units=n,
                          cumulative=sum(m for m, _r in sizes[:i]), expected_total=count,
                          last=i == of, ready_ts=now + r, latest_start_ts=now + 600, deadline_ts=now + 600,
                          landing=str(landing), state_dir=str(state), static=static, cost=ready_in,
                          remaining_cost=ready_in, label=f"batch {i}/{of}")
               for i, (n, r) in enumerate(sizes, start=1)]
    mapped, tail = split_tail(entries, lead=ready_in - 0.5)
    for u in units[:first]:
        shutil.copytree(u, landing / u.name)
    claim_batch(mapped[0])
    ws = tpch_window(state, qid, "w")
    if run_first:
        execute_batch(spark, batch_work(ws, 1, static), backend=BACKEND)
    return ws, tail.with_(ready_ts=time.time() + ready_in)  # however long batch 1 took


def test_a_batch_before_the_last_whose_input_is_ready_after_the_count_has_landed_leaves_it_to_the_result_ahead(
        spark, units, tpch_dir, tmp_path, capsys):
    """The tail's batch before its last may start only once the window's count has landed:
    it claims nothing, the tail computes its last batch and merge over both batches' units
    ahead, and at the ready time writes those rows, which equal DuckDB's. No partial of
    that batch is written."""
    from airflow_iqp.spark.tail import run_tail

    qid = "q3"
    ws, tail = _tail_of_two(spark, units, tpch_dir, tmp_path, qid, first=3, count=len(units), ready_in=8.0,
                            middle=2)
    assert [b.index for b in tail.before] == [2]
    for u in units[3:]:
        shutil.copytree(u, Path(tail.landing) / u.name)
    manifest = run_tail(spark, ws, tail, backend=BACKEND)
    out = capsys.readouterr().out
    assert "batch 2/3: the window's count had landed; its units are in the result computed ahead" in out
    assert "writing it" in out and "failed" not in out
    assert ws.claim_of(2)["units"] == [] and not ws.has_partial(2) and not ws.has_partial(3)
    claim = ws.claim_of(3)
    assert claim["units"] == [u.name for u in units[3:]] and claim["claimed_at"] >= tail.ready_ts
    assert manifest["computed_ahead_at"] <= claim["claimed_at"]
    _cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    assert_same_rows(result_rows(spark, ws), ref, ordered=get_query(qid).ordered, label="left to the result ahead")


def test_a_result_is_computed_ahead_once_the_batch_another_task_runs_has_written_its_partial(
        spark, units, tpch_dir, tmp_path, capsys):
    """Batch 1 has claimed, and its own task writes its partial only after the window's
    count has landed: until then computing ahead is "not yet", tried again at each poll,
    and the result is computed ahead once the partial is there."""
    import threading
    import time

    from airflow_iqp.spark.tail import run_tail

    qid = "cq3"
    ws, tail = _tail_of_two(spark, units, tpch_dir, tmp_path, qid, first=4, count=len(units), ready_in=8.0,
                            run_first=False)
    for u in units[4:]:
        shutil.copytree(u, Path(tail.landing) / u.name)
    static = str(tpch_dir / "static")
    other = threading.Thread(target=lambda: (time.sleep(2.0),
                                             execute_batch(spark, batch_work(ws, 1, static), backend=BACKEND)))
    other.start()
    manifest = run_tail(spark, ws, tail, backend=BACKEND)
    other.join()
    out = capsys.readouterr().out
    assert "computed the result ahead from" in out and "writing it" in out and "failed" not in out
    assert ws.metrics(1)["written_at"] <= manifest["computed_ahead_at"] <= ws.claim_of(2)["claimed_at"]
    _cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    assert_same_rows(result_rows(spark, ws), ref, ordered=get_query(qid).ordered, label="after its partial")


def test_a_fused_tail_computes_its_result_once_the_count_has_landed_and_writes_it_when_the_claim_matches(
        spark, units, tpch_dir, tmp_path, capsys):
    """Every unit of the window's count is in before the window's end: the tail computes its
    last batch and merge then, claims at the ready time all the same, finds that claim reads
    the files it computed from, and writes those rows as the result."""
    from airflow_iqp.spark.tail import run_tail

    qid = "cq3"
    ws, tail = _tail_of_two(spark, units, tpch_dir, tmp_path, qid, first=4, count=len(units), ready_in=6.0)
    for u in units[4:]:
        shutil.copytree(u, Path(tail.landing) / u.name)
    manifest = run_tail(spark, ws, tail, backend=BACKEND)
    out = capsys.readouterr().out
    assert "computed the result ahead from" in out and "writing it" in out
    claim = ws.claim_of(2)
    assert claim["claimed_at"] >= tail.ready_ts  # the count is a hint: the claim waited for the window's end
    assert manifest["computed_ahead_at"] <= claim["claimed_at"] <= manifest["written_at"]
    assert manifest["batches"] == [1, 2] and manifest["units"] == [u.name for u in units]
    assert not ws.has_partial(2)
    _cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    assert_same_rows(result_rows(spark, ws), ref, ordered=get_query(qid).ordered, label="computed ahead")


def test_a_unit_landing_after_the_result_was_computed_ahead_is_in_the_result(
        spark, units, tpch_dir, tmp_path, capsys, monkeypatch):
    """The window's count (5) is reached before its end, the tail computes ahead, then a sixth
    unit lands before the end: the claim takes both units, differs from what was computed,
    and the tail runs its last batch and merge as usual. No unit is lost."""
    from airflow_iqp.spark import tail as tail_module

    qid = "q3"
    ws, tail = _tail_of_two(spark, units, tpch_dir, tmp_path, qid, first=4, count=5, ready_in=6.0)
    shutil.copytree(units[4], Path(tail.landing) / units[4].name)
    compute = tail_module.compute_ahead

    def then_a_late_writer(*args):  # the sixth unit lands once the result has been computed
        out = compute(*args)
        shutil.copytree(units[5], Path(tail.landing) / units[5].name)
        return out

    monkeypatch.setattr(tail_module, "compute_ahead", then_a_late_writer)
    manifest = tail_module.run_tail(spark, ws, tail, backend=BACKEND)
    out = capsys.readouterr().out
    assert "computed the result ahead from" in out and "the claim differs" in out
    assert ws.claim_of(2)["units"] == [units[4].name, units[5].name]
    assert "computed_ahead_at" not in manifest and manifest["units"] == [u.name for u in units]
    _cols, ref = duckdb_reference(qid, units, tpch_dir / "static")
    assert_same_rows(result_rows(spark, ws), ref, ordered=get_query(qid).ordered, label="a unit after")


def test_a_held_static_schema_spares_each_read_its_inference_until_the_tables_files_change(spark, tmp_path):
    """After ``hold_static_schemas``, a read of a local static table is analysed without the
    Spark job that infers its schema; once the table's files change, it is inferred again
    and the new column is read."""
    from airflow_iqp.query.store import catalogued
    from airflow_iqp.spark import steps

    table = tmp_path / "static" / "customer.parquet"
    table.mkdir(parents=True)
    pq.write_table(pa.table({"c_custkey": [1, 2], "c_mktsegment": ["BUILDING", "MACHINERY"]}),
                   table / "part-0.parquet")
    sc = spark.sparkContext

    def jobs_to_analyse(group: str) -> tuple[list[str], int]:
        sc.setJobGroup(group, group)
        try:
            columns = steps.read_static(spark, str(tmp_path / "static"), "customer").columns
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        return columns, len(sc.statusTracker().getJobIdsForGroup(group))

    assert jobs_to_analyse("inferred")[1] >= 1  # nothing held: Spark infers the schema with a job
    steps.hold_static_schemas(spark, catalogued("q3"), str(tmp_path / "static"))
    try:
        assert jobs_to_analyse("held") == (["c_custkey", "c_mktsegment"], 0)
        os.remove(table / "part-0.parquet")
        pq.write_table(pa.table({"c_custkey": [1], "c_mktsegment": ["BUILDING"], "c_nationkey": [7]}),
                       table / "part-1.parquet")
        columns, jobs = jobs_to_analyse("changed")
        assert columns == ["c_custkey", "c_mktsegment", "c_nationkey"] and jobs >= 1
    finally:
        steps._STATIC_SCHEMAS.clear()
