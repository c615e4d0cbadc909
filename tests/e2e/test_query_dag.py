"""The CQ2 example DAG end to end, with real Airflow processes and real spark-submit.

Scheduler, dag-processor, triggerer and api-server run as real processes (LocalExecutor,
SQLite): ``dag.test()`` would run sensors one at a time and ignore pools. Each profile gets
its own Airflow and state directory, and one live window of 240 s in which
``airflow-iqp replay`` publishes 240 units at 1 unit/s with the ``fixed``, ``slower`` or
``late`` profile. The DAG plans every window with its fixed-rate hint, so the slower and
late windows find less input than planned. After the fixed window, three past windows
whose input is complete are backfilled.

Cost hints (25 s per batch, 0.6 s per unit) make the plan cut each live window into at
least 3 batches; the deadline is 100 s after the window's end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from iqp_dev.local_airflow import airflow_env  # noqa: E402
from tests.support.reference import assert_same_rows, duckdb_reference  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

W = 240          # window length, s
UNITS = 240      # units per window, at 1 unit/s
OFFSET = 100     # deadline offset after the window end, s
DAG_ID = "iqp_cq2"


def wid(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y%m%dT%H%M%S")


def read_result(path: str) -> tuple[list[tuple], list[str]]:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    return [tuple(r.values()) for r in t.to_pylist()], t.column_names


def wait_xcom(af, run_id: str, index: int):
    """What a batch's sensor returned ({"manifest", "reason"}), or None if it was skipped."""
    try:
        return af.xcom(DAG_ID, run_id, "batch.wait", map_index=index)
    except Exception:  # noqa: BLE001 - a skipped sensor pushed nothing
        return None


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    from airflow_iqp.inputs.tpch import generate

    out = tmp_path_factory.mktemp("tpch")
    generate(0.01, UNITS, out)
    return out


def run_window(tmp: Path, tpch: Path, profile: str, backfill: bool = False) -> dict:
    """One live window replayed with ``profile`` on a fresh Airflow and a fresh state dir.

    Fresh, because the plan operator fits its cost model to the state dir's cost history:
    after one window of measured batches it (rightly) plans the next as one batch, and
    the profile would no longer meet several batches.
    """
    data = tmp / profile
    (data / "tpch").mkdir(parents=True)
    (data / "tpch" / "static").symlink_to(tpch / "static")
    units = sorted(p for p in (tpch / "units").iterdir() if p.is_dir())
    # The window opens once Airflow is up (about 25 s); the DAG allows this one window only.
    anchor = (int(time.time()) // 10) * 10 + 50
    backfilled = [anchor - k * W for k in (4, 3, 2)] if backfill else []
    for start in backfilled:  # past windows: all input landed long ago
        landing = data / "landing" / "cq2" / wid(start)
        landing.mkdir(parents=True)
        for u in units:
            shutil.copytree(u, landing / u.name)
    env = {
        "IQP_DATA": str(data), "IQP_ANCHOR": datetime.fromtimestamp(anchor, timezone.utc).isoformat(),
        "IQP_END": datetime.fromtimestamp(anchor + 1, timezone.utc).isoformat(),
        "IQP_WINDOW_S": str(W), "IQP_UNITS": str(UNITS), "IQP_DEADLINE_S": str(OFFSET),
        "IQP_COST_PER_UNIT": "0.6", "IQP_COST_PER_BATCH": "25",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        "AIRFLOW__IQP__STATE_DIR": str(data / "state"),
    }
    out = {"data": data, "tpch": tpch, "units": units, "start": anchor, "backfilled": backfilled}
    with airflow_env(ROOT / "tests" / "e2e" / "dags_hinted", extra_env=env) as af:
        af.wait_for_dag(DAG_ID)
        af.unpause(DAG_ID)
        time.sleep(max(0.0, anchor - time.time()))
        out["replay"] = subprocess.Popen(
            ["airflow-iqp", "replay", "--from", str(tpch), "--to", str(data / "landing" / "cq2" / wid(anchor)),
             "--profile", profile, "--window", str(W)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run_id = af.window_run(DAG_ID, anchor, timeout=120)
        # The live run's deadline, read while it runs: Airflow prunes a run's deadlines
        # once it has succeeded in time.
        out["live_deadline"], until = [], time.time() + 60
        while not out["live_deadline"] and time.time() < until:
            out["live_deadline"] = af.sql("SELECT d.deadline_time, d.missed FROM deadline d JOIN dag_run r "
                                          "ON r.id = d.dagrun_id WHERE r.run_id = ?", (run_id,))
            time.sleep(1)
        out["run"] = af.wait_for_run(DAG_ID, run_id, timeout=W + OFFSET + 300, expect_success=False)
        out["tis"] = af.task_instances(DAG_ID, run_id)
        out["waits"] = {i: wait_xcom(af, run_id, i) for i in range(len(af.xcom(DAG_ID, run_id, "plan")))}
        out["replay_rc"] = out["replay"].wait(timeout=120)
        if backfill:
            af.backfill(DAG_ID, datetime.fromtimestamp(backfilled[0], timezone.utc),
                        datetime.fromtimestamp(backfilled[-1], timezone.utc))
            runs, until = [], time.time() + 120
            while len(runs) < len(backfilled) and time.time() < until:  # the scheduler creates them
                time.sleep(2)
                runs = [r for r in af.dag_runs(DAG_ID) if r["run_type"] == "backfill"]
            out["backfill_runs"] = [af.wait_for_run(DAG_ID, r["dag_run_id"], timeout=400) for r in runs]
        out["deadlines"] = af.sql("SELECT r.run_id, r.run_type, d.deadline_time, d.missed FROM deadline d "
                                  "JOIN dag_run r ON r.id = d.dagrun_id")
    return out


@pytest.fixture(scope="module")
def fixed(tmp_path_factory, tpch):
    return run_window(tmp_path_factory.mktemp("e2e"), tpch, "fixed", backfill=True)


@pytest.fixture(scope="module")
def slower(tmp_path_factory, tpch):
    return run_window(tmp_path_factory.mktemp("e2e"), tpch, "slower")


@pytest.fixture(scope="module")
def late(tmp_path_factory, tpch):
    return run_window(tmp_path_factory.mktemp("e2e"), tpch, "late")


def window(run, start):
    from airflow_iqp.store import open_store

    from airflow_iqp.window.batch import Batch
    from airflow_iqp.window.replan import effective

    ws = open_store(run["data"] / "state").window("cq2", wid(start))
    plan = ws.doc("plan")
    # A claim re-plans the rest of the window once the cost history has grown (a batch of
    # it finished): its batches are as the newest re-plan has them, as the UI shows them.
    plan["batches"] = [effective(Batch.from_dict(b)).to_dict() for b in plan["batches"]]
    return ws, ws.claims(), plan, ws.doc("report")


def check_result(run, ws, unit_names):
    rows, cols = read_result(ws.manifest()["result"])
    units = [u for u in run["units"] if u.name in set(unit_names)]
    ref_cols, ref_rows = duckdb_reference("cq2", units, run["tpch"] / "static")
    assert cols == ref_cols == ["totalorders", "o_orderpriority"]
    assert_same_rows(rows, ref_rows, ordered=False, label=ws.window_id)


def claimed_once(claims) -> list[str]:
    units = [u for c in claims.values() for u in c["units"]]
    assert len(units) == len(set(units)), "a unit was claimed twice"
    return units


def test_fixed_profile_batches_claim_their_units_in_time_and_meet_the_deadline(fixed):
    assert fixed["replay_rc"] == 0, fixed["replay"].stderr.read()[-500:]
    ws, claims, plan, report = window(fixed, fixed["start"])
    batches = plan["batches"]
    assert fixed["run"]["state"] == "success"
    assert len(batches) >= 3
    # The planned batches are the mapped task instances, named after the plan.
    for task in ("batch.wait", "batch.submit"):
        tis = sorted((t for t in fixed["tis"] if t["task_id"] == task), key=lambda t: t["map_index"])
        assert [t["map_index"] for t in tis] == list(range(len(batches)))
        assert [t["rendered_map_index"] for t in tis] == [b["label"] for b in batches]
    cumulative = 0
    for b in batches:
        claim = claims[b["index"]]
        cumulative += len(claim["units"])
        assert cumulative >= b["cumulative"], (b["index"], cumulative, b["cumulative"])
        assert claim["claimed_at"] <= b["latest_start_ts"], (b["index"], claim["claimed_at"] - b["latest_start_ts"])
    assert sorted(claimed_once(claims)) == [u.name for u in fixed["units"]]
    check_result(fixed, ws, claimed_once(claims))
    assert report["deadline_met"] and report["finished_ts"] <= plan["deadline"]
    final = next(t for t in fixed["tis"] if t["task_id"] == "final")
    assert datetime.fromisoformat(final["end_date"].replace("Z", "+00:00")).timestamp() <= plan["deadline"]
    assert not report["partial"]


def test_slower_profile_fires_on_time_with_what_arrived_and_loses_nothing(slower):
    assert slower["replay_rc"] == 0
    ws, claims, plan, report = window(slower, slower["start"])
    assert slower["run"]["state"] == "success"
    assert len(plan["batches"]) >= 3
    reasons = {i: (w or {}).get("reason") for i, w in slower["waits"].items()}
    timed = [b for b in plan["batches"] if reasons.get(b["index"] - 1) == "time"]
    assert timed, f"no batch fired on its latest safe start: {reasons}"
    for b in timed:
        before = sum(len(claims[i]["units"]) for i in claims if i <= b["index"])
        assert before < b["cumulative"], "a batch fired on time although its units had all arrived"
        assert claims[b["index"]]["claimed_at"] <= b["latest_start_ts"] + 1.0
    assert sorted(claimed_once(claims)) == [u.name for u in slower["units"]]
    check_result(slower, ws, claimed_once(claims))
    assert report["deadline_met"] and not report["partial"]


def test_late_profile_records_late_units_and_marks_the_result_partial(late):
    assert late["replay_rc"] == 0
    ws, claims, plan, report = window(late, late["start"])
    assert late["run"]["state"] == "success"
    late_rec = ws.doc("late")
    assert late_rec["units"], "no unit was late"
    assert all(t > late["start"] + W for t in late_rec["arrival_times"])
    claimed = claimed_once(claims)
    assert not set(claimed) & set(late_rec["units"])
    assert sorted(claimed + late_rec["units"]) == [u.name for u in late["units"]]   # nothing lost
    assert report["partial"] and ws.manifest()["partial"] is True
    check_result(late, ws, claimed)
    assert report["deadline_met"]


def test_backfill_runs_one_batch_per_window_with_correct_results_and_no_deadline(fixed):
    runs = fixed["backfill_runs"]
    assert len(runs) == 3 and all(r["state"] == "success" for r in runs), runs
    for start in fixed["backfilled"]:
        ws, claims, plan, report = window(fixed, start)
        assert plan["backfill"] and len(plan["batches"]) == 1
        assert sorted(claimed_once(claims)) == [u.name for u in fixed["units"]]
        check_result(fixed, ws, claimed_once(claims))
        assert report["deadline_ts"] is None       # an old window has no deadline to meet
    # The live window had a deadline at its end plus the offset; no backfilled window got
    # one, and none was missed (a run that succeeds in time has its deadline pruned).
    (live,) = fixed["live_deadline"]
    expected = datetime.fromtimestamp(fixed["start"] + W + OFFSET, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    assert live["deadline_time"].startswith(expected) and not live["missed"], live
    assert all(d["run_type"] != "backfill" and not d["missed"] for d in fixed["deadlines"]), fixed["deadlines"]
