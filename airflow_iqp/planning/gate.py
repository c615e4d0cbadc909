"""The cross-query gate's decision: would running a batch now make a query due earlier late?

Several queries share one cluster and take turns, earliest deadline first
(``airflow_iqp.coordination.cluster_turn``). The gate takes no batch back once it has
started, so before a batch starts it asks whether another query's batch that is not yet
claimed would be ready while this one runs and would then finish its query after its
deadline. Pure: the caller turns plan entries into :class:`Planned` and says which are
claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Planned:
    """Another query's planned batch as the gate sees it: times on one clock, costs as expected."""

    query: str
    index: int
    ready: float     #: when its input is due
    fire: float      #: when it fires on time alone
    cost: float      #: expected seconds of the batch
    after: float     #: expected seconds after it to its query's result (its later batches' and the merge)
    deadline: float


def made_late(others: Sequence[Planned], now: float, cost: float, grace: float,
              claimed: Callable[[Planned], bool]) -> list[Planned]:
    """Those of ``others`` that a batch of ``cost`` seconds started at ``now`` would make late.

    A batch counts when it is not ``claimed``, is ready before this one is done, is not
    long overdue (``grace`` seconds past its fire time: its DAG failed or was paused), and
    its query, run from then on as planned (each batch no sooner than its input, then the
    merge), would finish after its deadline, and later than without this batch: a query
    that its input alone makes late does not hold the cluster back.
    """
    done = now + cost
    out = []
    for e in others:
        if e.ready > done or now > e.fire + grace or claimed(e):
            continue
        rest = sorted((f for f in others if f.query == e.query and f.index >= e.index), key=lambda f: f.index)

        def finish(start: float) -> float:
            t = start
            for f in rest:
                t = max(t, f.ready) + f.cost
            return t + rest[-1].after

        if finish(done) > max(e.deadline, finish(now)):
            out.append(e)
    return out
