"""The constraint model of section 3.2, solved with OR-Tools CP-SAT: a cross-check.

For a linear cost ``b + c*x`` and ``n`` batches with sizes ``x_i`` and starts ``s_i``:

* (5) ``sum x_i = N``;
* (6) ``s_i + b + c*x_i <= s_{i+1}``;
* (7) ``s_n + b + c*x_n <= deadline - FinalAgg(n)``;
* (8) the units a batch needs have arrived when it starts:
  ``s_i >= InputTime(x_1 + ... + x_i)``, and the last batch starts at the window end
  or later.

The paper states (8) for a fixed rate, ``rate * s_i >= sum_j x_j``; we state it through
the arrival model's ``time_of`` as a table over the cumulative count (an element
constraint), so it holds for profile and empirical arrivals as well.

CP-SAT needs integers, so seconds become ticks of ``1 / scale`` s. Rounding is always
in the safe direction (arrival and costs up, deadline down); inputs on the tick grid
are exact. The number of batches is minimised by solving ``n = 1, 2, ...`` in turn
and stopping at the first feasible ``n``, under one overall time limit; within that
``n`` the model prefers late, large batches (minimal cumulative counts), as Function 1
does.

OR-Tools is imported inside ``solve_plan`` only: layer 1 stays importable without it.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import ArrivalModel, FinalAggCost, LinearCost
from airflow_iqp.planning.planner import Plan, _check_window, build_plan, plan_batches


class SolverError(RuntimeError):
    """The solver gave no answer (time limit, invalid model): not a statement about feasibility."""


def _ticks(x: float, scale: int, up: bool) -> int:
    v = x * scale
    r = round(v)
    if abs(v - r) <= 1e-6 * max(1.0, abs(v)):
        return int(r)
    return int(math.ceil(v) if up else math.floor(v))


def solve_plan(arrival: ArrivalModel, cost: LinearCost, final_agg: FinalAggCost, window_end: float,
               deadline: float, *, time_limit: float = 30.0, scale: int = 1_000_000,
               max_batches: int | None = None, workers: int = 1) -> Plan:
    """Fewest batches that meet ``deadline``, from the CP-SAT model of section 3.2.

    Returns the same :class:`Plan` as the greedy planner (built by ``build_plan``).
    When no ``n <= max_batches`` is feasible, returns the planner's earliest-finishing
    plan with ``feasible=False`` and the reason. Raises :class:`SolverError` when CP-SAT runs out
    of time or rejects the model, so a timeout is never mistaken for infeasibility.
    """
    from ortools.sat.python import cp_model

    if not isinstance(cost, LinearCost):
        raise ConfigError("the solver cross-check supports linear cost models only "
                          f"(got {type(cost).__name__}); use method 'greedy'", "cost.kind")
    _check_window(arrival, window_end, deadline)
    total = arrival.total
    if total == 0:
        return build_plan([], arrival, cost, final_agg, window_end, deadline, method="solver")
    max_batches = min(total, max_batches or total)
    per_unit = _ticks(cost.per_unit, scale, up=True)
    per_batch = _ticks(cost.per_batch, scale, up=True)
    avail = [0] + [_ticks(arrival.time_of(v), scale, up=True) for v in range(1, total + 1)]
    wend = _ticks(window_end, scale, up=True)
    horizon = max(avail[-1], wend) + per_batch * max_batches + per_unit * total + 1
    started = time.monotonic()
    for n in range(1, max_batches + 1):
        limit = deadline - final_agg.cost(n)
        end_limit = _ticks(limit, scale, up=False)
        if end_limit < wend + per_batch + per_unit:  # not even one unit fits after the window end
            continue
        model = cp_model.CpModel()
        x = [model.new_int_var(1, total, f"x{i}") for i in range(n)]           # batch sizes
        cum = [model.new_int_var(1, total, f"cum{i}") for i in range(n)]       # units up to batch i
        s = [model.new_int_var(0, max(horizon, end_limit), f"s{i}") for i in range(n)]  # starts
        ready = [model.new_int_var(0, avail[-1], f"ready{i}") for i in range(n)]
        model.add(sum(x) == total)                                              # (5)
        for i in range(n):
            model.add(cum[i] == sum(x[: i + 1]))
            model.add_element(cum[i], avail, ready[i])                          # InputTime(cum_i)
            model.add(s[i] >= ready[i])                                         # (8)
            dur = per_batch + per_unit * x[i]
            if i + 1 < n:
                model.add(s[i] + dur <= s[i + 1])                               # (6)
            else:
                model.add(s[i] >= wend)                                         # last batch after the window
                model.add(s[i] + dur <= end_limit)                              # (7)
        # Among plans with n batches, the one whose batches are as late and large as
        # possible: minimal cumulative counts. Function 1 builds exactly that plan for
        # linear costs (each of its suffixes is as long as any plan's), so both methods
        # give the paper's sizes, e.g. [6, 4] and [4, 4, 2] in its example.
        model.minimize(sum(cum))
        solver = cp_model.CpSolver()
        remaining = time_limit - (time.monotonic() - started)
        if remaining <= 0:
            raise SolverError(f"time limit of {time_limit} s reached before trying {n} batches")
        solver.parameters.max_time_in_seconds = remaining
        solver.parameters.num_workers = workers
        status = solver.solve(model)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            sizes = [solver.value(v) for v in x]
            plan = build_plan(sizes, arrival, cost, final_agg, window_end, deadline, method="solver")
            return plan
        if status == cp_model.INFEASIBLE:
            continue
        if status == cp_model.MODEL_INVALID:
            raise SolverError(f"CP-SAT rejected the model for {n} batches: {model.validate()}")
        raise SolverError(f"CP-SAT returned {solver.status_name(status)} for {n} batches "
                          f"within the time limit of {time_limit} s")
    best = plan_batches(arrival, cost, final_agg, window_end, deadline)  # the earliest-finishing plan
    return replace(best, method="solver", reason=f"CP-SAT: no plan with at most {max_batches} batches meets "
                                                 f"the deadline; {best.reason}")
