"""FinalOperator against a real claim and metrics layout, with a stand-in spark-submit."""

from __future__ import annotations

import json
import time

import pytest
from airflow.sdk import TriggerRule

from airflow_iqp.errors import ConfigError
from airflow_iqp.operators.final import FinalOperator, result_asset
from airflow_iqp.backends import SparkConnect
from airflow_iqp.spark.submit import job_path
from airflow_iqp.store import WindowState, open_store
from airflow_iqp.store.files import atomic_write_json
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import window_id
from tests.support.batches import make_batch
from tests.support.tasks import START, TI, context, land, fake_submit, read_record

pytestmark = pytest.mark.usefixtures("spark_connections")

T0 = START.timestamp()
WINDOW = window_id(T0)


def batch(tmp_path, index=1, of=2, **fields) -> Batch:
    base = dict(query="cq2", window_id=WINDOW, index=index, of=of, units=2, cumulative=2 * index, expected_total=4,
                last=index == of, state_dir=str(tmp_path / "state"), landing=str(tmp_path / "landing"),
                ready_ts=T0 + 60 * index, latest_start_ts=T0 + 60 * index + 5, cost=20.0, remaining_cost=40.0,
                deadline_ts=time.time() + 3600, label=f"batch {index}/{of}")
    return make_batch(**{**base, **fields})


def ran(tmp_path, ws: WindowState, index: int, units: list[str]) -> None:
    """Batch ``index`` claimed ``units`` and its job wrote its metrics."""
    ws.claim(index, units, [f"{tmp_path}/landing/{u}/orders.parquet" for u in units])
    atomic_write_json(ws.metrics_uri(index), {"units": len(units), "wall_seconds": 4.0, "cpu_seconds": 2.0,
                                               "written_at": time.time()})


def window(tmp_path) -> WindowState:
    return open_store(tmp_path / "state").window("cq2", WINDOW)


def final(tmp_path, **kwargs) -> FinalOperator:
    binary, _record = fake_submit(tmp_path)
    return FinalOperator(task_id=kwargs.pop("task_id", "final"), query="cq2", state_dir=str(tmp_path / "state"),
                         spark_kwargs={"spark_binary": binary}, **kwargs)


def test_the_report_compares_the_plan_with_what_ran_and_records_late_units(tmp_path):
    ws = window(tmp_path)
    land(tmp_path / "landing", "000001", "000002", "000003", "000004", "000005")
    ran(tmp_path, ws, 1, ["000001", "000002"])
    ran(tmp_path, ws, 2, ["000003", "000004"])
    plan = [batch(tmp_path, 1).to_dict(), batch(tmp_path, 2).to_dict()]
    ctx = context(TI("final"))
    report = final(tmp_path, plan=plan).execute(ctx)
    argv = read_record(tmp_path / "submit.json")["argv"]
    assert argv[argv.index(job_path("final")):] == [job_path("final"), "--store", str(tmp_path / "state"),
                                                    "--query", "cq2", "--window", WINDOW, "--backend", "spark-submit"]
    assert report == ws.doc("report")
    assert [(b["index"], b["planned_units"], b["claimed_units"], b["wall_seconds"]) for b in report["batches"]] == [
        (1, 2, 2, 4.0), (2, 2, 2, 4.0)]
    # Each batch's planned cost beside what it took from its claim to its written partial.
    claims = {i: ws.claim_of(i) for i in (1, 2)}
    assert [(b["planned_cost"], b["claim_to_partial_seconds"]) for b in report["batches"]] == [
        (20.0, ws.metrics(i)["written_at"] - claims[i]["claimed_at"]) for i in (1, 2)]
    assert report["deadline_met"] and report["deadline_ts"] == plan[0]["deadline_ts"]
    assert report["final_wall_seconds"] == 3.0 and report["backend"] == "spark-submit"
    # Unit 000005 landed after the last claim: late data, and the result is partial.
    assert report["late_units"] == ["000005"] and report["partial"] is True
    assert ws.doc("late")["units"] == ["000005"]
    assert ws.manifest()["partial"] is True
    assert ws.doc("arrivals")["units"] == ["000001", "000002", "000003", "000004", "000005"]
    assert report["task_cpu"]["tasks"] == 1
    assert [(r["task_id"], r["map_index"], r["try_number"], r["phase"]) for r in ws.records("cpu")] == [
        ("final", -1, 1, "run")]
    assert ctx["outlet_events"][result_asset("cq2")].extra == {
        "window": WINDOW, "result": ws.result_uri, "partial": True, "late": False}
    assert report["late"] is False and ws.manifest()["late"] is False


def test_a_result_written_after_the_deadline_is_still_written_and_marked_late(tmp_path):
    """A batch retried past the deadline ran: the final step writes the result all the same."""
    from airflow_iqp.window.accounting import record_attempt

    ws = window(tmp_path)
    land(tmp_path / "landing", "000001")
    ran(tmp_path, ws, 1, ["000001"])
    for try_number in (1, 2):
        record_attempt(ws, "batch-0001", TI("batch.submit", 0, try_number))
    ctx = context(TI("final"))
    report = final(tmp_path, plan=[batch(tmp_path, 1, of=1, deadline_ts=time.time() - 5).to_dict()]).execute(ctx)
    assert report["late"] is True and not report["deadline_met"] and report["retried"] == ["batch-0001"]
    assert ws.manifest()["late"] is True and report["partial"] is False
    assert ctx["outlet_events"][result_asset("cq2")].extra["late"] is True


def test_the_report_counts_each_batchs_attempts_and_names_those_retried(tmp_path):
    from airflow_iqp.window.accounting import record_attempt

    ws = window(tmp_path)
    land(tmp_path / "landing", "000001", "000002")
    ran(tmp_path, ws, 1, ["000001"])
    ran(tmp_path, ws, 2, ["000002"])
    for try_number in (1, 2, 3):  # batch 1's first two attempts were killed with their process
        record_attempt(ws, "batch-0001", TI("batch.submit", 0, try_number))
    record_attempt(ws, "batch-0002", TI("batch.submit", 1, 1))
    report = final(tmp_path, plan=[batch(tmp_path, 1).to_dict(), batch(tmp_path, 2).to_dict()]).execute(
        context(TI("final")))
    assert [(b["index"], b["attempts"]) for b in report["batches"]] == [(1, 3), (2, 1)]
    assert report["retried"] == ["batch-0001"] and report["final_attempts"] == 1


def test_a_backfill_has_no_deadline_to_miss(tmp_path):
    ws = window(tmp_path)
    land(tmp_path / "landing", "000001")
    ran(tmp_path, ws, 1, ["000001"])
    entry = batch(tmp_path, 1, of=1, deadline_ts=T0, backfill=True)
    report = final(tmp_path, plan=[entry.to_dict()]).execute(context())
    assert report["deadline_ts"] is None and report["deadline_met"] and report["partial"] is False
    assert report["late"] is False
    assert ws.doc("late") is None


def test_a_fused_tail_goes_to_the_job_and_into_the_report(tmp_path):
    ws = window(tmp_path)
    land(tmp_path / "landing", "000001", "000002")
    ran(tmp_path, ws, 1, ["000001"])
    ran(tmp_path, ws, 2, ["000002"])
    first, last = batch(tmp_path, 1, of=3), batch(tmp_path, 3, of=3)
    tail = last.with_(start_ts=T0 + 170, before=(batch(tmp_path, 2, of=3),))
    report = final(tmp_path, plan=[first.to_dict()], tail=tail.to_dict(), tail_slots=1).execute(context())
    argv = read_record(tmp_path / "submit.json")["argv"]
    at = argv.index("--tail")
    assert Batch.from_dict(json.loads(argv[at + 1])) == tail and argv[at + 2:at + 4] == ["--tail-slots", "1"]
    assert [b["index"] for b in report["batches"]] == [1, 2, 3]
    assert [b["claimed_units"] for b in report["batches"]] == [1, 1, 0]


def test_late_data_is_merged_as_a_new_revision_of_the_earlier_window(tmp_path):
    ws = window(tmp_path)
    land(tmp_path / "landing", "000001", "000002")
    ran(tmp_path, ws, 1, ["000001"])
    final(tmp_path, plan=[batch(tmp_path, 1, of=1).to_dict()]).execute(context())
    assert ws.doc("report")["late_units"] == ["000002"]
    # The next window's run: its late sensor claimed unit 000002 for the late batch.
    late = batch(tmp_path, 2, of=2, late=True, window_start_ts=T0)
    ws.claim(2, ["000002"], [])
    op = final(tmp_path, task_id="late", late=late.to_dict())
    assert op.trigger_rule == TriggerRule.ALL_SUCCESS and op.outlets == [result_asset("cq2")]
    ctx = context(start=START.add(minutes=4))
    report = op.execute(ctx)
    argv = read_record(tmp_path / "submit.json")["argv"]
    assert argv[argv.index(job_path("final")):] == [job_path("final"), "--store", str(tmp_path / "state"),
                                                    "--query", "cq2", "--window", WINDOW, "--backend", "spark-submit",
                                                    "--late", "2"]
    assert report["revision"] == 2 and report["late_units"] == [] and report["partial"] is False
    assert ws.manifest()["late_units"] == [] and ws.doc("late")["units"] == []
    assert ctx["outlet_events"][result_asset("cq2")].extra["revision"] == 2


def test_defaults_and_what_a_connect_server_cannot_honour(tmp_path):
    op = FinalOperator(task_id="final", query="cq2")
    assert op.trigger_rule == TriggerRule.NONE_FAILED and op.backend == "spark-submit"
    op = FinalOperator(task_id="final", query="cq2", backend=SparkConnect(conn_id="sc"))
    assert (op.backend, op.conn_id) == ("spark-connect", "sc")
    with pytest.raises(ConfigError) as err:
        FinalOperator(task_id="final", query="cq2", backend="spark-connect", conf={"spark.driver.memory": "4g"})
    assert err.value.field == "conf"
