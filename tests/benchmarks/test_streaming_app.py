"""The streaming baseline of benchmarks/vs_streaming.py computes the right answer.

The benchmark compares cost only among runs whose results equal the DuckDB reference;
this checks the Structured Streaming application itself, for real (one spark-submit):
a native stateful aggregate (CQ3) and a two-stream join done inside each micro-batch
(Q4), with the default trigger, stopping on its own once every unit is processed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.reference import assert_same_rows, duckdb_reference

from airflow_iqp.spark.submit import run_submit, submit_args

pytestmark = pytest.mark.spark

APP = Path(__file__).resolve().parents[2] / "benchmarks" / "streaming_app.py"


def test_streaming_app_stops_after_the_window_with_correct_results(tpch_dir, units, tmp_path):
    landing = tmp_path / "landing"
    shutil.copytree(tpch_dir / "units", landing)
    argv = submit_args(str(APP), ["--queries", "cq3,q4", "--landing", str(landing), "--static",
                                  str(tpch_dir / "static"), "--out", str(tmp_path / "out"), "--checkpoint",
                                  str(tmp_path / "ckpt"), "--trigger", "default", "--units", str(len(units)),
                                  "--name", "t"],
                       master="local[2]", conf={"spark.sql.streaming.numRecentProgressUpdates": "10000"})
    res = run_submit(argv, env={**os.environ, "IQP_BENCH_SOURCE_UNITS": str(tpch_dir / "units")}, timeout=600)
    assert res.returncode == 0, res.tail(60)
    done = json.loads((tmp_path / "out" / "t.json").read_text())
    assert set(done["finished"]) == {"cq3", "q4"}
    for q, ordered in (("cq3", False), ("q4", True)):
        got = [tuple(r.values()) for r in pq.read_table(str(tmp_path / "out" / q / "result")).to_pylist()]
        _cols, ref = duckdb_reference(q, units, tpch_dir / "static")
        assert_same_rows(got, ref, ordered=ordered, label=f"{q} via Structured Streaming")
