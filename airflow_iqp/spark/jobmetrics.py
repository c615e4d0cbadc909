"""Measure a job step: wall seconds, process CPU seconds, Spark task seconds. (What a batch or
a merge cost its window from claim to written output, the seconds the cost history plans
with, is :func:`airflow_iqp.window.accounting.batch_span` and ``merge_span``.)

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
