"""Plan one window: Algorithm 1, the exact planner, MinBatches or one batch, as plan entries on the clock."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import NamedTuple

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.minbatch import after_end_cost, min_batch_size
from airflow_iqp.planning.models import Busy, CostModel, EmpiricalArrival, FinalAggCost, LinearCost, LinearFinalAgg
from airflow_iqp.planning.planner import IDLE, Plan, executed
from airflow_iqp.planning.report import format_plan
from airflow_iqp.planning.spec import PlanSpec
from airflow_iqp.landing import list_units
from airflow_iqp.store import open_store, query_key
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import QueryConfig, clock, window_id
from airflow_iqp.window.costs import (
    arrival_offsets_hint, cost_models, expected_units, margins, observed_offsets, registered_members, tail_startup,
    with_margins,
)

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
    batches: list[Batch]
    backfill: bool
    models: str
    #: The models planned with (``to_dict``), for the re-plans of a window whose total is unknown.
    cost_model: dict | None = None
    final_agg_model: dict | None = None
    #: The plan spec it was planned from, on the window's axis (``PlanSpec.to_dict``).
    spec: dict | None = None
    #: The settings it was planned with (``QueryConfig.to_dict``): a claim plans the rest of
    #: the window again when the models they give have changed since (a newer cost history).
    config: dict | None = None
    #: The queries due earlier on the same cluster that this window was planned after.
    planned_after: list = field(default_factory=list)
    #: A group (:func:`airflow_iqp.window.group.plan_group`) that its queries planned apart
    #: would do better: what to change (empty: sharing does at least as well).
    advice: str = ""

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("plan", "batches")}
        d["plan"] = self.plan.to_dict()
        d["batches"] = [b.to_dict() for b in self.batches]
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
    arrived = len(list_units(cfg.landing, cfg.streams))
    known = cfg.units is not None
    if known:
        backfill, estimate = now >= window_end and arrived >= cfg.units, ""
    else:  # a total that is not known: estimated, and checked at every batch (replan)
        backfill = now >= window_end + cfg.grace and arrived > 0
        total, source = (arrived, "the units present") if backfill else \
            expected_units(cfg, length, now, present=arrived, elapsed=now - window_start)
        cfg = replace(cfg, units=total)
        estimate = f"; {total} units expected ({source})"
    if cfg.ahead and not cfg.ahead < deadline - window_end:
        raise ConfigError(f"the queries ahead of this one ({cfg.ahead:g} s) leave it no time before its deadline "
                          f"({deadline - window_end:g} s after the window's end); give less, or a later deadline",
                          "ahead")
    busy, shared, after = IDLE, "", 0.0
    # Joint planning: the queries due before this one on its cluster, earliest deadline
    # first, each in the executor time the ones before it leave; this window gets what is left.
    before = [] if backfill else planned_before(cfg, window_start, window_end, deadline)
    if before:
        # Whole batches: the cluster gate (cluster_turn) runs one batch at a time and takes
        # none back, so a batch planned across another query's turn would wait for a gap.
        busy = Busy(whole=True)
        for off, _q, other in before:
            theirs, *_ = _plan(other, length, length + off - _ahead(other, after), False, 0.0, busy)
            ran = executed(theirs, busy)
            busy = busy.plus(ran)
            after += theirs.extra.get("after_end", sum(e - max(s, length) for s, e in ran if e > length))
        where = f"cluster {cfg.cluster}'s registry" if not cfg.shares else "shares"
        shared = (f"; planned after {', '.join(q for _o, q, _c in before)} on the same cluster, from {where} "
                  f"({sum(e - s for s, e in busy.intervals):.1f} s of theirs)")
    # Queries due earlier have the cluster for ``ahead`` seconds after the window's end: this
    # window's work after its end gets what is left of the deadline.
    rel_deadline = deadline - window_start - cfg.ahead - _ahead(cfg, after)
    plan, models, cost, agg, spec, planned, startup = _plan(cfg, length, rel_deadline, backfill, now - window_start,
                                                            busy)
    models += shared + estimate
    # The entries carry the scale planned with (learned, or given) for what expects their costs.
    batches = batch_entries(planned, plan, window_start, window_end, deadline, backfill, known or backfill,
                            tail_startup_s=startup)
    if cfg.mode == "dynamic" and not backfill:
        batches = _dynamic_entries(cfg, batches)
    elif not known and not backfill and cfg.mode == "plan":
        batches = _checkpoint_entries(batches, window_start, window_end)
    return WindowPlan(query=cfg.query, state_dir=cfg.state_dir, window_id=window_id(window_start),
                      window_start=window_start,
                      window_end=window_end, deadline=deadline, planned_at=now, plan=plan, batches=batches,
                      backfill=backfill, models=models, cost_model=_json_model(cost),
                      final_agg_model=_json_model(agg), spec=_json_model(spec), config=cfg.to_dict(),
                      planned_after=[q for _o, q, _c in before])


def _ahead(cfg: QueryConfig, after: float) -> float:
    """Seconds of the deadline that the queries due earlier take after the window's end
    (``after``), for a plan that counts them so: dynamic mode's, whose last MinBatches and
    merges run one after another then, earliest deadline first. A planned window's batches
    wait for those queries' work on the cluster (its ``busy`` time) instead."""
    return after if cfg.mode == "dynamic" else 0.0


def register_on_cluster(cfg: QueryConfig, window_start: float, window_end: float, deadline: float,
                        now: float | None = None) -> str | None:
    """Register the query on its cluster (``cfg.cluster``) with this window's settings, for
    the plans of the other queries on it; where it is (None: no cluster named)."""
    if not cfg.cluster:
        return None
    doc = {"backend": cfg.backend, "window_start": window_start, "window_length": window_end - window_start,
           "deadline_offset": deadline - window_end, "config": cfg.to_dict()}
    return open_store(cfg.state_dir).cluster(cfg.cluster).register(cfg.query, doc, now)


#: Before a query on a cluster plans its window, how long no other query may have registered
#: that window (:func:`wait_for_cluster`) when the registry has no earlier window's queries
#: to expect, and how long it waits at most.
REGISTRY_SETTLE_S = 2.0
REGISTRY_WAIT_MAX_S = 10.0


def wait_for_cluster(cfg: QueryConfig, window_start: float, window_length: float, *,
                     settle: float = REGISTRY_SETTLE_S, most: float = REGISTRY_WAIT_MAX_S,
                     clock=time.time, sleep=time.sleep) -> list[str]:
    """Wait until the other queries on ``cfg``'s cluster (and backend) have registered this
    window, for a plan that counts those due earlier; return the queries registered for it.

    The plan tasks of a cluster's queries start together at a window's start, and each
    plans after the queries due earlier only if their registrations are there. Those
    registered for the window before this one are expected again: it waits for them. A
    registry without them (the first window) gives no such list: it waits until ``settle``
    seconds pass with no new registration. At most ``most`` seconds in all (a query gone
    from the cluster is waited for once). No cluster named, or a window that has ended (a
    backfill plans alone): no wait."""
    if not cfg.cluster:
        return []
    cluster, started = open_store(cfg.state_dir).cluster(cfg.cluster), clock()
    if started >= window_start + window_length:
        most = 0.0
    warm = None
    while True:
        docs = [d for d in cluster.members().values() if d.get("backend") == cfg.backend]
        now_in = [d for d in docs if abs(d.get("window_start", 0.0) - window_start) < 1e-6]
        expected = [d for d in docs if window_start - 1.5 * window_length < d.get("window_start", 0.0) < window_start]
        warm = bool(expected) if warm is None else warm
        if warm:
            done = not expected
        else:
            quiet_since = max((d.get("registered_at", started) for d in now_in), default=started)
            done = clock() >= quiet_since + settle
        if done or clock() >= started + most:
            return sorted(d["query"] for d in now_in)
        sleep(0.2)


def planned_before(cfg: QueryConfig, window_start: float, window_end: float,
                   deadline: float) -> list[tuple[float, str, QueryConfig]]:
    """The queries this window is planned after, earliest deadline first, as (deadline offset,
    query, settings): those due before it on its cluster. With ``shares``, the ones it names,
    with this query's other settings; else those on the cluster's registry with the same
    backend and window length, each with its own settings, as its newest plan registered them."""
    length = window_end - window_start
    if cfg.shares:
        others = [(off, q, replace(cfg, query=q, shares={}, cluster=None)) for q, off in cfg.shares.items()]
    elif cfg.cluster:
        others = []
        for q, (doc, other) in registered_members(cfg, window_start).items():
            if abs(doc["window_length"] - length) > 1e-6:
                continue
            if other.units is None:
                other = replace(other, units=expected_units(other, length)[0])
            others.append((float(doc["deadline_offset"]), q, other))
    else:
        return []
    own = (deadline - window_end, query_key(cfg.query))
    return sorted(((off, q, c) for off, q, c in others if query_key(q) != own[1] and (off, query_key(q)) < own),
                  key=lambda o: (o[0], o[1]))


def _json_model(model) -> dict | None:
    try:
        return model.to_dict()
    except ConfigError:  # a model built in code has no JSON form: no re-plans
        return None


#: Checkpoints mapped beside the plan's batches for a window whose total is unknown, evenly
#: through the window: each re-plans with what has arrived, and runs a batch only if the
#: rest would no longer fit the deadline (:func:`replan`).
CHECKPOINTS = 2


def _checkpoint_entries(entries: list[Batch], window_start: float, window_end: float) -> list[Batch]:
    """A window of unknown total: the plan's batches and :data:`CHECKPOINTS` checkpoints, in
    the order their input is due (the time each label shows), then the last batch."""
    head, last = entries[:-1], entries[-1]
    length = window_end - window_start
    at = [window_start + length * (j + 1) / (CHECKPOINTS + 1) for j in range(CHECKPOINTS)]
    checks = [replace(last, last=False, spare=True, units=0, ready_ts=t, latest_start_ts=t) for t in at]
    ordered = sorted(head + checks, key=lambda e: (e.ready_ts, e.latest_start_ts)) + [last]

    def label(i: int, e: Batch) -> str:
        what = "checkpoint" if e.spare else f"{e.units} units" if not e.last else "the rest"
        return f"batch {i}/{len(ordered)} · {what} · ready {clock(e.ready_ts)}"

    return [replace(e, index=i, of=len(ordered), label=label(i, e)) for i, e in enumerate(ordered, start=1)]


class _Planned(NamedTuple):
    """What :func:`_plan` gives :func:`plan_window`."""

    plan: Plan
    models: str  #: where the models came from
    cost: CostModel
    agg: FinalAggCost
    spec: PlanSpec  #: what it was planned from (``airflow-iqp plan --window`` plans it again)
    cfg: QueryConfig  #: with the margins it was planned with (learned once, from the cost history)
    #: Seconds the last batch was counted ready before the window's end: a fused tail's
    #: start-up, paid in its lead (:func:`tail_startup`; 0 for a backfill and one batch).
    tail_startup: float


def _plan(cfg: QueryConfig, length: float, rel_deadline: float, backfill: bool, rel_now: float,
          busy) -> _Planned:
    """One query's plan on the window's axis (0 = its start), in the executor time ``busy`` leaves."""
    m = margins(cfg)
    cost, agg, models = cost_models(cfg, m)
    cfg = with_margins(cfg, m)[0]
    offsets = (observed_offsets(cfg) if cfg.arrival == "observed" else None) or arrival_offsets_hint(cfg, length)
    arrival = EmpiricalArrival(tuple(min(o, length) for o in offsets))
    spec = partial(PlanSpec, window_start=0.0, cost=cost, final_agg=agg, busy=busy)
    startup = 0.0
    if backfill:
        # Everything is there: one batch, ready now. The deadline (long past for an old
        # window) is the planner's business only to say whether it is met.
        spec = spec(window_end=rel_now, deadline=max(rel_deadline, rel_now), busy=IDLE,
                    arrival=EmpiricalArrival((rel_now,) * cfg.units), sizes=(cfg.units,))
        models += "; backfill: the window's input is complete, one batch"
    elif cfg.mode == "dynamic":
        # δRSF bounds the cluster work that batching adds, and Cmax a batch's: Airflow's
        # dispatch is a wait on a worker, not the cluster's work, so the sizes leave it out.
        work, work_agg, _source = cost_models(replace(cfg, dispatch=0.0))
        # The last MinBatch and the merge run after the window's end, before the deadline
        # (less what the queries due earlier on the cluster do after it: plan_window): that
        # bounds the size too. A fused tail's task has started by then; else the last
        # batch's task starts after it.
        after_end = rel_deadline - length - cfg.grace
        if not cfg.fuse_tail:
            after_end -= max(0.0, cost.cost(1) - work.cost(1))
        mb = min_batch_size(work, work_agg, cfg.units, cfg.rsf, cfg.c_max, after_end=max(after_end, 0.0),
                            max_batches=cfg.max_batches)
        startup = tail_startup(cfg, cost)
        end = length + cfg.grace - startup
        spec = spec(window_end=end, deadline=rel_deadline, arrival=_ready_by(arrival, end), method="minbatch",
                    sizes=_minbatch_sizes(cfg, mb.size))
        models += f"; dynamic: MinBatches for rsf {cfg.rsf} and {after_end:.1f} s after the window's end" + \
            (f" ({mb.reason})" if mb.reason else "")
    elif cfg.mode == "one_batch":
        spec = spec(window_end=length, deadline=rel_deadline, arrival=arrival, method="one_batch",
                    sizes=(cfg.units,))
        models += "; one_batch: the whole window after its end"
    else:
        # A fused tail's task is started before the window's end (tail_lead), so the last
        # batch's fixed start (dispatch; on spark-submit its JVM too), which its cost
        # includes, can be over by then: to the planner the last batch is "ready" that much
        # earlier. The batch before it must then be done that long before the window's end,
        # for the final task to start in time.
        startup = tail_startup(cfg, cost)
        end = length + cfg.grace - startup
        arrival = _ready_by(arrival, end)
        # Function 1 gives the fewest batches for linear models only: other models get the
        # exact planner, in at most MAX_UNITS planning units. (It cannot plan whole batches
        # around the turns of queries due earlier: Function 1 does.) Each batch keeps at
        # least the margin between its input being ready and its latest safe start.
        exact = not (isinstance(cost, LinearCost) and isinstance(agg, LinearFinalAgg) or busy.whole and busy.intervals)
        spec = spec(window_end=end, deadline=rel_deadline, arrival=arrival, method="exact" if exact else "greedy",
                    margin=cfg.margin)
    plan = spec.plan()
    if cfg.mode == "dynamic" and not backfill:
        plan.extra["min_batch"] = mb.to_dict()
        plan.extra["after_end"] = after_end_cost(work, work_agg, cfg.units, mb.size)
    return _Planned(plan, models, cost, agg, spec, cfg, startup)


def _ready_by(arrival: EmpiricalArrival, end: float) -> EmpiricalArrival:
    """``arrival`` with the units due after ``end`` (a fused tail's last batch counted ready
    before the window's end) due at it: they are the last batch's anyway."""
    return EmpiricalArrival(tuple(min(o, end) for o in arrival.times))


def _minbatch_sizes(cfg: QueryConfig, size: int) -> tuple[int, ...]:
    """Section 4's dynamic mode: the window cut into MinBatches of ``size`` units (sized by
    ``min_batch_size`` with ``max_batches``, so at most that many)."""
    return (size,) * (cfg.units // size) + ((cfg.units % size,) if cfg.units % size else ())


def _dynamic_entries(cfg: QueryConfig, entries: list[Batch]) -> list[Batch]:
    """Dynamic mode's mapping: one entry per MinBatch, then spares up to ``max_batches``.

    A mapped task's count is fixed when it expands, so the plan maps an upper bound. A
    MinBatch fires when its units have arrived or when its estimated input time (the
    arrival model's time for them, section 4.4) has come, and claims at most its size
    (``max_units``); a slow stream makes batches fire with fewer units, and the spares
    take the rest at the last batch's latest start. Spares that find nothing to claim skip.
    With a fused tail there are no spares: the last MinBatch is the tail, which claims what
    is left at the window's end. As a MinBatch like the others, it would fire at the tail's
    latest start, planned its start-up before the window's end, and run beside the tail's
    start with the window's last units still to come.
    """
    # The paper's dynamic mode runs the ready batch of least laxity: the cluster's gate
    # orders these batches' turns so, from the window's state when each asks (turn_key).
    entries = [replace(e, turn_policy="llf") for e in entries]
    out = []
    for e in entries[:-1]:
        out.append(replace(e, latest_start_ts=min(e.ready_ts, e.latest_start_ts), max_units=e.units))
    last = entries[-1]
    spares = 0 if cfg.fuse_tail else max(0, cfg.max_batches - len(entries))
    for j in range(spares + 1):
        index = len(entries) + j
        out.append(replace(last, index=index, last=j == spares, spare=j > 0,
                           label=f"batch {index}/{len(entries) + spares}{' (spare)' if j else ''} · "
                                 f"{last.units if not j else 'rest'} units · ready {clock(last.ready_ts)}"))
    return [replace(e, of=len(out)) for e in out]


def batch_entries(cfg: QueryConfig, plan: Plan, window_start: float, window_end: float, deadline: float,
                  backfill: bool, known: bool = True, tail_startup_s: float = 0.0) -> list[Batch]:
    """One :class:`Batch` per batch: what the sensor, the submit task and the priority strategies read.

    With ``cfg.ahead`` the last batch has ``turn_ts``, the window's end plus ``ahead``: it
    does not fire before then, and its latest start is that much later than planned.
    ``tail_startup_s``: what a fused tail's task pays in its lead (:func:`tail_startup`),
    which the plan counts in the last batch's cost from a ready time that much before the
    window's end; the task claims after paying it, so its latest claim is that much later
    than the plan's latest start. That is how long the last batch may wait for a unit
    still missing from the window's count (:func:`~airflow_iqp.window.readiness.fire_at`).
    """
    k = len(plan.batches)
    out = []
    remaining = plan.total_cost
    for b in plan.batches:
        ready, latest, turn = window_start + b.ready, window_start + b.latest_start, 0.0
        if b.index == k and not backfill:
            # A fused tail is planned "ready" its start-up before the window's end (the task
            # and, on spark-submit, its JVM start during the lead); its input is not complete
            # before the window's end, and it must not fire on time alone before then.
            ready = max(ready, window_end + cfg.grace)
            latest += tail_startup_s
            if cfg.ahead:
                latest += cfg.ahead
                turn = window_end + cfg.ahead
        out.append(Batch(
            query=cfg.query, window_id=window_id(window_start), index=b.index, of=k, units=b.units,
            cumulative=b.cumulative, expected_total=cfg.units, last=b.index == k, ready_ts=ready,
            latest_start_ts=latest, cost=b.cost, remaining_cost=remaining, deadline_ts=deadline,
            landing=cfg.landing, state_dir=cfg.state_dir, static=cfg.static,
            streams=cfg.streams, known_total=known, grace=cfg.grace,
            backend=cfg.backend, backfill=backfill, cost_scale=cfg.cost_scale, turn_ts=turn,
            label=f"batch {b.index}/{k} · {b.units} units · ready {clock(ready)}",
        ))
        remaining -= b.cost
    return out


def format_window_plan(wp: WindowPlan) -> str:
    head = (f"{wp.query} window {wp.window_id}: [{clock(wp.window_start)}, {clock(wp.window_end)}], "
            f"deadline {clock(wp.deadline)}; {wp.models}")
    return head + "\n" + format_plan(wp.plan, fmt_time=lambda t: clock(wp.window_start + t))


def store_plan(wp: WindowPlan) -> str:
    """The window's plan in its store: what was planned, to compare with what ran; its location."""
    return open_store(wp.state_dir).window(wp.query, wp.window_id).write_doc("plan", wp.to_dict())

