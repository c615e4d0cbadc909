"""Which ready batch runs next: LLF, EDF, SJF and RR (section 4.2).

Pure Python (layer 1). The simulator orders ready batches with :func:`priority_key`;
the Airflow priority-weight strategies turn the same keys into task weights with
:func:`airflow_weight`. One definition of each policy serves both.

Every key sorts ascending: the smallest key runs first.

* EDF: the query's deadline.
* LLF: laxity, ``deadline - now - remaining_cost`` (eq. 9). At one moment ``now`` is the
  same for every candidate, so ordering by ``deadline - remaining_cost`` is the same
  order. That is the key Airflow can fix per batch when the plan is mapped.
* SJF: the cost of the batch about to run.
* RR: no fixed key. The simulator cycles over queries; Airflow cannot express it.

:func:`most_in_time` orders the members of a group's fused tail: EDF among the most of
them that can still meet their deadlines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

from airflow_iqp.errors import ConfigError


class Policy(str, Enum):
    LLF = "llf"
    EDF = "edf"
    SJF = "sjf"
    RR = "rr"

    @classmethod
    def parse(cls, name: str) -> "Policy":
        try:
            return cls(str(name).lower())
        except ValueError:
            raise ConfigError(f"unknown policy {name!r}; expected one of "
                              f"{', '.join(p.value for p in cls)}", "policy") from None

    @property
    def has_fixed_key(self) -> bool:
        """Whether a batch's priority can be fixed when it is planned (all but RR)."""
        return self is not Policy.RR


def priority_key(policy: Policy, *, deadline: float, remaining_cost: float, batch_cost: float) -> float:
    """The ascending sort key of a ready batch under ``policy`` (LLF without ``now``: see module doc)."""
    if policy is Policy.EDF:
        return deadline
    if policy is Policy.LLF:
        return deadline - remaining_cost
    if policy is Policy.SJF:
        return batch_cost
    raise ConfigError("round robin has no fixed per-batch key; it is simulated only", "policy")


#: Airflow stores priority weights as signed 32-bit integers.
WEIGHT_MAX = 2**31 - 1
#: Keys are mirrored around this weight, far above Airflow's default weights
#: (1 + downstream tasks), so batches outrank plain tasks in a pool's queue.
WEIGHT_BASE = 2**30
#: Deadlines are counted from 2025-01-01T00:00:00Z (Unix seconds).
DEADLINE_REFERENCE = 1735689600.0


def airflow_weight(policy: Policy, *, deadline: float, remaining_cost: float, batch_cost: float) -> int:
    """The key as an Airflow priority weight: larger runs first, within 32 bits.

    ``deadline`` is Unix seconds. EDF and LLF keys count whole seconds from 2025, so
    deadlines within +-34 years of it keep their order; SJF counts milliseconds of
    batch cost (up to 12 days). Keys beyond the range are clamped, which can only tie
    them, never reverse their order.
    """
    key = priority_key(policy, deadline=deadline, remaining_cost=remaining_cost, batch_cost=batch_cost)
    reference, resolution = (0.0, 0.001) if policy is Policy.SJF else (DEADLINE_REFERENCE, 1.0)
    return max(1, min(WEIGHT_MAX, WEIGHT_BASE - round((key - reference) / resolution)))


#: A job :func:`most_in_time` cannot keep in time still runs in its place, not after the
#: others, where it is expected to end at most this share of its own seconds late.
TRY_LATENESS = 0.5


def most_in_time(waiting: Sequence[str], now: float, due: Mapping[str, tuple[float, float]],
                 pace: float = 1.0) -> str:
    """Which of ``waiting`` starts next, so that as many of them as can meet their deadlines
    do: they run earliest deadline first, the largest set that, run one after another from
    ``now`` and each taking its expected seconds times ``pace``, all end in time (Moore and
    Hodgson's rule, optimal for the number of jobs in time on one machine), and each of the
    others in its place among them where that makes none of them end late and it is within
    reach of its own deadline. ``due``: each one's (deadline, expected seconds); one without
    is taken as due last and in time.

    Plain EDF is optimal while every deadline can be met. When they cannot, it starts a
    job that misses anyway, and every job after it waits for it: each may miss in turn
    (EDF's domino effect under overload). Letting only the jobs that cannot end in time
    yield is not enough either: a long job that can still just make its deadline makes
    several shorter ones after it miss theirs. The rule walks the jobs earliest deadline
    first and, each time the one added would end late, drops the longest kept so far
    (ties: the one due latest). A job dropped still runs in its place, not after the
    others, where the slack of those kept covers it and it is expected to end at most
    :data:`TRY_LATENESS` of its seconds late: its seconds are an estimate, and it may end in
    time yet. Asked again as each job ends, with the pace measured so far, the rule
    re-plans the rest.
    """
    if not waiting:
        raise ConfigError("nothing is waiting to run", "waiting")
    order = sorted(waiting, key=lambda m: due[m][0] if m in due else float("inf"))
    seconds = {m: pace * due[m][1] if m in due else 0.0 for m in order}
    kept: list[str] = []
    end = now
    for m in order:
        kept.append(m)
        end += seconds[m]
        if m in due and end > due[m][0]:
            longest = max(reversed(kept), key=seconds.__getitem__)  # ties: the one due latest
            kept.remove(longest)
            end -= seconds[longest]

    def worth_it(run: list[str]) -> bool:
        """Every kept job of ``run`` ends in time, and every other at most TRY_LATENESS of its seconds late."""
        t = now
        for m in run:
            t += seconds[m]
            late = t - due[m][0] if m in due else 0.0
            if late > 0 and (m in kept or late > TRY_LATENESS * seconds[m]):
                return False
        return True

    run = list(kept)
    for m in order:  # the dropped, each where it is due, where that is worth it
        if m not in kept:
            at = sum(1 for r in run if order.index(r) < order.index(m))
            tried = [*run[:at], m, *run[at:]]
            if worth_it(tried):
                run = tried
    return (run or order)[0]
