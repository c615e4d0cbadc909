"""The private backend strategies of :class:`~airflow_iqp.operators.batch.BatchOperator` and
:class:`~airflow_iqp.operators.final.FinalOperator`: how one batch, or one window's final
aggregation, runs on spark-submit or on a Spark Connect server.

Both run the same functions of layer 2 (``airflow_iqp/spark/batch_job.py`` and
``final_job.py``): spark-submit runs the job scripts, Connect calls their functions on a
session. The operators keep what does not depend on the backend (skipping, retries,
accounting); a strategy only starts the work and stops it (``on_kill``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from airflow_iqp import config
from airflow_iqp.errors import ConfigError
from airflow_iqp.hooks.spark import IQPSparkHook, refuse_connect_conf
from airflow_iqp.spark.batch import batch_work, work_args
from airflow_iqp.spark.submit import job_path
from airflow_iqp.store import WindowState
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import BACKENDS


class _Strategy:
    """What the operators ask of a backend."""

    #: The backend's name, as plans and the cost history record it.
    name: ClassVar[str]
    #: Seconds a batch's execution_timeout allows on top of its planned cost for the
    #: backend's start-up, with room for a loaded machine.
    overhead_s: ClassVar[float]

    def __init__(self, conn_id: str | None, conf: Mapping[str, Any] | None, **spark_kwargs: Any) -> None:
        self.conn_id = conn_id
        self.conf = dict(conf or {})
        self.spark_kwargs = spark_kwargs
        self.hook: IQPSparkHook | None = None

    def _hook(self) -> IQPSparkHook:
        self.hook = IQPSparkHook(self.conn_id, conf=self.conf, **self.spark_kwargs)
        return self.hook

    def run_batch(self, batch: Batch, ws: WindowState, *, slots: int, app_name: str) -> None:
        raise NotImplementedError

    def run_final(self, ws: WindowState, *, tail: Batch | None, tail_slots: int, late: int | None,
                  app_name: str) -> None:
        raise NotImplementedError

    def on_kill(self) -> None:
        if self.hook is not None:
            self.hook.on_kill()


class _SubmitStrategy(_Strategy):
    """One spark-submit of the batch or final job per task (the Spark provider's hook)."""

    name = "spark-submit"
    # A JVM and a Spark session start for every task.
    overhead_s = 60.0

    def run_batch(self, batch: Batch, ws: WindowState, *, slots: int, app_name: str) -> None:
        # A directory of <table>.parquet travels with the work; a mapping of paths is in the saved query.
        static = batch.static if isinstance(batch.static, str) else None
        work = batch_work(ws, batch.index, static)
        self._hook().submit(job_path("batch"), [*work_args(ws, work), "--backend", self.name], name=app_name)

    def run_final(self, ws: WindowState, *, tail: Batch | None, tail_slots: int, late: int | None,
                  app_name: str) -> None:
        args = ["--store", ws.store.location, "--query", ws.query_id, "--window", ws.window_id, "--backend", self.name]
        if tail is not None:
            # The job waits for the last batch's input, claims it and takes its turn in its
            # driver, with the JVM already up (spark.tail.run_tail).
            args += ["--tail", json.dumps(tail.to_dict()), "--tail-slots", str(tail_slots)]
        if late is not None:  # the earlier window's late batch, merged as a new revision
            args += ["--late", str(late)]
        self._hook().submit(job_path("final"), args, name=app_name)


class _ConnectStrategy(_Strategy):
    """The same functions on a session of a running Spark Connect server."""

    name = "spark-connect"
    # Opening a session on a warm server; no JVM starts.
    overhead_s = 15.0

    def __init__(self, conn_id: str | None, conf: Mapping[str, Any] | None, **spark_kwargs: Any) -> None:
        refuse_connect_conf(conf)
        if spark_kwargs:
            raise ConfigError(f"spark-submit arguments ({', '.join(sorted(spark_kwargs))}) have no meaning for "
                              f"a running Spark Connect server", sorted(spark_kwargs)[0])
        super().__init__(conn_id or config.connect_conn_id(), None)

    def run_batch(self, batch: Batch, ws: WindowState, *, slots: int, app_name: str) -> None:
        from airflow_iqp.coordination import cluster_turn
        from airflow_iqp.spark.batch import execute_batch

        work = batch_work(ws, batch.index, batch.static or None)
        with self._hook().session(app_name) as spark, cluster_turn(batch, slots):
            execute_batch(spark, work, backend=self.name)

    def run_final(self, ws: WindowState, *, tail: Batch | None, tail_slots: int, late: int | None,
                  app_name: str) -> None:
        from airflow_iqp.spark.merge import execute_final, execute_late
        from airflow_iqp.spark.tail import run_tail

        with self._hook().session(app_name) as spark:
            if late is not None:
                execute_late(spark, ws, late, backend=self.name)
            elif tail is not None:
                run_tail(spark, ws, tail, tail_slots, backend=self.name)
            else:
                execute_final(spark, ws, backend=self.name)


_STRATEGIES = {s.name: s for s in (_SubmitStrategy, _ConnectStrategy)}


class OnBackend:
    """What an operator that runs on a backend strategy (``self._strategy``) exposes of it."""

    _strategy: _Strategy

    @property
    def conn_id(self) -> str | None:
        """The Spark connection the backend uses (None: the ``[iqp]`` default)."""
        return self._strategy.conn_id

    @property
    def conf(self) -> dict:
        """The Spark conf of the spark-submit (none on Spark Connect)."""
        return self._strategy.conf

    def on_kill(self) -> None:
        self._strategy.on_kill()


def backend_name(backend: Any) -> str:
    """``"spark-submit"`` or ``"spark-connect"``, from the name or a typed backend object
    (:class:`~airflow_iqp.options.SparkSubmit`, :class:`~airflow_iqp.options.SparkConnect`)."""
    name = getattr(backend, "name", backend)
    if name not in BACKENDS:
        raise ConfigError(f"must be one of {', '.join(BACKENDS)}, or SparkSubmit() / SparkConnect() "
                          f"(airflow_iqp.options), got {backend!r}", "backend")
    return name


def strategy(backend: Any, conn_id: str | None = None, conf: Mapping[str, Any] | None = None,
             **spark_kwargs: Any) -> _Strategy:
    """The strategy of ``backend``; ``conn_id`` and ``conf`` default to the typed object's."""
    conn_id = conn_id or getattr(backend, "conn_id", None)
    conf = conf if conf is not None else getattr(backend, "conf", None)
    return _STRATEGIES[backend_name(backend)](conn_id, conf, **spark_kwargs)
