"""The models a window is planned with: arrivals (hinted or observed), expected units, costs."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace

from airflow_iqp.backends.base import Backend
from airflow_iqp.planning.models import (
    CostModel, FinalAggCost, LinearCost, LinearFinalAgg, PiecewiseLinearFinalAgg, cost_model_from_dict,
    final_agg_from_dict, fit_piecewise_linear, plus_fixed, scaled,
)
from airflow_iqp.planning.margins import Margins, learn_margins
from airflow_iqp.landing import list_units
from airflow_iqp.store import open_store, query_key
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import QueryConfig


def arrival_offsets_hint(cfg: QueryConfig, window_len: float) -> list[float]:
    """Expected arrival offsets (s after the window start) of the window's units."""
    from airflow_iqp.inputs.profiles import arrival_offsets

    rate = cfg.rate or cfg.units / window_len
    return arrival_offsets(cfg.profile, rate, cfg.units, window=window_len)


def observed_offsets(cfg: QueryConfig) -> list[float] | None:
    """The most recent earlier window's observed arrival offsets, if any were recorded."""
    query = open_store(cfg.state_dir).query(cfg.query)
    for window in reversed(query.windows()):
        arrivals = query.window(window).doc("arrivals")
        if arrivals is not None:
            offsets = arrivals.get("offsets") or []
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
    query = open_store(cfg.state_dir).query(cfg.query)
    counts = []
    for window in reversed(query.windows()):
        ws = query.window(window)
        arrivals = ws.doc("arrivals")
        if arrivals is not None:
            counts.append(len(arrivals.get("units") or []))
        elif before is not None and (doc := ws.doc("plan")) is not None:
            if doc["batches"] and doc["window_end"] <= before and not doc.get("backfill"):
                entry = Batch.from_dict(doc["batches"][0])
                counts.append(len(list_units(entry.landing, entry.streams)))
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


#: How many of a query's newest windows the learned margins read its batches from.
MARGIN_WINDOWS = 10


def margins(cfg: QueryConfig) -> Margins:
    """The margins a window is planned with (:mod:`airflow_iqp.planning.margins`): ``cost_scale``
    and ``dispatch`` where given; else learned from the batches of this query's last
    :data:`MARGIN_WINDOWS` windows on its backend, and of the other queries registered on
    its cluster (``cfg.cluster``) on that backend, each measured from claim to written
    partial against what its query's cost model (before margins) gives for its units.
    Before there are enough such batches: a scale of 1 and the backend's
    :attr:`~airflow_iqp.backends.base.Backend.first_dispatch`, which (as a given one) is
    added only to the models that leave Airflow's part out."""
    if cfg.cost_scale is not None and cfg.dispatch is not None:
        return Margins(scale=cfg.cost_scale, dispatch=cfg.dispatch)
    samples: list[tuple[float, float]] = []
    for c in [cfg, *(other for _doc, other in registered_members(cfg).values())]:
        model, _source, leaves_out = _batch_model(c)
        # A given dispatch is added (by cost_models) to the models that leave it out: what is
        # left to learn is the scale over the rest.
        given = cfg.dispatch if cfg.dispatch is not None and leaves_out else 0.0
        records = [r for r in open_store(c.state_dir).cost_history(c.query, "batch", c.backend)
                   if r.get(SPAN) is not None and r["units"] >= 1 and r.get("window")]
        newest = set(sorted({r["window"] for r in records})[-MARGIN_WINDOWS:])
        samples += [(model.cost(r["units"]), r[SPAN] - given) for r in records if r["window"] in newest]
    m = learn_margins(samples, scale=cfg.cost_scale, dispatch=None if cfg.dispatch is None else 0.0,
                      default=Margins(dispatch=Backend.named(cfg.backend).first_dispatch))
    return m if cfg.dispatch is None else replace(m, dispatch=cfg.dispatch)


#: A fused tail starts at least this many times the longest start-up of its query's tails in
#: its last :data:`MARGIN_WINDOWS` windows before the window's end.
TAIL_START_MARGIN = 1.5


def tail_start_lead(cfg: QueryConfig, default: float) -> float:
    """Seconds before the window's end that a fused tail's task starts when the DAG gives no
    ``tail_lead``: ``default`` (the backend's), or, if more, :data:`TAIL_START_MARGIN` times
    the longest start-up of this query's tails on its backend in its last
    :data:`MARGIN_WINDOWS` windows. A start-up, from the tail's planned start to its session
    ready (:meth:`~airflow_iqp.store.base.StateStore.record_tail_start`), is Airflow resuming
    the sensor ``tail_wait``, starting the final task and the task opening its session:
    longer on a slower or busier deployment than the default allows for."""
    records = [r for r in open_store(cfg.state_dir).cost_history(cfg.query, "tail_start", cfg.backend)
               if r.get("window")]
    newest = sorted(records, key=lambda r: r["window"])[-MARGIN_WINDOWS:]
    return max([default, *(TAIL_START_MARGIN * r["seconds"] for r in newest)])


#: A query on a cluster's registry counts while its newest registration is from a window at
#: most this many windows before the newest one planned (``window_start``, else the newest
#: registration's): a query whose plan task has not run since (its DAG paused or removed) is
#: taken as gone.
REGISTRY_WINDOWS = 2


def registered_members(cfg: QueryConfig, window_start: float | None = None) -> dict[str, tuple[dict, QueryConfig]]:
    """The other queries registered on ``cfg``'s cluster on its backend, and not gone: query id
    -> (its registration, its settings as registered, on no cluster of their own)."""
    if not cfg.cluster:
        return {}
    docs = {q: d for q, d in open_store(cfg.state_dir).cluster(cfg.cluster).members().items()
            if q != query_key(cfg.query) and d.get("backend") == cfg.backend and d.get("config")}
    if window_start is None:
        window_start = max((d["window_start"] for d in docs.values()), default=0.0)
    return {q: (d, QueryConfig.from_dict({**d["config"], "shares": {}, "ahead": 0.0, "cluster": None}))
            for q, d in docs.items() if d["window_start"] >= window_start - REGISTRY_WINDOWS * d["window_length"]}


def with_margins(cfg: QueryConfig, m: Margins | None = None) -> tuple[QueryConfig, str]:
    """``cfg`` with its margins (``m``, else :func:`margins`) in place of the ones left to
    learn, and what they are, for the plan's log (empty when both were given, or none were
    learned)."""
    if cfg.cost_scale is not None and cfg.dispatch is not None:
        return cfg, ""
    m = margins(cfg) if m is None else m
    return replace(cfg, cost_scale=m.scale, dispatch=m.dispatch), f"; margins: {m.describe()}" if m.samples else ""


def cost_models(cfg: QueryConfig, m: Margins | None = None) -> tuple[CostModel, FinalAggCost, str]:
    """The cost models to plan with, and where they came from (``m``: the margins, when the
    caller has them already).

    In order of preference: the newest calibrated fit of this query and backend
    (``airflow-iqp calibrate``: end-to-end seconds of its jobs); a fit to the cost history,
    what this query's batches and merges took on this backend from claim to written output
    (:mod:`airflow_iqp.spark.jobmetrics`); the configured hints; the backend's built-in
    default (:attr:`~airflow_iqp.backends.base.Backend.default_cost`). Then the margins
    (:func:`margins`): every cost times the scale; a given ``dispatch`` is added only to
    the models that leave Airflow's part out, a calibrated fit and a hint, and a learned
    one, measured against whichever model is in use, to every batch.
    """
    if m is None and (cfg.cost_scale is None or cfg.dispatch is None):
        m = margins(cfg)
    # A learned dispatch is measured against whichever model is in use; a given one, and the
    # default before history, count only Airflow's part.
    learned = cfg.dispatch is None and m is not None and m.samples > 0
    cfg, margin_source = with_margins(cfg, m)
    cost, cost_source, cost_dispatch = _batch_model(cfg)
    agg, agg_source, agg_dispatch = _merge_model(cfg)
    source = cost_source if cost_source == agg_source else f"{cost_source}; {agg_source}"
    # The final task runs even after a single batch, so one batch pays a merge too.
    agg = replace(agg, merge_single=True)
    if cfg.cost_scale != 1:
        cost, agg = scaled(cost, cfg.cost_scale), scaled(agg, cfg.cost_scale)
        if not margin_source:
            source += f"; costs x {cfg.cost_scale:g} (cost_scale)"
    if cfg.fuse_tail and Backend.named(cfg.backend).job_startup:
        # The merge runs in the last batch's job: it does not start a JVM of its own.
        # (On Spark Connect both run on one open session either way: nothing is shared.)
        agg = replace(agg, shared_startup=min(_overhead(cost), agg.cost(1)))
        source += f"; fused tail: the merge shares the last batch's start-up ({agg.shared_startup:.1f} s)"
    # Every batch is a task Airflow starts after its input is claimed, and so is the final
    # task, unless it runs the last batch (a fused tail), whose start the batch already paid.
    if cfg.dispatch and (cost_dispatch or learned):
        cost = plus_fixed(cost, cfg.dispatch)
        if not margin_source:
            source += f"; {cfg.dispatch:g} s of task dispatch per batch"
    if cfg.dispatch and agg_dispatch and not cfg.fuse_tail:
        agg = plus_fixed(agg, cfg.dispatch)
    return cost, agg, source + margin_source


def own_models(cfg: QueryConfig) -> tuple[CostModel, FinalAggCost]:
    """The query's batch and merge models before margins and dispatch (as :func:`cost_models`
    finds them: a calibrated fit, the cost history, a hint, the built-in default)."""
    return _batch_model(cfg)[0], _merge_model(cfg)[0]


def tail_startup(cfg: QueryConfig, cost: CostModel) -> float:
    """Seconds of a fused tail's fixed start that its task pays during its lead, before the
    last batch's input is complete: Airflow starting the task (``dispatch``) and, on a
    backend whose jobs start their own JVM, the job's JVM and session (the batch cost's
    start-up, ``cost`` as :func:`cost_models` gives it, dispatch included). Zero without a
    fused tail."""
    if not cfg.fuse_tail:
        return 0.0
    return _overhead(cost) if Backend.named(cfg.backend).job_startup else with_margins(cfg)[0].dispatch


#: A cost-history record's seconds from claim to written output
#: (:mod:`airflow_iqp.spark.jobmetrics`): what the plan's costs stand for.
SPAN = "end_to_end_seconds"


def _calibrated(cfg: QueryConfig) -> dict | None:
    fits = open_store(cfg.state_dir).cost_history(cfg.query, "fit", cfg.backend)
    return fits[-1] if fits else None


def _calibrated_source(cfg: QueryConfig, fit: dict) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(fit["recorded_at"]))
    return f"cost and final aggregation calibrated for {cfg.backend} at {when} UTC"


def _batch_model(cfg: QueryConfig) -> tuple[CostModel, str, bool]:
    """The batch cost model, where it came from, and whether it leaves out ``dispatch``."""
    fit = _calibrated(cfg)
    if fit:
        return cost_model_from_dict(fit["cost"], "cost_history.fit.cost"), _calibrated_source(cfg, fit), True
    samples = _spans(cfg, "batch", "units")
    if len({x for x, _y in samples}) >= 2:
        return (fit_piecewise_linear(samples, max_pieces=4),
                f"cost fitted to {len(samples)} batches measured from claim to partial", False)
    hint = cfg.cost_hint is not None
    prior = cost_model_from_dict(cfg.cost_hint if hint else Backend.named(cfg.backend).default_cost, "cost_hint")
    whose = "the configured hint" if hint else f"the built-in {cfg.backend} default"
    if samples:
        return (_through(prior, samples), f"cost from {len(samples)} batches of {samples[0][0]} units measured "
                                          f"from claim to partial, per unit as {whose}", False)
    return prior, f"cost from {whose}", hint


def _merge_model(cfg: QueryConfig) -> tuple[FinalAggCost, str, bool]:
    """The final aggregation's model, where it came from, and whether it leaves out ``dispatch``."""
    fit = _calibrated(cfg)
    if fit:
        return (final_agg_from_dict(fit["final_agg"], "cost_history.fit.final_agg"), _calibrated_source(cfg, fit),
                True)
    samples = _spans(cfg, "final", "batches")
    if len({x for x, _y in samples}) >= 2:
        return (PiecewiseLinearFinalAgg(fit_piecewise_linear(samples, max_pieces=3).points),
                f"final aggregation fitted to {len(samples)} merges measured from the last batch's end", False)
    hint = cfg.final_agg_hint is not None
    prior = final_agg_from_dict(cfg.final_agg_hint if hint else Backend.named(cfg.backend).default_final_agg,
                                "final_agg_hint")
    whose = "the configured hint" if hint else f"the built-in {cfg.backend} default"
    if samples:
        return (_through(prior, samples), f"final aggregation from {len(samples)} merges of {samples[0][0]} "
                                          f"partials measured from the last batch's end, per partial as {whose}",
                False)
    return prior, f"final aggregation from {whose}", hint


def _spans(cfg: QueryConfig, kind: str, size: str) -> list[tuple[int, float]]:
    """(size, seconds from claim to written output) of this query's measured batches or
    merges on its backend. Records without that span (a calibration's, a batch retried,
    one run in a fused tail's open session) measure something else and are left out."""
    return [(r[size], r[SPAN]) for r in open_store(cfg.state_dir).cost_history(cfg.query, kind, cfg.backend)
            if r.get(SPAN) is not None and r[size] >= 1]


def _through(model, samples: list[tuple[int, float]]):
    """``model`` moved by a fixed number of seconds to pass through the mean of ``samples``,
    all at one size: one measured size shows the start-up, not the cost per unit, which
    stays the model's. Where that would need a negative start-up, the line from zero
    through the mean instead."""
    x, y = samples[0][0], statistics.fmean(s for _x, s in samples)
    delta = y - (replace(model, merge_single=True) if hasattr(model, "merge_single") else model).cost(x)
    if isinstance(model, LinearCost):
        fixed = model.per_batch + delta
        return replace(model, per_batch=fixed) if fixed >= 0 else LinearCost(per_unit=y / x)
    if isinstance(model, LinearFinalAgg):
        fixed = model.base + delta
        return replace(model, base=fixed) if fixed >= 0 else LinearFinalAgg(per_batch=y / x)
    return replace(model, points=tuple((px, max(0.0, py + delta)) for px, py in model.points))

