"""Models from their JSON form (``to_dict``): the one place that validates a model's
configuration, with a :class:`~airflow_iqp.errors.ConfigError` naming the field as it sits in
the spec."""

from __future__ import annotations

import math

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models._arrival import ArrivalModel, EmpiricalArrival, FixedRate, ProfileArrival
from airflow_iqp.planning.models._cost import CostModel, LinearCost, PiecewiseLinearCost
from airflow_iqp.planning.models._final_agg import NO_FINAL_AGG, FinalAggCost, LinearFinalAgg, PiecewiseLinearFinalAgg


def cost_model_from_dict(d: dict, where: str = "cost") -> CostModel:
    kind = _kind(d, where, ("linear", "piecewise_linear"))
    if kind == "linear":
        return _rebrand(where, "cost", lambda: LinearCost(
            per_unit=_num(d, "per_unit", where), per_batch=_num(d, "per_batch", where, default=0.0)))
    return _rebrand(where, "cost", lambda: PiecewiseLinearCost(_pairs(d, "points", where)))


def final_agg_from_dict(d: dict | None, where: str = "final_agg") -> FinalAggCost:
    if d is None:
        return NO_FINAL_AGG
    kind = _kind(d, where, ("linear", "piecewise_linear"))
    single = d.get("merge_single", False)
    if not isinstance(single, bool):
        raise ConfigError(f"must be true or false, got {single!r}", f"{where}.merge_single")
    if kind == "linear":
        return _rebrand(where, "final_agg", lambda: LinearFinalAgg(
            base=_num(d, "base", where, default=0.0), per_batch=_num(d, "per_batch", where, default=0.0),
            merge_single=single, shared_startup=_num(d, "shared_startup", where, default=0.0)))
    return _rebrand(where, "final_agg", lambda: PiecewiseLinearFinalAgg(
        _pairs(d, "points", where), merge_single=single,
        shared_startup=_num(d, "shared_startup", where, default=0.0)))


def arrival_from_dict(d: dict, start: float = 0.0, where: str = "arrival") -> ArrivalModel:
    """Build an arrival model; ``start`` is when a fixed-rate stream's first unit arrives."""
    kind = _kind(d, where, ("fixed_rate", "profile", "empirical"))
    if kind == "fixed_rate":
        total = d.get("total")
        if total is None:
            raise ConfigError("missing (how many units the window holds)", f"{where}.total")
        return _rebrand(where, "arrival", lambda: FixedRate(rate=_num(d, "rate", where), total=total, start=start))
    if kind == "profile":
        return _rebrand(where, "arrival", lambda: ProfileArrival(_pairs(d, "points", where)))
    times = d.get("times")
    if not isinstance(times, list):
        raise ConfigError("missing or not a list of arrival times", f"{where}.times")
    return _rebrand(where, "arrival", lambda: EmpiricalArrival(tuple(times)))


def _rebrand(where: str, default_prefix: str, build):
    """Run ``build``; re-prefix a ConfigError's field when the model sits elsewhere in a spec."""
    try:
        return build()
    except ConfigError as exc:
        if where == default_prefix or not exc.field or not exc.field.startswith(default_prefix):
            raise
        raise ConfigError(exc.message, where + exc.field[len(default_prefix):]) from None


def _kind(d, where: str, kinds: tuple[str, ...]) -> str:
    if not isinstance(d, dict):
        raise ConfigError(f"must be an object with a 'kind' ({' | '.join(kinds)})", where)
    kind = d.get("kind")
    if kind is None:
        raise ConfigError(f"missing (one of {', '.join(kinds)})", f"{where}.kind")
    if kind not in kinds:
        raise ConfigError(f"unknown kind {kind!r}; expected one of {', '.join(kinds)}", f"{where}.kind")
    return kind


def _num(d: dict, key: str, where: str, default: float | None = None) -> float:
    v = d.get(key, default)
    if v is None:
        raise ConfigError("missing", f"{where}.{key}")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"must be a finite number, got {v!r}", f"{where}.{key}")
    return float(v)


def _pairs(d: dict, key: str, where: str) -> tuple[tuple[float, float], ...]:
    v = d.get(key)
    if v is None:
        raise ConfigError("missing", f"{where}.{key}")
    if not isinstance(v, (list, tuple)):
        raise ConfigError("must be a list of [x, y] pairs", f"{where}.{key}")
    out = []
    for i, p in enumerate(v):
        if (not isinstance(p, (list, tuple)) or len(p) != 2
                or any(isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) for c in p)):
            raise ConfigError(f"must be a pair of finite numbers, got {p!r}", f"{where}.{key}[{i}]")
        out.append((float(p[0]), float(p[1])))
    return tuple(out)
