"""Late data merged as a new revision, and bad units quarantined, through the jobs' own
functions (execute_batch, execute_tail, execute_late, execute_final) on a local session."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest

from tests.support.events import duckdb_events
from tests.support.reference import assert_same_rows

from airflow_iqp.errors import DataError
from airflow_iqp.query import decompose
from airflow_iqp.query.store import Saved, save_query
from airflow_iqp.spark.batch import batch_work, execute_batch
from airflow_iqp.spark.merge import execute_final, execute_late
from airflow_iqp.spark.tail import execute_tail
from airflow_iqp.store import open_store
from airflow_iqp.landing import list_units
from airflow_iqp.streams import Stream, files_of

pytestmark = pytest.mark.spark

#: The backend the jobs run here are recorded as.
BACKEND = "spark-submit"

SQL = ("SELECT country, count(*) AS n, sum(amount) AS s, count(DISTINCT user_id) AS u FROM events "
       "GROUP BY country ORDER BY country NULLS FIRST")


def _window(tmp_path, events_dir, on_bad_unit="fail"):
    landing = tmp_path / "landing"
    shutil.copytree(events_dir / "events", landing)
    saved = Saved(decompose(SQL, id="ev", streams=["events"]), (Stream("events", path=str(landing),
                                                                       on_bad_unit=on_bad_unit),))
    save_query(tmp_path / "state", saved)
    return open_store(tmp_path / "state").window("ev", "w0"), saved, landing


def _claim(ws, b, units, saved):
    return ws.claim(b, [u.name for u in units], files_of(units, saved.streams))


def _batch(spark, ws, b):
    """Batch ``b``'s job on its claim, in this session."""
    return execute_batch(spark, batch_work(ws, b), backend=BACKEND)


def _rows(ws):
    return [tuple(r.values()) for r in pq.read_table(ws.manifest()["result"]).to_pylist()]


def test_a_late_batch_is_merged_as_a_second_revision(spark, events_dir, tmp_path):
    ws, saved, landing = _window(tmp_path, events_dir)
    units = list_units(landing, saved.streams)
    _claim(ws, 1, units[:2], saved)
    _batch(spark, ws, 1)
    _claim(ws, 2, units[2:4], saved)
    first = execute_tail(spark, ws, 2, None, backend=BACKEND)  # a fused tail: batch 2's partial is not written
    assert first["revision"] == 1 and not ws.has_partial(2)
    assert_same_rows(_rows(ws), duckdb_events(SQL, events_dir, [u.path for u in units[:4]])[1], True, "revision 1")
    _claim(ws, 3, units[4:], saved)                              # landed after the last claim
    second = execute_late(spark, ws, 3, backend=BACKEND)
    assert second["revision"] == 2 and [r["revision"] for r in second["revisions"]] == [1, 2]
    assert second["revisions"][0]["written_at"] == first["written_at"]
    assert sorted(second["revisions"][0]["units"]) == sorted(u.name for u in units[:4])
    assert sorted(second["revisions"][1]["units"]) == sorted(u.name for u in units)
    assert_same_rows(_rows(ws), duckdb_events(SQL, events_dir)[1], True, "revision 2")
    again = execute_late(spark, ws, 3, backend=BACKEND)          # a retry: same units, same revision
    assert again["revision"] == 2 and len(again["revisions"]) == 2


def test_quarantined_units_are_left_out_named_and_the_result_is_partial(spark, events_dir, tmp_path):
    ws, saved, landing = _window(tmp_path, events_dir, on_bad_unit="quarantine")
    (landing / "part-002.parquet").write_bytes(b"PAR1 not parquet at all")
    units = list_units(landing, saved.streams)
    _claim(ws, 1, units[:3], saved)
    _claim(ws, 2, units[3:], saved)
    for b in (1, 2):
        _batch(spark, ws, b)
    manifest = execute_final(spark, ws, backend=BACKEND)
    assert [(q["unit"], "not a readable parquet file" in q["reason"]) for q in manifest["quarantined"]] == [
        ("part-002.parquet", True)]
    good = [u.path for u in units if u.name != "part-002.parquet"]
    assert_same_rows(_rows(ws), duckdb_events(SQL, events_dir, good)[1], True, "quarantine")


def test_fail_mode_stops_the_batch_naming_the_file_and_a_rerun_reads_the_same_claim(spark, events_dir, tmp_path):
    ws, saved, landing = _window(tmp_path, events_dir)
    good = landing / "part-001.parquet"
    backup = tmp_path / "good.parquet"
    shutil.copy(good, backup)
    pq.write_table(pq.read_table(good).drop_columns(["amount"]), good)   # a wrong-schema file
    units = list_units(landing, saved.streams)
    _claim(ws, 1, units, saved)
    with pytest.raises(DataError, match=r"part-001\.parquet: wrong schema for stream events: column amount is missing"):
        _batch(spark, ws, 1)
    shutil.copy(backup, good)                                             # the file is replaced
    _batch(spark, ws, 1)
    execute_final(spark, ws, backend=BACKEND, expect_units=len(units))
    assert_same_rows(_rows(ws), duckdb_events(SQL, events_dir)[1], True, "rerun")


def test_an_empty_window_merges_the_query_over_no_input(spark, events_dir, tmp_path):
    from airflow_iqp.errors import ConfigError

    declared = "ts TIMESTAMP, user_id BIGINT, country STRING, amount DOUBLE, qty INT, cat_id INT"
    for qid, sql, schema, want in (("ev", SQL, declared, []),
                                   ("evc", "SELECT count(*) AS n, sum(amount) AS s FROM events", declared, [(0, None)])):
        (tmp_path / qid).mkdir()
        saved = Saved(decompose(sql, id=qid, streams=["events"]),
                      (Stream("events", path=str(tmp_path / qid / "landing"), schema=schema),))
        save_query(tmp_path / qid / "state", saved)
        ws = open_store(tmp_path / qid / "state").window(qid, "w0")
        ws.claim(1, [], [])                         # every batch found nothing and skipped
        manifest = execute_final(spark, ws, backend=BACKEND)
        assert manifest["units"] == [] and manifest["rows_out"] == len(want)
        assert _rows(ws) == want
    # Without a declared schema, the columns recorded from an earlier window's first unit serve.
    ws, saved, _landing = _window(tmp_path / "recorded", events_dir)
    _claim(ws, 1, list_units(_landing, saved.streams)[:1], saved)
    _batch(spark, ws, 1)
    empty = ws.store.window("ev", "w1")
    empty.claim(1, [], [])
    assert execute_final(spark, empty, backend=BACKEND)["rows_out"] == 0
    # A first window that is empty, of a stream without a schema: the error says what to declare.
    fresh, _saved, _ = _window(tmp_path / "fresh", events_dir)
    nothing = fresh.store.window("ev", "w9")
    nothing.claim(1, [], [])
    with pytest.raises(ConfigError, match="stream events: an empty batch needs a declared schema"):
        execute_final(spark, nothing, backend=BACKEND)
