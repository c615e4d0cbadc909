"""Several queries' costs as one group's: a batch that reads its units once and runs every
query's per-batch step on them, and the queries' merges one after another.

Pure Python (layer 1).
"""

from __future__ import annotations

from typing import Sequence

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models._cost import LinearCost, PiecewiseLinearCost
from airflow_iqp.planning.models._final_agg import LinearFinalAgg, PiecewiseLinearFinalAgg

#: The share of each query's per-batch fixed cost, beyond the largest one, that a shared
#: batch still pays: the start-up (the task, the JVM or session, the read of the units) is
#: paid once, each query's own step planning and writing its partial again.
SHARED_FIXED_SHARE = 0.1


def shared_batch_cost(models: Sequence, fixed_share: float = SHARED_FIXED_SHARE):
    """One batch of a group: each query's cost per unit, added; one start-up (the largest
    query's fixed cost) plus ``fixed_share`` of each other query's. Linear models give a
    linear model; any piecewise one gives a piecewise model on every model's breakpoints."""
    if not models:
        raise ConfigError("a group needs at least one query's cost model", "cost")
    fixed = [_fixed(m) for m in models]
    saved = (1 - fixed_share) * (sum(fixed) - max(fixed))  # the start-ups the group does not pay again
    if all(isinstance(m, LinearCost) for m in models):
        return LinearCost(per_unit=sum(m.per_unit for m in models), per_batch=sum(fixed) - saved)
    xs = sorted({1.0, *(x for m in models if isinstance(m, PiecewiseLinearCost) for x, _y in m.points if x > 0)})
    xs = xs if len(xs) >= 2 else [1.0, 2.0]
    return PiecewiseLinearCost(tuple((x, max(0.0, sum(m.cost(x) for m in models) - saved)) for x in xs))


def shared_step(model, units: float, fixed_share: float = SHARED_FIXED_SHARE) -> float:
    """What one more query adds to a shared batch of ``units`` units: its cost without the
    start-up the batch pays once (all of it but ``fixed_share``), as in :func:`shared_batch_cost`."""
    return max(0.0, model.cost(units) - (1 - fixed_share) * _fixed(model))


def summed_final_agg(models: Sequence):
    """A group's merges, one query's after another's: their costs for k partials, added."""
    if not models:
        raise ConfigError("a group needs at least one query's final aggregation model", "final_agg")
    single = any(m.merge_single for m in models)
    if all(isinstance(m, LinearFinalAgg) for m in models):
        return LinearFinalAgg(base=sum(m.base for m in models), per_batch=sum(m.per_batch for m in models),
                              merge_single=single)
    ks = sorted({1.0, 2.0, *(x for m in models if isinstance(m, PiecewiseLinearFinalAgg) for x, _y in m.points)})
    return PiecewiseLinearFinalAgg(tuple((k, sum(m.cost(k) for m in models)) for k in ks), merge_single=single)


def _fixed(model) -> float:
    """A batch cost model's fixed cost per batch: its value extended to zero units."""
    if isinstance(model, LinearCost):
        return model.per_batch
    if isinstance(model, PiecewiseLinearCost):
        return model.overhead
    raise ConfigError(f"cannot share a {type(model).__name__} between queries", "cost")
