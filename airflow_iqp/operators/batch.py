"""BatchOperator: one planned batch's partial aggregation, by spark-submit or on a Spark Connect server."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.filecheck import bad_files_message, kept_units, still_bad
from airflow_iqp.hooks.state import IQPStateHook
from airflow_iqp.backends import typed_choices
from airflow_iqp.operators._backends import OnBackend
from airflow_iqp.store import batch_name
from airflow_iqp.window.accounting import record_attempt, record_task_cpu
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.replan import effective

#: A batch's execution_timeout is never shorter: on a cluster shared by several queries a
#: batch can take several times its planned cost, and a killed batch is a lost partial and
#: a retry, which is later still.
BATCH_TIMEOUT_MIN_S = 600.0


class BatchOperator(OnBackend, BaseOperator):
    """Runs one planned batch; the batch writes its partial result.

    ``backend="spark-submit"`` runs ``airflow_iqp/spark/batch_job.py`` through spark-submit
    (:class:`~airflow_iqp.hooks.spark.IQPSparkHook`); ``backend="spark-connect"`` runs the
    same ``execute_batch`` on a session of a running Spark Connect server, in its turn
    among the state directory's queries (``slots``). The batch's label in the UI
    (``map_index_template="{{ task.batch.label }}"``) and its ``execution_timeout`` (planned
    cost plus the backend's start-up) come from the plan entry. A retry runs even when it
    can no longer finish before the deadline: the final step still writes the result, marked
    late, and a late result beats none. A batch whose sensor claimed nothing, or whose every
    claimed unit was quarantined (:mod:`airflow_iqp.filecheck`), is skipped; one whose claim
    found bad files of a stream with ``on_bad_unit="fail"`` fails before any Spark job, its
    message's first line naming each of them. Killing the task kills its spark-submit, or
    interrupts its Connect session's work.

    :param batch: one entry of the plan task's output (mapped).
    :param backend: a backend's name in the registry (:data:`airflow_iqp.backends.BACKENDS`:
        ``"spark-submit"``, ``"spark-connect"``), or its typed object,
        :class:`~airflow_iqp.backends.SparkSubmit` / :class:`~airflow_iqp.backends.SparkConnect`
        (whose ``conn_id`` and ``conf`` are then the defaults).
    :param conn_id: the Spark connection (default ``[iqp] spark_conn_id``, or
        ``[iqp] spark_connect_conn_id`` on Spark Connect).
    :param conf: Spark conf of the spark-submit. A running Connect server takes none: given
        there, it is refused.
    :param slots: on a backend whose every batch takes a turn (Spark Connect), batches of the
        state directory's queries that the cluster runs at once, earliest deadline first (:func:`~airflow_iqp.coordination.cluster_turn`);
        0, the default, is no limit.
    :param spark_kwargs: more arguments of the Spark provider's ``SparkSubmitHook``
        (``driver_memory``, ``executor_cores``, ...; spark-submit only).
    """

    template_fields: Sequence[str] = ("batch",)
    ui_color = "#fde2c8"

    def __init__(self, *, batch: Any, backend: Any = "spark-submit", conn_id: str | None = None,
                 conf: Mapping[str, Any] | None = None, slots: int = 0, spark_kwargs: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch = batch
        self._use_backend(backend, conn_id, conf, spark_kwargs)
        if slots and not self.backend_class.mapped_batches_take_turns:
            raise ConfigError(f"a {self.backend} batch would hold its turn while its job starts: slots are for "
                              f"{typed_choices('()', turns=True)} (on {self.backend}, fused tails take turns: "
                              f"FinalOperator's tail_slots)", "slots")
        self.slots = slots

    def _entry(self) -> Batch:
        return Batch.from_dict(self.batch)

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        # ``batch`` stays a plan entry's JSON (``{{ task.batch.label }}`` reads its label):
        # the entry as the window's newest re-plan has it once its wait has claimed, read
        # here once for the run. Its label is the one the wait shows; its planned cost
        # bounds the run.
        batch = effective(self._entry())
        self.batch = batch.to_dict()
        self.execution_timeout = self.timeout_for(batch)

    def timeout_for(self, batch: Batch) -> dt.timedelta:
        """The batch's execution_timeout: three times its planned cost plus the backend's start-up."""
        return dt.timedelta(seconds=max(BATCH_TIMEOUT_MIN_S, self.backend_class.timeout_overhead + 3 * batch.cost))

    def execute(self, context) -> dict:
        batch = self._entry()
        state = IQPStateHook(batch.state_dir)
        ws = state.window_of(batch)
        claim = ws.claim_of(batch.index)
        if not claim or not claim.get("units"):
            raise AirflowSkipException(f"{batch.label}: no claimed input")
        if claim.get("quarantined"):
            self.log.warning("%s: %s", batch.label, bad_files_message(claim["quarantined"], "quarantined when claimed"))
        if not kept_units(claim):
            raise AirflowSkipException(f"{batch.label}: every claimed unit was quarantined")
        ti = context["ti"]
        record_attempt(ws, batch_name(batch.index), ti)
        bad = still_bad(claim, batch.streams, state.store.query(batch.query))
        if bad:  # on_bad_unit="fail": before any Spark job, every bad file on the first line
            raise DataError(f"{batch.label}: {bad_files_message(bad)}")
        remaining = batch.remaining_cost + self.backend_class.timeout_overhead
        if not batch.backfill and time.time() + remaining > batch.deadline_ts:  # it runs: a late result beats none
            self.log.warning("%s: attempt %d can no longer meet the deadline (%s); it runs all the same, and "
                             "the result will be marked late", batch.label, ti.try_number,
                             f"{dt.datetime.fromtimestamp(batch.deadline_ts, dt.timezone.utc):%H:%M:%S}")
        self._runner.run_batch(batch, ws, slots=self.slots, app_name=f"iqp-batch-{batch.query}-{batch.index}")
        metrics = ws.metrics(batch.index)
        self.log.info("%s: %d units in %.1f s wall, %.1f s CPU (%s)", batch.label, metrics["units"],
                      metrics["wall_seconds"], metrics["cpu_seconds"] or 0.0, metrics.get("backend"))
        started = getattr(context["ti"], "start_date", None)
        cpu = record_task_cpu(ws, context["ti"])
        return {"index": batch.index, "started": started.timestamp() if started else None, "ended": time.time(),
                **metrics, "task_cpu_seconds": cpu["self_cpu_seconds"] + cpu["children_cpu_seconds"]}
