"""The exact planner (method ``exact``): the fewest batches for any non-decreasing cost model.

Function 1 gives the fewest batches for linear costs only; with other cost models it can
miss a deadline that fewer batches meet (README, "What the planner guarantees"). This
planner is a dynamic program over batch boundaries and is exact for every non-decreasing
cost model and every final-aggregation model that does not decrease in the number of
batches, ``merge_single`` included (:mod:`airflow_iqp.planning._exact_dp`): forward, the
fewest batches; backward, the least cost among those.

When no plan meets the deadline it returns, as ``plan_batches`` does, the plan that
finishes earliest (fewest batches, then least cost, among those), ``feasible=False``: the
forward pass, up to ever later deadlines until one is at or after the earliest finish.

Time: the passes follow few prefixes when the deadline is tight and take few layers when
it is loose; 5 000 units with a 1 000-piece cost model plan in well under a second at the
tightest feasible deadline (``benchmarks/plan_speed.py``). The slowest case is a deadline
no plan meets, with a final aggregation that grows by a large share of a batch per batch:
a few seconds for 5 000 units.

Other queries' executor time (``Busy``) is respected when work may be divided around it
(``Busy.whole`` false): the planner then works on a clock of free seconds, on which
batches run back to back as on an idle executor. Whole batches (``Busy.whole``) make the
cheapest suffix no longer the latest-starting one, and are refused.

``max_units`` coarsens a larger window: planning units of ``step`` real units each, so
that boundaries fall on multiples of ``step`` (the last batch takes the remainder);
``plan.extra["coarsened"]`` is then ``step``. Pure Python (layer 1).
"""

from __future__ import annotations

import bisect
from itertools import accumulate
from typing import Callable

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning._exact_dp import INF, ExactDP
from airflow_iqp.planning.models import ArrivalModel, Busy, CostModel, FinalAggCost
from airflow_iqp.planning.planner import IDLE, Plan, _check_window, build_plan

#: The most planning units the provider plans a window in (``window.plan``: larger windows are
#: coarsened); ``benchmarks/plan_speed.py`` times this size.
MAX_UNITS = 5000


def plan_exact(arrival: ArrivalModel, cost: CostModel, final_agg: FinalAggCost, window_end: float,
               deadline: float, busy: Busy = IDLE, *, max_units: int | None = None) -> Plan:
    """The fewest batches that meet ``deadline``, then the least total cost (method ``exact``).

    Returns the same :class:`Plan` as ``plan_batches`` (built by ``build_plan``); when no plan
    meets the deadline, the plan that finishes earliest with ``feasible=False`` and the reason.
    ``max_units``: plan a window of more units in ``ceil(units / max_units)``-unit steps.
    """
    _check_window(arrival, window_end, deadline)
    clock = _free_clock(busy)
    n = arrival.total
    if n == 0:
        return build_plan([], arrival, cost, final_agg, window_end, deadline, method="exact", busy=busy)
    if max_units is not None and max_units < 1:
        raise ConfigError(f"must be >= 1, got {max_units!r}", "max_units")
    step = -(-n // max_units) if max_units and n > max_units else 1
    units = -(-n // step)

    def real(u: int) -> int:
        return min(u * step, n)

    # Planning unit u is real units up to u * step: it is ready when they all are, and a
    # batch of d planning units costs what d * step real units do; the last batch holds the
    # remainder.
    ready = [-INF] + [clock(arrival.time_of(real(u))) for u in range(1, units)] + [clock(window_end)]
    costs = [cost.cost(real(d)) for d in range(units + 1)]
    last = [cost.cost(n - (units - d) * step) for d in range(units + 1)] if step > 1 else costs
    sizes = ExactDP(ready, costs, final_agg.cost, last).solve(clock(deadline))
    cuts = [real(c) for c in accumulate(sizes)]
    real_sizes = [b - a for a, b in zip([0, *cuts[:-1]], cuts)]
    plan = build_plan(real_sizes, arrival, cost, final_agg, window_end, deadline, method="exact", busy=busy)
    if not plan.feasible:
        plan = build_plan(real_sizes, arrival, cost, final_agg, window_end, deadline, method="exact", busy=busy,
                          latest_from=plan.earliest_finish)
    if step > 1:
        plan.extra["coarsened"] = step
        plan.extra["note"] = (f"planned in steps of {step} units ({n} units, at most {max_units} planning units): "
                              f"the fewest batches whose boundaries fall on multiples of {step}")
    return plan


def _free_clock(busy: Busy) -> Callable[[float], float]:
    """Seconds on a clock that runs only while the executor is free of ``busy``.

    Work divisible around busy time that takes ``d`` seconds from ``t`` ends at the first
    moment the clock reads ``clock(t) + d`` (``Busy.after``), so on this clock batches run
    back to back as on an idle executor. Whole batches (``Busy.whole``) do not.
    """
    if not busy.intervals:
        return float
    if busy.whole:
        raise ConfigError("method 'exact' plans around other queries' time only when batches may be divided "
                          "around it (Busy.whole is false); for whole batches use method 'greedy'", "busy")
    starts = [s for s, _e in busy.intervals]
    before = [0.0]  # busy seconds before each interval
    for s, e in busy.intervals:
        before.append(before[-1] + (e - s))

    def clock(t: float) -> float:
        i = bisect.bisect_right(starts, t)
        if i == 0:
            return t
        s, e = busy.intervals[i - 1]
        return t - before[i - 1] - (min(t, e) - s)

    return clock
