"""A Gantt chart of a plan (and, optionally, of what actually ran). matplotlib is imported lazily."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from airflow_iqp.planning.planner import Plan


def draw_plan(plan: Plan, out: Path | str, *, window_start: float = 0.0, title: str = "",
              actual: Sequence[tuple[float, float]] | None = None, time_label: str = "time (s)") -> Path:
    """Draw the window, each batch from its latest start, the final aggregation and the deadline.

    ``actual`` is an optional list of (start, end) per batch, then the final aggregation,
    drawn as a second row per batch so plan and reality can be compared.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    k = len(plan.batches)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * (k + 1) * (2 if actual else 1)))
    ax.axvspan(window_start, plan.window_end, color="#e8f0fe", label="window")
    rows = []
    for b in plan.batches:
        rows.append((f"batch {b.index} ({b.units} u)", b.latest_start, b.cost, "#4c78a8", b.ready))
    agg_start = (plan.batches[-1].latest_start + plan.batches[-1].cost) if k else plan.window_end
    if plan.final_agg_cost > 0 or k > 1:
        rows.append(("final aggregation", agg_start, plan.final_agg_cost, "#f58518", None))
    labels = []
    y = 0
    for i, (label, start, dur, color, ready) in enumerate(rows):
        ax.barh(y, dur, left=start, color=color, edgecolor="black", height=0.6,
                label="planned (latest start)" if i == 0 else None)
        if ready is not None:
            ax.plot([ready], [y], marker="|", color="black", markersize=14,
                    label="input ready" if i == 0 else None)
        labels.append(label)
        y += 1
        if actual and i < len(actual):
            a_start, a_end = actual[i]
            ax.barh(y, a_end - a_start, left=a_start, color="#54a24b", edgecolor="black", height=0.6,
                    label="actual" if i == 0 else None)
            labels.append("  actual")
            y += 1
    ax.axvline(plan.deadline, color="#d62728", linestyle="--", label="deadline")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel(time_label)
    ax.set_title(title or ("plan meets the deadline" if plan.feasible else "plan misses the deadline"))
    ax.legend(loc="upper left", fontsize="small", ncols=3, bbox_to_anchor=(0, -0.25 if k < 3 else -0.12))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
