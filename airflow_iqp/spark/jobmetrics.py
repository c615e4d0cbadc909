"""Measure a job step: wall seconds, process CPU seconds, Spark task seconds; and what a
batch or a merge cost its window from claim to written output (:func:`batch_span`,
:func:`merge_span`), the seconds the cost history plans with.

* ``cpu_seconds``: user + system CPU of the Python driver, the Spark JVM and the JVM's
  child processes (Python workers), read with psutil at the start and end of the step.
  Under spark-submit the JVM is the Python driver's parent; under a plain ``pyspark``
  session it is the driver's child. In local mode the executors live in that JVM.
* ``task_seconds``: the sum of Spark task run times, read from the live status store
  (``AppStatusStore.executorList(...).totalDuration``, the "Task Time" of the UI's
  Executors tab; it works with the UI disabled). Only for a classic local/cluster session;
  ``None`` under Spark Connect.
"""

from __future__ import annotations

import time
from pathlib import Path

from airflow_iqp.errors import ConfigError
from airflow_iqp.state import WindowState, batch_name, read_claims, read_json


def _jvm_processes():
    import psutil

    me = psutil.Process()
    procs = [me]
    try:
        parent = me.parent()
        if parent is not None and "java" in parent.name().lower():
            procs.append(parent)
            procs.extend(c for c in parent.children(recursive=True) if c.pid != me.pid)
        else:
            procs.extend(me.children(recursive=True))
    except psutil.Error:
        pass
    return procs


def process_cpu_seconds() -> float:
    """User + system CPU seconds so far of the driver, its JVM and the JVM's children."""
    import psutil

    total = 0.0
    for p in _jvm_processes():
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def spark_task_seconds(spark) -> float | None:
    """Sum of task run times so far in this application, or None when not available."""
    try:
        store = spark.sparkContext._jsc.sc().statusStore()
        execs = store.executorList(True)
        return sum(execs.apply(i).totalDuration() for i in range(execs.size())) / 1000.0
    except Exception:
        return None


class StepMeter:
    """``with StepMeter(spark) as m: ...`` then ``m.wall_seconds``, ``m.cpu_seconds``, ``m.task_seconds``."""

    def __init__(self, spark=None):
        self.spark = spark
        self.wall_seconds = self.cpu_seconds = None
        self.task_seconds = None

    def __enter__(self):
        self._t0 = time.perf_counter()
        self._cpu0 = process_cpu_seconds()
        self._task0 = spark_task_seconds(self.spark) if self.spark is not None else None
        return self

    def __exit__(self, *exc):
        self.wall_seconds = time.perf_counter() - self._t0
        self.cpu_seconds = process_cpu_seconds() - self._cpu0
        if self._task0 is not None:
            t1 = spark_task_seconds(self.spark)
            self.task_seconds = None if t1 is None else t1 - self._task0
        return False


def batch_span(manifest_path: str | Path, written_at: float | None) -> float | None:
    """Seconds from a batch's claim to its written partial: what the batch cost its window
    (the task's start, the JVM or session, the Spark work), as the cost history records it.

    None when that is not one batch's cost: its claim has no time, or the batch did not run
    once in a task of its own (``attempts``, recorded by the batch task before its work: a
    retry's span holds the failed attempt and the wait; a fused tail's batches run in a
    session that was open before their claim; a claim outside Airflow has none)."""
    try:
        ws = WindowState.from_claim_path(manifest_path)
    except ConfigError:
        return None
    manifest = read_json(manifest_path)
    claimed = manifest.get("claimed_at")
    if claimed is None or written_at is None or _tries(ws, batch_name(manifest["batch"])) != 1:
        return None
    return max(0.0, written_at - claimed)


def merge_span(ws: WindowState, written_at: float) -> float | None:
    """Seconds from the end of a window's last batch to its written result: the final
    task's start, its JVM or session, and the merge, as the cost history records them. A
    batch ends when its partial is written, or when it claimed nothing.

    None when that is not one merge's cost: the final task did not run once (``attempts``),
    or a batch claimed units and wrote no partial."""
    if _tries(ws, "final") != 1:
        return None
    ends = []
    for index, claim in read_claims(ws).items():
        if not claim.get("units"):
            ends.append(claim.get("claimed_at"))
            continue
        metrics = ws.metrics_path(index)
        ends.append(read_json(metrics).get("written_at") if metrics.is_file() else None)
    if not ends or None in ends:
        return None
    return max(0.0, written_at - max(ends))


def _tries(ws: WindowState, name: str) -> int:
    """How many attempts of the window's task on ``name`` started: the provider's tasks
    write ``attempts/<name>.<try>.json`` before their work
    (:func:`airflow_iqp.window.accounting.record_attempt`)."""
    return len(list((ws.root / "attempts").glob(f"{name}.*.json")))
