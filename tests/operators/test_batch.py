"""BatchOperator against a real state store, with a stand-in spark-submit."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from types import SimpleNamespace

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowSkipException

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.operators.batch import BATCH_TIMEOUT_MIN_S, BatchOperator
from airflow_iqp.backends import SparkConnect, SparkSubmit
from airflow_iqp.spark.submit import job_path
from airflow_iqp.store import WindowState, open_store
from airflow_iqp.window.config import window_id
from tests.support.batches import make_batch
from tests.support.tasks import START, TI, alive, context, fake_submit, read_record

pytestmark = pytest.mark.usefixtures("spark_connections")

WINDOW = window_id(START.timestamp())


def entry(tmp_path, **fields) -> dict:
    """A plan entry of window WINDOW as the plan task's XCom holds it."""
    base = dict(query="cq2", window_id=WINDOW, state_dir=str(tmp_path / "state"), landing=str(tmp_path / "landing"),
                static=str(tmp_path / "static"), cost=30.0, remaining_cost=60.0, deadline_ts=time.time() + 3600,
                label="batch 1/1 · 2 units · ready 08:04")
    return make_batch(**{**base, **fields}).to_dict()


def claim(tmp_path, units=("000001", "000002"), index=1) -> WindowState:
    ws = open_store(tmp_path / "state").window("cq2", WINDOW)
    ws.claim(index, list(units), [f"/landing/{u}/orders.parquet" for u in units])
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


def _warnings(op: BatchOperator) -> list[str]:
    """The warnings ``op`` logs from now on about deadlines."""
    said: list[str] = []

    def warning(msg, *args):
        if "deadline" in msg % args:
            said.append(msg % args)

    op._cached_logger = SimpleNamespace(info=lambda *a: None, warning=warning)
    return said


def test_a_retry_that_can_no_longer_meet_the_deadline_runs_and_says_the_result_will_be_late(tmp_path):
    claim(tmp_path)
    op = operator(tmp_path, entry(tmp_path, deadline_ts=time.time() + 30))  # 60 s of work and a JVM's start-up left
    said = _warnings(op)
    assert op.execute(context(TI(try_number=2)))["units"] == 2
    assert (tmp_path / "submit.json").exists()
    assert len(said) == 1 and "attempt 2 can no longer meet the deadline" in said[0] and "marked late" in said[0]
    # A backfill has no deadline to meet: nothing to warn about.
    op = operator(tmp_path, entry(tmp_path, deadline_ts=0.0, backfill=True))
    said = _warnings(op)
    assert op.execute(context(TI(try_number=2)))["units"] == 2 and said == []


def test_a_cleared_batch_and_its_retries_run_past_the_deadline_and_every_attempt_is_recorded(tmp_path):
    ws = claim(tmp_path)
    late = entry(tmp_path, deadline_ts=time.time() - 60)  # the deadline passed: the run failed, then was cleared
    for try_number in (3, 4):  # the first try after the clear, and its automatic retry
        assert operator(tmp_path, late, retries=1).execute(context(TI("batch.submit", 0, try_number)))["units"] == 2
    assert [(r["name"], r["try_number"]) for r in ws.records("attempts")] == [("batch-0001", 3), ("batch-0001", 4)]


CSV = {"a.csv": "k,x\na,1\n", "b.csv": "k,x\na,1,9\n", "c.csv": "k,x\na,one\n"}  # b and c are bad


def _bad_claim(tmp_path, on_bad_unit: str, names=tuple(CSV)) -> tuple[WindowState, dict]:
    """A claim of CSV units, checked as a sensor's claim checks them; its batch's plan entry."""
    from airflow_iqp.filecheck import check_claim
    from airflow_iqp.landing import list_units
    from airflow_iqp.streams import Stream, files_of

    landing = tmp_path / "landing"
    landing.mkdir(parents=True)
    for name in names:
        (landing / name).write_text(CSV[name])
    streams = (Stream("events", path=str(landing), format="csv", schema="k STRING, x BIGINT", on_bad_unit=on_bad_unit),)
    units = list_units(landing, streams)
    ws = open_store(tmp_path / "state").window("cq2", WINDOW)
    ws.claim(1, [u.name for u in units], files_of(units, streams), found=check_claim(ws, streams, units))
    return ws, entry(tmp_path, streams=[s.to_dict() for s in streams])


def test_a_batch_whose_claim_found_bad_files_fails_before_spark_naming_them_all_or_skips_if_all_quarantined(tmp_path):
    _ws, failing = _bad_claim(tmp_path / "fail", "fail")
    with pytest.raises(DataError) as err:
        operator(tmp_path, failing).execute(context())
    first = str(err.value).splitlines()[0]
    assert "2 bad input files" in first and "b.csv: not a readable csv file" in first
    assert "c.csv: wrong schema for stream events: column x has 'one', expected BIGINT" in first
    assert not (tmp_path / "submit.json").exists()  # no spark-submit ran
    for name in ("b.csv", "c.csv"):  # the files are replaced: the rerun reads the same claim
        (tmp_path / "fail" / "landing" / name).write_text("k,x\nb,2\n")
    assert operator(tmp_path, failing).execute(context())["units"] == 3
    _ws, quarantined = _bad_claim(tmp_path / "quarantine", "quarantine", ("b.csv", "c.csv"))
    with pytest.raises(AirflowSkipException, match="every claimed unit was quarantined"):
        operator(tmp_path, quarantined).execute(context())


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
    args = argv[argv.index(job_path("batch")):]
    assert args[0] == job_path("batch") and args[1] == "--work" and args[3:] == ["--backend", "spark-submit"]
    # The job gets its work by value: the claimed files and units, where its partial and metrics go.
    work = json.loads(args[2])
    assert (work["store"], work["query"], work["window"], work["batch"]) == (str(tmp_path / "state"), "cq2", WINDOW, 1)
    assert work["units"] == ["000001", "000002"] and work["files"] == ws.claim_of(1)["files"]
    assert work["static"] == str(tmp_path / "static")
    assert (work["partial"], work["metrics"]) == (ws.partial_uri(1), ws.metrics_uri(1))
    assert out["index"] == 1 and out["units"] == 2 and out["wall_seconds"] == 2.0 and out["task_cpu_seconds"] > 0
    assert out["started"] <= out["ended"]
    assert [(r["task_id"], r["map_index"], r["try_number"], r["phase"]) for r in ws.records("cpu")] == [
        ("batch.submit", 0, 1, "run")]


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
    # Once its wait re-planned the window, the label and the cost are the re-plan's: the
    # task shows what its wait shows.
    label = "batch 1/1 · 5 units · ready 08:03 (re-plan at 08:02 after batch 0)"
    open_store(tmp_path / "state").window("cq2", WINDOW).write_doc(
        "replan", {"entries": {"1": {"label": label, "cost": 300.0, "units": 5}}})
    submit.batch = entry(tmp_path, cost=1.0)
    submit.render_template_fields(context())
    assert submit.render_template(submit.map_index_template, {"task": submit}) == label
    assert submit.execution_timeout == dt.timedelta(seconds=60.0 + 900)


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
