"""A recurring query's settings, as a few typed objects: each checks itself and is documented once.

::

    iqp_dag(sql=..., name=..., streams=..., window=..., deadline_offset=...,
            arrival=Arrival(units=240),          # how input arrives
            cut=Algorithm1(margin=10),           # how a window is cut: or MinBatches(), OneBatch()
            backend=SparkSubmit(pool="spark"),   # which backend runs it: or SparkConnect()
            alerts=Alerts(on_miss=...))          # what happens when a deadline is at risk or missed

The backends (``SparkSubmit``, ``SparkConnect``) are :mod:`airflow_iqp.backends`'; every
setting is importable from the package itself: ``from airflow_iqp import Arrival, SparkSubmit``.

Each object refuses a bad value, or a combination that makes no sense, when it is built,
with a :class:`~airflow_iqp.errors.ConfigError` whose ``field`` names the setting to fix
(``cut.ahead``, ``backend.tail_slots``). :meth:`query_config` gives an object's part of
the runtime's flat ``QueryConfig``.

Times are seconds (a number) or a ``timedelta``; they are stored as float seconds.
Pure Python: no Airflow and no Spark imports.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from airflow_iqp._values import _copy, _flag, _model, _number, _seconds, _set, _whole
from airflow_iqp.errors import ConfigError
from airflow_iqp.inputs.profiles import PROFILES
from airflow_iqp.planning.models import cost_model_from_dict, final_agg_from_dict

__all__ = ["Alerts", "Algorithm1", "Arrival", "Cut", "MinBatches", "OneBatch", "expect"]


def expect(value, kind: type, field: str, choices: str):
    """``value`` if it is a ``kind``; else a ConfigError that says which objects to give."""
    if isinstance(value, kind):
        return value
    got = f"the string {value!r}" if isinstance(value, str) else f"a {type(value).__name__}"
    raise ConfigError(f"must be {choices} (from airflow_iqp.options), got {got}", field)


@dataclass(frozen=True, kw_only=True)
class Arrival:
    """How a window's input arrives.

    :param units: units per window, if known. Without it the count is estimated: the median
        of earlier windows' counts, or ``rate`` times the window for the first; the plan is
        checked against what has arrived at checkpoints through the window, and the last
        batch takes everything present at the window's end plus ``grace``.
    :param rate: the arrival hint, units per second (default: ``units`` over the window).
    :param profile: the hint's shape over the window: ``"fixed"`` (a constant rate),
        ``"faster"``, ``"bursty"``, ``"slower"``, ``"late"`` or ``"stalled"``
        (:mod:`airflow_iqp.inputs.profiles`).
    :param observed: plan with the previous window's observed arrivals instead of the hint
        (the hint still serves the first window).
    :param grace: how long after the window's end units may still land for the last batch.
    :param late: units that land after the last claim are recorded (``"record"``:
        ``late.json``, the result marked partial), or also merged (``"merge"``): the next
        window's run claims them ``lateness`` after this window's end plus ``grace``,
        computes them and writes this window's result again as a new revision, and the
        result's Asset event fires again. The deadline stays that of the first revision.
    :param lateness: with ``late="merge"``, how long after ``grace`` late units are waited for.
    """

    units: int | None = None
    rate: float | None = None
    profile: str = "fixed"
    observed: bool = False
    grace: float | dt.timedelta = 0.0
    late: str = "record"
    lateness: float | dt.timedelta = 0.0

    def __post_init__(self):
        if self.units is not None:
            _whole(self.units, "arrival.units", 1)
        _set(self, "rate", _number(self.rate, "arrival.rate", low=0, strict=True, optional=True,
                                   unit=" units per second"))
        if self.profile not in PROFILES:
            raise ConfigError(f"must be one of {', '.join(PROFILES)}, got {self.profile!r}", "arrival.profile")
        _flag(self.observed, "arrival.observed")
        _set(self, "grace", _seconds(self.grace, "arrival.grace"))
        if self.late not in ("record", "merge"):
            raise ConfigError(f"must be 'record' or 'merge', got {self.late!r}", "arrival.late")
        _set(self, "lateness", _seconds(self.lateness, "arrival.lateness"))
        if self.lateness and self.late != "merge":
            raise ConfigError("matters only with late='merge' (late units are then merged this long after the "
                              "window's end plus grace)", "arrival.lateness")

    def query_config(self) -> dict[str, Any]:
        """This object's part of the runtime's ``QueryConfig``."""
        return {"units": self.units, "rate": self.rate, "profile": self.profile,
                "arrival": "observed" if self.observed else "hint", "grace": self.grace, "late": self.late,
                "lateness": self.lateness}


@dataclass(frozen=True, kw_only=True)
class Cut:
    """How a window is cut into batches: :class:`Algorithm1`, :class:`MinBatches` or
    :class:`OneBatch`. What they share: how costs are planned.

    No cost needs to be given. The first window is planned with the backend's built-in
    default (:attr:`airflow_iqp.backends.base.Backend.default_cost`); every later one with
    the cost history, what this query's batches and merges took on this backend from
    claim to written output (or an ``airflow-iqp calibrate`` fit). The hints override the built-in default only.

    :param cost_hint: one batch's cost from its claim to its written partial (the task's
        start, the JVM or session, the Spark work), ``{"kind": "linear", "per_unit": s,
        "per_batch": s}`` or ``{"kind": "piecewise_linear", "points": [[units, s], ...]}``
        (None: the backend's default).
    :param final_agg_hint: the final aggregation's cost for k partial results,
        ``{"kind": "linear", "base": s, "per_batch": s}`` or piecewise linear (None: the
        backend's default).
    :param cost_scale: plan with the costs times this: the load the deployment adds while a
        window runs (Airflow, other queries, the input landing), which an idle calibration
        does not see. None (the default): learned from the batches of the query's last
        windows, and of the other queries on its cluster (:func:`airflow_iqp.window.costs.margins`);
        1 before there are any.
    """

    mode: ClassVar[str]

    cost_hint: Mapping | None = None
    final_agg_hint: Mapping | None = None
    cost_scale: float | None = None

    def __post_init__(self):
        if type(self) is Cut:
            raise ConfigError("give Algorithm1(), MinBatches() or OneBatch()", "cut")
        _set(self, "cost_hint", _model(self.cost_hint, "cut.cost_hint", cost_model_from_dict))
        _set(self, "final_agg_hint", _model(self.final_agg_hint, "cut.final_agg_hint", final_agg_from_dict))
        _set(self, "cost_scale", _number(self.cost_scale, "cut.cost_scale", low=0, strict=True, optional=True))

    def query_config(self) -> dict[str, Any]:
        """This object's part of the runtime's ``QueryConfig``."""
        return {"mode": self.mode, "cost_hint": _copy(self.cost_hint), "final_agg_hint": _copy(self.final_agg_hint),
                "cost_scale": self.cost_scale}


@dataclass(frozen=True, kw_only=True)
class Algorithm1(Cut):
    """The paper's Algorithm 1: the fewest, largest batches that meet the deadline. The last
    batch runs after the window's end, earlier ones as soon as their input has arrived.

    :param margin: seconds kept between a batch's input being ready and its latest safe
        start, for what the plan does not model (noticing the input, claiming it, starting
        the job).
    :param shares: the other queries on this cluster over the same arriving units, query id
        -> deadline offset (seconds or timedelta): the queries due before this one are
        planned first, earliest deadline first, and this window is planned in the executor
        time they leave (with their own calibrated cost models). Use with ``tail_slots``.
    :param ahead: instead of ``shares``, a fixed reservation: seconds after the window's end
        that the cluster is busy with the final work of queries due before this one; the
        window is planned against its deadline less this, and its last batch waits for it.
    """

    mode: ClassVar[str] = "plan"

    margin: float = 10.0
    shares: Mapping[str, float | dt.timedelta] | None = None
    ahead: float | dt.timedelta = 0.0

    def __post_init__(self):
        super().__post_init__()
        _set(self, "margin", _seconds(self.margin, "cut.margin"))
        _set(self, "ahead", _seconds(self.ahead, "cut.ahead"))
        if self.shares is not None:
            if not isinstance(self.shares, Mapping) or not all(isinstance(q, str) and q for q in self.shares):
                raise ConfigError(f"must map query ids to deadline offsets, got {self.shares!r}", "cut.shares")
            _set(self, "shares", {q: _seconds(v, f"cut.shares.{q}") for q, v in self.shares.items()})
        if self.shares and self.ahead:
            raise ConfigError("give shares (plan with the other queries' work) or ahead (a fixed reservation "
                              "after the window's end), not both", "cut.shares")

    def query_config(self) -> dict[str, Any]:
        return {**super().query_config(), "margin": self.margin, "ahead": self.ahead,
                "shares": dict(self.shares or {})}


@dataclass(frozen=True, kw_only=True)
class MinBatches(Cut):
    """The paper's dynamic mode for many queries on one cluster (section 4): the window is
    cut into MinBatches, the smallest batches whose extra cost stays within ``rsf``.

    :param rsf: the resource slack factor δRSF: batching may cost at most ``1 + rsf`` times
        one batch of the whole window.
    :param c_max: seconds one batch may take at most (Cmax), or None for no cap.
    :param max_batches: the most batches a window maps (a mapped task's count is fixed when
        it expands): the MinBatches, then spares that take what a slow stream left (with a
        fused tail, no spares: the tail, the last MinBatch, claims what is left at the window's end).
    """

    mode: ClassVar[str] = "dynamic"

    rsf: float = 0.5
    c_max: float | None = None
    max_batches: int = 16

    def __post_init__(self):
        super().__post_init__()
        _set(self, "rsf", _number(self.rsf, "cut.rsf", low=0, strict=False))
        _set(self, "c_max", _number(self.c_max, "cut.c_max", low=0, strict=True, optional=True, unit=" seconds"))
        _whole(self.max_batches, "cut.max_batches", 1)

    def query_config(self) -> dict[str, Any]:
        return {**super().query_config(), "rsf": self.rsf, "c_max": self.c_max, "max_batches": self.max_batches}


@dataclass(frozen=True, kw_only=True)
class OneBatch(Cut):
    """The whole window as one batch after its end: the baseline to compare against, on the
    same deployment. With ``iqp_dag(sql=...)`` it also accepts a query that cannot be split
    (an exact median, a window function over the stream), which then runs this way."""

    mode: ClassVar[str] = "one_batch"


@dataclass(frozen=True, kw_only=True)
class Alerts:
    """What happens when a window's deadline is at risk or missed.

    :param deadline: attach an Airflow ``DeadlineAlert`` at the window's end plus the
        deadline offset (off for ``airflow dags test``, which crashes on one in 3.3.2).
    :param on_miss: the DeadlineAlert's callback (an Airflow ``AsyncCallback`` or
        ``SyncCallback``; default: log the miss and record it in the state directory).
    :param on_risk: called with the plan task's context when the plan cannot meet the
        deadline (default: :class:`~airflow_iqp.notifications.deadline.DeadlineRiskNotifier`,
        a log line and ``deadline_risk.json``).
    """

    deadline: bool = True
    on_miss: Any = None
    on_risk: Any = None

    def __post_init__(self):
        _flag(self.deadline, "alerts.deadline")
        if self.on_miss is not None:
            if isinstance(self.on_miss, (str, bytes, bool, int, float)):
                raise ConfigError(f"must be an AsyncCallback or SyncCallback, got {self.on_miss!r}", "alerts.on_miss")
            if not self.deadline:
                raise ConfigError("is the DeadlineAlert's callback: it needs deadline=True", "alerts.on_miss")
        if self.on_risk is not None and not callable(self.on_risk):
            raise ConfigError(f"must be callable with the task's context, got {self.on_risk!r}", "alerts.on_risk")
