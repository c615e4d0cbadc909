"""What the Airflow parts do for one window, without Airflow: plan, readiness, claims, late data.

The operators, sensor and trigger in this provider are thin: they read the run's window
and configuration from Airflow, call these functions, and hand data work to Spark. So
this module imports neither Airflow nor Spark, and tests exercise it directly.

Times here are Unix seconds (floats). The planning core works in seconds since the
window start; :func:`plan_window` converts.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.exact import MAX_UNITS, plan_exact
from airflow_iqp.planning.minbatch import min_batch_size
from airflow_iqp.planning.models import (
    Busy, CostModel, EmpiricalArrival, FinalAggCost, LinearCost, LinearFinalAgg, PiecewiseLinearFinalAgg,
    cost_model_from_dict, final_agg_from_dict, fit_piecewise_linear, plus_fixed, scaled,
)
from airflow_iqp.planning.planner import IDLE, Plan, build_plan, executed, plan_batches
from airflow_iqp.streams import TPCH, Stream, files_of
from airflow_iqp.state import (
    WindowState, atomic_write_json, claim_units, count_landed, list_ready_units, note_seen, read_claims,
    read_cost_history, read_json,
)

#: What a unit's files are; a unit is complete when both exist.


#: The execution backends: one spark-submit per batch, or a shared Spark Connect server.
BACKENDS = ("spark-submit", "spark-connect")


def window_id(window_start: float) -> str:
    """The window's id in the state layout: its start as ``YYYYmmddTHHMMSS`` (UTC)."""
    return dt.datetime.fromtimestamp(window_start, dt.timezone.utc).strftime("%Y%m%dT%H%M%S")


def clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%H:%M:%S")


#: How a window is cut into batches (``QueryConfig.mode``).
MODES = ("plan", "dynamic", "one_batch")


@dataclass(frozen=True)
class QueryConfig:
    """One recurring query's settings, as a DAG author gives them (see ``iqp_dag``)."""

    query: str
    landing: str                 #: this window's landing directory (resolved)
    state_dir: str
    #: Units expected per window; None: unknown, estimated (:func:`expected_units`) and
    #: checked against what arrives at every batch.
    units: int | None = None
    static: str | dict | None = None  #: a directory of <table>.parquet, or table -> path
    #: The query's streams as ``Stream.to_dict()`` (None: the TPC-H layout): what a unit is.
    streams: tuple | None = None
    rate: float | None = None    #: arrival hint, units/s (default: units over the window)
    profile: str = "fixed"       #: arrival hint's profile (airflow_iqp.inputs.profiles)
    arrival: str = "hint"        #: "hint", or "observed": the last window's observed arrivals
    cost_hint: dict = field(default_factory=lambda: {"kind": "linear", "per_unit": 0.1, "per_batch": 20.0})
    final_agg_hint: dict = field(default_factory=lambda: {"kind": "linear", "base": 20.0, "per_batch": 0.5})
    backend: str = "spark-submit"  #: "spark-submit" or "spark-connect" (whose cost history to plan with)
    #: "plan" (Algorithm 1), "dynamic" (MinBatches, section 4), or "one_batch" (the whole window
    #: as one batch after its end: the baseline users compare against, on the same deployment)
    mode: str = "plan"
    rsf: float = 0.5
    c_max: float | None = None
    max_batches: int = 16        #: dynamic mode maps this many batches at most
    fuse_tail: bool = False      #: the final task runs the last batch (``iqp_dag(fuse_tail=True)``)
    #: Seconds from a batch's input being claimed to its Spark work starting (the sensor
    #: resuming, the task starting, its session opening), added to every batch's cost; the
    #: calibrated and measured costs leave it out. About 1.7 s on Spark Connect here.
    dispatch: float = 0.0
    #: The calibrated costs times this are the planned ones (:func:`scaled`): what the
    #: deployment's own load while a window runs (Airflow, the other queries' tasks, the
    #: input landing) adds to a calibration on an idle machine. Batches of nine queries on
    #: one Spark Connect server here ran 0.5 to 2.3 times their calibrated cost (median 1.35).
    cost_scale: float = 1.0
    #: Seconds kept between a batch's input being ready and its latest safe start, for
    #: what the plan does not model: noticing the input (the trigger polls), claiming it,
    #: starting the job. Function 1 leaves every batch but the first no slack at all.
    margin: float = 10.0
    #: Seconds after the window's end that the cluster is busy with the final work of other
    #: queries due before this one (several queries on one cluster, their last batches run
    #: earliest deadline first: ``tail_slots``). The window is planned against the deadline
    #: less this, and its last batch does not start before the window's end plus this.
    ahead: float = 0.0
    #: The other queries on this cluster over the same arriving units (same landing, units,
    #: arrival hint, backend and settings; each its own cost models from the cost history):
    #: query id -> its deadline, seconds after the window's end. The queries due before this
    #: one (earliest deadline first) are planned first, and this window is planned in the
    #: executor time they leave (:class:`~airflow_iqp.planning.models.Busy`): joint
    #: planning, instead of ``ahead``'s fixed reservation after the window's end.
    shares: dict = field(default_factory=dict)
    #: Seconds after the window's end that the last batch still waits for units to land:
    #: it takes everything present at the window's end plus this.
    grace: float = 0.0
    #: Units that land after the last claim: "record" them (``late.json``, the result marked
    #: partial), or "merge" them too: the next window's run merges them into this window's
    #: result, ``lateness`` seconds after its end plus ``grace``, as a new revision.
    late: str = "record"
    lateness: float = 0.0

    def __post_init__(self):
        if self.units is not None and (not isinstance(self.units, int) or self.units < 1):
            raise ConfigError(f"must be a whole number >= 1, or None (unknown), got {self.units!r}", "units")
        if not (isinstance(self.grace, (int, float)) and self.grace >= 0):
            raise ConfigError(f"must be >= 0 seconds, got {self.grace!r}", "grace")
        if self.late not in ("record", "merge"):
            raise ConfigError(f"must be 'record' or 'merge', got {self.late!r}", "late")
        if not (isinstance(self.lateness, (int, float)) and self.lateness >= 0):
            raise ConfigError(f"must be >= 0 seconds, got {self.lateness!r}", "lateness")
        if self.arrival not in ("hint", "observed"):
            raise ConfigError(f"must be 'hint' or 'observed', got {self.arrival!r}", "arrival")
        if self.backend not in BACKENDS:
            raise ConfigError(f"must be one of {', '.join(BACKENDS)}, got {self.backend!r}", "backend")
        if self.mode not in MODES:
            raise ConfigError(f"must be one of {', '.join(MODES)}, got {self.mode!r}", "mode")
        if not self.dispatch >= 0:
            raise ConfigError(f"must be >= 0 seconds, got {self.dispatch!r}", "dispatch")
        if not self.margin >= 0:
            raise ConfigError(f"must be >= 0 seconds, got {self.margin!r}", "margin")
        if not self.ahead >= 0:
            raise ConfigError(f"must be >= 0 seconds, got {self.ahead!r}", "ahead")
        if not isinstance(self.shares, dict) or not all(
                isinstance(q, str) and isinstance(v, (int, float)) and v >= 0 for q, v in self.shares.items()):
            raise ConfigError(f"must map query ids to deadlines in seconds >= 0 after the window's end, "
                              f"got {self.shares!r}", "shares")
        if self.shares and self.ahead:
            raise ConfigError("give shares (plan with the other queries' work) or ahead (a fixed reservation "
                              "after the window's end), not both", "ahead")
        if self.rate is not None and not self.rate > 0:
            raise ConfigError(f"must be > 0 units per second, got {self.rate!r}", "rate")
        scaled(cost_model_from_dict(self.cost_hint, "cost_hint"), self.cost_scale)  # checks cost_scale too
        final_agg_from_dict(self.final_agg_hint, "final_agg_hint")


# ----------------------------------------------------------------------- models


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
                entry = doc["batches"][0]
                counts.append(len(list_ready_units(entry["landing"], streams_of(entry))))
        if len(counts) == HISTORY_WINDOWS:
            break
    return counts


def expected_units(cfg: QueryConfig, window_len: float, now: float | None = None) -> tuple[int, str]:
    """Units expected in a window, and whence: ``units=``, else the median of earlier
    windows' observed counts, else the ``rate`` hint over the window."""
    if cfg.units is not None:
        return cfg.units, "units"
    counts = [c for c in observed_counts(cfg, now) if c > 0]
    if counts:
        return max(1, round(statistics.median(counts))), f"median of {len(counts)} earlier windows"
    if cfg.rate:
        return max(1, math.ceil(cfg.rate * window_len)), "rate hint"
    raise ConfigError("the number of units per window is unknown and there is no history yet: give units= "
                      "or a rate= hint (units per second)", "units")


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


# ------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class WindowPlan:
    """A plan for one window, on the clock, and the entries the DAG maps over."""

    query: str
    state_dir: str
    window_id: str
    window_start: float
    window_end: float
    deadline: float
    planned_at: float
    plan: Plan
    batches: list[dict]
    backfill: bool
    models: str
    #: The models planned with (``to_dict``), for the re-plans of a window whose total is unknown.
    cost_model: dict | None = None
    final_agg_model: dict | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["plan"] = self.plan.to_dict()
        return d


def plan_window(cfg: QueryConfig, window_start: float, window_end: float, deadline: float,
                now: float | None = None) -> WindowPlan:
    """Plan one window: Algorithm 1 (or MinBatches), or one batch if its input is complete already."""
    now = time.time() if now is None else now
    if window_end <= window_start:
        raise ConfigError(f"the window ends ({window_end}) before it starts ({window_start})", "window")
    if deadline < window_end:
        raise ConfigError(f"the deadline ({deadline}) is before the window end ({window_end})", "deadline_offset")
    length = window_end - window_start
    arrived = len(list_ready_units(cfg.landing, streams_of(cfg)))
    known = cfg.units is not None
    if known:
        backfill, estimate = now >= window_end and arrived >= cfg.units, ""
    else:  # a total that is not known: estimated, and checked at every batch (replan)
        backfill = now >= window_end + cfg.grace and arrived > 0
        total, source = (arrived, "the units present") if backfill else expected_units(cfg, length, now)
        cfg = replace(cfg, units=total)
        estimate = f"; {total} units expected ({source})"
    if cfg.ahead and not cfg.ahead < deadline - window_end:
        raise ConfigError(f"the queries ahead of this one ({cfg.ahead:g} s) leave it no time before its deadline "
                          f"({deadline - window_end:g} s after the window's end); give less, or a later deadline",
                          "ahead")
    busy, shared = IDLE, ""
    if cfg.shares and not backfill:
        # Joint planning: the queries due before this one, earliest deadline first, each in
        # the executor time the ones before it leave; this window gets what is left.
        own = (deadline - window_end, cfg.query)
        before = sorted((off, q) for q, off in cfg.shares.items() if q != cfg.query and (off, q) < own)
        # Whole batches: the cluster gate (cluster_turn) runs one batch at a time and takes
        # none back, so a batch planned across another query's turn would wait for a gap.
        busy = Busy(whole=True)
        for off, q in before:
            other, *_ = _plan(replace(cfg, query=q, shares={}), length, window_end - window_start + off, False, 0.0,
                              busy)
            busy = busy.plus(executed(other, busy))
        shared = (f"; planned after {', '.join(q for _o, q in before)} on the same cluster "
                  f"({sum(e - s for s, e in busy.intervals):.1f} s of theirs)" if before else "")
    # Queries due earlier have the cluster for ``ahead`` seconds after the window's end: this
    # window's work after its end gets what is left of the deadline.
    rel_deadline = deadline - window_start - cfg.ahead
    plan, models, cost, agg = _plan(cfg, length, rel_deadline, backfill, now - window_start, busy)
    models += shared + estimate
    batches = batch_entries(cfg, plan, window_start, window_end, deadline, backfill, known or backfill)
    if cfg.mode == "dynamic" and not backfill:
        batches = _dynamic_entries(cfg, batches)
    elif not known and not backfill and cfg.mode == "plan":
        batches = _checkpoint_entries(batches, window_start, window_end)
    return WindowPlan(query=cfg.query, state_dir=cfg.state_dir, window_id=window_id(window_start),
                      window_start=window_start,
                      window_end=window_end, deadline=deadline, planned_at=now, plan=plan, batches=batches,
                      backfill=backfill, models=models, cost_model=_json_model(cost),
                      final_agg_model=_json_model(agg))


def _json_model(model) -> dict | None:
    try:
        return model.to_dict()
    except ConfigError:  # a model built in code has no JSON form: no re-plans
        return None


#: Checkpoints mapped beside the plan's batches for a window whose total is unknown, evenly
#: through the window: each re-plans with what has arrived, and runs a batch only if the
#: rest would no longer fit the deadline (:func:`replan`).
CHECKPOINTS = 2


def _checkpoint_entries(entries: list[dict], window_start: float, window_end: float) -> list[dict]:
    """A window of unknown total: the plan's batches and :data:`CHECKPOINTS` checkpoints, in
    time order, then the last batch."""
    head, last = entries[:-1], entries[-1]
    length = window_end - window_start
    checks = [{**last, "last": False, "spare": True, "units": 0, "cumulative": last["cumulative"],
               "ready_ts": window_start + length * (j + 1) / (CHECKPOINTS + 1),
               "latest_start_ts": window_start + length * (j + 1) / (CHECKPOINTS + 1)} for j in range(CHECKPOINTS)]
    out = sorted(head + checks, key=lambda e: e["latest_start_ts"]) + [last]
    for i, e in enumerate(out, start=1):
        e["index"], e["of"] = i, len(out)
        what = "checkpoint" if e.get("spare") else f"{e['units']} units" if not e["last"] else "the rest"
        e["label"] = f"batch {i}/{len(out)} · {what} · ready {clock(e['ready_ts'])}"
    return out


def _plan(cfg: QueryConfig, length: float, rel_deadline: float, backfill: bool, rel_now: float,
          busy) -> tuple[Plan, str, CostModel, FinalAggCost]:
    """One query's plan on the window's axis (0 = its start), in the executor time ``busy``
    leaves; where its models came from; and the models."""
    cost, agg, models = cost_models(cfg)
    offsets = (observed_offsets(cfg) if cfg.arrival == "observed" else None) or arrival_offsets_hint(cfg, length)
    arrival = EmpiricalArrival(tuple(min(o, length) for o in offsets))
    if backfill:
        # Everything is there: one batch, ready now. The deadline (long past for an old
        # window) is the planner's business only to say whether it is met.
        plan = build_plan([cfg.units], EmpiricalArrival((rel_now,) * cfg.units), cost, agg, rel_now,
                          max(rel_deadline, rel_now))
        models += "; backfill: the window's input is complete, one batch"
    elif cfg.mode == "dynamic":
        plan = _minbatch_plan(cfg, arrival, cost, agg, length, rel_deadline, busy)
        models += f"; dynamic: MinBatches for rsf {cfg.rsf}"
    elif cfg.mode == "one_batch":
        plan = build_plan([cfg.units], arrival, cost, agg, length, rel_deadline, method="one_batch", busy=busy)
        models += "; one_batch: the whole window after its end"
    else:
        # A fused tail's task is started before the window's end (tail_lead), so the last
        # batch's fixed start (dispatch; on spark-submit its JVM too), which its cost
        # includes, can be over by then: to the planner the last batch is "ready" that much
        # earlier. The batch before it must then be done that long before the window's end,
        # for the final task to start in time.
        end = length + cfg.grace - tail_startup(cfg, cost)
        if end < length:  # units due after that are the last batch's anyway
            arrival = EmpiricalArrival(tuple(min(o, end) for o in arrival.times))
        # Function 1 gives the fewest batches for linear models only: other models get the
        # exact planner, in at most MAX_UNITS planning units. (It cannot plan whole batches
        # around the turns of queries due earlier: Function 1 does.)
        exact = not (isinstance(cost, LinearCost) and isinstance(agg, LinearFinalAgg) or busy.whole and busy.intervals)

        def planned(by: float) -> Plan:
            if exact:
                return plan_exact(arrival, cost, agg, end, by, busy, max_units=MAX_UNITS)
            return plan_batches(arrival, cost, agg, end, by, busy)

        # Cut the batches against the deadline less the margin, then state their latest
        # starts and feasibility against the true deadline: each batch keeps at least
        # the margin between its input being ready and its latest safe start.
        sized = planned(max(length, rel_deadline - cfg.margin))
        plan = build_plan(sized.sizes, arrival, cost, agg, end, rel_deadline, busy=busy, method=sized.method)
        if exact:
            plan.extra.update(sized.extra)
        if not plan.feasible:
            plan = planned(rel_deadline)
    return plan, models, cost, agg


def _minbatch_plan(cfg, arrival, cost, agg, length, rel_deadline, busy) -> Plan:
    """Section 4's dynamic mode: cut the window into MinBatches (at most ``max_batches``)."""
    mb = min_batch_size(cost, agg, cfg.units, cfg.rsf, cfg.c_max)
    size = max(mb.size, -(-cfg.units // cfg.max_batches))
    sizes = [size] * (cfg.units // size) + ([cfg.units % size] if cfg.units % size else [])
    plan = build_plan(sizes, arrival, cost, agg, length, rel_deadline, method="minbatch", busy=busy)
    plan.extra["min_batch"] = mb.to_dict()
    return plan


def _dynamic_entries(cfg: QueryConfig, entries: list[dict]) -> list[dict]:
    """Dynamic mode's mapping: one entry per MinBatch, then spares up to ``max_batches``.

    A mapped task's count is fixed when it expands, so the plan maps an upper bound. A
    MinBatch fires when its units have arrived or when its estimated input time (the
    arrival model's time for them, section 4.4) has come, and claims at most its size
    (``max_units``); a slow stream makes batches fire with fewer units, and the spares
    take the rest at the last batch's latest start. Spares that find nothing to claim skip.
    """
    out = []
    for e in entries[:-1]:
        out.append({**e, "latest_start_ts": min(e["ready_ts"], e["latest_start_ts"]), "max_units": e["units"]})
    last = entries[-1]
    spares = max(0, cfg.max_batches - len(entries))
    for j in range(spares + 1):
        index = len(entries) + j
        out.append({**last, "index": index, "last": j == spares, "spare": j > 0,
                    "label": f"batch {index}/{len(entries) + spares}{' (spare)' if j else ''} · "
                             f"{last['units'] if not j else 'rest'} units · ready {clock(last['ready_ts'])}"})
    for e in out:
        e["of"] = len(out)
    return out


def batch_entries(cfg: QueryConfig, plan: Plan, window_start: float, window_end: float, deadline: float,
                  backfill: bool, known: bool = True) -> list[dict]:
    """One dict per batch: what the sensor, the submit task and the priority strategies read.

    With ``cfg.ahead`` the last batch's entry has ``turn_ts``, the window's end plus ``ahead``:
    it does not fire before then, and its latest start is that much later than planned.
    """
    k = len(plan.batches)
    out = []
    remaining = plan.total_cost
    for b in plan.batches:
        ready, latest = window_start + b.ready, window_start + b.latest_start
        turn = {}
        if b.index == k and not backfill:
            # A fused tail is planned "ready" its start-up before the window's end (the task
            # and, on spark-submit, its JVM start during the lead); its input is not complete
            # before the window's end, and it must not fire on time alone before then.
            ready = max(ready, window_end + cfg.grace)
            if cfg.ahead:
                latest += cfg.ahead
                turn = {"turn_ts": window_end + cfg.ahead}
        out.append({
            "query": cfg.query, "window_id": window_id(window_start), "index": b.index, "of": k,
            "units": b.units, "cumulative": b.cumulative, "expected_total": cfg.units, "last": b.index == k,
            "ready_ts": ready, "latest_start_ts": latest, "cost": b.cost, "remaining_cost": remaining,
            "deadline_ts": deadline, "landing": cfg.landing, "state_dir": cfg.state_dir, "static": cfg.static,
            **({"streams": list(cfg.streams)} if cfg.streams else {}),
            **({"known_total": False, "grace": cfg.grace} if known is False else {}),
            "backend": cfg.backend, "backfill": backfill,
            **({"cost_scale": cfg.cost_scale} if cfg.cost_scale != 1 else {}),
            "label": f"batch {b.index}/{k} · {b.units} units · ready {clock(ready)}",
            **turn,
        })
        remaining -= b.cost
    return out


def format_window_plan(wp: WindowPlan) -> str:
    from airflow_iqp.cli.plan import format_plan

    head = (f"{wp.query} window {wp.window_id}: [{clock(wp.window_start)}, {clock(wp.window_end)}], "
            f"deadline {clock(wp.deadline)}; {wp.models}")
    return head + "\n" + format_plan(wp.plan, fmt_time=lambda t: clock(wp.window_start + t))


def store_plan(wp: WindowPlan) -> Path:
    """``STATE/<query>/<window>/plan.json``: what was planned, to compare with what ran."""
    return atomic_write_json(WindowState(wp.state_dir, wp.query, wp.window_id).root / "plan.json", wp.to_dict())


# -------------------------------------------------------------------- readiness


def batch_state(batch: dict) -> WindowState:
    """The state of the window a plan entry belongs to."""
    return WindowState(batch["state_dir"], batch["query"], batch["window_id"])


#: The last batch gives units due at the window's end this long to land before it fires
#: on time alone: firing a moment before them would leave them late for nothing.
LAST_UNIT_GRACE_S = 2.0

#: With a fused tail the final task starts this long before the window's end (default of
#: ``iqp_dag(tail_lead=...)``): enough for Airflow to start the task and for it to open its
#: Spark session, so that after the window's end only the work remains. Batches ready after
#: it starts run in it too (:func:`split_tail`).
TAIL_LEAD_S = 5.0
#: On spark-submit the fused tail's job also starts a JVM and its session before the window's
#: end: this much more lead. A trivial job's start is about 8 s here on an idle machine. In
#: the full benchmark (nine DAGs, two cores) one job took 21 s from its sensor firing to its
#: claim with 15 s of lead in all; with 30 s, more queries' JVMs started at once and one
#: took 47 s, and six deadlines of nine were missed instead of one: the lead is not free.
TAIL_LEAD_JVM_S = 10.0


def tail_lead(backend: str) -> float:
    """The default lead of a fused tail's task on ``backend`` (``iqp_dag(tail_lead=...)``)."""
    return TAIL_LEAD_S + (TAIL_LEAD_JVM_S if backend == "spark-submit" else 0.0)


#: How often the fused tail's task looks at the landing directory while it waits, and a
#: batch next in line at the gate looks for its turn. In try s7_c the first query's last
#: batch was claimed 0.13 s after the window's end at 0.05 s, and its result was due 0.71 s
#: after it.
TAIL_POLL_S = 0.02
#: A batch with others ahead of it at the gate looks this many times less often: only the
#: one next in line needs to be quick, and eight tasks polling 50 times a second would take
#: a good part of a core from the batch that runs.
BEHIND_POLL_FACTOR = 10


def fire_at(batch: dict) -> float:
    """When a batch fires on time alone: its latest safe start, and for the last batch not
    before its planned ready time (the window's last arrival) plus :data:`LAST_UNIT_GRACE_S`.
    The last batch of a window whose total is unknown fires at its ready time: the window's
    end plus ``grace``."""
    batch = effective(batch)
    if batch.get("late") or (batch["last"] and batch.get("known_total") is False):
        return max(batch["ready_ts"], batch.get("turn_ts", 0.0))
    if batch["last"]:
        return max(batch["latest_start_ts"], batch["ready_ts"] + LAST_UNIT_GRACE_S, batch.get("turn_ts", 0.0))
    return batch["latest_start_ts"]


def batch_ready(batch: dict, now: float, arrived: int | None = None) -> str | None:
    """Why the batch may start now, or None: the paper's dynamic rule, whichever comes first.

    ``"units"``: its planned units have arrived (for the last batch, all of the window's)
    and the batch before it has claimed; ``"time"``: its latest safe start has come
    (:func:`fire_at`). Never before the batch's turn on a shared cluster (``turn_ts``,
    see ``QueryConfig.ahead``).
    """
    batch = effective(batch)
    if now < batch.get("turn_ts", 0.0):
        return None
    if batch.get("late"):  # after its time, and once the window's first revision is written
        written = batch_state(batch).result_manifest.exists()
        due = now >= fire_at(batch) and (written or now >= batch["deadline_ts"] + batch.get("lateness", 0.0))
        return "time" if due else None
    if batch.get("skip"):  # the re-plan gave it nothing: it passes once the one before it claimed
        return "skip" if _previous_decided(batch) else ("time" if now >= fire_at(batch) else None)
    if now >= fire_at(batch):
        return "time"
    if batch.get("spare") or batch.get("late") or (batch["last"] and batch.get("known_total") is False):
        return None  # a checkpoint, a late batch, and the last batch of an unknown total fire on time
    needed = batch["expected_total"] if batch["last"] else batch["cumulative"]
    if arrived is None:
        # Nine final tasks polling 20 times a second near the window's end, each listing 300
        # units (10.5 ms measured), would need ~1.9 of the two cores beside the Spark
        # server: one directory listing (0.2 ms) first.
        if count_landed(batch["landing"]) < needed:
            return None
        listed = list_ready_units(batch["landing"], streams_of(batch))
        note_seen(batch_state(batch), [u.name for u in listed], now)
        arrived = len(listed)
    if arrived < needed:
        return None
    if not _previous_decided(batch):
        return None
    return "units"


def _previous_decided(batch: dict) -> bool:
    """The batch before this one has claimed (and, for an unknown total, re-planned after it)."""
    if batch["index"] <= 1:
        return True
    ws = batch_state(batch)
    previous = ws.claim_path(batch["index"] - 1)
    if not previous.exists():
        return False
    if batch.get("known_total") is not False or not read_json(previous).get("units"):
        return True
    return _replan(ws).get("after", 0) >= batch["index"] - 1


# ------------------------------------------------------------ unknown totals: re-plans

REPLAN = "replan.json"
#: The share of a window after which the rate seen so far estimates its total.
EXTRAPOLATE_AFTER = 0.1


def _replan(ws: WindowState) -> dict:
    path = ws.root / REPLAN
    return read_json(path) if path.is_file() else {}


def effective(batch: dict) -> dict:
    """A plan entry as the newest re-plan of its window has it (an unknown total only)."""
    if batch.get("known_total") is not False:
        return batch
    override = _replan(batch_state(batch)).get("entries", {}).get(str(batch["index"]))
    return {**batch, **override} if override else batch


def replan(batch: dict, claimed: int, arrived: int, now: float) -> tuple[bool, dict | None]:
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
    ws = batch_state(batch)
    doc = read_json(ws.root / "plan.json")
    if not doc.get("cost_model") or not doc.get("final_agg_model"):
        return arrived > 0 and not batch.get("spare"), None
    cost, agg = cost_model_from_dict(doc["cost_model"]), final_agg_from_dict(doc["final_agg_model"])
    start, end = doc["window_start"], doc["window_end"]
    rel_now, rel_end = now - start, end - start
    ready_end, rel_deadline = rel_end + batch.get("grace", 0.0), doc["deadline"] - start
    seen = claimed + arrived
    if rel_now >= rel_end:
        total = seen
    elif rel_now < EXTRAPOLATE_AFTER * rel_end:  # too early to tell a rate: the estimate stands
        total = max(seen, batch["expected_total"])
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
        return plan_batches(arrival, cost, agg, w_end, rel_deadline).sizes, (arrival, w_end)

    sizes, _ = cut(rel_now, arrived, total - seen)
    run_now = arrived > 0 and (not batch.get("spare") or len(sizes) >= 2)
    if run_now:
        sizes, basis = cut(rel_now + cost.cost(arrived), 0, total - seen)
        base = seen
    else:
        sizes, basis = cut(rel_now, arrived, total - seen)
        base = claimed
    last = max(e["index"] for e in doc["batches"])
    slots = list(range(batch["index"] + 1, last))  # the entries before the last
    if len(sizes) - 1 > len(slots):  # more batches than entries: the earliest merge
        cut_at = len(sizes) - len(slots)
        sizes = [sum(sizes[:cut_at])] + sizes[cut_at:]
    plan = build_plan(sizes, basis[0], cost, agg, basis[1], rel_deadline) if sizes else None
    checkpoints = {e["index"] for e in doc["batches"] if e.get("spare")}
    entries, cumulative = {}, base
    for j, idx in enumerate(slots):
        if plan is not None and j < len(sizes) - 1:
            b = plan.batches[j]
            cumulative += b.units
            entries[str(idx)] = {"skip": False, "spare": False, "units": b.units, "cumulative": cumulative,
                                 "ready_ts": start + b.ready, "latest_start_ts": start + b.latest_start}
        elif idx in checkpoints:  # it looks again when its time comes
            entries[str(idx)] = {"skip": False, "spare": True, "units": 0, "cumulative": cumulative}
        else:
            entries[str(idx)] = {"skip": True, "units": 0, "cumulative": cumulative}
    entries[str(last)] = {"expected_total": total, "units": sizes[-1] if sizes else 0,
                          **({"latest_start_ts": start + plan.batches[-1].latest_start} if plan else {})}
    out = {"after": batch["index"], "at": now, "expected_total": total, "ran": run_now,
           "feasible": plan.feasible if plan else True, "sizes": sizes, "entries": entries}
    atomic_write_json(ws.root / REPLAN, out)
    return run_now, out


def tail_started(tail: dict, now: float) -> str | None:
    """``"lead"`` once a fused tail's final task is due to start (its ``start_ts``,
    :func:`split_tail`), else None: what the wait before that task fires on."""
    return "lead" if now >= tail["start_ts"] else None


def split_tail(entries: list[dict], lead: float) -> tuple[list[dict], dict | None]:
    """(the batches mapped as tasks, the fused tail) of a plan whose final task runs its last batch.

    The final task starts ``lead`` seconds before the last batch's input is complete (its
    ready time, the window's end): the tail is the last entry with that time (``start_ts``)
    and the batches ready after it (``before``), which the final task runs too, in order, on
    its own open session: past that point no batch waits for a task to start.
    """
    if not entries:
        return [], None
    *earlier, last = entries
    start = last["ready_ts"] - lead
    k = len(earlier)
    while k and earlier[k - 1]["ready_ts"] >= start:
        k -= 1
    return earlier[:k], {**last, "start_ts": start, "before": earlier[k:]}


def fold_into_tail(entry: dict, tail: dict, now: float) -> dict | None:
    """A batch of a fused tail's ``before`` that has not claimed by the time the last batch
    may claim (the window's end and grace are past: an earlier batch ran late) leaves its
    units to the last batch, which runs them in the same job as the merge. Run on its own it
    would add a job, and a partial written and read again, after the window's end, where the
    plan had it done before. Returns its empty claim, or None when it runs as planned (an
    unknown total, which re-plans as each batch claims, always does)."""
    if entry.get("known_total") is False or now < tail["ready_ts"]:
        return None
    ws = batch_state(entry)
    if ws.claim_path(entry["index"]).exists():  # a retry: it claimed in the earlier attempt
        return None
    return claim_units(ws, entry["index"], [], [])


def wait_and_claim(batch: dict, poll: float = TAIL_POLL_S, sleep: Any = time.sleep) -> dict:
    """In the final task of a fused tail: wait in process until a batch may start, then claim for it.

    The task started before the batch's input is complete, so what is left to wait is
    short; it polls the landing directory every ``poll`` seconds (a directory listing),
    and at most once a second until a second before the batch's planned ready time (a
    task started a minute early does not list the directory 1200 times). The wait ends at
    the batch's fire time at the latest, when :func:`batch_ready` says ``"time"``. Returns
    the claim manifest (a retry re-reads the same claim).
    """
    if not batch_state(batch).claim_path(batch["index"]).exists():
        while batch_ready(batch, time.time()) is None:
            sleep(max(poll, min(1.0, batch["ready_ts"] - 1.0 - time.time())))
    return claim_batch(batch)


#: A planned batch of another query that has not claimed this long after its fire time is
#: not coming (its DAG failed or was paused): it no longer holds later-deadline batches back.
UPCOMING_GRACE_S = 5.0


def upcoming(batch: dict) -> list[dict]:
    """The planned batches of the other queries of the same window (their ``plan.json`` in
    the state directory) due before ``batch`` (earliest deadline first, as the gate orders)."""
    key = (batch["deadline_ts"], batch["query"])
    out = []
    for path in Path(batch["state_dir"]).glob(f"*/{batch['window_id']}/plan.json"):
        if path.parent.parent.name == batch["query"]:
            continue
        try:
            entries = read_json(path).get("batches", [])
        except (OSError, ValueError):
            continue  # being written
        out += [e for e in entries if (e["deadline_ts"], e["query"]) < key and not e.get("backfill")]
    return out


def expected(entry: dict, planned: float) -> float:
    """A plan entry's planned seconds as expected: without its plan's ``cost_scale``, the
    pessimism the plan leaves room with, which a decision taken now need not repeat."""
    return planned / entry.get("cost_scale", 1.0)


def _coming(entries: list[dict], now: float, cost: float) -> list[dict]:
    """Those of ``entries`` (other queries' plan entries) not yet claimed that a batch of
    ``cost`` seconds started now would make late: ready before it is done, and their query,
    run from then on as planned (each batch no sooner than its input, then the merge),
    would then finish after its deadline, and later than without this batch. Not one long
    overdue (:data:`UPCOMING_GRACE_S`). Costs are the expected ones (:func:`expected`)."""
    done = now + cost
    out = []
    for e in entries:
        if e["ready_ts"] > done or now > fire_at(e) + UPCOMING_GRACE_S:
            continue
        if batch_state(e).claim_path(e["index"]).exists():
            continue
        rest = sorted((f for f in entries if f["query"] == e["query"] and f["index"] >= e["index"]),
                      key=lambda f: f["index"])

        def finish(start: float) -> float:
            t = start
            for f in rest:
                t = max(t, f["ready_ts"]) + expected(f, f["cost"])
            return t + expected(rest[-1], rest[-1]["remaining_cost"] - rest[-1]["cost"])  # the merge

        # Late because of this batch: not when its input alone makes it late.
        if finish(done) > max(e["deadline_ts"], finish(now)):
            out.append(e)
    return out


@contextmanager
def cluster_turn(batch: dict, slots: int, poll: float = TAIL_POLL_S, sleep: Any = time.sleep, *,
                 planned: float | None = None):
    """Run the enclosed Spark work when the batch's turn comes: at most ``slots`` batches at
    once across the queries of one state directory, the earliest deadline first (EDF).

    For the batches the final tasks of fused tails run (:func:`split_tail`), the last ones
    all ready at their windows' ends: run together they share the cluster and the first
    deadline is missed; the paper's executor runs one batch at a time. ``slots <= 0`` is
    no gate. Each waiting or running batch holds an ``flock`` on its own file under
    ``STATE/_turns/``; a killed task's lock goes with its process, so its file is stale and
    ignored. A batch also leaves the cluster to a batch of a query due earlier (same window,
    :func:`upcoming`) that is not claimed yet but will be ready before this one's planned
    cost is over, and whose query would then miss its deadline (:func:`_coming`): the gate
    takes no batch back once started, and the one due earlier would wait behind it
    (session 5: a query due at 100 s claimed 30 ms before the one due at 14.7 s, took the
    turn, and ran 14 s). Ready alone is not enough: with nine queries one batch or another
    due earlier was always ready within the 7 s a q10 batch costs, and that batch waited
    63 s, past the end; nor is its latest start, which in a tight plan is its ready time,
    and held the cluster idle for 3.3 s before the window's end. ``planned``: the planned
    seconds the enclosed work holds the cluster (default the batch's cost; a fused tail's
    last batch holds it through the merge too, its ``remaining_cost``).
    """
    if slots <= 0:
        yield
        return
    import fcntl

    root = Path(batch["state_dir"]) / "_turns"
    waiting, running = root / "waiting", root / "running"
    waiting.mkdir(parents=True, exist_ok=True)
    running.mkdir(parents=True, exist_ok=True)
    name = f"{batch['deadline_ts']:020.6f}-{batch['query']}-{batch['window_id']}-{batch['index']:04d}"
    earlier = upcoming(batch)

    def hold(path: Path) -> int:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def live(path: Path) -> bool:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        path.unlink(missing_ok=True)  # nobody holds it: left by a killed task
        return False

    mine = hold(waiting / name)
    run_fd = None
    try:
        while run_fd is None:
            soon = _coming(earlier, time.time(), expected(batch, batch["cost"] if planned is None else planned))
            lock = hold(root / ".lock")
            try:
                ahead = [p for p in sorted(waiting.iterdir()) if p.name < name and live(p)]
                busy = [p for p in running.iterdir() if p.name != name and live(p)]
                if not ahead and not soon and len(busy) < slots:
                    run_fd = hold(running / name)
                    (waiting / name).unlink(missing_ok=True)
            finally:
                os.close(lock)
            if run_fd is None:
                sleep(poll * (BEHIND_POLL_FACTOR if ahead else 1))
        yield
    finally:
        if run_fd is not None:
            (running / name).unlink(missing_ok=True)
            os.close(run_fd)
        else:  # once it had its turn, waiting/<name> is no longer this task's
            (waiting / name).unlink(missing_ok=True)
        os.close(mine)


def claim_batch(batch: dict, now: float | None = None) -> dict:
    """Claim every arrived, unclaimed unit for this batch (once: a retry re-reads the claim).

    A MinBatch of dynamic mode claims at most its size (``max_units``).
    """
    batch = effective(batch)
    ws = batch_state(batch)
    if ws.claim_path(batch["index"]).exists():
        return read_json(ws.claim_path(batch["index"]))
    if batch.get("skip"):
        return claim_units(ws, batch["index"], [], [])
    taken = {u for m in read_claims(ws).values() for u in m.get("units", [])}
    streams = streams_of(batch)
    listed = list_ready_units(batch["landing"], streams)
    seen = note_seen(ws, [u.name for u in listed], now)
    units = [p for p in listed if p.name not in taken]
    if batch.get("max_units") is not None:  # a MinBatch takes its size, oldest units first
        units = units[: batch["max_units"]]
    if batch.get("known_total") is False and not batch["last"]:
        run_now, _doc = replan(batch, len(taken), len(units), time.time() if now is None else now)
        if not run_now:
            units = []
    return claim_units(ws, batch["index"], [p.name for p in units], files_of(units, streams), arrived=seen)


# -------------------------------------------------------------------- late data


def late_entry(cfg: QueryConfig, window_start: float, window_end: float) -> dict | None:
    """With ``late="merge"``: the late batch of the window before this one, for this run to
    merge into its result, or None (no earlier window planned, or late data only recorded).

    It fires ``lateness`` seconds after that window's end plus ``grace``, once that window's
    result (its first revision) is written, or at its deadline plus ``lateness`` if none ever
    is, and claims every unit of it that no batch has claimed; :func:`airflow_iqp.spark.final_job.execute_late`
    merges them as a new revision. It runs in the next window's run, so the earlier run
    is over by its deadline and its deadline alert says only whether the first revision
    was on time.
    """
    if cfg.late != "merge":
        return None
    previous = WindowState(cfg.state_dir, cfg.query, window_id(window_start - (window_end - window_start)))
    path = previous.root / "plan.json"
    if not path.is_file():
        return None
    doc = read_json(path)
    if not doc["batches"] or doc.get("backfill"):
        return None
    last = max(doc["batches"], key=lambda e: e["index"])
    at = doc["window_end"] + last.get("grace", cfg.grace) + cfg.lateness
    entry = {k: v for k, v in last.items() if k not in ("known_total", "spare", "skip", "turn_ts", "max_units")}
    return {**entry, "index": last["index"] + 1, "of": last["index"] + 1, "last": True, "late": True,
            "ready_ts": at, "latest_start_ts": at, "window_start_ts": doc["window_start"], "lateness": cfg.lateness,
            "label": f"late data of window {previous.window_id} · ready {clock(at)}"}


def late_units(batch_or_cfg: dict, window_start: float) -> dict:
    """Units in the landing directory that no batch claimed: late data, with arrival times."""
    ws = WindowState(batch_or_cfg["state_dir"], batch_or_cfg["query"], window_id(window_start))
    taken = {u for m in read_claims(ws).values() for u in m.get("units", [])}
    streams = streams_of(batch_or_cfg)
    late = [p for p in list_ready_units(batch_or_cfg["landing"], streams) if p.name not in taken]
    seen = note_seen(ws, [p.name for p in late])
    return {"units": [p.name for p in late], "files": files_of(late, streams),
            "arrival_times": [seen[p.name] for p in late]}


def record_arrivals(batch_or_cfg: dict, window_start: float) -> Path:
    """Observed arrival offsets of the window's units, for the next window's plan."""
    ws = WindowState(batch_or_cfg["state_dir"], batch_or_cfg["query"], window_id(window_start))
    units = list_ready_units(batch_or_cfg["landing"], streams_of(batch_or_cfg))
    seen = note_seen(ws, [p.name for p in units])
    offsets = sorted(max(0.0, seen[p.name] - window_start) for p in units)
    return atomic_write_json(ws.root / "arrivals.json", {"offsets": offsets, "units": [p.name for p in units]})


def record_task_cpu(window_root: str | os.PathLike, ti: Any, phase: str = "run") -> dict:
    """Record this task process's CPU seconds so far in ``<window>/cpu/``; return the record.

    ``self`` is the task process itself (Airflow's task runner, the DAG file's imports, a
    Spark Connect client); ``children`` every child it has reaped: for a spark-submit task,
    the whole spark-submit process tree (JVM, Python driver, Python workers). One file per
    task instance, try and phase (a deferred sensor runs in two processes).
    """
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rec = {"task_id": ti.task_id, "map_index": getattr(ti, "map_index", -1), "try_number": ti.try_number,
           "phase": phase, "self_cpu_seconds": me.ru_utime + me.ru_stime,
           "children_cpu_seconds": kids.ru_utime + kids.ru_stime, "recorded_at": time.time()}
    name = f"{rec['task_id']}.{rec['map_index']}.{rec['try_number']}.{phase}.json"
    atomic_write_json(Path(window_root) / "cpu" / name, rec)
    return rec


def window_task_cpu(window_root: str | os.PathLike) -> dict:
    """The CPU the window's task processes recorded (:func:`record_task_cpu`), summed."""
    recs = [read_json(p) for p in sorted((Path(window_root) / "cpu").glob("*.json"))]
    own = sum(r["self_cpu_seconds"] for r in recs)
    kids = sum(r["children_cpu_seconds"] for r in recs)
    return {"tasks": len(recs), "self_cpu_seconds": own, "children_cpu_seconds": kids, "cpu_seconds": own + kids}


def streams_of(entry_or_cfg: Any) -> tuple[Stream, ...]:
    """The streams of a plan entry, a late-data record's source or a QueryConfig (TPC-H by default)."""
    found = entry_or_cfg.get("streams") if isinstance(entry_or_cfg, dict) else entry_or_cfg.streams
    return tuple(Stream.from_dict(s) for s in found) if found else TPCH


def as_batch(value: Any) -> dict:
    if not isinstance(value, dict) or "index" not in value or "landing" not in value:
        raise ConfigError(f"expected one entry of the plan task's output, got {value!r}", "batch")
    return value
