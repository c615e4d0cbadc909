"""CQ2 as the example DAG writes it, end to end, with real Airflow processes and real spark-submit.

Scheduler, dag-processor, triggerer and api-server run as real processes (LocalExecutor,
SQLite): ``dag.test()`` would run sensors one at a time and ignore pools. One Airflow runs
three DAGs of the query side by side, one per arrival profile, each with its own query id
(so its own cost history) and one live window of 240 s in which ``airflow-iqp replay``
publishes 240 units at 1 unit/s with the ``fixed``, ``slower`` or ``late`` profile. The
windows open 90 s apart, so that no two windows end (where their last batches and merges
run) at once. Every DAG plans its window with its fixed-rate hint, so the slower and late
windows find less input than planned. After the live windows, three past windows of the
fixed DAG whose input is complete are backfilled.

Cost hints (25 s per batch, 0.6 s per unit) make the plan cut each live window into at
least 3 batches; the deadline is 100 s after the window's end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import threading
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
PROFILES = ("fixed", "slower", "late")
STAGGER = 90     # s between the profiles' windows: one's last batch and merge run before the next one's
GRACE = 2        # s after a window's end that its last batch waits: the fixed and slower profiles land
                 # their last unit at the end itself, and the writer is a process of its own

DAGS = textwrap.dedent('''
    from datetime import datetime, timedelta

    from airflow_iqp.dag_factory import iqp_dag
    from airflow_iqp.options import Algorithm1, Arrival

    for profile, anchor in {anchors!r}.items():
        start = datetime.fromisoformat(anchor)
        globals()["iqp_cq2_" + profile] = iqp_dag(
            name="cq2_" + profile,
            sql="SELECT count(*) AS totalorders, o_orderpriority FROM orders GROUP BY o_orderpriority",
            streams={{"orders": {{"path": "{data}/" + profile + "/landing/{{{{ data_interval_start | ts_nodash }}}}",
                                 "unit": "dir"}}}},
            window=timedelta(seconds={window}),
            deadline_offset=timedelta(seconds={offset}),
            arrival=Arrival(units={units}, grace={grace}),
            cut=Algorithm1(cost_hint={{"kind": "linear", "per_unit": 0.6, "per_batch": 25}},
                           final_agg_hint={{"kind": "linear", "base": 20.0, "per_batch": 0.5}}),
            anchor=start,
            end_date=start + timedelta(seconds=1),   # this one window, and backfills before it
        )
''')


def dag_id(profile: str) -> str:
    return f"iqp_cq2_{profile}"


def wid(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y%m%dT%H%M%S")


def read_result(path: str) -> tuple[list[tuple], list[str]]:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    return [tuple(r.values()) for r in t.to_pylist()], t.column_names


def wait_xcom(af, dag: str, run_id: str, index: int):
    """What a batch's sensor returned ({"manifest", "reason"}), or None if it was skipped."""
    try:
        return af.xcom(dag, run_id, "batch.wait", map_index=index)
    except Exception:  # noqa: BLE001 - a skipped sensor pushed nothing
        return None


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    from airflow_iqp.inputs.tpch import generate

    out = tmp_path_factory.mktemp("tpch")
    generate(0.01, UNITS, out)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tpch) -> dict:
    """The three live windows in one Airflow, then the fixed DAG's backfill.

    A query id per profile: the plan and a claim's re-plan read the query's cost history,
    and one profile's measured batches must not re-plan another's window.
    """
    data = tmp_path_factory.mktemp("e2e")
    units = sorted(p for p in (tpch / "units").iterdir() if p.is_dir())
    # The first window opens once Airflow is up (about 25 s); each DAG allows its one window.
    first = (int(time.time()) // 10) * 10 + 50
    anchors = {p: first + i * STAGGER for i, p in enumerate(PROFILES)}
    backfilled = [anchors["fixed"] - k * W for k in (4, 3, 2)]
    for start in backfilled:  # past windows: all input landed long ago
        landing = data / "fixed" / "landing" / wid(start)
        landing.mkdir(parents=True)
        for u in units:
            shutil.copytree(u, landing / u.name)
    dags = data / "dags"
    dags.mkdir()
    (dags / "query_dag.py").write_text(DAGS.format(
        anchors={p: datetime.fromtimestamp(a, timezone.utc).isoformat() for p, a in anchors.items()},
        data=data, window=W, offset=OFFSET, units=UNITS, grace=GRACE))
    env = {"AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
           "AIRFLOW__IQP__STATE_DIR": str(data / "state")}
    out = {p: {"profile": p, "data": data, "tpch": tpch, "units": units, "start": anchors[p], "dag": dag_id(p)}
           for p in PROFILES}
    out["fixed"]["backfilled"] = backfilled

    def replay(profile: str) -> None:
        time.sleep(max(0.0, anchors[profile] - time.time()))
        out[profile]["replay"] = subprocess.Popen(
            ["airflow-iqp", "replay", "--from", str(tpch), "--to", str(data / profile / "landing" / wid(anchors[profile])),
             "--profile", profile, "--window", str(W)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    with airflow_env(dags, extra_env=env) as af:
        for p in PROFILES:
            af.wait_for_dag(dag_id(p))
            af.unpause(dag_id(p))
        publishers = [threading.Thread(target=replay, args=(p,)) for p in PROFILES]
        for t in publishers:
            t.start()
        run_ids = {p: af.window_run(dag_id(p), anchors[p], timeout=120) for p in PROFILES}
        # The live run's deadline, read while it runs: Airflow prunes a run's deadlines
        # once it has succeeded in time.
        fixed, until = out["fixed"], time.time() + 60
        fixed["live_deadline"] = []
        while not fixed["live_deadline"] and time.time() < until:
            fixed["live_deadline"] = af.sql("SELECT d.deadline_time, d.missed FROM deadline d JOIN dag_run r "
                                            "ON r.id = d.dagrun_id WHERE r.run_id = ? AND r.dag_id = ?",
                                            (run_ids["fixed"], dag_id("fixed")))
            time.sleep(1)
        for p in PROFILES:
            run, dag = out[p], dag_id(p)
            run["run"] = af.wait_for_run(dag, run_ids[p], timeout=W + OFFSET + 300, expect_success=False)
            run["tis"] = af.task_instances(dag, run_ids[p])
            run["waits"] = {i: wait_xcom(af, dag, run_ids[p], i)
                            for i in range(len(af.xcom(dag, run_ids[p], "plan")))}
        for t in publishers:
            t.join()
        for p in PROFILES:
            out[p]["replay_rc"] = out[p]["replay"].wait(timeout=120)
        af.backfill(dag_id("fixed"), datetime.fromtimestamp(backfilled[0], timezone.utc),
                    datetime.fromtimestamp(backfilled[-1], timezone.utc))
        found, until = [], time.time() + 120
        while len(found) < len(backfilled) and time.time() < until:  # the scheduler creates them
            time.sleep(2)
            found = [r for r in af.dag_runs(dag_id("fixed")) if r["run_type"] == "backfill"]
        out["fixed"]["backfill_runs"] = [af.wait_for_run(dag_id("fixed"), r["dag_run_id"], timeout=400)
                                         for r in found]
        out["fixed"]["deadlines"] = af.sql("SELECT r.run_id, r.run_type, d.deadline_time, d.missed FROM deadline d "
                                           "JOIN dag_run r ON r.id = d.dagrun_id WHERE r.dag_id = ?",
                                           (dag_id("fixed"),))
    return out


@pytest.fixture(scope="module")
def fixed(runs):
    return runs["fixed"]


@pytest.fixture(scope="module")
def slower(runs):
    return runs["slower"]


@pytest.fixture(scope="module")
def late(runs):
    return runs["late"]


def window(run, start):
    from airflow_iqp.store import open_store

    from airflow_iqp.window.batch import Batch
    from airflow_iqp.window.replan import effective

    ws = open_store(run["data"] / "state").window("cq2_" + run["profile"], wid(start))
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


def due(b: dict) -> float:
    """When a batch fires on time: its latest safe start; the last batch never before its
    ready time (the window's end plus grace), where a re-plan may have put its latest start."""
    return max(b["latest_start_ts"], b["ready_ts"]) if b.get("last") else b["latest_start_ts"]


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
        for t, b in zip(tis, batches):
            if task == "batch.submit" and t["state"] == "skipped" and " · dropped by the " in b["label"]:
                # A batch a re-plan dropped: its sensor skips, and Airflow skips the submit task
                # without running it, so its label (rendered when a task runs) is never rendered.
                assert t["rendered_map_index"] in (None, str(t["map_index"]), b["label"]), t
            else:
                assert t["rendered_map_index"] == b["label"], (task, t)
    cumulative = 0
    for b in batches:
        if b.get("skip"):  # dropped by a re-plan: it claims nothing, and the batches after it claim its units
            assert not (claims.get(b["index"]) or {}).get("units"), (b["index"], claims.get(b["index"]))
            continue
        claim = claims[b["index"]]
        cumulative += len(claim["units"])
        assert cumulative >= b["cumulative"], (b["index"], cumulative, b["cumulative"])
        # Within a second of when it was due: a claim comes after the trigger fires and the task resumes.
        assert claim["claimed_at"] <= due(b) + 1.0, (b["index"], claim["claimed_at"] - due(b))
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
        assert claims[b["index"]]["claimed_at"] <= due(b) + 1.0, (b["index"], claims[b["index"]]["claimed_at"] - due(b))
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
