"""The real thing: run-window with spark-submit processes, and a batch killed with SIGKILL.

Each spark-submit starts a JVM, so: CQ2 (a catalogued query) and a user's SQL through the
CLI, two batches each, plus the kill test. Q4 through run_window()'s spark-submit processes
is checked beside the Connect backend, in tests/spark/test_connect.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.batches import tpch_files, tpch_window
from tests.support.reference import assert_same_rows, duckdb_reference

from airflow_iqp.spark.batch import PAUSE_ENV, batch_work, execute_batch, work_args
from airflow_iqp.spark.merge import execute_final
from airflow_iqp.spark.submit import job_path, run_submit, submit_args, submit_env
from airflow_iqp.store import open_store

pytestmark = pytest.mark.spark


def _rows(spark, path) -> list[tuple]:
    return [tuple(r) for r in spark.read.parquet(str(path)).collect()]


def test_run_window_cli_runs_a_users_sql_over_its_own_files(events_dir, spark, tmp_path):
    """--sql with --stream and --static: the split query through real spark-submit processes."""
    from tests.support.events import duckdb_events

    sql = ("SELECT c.cat_name, count(*) AS n, sum(amount) AS s, avg(qty) AS a, var_pop(amount) AS v, "
           "count(DISTINCT user_id) AS u FROM events e LEFT JOIN categories c ON e.cat_id = c.cat_id "
           "GROUP BY c.cat_name ORDER BY n DESC, cat_name ASC NULLS FIRST")
    out = tmp_path / "state"
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_iqp.cli.main", "run-window", "--sql", sql, "--name", "cats",
         "--stream", f"events={events_dir / 'events'}", "--static", f"categories={events_dir / 'categories.parquet'}",
         "--batches", "2", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [len(b["units"]) for b in report["batches"]] == [3, 3]
    cols, ref = duckdb_events(sql, events_dir)
    result = spark.read.parquet(report["result"])
    assert result.columns == cols
    assert_same_rows([tuple(r) for r in result.collect()], ref, ordered=True, label="run-window --sql")


def test_run_window_cli_single_stream_query(tpch_dir, units, spark, tmp_path):
    out = tmp_path / "state"
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_iqp.cli.main", "run-window", "--query", "CQ2", "--data", str(tpch_dir),
         "--batches", "2", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    ws = open_store(out).window("cq2", "w0")
    assert report["result"] == ws.result_uri
    assert [len(b["files"]) for b in report["batches"]] == [3, 3]
    assert [f for b in report["batches"] for f in b["files"]] == tpch_files(units, ["orders"])
    for b in report["batches"] + [report["final"]]:
        assert b["wall_seconds"] > 0 and b["cpu_seconds"] > 0
    cols, ref = duckdb_reference("cq2", units, tpch_dir / "static")
    assert_same_rows(_rows(spark, ws.result_uri), ref, ordered=False, label="cq2 via spark-submit")
    hist = ws.store.cost_history(query="cq2")
    assert [(r["kind"], r["units"], r["batches"], r["backend"]) for r in hist] == [
        ("batch", 3, 1, "spark-submit"), ("batch", 3, 1, "spark-submit"), ("final", 6, 2, "spark-submit")]
    assert all(r["task_seconds"] > 0 and r["cpu_seconds"] > 0 for r in hist)


def test_batch_killed_before_rename_then_rerun(tpch_dir, units, spark, tmp_path):
    """SIGKILL a real batch job after its partial is fully written to the temp path, before the rename.

    The kill point is made deterministic with AIRFLOW_IQP_PAUSE_BEFORE_RENAME: the job sleeps
    there and says so on stderr; the test kills the whole spark-submit process group then.
    """
    static = tpch_dir / "static"
    ws = tpch_window(tmp_path / "state", "cq3", "w0")
    chunks = [units[:3], units[3:]]
    for b, chunk in enumerate(chunks):
        ws.claim(b, [u.name for u in chunk], tpch_files(chunk, ["lineitem"]))
    args = [*work_args(ws, batch_work(ws, 0, str(static))), "--backend", "spark-submit"]
    argv = submit_args(job_path("batch"), args, master="local[2]")
    partials = Path(ws.partial_uri(0)).parent
    log_path = tmp_path / "killed.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                env=submit_env() | {PAUSE_ENV: "120"}, start_new_session=True)
    try:
        deadline = time.time() + 180
        while "pausing" not in log_path.read_text():
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.time() < deadline, "the batch job never reached the pause"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not ws.has_partial(0), "a killed batch must not leave a visible partial"
    leftovers = list(partials.glob(".batch-0000.tmp-*"))
    assert leftovers and (leftovers[0] / "_SUCCESS").exists(), "the kill came after the temp write"

    # the retry: the same claim, so the same work, real spark-submit again
    res = run_submit(submit_args(job_path("batch"), [*work_args(ws, batch_work(ws, 0, str(static))),
                                                     "--backend", "spark-submit"], master="local[2]"))
    assert res.returncode == 0, res.tail()
    assert ws.has_partial(0) and not list(partials.glob(".batch-0000.tmp-*"))

    execute_batch(spark, batch_work(ws, 1, str(static)), backend="spark-submit")
    execute_final(spark, ws, backend="spark-submit", expect_units=len(units))
    cols, ref = duckdb_reference("cq3", units, static)
    assert_same_rows(_rows(spark, ws.result_uri), ref, ordered=False, label="cq3 after kill + rerun")
