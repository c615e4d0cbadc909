"""A group's fused tail after the window's end: its last batch, claimed once, read once,
and each member's step on it merged with its partials into its result, one member at a
time, earliest deadline first among those still in time (:func:`execute_group_tail`).
:func:`airflow_iqp.spark.tail.run_tail` calls it once the last batch may claim. No Airflow
import here.
"""

from __future__ import annotations

import time

from airflow_iqp.coordination import cluster_turn
from airflow_iqp.filecheck import files_to_read
from airflow_iqp.paths import is_local
from airflow_iqp.planning.policies import most_in_time
from airflow_iqp.query.store import load_query
from airflow_iqp.spark.ahead import NOT_YET, result_ahead, still_the_input
from airflow_iqp.spark.batch import in_lanes, read_shared
from airflow_iqp.spark.merge import execute_final, read_claims, unwritten
from airflow_iqp.spark.steps import partial_of
from airflow_iqp.store import WindowState
from airflow_iqp.streams import files_of
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.readiness import unclaimed_units


#: How many members a group's fused tail runs at once: one. Each member's result is due at
#: its own deadline, and a second member beside it on the session shares the cores and
#: delays it; the shared batches before the window's end run :data:`LANES` at once.
TAIL_LANES = 1


def execute_group_tail(spark, group: WindowState, tail_batch: int, members: tuple[str, ...],
                       static: str | dict | None, *, backend: str, history: bool = True,
                       before: tuple[int, ...] = (), kept: dict | None = None,
                       written: dict | None = None, due: dict | None = None, scale: float = 1.0,
                       computed: dict | None = None) -> dict:
    """A group's fused tail: its last batch, claimed once by the group, and every member's
    merge, in one Spark job. Each member first takes the group's claims as its own
    (:meth:`~airflow_iqp.store.WindowState.adopt_claim`), so that its merge checks every
    claimed unit against its partials. The batch's units are read once; then each member's
    step on them is merged with its written partials into its result, as
    :func:`~airflow_iqp.spark.tail.execute_tail` does for one query, and no member's partial
    of the last batch is written. The members run earliest deadline first, one at a time
    (:data:`TAIL_LANES`, :func:`~airflow_iqp.spark.batch.in_lanes`). With ``due`` (member
    -> its deadline and planned seconds, the tail entry's
    :meth:`~airflow_iqp.window.batch.Batch.member_due`), the members that cannot all meet
    their deadlines leave out the fewest, and those left out yield to the others
    (:func:`~airflow_iqp.planning.policies.most_in_time`): run first, a member that
    misses anyway, or a long one that just makes its own, would make several after it
    late. A member's seconds are what its step took in the window's latest shared batch,
    or the plan's if less, and 0 without such a step (:func:`_with_steps`), at the pace of
    the members done so far, never faster than ``scale`` (the plan's).

    ``before``: the tail's earlier batches. One that claimed but has no partial of a
    member's (a shared batch handed over when the last batch could claim,
    :func:`~airflow_iqp.spark.batch.execute_shared_batch`'s ``stop``) is read once too, and
    that member's step runs on its units with the last batch's: a member due earlier does
    not wait for the steps of members due later. ``kept``: such batches' units as the shared
    batch left them cached in this session (its ``keep``), not read again. ``written``:
    member -> its partials as :func:`~airflow_iqp.spark.tail.read_written` read them ahead.
    ``computed``: member -> its result computed ahead (:func:`compute_group_ahead`); one
    whose input the claim still is (:func:`~airflow_iqp.spark.ahead.still_the_input`) is
    written as it is, first among the members by its deadline, and nothing is run for it.
    A retry claims nothing again and writes each result again from the same claims: no
    unit is counted twice. Returns ``{"members": {member: its result manifest}, "started": {member: when its
    work started}}``; a member that fails fails the tail once the members already started
    are done, and the members not started yet do not start."""
    store = group.store
    windows = {m: store.window(m, group.window_id) for m in members}
    claims = group.claims()  # read once for every member
    for ws in windows.values():
        ws.adopt_claims(claims)
    saved = {m: load_query(m, store) for m in members}
    # Each member's batches to compute here: the last, and those handed over without its partial.
    todo = {m: tuple(b for b in (*before, tail_batch) if files_to_read(claims.get(b) or {})
                     and not windows[m].has_partial(b)) for m in members}
    ahead = {m: done for m, done in (computed or {}).items() if m in todo and set(todo[m]) <= {tail_batch}
             and still_the_input(done, windows[m], claims.get(tail_batch) or {}, m)}
    for m in ahead:
        todo[m] = ()
    read: dict = dict(kept or {})  # batch -> (inspection, {stream: DataFrame}), each read once
    started: dict = {}

    def finish(m: str) -> dict:
        started[m] = time.time()
        if m in ahead:
            done = ahead[m]
            out = execute_final(spark, windows[m], backend=backend, history=history, tail=(tail_batch, None),
                                computed_ahead=done, quarantined=done["quarantined"], tail_rows_in=done["rows_in"])
            print(f"airflow-iqp final_job: {m}: wrote {out['result']}, computed ahead, in "
                  f"{time.time() - started[m]:.2f} s", flush=True)
            return out
        tail, bad, rows_in = None, [], None
        if todo[m]:
            parts = [read[b] for b in todo[m]]
            tables = _union_tables([t for _i, t in parts])
            tail = (todo[m], partial_of(spark, saved[m], tables, static))
            bad = [q for i, _t in parts for q in i.quarantined]
            counts = [i.rows for i, _t in parts]
            rows_in = None if None in counts else sum(counts)
        out = execute_final(spark, windows[m], backend=backend, history=history, tail=tail, quarantined=bad,
                            tail_rows_in=rows_in, written=(written or {}).get(m))
        print(f"airflow-iqp final_job: {m}: wrote {out['result']} in {time.time() - started[m]:.2f} s"
              + (f" (its step on batches {list(todo[m])})" if len(todo[m]) > 1 else ""), flush=True)
        return out

    try:
        for b in dict.fromkeys(b for batches in todo.values() for b in batches if b not in read):
            claim, t0 = claims[b], time.time()
            read[b] = read_shared(spark, group, saved, files_to_read(claim), claim.get("checked"))
            print(f"airflow-iqp final_job: batch {b}: checked its files and planned their read in "
                  f"{time.time() - t0:.2f} s", flush=True)
        # A member computed ahead only writes its result: it takes no seconds of the cluster's.
        steps = _with_steps(due or {}, windows)
        pace = _Pace({m: (d, 0.0 if m in ahead else sec) for m, (d, sec) in steps.items()}, scale)
        out, _left = in_lanes(finish, list(members), pick=pace.next, lanes=TAIL_LANES,
                              on_done=lambda m, done: pace.done(m, done["written_at"] - started[m]))
    finally:
        for _i, tables in read.values():
            for df in tables.values():
                df.unpersist()
    return {"members": {m: out[m] for m in members}, "started": started}


def compute_group_ahead(spark, group: WindowState, tail: Batch, slots: int, windows: dict, written: dict,
                        computed: dict, held: dict) -> str | None:
    """A group's fused tail computed before its claim, once the window's count of units has
    landed (:func:`~airflow_iqp.window.readiness.may_compute_ahead`): the last batch's units,
    every unit listed that no batch has claimed, read once, and each member's step on them
    merged with its written partials, held in this process as its result's rows
    (:func:`~airflow_iqp.spark.ahead.result_ahead`), into ``computed`` (member -> result).
    Members go in the order the tail would run them
    (:func:`~airflow_iqp.planning.policies.most_in_time` at the pace of those done), and
    none starts once the last batch's ready time has come: the claim is due then, and the
    tail runs the others after it. Nothing is claimed or written; at the claim,
    :func:`execute_group_tail` writes each member's rows whose claim still reads these files
    over these partials, and runs the rest. The units' read, cached, is left in ``held``
    (``{"files", "read"}``): the rest run on it if the claim reads these files
    (:func:`hand_over_read`).

    The units of the count have often all landed well before the window's end, and a
    member's result is due soon after it: computed here, the member due first is written
    at the claim instead of after its step, and every member after it starts that much
    earlier. :data:`~airflow_iqp.spark.ahead.NOT_YET` while a claimed batch has not written
    a member's partial (it is still running), to be tried again; None otherwise (done, as
    far as the ready time let it; nothing where a member's result is not local; a failure
    is printed, and what was computed before it kept)."""
    if not all(is_local(w.location) for w in windows.values()):
        return None
    claims = read_claims(group)
    if any(unwritten(claims, w.written_partials()) for w in windows.values()):
        return NOT_YET
    tables: dict = {}
    try:
        files = files_of(unclaimed_units(tail, group), tail.streams)
        if not files:
            return None
        saved = {m: load_query(m, group.store) for m in windows}
        pace = _Pace(_with_steps(tail.member_due(), windows), tail.cost_scale or 1.0)
        with cluster_turn(tail, slots, planned=tail.remaining_cost, until=tail.ready_ts) as got:
            if not got:
                return None
            inspection, tables = read_shared(spark, group, saved, files, None)
            held.update(files=sorted(files), read=(inspection, tables))
            waiting = [m for m in windows if m not in computed]
            while waiting and time.time() < tail.ready_ts:
                m = pace.next(waiting)
                waiting.remove(m)
                t0 = time.time()
                done = result_ahead(spark, windows[m], saved[m], files, inspection, written.get(m),
                                    lambda m=m: partial_of(spark, saved[m], tables, tail.static or None))
                if done is not None:
                    computed[m] = done
                    pace.done(m, time.time() - t0)
                    print(f"airflow-iqp final_job: {m}: computed its result ahead from {len(files)} files in "
                          f"{done['meter'].wall_seconds:.2f} s", flush=True)
    except Exception as exc:  # noqa: BLE001 - computed ahead only saves time; the tail reports errors
        print(f"airflow-iqp final_job: {tail.label}: computing results ahead failed, ignored: "
              f"{type(exc).__name__}: {exc}", flush=True)
        for df in tables.values():
            df.unpersist()
        held.clear()
    return None


def hand_over_read(held: dict, claim: dict, kept: dict, batch: int) -> None:
    """The last batch's read that :func:`compute_group_ahead` left in ``held``, put in
    ``kept`` (batch -> read, what :func:`execute_group_tail` reads no batch again from) if
    ``claim`` reads exactly its files, none quarantined; else unpersisted. ``held`` is
    emptied either way."""
    read = held.pop("read", None)
    if read is None:
        return
    if held.pop("files") == sorted(files_to_read(claim)) and not claim.get("quarantined"):
        kept[batch] = read
    else:
        for df in read[1].values():
            df.unpersist()


def _with_steps(due: dict, windows: dict) -> dict:
    """``due`` (member -> its deadline and planned seconds) with each member's seconds
    what its step took in the window's latest shared batch (its partial's metrics), or
    the plan's if less; 0 for a member with no step measured in this window.

    That step ran on the same cluster in this window, on units read once and cached, as
    the tail's step runs. The plan's seconds come from the calibrated batch and merge
    jobs, each a job of its own that reads files and writes its output (on spark-submit
    with its own JVM), and can overrate a member's tail several times over: estimated too
    long, a member yields and misses a deadline it would have met. So the plan alone
    never makes a member yield: without a measured step it yields only once its deadline
    has passed."""
    out = {}
    for m, (deadline, planned) in due.items():
        written = windows[m].written_partials()
        step = windows[m].metrics(max(written)).get("wall_seconds") if written else None
        out[m] = (deadline, min(planned, step) if step else 0.0)
    return out


class _Pace:
    """How much longer than expected a group tail's members take: the seconds taken by the
    members done so far in this tail over the seconds expected of them (``due``, as
    :func:`_with_steps` gives them), and never less than ``scale`` (the plan's). It covers
    what those seconds do not: two lanes sharing the cores, a plan the JVM has compiled few
    times, the merge of the member's partials. A ratio of sums, not a mean of ratios: a
    member of a fraction of a second is mostly the fixed cost of a job, and its ratio says
    little about the seconds of a long member. A member that ran faster than expected does
    not make the others seem faster than the plan has them."""

    def __init__(self, due: dict, scale: float):
        self.due, self.scale = due, scale
        self.taken = self.expected = 0.0

    def done(self, member: str, seconds: float) -> None:
        planned = self.due.get(member, (0.0, 0.0))[1]
        if planned > 0:
            self.taken += seconds
            self.expected += planned

    def now(self) -> float:
        return max(self.scale, self.taken / self.expected) if self.expected else self.scale

    def next(self, waiting: list[str]) -> str:
        """The member to start now (:func:`~airflow_iqp.planning.policies.most_in_time`);
        the log names the members due before it that it passed over."""
        pace = self.now()
        m = most_in_time(waiting, time.time(), self.due, pace)
        passed = [w for w in waiting if m in self.due and w in self.due and self.due[w][0] < self.due[m][0]]
        if passed:
            print(f"airflow-iqp final_job: {', '.join(passed)} cannot meet their deadlines at {pace:.2f} x the "
                  f"expected seconds with the most members in time: {m} starts first", flush=True)
        return m


def _union_tables(parts: list[dict]) -> dict:
    """Several batches' ``{stream: DataFrame}``, one DataFrame per stream."""
    out: dict = {}
    for tables in parts:
        for name, df in tables.items():
            out[name] = out[name].unionByName(df) if name in out else df
    return out
