"""The single-query planner: the paper's Algorithm 1 (section 3.1).

``plan_batches`` runs Function 1, *ScheduleWithoutAggCost*, inside the outer loop of
section 3.1 that raises the assumed final-aggregation cost until the plan's own final
aggregation fits. Function 1 walks backwards from the deadline: the last batch takes
as many units as fit between the window's end and the deadline of the last batch;
every earlier batch takes as many of the still-pending units as fit between the
moment they have all arrived and the start of the batch after it.

One refinement over the paper's text, never worse and identical when capacities
are exact: after placing a batch of ``n`` units, Function 1 moves its time point back
by the whole duration it offered (``timeDur``); we move it back by the batch's cost,
``Cost(n)``, which is the batch's latest start. Units are whole, so ``Cost(n)`` may
be less than ``timeDur``, and the earlier batches get that difference.

Pure Python (layer 1).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from airflow_iqp.planning.models import ArrivalModel, Busy, CostModel, FinalAggCost, LinearCost, within

#: No other work on the executor: the planner's times are plain arithmetic.
IDLE = Busy()


@dataclass(frozen=True)
class Batch:
    """One batch of a plan. Times are on the spec's axis."""

    index: int          #: 1-based, in time order
    units: int          #: units processed by this batch
    cumulative: int     #: units processed by this batch and all before it
    ready: float        #: when its last unit has arrived (the window end for the last batch)
    latest_start: float  #: starting later would miss the deadline
    cost: float         #: planned seconds


@dataclass(frozen=True)
class Plan:
    """Batches in time order, the final aggregation, and whether the deadline holds.

    ``slack`` is the deadline minus the earliest finish of the plan (every batch
    starting as soon as it is ready and the one before it is done, then the final
    aggregation): negative when the deadline cannot be met. When ``feasible`` is
    False the plan is the one that finishes earliest, ``reason`` says why, and
    ``latest_start`` is measured from that earliest finish instead of the deadline.
    """

    feasible: bool
    reason: str
    batches: tuple[Batch, ...]
    final_agg_cost: float
    total_cost: float
    slack: float
    deadline: float
    window_end: float
    method: str = "greedy"
    extra: dict = field(default_factory=dict)

    @property
    def sizes(self) -> list[int]:
        return [b.units for b in self.batches]

    @property
    def earliest_finish(self) -> float:
        return self.deadline - self.slack

    def to_dict(self) -> dict:
        return {
            "feasible": self.feasible,
            "reason": self.reason,
            "batches": [asdict(b) for b in self.batches],
            "final_agg_cost": self.final_agg_cost,
            "total_cost": self.total_cost,
            "slack": self.slack,
            "deadline": self.deadline,
            "window_end": self.window_end,
            "method": self.method,
            **({"extra": self.extra} if self.extra else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        return cls(
            feasible=bool(d["feasible"]),
            reason=d.get("reason", ""),
            batches=tuple(Batch(**b) for b in d["batches"]),
            final_agg_cost=float(d["final_agg_cost"]),
            total_cost=float(d["total_cost"]),
            slack=float(d["slack"]),
            deadline=float(d["deadline"]),
            window_end=float(d["window_end"]),
            method=d.get("method", "greedy"),
            extra=dict(d.get("extra", {})),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, s: str) -> "Plan":
        return cls.from_dict(json.loads(s))


# ----------------------------------------------------------------- Function 1


def schedule_without_agg_cost(arrival: ArrivalModel, cost: CostModel, window_end: float,
                              last_batch_deadline: float, busy: Busy = IDLE) -> list[int] | None:
    """Function 1 of the paper: batch sizes, last batch first; None if nothing fits.

    ``last_batch_deadline`` is deadlineQ minus the assumed final-aggregation cost.
    ``busy``: time the executor gives to queries planned before this one; only the free
    time between two points counts, or with ``busy.whole`` its longest free gap
    (:class:`~airflow_iqp.planning.models.Busy`).
    """
    pending = arrival.total
    if pending == 0:
        return []
    n = min(pending, cost.capacity(busy.free(window_end, last_batch_deadline)))
    if n <= 0:
        return None
    sizes = [n]
    pending -= n
    time_pt = busy.before(last_batch_deadline, cost.cost(n))
    while pending > 0:
        avail = arrival.time_of(pending)
        n = min(pending, cost.capacity(busy.free(avail, time_pt)))
        if n <= 0:
            return None
        sizes.append(n)
        pending -= n
        time_pt = busy.before(time_pt, cost.cost(n))
    return sizes


def _fits(arrival, cost, final_agg, window_end, deadline, passes: list[int] | None = None,
          busy: Busy = IDLE) -> list[int] | None:
    """The fewest batches that finish, final aggregation included, by ``deadline``.

    One batch after the window's end if it fits (eq. 2-3; its final aggregation, if the
    final step runs even after one batch, included);
    otherwise the outer loop of section 3.1: assume the final aggregation of two
    batches, run Function 1, and while the plan's own final aggregation costs more
    than the one assumed, assume the plan's batch count and run again. With a
    final-aggregation cost that does not decrease in the number of batches, every
    assumed count stays at or below the fewest feasible count, so this finds the
    fewest batches Function 1 can give.
    ``passes``, if given, is appended the number of Function 1 runs.
    """
    total = arrival.total
    if total == 0:
        return []
    if within(_one_batch_finish(arrival, cost, final_agg, window_end, busy), deadline):
        return [total]
    assumed, runs = 2, 0
    while True:
        sizes = schedule_without_agg_cost(arrival, cost, window_end, busy.before(deadline, final_agg.cost(assumed)),
                                          busy)
        runs += 1
        # The paper's stopping rule: the plan's own final aggregation costs no more
        # than the one assumed, so the plan meets the deadline as it is.
        if sizes is None or final_agg.cost(len(sizes)) <= final_agg.cost(assumed):
            if passes is not None:
                passes.append(runs)
            return None if sizes is None else sizes[::-1]
        assumed = len(sizes)


def plan_batches(arrival: ArrivalModel, cost: CostModel, final_agg: FinalAggCost,
                 window_end: float, deadline: float, busy: Busy = IDLE) -> Plan:
    """Plan the fewest, largest batches that meet ``deadline`` (Algorithm 1).

    When no plan meets the deadline, returns the plan that finishes earliest, found
    by bisecting on the deadline with the same procedure (feasibility only grows as
    the deadline moves later), with ``feasible=False`` and a reason.

    The count is the fewest possible for linear cost models (an exchange argument, and
    the property tests check it against exhaustive search and the exact planner). For
    other cost models the plan is still valid and meets the deadline when it says so, but
    may have more batches than needed, or miss a deadline that fewer batches meet, and
    ``plan.extra["note"]`` says so: the paper's claim of optimality for any cost model does
    not hold (see tests/planning/test_planner_properties.py). ``exact.plan_exact`` is exact for any.
    """
    _check_window(arrival, window_end, deadline)
    passes: list[int] = []
    sizes = _fits(arrival, cost, final_agg, window_end, deadline, passes, busy)
    if sizes is not None:
        plan = build_plan(sizes, arrival, cost, final_agg, window_end, deadline, busy=busy)
    else:
        finish, sizes = _earliest_finish(arrival, cost, final_agg, window_end, deadline, passes, busy)
        plan = build_plan(sizes, arrival, cost, final_agg, window_end, deadline, latest_from=finish,
                          busy=busy)
    plan.extra["function1_runs"] = sum(passes)
    if not isinstance(cost, LinearCost):
        plan.extra["note"] = ("Function 1 finds the fewest batches for linear cost models; with this one it may "
                              "use more than needed or miss a deadline fewer meet: method 'exact' finds the fewest")
    return plan


def _one_batch_finish(arrival, cost, final_agg, window_end, busy: Busy = IDLE) -> float:
    """When one batch of the whole window, started at the window's end, is done, its final
    aggregation included (``final_agg.cost(1)``: zero unless the final step runs even after a
    single batch, ``merge_single``)."""
    return busy.after(busy.after(window_end, cost.cost(arrival.total)), final_agg.cost(1))


def _earliest_finish(arrival, cost, final_agg, window_end, deadline, passes,
                     busy: Busy = IDLE) -> tuple[float, list[int]]:
    lo = deadline
    hi = _one_batch_finish(arrival, cost, final_agg, window_end, busy)  # one batch after the window end always fits
    best = _fits(arrival, cost, final_agg, window_end, hi, passes, busy)
    assert best is not None
    for _ in range(100):
        if hi - lo <= 1e-9 * max(1.0, abs(hi)):
            break
        mid = (lo + hi) / 2
        sizes = _fits(arrival, cost, final_agg, window_end, mid, passes, busy)
        if sizes is None:
            lo = mid
        else:
            hi, best = mid, sizes
    return hi, best


def _check_window(arrival: ArrivalModel, window_end: float, deadline: float) -> None:
    from airflow_iqp.errors import ConfigError

    if deadline < window_end:
        raise ConfigError(f"the deadline ({deadline}) is before the window end ({window_end})", "deadline")
    if arrival.total and not within(arrival.time_of(arrival.total), window_end):
        raise ConfigError(
            f"the last unit arrives at {arrival.time_of(arrival.total)}, after the window end ({window_end}); "
            "the window ends when its last unit arrives or later", "window_end")


# ------------------------------------------------------------ plan from sizes


def executed(plan: Plan, busy: Busy = IDLE) -> list[tuple[float, float]]:
    """The executor time ``plan`` takes, each batch starting as soon as it is ready and the
    batch before it is done, in the time ``busy`` leaves free, then its final aggregation:
    what a query planned after this one on the same executor sees as busy."""
    pieces: list[tuple[float, float]] = []
    t = float("-inf")
    for b in plan.batches:
        got = busy.used(max(t, b.ready), b.cost)
        pieces += got
        t = got[-1][1]
    pieces += busy.used(t if plan.batches else plan.window_end, plan.final_agg_cost)
    return pieces


def build_plan(sizes: list[int], arrival: ArrivalModel, cost: CostModel, final_agg: FinalAggCost,
               window_end: float, deadline: float, *, latest_from: float | None = None,
               method: str = "greedy", busy: Busy = IDLE) -> Plan:
    """Turn batch sizes (in time order) into a :class:`Plan`, checking it against the deadline.

    Every planner (Function 1, the solver, the MinBatch cutter) describes its plan
    through this one function, so ``ready``, ``latest_start`` and ``slack`` mean the
    same thing whatever made the plan.
    """
    k = len(sizes)
    agg = final_agg.cost(k)
    costs = [cost.cost(n) for n in sizes]
    ready, cum = [], 0
    for i, n in enumerate(sizes):
        cum += n
        ready.append(window_end if i == k - 1 else arrival.time_of(cum))
    # Earliest finish: each batch as soon as it is ready and the executor is free.
    t = float("-inf")
    for r, c in zip(ready, costs):
        t = busy.after(max(t, r), c)
    finish = busy.after(t if k else window_end, agg)
    # Latest starts: backwards from the deadline (or the earliest finish if missed).
    end = busy.before(deadline if latest_from is None else latest_from, agg)
    latest = [0.0] * k
    for i in range(k - 1, -1, -1):
        latest[i] = busy.before(end, costs[i])
        end = latest[i]
    batches, cum = [], 0
    for i, n in enumerate(sizes):
        cum += n
        batches.append(Batch(index=i + 1, units=n, cumulative=cum, ready=ready[i],
                             latest_start=latest[i], cost=costs[i]))
    feasible = within(finish, deadline)
    if feasible:
        reason = ""
    elif k and latest_from is not None:
        reason = (f"no plan meets the deadline {deadline:g}: the earliest finish is {finish:g}, "
                  f"{finish - deadline:g} s late; this is the plan that finishes earliest")
    else:
        reason = f"this plan finishes at {finish:g}, {finish - deadline:g} s after the deadline {deadline:g}"
    return Plan(feasible=feasible, reason=reason, batches=tuple(batches), final_agg_cost=agg,
                total_cost=sum(costs) + agg, slack=deadline - finish, deadline=deadline,
                window_end=window_end, method=method)
