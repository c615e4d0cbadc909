"""BatchReadySensor: wait, without holding a worker, until one batch may start; then claim its input."""

from __future__ import annotations

import time
from typing import Any, Sequence

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowSkipException

from airflow_iqp import config
from airflow_iqp.errors import ConfigError
from airflow_iqp.window.accounting import record_task_cpu
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.readiness import batch_ready, claim_batch, tail_started
from airflow_iqp.triggers.ready import BatchReadyTrigger


class BatchReadySensor(BaseSensorOperator):
    """Waits for a batch of the plan, then claims every arrived, unclaimed unit for it.

    It fires when the batch's planned units have arrived (for the last batch, all of the
    window's units) or when its latest safe start comes, whichever is first: the
    paper's dynamic rule (section 4.4). The wait is deferred to
    :class:`~airflow_iqp.triggers.ready.BatchReadyTrigger`, so it runs in the triggerer
    and holds no worker slot: a triggerer must be running.

    At that moment it claims, through the single claim function, every complete unit in
    the landing directory that no batch has claimed, and returns the claim manifest. A
    retry re-reads the same claim. With nothing to claim, the batch is skipped.

    With ``claim=False`` (the wait before a fused tail's final task; ``batch`` is the plan's
    tail, :func:`~airflow_iqp.window.readiness.split_tail`) it claims nothing and fires at the
    tail's ``start_ts``: its lead before the window's end.

    :param batch: one entry of the plan task's output (mapped).
    :param poll_interval: seconds between checks of the landing directory.
    :param claim: claim the batch's input when it fires (the default).
    """

    template_fields: Sequence[str] = ("batch",)
    ui_color = "#e8f0fe"

    def __init__(self, *, batch: Any, poll_interval: float | None = None, deferrable: bool = True,
                 claim: bool = True, **kwargs):
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.batch = batch
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.claim = claim

    def _due(self, batch: Batch) -> str | None:
        return batch_ready(batch, time.time()) if self.claim else tail_started(batch, time.time())

    def poke(self, context) -> bool:
        return self._due(Batch.from_dict(self.batch)) is not None

    def execute(self, context) -> Any:
        if not self.batch:  # e.g. no late batch: the window before this one was never planned
            raise AirflowSkipException("no batch to wait for")
        batch = Batch.from_dict(self.batch)
        if not self.claim and batch.start_ts is None:
            raise ConfigError("the wait before a fused tail's final task needs the plan's tail (with start_ts)",
                              "batch")
        reason = self._due(batch)
        if reason:
            return self._claim(batch, reason, context)
        if not self.deferrable:
            super().execute(context)
            return self._claim(batch, "poke", context)
        record_task_cpu(batch.window_state().root, context["ti"], "defer")
        self.defer(trigger=BatchReadyTrigger(batch.to_dict(), self.poll_interval or config.poll_interval(), self.claim),
                   method_name="execute_complete")

    def execute_complete(self, context, event: dict | None = None) -> Any:
        return self._claim(Batch.from_dict(self.batch), (event or {}).get("reason", "trigger"), context)

    def _claim(self, batch: Batch, reason: str, context) -> dict:
        if not self.claim:
            record_task_cpu(batch.window_state().root, context["ti"], "fire")
            self.log.info("%s: fired on %s; its task claims when the input is ready", batch.label, reason)
            return {"reason": reason}
        manifest = claim_batch(batch)  # the trigger's claim, re-read; or claimed now
        record_task_cpu(batch.window_state().root, context["ti"], "claim")
        self.log.info("%s: fired on %s, claimed %d units", batch.label, reason, len(manifest["units"]))
        if not manifest["units"]:
            raise AirflowSkipException(f"{batch.label}: nothing arrived that no earlier batch claimed")
        return {"manifest": manifest, "reason": reason}
