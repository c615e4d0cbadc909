"""A plan as a table, for logs and the command line."""

from __future__ import annotations


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
