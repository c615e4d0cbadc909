"""WindowEndDeadline as the scheduler evaluates it, window_deadline_alert, and the default callback.

The reference goes through Airflow's own encoder and decoder (which find it among the
plugin's deadline references) and is evaluated on a session over an in-memory SQLite
``dag_run`` table. (tests/e2e/test_deadline.py checks the same in a running Airflow.)
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pendulum
import pytest
from airflow.models.dagrun import DagRun
from airflow.sdk import AsyncCallback, DeadlineAlert
from airflow.serialization.decoders import (
    decode_deadline_alert,
    decode_deadline_reference,
)
from airflow.serialization.encoders import (
    encode_deadline_alert,
    encode_deadline_reference,
)
from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session

from airflow_iqp.deadlines import (
    WindowEndDeadline,
    log_deadline_missed,
    window_deadline_alert,
)

END = pendulum.datetime(2024, 3, 1, 6, tz="UTC")


@pytest.fixture
def session():
    """Runs of DAG ``q``: a scheduled and a backfill run of a window, and a manual run without one."""
    engine = create_engine("sqlite://")
    DagRun.__table__.create(engine)
    with Session(engine) as s:
        for n, (run_id, run_type, end) in enumerate([("scheduled__w", "scheduled", END),
                                                     ("backfill__w", "backfill", END),
                                                     ("manual__now", "manual", None)], 1):
            s.execute(insert(DagRun.__table__).values(
                id=n, dag_id="q", run_id=run_id, run_type=run_type, data_interval_start=end and END.add(hours=-6),
                data_interval_end=end, run_after=END, log_template_id=None))
        yield s


def scheduler_side(reference=None):
    """The reference as the scheduler has it: encoded with the DAG, decoded through the plugin registry."""
    return decode_deadline_reference(json.loads(json.dumps(encode_deadline_reference(reference or WindowEndDeadline()))))


def test_the_deadline_is_the_windows_end_plus_the_interval(session):
    deadline = scheduler_side().evaluate_with(session=session, interval=timedelta(minutes=30), dag_id="q",
                                              run_id="scheduled__w", logical_date=END.add(hours=-6))
    assert deadline == END.add(minutes=30) and deadline.tzinfo is not None


def test_no_deadline_for_a_backfill_a_run_without_a_window_or_an_unknown_run(session):
    ref = scheduler_side()
    for run_id in ("backfill__w", "manual__now", "no such run"):
        assert ref.evaluate_with(session=session, interval=timedelta(minutes=30), dag_id="q", run_id=run_id) is None


def test_the_reference_needs_the_run(session):
    with pytest.raises(ValueError, match="missing required parameters: run_id"):
        scheduler_side().evaluate_with(session=session, interval=timedelta(0), dag_id="q")


def test_the_encoded_reference_names_its_class():
    encoded = encode_deadline_reference(WindowEndDeadline())
    assert encoded == {"reference_type": "WindowEndDeadline", "__class_path": "airflow_iqp.deadlines.WindowEndDeadline"}
    assert isinstance(scheduler_side().inner_ref, WindowEndDeadline)


def test_window_deadline_alert_builds_the_alert_with_the_default_callback():
    alert = window_deadline_alert(timedelta(hours=2), query="orders")
    assert isinstance(alert, DeadlineAlert) and isinstance(alert.reference, WindowEndDeadline)
    assert alert.interval == timedelta(hours=2) and alert.name == "iqp-window-deadline"
    assert isinstance(alert.callback, AsyncCallback)
    assert alert.callback.path == "airflow_iqp.deadlines.log_deadline_missed"
    assert alert.callback.kwargs == {"query": "orders"}
    again = decode_deadline_alert(json.loads(json.dumps(encode_deadline_alert(alert))))
    assert again.interval == timedelta(hours=2) and isinstance(again.reference.inner_ref, WindowEndDeadline)


def test_window_deadline_alert_takes_another_callback():
    callback = AsyncCallback(log_deadline_missed, kwargs={"query": "other"})
    alert = window_deadline_alert(timedelta(minutes=5), callback=callback, name=None)
    assert alert.callback is callback and alert.name is None


def test_the_default_callback_logs_and_records_the_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__IQP__STATE_DIR", str(tmp_path))
    context = {"dag_run": {"dag_run_id": "scheduled__2024-03-01T00:00:00+00:00", "run_type": "scheduled"},
               "deadline": {"deadline_time": END.add(minutes=30)}}
    asyncio.run(log_deadline_missed(context, query="orders", channel="ops"))
    [record_file] = (tmp_path / "orders" / "deadline_missed").iterdir()
    assert record_file.name == "scheduled__2024-03-01T00_00_00+00_00.json"  # a run id as a file name
    record = json.loads(record_file.read_text())
    assert record["query"] == "orders" and record["kwargs"] == {"channel": "ops"}
    assert record["dag_run"]["run_type"] == "scheduled"
    assert record["deadline"]["deadline_time"].startswith("2024-03-01")  # a datetime, written as text


def test_the_default_callback_copes_with_an_empty_context(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__IQP__STATE_DIR", str(tmp_path))
    asyncio.run(log_deadline_missed())
    assert [p.name for p in (tmp_path / "unknown" / "deadline_missed").iterdir()] == ["unknown.json"]


def test_a_group_member_s_alert_records_a_miss_only_if_its_own_result_was_late(tmp_path, monkeypatch):
    """A group's run goes on with the queries due later: the alert of a query whose result
    was complete by its own deadline records nothing; one whose result was not, a miss."""
    from airflow_iqp.store import open_store

    monkeypatch.setenv("AIRFLOW__IQP__STATE_DIR", str(tmp_path / "default"))
    state = tmp_path / "group"  # the group DAG's own state_dir
    start, end = datetime(2024, 3, 1, tzinfo=timezone.utc), datetime(2024, 3, 1, 1, tzinfo=timezone.utc)
    run = {"dag_run_id": "scheduled__2024-03-01T00:00:00+00:00", "data_interval_start": start.isoformat(),
           "data_interval_end": end.isoformat()}
    alert = window_deadline_alert(timedelta(minutes=10), query="revenue", member_of="shop", state_dir=str(state))
    kwargs = {k: v for k, v in alert.callback.kwargs.items() if k != "query"}
    assert kwargs == {"member_of": "shop", "deadline_offset_s": 600.0, "state_dir": str(state)}
    store = open_store(state)
    store.window("revenue", "20240301T000000").write_manifest({"written_at": end.timestamp() + 599})
    store.window("buyers", "20240301T000000").write_manifest({"written_at": end.timestamp() + 601})
    for query in ("revenue", "buyers", "basket"):  # on time, late, not written
        asyncio.run(log_deadline_missed({"dag_run": run}, query=query, **kwargs))
    missed = {q for q in ("revenue", "buyers", "basket") if (state / q / "deadline_missed").exists()}
    assert missed == {"buyers", "basket"} and not (tmp_path / "default").exists()
