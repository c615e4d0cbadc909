"""The cluster harness on the CeleryExecutor: Redis, two Celery workers, two Spark workers.

One cluster (``iqp_dev.cluster.cluster_env(executor="celery", spark_workers=2)``) for the
module, on a DAG of one task mapped over six instances that each sleep a few seconds and
return the Celery hostname of the worker that ran it (``IQP_CELERY_WORKER``; the TaskInstance
``hostname`` is the machine's, the same for both workers). Each worker has two task slots
and the six instances are queued four at a time (``[core] parallelism``), so neither worker
can hold them all: both must run some. Then one worker is restarted through the harness,
and teardown must leave no process behind.
"""

from __future__ import annotations

import re
import socket
import sys
import textwrap
import time

import pytest

from airflow_iqp.cli.supervisor import alive
from iqp_dev.cluster import cluster_env

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAG_ID = "iqp_celery_spread"
N = 6          # mapped instances
NAP = 5        # seconds each sleeps
SLOTS = 2      # task slots per Celery worker

DAG = textwrap.dedent(f'''
    """{N} mapped instances that each sleep {NAP} s and say which Celery worker ran them."""
    from __future__ import annotations

    import os
    import socket
    import time

    import pendulum
    from airflow.sdk import dag, task


    @dag(dag_id="{DAG_ID}", schedule=None, start_date=pendulum.datetime(2025, 1, 1, tz="UTC"), catchup=False)
    def spread():
        @task(retries=0)
        def nap(i: int) -> dict:
            time.sleep({NAP})
            return {{"i": i, "worker": os.environ.get("IQP_CELERY_WORKER"), "hostname": socket.gethostname(),
                    "pid": os.getpid()}}

        nap.expand(i=list(range({N})))


    spread()
''')


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    dags = tmp_path_factory.mktemp("celery_dags")
    (dags / f"{DAG_ID}.py").write_text(DAG)
    out: dict = {}
    t0 = time.monotonic()
    with cluster_env(dags, executor="celery", celery_workers=2, celery_concurrency=SLOTS, spark_workers=2,
                     worker_cores=2, worker_memory="1g") as cl:
        af = cl.airflow
        out["startup"] = cl.timings["startup"]
        out["timings"] = dict(cl.timings)
        out["components"] = cl.components
        out["pids"] = cl.pids()
        out["env"] = {k: v for k, v in af.env.items() if k.startswith("AIRFLOW__C")}
        out["alive_spark_workers"] = len(cl.spark.listed("workers", "ALIVE"))
        out["hostnames"] = {c: af.celery_hostname(c) for c in cl.celery_workers}
        out["ping"] = af.celery_ping()
        af.wait_for_dag(DAG_ID)
        t_run = time.monotonic()
        run_id = af.trigger(DAG_ID)
        out["run"] = af.wait_for_run(DAG_ID, run_id, timeout=150)
        out["run_s"] = time.monotonic() - t_run
        out["tis"] = af.task_instances(DAG_ID, run_id)
        out["xcoms"] = {t["map_index"]: af.xcom(DAG_ID, run_id, "nap", map_index=t["map_index"])
                        for t in out["tis"]}
        out["worker_logs"] = {c: cl.log_path(c).read_text(errors="replace") for c in cl.celery_workers}
        # One worker restarted through the harness: a new process that answers a ping again.
        old = cl.pid("celery-worker-1")
        out["restart_s"] = cl.restart("celery-worker-1")
        out["restarted"] = (old, cl.pid("celery-worker-1"), af.celery_ping())
        out["all_pids"] = [p for p in cl.pids().values() if p] + [p["pid"] for p in cl.processes()]
    out["wall"] = time.monotonic() - t0
    print(f"[celery cluster] start-up {out['startup']:.0f} s ({out['timings']}), run {out['run_s']:.0f} s, "
          f"restart {out['restart_s']:.0f} s, module {out['wall']:.0f} s", file=sys.stderr)
    return out


def test_the_cluster_runs_redis_two_celery_workers_and_two_spark_workers(run):
    assert run["components"] == ("postgres", "redis", "spark-master", "spark-worker", "spark-worker-2",
                                 "spark-connect", "scheduler", "triggerer", "dag-processor", "api-server",
                                 "celery-worker-1", "celery-worker-2")
    assert all(run["pids"][c] for c in run["components"]), run["pids"]
    assert run["alive_spark_workers"] == 2
    env = run["env"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert re.fullmatch(r"redis://127\.0\.0\.1:\d+/0", env["AIRFLOW__CELERY__BROKER_URL"])
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql+psycopg2://airflow@127.0.0.1:")
    host = socket.gethostname()
    assert run["hostnames"] == {"celery-worker-1": f"w1@{host}", "celery-worker-2": f"w2@{host}"}
    assert run["ping"] == [f"w1@{host}", f"w2@{host}"]


def test_the_mapped_tasks_ran_on_both_celery_workers(run):
    assert run["run"]["state"] == "success"
    tis = run["tis"]
    assert [t["map_index"] for t in tis] == list(range(N)) and {t["state"] for t in tis} == {"success"}
    # The TaskInstance hostname is the machine's for both workers: it cannot tell them apart.
    assert len({t["hostname"] for t in tis}) == 1 and tis[0]["hostname"], [t["hostname"] for t in tis]
    workers = {i: x["worker"] for i, x in run["xcoms"].items()}
    assert set(workers.values()) == set(run["hostnames"].values()), workers
    # Each worker can hold two at once: neither ran more than what the other left it.
    assert all(list(workers.values()).count(w) <= N - SLOTS for w in run["hostnames"].values())
    # Each TI's workload shows up in the log of the worker its return value names, and only there.
    by_name = {h: c for c, h in run["hostnames"].items()}
    for t in tis:
        seen = [c for c, text in run["worker_logs"].items() if t["id"] in text]
        assert seen == [by_name[workers[t["map_index"]]]], (t["map_index"], t["id"], seen)


def test_a_celery_worker_restarts_through_the_harness(run):
    old, new, ping = run["restarted"]
    assert old and new and old != new and not alive(old)
    assert ping == sorted(run["hostnames"].values())


def test_teardown_leaves_no_process(run):
    assert run["all_pids"]
    deadline = time.monotonic() + 10
    while any(alive(p) for p in run["all_pids"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in run["all_pids"] if alive(p)] == []
