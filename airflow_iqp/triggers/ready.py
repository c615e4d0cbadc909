"""BatchReadyTrigger: waits in the triggerer until a batch's input is ready or its time has come."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent


class BatchReadyTrigger(BaseTrigger):
    """Fires when :func:`airflow_iqp.window.readiness.batch_ready` says the batch may start, and claims.

    Polls the landing directory every ``poll_interval`` seconds (a directory listing,
    run in a thread so the triggerer's event loop never blocks), and wakes up exactly
    at the batch's latest safe start if nothing arrives before it. It claims the
    batch's units right there, at the moment it fires: the sensor resumes on a worker
    seconds later, and units that land in between belong to the next batch.

    With ``claim=False`` it fires at a fused tail's ``start_ts`` and leaves the claims to
    the task it wakes (the final task, which claims when each batch is ready).
    """

    def __init__(self, batch: dict, poll_interval: float = 2.0, claim: bool = True):
        super().__init__()
        self.batch = batch
        self.poll_interval = float(poll_interval)
        self.claim = bool(claim)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"batch": self.batch, "poll_interval": self.poll_interval, "claim": self.claim})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_iqp.window.batch import Batch
        from airflow_iqp.window.readiness import batch_ready, claim_batch, fire_at, tail_started

        batch = Batch.from_dict(self.batch)
        wake = fire_at(batch) if self.claim else batch.start_ts
        while True:
            now = time.time()
            if self.claim:
                reason = await asyncio.to_thread(batch_ready, batch, now)
            else:
                reason = tail_started(batch, now)
            if reason:
                units = None
                if self.claim:
                    units = len((await asyncio.to_thread(claim_batch, batch))["units"])
                yield TriggerEvent({"reason": reason, "at": now, "units": units})
                return
            await asyncio.sleep(max(0.05, min(self.poll_interval, wake - now)))
