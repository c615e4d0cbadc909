"""Both execution backends through Airflow's own ``dag.test()``, in one process.

One Python process (a child of the test, so that its Airflow home and connections are its
own) runs the same query's DAG first with ``backend="spark-connect"`` (the Spark
provider's PySparkOperator on a real Spark Connect server), then with
``backend="spark-submit"`` (real spark-submit). The Connect session leaves
SPARK_CONNECT_MODE_ENABLED=1 in that process; the spark-submit DAG must still succeed.
Both results must equal each other and the DuckDB reference.
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
from tests.reference import assert_same_rows, duckdb_reference  # noqa: E402

from airflow_iqp.local_airflow import free_port  # noqa: E402

pytestmark = pytest.mark.airflow

DAG_FILE = textwrap.dedent('''
    import datetime as dt
    import os

    import pendulum

    from airflow_iqp.dag_factory import iqp_dag

    DATA = os.environ["T_DATA"]
    for backend in ("spark-connect", "spark-submit"):
        globals()[backend] = iqp_dag(
            query="q4", dag_id="t_" + backend.replace("-", "_"), landing=DATA + "/units", static=DATA + "/static",
            units=6, window=dt.timedelta(minutes=2), deadline_offset=dt.timedelta(minutes=2), backend=backend,
            state_dir=os.environ["T_STATE"] + "/" + backend, deadline_alert=False, retries=0,
            anchor=pendulum.datetime(2026, 1, 1, tz="UTC"))
''')

RUNNER = textwrap.dedent('''
    import importlib.util, json, os, sys
    import pendulum

    spec = importlib.util.spec_from_file_location("t", sys.argv[1])
    dags = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dags)
    out = {}
    for backend in ("spark-connect", "spark-submit"):
        run = getattr(dags, backend).test(logical_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
        out[backend] = {"state": str(run.state), "connect_flag": os.environ.get("SPARK_CONNECT_MODE_ENABLED")}
    print("RESULT " + json.dumps(out))
''')



def test_connect_then_submit_dag_in_one_process(tmp_path):
    from airflow_iqp.inputs.tpch import generate
    from airflow_iqp.spark.connect import start_server, stop_server
    from airflow_iqp.state import list_ready_units

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
    assert out["spark-connect"] == {"state": "success", "connect_flag": "1"}, (proc.stdout + proc.stderr)[-4000:]
    # spark-submit ran in the process the Connect session had marked, and the operator removed the mark
    assert out["spark-submit"] == {"state": "success", "connect_flag": None}, (proc.stdout + proc.stderr)[-4000:]
    units = list_ready_units(data / "units")
    _cols, ref = duckdb_reference("q4", units, data / "static")
    results = {}
    for backend in ("spark-connect", "spark-submit"):
        (manifest,) = (tmp_path / "state" / backend / "q4").glob("*/result.manifest.json")
        m = json.loads(manifest.read_text())
        assert m["backend"] == backend and len(m["units"]) == 6
        report = json.loads((manifest.parent / "report.json").read_text())
        assert report["backend"] == backend and report["partial"] is False
        # Each task recorded its process's CPU; dag.test() runs them all in one process, so the
        # records are cumulative here. spark-submit work shows as reaped children; Connect has none.
        cpu = {json.loads(p.read_text())["task_id"]: json.loads(p.read_text())
               for p in (manifest.parent / "cpu").glob("*.json")}
        assert set(cpu) == {"plan", "batch.wait", "batch.submit", "final"}
        assert report["task_cpu"]["tasks"] == 4 and report["task_cpu"]["cpu_seconds"] > 0
        submit_children = cpu["batch.submit"]["children_cpu_seconds"] - cpu["batch.wait"]["children_cpu_seconds"]
        if backend == "spark-submit":
            assert submit_children > 1.0
        else:
            assert submit_children < 0.5
        results[backend] = [tuple(r.values()) for r in pq.read_table(m["result"]).to_pylist()]
        assert_same_rows(results[backend], ref, ordered=True, label=f"q4 via {backend}")
    assert results["spark-connect"] == results["spark-submit"]
