"""The Spark Connect backend: every batch and final step on a session of one running server.

Its tasks call the Spark jobs' functions (``execute_planned_batch``, ``execute_final``,
``run_tail``, ``execute_late``) on a session the hook opens on a ``spark_connect``
connection. Each call is given the backend's name, which the metrics and the cost
history record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from airflow_iqp.backends.base import TAIL_LEAD_S, Backend, Runner
from airflow_iqp.errors import ConfigError

if TYPE_CHECKING:
    from airflow_iqp.hooks.state import IQPStateHook
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


class _ConnectRunner(Runner):
    """The Spark jobs' functions on a session of a running Spark Connect server."""

    def run_batch(self, batch: Batch, state: IQPStateHook, *, slots: int, app_name: str) -> None:
        from airflow_iqp.coordination import cluster_turn
        from airflow_iqp.spark.batch_job import execute_planned_batch

        with self._hook().session(app_name) as spark, cluster_turn(batch, slots):
            execute_planned_batch(spark, batch, backend=self.backend.name)

    def run_final(self, query: str, window_dir: str, *, tail: Batch | None, tail_slots: int,
                  late: int | None, app_name: str) -> None:
        from airflow_iqp.spark.final_job import execute_final, execute_late
        from airflow_iqp.spark.tail import run_tail

        name = self.backend.name
        with self._hook().session(app_name) as spark:
            if late is not None:
                execute_late(spark, query, window_dir, late, backend=name)
            elif tail is not None:
                run_tail(spark, query, window_dir, tail, tail_slots, backend=name)
            else:
                execute_final(spark, query, window_dir, backend=name)
