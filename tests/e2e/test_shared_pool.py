"""Three query DAGs share one Spark slot (an Airflow pool of 1): ready batches run in EDF order.

Real scheduler, dag-processor, triggerer and api-server: ``dag.test()`` ignores pools
and priorities, so it cannot show this. The DAGs run on one real Spark Connect server: the
order is the scheduler's, whichever backend the tasks then call, and six jobs in a row
take seconds there against half a minute each as spark-submit JVMs. The three DAGs
(CQ1, CQ2, CQ3) have one window each, opening at the same moment, with deadlines 180, 260 and 340 s after it ends; their
batch tasks and final aggregations carry ``weight_rule=EDFPriority``. All of their input
is there when the window opens, so all three batches are ready at once as the window ends
(a last batch does not fire before). A blocker task holds the pool's slot from before the
window opens until well after it ends (a cluster busy with another job), so every
contender is queued before the slot frees, and the order is the scheduler's choice by
priority weight, not by who asked first.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from iqp_dev.local_airflow import airflow_env  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

W = 30
UNITS = 30
BUSY_AFTER_END = 40   # s the blocker holds the slot past the window's end: the sensors fire
                      # at the end, their tasks claim, and the three batches queue for the slot
OFFSETS = {"cq3": 340, "cq1": 180, "cq2": 260}   # deliberately not in EDF order here

DAGS = textwrap.dedent('''
    from datetime import datetime, timedelta
    import time

    from airflow.sdk import DAG
    from airflow.providers.standard.operators.python import PythonOperator

    from airflow_iqp.dag_factory import iqp_dag
    from airflow_iqp.backends import SparkConnect
    from airflow_iqp.options import Algorithm1, Arrival

    ANCHOR = datetime.fromisoformat("{anchor}")
    for query, offset in {offsets!r}.items():
        globals()["iqp_" + query] = iqp_dag(
            query=query,
            streams="{data}/landing/" + query + "/{{{{ data_interval_start | ts_nodash }}}}",
            static="{data}/tpch/static",
            window=timedelta(seconds={window}),
            deadline_offset=timedelta(seconds=offset),
            arrival=Arrival(units={units}),
            cut=Algorithm1(cost_hint={{"kind": "linear", "per_unit": 0.1, "per_batch": 25}}),
            backend=SparkConnect(pool="spark", weight_rule="airflow_iqp.priority.EDFPriority"),
            anchor=ANCHOR,
            end_date=ANCHOR + timedelta(seconds=1),   # exactly one window
            max_active_runs=1,
        )

    with DAG("blocker", schedule=None, start_date=ANCHOR):
        PythonOperator(task_id="busy", python_callable=lambda: time.sleep({busy}), pool="spark")
''')


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from airflow_iqp.inputs.tpch import generate

    from airflow_iqp.cli.dev import free_port
    from airflow_iqp.spark.connect import start_server, stop_server

    data = tmp_path_factory.mktemp("pool")
    generate(0.01, UNITS, data / "tpch")
    port = free_port()
    start_server(port, base=data / "connect", driver_memory="1g")
    try:
        return run_window(data, port)
    finally:
        stop_server(port, base=data / "connect")


def run_window(data: Path, port: int) -> dict:
    anchor = (int(time.time()) // 10) * 10 + 90
    wid = datetime.fromtimestamp(anchor, timezone.utc).strftime("%Y%m%dT%H%M%S")
    for query in OFFSETS:
        shutil.copytree(data / "tpch" / "units", data / "landing" / query / wid)
    dags = data / "dags"
    dags.mkdir()
    (dags / "shared_pool.py").write_text(DAGS.format(
        anchor=datetime.fromtimestamp(anchor, timezone.utc).isoformat(), offsets=OFFSETS, data=data, units=UNITS,
        window=W, busy=W + BUSY_AFTER_END))
    env = {"AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1",
                                                            "port": port}),
           "AIRFLOW__IQP__STATE_DIR": str(data / "state")}
    out = {"anchor": anchor, "data": data, "wid": wid}
    with airflow_env(dags, extra_env=env) as af:
        af.api("POST", "/api/v2/pools", {"name": "spark", "slots": 1})
        for dag_id in ("blocker", *(f"iqp_{q}" for q in OFFSETS)):
            af.wait_for_dag(dag_id)
        time.sleep(max(0.0, anchor - 5 - time.time()))
        blocker = af.trigger("blocker")
        for q in OFFSETS:
            af.unpause(f"iqp_{q}")
        out["runs"] = {}
        for q in OFFSETS:
            dag_id = f"iqp_{q}"
            deadline = time.time() + W + max(OFFSETS.values()) + 180
            run = None
            while run is None and time.time() < deadline:
                run = next((r for r in af.dag_runs(dag_id) if r["run_type"] == "scheduled"), None)
                time.sleep(2)
            assert run is not None, f"no run of {dag_id}"
            out["runs"][q] = {"run": af.wait_for_run(dag_id, run["dag_run_id"], timeout=W + max(OFFSETS.values()) + 300),
                              "tis": af.task_instances(dag_id, run["dag_run_id"])}
        out["blocker"] = af.task_instances("blocker", blocker)
    return out


def test_three_dags_run_their_batches_in_edf_order_and_meet_their_deadlines(runs):
    blocker_end = ts(runs["blocker"][0]["end_date"])
    submits = {}
    for q, r in runs["runs"].items():
        assert r["run"]["state"] == "success", (q, r["run"])
        (submit,) = [t for t in r["tis"] if t["task_id"] == "batch.submit"]
        submits[q] = ts(submit["start_date"])
        assert submits[q] >= blocker_end - 1, "a batch ran while the blocker held the only slot"
        final = next(t for t in r["tis"] if t["task_id"] == "final")
        deadline = runs["anchor"] + W + OFFSETS[q]
        assert ts(final["end_date"]) <= deadline, (q, ts(final["end_date"]) - deadline)
    by_start = sorted(submits, key=submits.get)
    by_deadline = sorted(OFFSETS, key=OFFSETS.get)
    assert by_start == by_deadline, (by_start, {q: submits[q] - runs["anchor"] for q in submits})
    # The final aggregations (not mapped, weighted when the run is created) carry EDF weights too.
    finals = {q: next(t for t in r["tis"] if t["task_id"] == "final")["priority_weight"]
              for q, r in runs["runs"].items()}
    assert [finals[q] for q in by_deadline] == sorted(finals.values(), reverse=True) and min(finals.values()) > 1, finals
    # One slot: no two Spark tasks ever overlapped.
    spans = sorted((ts(t["start_date"]), ts(t["end_date"])) for r in runs["runs"].values() for t in r["tis"]
                   if t["task_id"] in ("batch.submit", "final"))
    assert all(a[1] <= b[0] + 0.5 for a, b in zip(spans, spans[1:])), spans
