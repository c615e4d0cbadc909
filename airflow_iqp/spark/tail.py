"""The fused tail: a window's last batch and its merge in one Spark job, in the final task's session.

A fused tail's final task starts before the window's end and opens its session
(:func:`run_tail`): it runs the batches that become ready after it started, rehearses its
last step while there is time (:func:`rehearse_tail`; a group's tail,
:func:`rehearse_group_tail`), folds the written partials into one state as they come
(:func:`read_written`), then claims the last batch's units and runs that batch and the
merge with that state as one job (:func:`execute_tail`). When the window's count of units
has landed before its end, it computes that batch and merge then, and at the claim writes
those rows if the claim reads the same files (:mod:`airflow_iqp.spark.ahead`; a group's
tail, each member's: :func:`~airflow_iqp.spark.group_tail.compute_group_ahead`).
``final_job.py --tail`` runs it under spark-submit; the Spark Connect backend runs it in
the task. The claims are made here, in the driver, through the store: that is what saves
a task's and a JVM's start after the window's end.

A group's tail (its entry names ``members``) runs the group's batches ready after it started
as shared batches, folds each member's written partials ahead, then claims the last batch
once, reads it once, and merges each member's step on it with its partials into its result,
one member at a time, as many by their deadlines as can be
(:func:`~airflow_iqp.spark.group_tail.execute_group_tail`): one job, one start-up, every
member's result. No Airflow import here.
"""

from __future__ import annotations

import time

from airflow_iqp.coordination import cluster_turn
from airflow_iqp.filecheck import files_to_read, inspect_files, kept_units, unit_of
from airflow_iqp.query.store import load_query
from airflow_iqp.spark.ahead import NOT_YET, compute_ahead, compute_ahead_instead, left_to_last_batch, still_the_input
from airflow_iqp.spark.batch import batch_work, execute_batch, read_shared
from airflow_iqp.spark.group_tail import compute_group_ahead, execute_group_tail, hand_over_read
from airflow_iqp.spark.merge import execute_final, merge_rows_estimate
from airflow_iqp.spark.steps import hold_static_schemas, parquet_writer, partial_of, run_batch, run_final
from airflow_iqp.store import WindowState
from airflow_iqp.streams import stream_of
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.readiness import (REHEARSAL_ROOM, TAIL_POLL_S, batch_ready, leave_to_tail, may_compute_ahead,
                                         record_start, room_until, to_rehearse, wait_and_claim)


def read_written(spark, ws: WindowState, earlier: dict | None = None, until: float | None = None) -> dict | None:
    """The partials of a window written by now, read and folded into one state ahead of the
    merge: ``{"dirs": ws.partial_versions(), "df": DataFrame, "cached": the cached state it
    reads, or None, "folded": nothing is left to fold, "fold_seconds": the last fold's}``;
    None if there are none, or ``earlier`` if nothing changed since it was read.

    A fused tail reads them while it waits for the window's last units, so that after the
    window's end, where a tight deadline leaves tenths of a second, its merge reads the
    state and the last batch, not every batch's partial. The state is the partials folded
    by the query's own aggregates (:meth:`~airflow_iqp.query.model.Query.compute_fold`),
    cached in the session and computed now: each new partial is folded into the state
    before it (``earlier``), as the DISS paper keeps an aggregate's state between deltas.
    Folding is a Spark job, so it runs only if the last fold's seconds end before ``until``
    (:func:`room_until`; None: always); else a new partial is read beside the state, and
    the merge reads both. A query whose states do not fold (a variance, a function query)
    has its partials read and their schema resolved. A fold that fails is printed and
    left out: the merge reads the partials. :func:`execute_final` uses the entry only if
    the window's partials are still those; :func:`release` frees its cached state."""
    dirs = ws.partial_versions()
    seconds = (earlier or {}).get("fold_seconds", 0.0)
    fold = until is None or time.time() + seconds < until
    if earlier is not None and earlier["dirs"] == dirs and (earlier["folded"] or not fold):
        return earlier
    grown = (earlier is not None and earlier.get("cached") is not None
             and all(dirs.get(d) == v for d, v in earlier["dirs"].items()))
    if not grown:
        release(earlier)
    if not dirs:
        return None
    new = [d for d in dirs if not grown or d not in earlier["dirs"]]
    df = earlier["df"] if grown else None
    if new:
        df = spark.read.parquet(*new) if df is None else df.unionByName(spark.read.parquet(*new))
    read = {"dirs": dirs, "df": df, "cached": earlier["cached"] if grown else None, "fold_seconds": seconds}
    state = load_query(ws.query_id, ws.store).query.compute_fold(spark, df) if fold else None
    if state is not None:
        t0 = time.perf_counter()
        try:
            state = state.cache()
            state.count()  # computed now, while the window is open
            state.schema  # noqa: B018  (resolved now: the merge asks for it)
        except Exception as exc:  # noqa: BLE001 - folding only saves the merge work; the merge reads the partials
            print(f"airflow-iqp final_job: {ws.query_id}: folding the partials failed, merging them as they are: "
                  f"{type(exc).__name__}: {exc}", flush=True)
            state.unpersist()
            state = None
        else:
            release(earlier)
            return {"dirs": dirs, "df": state, "cached": state, "folded": True,
                    "fold_seconds": time.perf_counter() - t0}
    df.schema  # noqa: B018  (resolves the files' schema now, not after the window's end)
    return read | {"folded": fold}  # nothing left to fold: it does not fold, or it failed


def release(written: dict | None) -> None:
    """Free the state :func:`read_written` cached in the session (a server's memory outlives a Connect session)."""
    if written is not None and written.get("cached") is not None:
        written["cached"].unpersist()


def execute_tail(spark, ws: WindowState, tail_batch: int | None, static: str | dict | None, *, backend: str,
                 history: bool = True, written: dict | None = None) -> dict:
    """A fused tail: the last batch and the merge in one Spark job.

    The last batch's partial aggregate is merged with the written partials in the same job
    that writes the result: after the window's end, nothing is written before the result.
    The last batch's partial is never written: writing it after the result would compute
    the batch a second time, on the cluster the next query's turn needs (several seconds of
    a JVM's work per query on spark-submit). The result manifest covers its units
    (``merge.check_coverage`` with ``computing``). A retry computes it again from the same
    claim, so no unit is counted twice; a partial found written (by an older version)
    is merged as any other. ``written``: :func:`read_written`, taken before the claim.
    """
    claim = (ws.claim_of(tail_batch) if tail_batch is not None else None) or {}
    files = files_to_read(claim)  # the units quarantined when claimed are left out
    pending = bool(files) and not ws.has_partial(tail_batch)
    tail, bad, rows_in = None, [], None
    if pending:
        saved = load_query(ws.query_id, ws.store)
        inspection = inspect_files(files, saved, ws.store.query(ws.query_id), claimed=ws.claimed_files(),
                                   checked=claim.get("checked"))
        tail, bad = (tail_batch, run_batch(spark, saved, files, static, inspection=inspection)), inspection.quarantined
        rows_in = inspection.rows
    return execute_final(spark, ws, backend=backend, history=history, tail=tail, written=written, quarantined=bad,
                         tail_rows_in=rows_in)


def run_tail(spark, ws: WindowState, tail: Batch, slots: int = 0, *, backend: str, history: bool = True) -> dict:
    """A fused tail in the final task's own session (both backends; the spark-submit job's
    driver, or the Connect task): the session is open and warm before the last batch's
    input is complete, so after the window's end only the work is left. It holds its
    static tables' schemas from the start (:func:`~airflow_iqp.spark.steps.hold_static_schemas`).

    ``tail`` is the plan's tail (``split_tail``). First each batch ready after the task
    started (``tail.before``), in order: wait until it may start, as its sensor would,
    claim, take a turn on the cluster, write its partial; or, once the last batch may claim,
    leave its units to it (``fold_into_tail``). A single query's tail also folds the partials
    written and rehearses its last step (:func:`rehearse_tail`) in the wait before each of
    these batches, while there is room before that batch's input is due: the last of them
    often ends just before the window's end, with no room left after it. Then the last
    batch: rehearse it while there is time (:func:`rehearse_tail`, up to
    :data:`REHEARSALS` in all; a group's, its tight members' parts:
    :func:`rehearse_group_tail`), wait, folding the written partials as they come
    (:func:`read_written`), claim, take a turn and run it with the merge
    (:func:`execute_tail`). Turns: ``slots`` batches of the store at once, earliest
    deadline first; with a gate the turn is its, and the last batch's ``turn_ts``
    (``ahead``) does not hold it back as well. A retry re-reads every claim and skips a
    partial already written.
    """
    spark.range(1).collect()  # the session's first query pays its set-up: not after the window's end
    for m in tail.members or (ws.query_id,):  # not inferred again by each batch, rehearsal and merge
        hold_static_schemas(spark, load_query(m, ws.store), tail.static or None)
    record_start(ws, tail, backend)
    if slots > 0:
        tail = tail.with_(turn_ts=0.0)
    kept: dict = {}  # a group's batch handed over: its units, cached for the tail
    # A group's batch hands its members left over to the tail once the last batch may claim.
    stop = (lambda: batch_ready(tail, time.time()) is not None) if tail.members else None
    ahead: list = [None]  # a single query's written partials, folded as they come
    rehearsed: list[float] = []
    computed: list = []  # a single query's result computed ahead (compute_ahead), once
    try:
        for entry in tail.before:
            if computed and leave_to_tail(entry) is not None:
                print(f"airflow-iqp final_job: {entry.label}: its units are in the result computed ahead", flush=True)
                continue
            if left_to_last_batch(entry, tail, time.time()):
                continue
            if not tail.members:  # in the wait for this batch's input: fold what is written, rehearse
                ahead[0] = read_written(spark, ws, ahead[0], until=room_until(tail, entry.ready_ts))
                rehearsed += rehearse_tail(spark, ws, tail, slots, ahead[0], before=entry.ready_ts,
                                           rehearsals=REHEARSALS - len(rehearsed))
                if compute_ahead_instead(spark, ws, entry, tail, slots, ahead[0], computed):
                    continue
            _run_batch_in_turn(spark, ws, entry, slots, backend, history, stop, kept)
        if not tail.members:
            return _last_batch(spark, ws, tail, slots, backend, history, ahead, REHEARSALS - len(rehearsed), computed)
    finally:
        release(ahead[0])
    if tail.members:
        windows = {m: ws.store.window(m, ws.window_id) for m in tail.members}
        written: dict = {}
        computed: dict = {}  # member -> its result computed ahead (compute_group_ahead)
        held: dict = {}  # the last batch's units as computing ahead read them
        tried: list = []

        def read_again(seconds: float) -> None:  # while it waits: each member's partials, when they change
            t0 = time.time()
            if seconds > TAIL_POLL_S:  # not in the last second's quick polls: that is a listing per member
                for m, w in windows.items():
                    written[m] = read_written(spark, w, written[m], until=room_until(tail))
            if not tried and may_compute_ahead(tail, time.time()):
                if compute_group_ahead(spark, ws, tail, slots, windows, written, computed, held) is not NOT_YET:
                    tried.append(True)
            time.sleep(max(0.0, seconds - (time.time() - t0)))

        try:
            for m, w in windows.items():
                written[m] = read_written(spark, w, until=room_until(tail))
            rehearse_group_tail(spark, ws, tail, slots, windows, written)
            claim = wait_and_claim(tail, sleep=read_again)
            print(f"airflow-iqp final_job: {tail.label}: claimed {len(claim['units'])} units", flush=True)
            hand_over_read(held, claim, kept, tail.index)
            with cluster_turn(tail, slots, planned=tail.remaining_cost):
                return execute_group_tail(spark, ws, tail.index, tail.members, tail.static or None, backend=backend,
                                          history=history, before=tuple(e.index for e in tail.before), kept=kept,
                                          written=written, due=tail.member_due(), scale=tail.cost_scale,
                                          computed=computed)
        finally:
            for state in written.values():
                release(state)
            hand_over_read(held, {}, {}, tail.index)  # a failure before the claim: nothing to hand over


def _last_batch(spark, ws: WindowState, tail: Batch, slots: int, backend: str, history: bool, ahead: list,
                rehearsals: int, computed: list) -> dict:
    """A single query's last batch in its fused tail (:func:`run_tail`): fold, rehearse up to
    ``rehearsals`` times, wait folding (and, once the window's count has landed, computing
    the result ahead: :mod:`~airflow_iqp.spark.ahead`), claim, then write the result
    computed ahead (``computed``, if a batch before left its units to it) if the claim reads its
    files, else run the batch with the merge. ``ahead[0]`` is the folded state (:func:`read_written`)."""
    if not computed:
        ahead[0] = read_written(spark, ws, ahead[0], until=room_until(tail))
        rehearse_tail(spark, ws, tail, slots, ahead[0], rehearsals=rehearsals)

    def sleep(seconds: float) -> None:  # while it waits: fold the partials again when they change
        t0 = time.time()
        ahead[0] = read_written(spark, ws, ahead[0], until=room_until(tail))
        if not computed and may_compute_ahead(tail, time.time()):
            done = compute_ahead(spark, ws, tail, slots, ahead[0])
            if done is not NOT_YET:
                computed.append(done)
        time.sleep(max(0.0, seconds - (time.time() - t0)))

    claim = wait_and_claim(tail, sleep=sleep)
    print(f"airflow-iqp final_job: {tail.label}: claimed {len(claim['units'])} units", flush=True)
    done = computed[0] if computed else None
    if done is not None and still_the_input(done, ws, claim, tail.label):
        return execute_final(spark, ws, backend=backend, history=history, tail=(tail.index, None),
                             computed_ahead=done, quarantined=done["quarantined"], tail_rows_in=done["rows_in"])
    # The turn lasts through the merge: the tail holds the cluster until the result is written.
    with cluster_turn(tail, slots, planned=tail.remaining_cost):
        return execute_tail(spark, ws, tail.index, tail.static or None, backend=backend, history=history,
                            written=ahead[0])


#: At most this many rehearsals of a fused tail (:func:`rehearse_tail`): each run of the
#: same plan leaves less for the JVM to compile when the tail runs it after the window's
#: end; each costs a one-unit tail's CPU.
REHEARSALS = 3


def rehearse_group_tail(spark, group: WindowState, tail: Batch, slots: int, windows: dict, written: dict) -> dict:
    """Run each member's part of a group's fused tail that is worth it
    (:func:`~airflow_iqp.window.readiness.to_rehearse`) before the window's end, earliest
    deadline first, on the units the group claimed last (as many as the last batch plans,
    read once and cached as the tail reads them) merged with its ``written`` partials, and
    throw the results away. A member's rehearsal starts only while the window's end is
    :data:`REHEARSAL_ROOM` times its expected seconds away: the longest rehearsal so far,
    else its planned seconds (:meth:`~airflow_iqp.window.batch.Batch.member_due`).

    After the window's end each member's plan is then one the session has run: Spark's
    generated code for it is compiled and cached, and the JVM has compiled its hot paths.
    Run first after a window of shared batches, those plans (a step on cached streams,
    merged with a folded state) are new, and compiling them takes as much CPU as running
    them; the tail after the window's end would pay it for every member. A group's tail
    starts early enough for this (:func:`~airflow_iqp.window.readiness.tail_lead`).
    Skipped, like :func:`rehearse_tail`, when nothing is claimed yet; nothing is recorded,
    and a failure is printed and ignored. Returns member -> seconds of those rehearsed."""
    due, scale = tail.member_due(), tail.cost_scale or 1.0
    runs: dict[str, float] = {}

    def expected(m: str) -> float:
        return max(runs.values(), default=due.get(m, (0.0, tail.remaining_cost / scale))[1])

    def room(m: str) -> bool:
        return time.time() + REHEARSAL_ROOM * expected(m) < tail.ready_ts

    members = to_rehearse(tail)
    claims = [c for _b, c in sorted(group.claims().items()) if kept_units(c)]
    if not members or not claims or not room(members[0]):
        return {}
    saved = {m: load_query(m, group.store) for m in tail.members}
    streams = tuple({s.name: s for sv in saved.values() for s in sv.streams}.values())
    units: list[str] = []  # the latest claimed units, as many as the last batch plans
    for claim in reversed(claims):
        units = kept_units(claim) + units
        if len(units) >= (tail.units or 1):
            break
    chosen = set(units[-(tail.units or 1):])
    files = [f for c in claims for f in files_to_read(c) if unit_of(f, stream_of(f, streams)) in chosen]
    read, current = None, None
    until = tail.ready_ts - REHEARSAL_ROOM * expected(members[0])
    try:
        with cluster_turn(tail, slots, planned=tail.remaining_cost, until=until) as got:
            if not got:
                return {}
            read = read_shared(spark, group, saved, files, None)
            for current in members:
                if not room(current):
                    break
                t0, w = time.perf_counter(), written.get(current)
                part = partial_of(spark, saved[current], read[1], tail.static or None)
                rows = merge_rows_estimate(windows[current], list(w["dirs"]) if w else [], read[0].rows, tail=True)
                _merge_into_scratch(spark, windows[current], saved[current], w, part, rows)
                runs[current] = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - a rehearsal only warms the session; the tail reports errors
        print(f"airflow-iqp final_job: {tail.label}: rehearsal failed, ignored: {type(exc).__name__}: {exc}",
              flush=True)
        if current is not None:
            windows[current].remove_scratch("rehearsal")
    finally:
        for df in (read[1].values() if read else ()):
            df.unpersist()
    if runs:
        print(f"airflow-iqp final_job: {tail.label}: rehearsed on {len(chosen)} units: "
              + ", ".join(f"{m} {s:.2f} s" for m, s in runs.items()), flush=True)
    return runs


def rehearse_tail(spark, ws: WindowState, tail: Batch, slots: int = 0, written: dict | None = None, *,
                  before: float | None = None, rehearsals: int = REHEARSALS) -> list[float]:
    """Run the fused tail's plan before the window's end, on one unit the window's batches
    have claimed, merged with the ``written`` partials, and throw the result away; up to
    ``rehearsals`` times, while one as long as the last ends in time (:func:`room_until`,
    also before ``before``: the input of a batch the tail runs ahead of the last being due).

    The tail after the window's end is then a later run of that plan: its code is
    generated and the JVM has compiled its hot paths. On a warm local Connect server, in a
    fresh session that had run two batches, a one-unit tail took 0.20 s instead of 0.29 s
    for CQ1 and 0.74 s instead of 0.93 s for Q10 (median of 5); the same Q10 tail, run
    again and again, took 1.19 s the first time, 0.75 s by the fifth and 0.52 s by the
    twentieth. It is skipped when no unit is claimed yet or the window's end is nearer
    than :data:`REHEARSAL_ROOM` times the tail's expected seconds, and takes a turn on the
    cluster like a batch (given up when that time comes first). Nothing is recorded: no
    claim, metrics or cost history. A failure is printed and ignored: the tail meets the
    same error, if it is one, and reports it. Returns each run's seconds.
    """
    until = room_until(tail, before)
    claims = [c for c in ws.claims().values() if kept_units(c)]
    if rehearsals < 1 or not claims or time.time() >= until:
        return []
    saved = load_query(ws.query_id, ws.store)
    unit = kept_units(claims[-1])[-1]
    files = [f for f in files_to_read(claims[-1]) if unit_of(f, stream_of(f, saved.streams)) == unit]
    try:
        with cluster_turn(tail, slots, planned=tail.remaining_cost, until=until) as got:
            if not got or time.time() >= until:
                return []
            inspection = inspect_files(files, saved, ws.store.query(ws.query_id), claimed=ws.claimed_files())
            rows = merge_rows_estimate(ws, list(written["dirs"]) if written else [], inspection.rows, tail=True)
            runs: list[float] = []
            while len(runs) < rehearsals and (not runs or time.time() + runs[-1] < until):
                t0 = time.perf_counter()
                part = run_batch(spark, saved, files, tail.static or None, inspection=inspection)
                _merge_into_scratch(spark, ws, saved, written, part, rows)
                runs.append(time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - a rehearsal only warms the session; the tail reports errors
        print(f"airflow-iqp final_job: {tail.label}: rehearsal failed, ignored: {type(exc).__name__}: {exc}",
              flush=True)
        return []
    finally:
        ws.remove_scratch("rehearsal")
    print(f"airflow-iqp final_job: {tail.label}: rehearsed on unit {unit} in "
          f"{', '.join(f'{r:.2f}' for r in runs)} s", flush=True)
    return runs


def _merge_into_scratch(spark, ws: WindowState, saved, written: dict | None, part, rows: int | None) -> None:
    """A rehearsal's run of a fused tail's last step: ``part`` merged with the ``written``
    partials (:func:`read_written`'s) into a result of about ``rows`` rows, written to the
    window's scratch directory and removed."""
    df = run_final(spark, saved, written["df"] if written else [], also=part)
    ws.write_scratch("rehearsal", parquet_writer(df, rows))
    ws.remove_scratch("rehearsal")


def _run_batch_in_turn(spark, ws: WindowState, entry: Batch, slots: int, backend: str, history: bool,
                       stop=None, keep: dict | None = None) -> None:
    """One batch of a fused tail before the last: claimed when ready, run in its turn into
    its partial (a group's: its members' partials, until ``stop()``; what it read, in
    ``keep`` if it handed members over)."""
    claim = wait_and_claim(entry)
    if not claim["units"]:
        print(f"airflow-iqp final_job: {entry.label}: nothing to claim", flush=True)
        return
    # A retry: written by the earlier attempt (a group's partials are its members').
    written = [ws.store.window(m, ws.window_id) for m in entry.members] or [ws]
    if all(w.has_partial(entry.index) for w in written):
        return
    with cluster_turn(entry, slots):
        metrics = execute_batch(spark, batch_work(ws, entry.index, entry.static, entry.members), backend=backend,
                                history=history, stop=stop, keep=keep)
    left = f"; handed {', '.join(metrics['left'])} over to the last batch" if metrics.get("left") else ""
    print(f"airflow-iqp final_job: {entry.label}: {metrics['units']} units in {metrics['wall_seconds']:.1f} s{left}",
          flush=True)
