"""The models a window is planned with: arrivals (hinted or observed), expected units, costs."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from pathlib import Path

from airflow_iqp.planning.models import (
    CostModel, FinalAggCost, PiecewiseLinearFinalAgg, cost_model_from_dict, final_agg_from_dict,
    fit_piecewise_linear, plus_fixed, scaled,
)
from airflow_iqp.state import list_ready_units, read_cost_history, read_json
from airflow_iqp.streams import TPCH, Stream
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import QueryConfig

def arrival_offsets_hint(cfg: QueryConfig, window_len: float) -> list[float]:
    """Expected arrival offsets (s after the window start) of the window's units."""
    from airflow_iqp.inputs.profiles import arrival_offsets

    rate = cfg.rate or cfg.units / window_len
    return arrival_offsets(cfg.profile, rate, cfg.units, window=window_len)


def observed_offsets(cfg: QueryConfig) -> list[float] | None:
    """The most recent earlier window's observed arrival offsets, if any were recorded."""
    root = Path(cfg.state_dir) / cfg.query
    if not root.is_dir():
        return None
    for wdir in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
        f = wdir / "arrivals.json"
        if f.is_file():
            offsets = read_json(f).get("offsets") or []
            if len(offsets) == cfg.units:
                return sorted(offsets)
    return None


#: How many earlier windows' counts the estimate of an unknown total looks at.
HISTORY_WINDOWS = 24


def observed_counts(cfg: QueryConfig, before: float | None = None) -> list[int]:
    """How many units each earlier window of the query received, newest first: its recorded
    arrivals, or, for a window that has ended but whose final step has not recorded them yet
    (the window just before this one, while its last batch runs), the units in its landing
    directory now. ``before``: only windows that ended by then."""
    root = Path(cfg.state_dir) / cfg.query.lower()
    if not root.is_dir():
        return []
    counts = []
    for wdir in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
        arrivals, plan = wdir / "arrivals.json", wdir / "plan.json"
        if arrivals.is_file():
            counts.append(len(read_json(arrivals).get("units") or []))
        elif plan.is_file() and before is not None:
            doc = read_json(plan)
            if doc["batches"] and doc["window_end"] <= before and not doc.get("backfill"):
                entry = Batch.from_dict(doc["batches"][0])
                counts.append(len(list_ready_units(entry.landing, entry.stream_list())))
        if len(counts) == HISTORY_WINDOWS:
            break
    return counts


def expected_units(cfg: QueryConfig, window_len: float, now: float | None = None, present: int = 0,
                   elapsed: float = 0.0) -> tuple[int, str]:
    """Units expected in a window, and whence: ``units=``, else the median of earlier
    windows' observed counts, else the ``rate`` hint over the window, else (a first window
    with no hint) the ``present`` units at the rate they came in the ``elapsed`` seconds of
    the window, at least one. Nothing needs to be given: without units the checkpoints
    estimate again as the window goes on, and the last batch takes all that arrived."""
    if cfg.units is not None:
        return cfg.units, "units"
    counts = [c for c in observed_counts(cfg, now) if c > 0]
    if counts:
        return max(1, round(statistics.median(counts))), f"median of {len(counts)} earlier windows"
    if cfg.rate:
        return max(1, math.ceil(cfg.rate * window_len)), "rate hint"
    if present and elapsed > 0:
        return max(1, math.ceil(present * window_len / min(elapsed, window_len))), "the rate so far, no history yet"
    return max(1, present), "the units present, no history yet"


def _overhead(cost: CostModel) -> float:
    """A batch cost model's per-batch start-up: its value extended to zero units."""
    return getattr(cost, "overhead", getattr(cost, "per_batch", 0.0))  # piecewise or linear


def cost_models(cfg: QueryConfig) -> tuple[CostModel, FinalAggCost, str]:
    """The cost models to plan with, and where they came from.

    In order of preference: the newest calibrated fit of this query and backend
    (``airflow-iqp calibrate``: end-to-end seconds, the backend's per-batch start-up
    included); a fit to this backend's measured batches and merges; the configured hints.
    """
    cost, agg, source = _cost_models(cfg)
    # The final task runs even after a single batch, so one batch pays a merge too.
    agg = replace(agg, merge_single=True)
    if cfg.cost_scale != 1:
        cost, agg = scaled(cost, cfg.cost_scale), scaled(agg, cfg.cost_scale)
        source += f"; costs x {cfg.cost_scale:g} (cost_scale)"
    if cfg.fuse_tail and cfg.backend == "spark-submit":
        # The merge runs in the last batch's spark-submit: it does not start a JVM of its own.
        # (On Spark Connect both run on one open session either way: nothing is shared.)
        agg = replace(agg, shared_startup=min(_overhead(cost), agg.cost(1)))
        source += f"; fused tail: the merge shares the last batch's start-up ({agg.shared_startup:.1f} s)"
    if cfg.dispatch:
        # Every batch is a task Airflow starts after its input is claimed, and so is the final
        # task, unless it runs the last batch (a fused tail), whose start the batch already paid.
        cost = plus_fixed(cost, cfg.dispatch)
        if not cfg.fuse_tail:
            agg = plus_fixed(agg, cfg.dispatch)
        source += f"; {cfg.dispatch:g} s of task dispatch per batch"
    return cost, agg, source


def tail_startup(cfg: QueryConfig, cost: CostModel) -> float:
    """Seconds of a fused tail's fixed start that its task pays during its lead, before the
    last batch's input is complete: Airflow starting the task (``dispatch``) and, on
    spark-submit, the job's JVM and session (the batch cost's start-up, ``cost`` as
    :func:`cost_models` gives it, dispatch included). Zero without a fused tail."""
    if not cfg.fuse_tail:
        return 0.0
    return _overhead(cost) if cfg.backend == "spark-submit" else cfg.dispatch


def _cost_models(cfg: QueryConfig) -> tuple[CostModel, FinalAggCost, str]:
    fits = read_cost_history(cfg.state_dir, cfg.query, "fit", cfg.backend)
    if fits:
        fit = fits[-1]
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(fit["recorded_at"]))
        return (cost_model_from_dict(fit["cost"], "cost_history.fit.cost"),
                final_agg_from_dict(fit["final_agg"], "cost_history.fit.final_agg"),
                f"cost and final aggregation calibrated for {cfg.backend} at {when} UTC")
    batches = read_cost_history(cfg.state_dir, cfg.query, "batch", cfg.backend)
    finals = read_cost_history(cfg.state_dir, cfg.query, "final", cfg.backend)
    source = []
    if len({r["units"] for r in batches}) >= 2:
        cost: CostModel = fit_piecewise_linear([(r["units"], r["wall_seconds"]) for r in batches], max_pieces=4)
        source.append(f"cost fitted to {len(batches)} measured batches")
    else:
        cost = cost_model_from_dict(cfg.cost_hint, "cost_hint")
        source.append("cost from the configured hint")
    if len({r["batches"] for r in finals}) >= 2:
        fit = fit_piecewise_linear([(r["batches"], r["wall_seconds"]) for r in finals], max_pieces=3)
        agg: FinalAggCost = PiecewiseLinearFinalAgg(fit.points)
        source.append(f"final aggregation fitted to {len(finals)} measured merges")
    else:
        agg = final_agg_from_dict(cfg.final_agg_hint, "final_agg_hint")
        source.append("final aggregation from the configured hint")
    return cost, agg, "; ".join(source)



def streams_of(cfg: QueryConfig) -> tuple[Stream, ...]:
    """The query's streams (the TPC-H layout by default)."""
    return tuple(Stream.from_dict(s) for s in cfg.streams) if cfg.streams else TPCH
