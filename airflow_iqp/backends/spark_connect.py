"""The Spark Connect backend: every batch and final step on a session of one running server.

Its tasks call the Spark jobs' functions (``execute_batch``, ``execute_final``,
``run_tail``, ``execute_late``) on a session the hook opens on a ``spark_connect``
connection; its calibration calls them on a session of its own, measuring the call and the
server JVM's CPU. Each call is given the backend's name, which the metrics and the cost
history record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from airflow_iqp.backends.base import TAIL_LEAD_S, Backend, CalibrationRunner, Runner
from airflow_iqp.errors import ConfigError

if TYPE_CHECKING:
    from airflow_iqp.store import WindowState
    from airflow_iqp.window.batch import Batch


@dataclass(frozen=True, kw_only=True)
class SparkConnect(Backend):
    """Every batch and the final aggregation on one running Spark Connect server. It has no
    ``conf``: a running server cannot take spark-submit conf; set it when the server starts.

    ``tail_slots`` applies to every batch here, mapped ones too.
    """

    name: ClassVar[str] = "spark-connect"
    default_tail_lead: ClassVar[float] = TAIL_LEAD_S
    # A warm server answers a call in about 0.3 s; Airflow starting the task takes most of
    # the rest of a batch's start-up.
    default_cost: ClassVar[Mapping[str, Any]] = {"kind": "linear", "per_unit": 0.1, "per_batch": 3.0}
    default_final_agg: ClassVar[Mapping[str, Any]] = {"kind": "linear", "base": 3.0, "per_batch": 0.2}
    job_startup: ClassVar[bool] = False
    # On a warm server a calibrated batch's fixed cost is its own Spark jobs' (planning,
    # scheduling, the partial's commit): each query of a shared batch pays it again. The
    # default hint's start-up (mostly Airflow starting the task) is then counted once per
    # query too, which errs towards earlier batches until the group has a cost history.
    group_fixed_share: ClassVar[float] = 1.0
    mapped_batches_take_turns: ClassVar[bool] = True
    # Opening a session on a warm server; no JVM starts.
    timeout_overhead: ClassVar[float] = 15.0

    @classmethod
    def runner(cls, conn_id: str | None = None, conf: Mapping[str, Any] | None = None,
               **spark_kwargs: Any) -> Runner:
        from airflow_iqp import config
        from airflow_iqp.hooks.spark import refuse_connect_conf

        refuse_connect_conf(conf)
        if spark_kwargs:
            raise ConfigError(f"spark-submit arguments ({', '.join(sorted(spark_kwargs))}) have no meaning for "
                              f"a running Spark Connect server", sorted(spark_kwargs)[0])
        return _ConnectRunner(cls, conn_id or config.connect_conn_id())

    @classmethod
    def calibration_runner(cls, *, url: str | None = None, port: int | None = None, server_pid: int | None = None,
                           log=None, **_elsewhere: Any) -> CalibrationRunner:
        """On the server at ``url`` (its JVM's CPU counted too when ``server_pid`` is given or
        the URL names a local server of ours), else on a local server on ``port``, started
        for the calibration and stopped after, unless it was running."""
        from airflow_iqp.spark import connect

        started = None
        if url and server_pid is None:
            from urllib.parse import urlparse

            parsed = urlparse(url)
            if parsed.hostname in ("127.0.0.1", "localhost") and parsed.port:
                server_pid = connect.server_status(parsed.port)["pid"]
        if not url:
            started = connect.start_server(port or connect.DEFAULT_PORT)
            url, server_pid = started["url"], started["pid"]
            if log:
                log(f"Spark Connect server {connect.redact_url(url)} (pid {server_pid}): "
                    + ("already running" if started["already"] else f"started in {started['startup_seconds']:.1f} s"))
        return _ConnectCalibration(url, server_pid, started)


class _ConnectRunner(Runner):
    """The Spark jobs' functions on a session of a running Spark Connect server."""

    def run_batch(self, batch: Batch, ws: WindowState, *, slots: int, app_name: str) -> None:
        from airflow_iqp.coordination import cluster_turn
        from airflow_iqp.spark.batch import batch_work, execute_batch

        work = batch_work(ws, batch.index, batch.static or None, members=batch.members)
        with self._hook().session(app_name) as spark, cluster_turn(batch, slots):
            execute_batch(spark, work, backend=self.backend.name)

    def run_final(self, ws: WindowState, *, tail: Batch | None, tail_slots: int, late: int | None,
                  app_name: str) -> None:
        from airflow_iqp.spark.merge import execute_final, execute_late
        from airflow_iqp.spark.tail import run_tail

        name = self.backend.name
        with self._hook().session(app_name) as spark:
            if late is not None:
                execute_late(spark, ws, late, backend=name)
            elif tail is not None:
                run_tail(spark, ws, tail, tail_slots, backend=name)
            else:
                execute_final(spark, ws, backend=name)


class _ConnectCalibration(CalibrationRunner):
    """Each batch and merge as a call on one open session of a warm server; its CPU is this
    process's and, with ``server_pid``, the server JVM's."""

    name = SparkConnect.name
    warm_up_first = True

    def __init__(self, url: str, server_pid: int | None = None, started: dict | None = None) -> None:
        self.url, self.server_pid, self.started = url, server_pid, started
        self.startup_seconds = started["startup_seconds"] if started else None
        self._spark = None

    @property
    def spark(self):
        """The session, opened at the first call."""
        if self._spark is None:
            from airflow_iqp.spark.connect import connect_session

            self._spark = connect_session(self.url)
        return self._spark

    def _cpu(self) -> float:
        from airflow_iqp.spark.connect import server_cpu_seconds
        from airflow_iqp.spark.jobmetrics import process_cpu_seconds

        return process_cpu_seconds() + (server_cpu_seconds(self.server_pid) if self.server_pid else 0.0)

    def _measure(self, fn) -> tuple[float, float | None]:
        spark = self.spark
        c0 = self._cpu()
        t0 = time.perf_counter()
        fn(spark)
        wall = time.perf_counter() - t0
        return wall, (self._cpu() - c0) if self.server_pid else None

    def batch(self, query, ws, b, static) -> tuple[float, float | None]:
        from airflow_iqp.spark.batch import batch_work, execute_batch

        work = batch_work(ws, b, str(static) if static else None)
        return self._measure(lambda spark: execute_batch(spark, work, history=False, backend=self.name))

    def final(self, query, ws) -> tuple[float, float | None]:
        from airflow_iqp.spark.merge import execute_final

        return self._measure(lambda spark: execute_final(spark, ws, history=False, backend=self.name))

    def close(self) -> None:
        from airflow_iqp.spark import connect

        if self._spark is not None:
            self._spark.stop()
            self._spark = None
        if self.started is not None and not self.started["already"]:
            connect.stop_server(self.started["port"])
            self.started = None
