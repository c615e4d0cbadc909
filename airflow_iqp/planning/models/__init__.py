"""The models the planner reasons with: cost, final aggregation, arrival, and busy time.

Pure Python (layer 1): no Airflow, Spark or OR-Tools imports.

Times are seconds as floats on one axis shared by the window, the deadline and the
arrival model (the Airflow layer uses seconds since the window start). Units of input
are whole counts: a tuple, a file or an offset, as the input adapter defines it.

Every model serialises to a plain dict with a ``kind`` key (``to_dict``) and is
rebuilt from one by ``cost_model_from_dict``, ``final_agg_from_dict`` and
``arrival_from_dict``. Those parsers are the only place that validates a model's
configuration; they raise :class:`~airflow_iqp.errors.ConfigError` naming the field.

Import every name from this package; the private modules hold one kind of model each:
``_cost`` (batch costs and their fit), ``_final_agg``, ``_arrival``, ``_adjust`` (a fixed
cost or a load factor added to a model), ``_parse`` (models from JSON), ``_busy`` (other
queries' executor time), ``_shared`` (a group's costs) and ``_checks`` (the float tolerance and the field checks).
"""

from airflow_iqp.planning.models._adjust import plus_fixed, scaled
from airflow_iqp.planning.models._arrival import ArrivalModel, EmpiricalArrival, FixedRate, ProfileArrival
from airflow_iqp.planning.models._busy import Busy
from airflow_iqp.planning.models._checks import TIME_TOL, UNBOUNDED, within
from airflow_iqp.planning.models._cost import (
    CallableCost, CostModel, LinearCost, PiecewiseLinearCost, decreasing_sizes, fit_piecewise_linear,
)
from airflow_iqp.planning.models._final_agg import NO_FINAL_AGG, FinalAggCost, LinearFinalAgg, PiecewiseLinearFinalAgg
from airflow_iqp.planning.models._parse import arrival_from_dict, cost_model_from_dict, final_agg_from_dict
from airflow_iqp.planning.models._shared import SHARED_FIXED_SHARE, shared_batch_cost, shared_step, summed_final_agg

__all__ = [
    "NO_FINAL_AGG", "SHARED_FIXED_SHARE", "TIME_TOL", "UNBOUNDED", "ArrivalModel", "Busy", "CallableCost", "CostModel", "EmpiricalArrival",
    "FinalAggCost", "FixedRate", "LinearCost", "LinearFinalAgg", "PiecewiseLinearCost", "PiecewiseLinearFinalAgg",
    "ProfileArrival", "arrival_from_dict", "cost_model_from_dict", "decreasing_sizes", "final_agg_from_dict", "fit_piecewise_linear",
    "plus_fixed", "scaled", "shared_batch_cost", "shared_step", "summed_final_agg", "within",
]
