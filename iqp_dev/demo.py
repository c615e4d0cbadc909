"""The README's main job (``bash scripts/demo.sh``): the CQ2 example DAG, end to end.

It generates TPC-H (SF 0.01) cut into 120 units, starts a throw-away local Airflow
(SQLite, LocalExecutor; scheduler, dag-processor, triggerer and api-server as real
processes) on ``dags/``, and lets the ``iqp_cq2`` DAG run one 2-minute window while
``airflow-iqp replay`` publishes the units at 1 unit/s. Each batch is a real
``spark-submit`` on ``local[*]``. At the end it prints the plan against what actually
ran, the result table, and where the Gantt chart of the run was written.

    python -m iqp_dev.demo [--out var/demo] [--window 120] [--windows 1] [--json PATH] [--keep-home]

With ``--windows 2`` the DAG runs two consecutive windows over the same units: the first is
planned with the backend's built-in default costs, the second with what the first one's
batches and merge took, from claim to written partial; ``--json`` writes each window's
planned against actual seconds per batch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "iqp_cq2"


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%H:%M:%S")


def _iso_ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m iqp_dev.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "var" / "demo", help="working directory (wiped)")
    ap.add_argument("--window", type=int, default=120, help="window length in seconds (1 unit arrives per second)")
    ap.add_argument("--deadline", type=int, default=80, help="seconds after the window end the result is due")
    ap.add_argument("--windows", type=int, default=1, help="consecutive windows to run (the later ones are planned "
                    "from the earlier ones' measured costs)")
    ap.add_argument("--json", type=Path, help="write each window's planned against actual seconds here")
    ap.add_argument("--keep-home", action="store_true", help="keep the Airflow home for inspection")
    args = ap.parse_args(argv)

    from airflow_iqp.inputs.tpch import generate
    from iqp_dev.local_airflow import airflow_env
    from airflow_iqp.store import open_store

    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    units = args.window
    print(f"1/4 generating TPC-H SF 0.01 in {units} units under {out / 'tpch'}", flush=True)
    generate(0.01, units, out / "tpch")
    anchor = (int(time.time()) // 10) * 10 + 80  # the window opens once Airflow is up
    env = {
        "IQP_DATA": str(out), "IQP_ANCHOR": datetime.fromtimestamp(anchor, timezone.utc).isoformat(),
        "IQP_WINDOW_S": str(args.window), "IQP_UNITS": str(units), "IQP_DEADLINE_S": str(args.deadline),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        "AIRFLOW__IQP__STATE_DIR": str(out / "state"),
        # `airflow dags test` would need the DeadlineAlert off; real processes handle it.
    }
    print("2/4 starting Airflow: scheduler, dag-processor, triggerer, api-server (SQLite, LocalExecutor)", flush=True)
    with airflow_env(ROOT / "dags", extra_env=env, keep_home=args.keep_home) as af:
        print(f"    up in {af.timings['startup']:.0f} s; UI and API at {af.api_url}", flush=True)
        af.wait_for_dag(DAG_ID)
        af.unpause(DAG_ID)
        starts = [anchor + k * args.window for k in range(args.windows)]
        ids = [datetime.fromtimestamp(a, timezone.utc).strftime("%Y%m%dT%H%M%S") for a in starts]
        replays = []
        for start, window_id in zip(starts, ids):
            landing = out / "landing" / "cq2" / window_id
            print(f"3/4 window {_utc(start)}-{_utc(start + args.window)}, deadline "
                  f"{_utc(start + args.window + args.deadline)}; replaying {units} units into {landing}", flush=True)
            time.sleep(max(0.0, start - time.time()))
            replays.append(subprocess.Popen(
                [sys.executable, "-m", "airflow_iqp.cli.main", "replay", "--from", str(out / "tpch"),
                 "--to", str(landing), "--rate", "1"], stdout=subprocess.DEVNULL))
            if start == starts[-1]:
                break
        run_ids = [af.window_run(DAG_ID, start, timeout=120) for start in starts]
        seen: set[tuple] = set()
        deadline = time.time() + args.window + args.deadline + 600
        while time.time() < deadline:
            for run_id in run_ids:
                for t in af.task_instances(DAG_ID, run_id):
                    key = (run_id, t["task_id"], t["map_index"], t["state"])
                    if t["state"] and key not in seen:
                        seen.add(key)
                        label = t.get("rendered_map_index") if t["map_index"] >= 0 else ""
                        print(f"    {_utc(time.time())}  {t['task_id']:<13} {t['state']:<9} {label or ''}", flush=True)
            if all(af.dag_run(DAG_ID, r)["state"] in ("success", "failed") for r in run_ids):
                break
            time.sleep(2)
        af.pause(DAG_ID)
        states = [af.dag_run(DAG_ID, r)["state"] for r in run_ids]
        all_tis = [af.task_instances(DAG_ID, r) for r in run_ids]
        for replay in replays:
            replay.wait(timeout=60)
    if states != ["success"] * len(run_ids):
        print(f"the runs ended {states}; logs are under {out}", file=sys.stderr)
        return 1
    print("4/4 done\n")
    windows = []
    for window_id, tis in zip(ids, all_tis):
        ws = open_store(out / "state").window("cq2", window_id)
        plan, report = ws.doc("plan"), ws.doc("report")
        replanned = (ws.doc("replan") or {}).get("models")
        print(f"window {window_id}:")
        _print_report(plan, report, tis)
        if replanned:
            print(f"planned again at a claim, with newer costs: {replanned}")
        windows.append({"window": window_id, "models": plan["models"], "deadline_met": report["deadline_met"],
                        "batches": [{"batch": b["index"], "units": r["claimed_units"],
                                     "planned_seconds": r["planned_cost"],
                                     "first_planned_seconds": r.get("first_planned_cost", b["cost"]),
                                     "claim_to_partial_seconds": r.get("claim_to_partial_seconds")}
                                    for b, r in zip(plan["batches"], report["batches"])]})
        print()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"window_seconds": args.window, "deadline_seconds": args.deadline,
                                         "windows": windows}, indent=2) + "\n")
    ws = open_store(out / "state").window("cq2", ids[-1])
    _print_result(ws.manifest())
    png = _gantt(ws.doc("plan"), all_tis[-1], out / "gantt.png")
    print(f"\nGantt chart of the run (plan against actual): {png}")
    return 0


def _print_report(plan: dict, report: dict, tis: list[dict]) -> None:
    subs = {t["map_index"]: t for t in tis if t["task_id"] == "batch.submit"}
    print(f"Plan against actual ({plan['models']}):")
    print(f"{'batch':>7} {'units':>6} {'claimed':>8} {'ready':>9} {'latest':>9} {'claimed at':>11} "
          f"{'started':>9} {'ended':>9} {'at open s':>10} {'planned s':>10} {'took s':>7} {'spark s':>8}")
    for b, r in zip(plan["batches"], report["batches"]):
        t = subs.get(b["index"] - 1, {})
        st, en = _iso_ts(t.get("start_date")), _iso_ts(t.get("end_date"))
        print(f"{b['index']:>4}/{b['of']:<2} {b['units']:>6} {r['claimed_units']:>8} {_utc(b['ready_ts']):>9} "
              f"{_utc(b['latest_start_ts']):>9} {_utc(r['claimed_at']) if r['claimed_at'] else '-':>11} "
              f"{_utc(st) if st else '-':>9} {_utc(en) if en else '-':>9} {b['cost']:>10.1f} {r['planned_cost']:>10.1f} "
              f"{(r.get('claim_to_partial_seconds') or 0):>7.1f} {(r['wall_seconds'] or 0):>8.1f}")
    print("(at open s: the batch's cost in the plan made as the window opened; planned s: as the window's "
          "plan stood at its claim, planned again there where the cost history had grown; took s: from the "
          "claim to the written partial, what both stand for; spark s: the job's Spark work alone)")
    met = "met" if report["deadline_met"] else "MISSED"
    print(f"final aggregation finished {_utc(report['finished_ts'])}; deadline {_utc(report['deadline_ts'])}: {met}"
          f"{'; the result is partial (late units)' if report['partial'] else ''}")


def _print_result(manifest: dict) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(manifest["result"]).to_pylist()
    print(f"\nResult ({manifest['result']}), {len(manifest['units'])} units from {len(manifest['partials'])} partials:")
    cols = list(table[0]) if table else []
    print("  ".join(f"{c:>16}" for c in cols))
    for row in table:
        print("  ".join(f"{str(v):>16}" for v in row.values()))


def _gantt(plan: dict, tis: list[dict], path: Path) -> Path:
    from airflow_iqp.planning.gantt import draw_plan
    from airflow_iqp.planning.planner import Plan

    p = Plan.from_dict(plan["plan"])
    start = plan["window_start"]
    actual = []
    for b in plan["batches"]:
        t = next((t for t in tis if t["task_id"] == "batch.submit" and t["map_index"] == b["index"] - 1), {})
        s, e = _iso_ts(t.get("start_date")), _iso_ts(t.get("end_date"))
        actual.append((s - start, e - start) if s and e else (0.0, 0.0))
    final = next((t for t in tis if t["task_id"] == "final"), {})
    if final.get("start_date") and final.get("end_date"):
        actual.append((_iso_ts(final["start_date"]) - start, _iso_ts(final["end_date"]) - start))
    return draw_plan(p, path, window_start=0.0, actual=actual, time_label="seconds since the window opened",
                     title=f"{plan['query']} window {plan['window_id']}: plan and actual")


if __name__ == "__main__":
    sys.exit(main())
