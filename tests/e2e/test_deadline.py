"""WindowEndDeadline in real processes: fires for a live window run, never for a backfill."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from iqp_dev.local_airflow import airflow_env  # noqa: E402

pytestmark = pytest.mark.airflow

W = 30  # window seconds
OFFSET = 3  # deadline offset seconds

DAG_TEMPLATE = textwrap.dedent(
    '''
    from __future__ import annotations

    import time
    from datetime import timedelta

    import pendulum
    from airflow.sdk import DAG, AsyncCallback, task

    from airflow_iqp.deadlines import log_deadline_missed, window_deadline_alert
    from airflow_iqp.timetables.window import WindowTimetable

    ANCHOR = pendulum.parse("{anchor}")

    with DAG(
        "deadline_probe",
        schedule=WindowTimetable(window=timedelta(seconds={W}), deadline_offset=timedelta(seconds={OFFSET}), anchor=ANCHOR),
        start_date=ANCHOR,
        end_date=ANCHOR.add(seconds=1),  # exactly one scheduled window
        catchup=False,
        max_active_runs=3,
        deadline=window_deadline_alert(
            timedelta(seconds={OFFSET}), AsyncCallback(log_deadline_missed, kwargs={{"query": "probe"}})
        ),
    ):

        @task
        def work(data_interval_end=None):
            # a live run outlasts its deadline; a backfill run still takes a few seconds, so a
            # (wrongly created, already past) deadline would be seen as missed
            time.sleep(max(5.0, (data_interval_end.add(seconds={OFFSET} + 6) - pendulum.now("UTC")).total_seconds()))

        work()
    '''
)


def test_deadline_fires_for_live_window_not_for_backfill(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    markers = tmp_path / "markers"
    markers.mkdir()
    anchor = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=30)
    (dags / "deadline_probe.py").write_text(DAG_TEMPLATE.format(anchor=anchor.isoformat(), W=W, OFFSET=OFFSET))
    # The default callback records a missed deadline under [iqp] state_dir.
    with airflow_env(dags, extra_env={"AIRFLOW__IQP__STATE_DIR": str(markers)}) as af:
        af.wait_for_dag("deadline_probe")
        af.unpause("deadline_probe")
        backfill = af.backfill("deadline_probe", anchor - timedelta(seconds=3 * W), anchor - timedelta(seconds=2 * W))
        # The scheduled run for [anchor, anchor + W) appears once the window opens.
        deadline = time.monotonic() + 90
        live = None
        while time.monotonic() < deadline and live is None:
            live = next((r for r in af.dag_runs("deadline_probe") if r["run_type"] == "scheduled"), None)
            time.sleep(0.5)
        assert live is not None, af.dag_runs("deadline_probe")
        af.wait_for_run("deadline_probe", live["dag_run_id"], timeout=120)
        runs = af.dag_runs("deadline_probe")
        backfill_runs = [r for r in runs if r["run_type"] == "backfill"]
        assert len(backfill_runs) == 2, runs
        for r in backfill_runs:
            af.wait_for_run("deadline_probe", r["dag_run_id"], timeout=60)
        # give the triggerer a moment to run the callback
        for _ in range(40):
            if list(markers.glob("probe/deadline_missed/*.json")):
                break
            time.sleep(0.5)
        rows = af.sql(
            "SELECT r.run_id, r.run_type, d.deadline_time, d.missed FROM deadline d "
            "JOIN dag_run r ON r.id = d.dagrun_id WHERE r.dag_id = 'deadline_probe'"
        )
        callbacks = af.sql("SELECT state, data FROM callback")

    # The run was created when its window opened, with the window as its data interval.
    assert live["data_interval_start"].startswith(anchor.isoformat().replace("+00:00", ""))
    created = datetime.fromisoformat(live["queued_at"].replace("Z", "+00:00"))
    assert anchor <= created < anchor + timedelta(seconds=W), (anchor, created)
    # One deadline row, for the live run, at window end + offset, missed.
    assert [(r["run_type"], r["missed"]) for r in rows] == [("scheduled", 1)], rows
    assert rows[0]["deadline_time"].startswith(
        (anchor + timedelta(seconds=W + OFFSET)).strftime("%Y-%m-%d %H:%M:%S")
    ), rows
    # The AsyncCallback ran in the triggerer, for the live run only.
    files = sorted(markers.glob("probe/deadline_missed/*.json"))
    assert len(files) == 1, (files, callbacks)
    record = json.loads(files[0].read_text())
    assert record["query"] == "probe"
    assert record["dag_run"]["dag_run_id"] == live["dag_run_id"]
    assert record["dag_run"]["run_type"] == "scheduled"
    assert record["deadline"]["deadline_time"].startswith((anchor + timedelta(seconds=W + OFFSET)).strftime("%Y-%m-%d"))
    assert backfill["dag_id"] == "deadline_probe"
