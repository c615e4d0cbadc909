"""A plan spec: one recurring query's window, deadline and models, as JSON.

```
{"window_start": 1, "window_end": 10, "deadline": 12,
 "arrival": {"kind": "fixed_rate", "rate": 1.0, "total": 10}
          | {"kind": "profile", "points": [[t, cumulative], ...]}
          | {"kind": "empirical", "times": [t, ...]},
 "cost": {"kind": "linear", "per_unit": 0.5, "per_batch": 0.0}
       | {"kind": "piecewise_linear", "points": [[units, seconds], ...]},
 "final_agg": {"kind": "linear", "base": 0.0, "per_batch": 0.0}
            | {"kind": "piecewise_linear", "points": [[batches, seconds], ...]},
 "method": "greedy" | "solver" | "exact"}
```

Pure Python (layer 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import (
    ArrivalModel, CostModel, FinalAggCost, arrival_from_dict, cost_model_from_dict, final_agg_from_dict,
)
from airflow_iqp.planning.exact import plan_exact
from airflow_iqp.planning.planner import Plan, _check_window, plan_batches

#: Function 1 (Algorithm 1), the OR-Tools model of section 3.2 (linear costs), and the
#: dynamic program that is exact for any cost model (``exact.plan_exact``).
METHODS = ("greedy", "solver", "exact")


@dataclass(frozen=True)
class PlanSpec:
    window_start: float
    window_end: float
    deadline: float
    arrival: ArrivalModel
    cost: CostModel
    final_agg: FinalAggCost
    method: str = "greedy"

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
        method = d.get("method", "greedy")
        if method not in METHODS:
            raise ConfigError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}", "method")
        arrival = arrival_from_dict(d["arrival"], start=start)
        if arrival.total and arrival.time_of(1) < start - 1e-9:
            raise ConfigError(f"the first unit arrives at {arrival.time_of(1)}, before the window start ({start})",
                              "arrival")
        spec = cls(window_start=start, window_end=end, deadline=deadline, arrival=arrival,
                   cost=cost_model_from_dict(d["cost"]), final_agg=final_agg_from_dict(d.get("final_agg")),
                   method=method)
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
        return {"window_start": self.window_start, "window_end": self.window_end, "deadline": self.deadline,
                "arrival": self.arrival.to_dict(), "cost": self.cost.to_dict(),
                "final_agg": self.final_agg.to_dict(), "method": self.method}

    def plan(self, method: str | None = None, **solver_options) -> Plan:
        """Plan this spec with its method (or ``method``)."""
        method = method or self.method
        if method == "solver":
            from airflow_iqp.planning.solver import solve_plan
            return solve_plan(self.arrival, self.cost, self.final_agg, self.window_end, self.deadline,
                              **solver_options)
        if method == "exact":
            return plan_exact(self.arrival, self.cost, self.final_agg, self.window_end, self.deadline)
        return plan_batches(self.arrival, self.cost, self.final_agg, self.window_end, self.deadline)


def _time(d: dict, key: str) -> float:
    if key not in d:
        raise ConfigError("missing", key)
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"must be a finite number of seconds, got {v!r}", key)
    return float(v)
