"""A plan spec: one recurring query's window, deadline and models, as JSON.

```
{"window_start": 1, "window_end": 10, "deadline": 12,
 "arrival": {"kind": "fixed_rate", "rate": 1.0, "total": 10}
          | {"kind": "profile", "points": [[t, cumulative], ...]}
          | {"kind": "empirical", "times": [t, ...]},
 "cost": {"kind": "linear", "per_unit": 0.5, "per_batch": 0.0}
       | {"kind": "piecewise_linear", "points": [[units, seconds], ...]},
 "final_agg": {"kind": "linear", "base": 0.0, "per_batch": 0.0, "merge_single": false}
            | {"kind": "piecewise_linear", "points": [[batches, seconds], ...]},
 "method": "greedy" | "solver" | "exact",
 "margin": 0.0, "dispatch": 0.0}
```

``margin``: seconds kept between a batch's input being ready and its latest start (the
batches are cut against the deadline less it, as ``Algorithm1(margin=)`` does);
``dispatch``: seconds added to every batch and to the merge; ``merge_single``: the
final step runs after a single batch too, as the provider's does. A window's
``plan.json`` holds the spec it was planned with (``spec``), which may also fix the sizes
(``sizes``, planned by MinBatches, one batch, a backfill) and the time other queries hold
the cluster (``busy``); :meth:`PlanSpec.plan` is the one planning path of both.

Pure Python (layer 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import (
    ArrivalModel, Busy, CostModel, FinalAggCost, arrival_from_dict, cost_model_from_dict, final_agg_from_dict,
    plus_fixed,
)
from airflow_iqp.planning.exact import MAX_UNITS, plan_exact
from airflow_iqp.planning.planner import IDLE, Plan, _check_window, build_plan, plan_batches

#: Function 1 (Algorithm 1), the OR-Tools model of section 3.2 (linear costs), and the
#: dynamic program that is exact for any cost model (``exact.plan_exact``).
METHODS = ("greedy", "solver", "exact")
#: What else made a plan whose ``sizes`` are fixed: MinBatches, or one batch of the window.
FIXED = ("minbatch", "one_batch")


@dataclass(frozen=True)
class PlanSpec:
    window_start: float
    window_end: float
    deadline: float
    arrival: ArrivalModel
    cost: CostModel
    final_agg: FinalAggCost
    method: str = "greedy"
    margin: float = 0.0
    dispatch: float = 0.0
    #: The batch sizes, when something other than the planner chose them (``method`` then
    #: only names what did).
    sizes: tuple[int, ...] | None = None
    busy: Busy = IDLE

    @classmethod
    def from_dict(cls, d: dict) -> "PlanSpec":
        if not isinstance(d, dict):
            raise ConfigError("a plan spec must be a JSON object", "spec")
        start = _time(d, "window_start")
        end = _time(d, "window_end")
        deadline = _time(d, "deadline")
        if end < start:
            raise ConfigError(f"the window ends ({end}) before it starts ({start})", "window_end")
        if deadline < end:
            raise ConfigError(f"the deadline ({deadline}) is before the window end ({end})", "deadline")
        for key in ("arrival", "cost"):
            if key not in d:
                raise ConfigError("missing", key)
        sizes = _sizes(d.get("sizes"))
        method = d.get("method", "greedy")
        if method not in METHODS + (FIXED if sizes else ()):
            raise ConfigError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}", "method")
        arrival = arrival_from_dict(d["arrival"], start=start)
        if arrival.total and arrival.time_of(1) < start - 1e-9:
            raise ConfigError(f"the first unit arrives at {arrival.time_of(1)}, before the window start ({start})",
                              "arrival")
        spec = cls(window_start=start, window_end=end, deadline=deadline, arrival=arrival,
                   cost=cost_model_from_dict(d["cost"]), final_agg=final_agg_from_dict(d.get("final_agg")),
                   method=method, margin=_seconds(d, "margin"), dispatch=_seconds(d, "dispatch"), sizes=sizes,
                   busy=_busy(d.get("busy")))
        _check_window(arrival, end, deadline)
        return spec

    @classmethod
    def from_json(cls, text: str) -> "PlanSpec":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not valid JSON: {exc}", "spec") from None
        return cls.from_dict(d)

    def to_dict(self) -> dict:
        d = {"window_start": self.window_start, "window_end": self.window_end, "deadline": self.deadline,
             "arrival": self.arrival.to_dict(), "cost": self.cost.to_dict(),
             "final_agg": self.final_agg.to_dict(), "method": self.method}
        d.update({k: getattr(self, k) for k in ("margin", "dispatch") if getattr(self, k)})
        if self.sizes is not None:
            d["sizes"] = list(self.sizes)
        if self.busy.intervals:
            d["busy"] = {"intervals": [list(i) for i in self.busy.intervals], "whole": self.busy.whole}
        return d

    def plan(self, method: str | None = None, **solver_options) -> Plan:
        """Plan this spec with its method (or ``method``): the fixed ``sizes`` if it has
        them, else the batches cut against the deadline less ``margin`` (never before the
        window's end), then checked against the deadline itself; if that misses it, the plan
        for the deadline itself."""
        method = method or self.method
        cost, agg = plus_fixed(self.cost, self.dispatch), plus_fixed(self.final_agg, self.dispatch)
        if self.sizes is not None:
            return build_plan(list(self.sizes), self.arrival, cost, agg, self.window_end, self.deadline,
                              method=method, busy=self.busy)

        def planned(by: float) -> Plan:
            if method == "solver":
                if self.busy.intervals:
                    raise ConfigError("method 'solver' does not plan around other queries' time", "busy")
                from airflow_iqp.planning.solver import solve_plan
                return solve_plan(self.arrival, cost, agg, self.window_end, by, **solver_options)
            if method == "exact":
                return plan_exact(self.arrival, cost, agg, self.window_end, by, self.busy, max_units=MAX_UNITS)
            return plan_batches(self.arrival, cost, agg, self.window_end, by, self.busy)

        if not self.margin:
            return planned(self.deadline)
        sized = planned(max(self.window_end, self.deadline - self.margin))
        plan = build_plan(sized.sizes, self.arrival, cost, agg, self.window_end, self.deadline, busy=self.busy,
                          method=sized.method)
        plan.extra.update(sized.extra)
        return plan if plan.feasible else planned(self.deadline)


def _time(d: dict, key: str) -> float:
    if key not in d:
        raise ConfigError("missing", key)
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"must be a finite number of seconds, got {v!r}", key)
    return float(v)


def _seconds(d: dict, key: str) -> float:
    v = d.get(key, 0.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"must be a number of seconds >= 0, got {v!r}", key)
    return float(v)


def _sizes(v) -> tuple[int, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not v or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                                                   for n in v):
        raise ConfigError(f"must be a list of batch sizes, whole numbers >= 1, got {v!r}", "sizes")
    return tuple(v)


def _busy(v) -> Busy:
    if v is None:
        return IDLE
    try:
        intervals = tuple((float(s), float(e)) for s, e in v["intervals"])
        whole = v.get("whole", False)
    except (TypeError, KeyError, ValueError):
        raise ConfigError(f'must be {{"intervals": [[start, end], ...], "whole": false}}, got {v!r}', "busy") from None
    ordered = all(s < e for s, e in intervals) and all(a[1] <= b[0] for a, b in zip(intervals, intervals[1:]))
    if not isinstance(whole, bool) or not ordered:
        raise ConfigError(f"must list disjoint [start, end] pairs in time order, and whole true or false, got {v!r}",
                          "busy")
    return Busy(intervals, whole)
