"""BatchReadyTrigger: waits in the triggerer until a batch's input is ready or its time has come."""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iqp.errors import ConfigError
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.listing import LISTINGS, ListingCache, is_transient
from airflow_iqp.window.readiness import (
    LAST_UNIT_GRACE_S,
    batch_ready,
    claim_batch,
    fire_at,
    tail_started,
)

#: Consecutive transient errors (see :func:`~airflow_iqp.window.listing.is_transient`) a
#: trigger rides out before it fails: with the default 2-second poll, about a minute of a
#: landing directory that cannot be listed.
MAX_ERRORS = 30
#: A listing is reused by the other waits of the process for this share of the poll
#: interval: waits polling on the same clock tick share it; the next tick lists again.
FRESH_SHARE = 0.5


def deadline_of(batch: Batch) -> float:
    """The batch's deadline (Unix seconds); a late batch's is its window's deadline plus the lateness."""
    return batch.deadline_ts + (batch.lateness if batch.late else 0.0)


def wait_ends_by(batch: Batch, claim: bool = True) -> float:
    """The last moment a wait for ``batch`` has any use (Unix seconds): its deadline
    (:func:`deadline_of`), or when it fires on time alone if that is later.

    Read from the plan entry alone, with no I/O, so that the sensor can set its deferral's
    timeout from it.
    """
    ends = [deadline_of(batch), batch.turn_ts]
    if claim:
        ends += [batch.latest_start_ts, batch.ready_ts + (LAST_UNIT_GRACE_S if batch.last else 0.0)]
    elif batch.start_ts is not None:
        ends.append(batch.start_ts)
    return max(ends)


class BatchReadyTrigger(BaseTrigger):
    """Fires when :func:`airflow_iqp.window.readiness.batch_ready` says the batch may start, and claims.

    Polls the landing directory every ``poll_interval`` seconds, on the clock's multiples
    of it, so that the triggers of one window poll together and share one listing of their
    landing directory (:data:`~airflow_iqp.window.listing.LISTINGS`); the listing runs in a
    thread so the triggerer's event loop never blocks. Between polls it wakes up exactly at
    the batch's latest safe start (and at its turn on a shared cluster) if nothing arrives
    before it. It claims the batch's units right there, at the moment it fires: the sensor
    resumes on a worker seconds later, and units that land in between belong to the next
    batch.

    With ``claim=False`` it fires at a fused tail's ``start_ts`` and leaves the claims to
    the task it wakes (the final task, which claims when each batch is ready).

    Events: ``{"status": "ready", "reason": "units" | "time" | "skip" | "lead", "at", "units"}``
    when the batch may start (``units``: how many it claimed, None without a claim), and
    ``{"status": "error", "reason": "error", "error", "transient", "at"}`` when the wait
    cannot go on: at once for a permanent error (a bad plan entry, a ``ConfigError``, a
    ``PermissionError``), and for transient I/O errors (a shared filesystem's blip) only
    after ``max_errors`` of them in a row or once the batch's deadline has passed
    (:func:`deadline_of`); until then each is logged and the next poll tries again.

    :param batch: the plan entry, as JSON (``Batch.to_dict()``); a :class:`Batch` is converted.
    :param poll_interval: seconds between checks of the landing directory.
    :param claim: claim the batch's input when it fires (the default).
    :param max_errors: consecutive transient errors before the trigger fails.
    :param listing: the listing cache to share (the process's by default). Not serialized:
        it is the triggerer process's own.
    """

    def __init__(self, batch: dict | Batch, poll_interval: float = 2.0, claim: bool = True,
                 max_errors: int = MAX_ERRORS, *, listing: ListingCache | None = None):
        super().__init__()
        self.batch = batch.to_dict() if isinstance(batch, Batch) else batch
        self.poll_interval = float(poll_interval)
        self.claim = bool(claim)
        self.max_errors = int(max_errors)
        self.listing = listing

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"batch": self.batch, "poll_interval": self.poll_interval, "claim": self.claim,
                 "max_errors": self.max_errors})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            batch = Batch.from_dict(self.batch)
            if not self.claim and batch.start_ts is None:
                raise ConfigError("the wait before a fused tail's final task needs the plan's tail (with start_ts)",
                                  "batch")
        except Exception as exc:  # noqa: BLE001 - a bad plan entry: no poll will make it good
            yield self._failed(exc, time.time(), transient=False)
            return
        listing = (self.listing or LISTINGS).within(self.poll_interval * FRESH_SHARE)
        give_up = deadline_of(batch)
        errors = 0
        wakes: tuple[float, ...] = (batch.start_ts,) if not self.claim else ()
        while True:
            now = time.time()
            try:
                payload, wakes = await asyncio.to_thread(self._check, batch, now, listing)
            except Exception as exc:  # noqa: BLE001 - classified: retried or reported as an event
                if not is_transient(exc):
                    yield self._failed(exc, now, transient=False)
                    return
                errors += 1
                if errors >= self.max_errors or now >= give_up:
                    yield self._failed(exc, now, transient=True, errors=errors)
                    return
                self.log.warning("%s: %s while checking readiness (%d in a row); trying again at the next poll",
                                 batch.label, _describe(exc), errors)
            else:
                errors = 0
                if payload is not None:
                    yield TriggerEvent(payload)
                    return
            await asyncio.sleep(self._pause(time.time(), wakes))

    def _check(self, batch: Batch, now: float, listing) -> tuple[dict | None, tuple[float, ...]]:
        """One poll, in a thread: (the event's payload or None, the times at which the batch's
        readiness changes on time alone: its fire time, its turn, a late batch's deadline)."""
        if not self.claim:
            reason = tail_started(batch, now)
            return ({"status": "ready", "reason": reason, "at": now, "units": None} if reason else None,
                    (batch.start_ts,))
        reason = batch_ready(batch, now, listing=listing)
        if not reason:
            return None, (fire_at(batch), batch.turn_ts) + ((deadline_of(batch),) if batch.late else ())
        units = len(claim_batch(batch)["units"])
        return {"status": "ready", "reason": reason, "at": now, "units": units}, ()

    def _pause(self, now: float, wakes: tuple[float, ...]) -> float:
        """Seconds to the next poll: the next multiple of the poll interval on the clock (the
        same instant for every trigger with this interval), or the next of ``wakes`` if it
        comes first."""
        interval = max(self.poll_interval, 0.01)
        tick = math.floor(now / interval + 1) * interval
        return max(0.01, min([w for w in wakes if now < w < tick] + [tick]) - now)

    def _failed(self, exc: BaseException, now: float, transient: bool, errors: int = 1) -> TriggerEvent:
        label = self.batch.get("label", "batch") if isinstance(self.batch, dict) else "batch"
        if transient:
            message = (f"{label}: gave up after {errors} transient error(s) in a row, the last: {_describe(exc)}"
                       " (the landing directory or the state directory could not be read)")
        else:
            message = f"{label}: {_describe(exc)}"
        self.log.error("%s\n%s", message, "".join(traceback.format_exception(exc)).rstrip())
        return TriggerEvent({"status": "error", "reason": "error", "error": message, "transient": transient,
                             "at": now})


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
