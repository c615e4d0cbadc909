"""``airflow-iqp plan (--spec SPEC.json | --window STATE/<query>/<window>) [--json] [--gantt OUT.png]``:
plan one window.

``--window`` plans a DAG's window again from the spec its plan task stored in the window's
plan (the models, arrivals, margin, dispatch and merge it planned with), through
the same :meth:`~airflow_iqp.planning.spec.PlanSpec.plan`: the same batches, on the clock.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from airflow_iqp.cli import read_input
from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.report import format_plan
from airflow_iqp.planning.spec import METHODS


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="plan the batches of one recurring query's window",
                       description="Plan the fewest batches that meet the deadline (Algorithm 1; the "
                                   "OR-Tools model with method 'solver'; with method 'exact' a dynamic "
                                   "program that is exact for any cost model). With --window, plan a "
                                   "DAG's window again as its plan task did.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--spec", type=Path, help="plan spec (JSON)")
    what.add_argument("--window", type=Path, metavar="STATE/QUERY/WINDOW",
                      help="a window's state directory: plan it again from its stored plan")
    p.add_argument("--method", choices=METHODS, help="override the spec's method")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--gantt", type=Path, metavar="OUT.png", help="draw the plan as a Gantt chart")
    return p


def window_spec(window: Path) -> tuple[dict, float, str]:
    """The spec a window's plan task planned with, the window's start (Unix seconds), and a
    line saying which window and where its costs came from."""
    from airflow_iqp.window.config import clock

    from airflow_iqp.store import window_at

    doc = window_at(window).doc("plan")
    if doc is None:
        raise ConfigError(f"{window}: the window has no plan (is it a window's directory of the state store, "
                          f"STATE/<query>/<window>?)", "--window")
    if not doc.get("spec"):
        raise ConfigError(f"{window}: its plan holds no spec: its window was planned by an older version, "
                          f"or with cost models that have no JSON form", "--window")
    start = doc["window_start"]
    head = (f"{doc['query']} window {doc['window_id']}: [{clock(start)}, {clock(doc['window_end'])}], "
            f"deadline {clock(doc['deadline'])}; {doc['models']}")
    return doc["spec"], start, head


def run(args) -> int:
    from airflow_iqp.planning.spec import PlanSpec
    from airflow_iqp.window.config import clock

    if args.window:  # times on the clock, as the DAG's plan task logged them
        doc, start, head = window_spec(args.window)
        spec = PlanSpec.from_dict(doc)

        def fmt_time(t: float) -> str:
            return clock(start + t)
    else:  # times on the spec's own axis
        spec, head = PlanSpec.from_json(read_input(args.spec, "--spec")), None

        def fmt_time(t: float) -> str:
            return f"{t:g}"
    plan = spec.plan(args.method)
    if args.json:
        d = plan.to_dict()
        print(json.dumps({k: d[k] for k in ("feasible", "reason", "batches", "final_agg_cost", "total_cost",
                                            "slack")}, indent=2))
    else:
        print("\n".join(filter(None, [head, format_plan(plan, fmt_time=fmt_time)])))
    if args.gantt:
        from airflow_iqp.planning.gantt import draw_plan

        draw_plan(plan, args.gantt, window_start=spec.window_start)
        if not args.json:
            print(f"Gantt chart written to {args.gantt}")
    return 0
