"""BatchOperator against a real state directory, with a stand-in spark-submit."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_iqp.errors import ConfigError
from airflow_iqp.operators.batch import BATCH_TIMEOUT_MIN_S, BatchOperator
from airflow_iqp.options import SparkConnect, SparkSubmit
from airflow_iqp.spark.submit import job_path
from airflow_iqp.state import WindowState, claim_units
from airflow_iqp.window.config import window_id
from tests.batches import make_batch
from tests.unit.support import START, TI, alive, context, fake_submit, read_record

pytestmark = pytest.mark.usefixtures("spark_connections")

WINDOW = window_id(START.timestamp())


def entry(tmp_path, **fields) -> dict:
    """A plan entry of window WINDOW as the plan task's XCom holds it."""
    base = dict(query="cq2", window_id=WINDOW, state_dir=str(tmp_path / "state"), landing=str(tmp_path / "landing"),
                static=str(tmp_path / "static"), cost=30.0, remaining_cost=60.0, deadline_ts=time.time() + 3600,
                label="batch 1/1 · 2 units · ready 08:04")
    return make_batch(**{**base, **fields}).to_dict()


def claim(tmp_path, units=("000001", "000002"), index=1) -> WindowState:
    ws = WindowState(tmp_path / "state", "cq2", WINDOW)
    claim_units(ws, index, list(units), [f"/landing/{u}/orders.parquet" for u in units])
    return ws


def operator(tmp_path, batch: dict, **kwargs) -> BatchOperator:
    binary, _record = fake_submit(tmp_path, sleep=kwargs.pop("sleep", 0.0))
    return BatchOperator(task_id="submit", batch=batch, spark_kwargs={"spark_binary": binary}, **kwargs)


def test_a_batch_whose_sensor_claimed_nothing_is_skipped(tmp_path):
    op = operator(tmp_path, entry(tmp_path))
    with pytest.raises(AirflowSkipException, match="no claimed input"):
        op.execute(context())
    claim(tmp_path, units=())
    with pytest.raises(AirflowSkipException):
        op.execute(context())
    assert not (tmp_path / "submit.json").exists()  # no spark-submit ran


def test_a_retry_that_could_no_longer_meet_the_deadline_fails_without_retrying(tmp_path):
    claim(tmp_path)
    late = entry(tmp_path, deadline_ts=time.time() + 30)  # 60 s of work and a JVM's start-up left
    with pytest.raises(AirflowFailException, match="attempt 2 could no longer meet the deadline"):
        operator(tmp_path, late).execute(context(TI(try_number=2)))
    assert not (tmp_path / "submit.json").exists()
    # The first attempt runs whatever the time; so does a backfill's retry, which has no deadline to meet.
    assert operator(tmp_path, late).execute(context(TI(try_number=1)))["units"] == 2
    assert operator(tmp_path, entry(tmp_path, deadline_ts=0.0, backfill=True)).execute(
        context(TI(try_number=2)))["units"] == 2



def test_a_cleared_batch_runs_past_its_deadline_and_every_attempt_is_recorded(tmp_path):
    ws = claim(tmp_path)
    late = entry(tmp_path, deadline_ts=time.time() - 60)  # the deadline passed: the run failed, then was cleared
    # Cleared after two tries (retries=1): Airflow set max_tries to 2 + 1, the new try is 3, the first of the clear.
    cleared = TI("batch.submit", map_index=0, try_number=3)
    cleared.max_tries = 3
    assert operator(tmp_path, late, retries=1).execute(context(cleared))["units"] == 2
    # Its automatic retry is still held to the deadline.
    retry = TI("batch.submit", map_index=0, try_number=4)
    retry.max_tries = 3
    with pytest.raises(AirflowFailException, match="attempt 4 could no longer meet the deadline"):
        operator(tmp_path, late, retries=1).execute(context(retry))
    assert sorted(p.name for p in (ws.root / "attempts").iterdir()) == ["batch-0001.3.json", "batch-0001.4.json"]

def test_the_batch_job_runs_on_its_claim_and_the_task_reports_its_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")  # as a Spark Connect session leaves it
    ws = claim(tmp_path)
    before = dict(os.environ)
    op = operator(tmp_path, entry(tmp_path))
    out = op.execute(context(TI("batch.submit", map_index=0)))
    assert dict(os.environ) == before
    rec = read_record(tmp_path / "submit.json")
    assert "SPARK_CONNECT_MODE_ENABLED" not in rec["env"]
    argv = rec["argv"]
    assert argv[argv.index(job_path("batch")):] == [
        job_path("batch"), "cq2", str(ws.claim_path(1)), str(tmp_path / "static"), str(ws.partial_path(1)),
        "--state-dir", str(tmp_path / "state")]
    assert out["index"] == 1 and out["units"] == 2 and out["wall_seconds"] == 2.0 and out["task_cpu_seconds"] > 0
    assert out["started"] <= out["ended"]
    assert (ws.root / "cpu" / "batch.submit.0.1.run.json").is_file()


def test_the_timeout_and_the_label_come_from_the_plan_entry(tmp_path):
    with DAG("t", schedule=None, start_date=START):
        submit = BatchOperator(task_id="submit", batch={}, map_index_template="{{ task.batch.label }}")
        connect = BatchOperator(task_id="connect", batch={}, backend="spark-connect")
    for op, overhead in ((submit, 60.0), (connect, 15.0)):
        op.batch = entry(tmp_path, cost=300.0)
        op.render_template_fields(context())
        assert op.execution_timeout == dt.timedelta(seconds=overhead + 900)
        op.batch = entry(tmp_path, cost=1.0)
        op.render_template_fields(context())
        assert op.execution_timeout == dt.timedelta(seconds=BATCH_TIMEOUT_MIN_S)
    # The rendered batch is still the plan entry: the map index template reads its label.
    assert submit.render_template(submit.map_index_template, {"task": submit}) == "batch 1/1 · 2 units · ready 08:04"


def test_killing_the_task_kills_its_spark_submit(tmp_path):
    claim(tmp_path)
    op = operator(tmp_path, entry(tmp_path), sleep=60)
    failed = []

    def run():
        try:
            op.execute(context())
        except Exception as exc:  # noqa: BLE001 - spark-submit's exit after the kill
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    record, deadline = tmp_path / "submit.json", time.monotonic() + 30
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = read_record(record)["pid"]
    op.on_kill()
    thread.join(timeout=30)
    assert failed and not alive(pid)


def test_the_backend_is_picked_by_name_or_object_and_what_it_cannot_honour_is_refused():
    assert BatchOperator(task_id="a", batch={}).backend == "spark-submit"
    op = BatchOperator(task_id="b", batch={}, backend=SparkSubmit(conn_id="spark_yarn", conf={"k": "v"}))
    assert (op.backend, op.conn_id, op.conf) == ("spark-submit", "spark_yarn", {"k": "v"})
    op = BatchOperator(task_id="c", batch={}, backend=SparkConnect(tail_slots=1), slots=1)
    assert (op.backend, op.conn_id, op.conf, op.slots) == ("spark-connect", "spark_connect_default", {}, 1)
    with pytest.raises(ConfigError) as err:
        BatchOperator(task_id="d", batch={}, backend="spark-connect", conf={"spark.executor.memory": "4g"})
    assert err.value.field == "conf" and "spark.executor.memory" in str(err.value)
    with pytest.raises(ConfigError) as err:
        BatchOperator(task_id="e", batch={}, backend="spark-connect", spark_kwargs={"driver_memory": "2g"})
    assert err.value.field == "driver_memory"
    with pytest.raises(ConfigError) as err:
        BatchOperator(task_id="f", batch={}, slots=1)
    assert err.value.field == "slots"
    with pytest.raises(ConfigError) as err:
        BatchOperator(task_id="g", batch={}, backend="spark")
    assert err.value.field == "backend"
