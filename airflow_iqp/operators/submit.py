"""Batch operators: one planned batch's partial aggregation, by spark-submit or on a Spark Connect server.

``_BatchTask`` is what a batch does whichever backend runs it (skip when nothing was
claimed, stop retrying when a retry could no longer meet the deadline, report the
batch's metrics); :class:`BatchSubmitOperator` runs ``airflow_iqp/spark/batch_job.py``
through ``spark-submit``, ``airflow_iqp.operators.connect.BatchConnectOperator`` runs the
same ``execute_batch`` on a shared server.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from typing import Any, Sequence

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_iqp import config
from airflow_iqp.window.accounting import record_task_cpu
from airflow_iqp.window.batch import Batch
from airflow_iqp.spark.connect import without_connect_mode
from airflow_iqp.spark.submit import build_pyfiles_zip, job_path, spark_submit_binary, submit_env, submit_spec
from airflow_iqp.state import read_json

#: Start-up of one spark-submit JVM here is about 20 s; a batch gets this on top of its planned cost.
SUBMIT_OVERHEAD_S = 60.0
#: A batch's execution_timeout is never shorter: on a cluster shared by several queries a
#: batch can take several times its planned cost, and a killed batch is a lost partial and
#: a retry, later still (one full benchmark run on Spark Connect lost 8 results of 9 that way).
BATCH_TIMEOUT_MIN_S = 600.0


class _BatchTask:
    """The batch semantics both backends share. Subclasses set ``overhead_s``."""

    overhead_s: float = SUBMIT_OVERHEAD_S

    def _batch_timeout(self, batch: Batch) -> dt.timedelta:
        return dt.timedelta(seconds=max(BATCH_TIMEOUT_MIN_S, self.overhead_s + 3 * batch.cost))

    def _before_batch(self, context) -> tuple[Batch, Any]:
        """(batch entry, window state); skips when nothing was claimed, fails when a retry is too late."""
        batch = Batch.from_dict(self.batch)
        ws = batch.window_state()
        claim = ws.claim_path(batch.index)
        if not claim.exists() or not read_json(claim).get("units"):
            raise AirflowSkipException(f"{batch.label}: no claimed input")
        try_number = context["ti"].try_number
        remaining = batch.remaining_cost + self.overhead_s
        if try_number > 1 and not batch.backfill and time.time() + remaining > batch.deadline_ts:
            raise AirflowFailException(
                f"{batch.label}: attempt {try_number} could no longer meet the deadline "
                f"({dt.datetime.fromtimestamp(batch.deadline_ts, dt.timezone.utc):%H:%M:%S}); not retrying")
        return batch, ws

    def _after_batch(self, context, batch: Batch, ws) -> dict:
        metrics = read_json(ws.metrics_path(batch.index))
        self.log.info("%s: %d units in %.1f s wall, %.1f s CPU (%s)", batch.label, metrics["units"],
                      metrics["wall_seconds"], metrics["cpu_seconds"] or 0.0, metrics.get("backend"))
        started = context["ti"].start_date
        cpu = record_task_cpu(ws.root, context["ti"])
        return {"index": batch.index, "started": started.timestamp() if started else None, "ended": time.time(),
                **metrics, "task_cpu_seconds": cpu["self_cpu_seconds"] + cpu["children_cpu_seconds"]}


class _IQPSparkSubmit(SparkSubmitOperator):
    """What the batch and final submits share: local defaults, environment, package shipping."""

    def _prepare(self, app: str, app_args: list[str]) -> None:
        self.application = job_path(app)
        self.application_args = app_args
        env = submit_env()
        # Only what the job needs on top of the worker's own environment travels as env_vars.
        self.env_vars = {k: v for k, v in env.items() if os.environ.get(k) != v}
        if config.ship_package() and not self.py_files:
            self.py_files = str(build_pyfiles_zip())

    def execute(self, context) -> Any:
        # The Spark provider's hook starts spark-submit with a copy of os.environ: drop from it what
        # a Spark Connect session in this process left behind (see spark.connect.without_connect_mode).
        for var in set(os.environ) - set(without_connect_mode()):
            os.environ.pop(var)
        # The hook runs "spark-submit" from PATH; a worker started without the venv activated
        # has pyspark's one beside its interpreter only.
        binary = spark_submit_binary()
        if os.path.isabs(binary) and shutil.which("spark-submit") != binary:
            os.environ["PATH"] = os.pathsep.join([os.path.dirname(binary), os.environ.get("PATH", "")])
        # Local-mode tuning only for a local master, read from the connection (as submit_spec does).
        master = SparkSubmitHook(conn_id=self._conn_id)._connection["master"]
        self.conf = submit_spec(self.application, master=master, conf=self.conf)["conf"]
        return super().execute(context)


class BatchSubmitOperator(_BatchTask, _IQPSparkSubmit):
    """Runs one planned batch through ``spark-submit``; the batch writes its partial result.

    The batch's application arguments, its label in the UI (``map_index_template``), its
    ``execution_timeout`` (planned cost plus spark-submit start-up) and the point where
    retries stop (when a retry could no longer finish before the deadline) all come from
    the plan entry. A batch whose sensor claimed nothing is skipped. Killing the task
    kills its spark-submit process (the Spark provider's ``on_kill``).

    :param batch: one entry of the plan task's output (mapped).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "batch")

    def __init__(self, *, batch: Any, **kwargs):
        kwargs.setdefault("conn_id", config.get("spark_conn_id"))
        kwargs.setdefault("name", "iqp-batch")
        super().__init__(**kwargs)
        self.batch = batch

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        batch = Batch.from_dict(self.batch)
        ws = batch.window_state()
        # A directory of <table>.parquet travels as an argument; a mapping of paths is in the saved query.
        static = batch.static if isinstance(batch.static, str) else ""
        self._prepare("batch", [batch.query, str(ws.claim_path(batch.index)), static,
                                str(ws.partial_path(batch.index)), "--state-dir", batch.state_dir])
        self.execution_timeout = self._batch_timeout(batch)

    def execute(self, context) -> Any:
        batch, ws = self._before_batch(context)
        super().execute(context)
        return self._after_batch(context, batch, ws)
