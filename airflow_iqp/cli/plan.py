"""``airflow-iqp plan --spec SPEC.json [--json] [--gantt OUT.png]``: plan one window."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from airflow_iqp.cli import read_input
from airflow_iqp.planning.spec import METHODS


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="plan the batches of one recurring query's window",
                       description="Plan the fewest batches that meet the deadline (Algorithm 1; the "
                                   "OR-Tools model with method 'solver'; with method 'exact' a dynamic "
                                   "program that is exact for any cost model).")
    p.add_argument("--spec", required=True, type=Path, help="plan spec (JSON)")
    p.add_argument("--method", choices=METHODS, help="override the spec's method")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--gantt", type=Path, metavar="OUT.png", help="draw the plan as a Gantt chart")
    return p


def run(args) -> int:
    from airflow_iqp.planning.spec import PlanSpec

    text = read_input(args.spec, "--spec")
    spec = PlanSpec.from_json(text)
    plan = spec.plan(args.method)
    if args.json:
        d = plan.to_dict()
        print(json.dumps({k: d[k] for k in ("feasible", "reason", "batches", "final_agg_cost", "total_cost",
                                            "slack")}, indent=2))
    else:
        print(format_plan(plan))
    if args.gantt:
        from airflow_iqp.planning.gantt import draw_plan

        draw_plan(plan, args.gantt, window_start=spec.window_start)
        if not args.json:
            print(f"Gantt chart written to {args.gantt}")
    return 0


def format_plan(plan, fmt_time=lambda t: f"{t:g}") -> str:
    """The plan as a table. ``fmt_time`` renders a time (the Airflow layer passes clock times)."""
    rows = [("batch", "units", "cumulative", "ready", "latest start", "cost s")]
    for b in plan.batches:
        rows.append((f"{b.index}/{len(plan.batches)}", str(b.units), str(b.cumulative), fmt_time(b.ready),
                     fmt_time(b.latest_start), f"{b.cost:.3g}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    status = "meets the deadline" if plan.feasible else f"MISSES the deadline: {plan.reason}"
    lines.append("")
    lines.append(f"final aggregation {plan.final_agg_cost:.3g} s; total cost {plan.total_cost:.3g} s; "
                 f"slack {plan.slack:.3g} s; deadline {fmt_time(plan.deadline)}; {status}")
    return "\n".join(lines)
