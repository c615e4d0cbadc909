"""The spark-submit backend: one spark-submit of the batch or final job per task.

Its tasks run ``airflow_iqp/spark/batch_job.py`` and ``final_job.py`` through the Spark
provider's hook (:class:`~airflow_iqp.hooks.spark.IQPSparkHook`); its calibration runs the
same scripts through :func:`~airflow_iqp.spark.submit.run_submit` and measures each whole
process. Every job is told its backend's name (``--backend``), which its metrics and the
cost history record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from airflow_iqp._values import _set
from airflow_iqp.backends.base import TAIL_LEAD_S, Backend, CalibrationRunner, Runner
from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.planning.models import SHARED_FIXED_SHARE

if TYPE_CHECKING:
    from airflow_iqp.store import WindowState
    from airflow_iqp.window.batch import Batch

#: A fused tail's job also starts a JVM before the window's end: this much more lead by default.
TAIL_LEAD_JVM_S = 10.0


@dataclass(frozen=True, kw_only=True)
class SparkSubmit(Backend):
    """One spark-submit per batch (YARN, Kubernetes, standalone, local), through the Spark
    provider's connection. A fused tail's job starts its JVM during the lead, so the
    default lead is longer here.

    :param conf: Spark conf for every batch and final job (``--conf key=value``).

    ``tail_slots`` applies to fused tails only: a mapped batch would hold its turn while its
    JVM starts, so it needs ``fuse_tail=True``.
    """

    name: ClassVar[str] = "spark-submit"
    default_tail_lead: ClassVar[float] = TAIL_LEAD_S + TAIL_LEAD_JVM_S
    # On a 2-core machine one spark-submit of a trivial job takes about 20 s of wall time,
    # the task's start included; the per-unit cost is kept high so that a first window
    # errs towards more batches, earlier.
    default_cost: ClassVar[Mapping[str, Any]] = {"kind": "linear", "per_unit": 0.25, "per_batch": 20.0}
    default_final_agg: ClassVar[Mapping[str, Any]] = {"kind": "linear", "base": 20.0, "per_batch": 0.5}
    job_startup: ClassVar[bool] = True
    # A batch's fixed cost is mostly its JVM's start, which a shared batch pays once.
    group_fixed_share: ClassVar[float] = SHARED_FIXED_SHARE
    mapped_batches_take_turns: ClassVar[bool] = False
    # A JVM and a Spark session start for every task.
    timeout_overhead: ClassVar[float] = 60.0

    conf: Mapping[str, Any] | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.conf is not None:
            if not isinstance(self.conf, Mapping) or not all(
                    isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in self.conf.items()):
                raise ConfigError(f"must map Spark conf keys to values, got {self.conf!r}", "backend.conf")
            _set(self, "conf", dict(self.conf))

    def task_kwargs(self) -> dict[str, Any]:
        return {**super().task_kwargs(), **({"conf": dict(self.conf)} if self.conf else {})}

    @classmethod
    def runner(cls, conn_id: str | None = None, conf: Mapping[str, Any] | None = None,
               **spark_kwargs: Any) -> Runner:
        return _SubmitRunner(cls, conn_id, conf, spark_kwargs)

    @classmethod
    def calibration_runner(cls, *, master: str = "local[*]", conf: Mapping[str, Any] | None = None,
                           **_elsewhere: Any) -> CalibrationRunner:
        return _SubmitCalibration(master, conf)


class _SubmitRunner(Runner):
    """One spark-submit of the batch or final job per task (the Spark provider's hook)."""

    def run_batch(self, batch: Batch, ws: WindowState, *, slots: int, app_name: str) -> None:
        from airflow_iqp.spark.batch import batch_work, work_args
        from airflow_iqp.spark.submit import job_path

        # A directory of <table>.parquet travels with the work; a mapping of paths is in the saved query.
        work = batch_work(ws, batch.index, batch.static if isinstance(batch.static, str) else None,
                          members=batch.members)
        self._hook().submit(job_path("batch"), [*work_args(ws, work), "--backend", self.backend.name],
                            name=app_name)

    def run_final(self, ws: WindowState, *, tail: Batch | None, tail_slots: int, late: int | None,
                  app_name: str) -> None:
        from airflow_iqp.spark.submit import job_path

        args = ["--store", ws.store.location, "--query", ws.query_id, "--window", ws.window_id,
                "--backend", self.backend.name]
        if tail is not None:
            # The job waits for the last batch's input, claims it and takes its turn in its
            # driver, with the JVM already up (spark.tail.run_tail).
            args += ["--tail", json.dumps(tail.to_dict()), "--tail-slots", str(tail_slots)]
        if late is not None:  # the earlier window's late batch, merged as a new revision
            args += ["--late", str(late)]
        self._hook().submit(job_path("final"), args, name=app_name)


class _SubmitCalibration(CalibrationRunner):
    """Each batch and merge as one spark-submit, measured as a whole process (JVM start-up included)."""

    name = SparkSubmit.name

    def __init__(self, master: str = "local[*]", conf: Mapping[str, Any] | None = None) -> None:
        self.master, self.conf = master, conf

    def batch(self, query, ws, b, static) -> tuple[float, float | None]:
        from airflow_iqp.spark.batch import batch_work, work_args

        work = batch_work(ws, b, str(static) if static else None)
        return self._run("batch", work_args(ws, work), f"iqp-calibrate-{query}-b{b}", f"batch {b}")

    def final(self, query, ws) -> tuple[float, float | None]:
        args = ["--store", ws.store.location, "--query", ws.query_id, "--window", ws.window_id]
        return self._run("final", args, f"iqp-calibrate-{query}-final", "final")

    def _run(self, job: str, args: list, app_name: str, what: str) -> tuple[float, float | None]:
        from airflow_iqp.spark.submit import job_path, run_submit, submit_args

        argv = submit_args(job_path(job), [*args, "--no-history", "--backend", self.name], master=self.master,
                           conf=self.conf, name=app_name)
        res = run_submit(argv, timeout=1800)
        if res.returncode != 0:
            raise DataError(f"calibration {what} failed (exit {res.returncode}):\n{res.tail()}")
        return res.wall_seconds, res.cpu_seconds
