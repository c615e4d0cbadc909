"""A calibrated cost model adjusted for what its measurements left out: a fixed cost per
batch, or a load factor. Both kinds of model: batch costs and final aggregation."""

from __future__ import annotations

import math
from dataclasses import replace

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models._checks import finite_nonneg
from airflow_iqp.planning.models._cost import LinearCost, PiecewiseLinearCost
from airflow_iqp.planning.models._final_agg import LinearFinalAgg, PiecewiseLinearFinalAgg


def plus_fixed(model, seconds: float):
    """The same cost model with ``seconds`` more per batch (or per merge): a fixed cost the
    measurements left out, such as the orchestrator starting the task. Linear and
    piecewise linear models of either kind."""
    finite_nonneg(seconds, "dispatch")
    if not seconds:
        return model
    if isinstance(model, LinearCost):
        return replace(model, per_batch=model.per_batch + seconds)
    if isinstance(model, LinearFinalAgg):
        return replace(model, base=model.base + seconds)
    if isinstance(model, (PiecewiseLinearCost, PiecewiseLinearFinalAgg)):
        return replace(model, points=tuple((x, y + seconds) for x, y in model.points))
    raise ConfigError(f"cannot add a fixed cost to a {type(model).__name__}", "cost")


def scaled(model, factor: float):
    """The same cost model with every cost ``factor`` times as long: the load a deployment
    adds while a window runs (the orchestrator, other queries on the cluster) that an idle
    calibration did not see. Linear and piecewise linear models of either kind."""
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
        raise ConfigError(f"must be a number > 0, got {factor!r}", "cost_scale")
    if factor == 1:
        return model
    if isinstance(model, LinearCost):
        return replace(model, per_unit=model.per_unit * factor, per_batch=model.per_batch * factor)
    if isinstance(model, LinearFinalAgg):
        return replace(model, base=model.base * factor, per_batch=model.per_batch * factor)
    if isinstance(model, (PiecewiseLinearCost, PiecewiseLinearFinalAgg)):
        return replace(model, points=tuple((x, y * factor) for x, y in model.points))
    raise ConfigError(f"cannot scale a {type(model).__name__}", "cost_scale")
