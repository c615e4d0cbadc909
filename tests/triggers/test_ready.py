"""BatchReadyTrigger: its run() on a real landing directory, its serialization, its errors."""

from __future__ import annotations

import asyncio
import errno
import importlib
import json
import os
import time

import pytest
from airflow.triggers.base import TriggerEvent

from airflow_iqp.landing import count_names, list_units
from airflow_iqp.triggers.ready import BatchReadyTrigger, wait_ends_by
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.listing import ListingCache
from tests.support.landing import file_batch, land

POLL = 0.05


def first_event(trigger: BatchReadyTrigger, timeout: float = 10.0, meanwhile=None) -> TriggerEvent:
    """Drive ``trigger.run()`` in an event loop to its first event, running ``meanwhile`` beside it."""

    async def go():
        events = trigger.run()
        side = asyncio.ensure_future(meanwhile()) if meanwhile else None
        try:
            return await asyncio.wait_for(events.__anext__(), timeout)
        finally:
            await events.aclose()
            if side is not None:
                await side

    return asyncio.run(go())


def failing(exc: BaseException, times: int | None = None, then=None):
    """A listing function that raises ``exc`` (the first ``times`` calls, or always), then calls ``then``."""
    calls = []

    def listing(*args, **kwargs):
        calls.append(args)
        if times is None or len(calls) <= times:
            raise exc
        return then(*args, **kwargs)

    listing.calls = calls
    return listing


# ------------------------------------------------------------------ serialization


def test_serialize_round_trips(tmp_path):
    batch = file_batch(tmp_path)
    trigger = BatchReadyTrigger(batch, poll_interval=3, claim=False, max_errors=7)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_iqp.triggers.ready.BatchReadyTrigger"
    assert kwargs["poll_interval"] == 3.0 and kwargs["claim"] is False and kwargs["max_errors"] == 7
    # as the triggerer does it: the class by its path, the kwargs through JSON
    module, _, name = classpath.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))
    assert again.serialize() == (classpath, kwargs)
    assert Batch.from_dict(again.batch) == batch


def test_a_batch_object_is_kept_as_its_json(tmp_path):
    batch = file_batch(tmp_path)
    assert BatchReadyTrigger(batch).batch == batch.to_dict()
    assert BatchReadyTrigger(batch.to_dict()).serialize() == BatchReadyTrigger(batch).serialize()


# ------------------------------------------------------------------ firing


def test_fires_on_units_when_they_land_and_claims_them(tmp_path):
    batch = file_batch(tmp_path)
    land(batch, 0)

    async def arrive():
        await asyncio.sleep(0.3)
        land(batch, 1)

    started = time.time()
    event = first_event(BatchReadyTrigger(batch, poll_interval=POLL), meanwhile=arrive)
    assert event.payload["status"] == "ready" and event.payload["reason"] == "units"
    assert event.payload["units"] == 2 and event.payload["at"] >= started + 0.3
    claim = batch.window_state().claim_of(1)
    assert claim["units"] == ["000000.csv", "000001.csv"]


def test_fires_on_time_at_the_latest_safe_start(tmp_path):
    now = time.time()
    batch = file_batch(tmp_path, latest_start_ts=now + 0.4, ready_ts=now + 0.2)
    land(batch, 0)  # one of two: not enough
    event = first_event(BatchReadyTrigger(batch, poll_interval=10))  # woken by the fire time, not a poll
    assert event.payload["reason"] == "time" and event.payload["units"] == 1
    assert batch.latest_start_ts <= event.payload["at"] < batch.latest_start_ts + 1.0


def test_a_batch_past_its_fire_time_fires_at_its_turn(tmp_path):
    """On a shared cluster a batch waits for its turn (turn_ts) even when its time has come."""
    now = time.time()
    batch = file_batch(tmp_path, ready_ts=now - 2, latest_start_ts=now - 1, turn_ts=now + 0.3)
    event = first_event(BatchReadyTrigger(batch, poll_interval=10))  # woken by the turn, not a poll
    assert event.payload["reason"] == "time"
    assert batch.turn_ts <= event.payload["at"] < batch.turn_ts + 1.0


def test_a_fused_tails_wait_fires_at_its_start_and_claims_nothing(tmp_path):
    tail = file_batch(tmp_path, last=True, index=2, start_ts=time.time() + 0.2)
    land(tail, 0, 1, 2, 3)
    event = first_event(BatchReadyTrigger(tail, poll_interval=10, claim=False))
    assert event.payload == {"status": "ready", "reason": "lead", "at": event.payload["at"], "units": None}
    assert event.payload["at"] >= tail.start_ts
    assert tail.window_state().claims() == {}


# ------------------------------------------------------------------ errors


def test_a_transient_listing_error_is_logged_and_retried(tmp_path, capfd):
    batch = file_batch(tmp_path)
    land(batch, 0, 1)
    stale = failing(OSError(errno.ESTALE, os.strerror(errno.ESTALE), batch.landing), times=2, then=count_names)
    event = first_event(BatchReadyTrigger(batch, poll_interval=POLL, listing=ListingCache(count_names=stale)))
    assert event.payload["reason"] == "units" and event.payload["units"] == 2
    assert len(stale.calls) == 3
    logged = capfd.readouterr()
    retried = [line for line in (logged.out + logged.err).splitlines() if "trying again at the next poll" in line]
    assert len(retried) >= 2 and "Stale file handle" in retried[0]


def test_a_landing_directory_gone_for_a_moment_delays_the_claim_and_loses_nothing(tmp_path):
    """A mount that drops the directory at the batch's fire time: the claim waits for it to come
    back instead of claiming nothing, which would hand the batch's units to the next batch."""
    now = time.time()
    batch = file_batch(tmp_path, index=2, latest_start_ts=now + 0.4, label="batch 2/2")  # batch 1 never claims
    land(batch, 0, 1)
    landing, away = tmp_path / "landing", tmp_path / "landing.away"

    async def blip():
        await asyncio.sleep(0.2)  # the trigger has seen the units by now
        landing.rename(away)
        await asyncio.sleep(0.6)
        away.rename(landing)

    event = first_event(BatchReadyTrigger(batch, poll_interval=POLL), meanwhile=blip)
    assert event.payload["reason"] == "time" and event.payload["units"] == 2
    assert event.payload["at"] >= now + 0.8


def test_transient_errors_fail_the_trigger_after_max_errors_in_a_row(tmp_path):
    batch = file_batch(tmp_path)
    eio = failing(OSError(errno.EIO, os.strerror(errno.EIO), batch.landing))
    trigger = BatchReadyTrigger(batch, poll_interval=POLL, max_errors=3, listing=ListingCache(count_names=eio))
    event = first_event(trigger)
    assert event.payload["status"] == "error" and event.payload["transient"] is True
    assert 2 <= len(eio.calls) <= 3  # a poll that comes within a failed listing's freshness sees its error
    assert event.payload["error"].startswith("batch 1/2: gave up after 3 transient error(s) in a row")
    assert "OSError: [Errno 5] Input/output error" in event.payload["error"]


def test_transient_errors_fail_the_trigger_once_the_deadline_has_passed(tmp_path):
    now = time.time()
    batch = file_batch(tmp_path, deadline_ts=now + 0.3, latest_start_ts=now + 60, ready_ts=now + 30)
    timeout = failing(TimeoutError(errno.ETIMEDOUT, "Connection timed out"))
    trigger = BatchReadyTrigger(batch, poll_interval=POLL, max_errors=1000, listing=ListingCache(count_names=timeout))
    event = first_event(trigger)
    assert event.payload["status"] == "error" and event.payload["transient"] is True
    # it would fire on time a minute later, but a wait whose listings keep failing gives up at the deadline
    assert wait_ends_by(batch) == batch.latest_start_ts
    assert batch.deadline_ts <= event.payload["at"] < batch.deadline_ts + 1.0
    assert 1 < len(timeout.calls) < 1000
    assert "TimeoutError: [Errno 110] Connection timed out" in event.payload["error"]


def test_a_bad_plan_entry_fails_at_once(tmp_path):
    entry = file_batch(tmp_path).to_dict()
    del entry["deadline_ts"]
    event = first_event(BatchReadyTrigger(entry, poll_interval=POLL))
    assert event.payload["status"] == "error" and event.payload["transient"] is False
    assert event.payload["error"] == "batch 1/2: ConfigError: batch: a plan entry lacks deadline_ts"


def test_a_tails_wait_without_the_tail_fails_at_once(tmp_path):
    event = first_event(BatchReadyTrigger(file_batch(tmp_path), poll_interval=POLL, claim=False))
    assert event.payload["transient"] is False
    assert event.payload["error"] == ("batch 1/2: ConfigError: batch: the wait before a fused tail's final task "
                                      "needs the plan's tail (with start_ts)")


def test_a_bad_stream_in_the_plan_entry_fails_at_once(tmp_path):
    batch = file_batch(tmp_path)
    land(batch, 0, 1)
    entry = batch.to_dict()
    entry["streams"][0]["format"] = "xls"
    event = first_event(BatchReadyTrigger(entry, poll_interval=POLL))
    assert event.payload["transient"] is False
    assert "ConfigError: streams.events.format: stream events: format must be one of" in event.payload["error"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a directory whatever its mode")
def test_an_unreadable_landing_directory_fails_at_once(tmp_path):
    batch = file_batch(tmp_path)
    os.chmod(batch.landing, 0)
    try:
        event = first_event(BatchReadyTrigger(batch, poll_interval=POLL))
    finally:
        os.chmod(batch.landing, 0o755)
    assert event.payload["transient"] is False and "PermissionError" in event.payload["error"]


def test_a_permission_error_while_listing_fails_at_once(tmp_path):
    batch = file_batch(tmp_path)
    denied = failing(PermissionError(errno.EACCES, os.strerror(errno.EACCES), batch.landing))
    event = first_event(BatchReadyTrigger(batch, poll_interval=POLL, listing=ListingCache(count_names=denied)))
    assert event.payload["status"] == "error" and event.payload["transient"] is False
    assert len(denied.calls) == 1
    assert event.payload["error"] == f"batch 1/2: PermissionError: [Errno 13] Permission denied: '{batch.landing}'"


# ------------------------------------------------------------------ one listing per poll


def test_many_triggers_on_one_landing_directory_list_it_once_per_poll(tmp_path):
    """Eight batches wait on one directory: three units are there, each batch's are too, but
    none may start before batch 1 claims (and batch 1 is not among them). Every poll lists
    the directory once for all of them, and all fire on time together."""
    poll, n = 0.2, 8
    now = time.time()
    first = file_batch(tmp_path)
    land(first, 0, 1, 2)
    counted, listed = [], []

    def count(landing):
        counted.append(time.time())
        return count_names(landing)

    def units(landing, streams):
        listed.append(time.time())
        return list_units(landing, streams)

    cache = ListingCache(list_units=units, count_names=count)
    fire = now + 1.0
    batches = [first.with_(index=i, of=n + 1, units=1, cumulative=1, label=f"batch {i}", latest_start_ts=fire)
               for i in range(2, n + 2)]
    triggers = [BatchReadyTrigger(b, poll_interval=poll, listing=cache) for b in batches]

    async def all_events():
        runs = [t.run() for t in triggers]
        try:
            return await asyncio.wait_for(asyncio.gather(*(r.__anext__() for r in runs)), 10)
        finally:
            for r in runs:
                await r.aclose()

    events = asyncio.run(all_events())
    # Each fires at its latest start: on "time", or on "units" where its check ran after the
    # batch before it claimed in the same poll (then its units are there and its turn has come).
    assert {e.payload["reason"] for e in events} <= {"time", "units"}, [e.payload for e in events]
    assert "time" in {e.payload["reason"] for e in events}
    assert all(e.payload["at"] >= fire for e in events), [(e.payload["at"] - fire) for e in events]
    polls = (fire - now) / poll + 1
    # The polls up to the latest start, and the one or two in which they all fire (a poll
    # that straddles the latest start leaves some to the next).
    assert 2 <= len(counted) <= polls + 2, counted
    assert len(listed) == len(counted), "each poll lists the complete units once, for every batch"
    checks = cache.hits + cache.listings  # every check of every trigger: a count and a unit listing
    assert checks >= 2 * n * (len(counted) - 1), "every trigger checked at (nearly) every poll"
    # One listing per poll, against a check of every trigger at (nearly) every poll.
    assert cache.listings == len(counted) + len(listed)
    # the first claim takes the three units; the others find none left
    claims = [b.window_state().claim_of(b.index)["units"] for b in batches]
    assert sorted(len(c) for c in claims) == [0] * (n - 1) + [3]


def test_a_batch_waits_for_the_claim_of_the_one_before(tmp_path):
    first = file_batch(tmp_path)
    second = first.with_(index=2, cumulative=2, label="batch 2/2")
    land(first, 0, 1)

    async def claim_first():
        await asyncio.sleep(0.3)
        first.window_state().claim(1, [], [])

    event = first_event(BatchReadyTrigger(second, poll_interval=POLL), meanwhile=claim_first)
    assert event.payload["reason"] == "units" and event.payload["units"] == 2
