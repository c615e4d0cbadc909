"""The contract between tasks: one planned batch of one window (:class:`Batch`).

The plan task writes one per batch; the sensor, the trigger, the batch task, the final
task and the Spark jobs read it. Inside the provider it is this frozen dataclass; it
becomes plain JSON only where Airflow needs JSON (XCom, a trigger's kwargs, a Spark job's
argument, ``plan.json``), and is validated when it comes back (:meth:`Batch.from_dict`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import check_name
from airflow_iqp.store import WindowState, open_store
from airflow_iqp.streams import Stream, as_streams

_NUMBER = (int, float)
#: The orders the cluster's gate can give a batch's turn by.
TURN_POLICIES = ("edf", "llf")


@dataclass(frozen=True)
class Batch:
    """One batch of a window's plan, on the clock (Unix seconds)."""

    query: str
    window_id: str
    index: int                 #: 1-based position in the window's plan
    of: int                    #: batches in the plan
    units: int                 #: planned units (0: a checkpoint, or "the rest")
    cumulative: int            #: planned units up to and including this batch
    expected_total: int        #: units expected in the window
    last: bool
    ready_ts: float            #: when its planned units are due
    latest_start_ts: float     #: its latest safe start
    cost: float                #: planned seconds
    remaining_cost: float      #: planned seconds from this batch to the result, merge included
    deadline_ts: float
    landing: str
    state_dir: str
    backend: str
    label: str                 #: its name in the UI
    static: str | dict | None = None
    streams: tuple[Stream, ...] = dataclasses.field(kw_only=True)  #: what it reads (dicts are read as Streams)
    backfill: bool = False
    known_total: bool = True   #: False: the window's total is estimated and re-planned
    grace: float = 0.0
    cost_scale: float = 1.0    #: the plan's pessimism over the calibrated costs
    turn_ts: float = 0.0       #: not before this (queries due earlier have the cluster)
    spare: bool = False        #: a checkpoint or a dynamic-mode spare
    skip: bool = False         #: a re-plan gave it nothing
    max_units: int | None = None  #: a MinBatch claims at most this many
    late: bool = False         #: the late batch of the window before
    window_start_ts: float | None = None  #: with ``late``: that window's start
    lateness: float = 0.0
    start_ts: float | None = None         #: a fused tail: when the final task starts
    before: tuple["Batch", ...] = ()      #: a fused tail: the batches it runs first
    #: a group's shared batch: the queries whose partials it writes, from one read of its
    #: units (``query`` is then the group's id, whose window holds the claim)
    members: tuple[str, ...] = ()
    #: how the cluster's gate orders its turn (:func:`~airflow_iqp.coordination.turn_key`):
    #: ``"edf"``, or ``"llf"`` (dynamic mode), its laxity when it asks for the turn
    turn_policy: str = "edf"
    #: a group's fused tail: each member's deadline, and the seconds its step on the last
    #: batch and its merge are planned to take (unscaled), in ``members``' order; the tail
    #: starts the members by them (:func:`~airflow_iqp.planning.policies.most_in_time`)
    member_deadlines: tuple[float, ...] = ()
    member_seconds: tuple[float, ...] = ()

    def __post_init__(self):
        check_name(self.query, "batch.query")  # both name state paths, the cluster's turn files too
        check_name(self.window_id, "batch.window_id")
        if not self.streams:
            raise ConfigError("a plan entry declares no streams", "batch.streams")
        object.__setattr__(self, "streams", as_streams(self.streams))
        object.__setattr__(self, "members", tuple(check_name(m, "batch.members") for m in self.members))
        for name in ("member_deadlines", "member_seconds"):
            value = tuple(getattr(self, name))
            if value and (len(value) != len(self.members) or not all(
                    isinstance(v, _NUMBER) and not isinstance(v, bool) for v in value)):
                raise ConfigError(f"{name} must be one number of seconds per member ({len(self.members)}), "
                                  f"got {list(value)!r}", f"batch.{name}")
            object.__setattr__(self, name, value)
        if self.turn_policy not in TURN_POLICIES:
            raise ConfigError(f"turn_policy must be one of {', '.join(TURN_POLICIES)}, got {self.turn_policy!r}",
                              "batch.turn_policy")
        if self.index < 1 or self.of < 1:
            raise ConfigError(f"batch index and count must be >= 1, got {self.index}/{self.of}", "batch")

    # ------------------------------------------------------------------ derived

    def window_state(self) -> WindowState:
        """The state of the window this batch belongs to."""
        return open_store(self.state_dir).window(self.query, self.window_id)

    def with_(self, **changes) -> "Batch":
        return dataclasses.replace(self, **changes)

    def member_due(self) -> dict[str, tuple[float, float]]:
        """A group's fused tail: member -> (its deadline, its planned seconds); empty if not planned."""
        return dict(zip(self.members, zip(self.member_deadlines, self.member_seconds))) if self.member_seconds else {}

    # ------------------------------------------------------------------- JSON

    def to_dict(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "before":
                value = [b.to_dict() for b in value]
            elif f.name == "streams":
                value = [s.to_dict() for s in value]
            elif f.name in ("members", "member_deadlines", "member_seconds"):
                if not value:  # a query's own batch: its JSON as before groups
                    continue
                value = list(value)
            elif f.name == "turn_policy" and value == "edf":  # the default: its JSON as before
                continue
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, value: Any) -> "Batch":
        """A batch from its JSON form, checked: every required field present, no unknown
        one, numbers and flags of the right kind. A :class:`Batch` passes through."""
        if isinstance(value, Batch):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"expected one entry of the plan task's output, got {value!r}", "batch")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ConfigError(f"unknown field(s) {', '.join(unknown)} in a plan entry", "batch")
        required = [n for n, f in known.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in value]
        if missing:
            raise ConfigError(f"a plan entry lacks {', '.join(missing)}", "batch")
        for name in ("index", "of", "units", "cumulative", "expected_total"):
            if not isinstance(value[name], int) or isinstance(value[name], bool):
                raise ConfigError(f"{name} must be a whole number, got {value[name]!r}", "batch")
        for name in ("ready_ts", "latest_start_ts", "cost", "remaining_cost", "deadline_ts"):
            if not isinstance(value[name], _NUMBER) or isinstance(value[name], bool):
                raise ConfigError(f"{name} must be a number of seconds, got {value[name]!r}", "batch")
        for name in ("last", "backfill", "known_total", "spare", "skip", "late"):
            if name in value and not isinstance(value[name], bool):
                raise ConfigError(f"{name} must be true or false, got {value[name]!r}", "batch")
        data = dict(value)
        data["before"] = tuple(cls.from_dict(b) for b in data.get("before") or ())
        if data.get("turn_ts") is None:
            data["turn_ts"] = 0.0
        return cls(**data)


    @classmethod
    def from_json(cls, text: str) -> "Batch":
        """A batch from its JSON text (a job's argument), checked as :meth:`from_dict` checks it."""
        import json

        return cls.from_dict(json.loads(text))


def batches_from(values: Any) -> list[Batch]:
    """A list of plan entries (an XCom value) as batches."""
    if values is None:
        return []
    return [Batch.from_dict(v) for v in values]
