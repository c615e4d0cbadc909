"""IQPStateHook on a real state directory in a temporary folder."""

from __future__ import annotations

from airflow_iqp.hooks.state import IQPStateHook
from airflow_iqp.query.catalogue import get_query
from airflow_iqp.query.store import Saved, load_query
from airflow_iqp.state import append_cost_history, atomic_write_json, claim_units
from airflow_iqp.streams import TPCH
from airflow_iqp.window.config import QueryConfig, window_id
from airflow_iqp.window.plan import plan_window
from tests.batches import make_batch
from tests.unit.support import START, TI, land

T0 = START.timestamp()


def batch_of(tmp_path, **fields):
    return make_batch(query="cq2", window_id=window_id(T0), state_dir=str(tmp_path / "state"),
                      landing=str(tmp_path / "landing"), **fields)


def test_the_state_directory_defaults_to_the_iqp_section(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__IQP__STATE_DIR", str(tmp_path / "from-config"))
    hook = IQPStateHook()
    assert hook.state_dir == str(tmp_path / "from-config") and hook.get_conn() == tmp_path / "from-config"
    assert IQPStateHook(tmp_path / "given").state_dir == str(tmp_path / "given")


def test_a_batch_reads_its_claim_and_the_paths_its_job_uses(tmp_path):
    hook = IQPStateHook(tmp_path / "state")
    batch = batch_of(tmp_path, index=2)
    assert hook.claim(batch) is None
    ws = hook.window_of(batch)
    assert ws == hook.window("cq2", T0) and ws.root == tmp_path / "state" / "cq2" / window_id(T0)
    claim_units(ws, 2, ["000001"], ["/l/000001/orders.parquet"])
    assert hook.claim(batch)["units"] == ["000001"]
    assert hook.claims(ws) == {2: hook.claim(batch)}
    assert hook.claim_path(batch) == ws.claims_dir / "batch-0002.json"
    assert hook.partial_path(batch) == ws.partials_dir / "batch-0002"
    assert hook.metrics(ws, 2) == {}
    atomic_write_json(ws.metrics_path(2), {"units": 1})
    assert hook.metrics(ws, 2) == {"units": 1}


def test_results_reports_and_late_units_round_trip(tmp_path):
    hook = IQPStateHook(tmp_path / "state")
    ws = hook.window("cq2", T0)
    assert hook.report(ws) == {}
    hook.write_result_manifest(ws, {"result": "r", "revision": 1})
    assert hook.result_manifest(ws) == {"result": "r", "revision": 1}
    hook.write_report(ws, {"deadline_met": True})
    assert hook.report(ws) == {"deadline_met": True}
    assert hook.write_late(ws, {"units": ["000009"]}) == ws.root / "late.json"
    # Every write is atomic: no temporary file is left beside the state.
    assert sorted(p.name for p in ws.root.iterdir()) == ["late.json", "report.json", "result.manifest.json"]


def test_accounting_late_units_arrivals_and_task_cpu(tmp_path):
    hook = IQPStateHook(tmp_path / "state")
    batch = batch_of(tmp_path)
    land(tmp_path / "landing", "000001", "000002")
    ws = hook.window_of(batch)
    claim_units(ws, 1, ["000001"], [])
    assert hook.late_units(batch, T0)["units"] == ["000002"]
    arrivals = hook.record_arrivals(batch, T0)
    assert arrivals == ws.root / "arrivals.json"
    hook.record_task_cpu(ws, TI("batch.submit", map_index=0))
    hook.record_task_cpu(ws, TI("final"))
    cpu = hook.window_task_cpu(ws)
    assert cpu["tasks"] == 2 and cpu["cpu_seconds"] > 0


def test_plans_saved_queries_and_the_cost_history(tmp_path):
    hook = IQPStateHook(tmp_path / "state")
    cfg = QueryConfig(query="cq2", landing=str(tmp_path / "landing"), state_dir=hook.state_dir, units=10)
    wp = plan_window(cfg, T0, T0 + 240, T0 + 340, now=T0)
    ws = hook.window("cq2", T0)
    assert hook.plan(ws) is None
    assert hook.store_plan(wp) == ws.root / "plan.json"
    assert hook.plan(ws)["batches"] == [b.to_dict() for b in wp.batches]
    hook.save_query(Saved(get_query("cq2"), TPCH, None))
    assert load_query("cq2", hook.state_dir).query.id == "cq2"
    assert hook.cost_history() == []
    append_cost_history(hook.state_dir, query="cq2", kind="batch", units=5, batches=1,
                        wall_seconds=7.0)
    append_cost_history(hook.state_dir, query="cq2", kind="final", units=5, batches=1, wall_seconds=3.0,
                        backend="spark-connect")
    assert [r["kind"] for r in hook.cost_history("cq2")] == ["batch", "final"]
    assert [r["kind"] for r in hook.cost_history("cq2", backend="spark-connect")] == ["final"]
    assert hook.cost_history("cq1") == []
