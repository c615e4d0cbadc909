"""A window whose total is unknown: the remaining batches planned again as units arrive."""

from __future__ import annotations

import math

from airflow_iqp.planning.models import EmpiricalArrival, cost_model_from_dict, final_agg_from_dict
from airflow_iqp.planning.planner import Plan, build_plan, plan_batches
from airflow_iqp.state import WindowState, atomic_write_json, read_json
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import clock

REPLAN = "replan.json"
#: The share of a window after which the rate seen so far estimates its total.
EXTRAPOLATE_AFTER = 0.1


def _replan(ws: WindowState) -> dict:
    path = ws.root / REPLAN
    return read_json(path) if path.is_file() else {}


def replan_after(ws: WindowState) -> int:
    """The index of the batch after whose claim the window was last re-planned (0: never)."""
    return _replan(ws).get("after", 0)


def effective(batch: Batch) -> Batch:
    """A plan entry as the newest re-plan of its window has it (an unknown total only)."""
    if batch.known_total:
        return batch
    override = _replan(batch.window_state()).get("entries", {}).get(str(batch.index))
    return batch.with_(**override) if override else batch


def replan(batch: Batch, claimed: int, arrived: int, now: float) -> tuple[bool, dict | None]:
    """A window of unknown total, as a batch fires: whether it runs now, and the remaining
    batches planned again.

    The total is estimated again from what has arrived (``claimed`` units in earlier
    batches and ``arrived`` more by ``now``, at the rate seen so far, over the whole
    window). A planned batch runs now with what has arrived; a checkpoint only if the
    rest would not fit one batch after the window's end. Algorithm 1 then cuts what is
    left, arriving evenly until the window's end, after the executor is done with this
    batch; the new batches go to the remaining entries, the last to the last, and entries
    left over skip. Written to ``replan.json``, which :func:`effective` reads.
    """
    ws = batch.window_state()
    doc = read_json(ws.root / "plan.json")
    if not doc.get("cost_model") or not doc.get("final_agg_model"):
        return arrived > 0 and not batch.spare, None
    cost, agg = cost_model_from_dict(doc["cost_model"]), final_agg_from_dict(doc["final_agg_model"])
    start, end = doc["window_start"], doc["window_end"]
    rel_now, rel_end = now - start, end - start
    ready_end, rel_deadline = rel_end + batch.grace, doc["deadline"] - start
    seen = claimed + arrived
    if rel_now >= rel_end:
        total = seen
    elif rel_now < EXTRAPOLATE_AFTER * rel_end:  # too early to tell a rate: the estimate stands
        total = max(seen, batch.expected_total)
    else:
        total = max(seen, math.ceil(seen * rel_end / rel_now))

    def cut(first_free: float, at_once: int, rest: int) -> tuple[list[int], Plan | None]:
        """Algorithm 1 over ``at_once`` units ready now and ``rest`` arriving evenly until the end."""
        if at_once + rest <= 0:
            return [], None
        step = (rel_end - rel_now) / max(rest, 1)
        times = tuple([max(first_free, rel_now)] * at_once
                      + [max(first_free, min(rel_end, rel_now + (j + 1) * step)) for j in range(rest)])
        arrival, w_end = EmpiricalArrival(times), max(ready_end, times[-1])
        # A deadline already behind (a checkpoint that fired late, an infeasible deadline):
        # the batches that finish earliest, as the window's first plan does, not an error.
        return plan_batches(arrival, cost, agg, w_end, max(rel_deadline, w_end)).sizes, (arrival, w_end)

    sizes, _ = cut(rel_now, arrived, total - seen)
    run_now = arrived > 0 and (not batch.spare or len(sizes) >= 2)
    if run_now:
        sizes, basis = cut(rel_now + cost.cost(arrived), 0, total - seen)
        base = seen
    else:
        sizes, basis = cut(rel_now, arrived, total - seen)
        base = claimed
    planned = [Batch.from_dict(e) for e in doc["batches"]]
    last = max(e.index for e in planned)
    slots = list(range(batch.index + 1, last))  # the entries before the last
    if len(sizes) - 1 > len(slots):  # more batches than entries: the earliest merge
        cut_at = len(sizes) - len(slots)
        sizes = [sum(sizes[:cut_at])] + sizes[cut_at:]
    plan = build_plan(sizes, basis[0], cost, agg, basis[1], max(rel_deadline, basis[1])) if sizes else None
    checkpoints = {e.index: e for e in planned if e.spare}
    name = f"re-plan at {clock(now)} after batch {batch.index}"
    entries, cumulative = {}, base
    for j, idx in enumerate(slots):
        head = f"batch {idx}/{last}"
        if plan is not None and j < len(sizes) - 1:
            b = plan.batches[j]
            cumulative += b.units
            entries[str(idx)] = {"skip": False, "spare": False, "units": b.units, "cumulative": cumulative,
                                 "ready_ts": start + b.ready, "latest_start_ts": start + b.latest_start,
                                 "label": f"{head} · {b.units} units · ready {clock(start + b.ready)} ({name})"}
        elif idx in checkpoints:  # it looks again when its time comes
            entries[str(idx)] = {"skip": False, "spare": True, "units": 0, "cumulative": cumulative,
                                 "label": f"{head} · checkpoint · ready {clock(checkpoints[idx].ready_ts)}"}
        else:
            why = (f"the rest fits {len(sizes)} batch{'es' if len(sizes) != 1 else ''}" if sizes
                   else "nothing is left to claim")
            entries[str(idx)] = {"skip": True, "units": 0, "cumulative": cumulative,
                                 "label": f"{head} · dropped by the {name}: {why}"}
    entries[str(last)] = {"expected_total": total, "units": sizes[-1] if sizes else 0,
                          **({"latest_start_ts": start + plan.batches[-1].latest_start} if plan else {})}
    out = {"after": batch.index, "at": now, "expected_total": total, "ran": run_now,
           "feasible": plan.feasible if plan else True, "sizes": sizes, "entries": entries}
    atomic_write_json(ws.root / REPLAN, out)
    return run_now, out

