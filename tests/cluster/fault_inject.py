"""The process faults of the fault suite, each struck at the batch it is about.

:func:`phase1` and :func:`phase2` run in the test's thread while the phase's windows run
(``fault_scenario._phase``). Each fault records in ``run.faults[n]`` when it struck and what
(pids, the batch, the claim as it was), for :mod:`tests.cluster.fault_checks`. A fault that
could not be struck (its moment never came) is recorded in ``run.errors``.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_iqp.cli.supervisor import alive as _alive, send

WAIT_S = 150.0  # the longest a fault waits for its moment


def wait_for(cond: Callable[[], Any], timeout: float = WAIT_S, poll: float = 0.1) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(poll)
    return None


def pausing(run, dag: str, index: int) -> bool:
    """The batch wrote its partial to its temporary directory (a hidden sibling of its place:
    ``.batch-NNNN.tmp-*`` in a local store, ``.batch-NNNN.v*`` in an object store) and pauses
    before it commits it."""
    import fsspec

    from airflow_iqp.paths import is_local
    from airflow_iqp.store.objects import fs_and_path

    partial = run.window(dag).partial_uri(index)
    fs, path = (fsspec.filesystem("file"), partial) if is_local(partial) else fs_and_path(partial)
    parent, name = path.rsplit("/", 1)
    return any(fs.exists(f"{p}/_SUCCESS") for p in fs.glob(f"{parent}/.{name}.*"))


def ti_of(run, dag: str, task_id: str, map_index: int = -1) -> dict | None:
    for t in run.cluster.airflow.task_instances(run.dag_id(dag), run.run_id(dag)):
        if t["task_id"] == task_id and t["map_index"] == map_index:
            return t
    return None


def claim_of(run, dag: str, index: int) -> dict | None:
    """Batch ``index``'s claim as it is now, or None before it claimed."""
    return run.window(dag).claim_of(index)


def _record(run, n: int, **what) -> dict:
    run.faults[n] = {"at": time.time(), **what}
    return run.faults[n]


def _missed(run, n: int, why: str) -> None:
    run.errors.append(f"fault {n}: {why}")


# ------------------------------------------------------------------------------ phase 1

def phase1(run) -> None:
    cl = run.cluster
    af = cl.airflow
    # 3. the triggerer, while f_conn's batch sensors are deferred.
    deferred = wait_for(lambda: sum(t["task_id"] == "batch.wait" and t["state"] == "deferred"
                                    for t in af.task_instances(run.dag_id("f_conn"), run.run_id("f_conn"))) >= 3,
                        timeout=60, poll=0.5)
    if not deferred:
        _missed(run, 3, "f_conn's sensors never were all deferred")
    old = cl.pid("triggerer")
    fault = _record(run, 3, component="triggerer", pid=old, jobs_before=_triggerer_jobs(af))
    cl.kill("triggerer")
    time.sleep(2.0)
    cl.start("triggerer")
    fault["restarted_at"] = time.time()
    fault["new_pid"] = cl.pid("triggerer")
    threading.Thread(target=_watch_triggers, args=(run, fault), daemon=True).start()

    # 2. f_conn's batch 1: its task process, while the batch pauses before its rename.
    # The task instance's id (its task process's title) is asked for while the batch runs: the
    # API can take longer than the pause to answer on a busy machine.
    ti = wait_for(lambda: next((t for t in [ti_of(run, "f_conn", "batch.submit", 0)]
                                if t and t["state"] == "running"), None), timeout=120, poll=0.3)
    if ti and wait_for(lambda: pausing(run, "f_conn", 1), timeout=180):
        pids = cl.task_pids(ti["id"])
        fault = _record(run, 2, batch=1, ti=ti, pids=pids, claim=claim_of(run, "f_conn", 1))
        for pid in pids:
            cl_kill(pid)
        if not pids:
            _missed(run, 2, f"no task process of f_conn's batch 1 ({ti})")
    else:
        _missed(run, 2, "f_conn's batch 1 never paused before its rename")

    # 4. the scheduler, between f_conn's batches 2 and 3, with no task running (or, if that moment
    # never comes, 15 s before the window's end), down for 8 s. Killed, it takes its task
    # processes with it: where the faults before ran late (a slow machine) and the phase's
    # other windows are open, it waits for a moment when no task of any DAG runs.
    ws = run.window("f_conn")
    spec = run.specs["f_conn"]
    if not wait_for(lambda: ws.metrics(1) and ws.metrics(2) and not cl.task_pids(),
                    timeout=max(5.0, spec["anchor"] + spec["window"] - 15 - time.time()), poll=0.3):
        wait_for(lambda: not cl.task_pids(), timeout=120, poll=0.2)
    fault = _record(run, 4, component="scheduler", pid=cl.pid("scheduler"), tasks_running=cl.task_pids())
    cl.kill("scheduler")
    time.sleep(8.0)
    cl.start("scheduler")
    fault["restarted_at"] = time.time()


def _triggerer_jobs(af) -> list[int]:
    return [r["id"] for r in af.sql("SELECT id FROM job WHERE job_type = 'TriggererJob' ORDER BY id")]


def _watch_triggers(run, fault: dict) -> None:
    """When every trigger is held by the restarted triggerer (fault 3's recovery)."""
    af = run.cluster.airflow

    def taken_over() -> bool:
        new = set(_triggerer_jobs(af)) - set(fault["jobs_before"])
        rows = af.sql("SELECT id, triggerer_id FROM trigger")
        return bool(new) and bool(rows) and all(r["triggerer_id"] in new for r in rows)

    if wait_for(taken_over, timeout=120, poll=0.5):
        fault["recovered_at"] = time.time()


def cl_kill(pid: int, sig: int = signal.SIGKILL) -> None:
    send(pid, sig)


# ------------------------------------------------------------------------------ phase 2

def _submit_jvm(run, dag: str, index: int) -> dict | None:
    """The spark-submit driver JVM of ``dag``'s batch ``index`` (its app name), and its children."""
    name = f"iqp-batch-{dag}-{index}"
    procs = run.cluster.processes()
    for p in procs:
        if "org.apache.spark.deploy.SparkSubmit" in p["cmdline"] and name in p["cmdline"].split():
            p["children"] = [c["pid"] for c in procs if c["ppid"] == p["pid"]]
            return p
    return None


def phase2(run) -> None:
    """Faults 1, 5 and 6, each in its own thread: each waits for its own batch's moment."""
    threads = [threading.Thread(target=f, args=(run,), daemon=True) for f in (_jvm_fault, _worker_fault,
                                                                                _connect_fault)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)


def _jvm_fault(run) -> None:
    """1. f_submit's batch 1: its driver JVM, SIGKILL, while the batch pauses before its rename."""
    # beside the rest of the suite on 2 cores, this batch's spark-submit can take minutes
    if not wait_for(lambda: pausing(run, "f_submit", 1), timeout=600):
        _missed(run, 1, "f_submit's batch 1 never paused before its rename")
        return
    jvm = _submit_jvm(run, "f_submit", 1)
    fault = _record(run, 1, batch=1, jvm=jvm, claim=claim_of(run, "f_submit", 1))
    if not jvm:
        _missed(run, 1, "no spark-submit JVM for f_submit's batch 1")
        return
    cl_kill(jvm["pid"])
    _watch_orphans(fault)


def _executor_of(run, jvm: dict | None) -> int | None:
    """An executor of the driver JVM ``jvm`` (its ``--driver-url`` port is one the JVM listens on)."""
    import psutil

    if not jvm:
        return None
    try:
        ports = {c.laddr.port for c in psutil.Process(jvm["pid"]).net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN}
    except psutil.Error:
        return None
    for pid in run.cluster.executor_pids():
        try:
            args = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        url = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--driver-url"), "")
        if url.rsplit(":", 1)[-1].isdigit() and int(url.rsplit(":", 1)[-1]) in ports:
            return pid
    return None


def _worker_fault(run) -> None:
    """5. the Spark worker (and its executors), once f_submit's batch 2 has its executor; then started again."""
    cl = run.cluster
    executor = wait_for(lambda: _executor_of(run, _submit_jvm(run, "f_submit", 2)), timeout=600, poll=0.2)
    if not executor:
        _missed(run, 5, "f_submit's batch 2 never got an executor")
        return
    fault = _record(run, 5, component="spark-worker", batch=2, pid=cl.pid("spark-worker"), executor=executor,
                    claim=claim_of(run, "f_submit", 2))
    cl.kill("spark-worker")
    cl.wait_workers(0, timeout=60)
    fault["restart_seconds"] = cl.start("spark-worker")
    fault["restarted_at"] = time.time()


def _connect_fault(run) -> None:
    """6. the Connect server, as f_conn2's batch 1 has claimed and its task is about to start its
    Spark work there; then started again (which takes a JVM's start-up and its executor)."""
    cl = run.cluster
    ws = run.window("f_conn2")
    if not wait_for(lambda: ws.has_claim(1), timeout=150, poll=0.05):
        _missed(run, 6, "f_conn2's batch 1 never claimed")
        return
    fault = _record(run, 6, component="spark-connect", batch=1, pid=cl.pid("spark-connect"),
                    claim=claim_of(run, "f_conn2", 1))
    cl.kill("spark-connect")
    fault["restart_seconds"] = cl.start("spark-connect")
    fault["restarted_at"] = time.time()


def _watch_orphans(fault: dict) -> None:
    """Whether the killed JVM's Python driver outlived it, and for how long."""
    kids = list((fault.get("jvm") or {}).get("children") or [])
    t0 = time.time()
    wait_for(lambda: not any(_alive(k) for k in kids), timeout=60, poll=0.2)
    fault["orphans"] = kids
    fault["orphans_gone_after"] = time.time() - t0


# ------------------------------------------------------------------------------ fault 12's rerun

def rerun_after_fix(run) -> None:
    """Fault 12, once f_fail's run has failed: wait for its Deadline Alert's record, replace
    the bad file with a good one, clear the failed tasks, and wait for the rerun."""
    from tests.cluster.fault_scenario import event_table, parquet_bytes, publish

    af = run.cluster.airflow
    dag, run_id = run.dag_id("f_fail"), run.runs["f_fail"]
    ws = run.window("f_fail")
    fault = _record(run, 12, failed_run=run.final.get("f_fail"), failed_tis=run.tis.get("f_fail"),
                    claims={i: claim_of(run, "f_fail", i) for i in (1, 2)},
                    metrics_before={i: ws.metrics(i) or None for i in (1, 2)})
    fault["alert_seen"] = bool(wait_for(lambda: run.alert("f_fail") is not None, timeout=max(
        10.0, run.specs["f_fail"]["anchor"] + run.specs["f_fail"]["window"] + run.specs["f_fail"]["offset"]
        + 60 - time.time()), poll=0.5))
    import random

    publish(run.landing("f_fail"), "part-003.parquet", parquet_bytes(event_table(random.Random("fixed"), 25)))
    fault["fixed_at"] = time.time()
    af.api("POST", f"/api/v2/dags/{dag}/clearTaskInstances",
           {"dry_run": False, "dag_run_id": run_id, "only_failed": True, "include_downstream": True,
            "reset_dag_runs": True})
    fault["cleared_at"] = time.time()
    time.sleep(2.0)
    run.final["f_fail"] = af.wait_for_run(dag, run_id, timeout=240, expect_success=False)
    fault["rerun_done_at"] = time.time()
    run.tis["f_fail"] = af.task_instances(dag, run_id)
