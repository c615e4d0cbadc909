"""BatchSubmitOperator: spark-submit one batch's partial aggregation (airflow_iqp/spark/batch_job.py)."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_iqp import config
from airflow_iqp.runtime import as_batch, batch_state, env_without_connect
from airflow_iqp.spark.submit import LOCAL_CONF, build_pyfiles_zip, job_path, submit_env
from airflow_iqp.state import read_json

#: Start-up of one spark-submit JVM here is about 20 s; a batch gets this on top of its planned cost.
SUBMIT_OVERHEAD_S = 60.0


class _IQPSparkSubmit(SparkSubmitOperator):
    """What the batch and final submits share: local defaults, environment, package shipping."""

    def _prepare(self, app: str, app_args: list[str]) -> None:
        self.application = job_path(app)
        self.application_args = app_args
        self.conf = {**LOCAL_CONF, **(self.conf or {})}
        env = submit_env(env_without_connect())
        # Only what differs from the worker's own environment travels as env_vars.
        self.env_vars = {k: v for k, v in env.items() if os.environ.get(k) != v}
        if config.ship_package() and not self.py_files:
            self.py_files = str(build_pyfiles_zip())

    def execute(self, context) -> Any:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)  # see runtime.env_without_connect
        return super().execute(context)


class BatchSubmitOperator(_IQPSparkSubmit):
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
        batch = as_batch(self.batch)
        ws = batch_state(batch)
        self._prepare("batch", [batch["query"], str(ws.claim_path(batch["index"])), batch["static"] or "",
                                str(ws.partial_path(batch["index"])), "--state-dir", batch["state_dir"]])
        self.execution_timeout = dt.timedelta(seconds=SUBMIT_OVERHEAD_S + 3 * batch["cost"])

    def execute(self, context) -> Any:
        batch = as_batch(self.batch)
        ws = batch_state(batch)
        claim = ws.claim_path(batch["index"])
        if not claim.exists() or not read_json(claim).get("units"):
            raise AirflowSkipException(f"{batch['label']}: no claimed input")
        try_number = context["ti"].try_number
        remaining = batch["remaining_cost"] + SUBMIT_OVERHEAD_S
        if try_number > 1 and not batch.get("backfill") and time.time() + remaining > batch["deadline_ts"]:
            raise AirflowFailException(
                f"{batch['label']}: attempt {try_number} could no longer meet the deadline "
                f"({dt.datetime.fromtimestamp(batch['deadline_ts'], dt.timezone.utc):%H:%M:%S}); not retrying")
        super().execute(context)
        metrics = read_json(ws.metrics_path(batch["index"]))
        self.log.info("%s: %d units in %.1f s wall, %.1f s CPU", batch["label"], metrics["units"],
                      metrics["wall_seconds"], metrics["cpu_seconds"] or 0.0)
        return {"index": batch["index"], "started": context["ti"].start_date.timestamp()
                if context["ti"].start_date else None, "ended": time.time(), **metrics}
