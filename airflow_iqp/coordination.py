"""The cross-query gate: queries of one state directory take turns on the cluster, earliest
deadline first, or least laxity first for dynamic mode's batches (:func:`turn_key`)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

from airflow_iqp.errors import ConfigError
from airflow_iqp.filecheck import kept_units
from airflow_iqp.planning.gate import Planned, made_late
from airflow_iqp.planning.models import cost_model_from_dict, final_agg_from_dict
from airflow_iqp.store import open_store
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.readiness import BEHIND_POLL_FACTOR, TAIL_POLL_S, fire_at

#: A planned batch of another query that has not claimed this long after its fire time is
#: not coming (its DAG failed or was paused): it no longer holds later-deadline batches back.
UPCOMING_GRACE_S = 5.0


def upcoming(batch: Batch) -> list[Batch]:
    """The planned batches of the other queries of the same window (their plans in the
    store) due before ``batch`` (earliest deadline first, as the gate orders)."""
    key = (batch.deadline_ts, batch.query)
    store = open_store(batch.state_dir)
    out = []
    for query in store.queries():
        if query == batch.window_state().query_id:
            continue
        try:
            plan = store.window(query, batch.window_id).doc("plan")
            entries = [Batch.from_dict(e) for e in (plan or {}).get("batches", [])]
        except (OSError, ValueError):
            continue  # being written
        out += [e for e in entries if (e.deadline_ts, e.query) < key and not e.backfill]
    return out


def turn_key(batch: Batch) -> float:
    """What a batch queues for its turn by, the smallest first: its deadline (EDF), or under
    ``turn_policy="llf"`` (dynamic mode) its laxity as the window's state has it when the
    batch asks (section 4.2, eq. 9): the deadline less the work its query has left from
    this batch on (:func:`work_left`). ``now`` is the same for every waiting batch, and a
    query's work left does not change while its batch waits, so the order of these keys is
    the order of the waiting batches' laxities at every pick; unlike a priority weight,
    which is fixed when the plan is mapped, it counts the units really claimed and left.
    Keys of the two kinds sort together: a laxity is never later than its deadline, so where
    queries of one store mix the two, the dynamic-mode batches tend to go first."""
    if batch.turn_policy == "llf":
        return batch.deadline_ts - work_left(batch)
    return batch.deadline_ts


def work_left(batch: Batch) -> float:
    """Expected seconds of work the batch's query has left from this batch on, from its
    window's state: this batch's claimed units, the window's units no batch has claimed yet
    in batches of this one's planned size, and the merge of them all, at the window's
    planned cost models without their ``cost_scale`` (:func:`expected`). The plan entry's
    ``remaining_cost`` when the window has no stored plan, or claims nothing yet."""
    ws = batch.window_state()
    plan, claims = ws.doc("plan") or {}, ws.claims()
    try:
        cost, agg = cost_model_from_dict(plan["cost_model"]), final_agg_from_dict(plan["final_agg_model"])
    except (KeyError, TypeError, ValueError, ConfigError):
        return expected(batch, batch.remaining_cost)
    if batch.index not in claims:
        return expected(batch, batch.remaining_cost)
    own = len(kept_units(claims[batch.index]))
    rest = max(0, batch.expected_total - sum(len(c.get("units", [])) for c in claims.values()))
    size = max(1, batch.units)
    full, part = divmod(rest, size)
    done = sum(1 for b, c in claims.items() if c.get("units") and b != batch.index)
    work = cost.cost(own) + full * cost.cost(size) + (cost.cost(part) if part else 0.0)
    return expected(batch, work + agg.cost(done + 1 + full + (1 if part else 0)))


def expected(entry: Batch, planned: float) -> float:
    """A plan entry's planned seconds as expected: without its plan's ``cost_scale``, the
    pessimism the plan leaves room with, which a decision taken now need not repeat."""
    return planned / entry.cost_scale


def _as_planned(e: Batch) -> Planned:
    return Planned(query=e.query, index=e.index, ready=e.ready_ts, fire=fire_at(e), cost=expected(e, e.cost),
                   after=expected(e, e.remaining_cost - e.cost), deadline=e.deadline_ts)


def coming(entries: list[Batch], now: float, cost: float) -> list[Planned]:
    """Those of ``entries`` (other queries' plan entries) that a batch of ``cost`` seconds
    started now would make late (:func:`airflow_iqp.planning.gate.made_late`)."""
    by_key = {(e.query, e.index): e for e in entries}

    def claimed(p: Planned) -> bool:
        e = by_key[(p.query, p.index)]
        return e.window_state().has_claim(e.index)

    return made_late([_as_planned(e) for e in entries], now, cost, UPCOMING_GRACE_S, claimed)


@contextmanager
def cluster_turn(batch: Batch, slots: int, poll: float = TAIL_POLL_S, sleep: Any = time.sleep, *,
                 planned: float | None = None, until: float | None = None):
    """Run the enclosed Spark work when the batch's turn comes: at most ``slots`` batches at
    once across the queries of one state directory, the earliest deadline first (EDF), or
    the least laxity first for dynamic mode's batches (:func:`turn_key`).

    For the batches the final tasks of fused tails run (``split_tail``), the last ones all
    ready at their windows' ends: run together they share the cluster and the first
    deadline is missed; the paper's executor runs one batch at a time. ``slots <= 0`` is
    no gate. The store keeps the turns (:meth:`~airflow_iqp.store.base.StateStore.turns`):
    a batch queued or running whose task was killed no longer counts. A batch also leaves
    the cluster to a batch of a query due earlier that is not claimed yet but will be
    ready before this one's planned cost is over, and whose query
    would then miss its deadline (:func:`coming`): the gate takes no batch back once
    started. Being ready soon is not enough on its own (with many queries some batch due
    earlier is nearly always about to be ready, and a later one would starve), nor is
    being before its latest start (in a tight plan that is its ready time, and the cluster
    would idle). ``planned``: the planned seconds the enclosed work holds the cluster
    (default the batch's cost; a fused tail's last batch holds it through the merge too,
    its ``remaining_cost``). ``until``: a time after which the work is no longer wanted; the
    context then yields False without the turn (else True, once it has it).
    """
    if slots <= 0:
        yield True
        return
    name = f"{turn_key(batch):020.6f}-{batch.query}-{batch.window_id}-{batch.index:04d}"
    earlier = upcoming(batch)
    with open_store(batch.state_dir).turns().queue(name) as ticket:
        taken = False
        while not taken:
            soon = coming(earlier, time.time(), expected(batch, batch.cost if planned is None else planned))
            taken, ahead = ticket.try_take(slots, allowed=not soon)
            if not taken:
                if until is not None and time.time() >= until:
                    break
                sleep(poll * (BEHIND_POLL_FACTOR if ahead else 1))
        yield taken
