"""A discrete-event simulator of many queries sharing one cluster (sections 4 and 7.4).

Each query has its own window, arrival model, cost model, final-aggregation cost and
deadline, and is submitted at ``submit_at``. The executor is non-preemptive with
``slots`` slots (1 is the paper's model); a query runs at most one batch at a time.

With MinBatch, each query's batches are cut to ``min_batch_size(rsf, c_max)`` units. The
k-th batch becomes ready when its MinBatch has arrived, or when its estimated input
time (when the arrival model expects k MinBatches) has come and at least one unit is
there, whichever is first (section 4.4). A batch
triggered by time takes what has arrived. The last batch takes the remainder once the
window's last unit has arrived, and the final aggregation runs in the same job (section 6.1).
Without MinBatch (the baseline of figure 8), a query is ready whenever any unit is
waiting, and its batch takes everything that has arrived.

A query's ``arrival`` is the model the scheduler believes: it gives the estimated input
times. ``actual_arrival`` is what really arrives (the variable profiles of figure 9),
and defaults to the model. When ``total_known`` is False, an estimator derives the
total from the observed rate (:func:`estimate_total`) until the window ends.

Pure Python (layer 1). The policies and MinBatch sizing are the functions the Airflow
runtime uses.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import asdict, dataclass, field

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.minbatch import MinBatch, batched_cost, min_batch_size
from airflow_iqp.planning.models import ArrivalModel, arrival_from_dict, within
from airflow_iqp.planning.policies import Policy, priority_key
from airflow_iqp.planning.spec import PlanSpec


@dataclass(frozen=True)
class SimQuery:
    """One query of a scenario: a plan spec, plus when it is submitted and what really arrives."""

    id: str
    submit_at: float
    spec: PlanSpec
    actual_arrival: ArrivalModel | None = None
    total_known: bool = True

    window_start = property(lambda self: self.spec.window_start)
    window_end = property(lambda self: self.spec.window_end)
    deadline = property(lambda self: self.spec.deadline)
    arrival = property(lambda self: self.spec.arrival)
    cost = property(lambda self: self.spec.cost)
    final_agg = property(lambda self: self.spec.final_agg)

    @property
    def actual(self) -> ArrivalModel:
        return self.actual_arrival or self.spec.arrival

    @classmethod
    def from_dict(cls, d: dict, where: str = "query") -> "SimQuery":
        if not isinstance(d, dict):
            raise ConfigError("must be an object", where)
        if "id" not in d:
            raise ConfigError("missing", f"{where}.id")
        try:
            spec = PlanSpec.from_dict({k: v for k, v in d.items() if k in SPEC_KEYS})
        except ConfigError as exc:
            raise exc.under(where) from None
        actual = None
        if d.get("actual_arrival"):
            actual = arrival_from_dict(d["actual_arrival"], start=spec.window_start, where=f"{where}.actual_arrival")
            if actual.total != spec.arrival.total:
                raise ConfigError(f"holds {actual.total} units but the arrival model {spec.arrival.total}",
                                  f"{where}.actual_arrival")
        return cls(id=str(d["id"]), submit_at=float(d.get("submit_at", spec.window_start)), spec=spec,
                   actual_arrival=actual, total_known=bool(d.get("total_known", True)))


#: The keys of a scenario query that make up its plan spec.
SPEC_KEYS = ("window_start", "window_end", "deadline", "arrival", "cost", "final_agg", "method")


@dataclass(frozen=True)
class Scenario:
    queries: tuple[SimQuery, ...]
    slots: int = 1
    rsf: float = 0.5
    c_max: float | None = 30.0

    @classmethod
    def from_dict(cls, d: dict) -> "Scenario":
        if not isinstance(d, dict) or not isinstance(d.get("queries"), list) or not d["queries"]:
            raise ConfigError("a scenario needs a non-empty list of queries", "queries")
        slots = d.get("slots", 1)
        if not isinstance(slots, int) or slots < 1:
            raise ConfigError(f"must be a whole number >= 1, got {slots!r}", "slots")
        qs = tuple(SimQuery.from_dict(q, f"queries[{i}]") for i, q in enumerate(d["queries"]))
        ids = [q.id for q in qs]
        if len(set(ids)) != len(ids):
            raise ConfigError("query ids must be unique", "queries")
        return cls(queries=qs, slots=slots, rsf=float(d.get("rsf", 0.5)), c_max=d.get("c_max", 30.0))

    @classmethod
    def from_json(cls, text: str) -> "Scenario":
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not valid JSON: {exc}", "scenario") from None


@dataclass
class SimBatch:
    start: float
    end: float
    units: int
    trigger: str       #: "minbatch", "time", "rest" (the last units), or "available" (no MinBatch)
    final: bool = False


@dataclass
class QueryResult:
    id: str
    deadline: float
    completion: float | None
    met: bool
    cost: float
    single_batch_cost: float
    batches: list[SimBatch] = field(default_factory=list)
    min_batch: MinBatch | None = None

    @property
    def bound_kept(self) -> bool:
        return self.min_batch is None or self.min_batch.bound_kept

    def to_dict(self) -> dict:
        d = asdict(self)
        d["batches"] = len(self.batches)
        d["bound_kept"] = self.bound_kept
        d["min_batch"] = self.min_batch.to_dict() if self.min_batch else None
        return d


@dataclass
class SimResult:
    policy: str
    minbatch: bool
    queries: list[QueryResult]

    @property
    def deadlines_met(self) -> int:
        return sum(q.met for q in self.queries)

    @property
    def normalized_cost(self) -> float:
        single = sum(q.single_batch_cost for q in self.queries)
        return sum(q.cost for q in self.queries) / single if single else 0.0

    @property
    def batches(self) -> int:
        return sum(len(q.batches) for q in self.queries)

    def summary(self) -> dict:
        return {"policy": self.policy, "minbatch": self.minbatch, "queries": len(self.queries),
                "deadlines_met": self.deadlines_met, "normalized_cost": self.normalized_cost,
                "batches": self.batches}


def estimate_total(arrival: ArrivalModel, window_start: float, window_end: float, now: float) -> int:
    """The window's total from the rate observed so far; exact once the window has ended."""
    seen = arrival.count_at(now)
    if now >= window_end or now <= window_start:
        return seen if now >= window_end else max(seen, 1)
    return max(seen, round(seen * (window_end - window_start) / (now - window_start)))


class _State:
    """One query's progress inside the simulation."""

    def __init__(self, q: SimQuery, scenario: Scenario, use_minbatch: bool):
        self.q = q
        self.done_units = 0
        self.running = False
        self.finished = False
        self.batches: list[SimBatch] = []
        self.scenario = scenario
        # With an unknown total, the arrival model's total is the prior; resize() then
        # re-derives the MinBatch from the observed rate as batches start.
        self.mb = self._size(q.arrival.total) if use_minbatch else None

    def _size(self, total: int) -> MinBatch:
        q, sc = self.q, self.scenario
        return min_batch_size(q.cost, q.final_agg, max(total, 1), sc.rsf, sc.c_max)

    def resize(self, t: float) -> None:
        if self.mb is not None and not self.q.total_known and t > self.q.window_start:
            self.mb = self._size(estimate_total(self.q.actual, self.q.window_start, self.q.window_end, t))

    @property
    def total(self) -> int:
        return self.q.actual.total

    def arrived(self, t: float) -> int:
        return self.q.actual.count_at(t)

    def waiting(self, t: float) -> int:
        return self.arrived(t) - self.done_units

    def ready_time(self) -> float:
        """When the next batch becomes ready (may be in the past); inf if nothing is left."""
        q, p = self.q, self.done_units
        if self.finished or p >= self.total:
            return float("inf")
        first = max(q.actual.time_of(p + 1), q.submit_at)
        if self.mb is None:
            return first
        by_count = q.actual.time_of(min(p + self.mb.size, self.total))
        # The estimated input time of this batch, fixed when the MinBatch size was
        # determined: when the model expects k MinBatches to have arrived (section 4.4).
        # Counting from the units done instead would put every batch after a slow
        # stretch in the past, and cut the rest of the window into tiny batches.
        k = len(self.batches) + 1
        by_time = q.arrival.time_of(min(k * self.mb.size, q.arrival.total))
        return max(q.submit_at, min(by_count, max(by_time, first)))

    def take(self, t: float) -> tuple[int, str]:
        """Units for a batch starting at ``t``, and what triggered it."""
        waiting = self.waiting(t)
        if self.mb is None:
            return waiting, "available"
        if self.done_units + waiting >= self.total:
            rest = self.total - self.done_units
            if rest <= self.mb.size:
                return rest, "rest"
        if waiting >= self.mb.size:
            return self.mb.size, "minbatch"
        return waiting, "time"

    def remaining_cost(self, t: float) -> float:
        """FindMinCompCost: the pending units in MinBatches (or one batch), final aggregation included."""
        q = self.q
        total = self.total if q.total_known else estimate_total(q.actual, q.window_start, q.window_end, t)
        pending = max(total - self.done_units, 0)
        size = self.mb.size if self.mb else max(pending, 1)
        k = len(self.batches) + -(-pending // size)
        return batched_cost(q.cost, _NoAgg, pending, size) + q.final_agg.cost(k)

    def job_cost(self, units: int, last: bool) -> float:
        c = self.q.cost.cost(units)
        if last:
            c += self.q.final_agg.cost(len(self.batches) + 1)
        return c


class _NoAggCost:
    def cost(self, k: int) -> float:
        return 0.0


_NoAgg = _NoAggCost()


def simulate(scenario: Scenario, policy: Policy | str, *, minbatch: bool = True) -> SimResult:
    """Run every query of ``scenario`` to completion under ``policy``."""
    policy = Policy.parse(policy) if isinstance(policy, str) else policy
    states = [_State(q, scenario, minbatch) for q in scenario.queries]
    free_at = [0.0] * scenario.slots          # when each slot is next free
    running: list[tuple[float, int, int]] = []  # (end, slot, state index)
    rr_next = 0
    t = min(q.submit_at for q in scenario.queries)
    while True:
        # Retire every job that has ended by t.
        while running and running[0][0] <= t:
            _end, slot, i = heapq.heappop(running)
            states[i].running = False
        idle = [s for s in range(scenario.slots) if free_at[s] <= t]
        ready = [i for i, st in enumerate(states)
                 if not st.running and not st.finished and st.ready_time() <= t and st.waiting(t) > 0]
        if idle and ready:
            i = _choose(policy, states, ready, t, rr_next)
            if policy is Policy.RR:
                rr_next = (i + 1) % len(states)
            st = states[i]
            units, trigger = st.take(t)
            last = st.done_units + units == st.total
            dur = st.job_cost(units, last)
            slot = idle[0]
            st.batches.append(SimBatch(start=t, end=t + dur, units=units, trigger=trigger, final=last))
            st.done_units += units
            st.resize(t)
            st.running = True
            if last:
                st.finished = True
            free_at[slot] = t + dur
            heapq.heappush(running, (t + dur, slot, i))
            continue
        # Advance to the next moment something can change.
        nxt = [e for e, _s, _i in running if e > t]
        if idle:
            nxt += [st.ready_time() for st in states if not st.running and not st.finished]
            nxt += [st.q.actual.time_of(st.done_units + 1) for st in states
                    if not st.running and not st.finished and st.done_units < st.total]
        nxt = [x for x in nxt if x > t]
        if not nxt:
            break
        t = min(nxt)
    results = []
    for st in states:
        completion = st.batches[-1].end if st.finished else None
        results.append(QueryResult(
            id=st.q.id, deadline=st.q.deadline, completion=completion,
            met=completion is not None and within(completion, st.q.deadline),
            cost=sum(b.end - b.start for b in st.batches), single_batch_cost=st.q.cost.cost(st.total),
            batches=st.batches, min_batch=st.mb))
    return SimResult(policy=policy.value, minbatch=minbatch, queries=results)


def _choose(policy: Policy, states: list[_State], ready: list[int], t: float, rr_next: int) -> int:
    if policy is Policy.RR:
        n = len(states)
        return min(ready, key=lambda i: (i - rr_next) % n)

    def key(i: int) -> tuple[float, str]:
        st = states[i]
        units, _ = st.take(t)
        k = priority_key(policy, deadline=st.q.deadline, remaining_cost=st.remaining_cost(t),
                         batch_cost=st.job_cost(units, st.done_units + units == st.total))
        return k, st.q.id

    return min(ready, key=key)
