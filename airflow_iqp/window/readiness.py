"""When a batch may start, and its claim: the paper's dynamic rule (section 4.4), and the fused tail's wait."""

from __future__ import annotations

import errno
import os
import time
from typing import Any

from airflow_iqp.filecheck import check_claim
from airflow_iqp.landing import count_names, list_units
from airflow_iqp.store import ClaimError
from airflow_iqp.streams import files_of
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.replan import effective, fresh_models, models_in_effect, recost, replan, replan_after

#: How often the fused tail's task looks at the landing directory while it waits, and a
#: batch next in line at the gate looks for its turn: with tight deadlines a tenth of a
#: second after the window's end matters.
TAIL_POLL_S = 0.02
#: A batch with others ahead of it at the gate looks this many times less often: only the
#: one next in line needs to be quick, and eight tasks polling 50 times a second would take
#: a good part of a core from the batch that runs.
BEHIND_POLL_FACTOR = 10


#: The last batch of a window whose count is known waits this much longer than the window's
#: end plus ``grace`` for the units still missing from that count (never past its latest
#: safe start): a unit due at the window's end, published a moment after it, is not left
#: late for nothing.
LAST_UNIT_GRACE_S = 2.0


def fire_at(batch: Batch) -> float:
    """When a batch fires on time alone: its latest safe start; the last batch at its ready
    time, the window's end plus ``grace`` (and not before its turn), or up to
    :data:`LAST_UNIT_GRACE_S` later, within its latest start, when the window's count is known.

    The last batch never fires before its ready time, whatever has been counted: a window's
    count of units (``Arrival(units=...)``) is a hint, and a count reached early (a bad file,
    a writer's extra file) must not leave the files that arrive before the window's end
    behind."""
    batch = effective(batch)
    if batch.late or (batch.last and not batch.known_total):
        return max(batch.ready_ts, batch.turn_ts)
    if batch.last:
        wait = min(batch.latest_start_ts, batch.ready_ts + LAST_UNIT_GRACE_S)
        return max(batch.ready_ts, wait, batch.turn_ts)
    return batch.latest_start_ts


def batch_ready(batch: Batch, now: float, arrived: int | None = None, listing: Any = None) -> str | None:
    """Why the batch may start now, or None: the paper's dynamic rule, whichever comes first.

    ``"units"``: its planned units have arrived and the batch before it has claimed (for
    the last batch: the window's expected count, and not before the window's end plus
    ``grace``); ``"time"``: :func:`fire_at` has come. Never before the batch's turn on a shared cluster (``turn_ts``,
    see ``QueryConfig.ahead``).

    ``listing`` (a :class:`~airflow_iqp.window.listing.Listing`) lists the landing
    directory through a cache that the waits of one process share; without it, the
    directory is listed here.
    """
    batch = effective(batch)
    if now < batch.turn_ts:
        return None
    if batch.late:  # after its time, and once the window's first revision is written
        written = batch.window_state().manifest() is not None
        due = now >= fire_at(batch) and (written or now >= batch.deadline_ts + batch.lateness)
        return "time" if due else None
    if batch.skip:  # the re-plan gave it nothing: it passes once the one before it claimed
        return "skip" if _previous_decided(batch) else ("time" if now >= fire_at(batch) else None)
    # When its time has come the batch fires whatever has arrived; it fires on "units" if
    # they are all there by then (a last batch whose wait ends as the window does).
    on_time = "time" if now >= fire_at(batch) else None
    if batch.spare or (batch.last and not batch.known_total):
        return on_time  # a checkpoint and the last batch of an unknown total fire on time
    if batch.last and now < batch.ready_ts:
        return None
    needed = batch.expected_total if batch.last else batch.cumulative
    if arrived is None:
        arrived = _arrived(batch, now, needed, listing)
    if arrived < needed or not _previous_decided(batch):
        return on_time
    return "units"


def _arrived(batch: Batch, now: float, needed: int, listing: Any = None) -> int:
    """The complete units of the batch's window landed by now; fewer than ``needed`` may be
    a cheaper count."""
    count, units = (listing.count, listing.units) if listing is not None else (count_names, list_units)
    streams = batch.streams
    # Many tasks poll near the window's end: a directory per window is counted (one
    # listing) before the full, per-stream listing of complete units. A flat or
    # partitioned layout holds other windows' files too: its units are listed at once.
    if streams[0].window is None and not streams[0].partitions:
        counted = count(batch.landing)
        if counted < needed:
            return counted
    listed = units(batch.landing, streams)
    batch.window_state().note_seen([u.name for u in listed], now)
    return len(listed)


def may_compute_ahead(batch: Batch, now: float, folding: Batch | None = None) -> bool:
    """The last batch of a window whose count of units is known (``Arrival(units=...)``),
    before its ready time, once that count has landed and the batch before it has claimed:
    a fused tail may then compute its result ahead, and write it when the batch claims at
    its ready time only if that claim reads exactly the files it computed from
    (:func:`airflow_iqp.spark.ahead.compute_ahead`). The claim itself keeps waiting for the
    ready time (:func:`fire_at`): a count is a hint.

    ``folding``: a batch of the tail's ``before`` that has not claimed, whose units and
    those of the batches after it the result computed ahead would take (:func:`leave_to_tail`);
    then the batch before ``folding`` must have claimed instead."""
    batch = effective(batch)
    if not (batch.last and batch.known_total) or batch.late or batch.skip or batch.max_units is not None:
        return False
    ws = batch.window_state()
    if not batch.turn_ts <= now < batch.ready_ts or ws.has_claim(batch.index):
        return False
    if folding is not None and (ws.has_claim(folding.index) or folding.max_units is not None):
        return False
    return (_arrived(batch, now, batch.expected_total) >= batch.expected_total
            and _previous_decided(batch if folding is None else effective(folding)))


def planned_units_landed(batch: Batch, now: float) -> bool:
    """Whether every unit planned up to and including ``batch`` has landed by ``now``."""
    return _arrived(batch, now, batch.cumulative) >= batch.cumulative


def count_wait_until(entry: Batch, tail: Batch, now: float) -> float:
    """Until when a single query's batch of its fused tail's ``before`` (``entry``), whose
    time has come, waits for the window's count instead of running, so that it may leave its
    units to the result computed ahead (:func:`may_compute_ahead` with ``folding``); ``now``
    for no wait.

    Only where running ``entry`` now and the batches after it would finish after the deadline
    at the window's planned costs (no plan met it, its units are late, or the batch before it
    ran long) does it wait: a plan that meets the deadline is not put at risk for the count.
    The wait then lasts while that result (one batch over every unit not claimed, and the
    merge, at the same costs) would still finish no later than running ``entry`` now, and
    never past the last batch's ready time: if the count lands by then, the result is no
    later than running it; if not, ``entry`` starts at most that much later.

    With ``entry``'s planned units landed, the rest of the count is due when planned, at the
    last batch's ready time: it waits only if the result computed from then still finishes
    first. With some of them missing, the window's arrivals run behind the plan, and the last
    of them often land together: it waits for as long as that would pay."""
    models = models_in_effect(entry.window_state())
    if models is None or not (entry.known_total and tail.known_total) or entry.max_units is not None:
        return now
    cost, agg = models
    claims = entry.window_state().claims()
    rest = entry.expected_total - sum(len(c.get("units", [])) for c in claims.values())
    written = sum(1 for c in claims.values() if c.get("units"))
    at_once = cost.cost(max(1, rest)) + agg.cost(written + 1)
    finish = max(now + entry.remaining_cost - tail.remaining_cost, tail.ready_ts) + tail.remaining_cost
    if finish <= entry.deadline_ts:  # the plan meets the deadline without the count: not put at risk for it
        return now
    until = min(finish - at_once, tail.ready_ts)
    if until < tail.ready_ts and planned_units_landed(entry, now):  # the count, due when planned, comes too late
        return now
    return max(now, until)


def _previous_decided(batch: Batch) -> bool:
    """The batch before this one has claimed (and, for an unknown total, re-planned after it)."""
    if batch.index <= 1:
        return True
    ws = batch.window_state()
    previous = ws.claim_of(batch.index - 1)
    if previous is None:
        return False
    if batch.known_total or not previous.get("units"):
        return True
    return replan_after(ws) >= batch.index - 1


def tail_started(tail: Batch, now: float) -> str | None:
    """``"lead"`` once a fused tail's final task is due to start (its ``start_ts``,
    :func:`split_tail`), else None: what the wait before that task fires on."""
    return "lead" if now >= tail.start_ts else None


def to_rehearse(last: Batch) -> tuple[str, ...]:
    """The members of a group's fused tail (``last``, the plan's last entry) whose part is
    worth rehearsing before the window's end: those that, started earliest deadline first
    at the last batch's ready time and taking their planned seconds each, would finish
    less than their own planned seconds before their deadline. A first run of a plan can
    take twice a later one's (its code is generated and compiled), and such a member would
    then miss; the others have room for it. Without planned seconds, every member."""
    due = last.member_due()
    if not due:
        return tuple(last.members)
    out, t = [], last.ready_ts
    for m in last.members:  # earliest deadline first
        deadline, seconds = due[m]
        t += seconds
        if deadline - t < seconds:
            out.append(m)
    return tuple(out)


def tail_lead(entries: list[Batch], lead: float) -> float:
    """Seconds before the window's end that the fused tail of a plan (its batches,
    ``entries``, the last one the tail's) starts: the backend's ``lead``; for a group's
    tail, also twice the planned seconds of the members :func:`to_rehearse` names, the
    room to rehearse each of them before the window's end, the last one three times its
    seconds before it (:func:`airflow_iqp.spark.tail.rehearse_group_tail`). A rehearsal
    reads units the group has claimed, so that room never starts the tail before a second
    after the first batch's ready time: the first batch stays a task of its own, and a
    plan of one batch gets the backend's lead alone."""
    if len(entries) < 2:
        return lead
    last = entries[-1]
    due = last.member_due()
    extra = 2 * sum(due[m][1] for m in to_rehearse(last) if m in due)
    return min(lead + extra, max(lead, last.ready_ts - entries[0].ready_ts - 1.0))


#: A fused tail rehearses (:func:`~airflow_iqp.spark.tail.rehearse_tail`), or folds a new
#: partial into its state (:func:`~airflow_iqp.spark.tail.read_written`), only while the
#: window's end is at least this many times its expected seconds away, so that the job is
#: over before the last batch may claim.
REHEARSAL_ROOM = 3.0


def room_until(tail: Batch, before: float | None = None) -> float:
    """Until when a fused tail has room for a job before its last batch (:data:`REHEARSAL_ROOM`),
    or before ``before`` (the input of a batch it runs ahead of the last being due)."""
    end = tail.ready_ts if before is None else min(before, tail.ready_ts)
    return end - REHEARSAL_ROOM * tail.remaining_cost / tail.cost_scale


def record_start(ws, tail: Batch, backend: str) -> dict | None:
    """Record the tail's start-up, from its planned start (or its window's plan, if that was
    made later) to now, its session ready: the next windows' tails start ahead by it
    (:func:`~airflow_iqp.window.costs.tail_start_lead`). A backfilled window's tail has no
    planned start."""
    if tail.backfill or not tail.start_ts:
        return None
    since = max(tail.start_ts, (ws.doc("plan") or {}).get("planned_at") or 0.0)
    return ws.store.record_tail_start(query=ws.query_id, backend=backend, window=ws.window_id,
                                      seconds=max(0.0, time.time() - since))


def split_tail(entries: list[Batch], lead: float) -> tuple[list[Batch], Batch | None]:
    """(the batches mapped as tasks, the fused tail) of a plan whose final task runs its last batch.

    The final task starts ``lead`` seconds before the last batch's input is complete (its
    ready time, the window's end): the tail is the last entry with that time (``start_ts``)
    and the batches ready after it (``before``), which the final task runs too, in order, on
    its own open session: past that point no batch waits for a task to start.
    """
    if not entries:
        return [], None
    *earlier, last = entries
    start = last.ready_ts - lead
    k = len(earlier)
    while k and earlier[k - 1].ready_ts >= start:
        k -= 1
    return earlier[:k], last.with_(start_ts=start, before=tuple(earlier[k:]))


def fold_into_tail(entry: Batch, tail: Batch, now: float) -> dict | None:
    """A batch of a fused tail's ``before`` that has not claimed by the time the last batch
    may claim (the window's end and grace are past: an earlier batch ran late) leaves its
    units to the last batch, which runs them in the same job as the merge. Run on its own it
    would add a job, and a partial written and read again, after the window's end, where the
    plan had it done before. Returns its empty claim, or None when it runs as planned (an
    unknown total, which re-plans as each batch claims, always does)."""
    if not entry.known_total or now < tail.ready_ts:
        return None
    return leave_to_tail(entry)


def leave_to_tail(entry: Batch) -> dict | None:
    """Claim nothing for a batch of a fused tail's ``before``, so that its units go to the last
    batch (:func:`fold_into_tail`, or a result computed ahead that took them); None if it
    has claimed already (a retry: it claimed in the earlier attempt)."""
    ws = entry.window_state()
    if ws.has_claim(entry.index):
        return None
    return ws.claim(entry.index, [], [])


def wait_ready(batch: Batch, poll: float = TAIL_POLL_S, sleep: Any = time.sleep) -> None:
    """Wait in process until :func:`batch_ready` says the batch may start (see :func:`wait_and_claim`)."""
    while batch_ready(batch, time.time()) is None:
        sleep(max(poll, min(1.0, batch.ready_ts - 1.0 - time.time())))


def wait_and_claim(batch: Batch, poll: float = TAIL_POLL_S, sleep: Any = time.sleep) -> dict:
    """In the final task of a fused tail: wait in process until a batch may start, then claim for it.

    The task started before the batch's input is complete, so what is left to wait is
    short; it polls the landing directory every ``poll`` seconds (a directory listing),
    and at most once a second until a second before the batch's planned ready time (a
    task started a minute early does not list the directory 1200 times). The wait ends at
    the batch's fire time at the latest, when :func:`batch_ready` says ``"time"``. Returns
    the claim manifest (a retry re-reads the same claim).
    """
    if not batch.window_state().has_claim(batch.index):
        wait_ready(batch, poll, sleep)
    return claim_batch(batch)


#: How often a claim lists again after losing a race for units to another batch.
CLAIM_ATTEMPTS = 3


def claim_batch(batch: Batch, now: float | None = None) -> dict:
    """Claim every arrived, unclaimed unit for this batch (once: a retry re-reads the claim).

    A MinBatch of dynamic mode claims at most its size (``max_units``). Batches that fire
    at the same moment may race for the same units: the loser of the race lists again and
    claims what is left. A local landing directory that is missing after the window's units
    were seen in it raises ``FileNotFoundError`` (a transient error the waits retry) rather
    than claiming nothing.
    """
    batch = effective(batch)
    ws = batch.window_state()
    claim = ws.claim_of(batch.index)
    if claim is not None:
        return claim
    if batch.skip:
        return ws.claim(batch.index, [], [])
    for attempt in range(1, CLAIM_ATTEMPTS + 1):
        try:
            return _claim_unclaimed(batch, ws, now)
        except ClaimError:  # another batch claimed some of these units after we looked
            if attempt == CLAIM_ATTEMPTS:
                raise


def unclaimed_units(batch: Batch, ws) -> list:
    """The complete units of the batch's window listed now that no batch has claimed."""
    return _listing(batch, ws)[2]


def _listing(batch: Batch, ws) -> tuple[list, set, list]:
    """(every complete unit of the batch's window listed now, the names claimed, those not claimed)."""
    taken = ws.claimed_units()
    listed = list_units(batch.landing, batch.streams)
    return listed, taken, [p for p in listed if p.name not in taken]


def _claim_unclaimed(batch: Batch, ws, now: float | None) -> dict:
    streams = batch.streams
    listed, taken, units = _listing(batch, ws)
    seen = ws.note_seen([u.name for u in listed], now)
    if not listed and seen and "://" not in batch.landing and not os.path.isdir(batch.landing):
        # This window's units were seen there: a missing directory is a mount's blip, not an
        # empty window, and claiming nothing would hand the batch's units to the next one.
        raise FileNotFoundError(errno.ENOENT, "the landing directory is gone, though this window's units "
                                "were seen in it", batch.landing)
    if batch.max_units is not None:  # a MinBatch takes its size, oldest units first
        units = units[: batch.max_units]
    # The rest of the window is planned again: as its units arrive (an unknown total), and
    # with the costs the history gives now where they changed since it was planned.
    fresh = fresh_models(batch)
    if not batch.last and (fresh is not None or not batch.known_total):
        run_now, _doc = replan(batch, len(taken), len(units), time.time() if now is None else now, fresh)
        if not run_now:
            units = []
    elif batch.last and fresh is not None:
        recost(batch, len(units), fresh)
    found = check_claim(ws, streams, units) if units else None  # the files' check, before any Spark job
    return ws.claim(batch.index, [p.name for p in units], files_of(units, streams), arrived=seen, found=found)


