"""One recurring query's settings as the runtime uses them (:class:`QueryConfig`), and the window's names."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import cost_model_from_dict, final_agg_from_dict, scaled

#: The execution backends: one spark-submit per batch, or a shared Spark Connect server.
BACKENDS = ("spark-submit", "spark-connect")


def window_id(window_start: float) -> str:
    """The window's id in the state layout: its start as ``YYYYmmddTHHMMSS`` (UTC)."""
    return dt.datetime.fromtimestamp(window_start, dt.timezone.utc).strftime("%Y%m%dT%H%M%S")


def clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%H:%M:%S")


#: How a window is cut into batches (``QueryConfig.mode``).
MODES = ("plan", "dynamic", "one_batch")


@dataclass(frozen=True)
class QueryConfig:
    """One recurring query's settings, as a DAG author gives them (see ``iqp_dag``)."""

    query: str
    landing: str                 #: this window's landing directory (resolved)
    state_dir: str
    #: Units expected per window; None: unknown, estimated (:func:`expected_units`) and
    #: checked against what arrives at every batch.
    units: int | None = None
    static: str | dict | None = None  #: a directory of <table>.parquet, or table -> path
    #: The query's streams as ``Stream.to_dict()`` (None: the TPC-H layout): what a unit is.
    streams: tuple | None = None
    rate: float | None = None    #: arrival hint, units/s (default: units over the window)
    profile: str = "fixed"       #: arrival hint's profile (airflow_iqp.inputs.profiles)
    arrival: str = "hint"        #: "hint", or "observed": the last window's observed arrivals
    cost_hint: dict = field(default_factory=lambda: {"kind": "linear", "per_unit": 0.1, "per_batch": 20.0})
    final_agg_hint: dict = field(default_factory=lambda: {"kind": "linear", "base": 20.0, "per_batch": 0.5})
    backend: str = "spark-submit"  #: "spark-submit" or "spark-connect" (whose cost history to plan with)
    #: "plan" (Algorithm 1), "dynamic" (MinBatches, section 4), or "one_batch" (the whole window
    #: as one batch after its end: the baseline users compare against, on the same deployment)
    mode: str = "plan"
    rsf: float = 0.5
    c_max: float | None = None
    max_batches: int = 16        #: dynamic mode maps this many batches at most
    fuse_tail: bool = False      #: the final task runs the last batch (``iqp_dag(fuse_tail=True)``)
    #: Seconds from a batch's input being claimed to its Spark work starting (the sensor
    #: resuming, the task starting, its session opening), added to every batch's cost; the
    #: calibrated and measured costs leave it out. On Spark Connect on a 2-core machine it
    #: is about 1.7 s.
    dispatch: float = 0.0
    #: The calibrated costs times this are the planned ones (:func:`scaled`): what the
    #: deployment's own load while a window runs (Airflow, the other queries' tasks, the
    #: input landing) adds to a calibration on an idle machine. With nine queries sharing one
    #: Spark Connect server on a 2-core machine a batch costs 0.5 to 2.3 times its calibrated
    #: cost (median 1.35): left at 1 there, plans count on batches shorter than they are.
    cost_scale: float = 1.0
    #: Seconds kept between a batch's input being ready and its latest safe start, for
    #: what the plan does not model: noticing the input (the trigger polls), claiming it,
    #: starting the job. Function 1 leaves every batch but the first no slack at all.
    margin: float = 10.0
    #: Seconds after the window's end that the cluster is busy with the final work of other
    #: queries due before this one (several queries on one cluster, their last batches run
    #: earliest deadline first: ``tail_slots``). The window is planned against the deadline
    #: less this, and its last batch does not start before the window's end plus this.
    ahead: float = 0.0
    #: The other queries on this cluster over the same arriving units (same landing, units,
    #: arrival hint, backend and settings; each its own cost models from the cost history):
    #: query id -> its deadline, seconds after the window's end. The queries due before this
    #: one (earliest deadline first) are planned first, and this window is planned in the
    #: executor time they leave (:class:`~airflow_iqp.planning.models.Busy`): joint
    #: planning, instead of ``ahead``'s fixed reservation after the window's end.
    shares: dict = field(default_factory=dict)
    #: Seconds after the window's end that the last batch still waits for units to land:
    #: it takes everything present at the window's end plus this.
    grace: float = 0.0
    #: Units that land after the last claim: "record" them (``late.json``, the result marked
    #: partial), or "merge" them too: the next window's run merges them into this window's
    #: result, ``lateness`` seconds after its end plus ``grace``, as a new revision.
    late: str = "record"
    lateness: float = 0.0

    def __post_init__(self):
        if self.units is not None and (not isinstance(self.units, int) or self.units < 1):
            raise ConfigError(f"must be a whole number >= 1, or None (unknown), got {self.units!r}", "units")
        if not (isinstance(self.grace, (int, float)) and self.grace >= 0):
            raise ConfigError(f"must be >= 0 seconds, got {self.grace!r}", "grace")
        if self.late not in ("record", "merge"):
            raise ConfigError(f"must be 'record' or 'merge', got {self.late!r}", "late")
        if not (isinstance(self.lateness, (int, float)) and self.lateness >= 0):
            raise ConfigError(f"must be >= 0 seconds, got {self.lateness!r}", "lateness")
        if self.arrival not in ("hint", "observed"):
            raise ConfigError(f"must be 'hint' or 'observed', got {self.arrival!r}", "arrival")
        if self.backend not in BACKENDS:
            raise ConfigError(f"must be one of {', '.join(BACKENDS)}, got {self.backend!r}", "backend")
        if self.mode not in MODES:
            raise ConfigError(f"must be one of {', '.join(MODES)}, got {self.mode!r}", "mode")
        if not self.dispatch >= 0:
            raise ConfigError(f"must be >= 0 seconds, got {self.dispatch!r}", "dispatch")
        if not self.margin >= 0:
            raise ConfigError(f"must be >= 0 seconds, got {self.margin!r}", "margin")
        if not self.ahead >= 0:
            raise ConfigError(f"must be >= 0 seconds, got {self.ahead!r}", "ahead")
        if not isinstance(self.shares, dict) or not all(
                isinstance(q, str) and isinstance(v, (int, float)) and v >= 0 for q, v in self.shares.items()):
            raise ConfigError(f"must map query ids to deadlines in seconds >= 0 after the window's end, "
                              f"got {self.shares!r}", "shares")
        if self.shares and self.ahead:
            raise ConfigError("give shares (plan with the other queries' work) or ahead (a fixed reservation "
                              "after the window's end), not both", "ahead")
        if self.rate is not None and not self.rate > 0:
            raise ConfigError(f"must be > 0 units per second, got {self.rate!r}", "rate")
        scaled(cost_model_from_dict(self.cost_hint, "cost_hint"), self.cost_scale)  # checks cost_scale too
        final_agg_from_dict(self.final_agg_hint, "final_agg_hint")

