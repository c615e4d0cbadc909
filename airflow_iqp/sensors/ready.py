"""BatchReadySensor: wait, without holding a worker, until one batch may start; then claim its input."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
)

from airflow_iqp import config
from airflow_iqp.errors import ConfigError
from airflow_iqp.triggers.ready import BatchReadyTrigger, wait_ends_by
from airflow_iqp.window.accounting import record_task_cpu
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.listing import is_transient
from airflow_iqp.window.readiness import batch_ready, claim_batch, tail_started
from airflow_iqp.window.replan import effective

#: A deferred wait times out this long after the batch's deadline (:func:`wait_ends_by`):
#: the trigger fires by then on its own, so only a triggerer that was not running it gets
#: here, and the window's result is late anyway.
DEFER_MARGIN_S = 600.0
#: Retries of a batch's wait by default (see ``BatchReadySensor.__init__``).
SENSOR_RETRIES = 2


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

    Errors: a transient I/O error (a shared filesystem's blip,
    :func:`~airflow_iqp.window.listing.is_transient`) is retried at the next poll, in the
    trigger up to its ``max_errors`` in a row or the batch's deadline; a permanent one (a
    bad plan entry, a ``ConfigError``, a ``PermissionError``) fails the task at once with
    its message, without retries (``AirflowFailException``).

    Timeout: the deferral carries ``timeout`` = the time left until the batch's deadline,
    or its fire time if that is later (:func:`~airflow_iqp.triggers.ready.wait_ends_by`),
    plus ``defer_margin``. The trigger fires by then on its own, so the timeout only ends a wait that no triggerer ran
    in time: the task then fails with ``AirflowSensorTimeout`` (no retries) and its units stay
    unclaimed. Without deferral, the sensor's own ``timeout`` applies as for any sensor.

    :param batch: one entry of the plan task's output (mapped).
    :param poll_interval: seconds between checks of the landing directory.
    :param claim: claim the batch's input when it fires (the default).
    :param defer_margin: seconds after the batch's deadline at which a deferred wait times out.
    """

    template_fields: Sequence[str] = ("batch",)
    ui_color = "#e8f0fe"

    def __init__(self, *, batch: Any, poll_interval: float | None = None, deferrable: bool = True,
                 claim: bool = True, defer_margin: float = DEFER_MARGIN_S, **kwargs):
        kwargs.setdefault("mode", "reschedule")
        # Retries for what is not the wait's own verdict: Airflow 3.3's scheduler can fail a
        # sensor whose trigger fired before the executor reported its deferral (the "finished
        # with state success, but the task instance's state attribute is queued" race), and
        # kill the resumed task. A retry checks again and re-reads its claim; a permanent
        # error or a timeout still fails at once (AirflowFailException, AirflowSensorTimeout).
        kwargs.setdefault("retries", SENSOR_RETRIES)
        kwargs.setdefault("retry_delay", timedelta(seconds=2))
        super().__init__(**kwargs)
        self.batch = batch
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.claim = claim
        self.defer_margin = defer_margin

    def _due(self, batch: Batch) -> str | None:
        """Why the batch may start now, or None; a transient error counts as "not yet"."""
        try:
            return batch_ready(batch, time.time()) if self.claim else tail_started(batch, time.time())
        except Exception as exc:
            if not is_transient(exc):
                raise AirflowFailException(f"{batch.label}: {type(exc).__name__}: {exc}") from exc
            self.log.warning("%s: %s: %s while checking readiness; trying again at the next poll",
                             batch.label, type(exc).__name__, exc)
            return None

    def _batch(self) -> Batch:
        try:
            batch = Batch.from_dict(self.batch)
        except ConfigError as exc:
            raise AirflowFailException(f"a bad plan entry: {exc}") from exc
        if not self.claim and batch.start_ts is None:
            raise AirflowFailException("batch: the wait before a fused tail's final task needs the plan's tail "
                                       "(with start_ts)")
        return batch

    def poke(self, context) -> bool:
        return self._due(self._batch()) is not None

    def execute(self, context) -> Any:
        if not self.batch:  # e.g. no late batch: the window before this one was never planned
            raise AirflowSkipException("no batch to wait for")
        batch = self._batch()
        reason = self._due(batch)
        if reason:
            return self._claim(batch, reason, context)
        if not self.deferrable:
            super().execute(context)
            return self._claim(batch, "poke", context)
        record_task_cpu(batch.window_state(), context["ti"], "defer")
        self.defer(trigger=BatchReadyTrigger(batch.to_dict(), self.poll_interval or config.poll_interval(), self.claim),
                   method_name="execute_complete", timeout=self.defer_timeout(batch))

    def defer_timeout(self, batch: Batch, now: float | None = None) -> timedelta:
        """How long the deferred wait may last: until the batch's deadline plus ``defer_margin``."""
        now = time.time() if now is None else now
        return timedelta(seconds=max(0.0, wait_ends_by(batch, self.claim) - now) + self.defer_margin)

    def execute_complete(self, context, event: dict | None = None) -> Any:
        event = event or {}
        if event.get("status") == "error":
            error = event.get("error") or "the trigger failed"
            raise AirflowException(error) if event.get("transient") else AirflowFailException(error)
        return self._claim(self._batch(), event.get("reason", "trigger"), context)

    def _claim(self, batch: Batch, reason: str, context) -> dict:
        if not self.claim:
            record_task_cpu(batch.window_state(), context["ti"], "fire")
            self.log.info("%s: fired on %s; its task claims when the input is ready", batch.label, reason)
            return {"reason": reason}
        manifest = claim_batch(batch)  # the trigger's claim, re-read; or claimed now
        record_task_cpu(batch.window_state(), context["ti"], "claim")
        # The UI names the batch as the newest re-plan has it (its units, or why it was dropped).
        batch = effective(batch)
        self.batch = {**self.batch, "label": batch.label}
        self.log.info("%s: fired on %s, claimed %d units", batch.label, reason, len(manifest["units"]))
        if not manifest["units"]:
            raise AirflowSkipException(f"{batch.label}: nothing arrived that no earlier batch claimed")
        return {"manifest": manifest, "reason": reason}
