"""The rest of a window planned again at a claim: as units arrive (a total that is not known),
and with newer costs (the cost history has grown since the window was planned)."""

from __future__ import annotations

import json
import math

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import EmpiricalArrival, cost_model_from_dict, final_agg_from_dict
from airflow_iqp.planning.planner import Plan, build_plan, plan_batches
from airflow_iqp.store import WindowState
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import QueryConfig, clock
from airflow_iqp.window.costs import cost_models, tail_startup

#: The share of a window after which the rate seen so far estimates its total.
EXTRAPOLATE_AFTER = 0.1
#: The plan methods of Algorithm 1, whose windows a claim may plan again.
ALGORITHM1 = ("greedy", "exact")


def _replan(ws: WindowState) -> dict:
    return ws.doc("replan") or {}


def replan_after(ws: WindowState) -> int:
    """The index of the batch after whose claim the window was last re-planned (0: never)."""
    return _replan(ws).get("after", 0)


def effective(batch: Batch) -> Batch:
    """A plan entry as the newest re-plan of its window has it."""
    override = _replan(batch.window_state()).get("entries", {}).get(str(batch.index))
    return batch.with_(**override) if override else batch


def _plain(value):
    return json.loads(json.dumps(value))


def _in_effect(ws: WindowState, doc: dict) -> tuple[dict | None, dict | None]:
    """The models the window's batches are planned with now: the newest re-plan's, else the plan's."""
    newest = _replan(ws)
    return (newest.get("cost_model") or doc.get("cost_model"),
            newest.get("final_agg_model") or doc.get("final_agg_model"))


Models = tuple  # (CostModel, FinalAggCost, where they came from)


def models_in_effect(ws: WindowState) -> tuple | None:
    """(CostModel, FinalAggCost) the window's batches are planned with now (its newest re-plan's,
    else its plan's), ``cost_scale`` included; None for a window without a stored plan."""
    doc = ws.doc("plan")
    cost_doc, agg_doc = _in_effect(ws, doc) if doc else (None, None)
    if not cost_doc or not agg_doc:
        return None
    try:
        return cost_model_from_dict(cost_doc), final_agg_from_dict(agg_doc)
    except ConfigError:
        return None


def fresh_models(batch: Batch) -> Models | None:
    """The models the batch's window would be planned with now, where they differ from the
    ones its batches are planned with: its query's cost history has grown since (the window
    before it ended after this one was planned, or a batch of this one finished). None when
    they do not differ, and for a window that no claim plans again: one not cut by
    Algorithm 1 (MinBatches, one batch, a backfill), one planned with the cluster's other
    queries, or one whose plan keeps no settings (planned outside the plan task)."""
    ws = batch.window_state()
    doc = None if batch.late else ws.doc("plan")
    if doc is None:
        return None
    settings = doc.get("config")
    if (not settings or doc.get("backfill") or settings.get("shares") or settings.get("ahead") or doc.get("planned_after")
            or (doc.get("spec") or {}).get("method") not in ALGORITHM1):
        return None
    cost, agg, source = cost_models(QueryConfig.from_dict(settings))
    try:
        now = _plain(cost.to_dict()), _plain(agg.to_dict())
    except ConfigError:  # a model built in code has no JSON form
        return None
    return None if now == tuple(_plain(m) for m in _in_effect(ws, doc)) else (cost, agg, source)


def recost(batch: Batch, units: int, models: Models) -> dict:
    """The window's last batch, claimed with newer models than its plan's: what it is planned
    to cost now (its ``units``, as claimed), in the window's re-plan, which :func:`effective` reads."""
    ws = batch.window_state()
    doc = _replan(ws)
    cost, agg, source = models
    entries = doc.get("entries", {})
    entries[str(batch.index)] = {**entries.get(str(batch.index), {}), "cost": cost.cost(units)}
    doc.update(entries=entries, cost_model=cost.to_dict(), final_agg_model=agg.to_dict(), models=source)
    ws.write_doc("replan", doc)
    return doc


def _tail_startup(doc: dict, cost) -> float:
    """What a fused tail's task pays in its lead (:func:`~airflow_iqp.window.costs.tail_startup`)
    with ``cost``, the batch cost in effect; 0 without a fused tail or without the plan's
    settings."""
    settings = doc.get("config")
    return tail_startup(QueryConfig.from_dict(settings), cost) if settings else 0.0


def replan(batch: Batch, claimed: int, arrived: int, now: float,
           models: Models | None = None) -> tuple[bool, dict | None]:
    """As a batch fires: whether it runs now, and the window's remaining batches planned again.

    A window of unknown total estimates it again from what has arrived (``claimed`` units
    in earlier batches and ``arrived`` more by ``now``, at the rate seen so far, over the
    whole window); one whose total is known keeps it (or what has arrived, if more). A
    planned batch runs now with what has arrived; a checkpoint only if the rest would not
    fit one batch after the window's end. Algorithm 1 then cuts what is left, arriving
    evenly until the window's end, after the executor is done with this batch; the new
    batches go to the remaining entries, the last to the last, and entries left over skip.
    ``models`` (:func:`fresh_models`) replace the ones in effect, and the batch that runs
    now is costed with them for the units it claims. Written as the window's re-plan, which
    :func:`effective` reads.
    """
    ws = batch.window_state()
    doc = ws.doc("plan")
    cost_doc, agg_doc = _in_effect(ws, doc)
    if models is None and (not cost_doc or not agg_doc):
        return arrived > 0 and not batch.spare, None
    cost, agg, source = models or (cost_model_from_dict(cost_doc), final_agg_from_dict(agg_doc), None)
    start, end = doc["window_start"], doc["window_end"]
    rel_now, rel_end = now - start, end - start
    ready_end, rel_deadline = rel_end + batch.grace, doc["deadline"] - start
    seen = claimed + arrived
    if rel_now >= rel_end:
        total = seen
    elif batch.known_total or rel_now < EXTRAPOLATE_AFTER * rel_end:  # the count (or estimate) stands
        total = max(seen, batch.expected_total)
    else:
        total = max(seen, math.ceil(seen * rel_end / rel_now))

    # A fused tail's task pays its start-up in its lead, before the window's end: to
    # Algorithm 1 its last batch is ready that much earlier, as in the window's first plan
    # (window.plan._ready_by), and the units due after that are the last batch's anyway.
    ready_by = ready_end - _tail_startup(doc, cost)

    def cut(first_free: float, at_once: int, rest: int) -> tuple[list[int], Plan | None]:
        """Algorithm 1 over ``at_once`` units ready now and ``rest`` arriving evenly until the end."""
        if at_once + rest <= 0:
            return [], None
        step = (rel_end - rel_now) / max(rest, 1)
        times = tuple([max(first_free, rel_now)] * at_once
                      + [max(first_free, min(rel_end, ready_by, rel_now + (j + 1) * step)) for j in range(rest)])
        arrival, w_end = EmpiricalArrival(times), max(ready_by, times[-1])
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
    # What earlier re-plans said of the batches that have claimed stays (the report reads it).
    entries = {k: v for k, v in _replan(ws).get("entries", {}).items() if int(k) <= batch.index}
    if run_now and models is not None:
        entries[str(batch.index)] = {**entries.get(str(batch.index), {}), "cost": cost.cost(arrived)}
    cumulative = base
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
    final = next(e for e in planned if e.index == last)
    rest = sizes[-1] if sizes else 0
    entries[str(last)] = {"expected_total": total, "units": rest,
                          "label": f"batch {last}/{last} · {rest} units · ready {clock(final.ready_ts)} ({name})",
                          **({"latest_start_ts": start + plan.batches[-1].latest_start + _tail_startup(doc, cost),
                              "cost": plan.batches[-1].cost} if plan else {})}
    out = {"after": batch.index, "at": now, "expected_total": total, "ran": run_now,
           "feasible": plan.feasible if plan else True, "sizes": sizes, "entries": entries,
           "cost_model": cost.to_dict(), "final_agg_model": agg.to_dict(),
           "models": source or _replan(ws).get("models")}
    ws.write_doc("replan", out)
    return run_now, out

