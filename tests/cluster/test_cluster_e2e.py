"""CQ2 and a join query end to end on the cluster harness, on both backends.

One cluster (``iqp_dev.cluster``) for the module: PostgreSQL as the metadata DB, a Spark
standalone master and worker, a Spark Connect server on that master, and Airflow's
scheduler, triggerer, dag-processor and api-server as real processes. Four DAGs share one
live window into which ``airflow-iqp replay`` publishes TPC-H units at a fixed rate:

* ``iqp_cq2``, the example DAG file itself (``dags/iqp_cq2.py``), on spark-submit against the
  standalone master with the package shipped to the executors;
* ``iqp_cq2_connect``, the same query on the Connect server;
* ``iqp_q3_spark_submit`` and ``iqp_q3_spark_connect``: TPC-H Q3, orders joined with lineitem
  (two streams of the same unit) and with the static customer table.

The cost hints make the plan cut the window into more than one batch, so the final task
merges several partials. Each result must equal DuckDB's over the units that landed, every
unit claimed once; the spark-submit jobs must have run on the standalone master.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from iqp_dev.cluster import cluster_env  # noqa: E402
from tests.support.reference import assert_same_rows, duckdb_reference  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

W = 60            # window length, s
UNITS = 6         # units in the window, published at a fixed rate
OFFSET = 150      # deadline after the window's end, s
LEAD = 100        # the window opens this long after the cluster starts (start-up takes ~50 s)
# How long past the deadline a run may still take: this module checks results, not
# deadlines. Two spark-submit DAGs each start a driver and an executor JVM per batch, beside
# the Connect server, the master, the worker and Airflow, on 2 cores: with the other test
# lane's Spark tests running too, a batch can take minutes from its claim to its partial.
SLACK = 600
# Hints that make one batch of all units too slow for the deadline: the plan cuts two or more.
COST = {"IQP_COST_PER_UNIT": "20", "IQP_COST_PER_BATCH": "15"}
DAGS = {  # dag id -> (query, backend, state dir under the data dir)
    "iqp_cq2": ("cq2", "spark-submit", "state/submit"),
    "iqp_cq2_connect": ("cq2", "spark-connect", "state/connect"),
    "iqp_q3_spark_submit": ("q3", "spark-submit", "state/submit"),
    "iqp_q3_spark_connect": ("q3", "spark-connect", "state/connect"),
}


def wid(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y%m%dT%H%M%S")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    """Run the one window of all four DAGs on one cluster; return what the tests check."""
    from airflow_iqp.inputs.tpch import generate

    tmp = tmp_path_factory.mktemp("cluster")
    tpch, data, dags = tmp / "tpch", tmp / "data", tmp / "dags"
    generate(0.01, UNITS, tpch)
    dags.mkdir()
    shutil.copy(ROOT / "tests" / "e2e" / "dags_hinted" / "iqp_cq2.py", dags)  # the demo DAG, with a cost hint
    shutil.copy(Path(__file__).parent / "dags" / "iqp_cluster_e2e.py", dags)
    t0 = time.time()
    start = (int(t0 + LEAD) // 10) * 10
    env = {"IQP_DATA": str(data), "IQP_ANCHOR": iso(start), "IQP_END": iso(start + 1), "IQP_WINDOW_S": str(W),
           "IQP_UNITS": str(UNITS), "IQP_DEADLINE_S": str(OFFSET), "IQP_DEADLINE_ALERT": "0", **COST,
           "T_STATE": str(data / "state"), "T_STATIC": str(tpch / "static")}
    landing = data / "landing" / "cq2" / wid(start)
    out: dict = {"data": data, "tpch": tpch, "start": start, "landing": landing}
    with cluster_env(dags, extra_env=env, config={"IQP__STATE_DIR": str(data / "state" / "submit")}) as cl:
        out["startup"] = cl.timings["startup"]
        for dag_id in DAGS:
            cl.airflow.wait_for_dag(dag_id)
            cl.airflow.unpause(dag_id)
        time.sleep(max(0.0, start - time.time()))
        replay = subprocess.run(
            [str(Path(sys.executable).with_name("airflow-iqp")), "replay", "--from", str(tpch), "--to", str(landing),
             "--rate", str(UNITS / W), "--window", str(W)], check=False, capture_output=True, text=True,
            timeout=W + 60)
        assert replay.returncode == 0, replay.stderr[-2000:]
        runs = {d: cl.airflow.window_run(d, start, timeout=60) for d in DAGS}
        out["runs"] = {d: cl.airflow.wait_for_run(d, r, timeout=W + OFFSET + SLACK, expect_success=False)
                       for d, r in runs.items()}
        out["tis"] = {d: cl.airflow.task_instances(d, r) for d, r in runs.items()}
        out["failed_logs"] = {}
        for d, r in runs.items():
            for t in out["tis"][d]:
                if t["state"] == "failed":
                    log = cl.airflow.task_log(d, r, t["task_id"], t["try_number"], t["map_index"])
                    out["failed_logs"][(d, t["task_id"], t["map_index"])] = "\n".join(log.splitlines()[-40:])
        if any(r["state"] != "success" for r in out["runs"].values()):
            cl.keep = True  # the cluster's directory and every process log stay for a look
        final = next((t for t in out["tis"]["iqp_cq2"] if t["task_id"] == "final" and t.get("try_number")), None)
        out["submit_log"] = cl.airflow.task_log("iqp_cq2", runs["iqp_cq2"], "final") if final else ""
        out["master"] = cl.master_state()
        out["master_url"] = cl.master_url
        out["runs_rows"] = cl.airflow.sql("SELECT dag_id, state FROM dag_run WHERE run_type = ?", ("scheduled",))
        out["elapsed"] = time.time() - t0
    print(f"[cluster e2e] start-up {out['startup']:.0f} s, module {out['elapsed']:.0f} s", file=sys.stderr)
    return out


def window_state(run: dict, dag_id: str):
    from airflow_iqp.store import open_store

    query, _backend, state = DAGS[dag_id]
    ws = open_store(run["data"] / state).window(query, wid(run["start"]))
    return ws, ws.claims(), ws.doc("plan"), ws.doc("report")


@pytest.mark.parametrize("dag_id", list(DAGS))
def test_window_result_equals_duckdb_with_every_unit_claimed_once(window, dag_id):
    query, backend, _state = DAGS[dag_id]
    assert window["runs"][dag_id]["state"] == "success", (
        [(t["task_id"], t["map_index"], t["state"]) for t in window["tis"][dag_id]],
        {k: v for k, v in window["failed_logs"].items() if k[0] == dag_id})
    ws, claims, plan, report = window_state(window, dag_id)
    claimed = [u for c in claims.values() for u in c["units"]]
    assert len(claimed) == len(set(claimed)), "a unit was claimed twice"
    landed = sorted(p for p in window["landing"].iterdir() if p.is_dir() and not p.name.startswith("."))
    assert sorted(claimed) == [u.name for u in landed] and len(landed) == UNITS
    assert len(plan["batches"]) >= 2  # several partials merged by the final task
    manifest = ws.manifest()
    assert manifest["backend"] == report["backend"] == backend and not report["partial"]
    import pyarrow.parquet as pq

    table = pq.read_table(manifest["result"])
    rows = [tuple(r.values()) for r in table.to_pylist()]
    cols, ref = duckdb_reference(query, landed, window["tpch"] / "static")
    assert table.column_names == cols
    assert len(ref) > 0
    assert_same_rows(rows, ref, ordered=query == "q3", label=f"{dag_id} {ws.window_id}")


def test_spark_submit_jobs_ran_on_the_standalone_master_and_connect_served_from_it(window):
    master = window["master"]
    # Every spark-submit batch and final of the two spark-submit DAGs was an application of
    # the standalone master (the Connect server is one more, still running).
    submitted = sum(1 for d, (_q, b, _s) in DAGS.items() if b == "spark-submit"
                    for t in window["tis"][d] if t["task_id"] in ("batch.submit", "final") and t["state"] == "success")
    assert len(master["completedapps"]) >= submitted, (len(master["completedapps"]), submitted)
    assert [a["name"] for a in master["activeapps"]] == ["Spark Connect server"]
    assert window["master_url"] in window["submit_log"] and "--py-files" in window["submit_log"]


def test_metadata_db_is_postgresql(window):
    rows = {(r["dag_id"], r["state"]) for r in window["runs_rows"]}
    assert rows == {(d, "success") for d in DAGS}
