"""The README's main job: ``bash scripts/demo.sh``.

Until the Airflow demo DAG lands, this plans the paper's worked example (section 3.1,
figure 2) for its four deadlines with both methods, prints each plan, and draws the
tightest one as a Gantt chart.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from airflow_iqp.cli.plan import format_plan
from airflow_iqp.planning.spec import PlanSpec

PAPER_EXAMPLE = {
    "window_start": 1, "window_end": 10,
    "arrival": {"kind": "fixed_rate", "rate": 1.0, "total": 10},
    "cost": {"kind": "linear", "per_unit": 0.5, "per_batch": 0.0},
    "final_agg": {"kind": "linear", "base": 0.0, "per_batch": 0.0},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="airflow-iqp demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("var/demo"), help="where to write the Gantt chart")
    args = ap.parse_args(argv)
    print("The paper's example: 10 units at 1 unit/s over the window [1, 10], 0.5 s per unit.\n")
    for deadline in (16, 15, 12, 11):
        spec = PlanSpec.from_dict({**PAPER_EXAMPLE, "deadline": deadline})
        greedy, solver = spec.plan("greedy"), spec.plan("solver")
        agree = "agrees" if solver.sizes == greedy.sizes else f"DISAGREES: {solver.sizes}"
        print(f"deadline {deadline}: Algorithm 1 plans {greedy.sizes}; the OR-Tools model {agree}")
        print(format_plan(greedy), end="\n\n")
    from airflow_iqp.planning.gantt import draw_plan

    out = draw_plan(PlanSpec.from_dict({**PAPER_EXAMPLE, "deadline": 11}).plan(), args.out / "paper_example.png",
                    window_start=1, title="the paper's example, deadline 11")
    print(f"Gantt chart of the deadline-11 plan: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
