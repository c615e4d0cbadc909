"""One recurring query's settings as the runtime uses them (:class:`QueryConfig`), and the window's names."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field

from airflow_iqp import options
from airflow_iqp.backends.base import Backend
from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import check_name
from airflow_iqp.planning.models import cost_model_from_dict, final_agg_from_dict, scaled
from airflow_iqp.streams import Stream, as_streams


def window_id(window_start: float) -> str:
    """The window's id in the state layout: its start as ``YYYYmmddTHHMMSS`` (UTC)."""
    return dt.datetime.fromtimestamp(window_start, dt.timezone.utc).strftime("%Y%m%dT%H%M%S")


def clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%H:%M:%S")


#: How a window is cut into batches (``QueryConfig.mode``).
MODES = ("plan", "dynamic", "one_batch")
#: The typed options' defaults, which are QueryConfig's.
_ARRIVAL, _PLAN, _MIN = options.Arrival(), options.Algorithm1(), options.MinBatches()
_BACKEND = {f.name: f.default for f in Backend.__dataclass_fields__.values()}


@dataclass(frozen=True)
class QueryConfig:
    """One recurring query's settings, as a DAG author gives them (see ``iqp_dag``)."""

    query: str
    landing: str                 #: this window's landing directory (resolved)
    state_dir: str
    static: str | dict | None = None  #: a directory of <table>.parquet, or table -> path
    #: The query's streams (dicts are read as Streams): where its units land and what one is.
    streams: tuple[Stream, ...] = field(kw_only=True)
    # The settings below are the typed options' (airflow_iqp.options), flattened by their
    # ``query_config()``; each is documented there, with its default, once.
    units: int | None = _ARRIVAL.units            #: Arrival.units (None: estimated, checked at every batch)
    rate: float | None = _ARRIVAL.rate            #: Arrival.rate
    profile: str = _ARRIVAL.profile               #: Arrival.profile
    arrival: str = "hint"                         #: "hint", or "observed" (Arrival.observed)
    grace: float = _ARRIVAL.grace                 #: Arrival.grace
    late: str = _ARRIVAL.late                     #: Arrival.late
    lateness: float = _ARRIVAL.lateness           #: Arrival.lateness
    cost_hint: dict | None = _PLAN.cost_hint           #: Cut.cost_hint (None: the backend's default)
    final_agg_hint: dict | None = _PLAN.final_agg_hint  #: Cut.final_agg_hint (None: the backend's default)
    cost_scale: float | None = _PLAN.cost_scale   #: Cut.cost_scale (:func:`scaled`; None: learned)
    #: "plan" (Algorithm1), "dynamic" (MinBatches, section 4), or "one_batch" (OneBatch)
    mode: str = _PLAN.mode
    margin: float = _PLAN.margin                  #: Algorithm1.margin
    ahead: float = _PLAN.ahead                    #: Algorithm1.ahead
    #: Algorithm1.shares: query id -> its deadline, seconds after the window's end
    #: (joint planning in the executor time the queries due earlier leave).
    shares: dict = field(default_factory=dict)
    rsf: float = _MIN.rsf                         #: MinBatches.rsf
    c_max: float | None = _MIN.c_max              #: MinBatches.c_max
    max_batches: int = _MIN.max_batches           #: MinBatches.max_batches
    backend: str = Backend.default_name           #: a backend's name (airflow_iqp.backends.BACKENDS)
    fuse_tail: bool = bool(_BACKEND["fuse_tail"])  #: Backend.fuse_tail, decided (iqp_dag: False)
    dispatch: float | None = _BACKEND["dispatch"]  #: Backend.dispatch (None: learned)
    cluster: str | None = _BACKEND["cluster"]     #: Backend.cluster (joint planning through the store)
    #: A group (``iqp_group``): its member queries, id -> deadline, seconds after the window's end
    members: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "streams", as_streams(self.streams))  # none declared: a ConfigError
        # The arrival's settings are checked where they are defined, once.
        options.Arrival(units=self.units, rate=self.rate, profile=self.profile, grace=self.grace, late=self.late,
                        lateness=self.lateness)
        if self.arrival not in ("hint", "observed"):
            raise ConfigError(f"must be 'hint' or 'observed', got {self.arrival!r}", "arrival")
        backend = Backend.named(self.backend, "backend")
        if self.mode not in MODES:
            raise ConfigError(f"must be one of {', '.join(MODES)}, got {self.mode!r}", "mode")
        if self.dispatch is not None and not self.dispatch >= 0:
            raise ConfigError(f"must be >= 0 seconds, got {self.dispatch!r}", "dispatch")
        if self.cluster is not None:
            check_name(self.cluster, "cluster")
        if not isinstance(self.members, dict) or not all(
                isinstance(v, (int, float)) and v >= 0 and check_name(q, "members") for q, v in self.members.items()):
            raise ConfigError(f"must map query ids to deadlines in seconds >= 0 after the window's end, "
                              f"got {self.members!r}", "members")
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
        scaled(cost_model_from_dict(self.cost_hint or backend.default_cost, "cost_hint"),
               1.0 if self.cost_scale is None else self.cost_scale)  # checks cost_scale too
        if self.final_agg_hint is not None:
            final_agg_from_dict(self.final_agg_hint, "final_agg_hint")

    def to_dict(self) -> dict:
        """Plain JSON, as ``plan.json`` keeps it: a claim re-plans with the models these
        settings give then (:func:`airflow_iqp.window.replan.refresh`)."""
        out = asdict(self)
        out["streams"] = [s.to_dict() for s in self.streams]
        return out

    @classmethod
    def from_dict(cls, value: dict) -> "QueryConfig":
        data = dict(value)
        return cls(**data)
