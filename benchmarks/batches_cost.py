"""The paper's figure 4 on this machine: total cost versus number of batches.

For each query and each batch count K, run one window through ``run-window`` (K batch
spark-submits + one final spark-submit) and record the total wall and CPU seconds of all
those processes, plus the in-job step seconds. Writes
``benchmarks/results/batches_cost.json`` and ``benchmarks/results/batches_cost.md``.

    python benchmarks/batches_cost.py                    # SF 0.5, 100 units, K = 1 2 5 10 25 (long)
    python benchmarks/batches_cost.py --quick            # smoke run: SF 0.05, 20 units, K = 1 2 5
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_iqp.inputs.tpch import generate  # noqa: E402
from airflow_iqp.spark.window import run_window  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def measure(query: str, data: Path, k: int, state: Path) -> dict:
    shutil.rmtree(state, ignore_errors=True)
    t0 = time.perf_counter()
    rep = run_window(query, data, k, state)
    elapsed = time.perf_counter() - t0
    b, f = rep["batches"], rep["final"]
    return {
        "query": query, "batches": k, "units": sum(len(x["units"]) for x in b),
        "wall_seconds": sum(x["wall_seconds"] for x in b) + f["wall_seconds"],
        "cpu_seconds": sum(x["cpu_seconds"] for x in b) + f["cpu_seconds"],
        "step_wall_seconds": sum(x["job"]["wall_seconds"] for x in b) + f["job"]["wall_seconds"],
        "step_cpu_seconds": sum(x["job"]["cpu_seconds"] for x in b) + f["job"]["cpu_seconds"],
        "step_task_seconds": sum(x["job"]["task_seconds"] or 0 for x in b) + (f["job"]["task_seconds"] or 0),
        "final_wall_seconds": f["wall_seconds"],
        "elapsed_seconds": elapsed,
    }


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        "# Cost versus number of batches (paper figure 4)", "",
        f"SF {meta['scale']}, {meta['units']} units, one `run-window` per cell on {meta['machine']}; "
        "cost = sum over the K batch spark-submits and the final one. `x1` = relative to K = 1. "
        "`step` = inside the jobs, without JVM start-up.", "",
        "| query | K | wall s | x1 | cpu s | x1 | step wall s | x1 | step cpu s | task s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {r["query"]: r for r in rows if r["batches"] == min(x["batches"] for x in rows if x["query"] == r["query"])}
    for r in rows:
        b = base[r["query"]]
        lines.append(
            f"| {r['query']} | {r['batches']} | {r['wall_seconds']:.1f} | {r['wall_seconds'] / b['wall_seconds']:.2f} "
            f"| {r['cpu_seconds']:.1f} | {r['cpu_seconds'] / b['cpu_seconds']:.2f} "
            f"| {r['step_wall_seconds']:.1f} | {r['step_wall_seconds'] / b['step_wall_seconds']:.2f} "
            f"| {r['step_cpu_seconds']:.1f} | {r['step_task_seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: SF 0.05, 20 units, K = 1 2 5")
    p.add_argument("--scale", type=float)
    p.add_argument("--units", type=int)
    p.add_argument("--batches", help="comma-separated batch counts")
    p.add_argument("--queries", default="cq2,cq3,q1,q6")
    p.add_argument("--data", help="reuse a generated data directory")
    p.add_argument("--name", default="batches_cost", help="result file stem under benchmarks/results/")
    args = p.parse_args(argv)
    scale = args.scale or (0.05 if args.quick else 0.5)
    units = args.units or (20 if args.quick else 100)
    ks = [int(k) for k in (args.batches or ("1,2,5" if args.quick else "1,2,5,10,25")).split(",")]
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    tmp = RESULTS / "tmp"
    data = Path(args.data) if args.data else tmp / f"tpch-sf{scale}-n{units}"
    if not (data / "units").is_dir():
        generate(scale, units, data, overwrite=True)
    meta = {"scale": scale, "units": units, "batches": ks, "queries": queries,
            "machine": f"{platform.node()} ({platform.machine()}, {__import__('os').cpu_count()} cores)",
            "started_at": time.time()}
    rows = []
    for q in queries:
        for k in ks:
            r = measure(q, data, k, tmp / "state" / f"{q}-k{k}")
            rows.append(r)
            print(f"{q} K={k}: wall {r['wall_seconds']:.1f}s cpu {r['cpu_seconds']:.1f}s "
                  f"(step wall {r['step_wall_seconds']:.1f}s)", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
