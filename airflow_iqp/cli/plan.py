"""``airflow-iqp plan --spec SPEC.json [--json] [--gantt OUT.png]``: plan one window."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from airflow_iqp.cli import read_input
from airflow_iqp.planning.report import format_plan
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
