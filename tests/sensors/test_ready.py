"""BatchReadySensor on a real landing directory: fire and claim, defer with a timeout, resume, skip."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
    TaskDeferred,
)

from airflow_iqp.sensors.ready import DEFER_MARGIN_S, BatchReadySensor
from airflow_iqp.triggers.ready import BatchReadyTrigger
from tests.support.landing import file_batch, land


def context() -> dict:
    """The part of a task's context the sensor reads: its task instance."""
    return {"ti": SimpleNamespace(task_id="wait", map_index=0, try_number=1)}


def sensor(batch, **kwargs) -> BatchReadySensor:
    return BatchReadySensor(task_id="wait", batch=batch.to_dict() if batch is not None else None, **kwargs)


def test_fires_at_once_when_the_units_are_there_and_claims_them(tmp_path):
    batch = file_batch(tmp_path)
    land(batch, 0, 1, 2)
    out = sensor(batch).execute(context())
    assert out["reason"] == "units"
    assert out["manifest"]["units"] == ["000000.csv", "000001.csv", "000002.csv"]
    assert batch.window_state().claim_of(1) == out["manifest"]
    assert [(r["task_id"], r["map_index"], r["try_number"], r["phase"]) for r in batch.window_state().records("cpu")] \
        == [("wait", 0, 1, "claim")]


def test_defers_to_the_trigger_with_a_timeout_when_not_ready(tmp_path):
    batch = file_batch(tmp_path)
    land(batch, 0)
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        sensor(batch, poll_interval=0.5).execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, BatchReadyTrigger) and deferred.value.method_name == "execute_complete"
    assert trigger.batch == batch.to_dict() and trigger.poll_interval == 0.5 and trigger.claim
    # the time left to the batch's deadline, plus the margin
    timeout = deferred.value.timeout
    assert isinstance(timeout, timedelta)
    left = batch.deadline_ts - before
    assert left + DEFER_MARGIN_S - 1 <= timeout.total_seconds() <= left + DEFER_MARGIN_S
    assert batch.window_state().claims() == {}  # nothing claimed before the trigger fires


def test_a_window_whose_deadline_has_passed_still_gets_the_margin(tmp_path):
    now = time.time()
    batch = file_batch(tmp_path, ready_ts=now - 100, latest_start_ts=now - 50, deadline_ts=now - 10)
    assert sensor(batch, defer_margin=30).defer_timeout(batch, now) == timedelta(seconds=30)
    late = batch.with_(late=True, lateness=40.0)  # a late batch waits for its lateness too
    assert sensor(late, defer_margin=30).defer_timeout(late, now) == timedelta(seconds=60)


def test_execute_complete_claims_what_the_trigger_claimed(tmp_path):
    batch = file_batch(tmp_path)
    land(batch, 0, 1)
    claimed = batch.window_state().claim(1, ["000000.csv"], [])  # as the trigger did when it fired
    land(batch, 2)  # lands after: the next batch's
    out = sensor(batch).execute_complete(context(), {"status": "ready", "reason": "time", "units": 1})
    assert out == {"manifest": claimed, "reason": "time"}


def test_execute_complete_claims_when_the_trigger_did_not(tmp_path):
    batch = file_batch(tmp_path)
    land(batch, 0, 1)
    out = sensor(batch).execute_complete(context(), {"status": "ready", "reason": "units"})
    assert out["manifest"]["units"] == ["000000.csv", "000001.csv"]


def test_an_error_event_fails_the_task_with_its_message(tmp_path):
    batch = file_batch(tmp_path)
    permanent = {"status": "error", "reason": "error", "transient": False,
                 "error": "batch 1/2: PermissionError: [Errno 13] Permission denied: '/landing'"}
    with pytest.raises(AirflowFailException, match="Permission denied: '/landing'"):
        sensor(batch).execute_complete(context(), permanent)
    transient = {**permanent, "transient": True, "error": "batch 1/2: gave up after 30 transient error(s)"}
    with pytest.raises(AirflowException, match="gave up after 30") as raised:
        sensor(batch).execute_complete(context(), transient)
    assert not isinstance(raised.value, AirflowFailException)  # Airflow's retries may get past it
    assert batch.window_state().claims() == {}


def test_skips_without_a_batch(tmp_path):
    with pytest.raises(AirflowSkipException, match="no batch to wait for"):
        sensor(None).execute(context())


def test_skips_when_there_is_nothing_left_to_claim(tmp_path):
    now = time.time()
    batch = file_batch(tmp_path, ready_ts=now - 2, latest_start_ts=now - 1)  # due on time, nothing landed
    with pytest.raises(AirflowSkipException, match="nothing arrived that no earlier batch claimed"):
        sensor(batch).execute(context())
    assert batch.window_state().claim_of(1)["units"] == []


def test_a_bad_plan_entry_fails_without_retries(tmp_path):
    entry = file_batch(tmp_path).to_dict()
    entry["index"] = "one"
    with pytest.raises(AirflowFailException, match="a bad plan entry: batch: index must be a whole number"):
        BatchReadySensor(task_id="wait", batch=entry).execute(context())


def test_a_bad_stream_in_the_plan_entry_fails_without_retries(tmp_path):
    batch = file_batch(tmp_path)
    land(batch, 0, 1)
    entry = batch.to_dict()
    entry["streams"][0]["format"] = "xls"
    with pytest.raises(AirflowFailException, match="a bad plan entry: streams.events.format"):
        BatchReadySensor(task_id="wait", batch=entry).execute(context())


# ------------------------------------------------------------------ claim=False: the fused tail's wait


def test_the_tails_wait_fires_at_its_start_and_claims_nothing(tmp_path):
    tail = file_batch(tmp_path, last=True, index=2, start_ts=time.time() - 1)
    land(tail, 0, 1, 2, 3)
    assert sensor(tail, claim=False).execute(context()) == {"reason": "lead"}
    assert tail.window_state().claims() == {}
    assert sensor(tail, claim=False).execute_complete(context(), {"status": "ready", "reason": "lead"}) == {
        "reason": "lead"}


def test_the_tails_wait_defers_until_its_start(tmp_path):
    tail = file_batch(tmp_path, last=True, index=2, start_ts=time.time() + 30)
    with pytest.raises(TaskDeferred) as deferred:
        sensor(tail, claim=False).execute(context())
    assert deferred.value.trigger.claim is False
    assert deferred.value.timeout.total_seconds() <= tail.deadline_ts - time.time() + DEFER_MARGIN_S + 1


def test_the_tails_wait_needs_the_tail(tmp_path):
    with pytest.raises(AirflowFailException, match="needs the plan's tail"):
        sensor(file_batch(tmp_path), claim=False).execute(context())


# ------------------------------------------------------------------ without deferral


def test_poke_says_whether_the_batch_may_start(tmp_path):
    batch = file_batch(tmp_path)
    wait = sensor(batch, deferrable=False)
    land(batch, 0)
    assert wait.poke(context()) is False
    land(batch, 1)
    assert wait.poke(context()) is True


def test_a_wait_killed_after_its_trigger_claimed_is_retried_and_rereads_the_claim(tmp_path):
    """Airflow's scheduler may fail a resumed wait whose trigger fired before the executor
    reported the deferral; the wait has retries, and the retry returns the same claim."""
    assert BatchReadySensor(task_id="wait", batch={}).retries >= 1
    batch = file_batch(tmp_path)
    land(batch, 0, 1)
    claimed = batch.window_state().claim(1, ["000000.csv", "000001.csv"], [])  # the trigger fired
    land(batch, 2)  # lands after the claim: the next batch's
    retry = {"ti": SimpleNamespace(task_id="wait", map_index=0, try_number=2)}
    out = sensor(batch).execute(retry)
    assert out["manifest"] == claimed and batch.window_state().claim_of(1) == claimed
