"""IQPStateHook on a real state store in a temporary folder, and the window handles it hands out."""

from __future__ import annotations

import os

from airflow_iqp.hooks.state import IQPStateHook
from airflow_iqp.query.catalogue import get_query
from airflow_iqp.query.store import Saved, load_query
from airflow_iqp.store import LocalStore
from airflow_iqp.store.files import atomic_write_json
from airflow_iqp.window import accounting
from airflow_iqp.window.config import QueryConfig, window_id
from airflow_iqp.window.plan import plan_window, store_plan
from tests.support.batches import TPCH, TPCH_STREAMS, make_batch
from tests.support.tasks import START, TI, land

T0 = START.timestamp()


def batch_of(tmp_path, **fields):
    return make_batch(query="cq2", window_id=window_id(T0), state_dir=str(tmp_path / "state"),
                      landing=str(tmp_path / "landing"), **fields)


def test_the_state_directory_defaults_to_the_iqp_section(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__IQP__STATE_DIR", str(tmp_path / "from-config"))
    hook = IQPStateHook()
    assert hook.state_dir == str(tmp_path / "from-config")
    assert isinstance(hook.get_conn(), LocalStore) and hook.get_conn() is hook.store
    assert hook.store.location == str(tmp_path / "from-config")
    assert IQPStateHook(tmp_path / "given").state_dir == str(tmp_path / "given")


def test_a_batch_reads_its_claim_and_the_paths_its_job_uses(tmp_path):
    hook = IQPStateHook(tmp_path / "state")
    batch = batch_of(tmp_path, index=2)
    ws = hook.window_of(batch)
    assert ws.claim_of(batch.index) is None and not ws.has_claim(batch.index)
    assert ws == hook.window("cq2", T0) and ws.location == str(tmp_path / "state" / "cq2" / window_id(T0))
    ws.claim(2, ["000001"], ["/l/000001/orders.parquet"])
    assert ws.claim_of(2)["units"] == ["000001"] and ws.has_claim(2)
    assert ws.claims() == {2: ws.claim_of(2)}
    assert ws.partial_uri(2) == str(tmp_path / "state" / "cq2" / window_id(T0) / "partials" / "batch-0002")
    assert ws.metrics(2) == {}
    atomic_write_json(ws.metrics_uri(2), {"units": 1})  # where the batch's job writes them
    assert ws.metrics(2) == {"units": 1}


def test_results_reports_and_late_units_round_trip(tmp_path):
    hook = IQPStateHook(tmp_path / "state")
    ws = hook.window("cq2", T0)
    assert ws.doc("report") is None and ws.manifest() is None
    ws.write_manifest({"result": "r", "revision": 1})
    assert ws.manifest() == {"result": "r", "revision": 1}
    ws.write_doc("report", {"deadline_met": True})
    assert ws.doc("report") == {"deadline_met": True}
    assert ws.write_doc("late", {"units": ["000009"]}) == os.path.join(ws.location, "late.json")
    # Every write is atomic: no temporary file is left beside the state.
    assert sorted(os.listdir(ws.location)) == ["late.json", "report.json", "result.manifest.json"]


def test_accounting_late_units_arrivals_and_task_cpu(tmp_path):
    hook = IQPStateHook(tmp_path / "state")
    batch = batch_of(tmp_path)
    land(tmp_path / "landing", "000001", "000002")
    ws = hook.window_of(batch)
    ws.claim(1, ["000001"], [])
    assert accounting.late_units(batch, T0)["units"] == ["000002"]
    arrivals = accounting.record_arrivals(batch, T0)
    assert arrivals == os.path.join(ws.location, "arrivals.json")
    assert ws.doc("arrivals")["units"] == ["000001", "000002"]
    accounting.record_task_cpu(ws, TI("batch.submit", map_index=0))
    accounting.record_task_cpu(ws, TI("final"))
    cpu = accounting.window_task_cpu(ws)
    assert cpu["tasks"] == 2 and cpu["cpu_seconds"] > 0


def test_plans_saved_queries_and_the_cost_history(tmp_path):
    hook = IQPStateHook(tmp_path / "state")
    cfg = QueryConfig(query="cq2", landing=str(tmp_path / "landing"), state_dir=hook.state_dir, units=10,
                      streams=TPCH_STREAMS)
    wp = plan_window(cfg, T0, T0 + 240, T0 + 340, now=T0)
    ws = hook.window("cq2", T0)
    assert ws.doc("plan") is None
    assert store_plan(wp) == os.path.join(ws.location, "plan.json")
    assert ws.doc("plan")["batches"] == [b.to_dict() for b in wp.batches]
    assert hook.save_query(Saved(get_query("cq2"), TPCH, None)) == os.path.join(hook.state_dir, "cq2", "query.json")
    assert load_query("cq2", hook.state_dir).query.id == "cq2" and load_query("cq2", hook.store).query.id == "cq2"
    assert hook.cost_history() == []
    hook.store.record_cost(query="cq2", kind="batch", units=5, batches=1, wall_seconds=7.0)
    hook.store.record_cost(query="cq2", kind="final", units=5, batches=1, wall_seconds=3.0, backend="spark-connect")
    assert [r["kind"] for r in hook.cost_history("cq2")] == ["batch", "final"]
    assert [r["kind"] for r in hook.cost_history("cq2", backend="spark-connect")] == ["final"]
    assert hook.cost_history("cq1") == []
