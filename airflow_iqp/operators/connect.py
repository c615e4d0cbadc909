"""The Spark Connect backend's operators: batches and finals on one long-running Spark server.

They are the Spark provider's ``PySparkOperator`` (which opens a session on the
``spark_connect`` connection, ``[iqp] spark_connect_conn_id``, default
``spark_connect_default``) running the very functions the spark-submit jobs run,
``execute_batch`` and ``execute_final``. Start the server with ``airflow-iqp connect-server
start`` and point the connection at it (``sc://127.0.0.1:15002``). The batch semantics
(skip, retry cut-off, metrics) and the final accounting (late units, report, Asset event)
are those of the spark-submit operators.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_pyspark import PySparkOperator

from airflow_iqp import config
from airflow_iqp.operators.final import _FinalTask
from airflow_iqp.operators.submit import _BatchTask
from airflow_iqp.window.batch import Batch

#: Opening a session on a warm server and a small batch take about a second here.
CONNECT_OVERHEAD_S = 15.0


def run_batch_in_session(batch: dict, slots: int = 0, spark=None) -> dict:
    """One planned batch on ``spark`` (the callable of :class:`BatchConnectOperator`), in its
    turn on the server (:func:`~airflow_iqp.coordination.cluster_turn`, ``slots`` at once)."""
    from airflow_iqp.spark.batch_job import execute_planned_batch
    from airflow_iqp.window.tail import load, turn

    batch = load(batch)
    with turn(batch, slots):
        return execute_planned_batch(spark, batch)


def run_final_in_session(query: str, window_dir: str, tail: dict | None = None, tail_slots: int = 0,
                         late: int | None = None, spark=None) -> dict:
    """A window's final aggregation on ``spark`` (the callable of :class:`FinalConnectOperator`);
    with a fused tail, :func:`~airflow_iqp.spark.final_job.run_tail` on the session; with a
    late batch, :func:`~airflow_iqp.spark.final_job.execute_late`."""
    from airflow_iqp.spark.final_job import execute_final, execute_late, run_tail

    if late is not None:
        return execute_late(spark, query, window_dir, late)
    if not tail:
        return execute_final(spark, query, window_dir)
    return run_tail(spark, query, window_dir, tail, tail_slots)


class BatchConnectOperator(_BatchTask, PySparkOperator):
    """Runs one planned batch on a Spark Connect server; same contract as ``BatchSubmitOperator``.

    :param batch: one entry of the plan task's output (mapped).
    :param conn_id: a ``spark_connect`` connection (default ``[iqp] spark_connect_conn_id``).
    :param slots: batches of the state directory's queries that the server runs at once,
        earliest deadline first (:func:`~airflow_iqp.coordination.cluster_turn`); 0, the
        default, is no limit.
    """

    template_fields: Sequence[str] = (*PySparkOperator.template_fields, "batch")
    overhead_s = CONNECT_OVERHEAD_S

    def __init__(self, *, batch: Any, conn_id: str | None = None, slots: int = 0, **kwargs):
        kwargs.pop("conf", None)  # spark-submit --conf has no meaning for a running server
        super().__init__(python_callable=run_batch_in_session, conn_id=conn_id or config.connect_conn_id(),
                         **kwargs)
        self.batch = batch
        self.slots = slots

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        batch = Batch.from_dict(self.batch)
        self.op_kwargs = {"batch": batch.to_dict(), "slots": self.slots}
        self.execution_timeout = self._batch_timeout(batch)

    def execute(self, context) -> Any:
        batch, ws = self._before_batch(context)
        super().execute(context)
        return self._after_batch(context, batch, ws)


class FinalConnectOperator(_FinalTask, PySparkOperator):
    """Merges a window's partials on a Spark Connect server; same contract as ``FinalAggregationOperator``.

    With a fused tail (``tail``) it opens and warms its session first, then waits for the
    last batch's input, claims it, and runs that batch and the merge on the session.
    """

    template_fields: Sequence[str] = (*PySparkOperator.template_fields, "plan", "tail", "state_dir", "late")

    def __init__(self, *, query: str, plan: Any = None, tail: Any = None, state_dir: str | None = None,
                 tail_slots: int = 0, late: Any = None, conn_id: str | None = None, **kwargs):
        kwargs.pop("conf", None)
        super().__init__(python_callable=run_final_in_session, conn_id=conn_id or config.connect_conn_id(),
                         **self._final_defaults(kwargs, query, late))
        self._final_init(query, plan, state_dir, tail, tail_slots, late)

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        self.op_kwargs = {"query": self.query, "window_dir": str(self._window(context).root),
                          "tail": Batch.from_dict(self.tail).to_dict() if self.tail else None, "tail_slots": self.tail_slots,
                          "late": self._late_index()}

    def execute(self, context) -> Any:
        super().execute(context)
        return self._after(context)
