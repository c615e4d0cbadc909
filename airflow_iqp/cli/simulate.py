"""``airflow-iqp simulate --scenario SCENARIO.json --policy llf|edf|sjf|rr [--no-minbatch] [--json] [--plot OUT.png]``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from airflow_iqp.cli import read_input


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("simulate", help="simulate many queries sharing one cluster",
                       description="Discrete-event simulation of many recurring queries on one non-preemptive "
                                   "executor, with MinBatch sizing and LLF / EDF / SJF / RR ordering.")
    p.add_argument("--scenario", required=True, type=Path, help="scenario (JSON)")
    p.add_argument("--policy", required=True, choices=("llf", "edf", "sjf", "rr"))
    p.add_argument("--no-minbatch", action="store_true", help="process whatever has arrived (figure 8's baseline)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="draw each query's batches over time")
    return p


def run(args) -> int:
    from airflow_iqp.planning.simulate import Scenario, simulate

    text = read_input(args.scenario, "--scenario")
    result = simulate(Scenario.from_json(text), args.policy, minbatch=not args.no_minbatch)
    if args.json:
        print(json.dumps({**result.summary(), "per_query": [q.to_dict() for q in result.queries]}, indent=2))
    else:
        print(format_result(result))
    if args.plot:
        plot_result(result, args.plot)
        if not args.json:
            print(f"plot written to {args.plot}")
    return 0


def format_result(result) -> str:
    rows = [("query", "batches", "MinBatch", "cost s", "single s", "done at", "deadline", "met")]
    for q in result.queries:
        mb = "-" if q.min_batch is None else f"{q.min_batch.size}{'' if q.bound_kept else ' (capped)'}"
        rows.append((q.id, str(len(q.batches)), mb, f"{q.cost:.1f}", f"{q.single_batch_cost:.1f}",
                     "-" if q.completion is None else f"{q.completion:.1f}", f"{q.deadline:.1f}",
                     "yes" if q.met else "NO"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(f"{result.policy.upper()}{'' if result.minbatch else ' without MinBatch'}: "
                 f"{result.deadlines_met}/{len(result.queries)} deadlines met, normalised cost "
                 f"{result.normalized_cost:.2f}, {result.batches} batches")
    capped = [q.id for q in result.queries if not q.bound_kept]
    if capped:
        lines.append("c_max caps the MinBatch below what rsf needs, so the cost bound cannot be kept for: "
                     + ", ".join(capped))
    return "\n".join(lines)


def plot_result(result, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    qs = result.queries
    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.35 * len(qs)))
    for y, q in enumerate(qs):
        ax.broken_barh([(b.start, b.end - b.start) for b in q.batches], (y - 0.3, 0.6),
                       facecolors="#4c78a8" if q.met else "#d62728")
        ax.plot([q.deadline], [y], marker="|", color="black", markersize=12)
    ax.set_yticks(range(len(qs)), [q.id for q in qs])
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(f"{result.policy.upper()}: {result.deadlines_met}/{len(qs)} deadlines met, "
                 f"normalised cost {result.normalized_cost:.2f} (| = deadline, red = missed)")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
