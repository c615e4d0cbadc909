"""Both execution backends through Airflow's own ``dag.test()``, in one process.

One Python process (a child of the test, so that its Airflow home and connections are its
own) runs the same query's DAG first with ``backend=SparkConnect()`` (the
operators' Connect strategy on a real Spark Connect server), then again with the last
batch fused into the final task (``fuse_tail=True``), then with ``backend=SparkSubmit()``
and a fused tail (real spark-submit: the batch and the merge in one application). A Spark
Connect client marks its process with SPARK_CONNECT_MODE_ENABLED=1, with which
spark-submit fails: the Connect tasks leave the process as they found it, and the
spark-submit DAG, run in a process so marked, succeeds and leaves the mark alone. All
results must equal each other and the DuckDB reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.support.reference import assert_same_rows, duckdb_reference  # noqa: E402

from iqp_dev.local_airflow import free_port  # noqa: E402

pytestmark = pytest.mark.airflow

DAG_FILE = textwrap.dedent('''
    import datetime as dt
    import os

    import pendulum

    from airflow_iqp.dag_factory import iqp_dag
    from airflow_iqp.backends import SparkConnect, SparkSubmit
    from airflow_iqp.options import Alerts, Arrival

    DATA = os.environ["T_DATA"]
    for name, backend in (("connect", SparkConnect(retries=0, tail_slots=1)),
                          ("connect_fused", SparkConnect(retries=0, fuse_tail=True)),
                          ("submit_fused", SparkSubmit(retries=0, fuse_tail=True))):
        globals()[name] = iqp_dag(
            query="q4", dag_id="t_" + name, streams=DATA + "/units", static=DATA + "/static",
            window=dt.timedelta(minutes=2), deadline_offset=dt.timedelta(minutes=2), arrival=Arrival(units=6),
            backend=backend, state_dir=os.environ["T_STATE"] + "/" + name, alerts=Alerts(deadline=False),
            anchor=pendulum.datetime(2026, 1, 1, tz="UTC"))
''')

RUNNER = textwrap.dedent('''
    import importlib.util, json, os, sys
    import pendulum

    spec = importlib.util.spec_from_file_location("t", sys.argv[1])
    dags = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dags)
    out = {}
    for name in ("connect", "connect_fused", "submit_fused"):
        if name == "submit_fused":  # as any other Spark Connect client in this process would leave it
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        run = getattr(dags, name).test(logical_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
        out[name] = {"state": str(run.state), "connect_flag": os.environ.get("SPARK_CONNECT_MODE_ENABLED")}
    print("RESULT " + json.dumps(out))
''')



def test_connect_then_submit_dag_in_one_process(tmp_path):
    from airflow_iqp.inputs.tpch import generate
    from airflow_iqp.spark.connect import start_server, stop_server
    from airflow_iqp.landing import list_units
    from airflow_iqp.store import open_store
    from tests.support.batches import TPCH

    data = tmp_path / "data"
    generate(0.01, 6, data)
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "backends.py").write_text(DAG_FILE)
    (tmp_path / "runner.py").write_text(RUNNER)
    port = free_port()
    start_server(port, base=tmp_path / "connect", driver_memory="1g")
    try:
        env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"), "T_DATA": str(data),
               "T_STATE": str(tmp_path / "state"),
               "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
                   {"conn_type": "spark_connect", "host": "127.0.0.1", "port": port}),
               "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        airflow = str(Path(sys.executable).parent / "airflow")
        subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
        proc = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "dags" / "backends.py")],
                              env=env, capture_output=True, text=True, timeout=900)
    finally:
        stop_server(port, base=tmp_path / "connect")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (proc.stdout + proc.stderr)[-4000:]
    out = json.loads(lines[-1][len("RESULT "):])
    for name in ("connect", "connect_fused"):  # the Connect sessions left no mark behind
        assert out[name] == {"state": "success", "connect_flag": None}, (proc.stdout + proc.stderr)[-4000:]
    # spark-submit ran in a process a Connect client had marked; the mark is still there
    assert out["submit_fused"] == {"state": "success", "connect_flag": "1"}, (proc.stdout + proc.stderr)[-4000:]
    units = list_units(data / "units", TPCH)
    _cols, ref = duckdb_reference("q4", units, data / "static")
    results = {}
    for name, backend in (("connect", "spark-connect"), ("connect_fused", "spark-connect"),
                          ("submit_fused", "spark-submit")):
        store = open_store(tmp_path / "state" / name)
        (ws,) = [w for w in map(store.query("q4").window, store.query("q4").windows()) if w.manifest() is not None]
        m = ws.manifest()
        assert m["backend"] == backend and len(m["units"]) == 6
        report = ws.doc("report")
        assert report["backend"] == backend and report["partial"] is False
        # The window's one batch was claimed, run and reported whichever task ran it.
        assert [(b["index"], b["claimed_units"]) for b in report["batches"]] == [(1, 6)]
        # A mapped batch writes its partial; a fused tail merges its batch without writing one.
        assert bool(ws.metrics(1)) == (name == "connect")
        assert m["batches"] == [1]
        # On Spark Connect a mapped batch takes its turn at the gate (tail_slots=1), and leaves it.
        turns = tmp_path / "state" / name / "_turns"
        assert turns.is_dir() == (name == "connect") and not any(turns.glob("*/*"))
        # Each task recorded its process's CPU; dag.test() runs them all in one process, so the
        # records are cumulative here. spark-submit work shows as reaped children; Connect has none.
        cpu = {r["task_id"]: r for r in ws.records("cpu")}
        if name == "connect":
            assert set(cpu) == {"plan", "batch.wait", "batch.submit", "final"}
            assert cpu["batch.submit"]["children_cpu_seconds"] - cpu["batch.wait"]["children_cpu_seconds"] < 0.5
        else:  # the batch ran in the final task: no mapped batch task ran
            assert set(cpu) == {"plan", "tail_wait", "final"}
            children = cpu["final"]["children_cpu_seconds"] - cpu["tail_wait"]["children_cpu_seconds"]
            assert children > 1.0 if backend == "spark-submit" else children < 0.5
        assert report["task_cpu"]["tasks"] == len(cpu) and report["task_cpu"]["cpu_seconds"] > 0
        results[name] = [tuple(r.values()) for r in pq.read_table(m["result"]).to_pylist()]
        assert_same_rows(results[name], ref, ordered=True, label=f"q4 via {name}")
    assert results["connect"] == results["connect_fused"] == results["submit_fused"]
