"""Four queries end to end across several hosts' worth of parts: Airflow on the CeleryExecutor
with two workers, the state and the lake in an S3-compatible server, Spark with two workers.

One cluster (``iqp_dev.cluster``) for the module: PostgreSQL as the metadata DB, Redis as the
Celery broker and two Celery workers; a Spark standalone master and two workers, and a Spark
Connect server on that master; Airflow's scheduler, triggerer, dag-processor and api-server as
real processes. The state store is on moto's S3 server (``s3://``, :mod:`iqp_dev.s3`), and
Spark writes every partial and result there through its S3A connector
(:func:`iqp_dev.s3a.s3a_spark_conf`): no partial crosses a local path. Four DAGs share one live
window:

* ``iqp_cq2``, the example DAG file itself (``dags/iqp_cq2.py``): CQ2 as SQL text, on
  spark-submit against the standalone master with the package shipped to the executors;
* ``iqp_events_connect``: a user's SQL (a DISTINCT count, an average) over CSV files of their
  own that the test writes into the window, on the Connect server;
* ``iqp_q3_spark_submit`` and ``iqp_q3_spark_connect``: TPC-H Q3 from the catalogue, orders
  joined with lineitem (two streams of the same unit) and with the static customer table;
* ``iqp_shop``: a group of three queries over the same CSV files (``iqp_group``), whose
  batches are shared: one Connect job per batch writes a partial per query, the last batch
  and every query's merge run in one fused tail, and each query has its own final task,
  result, deadline, Deadline Alert and Asset.

The cost hints make the plan cut the window into more than one batch, so the final task
merges several partials. In the middle of the window, the Celery worker running a batch of
``iqp_cq2`` is killed (SIGKILL, its whole process group) while the batch's spark-submit
runs: the scheduler finds the task's heartbeat gone and retries it on the other worker from
the same claim. Each result must equal DuckDB's over the input that landed, every unit claimed
once; the spark-submit jobs must have run on the standalone master, the tasks on both Celery
workers, and nothing may be left under a local state directory.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from iqp_dev.cluster import cluster_env  # noqa: E402
from tests.support.events import write_csv_file  # noqa: E402
from tests.support.reference import assert_same_rows, duckdb_reference, read_parquet_dir  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

W = 60            # window length, s
UNITS = 6         # units in the window, published at a fixed rate
OFFSET = 150      # deadline after the window's end, s
LEAD = 100        # the window opens this long after the cluster starts (start-up takes ~50 s)
# How long past the deadline a run may still take: this module checks results, not
# deadlines. Two spark-submit DAGs each start a driver and an executor JVM per batch, beside
# the Connect server, the master, the workers, Airflow and the rest of the suite
# (scripts/test.sh) on 2 cores, where one batch's spark-submit can take minutes; and a
# killed worker's tasks wait out their heartbeat before they are retried.
SLACK = 900
# Hints that make one batch of all units too slow for the deadline: the plan cuts two or more.
COST = {"IQP_COST_PER_UNIT": "20", "IQP_COST_PER_BATCH": "15"}
DAGS = {  # dag id -> (query, backend, state store under the bucket's prefix)
    "iqp_cq2": ("cq2", "spark-submit", "submit"),
    "iqp_events_connect": ("events", "spark-connect", "connect"),
    "iqp_q3_spark_submit": ("q3", "spark-submit", "submit"),
    "iqp_q3_spark_connect": ("q3", "spark-connect", "connect"),
}
GROUP = "iqp_shop"  # the group DAG, on the Connect state store
GROUP_SQL = {
    "shop_revenue": "SELECT country, sum(amount) AS revenue, count(*) AS n FROM events GROUP BY country",
    "shop_buyers": "SELECT country, count(DISTINCT user_id) AS buyers FROM events GROUP BY country",
    "shop_basket": "SELECT country, avg(qty) AS basket, max(amount) AS top FROM events WHERE amount IS NOT NULL "
                   "GROUP BY country",
}
GROUP_DEADLINES = {"shop_revenue": 80, "shop_buyers": 80, "shop_basket": 110}  # s after the window's end
VICTIM = "iqp_cq2"  # the DAG whose batch's worker is killed
EVENTS_SQL = ("SELECT country, count(*) AS n, sum(amount) AS revenue, avg(qty) AS avg_qty, "
              "count(DISTINCT user_id) AS users FROM events WHERE amount IS NOT NULL GROUP BY country")
# A task whose worker was killed is failed by the scheduler once its heartbeat is this old.
HEARTBEAT_S = 45


def wid(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y%m%dT%H%M%S")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


def ancestors(pid: int, table: dict[int, dict]) -> list[int]:
    out = []
    while pid in table and pid not in out:
        out.append(pid)
        pid = table[pid]["ppid"]
    return out


def kill_a_batchs_worker(cl, run_id: str, ws, stop: threading.Event) -> dict:
    """Once a batch task of :data:`VICTIM` has run its spark-submit for 3 s, SIGKILL the
    Celery worker that runs it (its process group); what was killed, and the batch's claim then."""
    from iqp_dev import procs

    af = cl.airflow
    while not stop.is_set():
        for ti in af.task_instances(VICTIM, run_id):
            if ti["task_id"] != "batch.submit" or ti["state"] != "running":
                continue
            table = procs.live()
            tasks = cl.task_pids(ti["id"])
            jvms = [p for p in cl.spark_submit_pids() if set(ancestors(p, table)) & set(tasks)]
            if not tasks or not jvms:
                continue
            time.sleep(3)
            workers = {cl.pid(c): c for c in cl.celery_workers}
            owner = next((workers[a] for a in ancestors(tasks[0], procs.live()) if a in workers), None)
            if owner is None or not cl.task_pids(ti["id"]):  # the batch ended meanwhile
                continue
            batch = ws.doc("plan")["batches"][ti["map_index"]]["index"]  # the batch the mapped task runs
            claim = ws.claim_of(batch)
            cl.kill(owner)
            return {"worker": owner, "ti_id": ti["id"], "map_index": ti["map_index"], "batch": batch,
                    "claim": claim, "at": time.time(), "jvms": jvms}
        time.sleep(1)
    return {}


@pytest.fixture(scope="module")
def window(tmp_path_factory, s3_server):
    """Run the one window of all four DAGs on one cluster; return what the tests check."""
    from airflow_iqp.inputs.tpch import generate
    from airflow_iqp.store import open_store
    from iqp_dev.s3 import CREDENTIALS
    from iqp_dev.s3a import s3a_spark_conf

    tmp = tmp_path_factory.mktemp("cluster")
    tpch, data, dags = tmp / "tpch", tmp / "data", tmp / "dags"
    generate(0.01, UNITS, tpch)
    dags.mkdir()
    shutil.copy(ROOT / "tests" / "e2e" / "dags_hinted" / "iqp_cq2.py", dags)  # the demo DAG, with a cost hint
    shutil.copy(Path(__file__).parent / "dags" / "iqp_cluster_e2e.py", dags)
    state = s3_server.bucket("lake") + "/state"
    t0 = time.time()
    start = (int(t0 + LEAD) // 10) * 10
    env = {"IQP_DATA": str(data), "IQP_ANCHOR": iso(start), "IQP_END": iso(start + 1), "IQP_WINDOW_S": str(W),
           "IQP_UNITS": str(UNITS), "IQP_DEADLINE_S": str(OFFSET), "IQP_DEADLINE_ALERT": "0", **COST,
           "T_STATE": state, "T_STATIC": str(tpch / "static"), "IQP_GROUP_SQL": json.dumps(GROUP_SQL),
           "IQP_GROUP_DEADLINES": json.dumps(GROUP_DEADLINES)}
    # A task the killed worker had taken from Redis but not started stays queued until
    # task_queued_timeout (600 s by default; Redis gives it back only after a day).
    config = {"IQP__STATE_DIR": state + "/submit", "SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_S),
              "SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10", "SCHEDULER__TASK_QUEUED_TIMEOUT": "180",
              "SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "30"}
    landing = data / "landing" / "cq2" / wid(start)
    events = data / "landing" / "events" / wid(start)
    events.mkdir(parents=True)
    out: dict = {"data": data, "tpch": tpch, "start": start, "landing": landing, "events": events, "state": state}
    spark_conf = s3a_spark_conf(s3_server.endpoint, CREDENTIALS["AWS_ACCESS_KEY_ID"],
                                CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    with cluster_env(dags, extra_env=env, config=config, executor="celery", celery_workers=2, spark_workers=2,
                     spark_conf=spark_conf) as cl:
        out["startup"] = cl.timings["startup"]
        out["home"] = cl.airflow.home
        for dag_id in (*DAGS, GROUP):
            cl.airflow.wait_for_dag(dag_id)
            cl.airflow.unpause(dag_id)
        time.sleep(max(0.0, start - time.time()))
        replay = subprocess.Popen(
            [str(Path(sys.executable).with_name("airflow-iqp")), "replay", "--from", str(tpch), "--to", str(landing),
             "--rate", str(UNITS / W), "--window", str(W)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rng = random.Random(7)

        def write_all() -> None:
            for i in range(UNITS):
                time.sleep(max(0.0, start + (i + 0.5) * W / UNITS - time.time()))
                write_csv_file(events, rng)

        writer = threading.Thread(target=write_all, daemon=True)
        writer.start()
        runs = {d: cl.airflow.window_run(d, start, timeout=60) for d in (*DAGS, GROUP)}
        # The scheduler writes a run's deadlines as it creates the run, and drops them once it is over.
        out["deadlines"] = cl.airflow.sql(
            "SELECT r.dag_id, a.name, d.deadline_time FROM deadline d JOIN dag_run r ON r.id = d.dagrun_id "
            "JOIN deadline_alert a ON a.id = d.deadline_alert_id WHERE r.dag_id = ?", (GROUP,))
        victim_ws = open_store(state + "/" + DAGS[VICTIM][2]).window(DAGS[VICTIM][0], wid(start))
        stop = threading.Event()
        timer = threading.Timer(W + OFFSET, stop.set)
        timer.start()
        out["fault"] = kill_a_batchs_worker(cl, runs[VICTIM], victim_ws, stop)
        timer.cancel()
        _, err = replay.communicate(timeout=W + 60)
        assert replay.returncode == 0, err[-2000:]
        writer.join(timeout=W)
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
        out["asset_events"] = cl.airflow.sql(
            "SELECT a.name, e.source_dag_id, e.source_task_id FROM asset_event e JOIN asset a ON a.id = e.asset_id")

        out["worker_logs"] = {c: cl.log_path(c).read_text(errors="replace") for c in cl.celery_workers}
        out["root"] = cl.root
        out["components"] = cl.components
        if out["fault"]:  # the killed worker comes back through the harness and answers its broker again
            out["restart_s"] = cl.restart(out["fault"]["worker"])
            out["ping"] = cl.airflow.celery_ping()
            out["hostnames"] = sorted(cl.airflow.celery_hostname(c) for c in cl.celery_workers)
        out["all_pids"] = [p for p in cl.pids().values() if p] + [p["pid"] for p in cl.processes()]
        out["local_dirs"] = [str(p) for base in (cl.root, data) for p in base.rglob("*")
                             if p.name in ("partials", "claims", "result") or p.name.startswith("batch-0")]
        out["elapsed"] = time.time() - t0
        if out["fault"]:
            written = victim_ws.metrics(out["fault"]["batch"]).get("written_at")
            out["recovery_s"] = None if written is None else written - out["fault"]["at"]
    print(f"[cluster e2e] start-up {out['startup']:.0f} s, module {out['elapsed']:.0f} s, killed "
          f"{out['fault'].get('worker')} mid-batch; the batch's partial written again "
          f"{out.get('recovery_s') or float('nan'):.0f} s later", file=sys.stderr)
    return out


def window_state(run: dict, dag_id: str):
    from airflow_iqp.store import open_store

    query, _backend, store = DAGS[dag_id]
    ws = open_store(run["state"] + "/" + store).window(query, wid(run["start"]))
    return ws, ws.claims(), ws.doc("plan"), ws.doc("report")


def events_reference(files: list[Path], sql: str = EVENTS_SQL) -> list[tuple]:
    import duckdb

    con = duckdb.connect()
    listed = ", ".join(f"'{f}'" for f in files)
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_csv([{listed}], header = true, "
                f"columns = {{'user_id': 'BIGINT', 'country': 'VARCHAR', 'amount': 'DOUBLE', 'qty': 'BIGINT'}})")
    return con.execute(sql).fetchall()


@pytest.mark.parametrize("dag_id", list(DAGS))
def test_window_result_equals_duckdb_with_every_unit_claimed_once(window, dag_id):
    query, backend, _store = DAGS[dag_id]
    assert window["runs"][dag_id]["state"] == "success", (
        [(t["task_id"], t["map_index"], t["state"]) for t in window["tis"][dag_id]],
        {k: v for k, v in window["failed_logs"].items() if k[0] == dag_id})
    ws, claims, plan, report = window_state(window, dag_id)
    claimed = [u for c in claims.values() for u in c["units"]]
    assert len(claimed) == len(set(claimed)), "a unit was claimed twice"
    assert len(plan["batches"]) >= 2  # several partials merged by the final task
    manifest = ws.manifest()
    assert manifest["backend"] == report["backend"] == backend and not report["partial"]
    # Spark wrote every partial and the result into the object store through S3A.
    assert manifest["partials"] and all(p.startswith("s3a://") for p in manifest["partials"] + [manifest["result"]])
    table = read_parquet_dir(manifest["result"])
    rows = [tuple(r.values()) for r in table.to_pylist()]
    if query == "events":
        files = sorted(p for p in window["events"].iterdir() if p.suffix == ".csv")
        assert len(files) == UNITS and sorted(claimed) == sorted(p.name for p in files), claimed
        ref = events_reference(files)
    else:
        landed = sorted(p for p in window["landing"].iterdir() if p.is_dir() and not p.name.startswith("."))
        assert sorted(claimed) == [u.name for u in landed] and len(landed) == UNITS
        cols, ref = duckdb_reference(query, landed, window["tpch"] / "static")
        assert table.column_names == cols
    assert len(ref) > 0
    assert_same_rows(rows, ref, ordered=query == "q3", label=f"{dag_id} {ws.window_id}")


def test_a_batch_whose_celery_worker_was_killed_ran_again_on_the_other_from_the_same_claim(window):
    fault = window["fault"]
    assert fault, "no batch of the victim DAG ran its spark-submit long enough to kill its worker"
    assert fault["claim"] and fault["claim"]["units"], fault
    ws, claims, _plan, _report = window_state(window, VICTIM)
    batch = fault["batch"]
    assert claims[batch] == fault["claim"]  # the retry claimed nothing new: the same units, the same claim
    ti = next(t for t in window["tis"][VICTIM] if t["task_id"] == "batch.submit" and t["map_index"] == fault["map_index"])
    assert ti["state"] == "success" and ti["try_number"] >= 2, ti
    other = next(c for c in window["worker_logs"] if c != fault["worker"])
    logs = window["worker_logs"]
    # The killed try ran on the killed worker; the try that succeeded, on the other.
    assert fault["ti_id"] in logs[fault["worker"]] and ti["id"] != fault["ti_id"]
    assert ti["id"] in logs[other] and ti["id"] not in logs[fault["worker"]]
    assert ws.metrics(batch)["written_at"] > fault["at"]


def test_the_tasks_ran_on_both_celery_workers(window):
    ids = {t["id"] for tis in window["tis"].values() for t in tis if t["state"] == "success"}
    ran = {c: {i for i in ids if i in text} for c, text in window["worker_logs"].items()}
    assert len(ran) == 2 and all(ran.values()), {c: len(v) for c, v in ran.items()}


def test_the_cluster_ran_redis_two_celery_workers_and_two_spark_workers_and_left_no_process(window):
    from airflow_iqp.cli.supervisor import alive

    assert window["components"] == ("postgres", "redis", "spark-master", "spark-worker", "spark-worker-2",
                                    "spark-connect", "scheduler", "triggerer", "dag-processor", "api-server",
                                    "celery-worker-1", "celery-worker-2")
    assert window.get("ping") and window["ping"] == window["hostnames"], window.get("ping")
    deadline = time.monotonic() + 10
    while any(alive(p) for p in window["all_pids"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert window["all_pids"] and [p for p in window["all_pids"] if alive(p)] == []


def test_nothing_is_left_under_a_local_state_directory(window):
    assert not (Path(window["home"]) / "iqp").exists()
    assert window["local_dirs"] == []


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
    assert rows == {(d, "success") for d in (*DAGS, GROUP)}


def test_a_group_of_three_queries_shares_its_batches_and_each_keeps_its_own_result_alert_and_asset(window):
    from airflow_iqp.store import open_store

    run, tis = window["runs"][GROUP], window["tis"][GROUP]
    assert run["state"] == "success", ([(t["task_id"], t["map_index"], t["state"]) for t in tis],
                                       {k: v for k, v in window["failed_logs"].items() if k[0] == GROUP})
    store = open_store(window["state"] + "/connect")
    group = store.window("shop", wid(window["start"]))
    plan, claims = group.doc("plan"), group.claims()
    assert "shared by" in plan["models"], plan["models"]
    edf = sorted(GROUP_SQL, key=lambda q: (GROUP_DEADLINES[q], q))  # the order the tail merges them in
    assert len(plan["batches"]) >= 2 and all(b["members"] == edf for b in plan["batches"])
    # One batch task per batch, not per query, but the last, which the fused tail's one task
    # runs with every member's merge; every unit claimed once, by the group.
    submits = [t for t in tis if t["task_id"] == "batch.submit" and t["state"] == "success"]
    ran = sorted(b for b, c in claims.items() if c["units"])
    assert 1 <= len(submits) < len(ran) and [t["state"] for t in tis if t["task_id"] == "tail"] == ["success"]
    claimed = [u for c in claims.values() for u in c["units"]]
    files = sorted(p for p in window["events"].iterdir() if p.suffix == ".csv")
    assert sorted(claimed) == sorted(p.name for p in files) and len(claimed) == len(set(claimed)) == UNITS
    end = window["start"] + W
    for q, sql in GROUP_SQL.items():
        ws = store.window(q, wid(window["start"]))
        assert ws.claims() == claims  # the group's claims, taken as the query's own
        assert not ws.has_partial(ran[-1])  # the tail's batch is merged, never written
        manifest, report = ws.manifest(), ws.doc("report")
        assert manifest["batches"] == ran
        assert manifest["partials"] and all(p.startswith("s3a://") for p in manifest["partials"])
        assert report["deadline_ts"] == pytest.approx(end + GROUP_DEADLINES[q])
        rows = [tuple(r.values()) for r in read_parquet_dir(manifest["result"]).to_pylist()]
        assert_same_rows(rows, events_reference(files, sql), ordered=False, label=q)
    # Each query's own Asset event, from its own final task; its own deadline, from its own alert.
    events = {(e["name"], e["source_dag_id"], e["source_task_id"]) for e in window["asset_events"]}
    assert {(f"iqp_{q}_result", GROUP, f"final_{q}") for q in GROUP_SQL} <= events
    deadlines = {d["name"]: d["deadline_time"] for d in window["deadlines"]}
    assert set(deadlines) == {f"iqp-window-deadline-{q}" for q in GROUP_SQL}
    for q, offset in GROUP_DEADLINES.items():
        when = deadlines[f"iqp-window-deadline-{q}"]
        when = when if isinstance(when, datetime) else datetime.fromisoformat(str(when))
        assert when.timestamp() == pytest.approx(end + offset, abs=1)
