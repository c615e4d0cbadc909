"""A fused tail's result computed before the window's end, once the window's count of units has landed.

Units land as files, and the last one often lands well before the window's end. A
single query's fused tail whose window count is known (``Arrival(units=...)``) may then
compute its last batch and merge (:func:`compute_ahead`) and, when it claims at the
window's end, write those rows as the result if the claim reads exactly the files they
were computed from (:func:`still_the_input`). No Airflow import here.
"""

from __future__ import annotations

import time

from airflow_iqp.coordination import cluster_turn
from airflow_iqp.filecheck import files_to_read, inspect_files
from airflow_iqp.paths import is_local
from airflow_iqp.query.store import load_query
from airflow_iqp.spark.jobmetrics import StepMeter
from airflow_iqp.spark.merge import ahead_or_paths, check_coverage, merge_rows_estimate, read_claims, unwritten
from airflow_iqp.spark.steps import COLLECT_MAX_ROWS, result_table, run_batch, run_final
from airflow_iqp.store import WindowState
from airflow_iqp.streams import files_of
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.readiness import (TAIL_POLL_S, count_wait_until, fold_into_tail, leave_to_tail,
                                         may_compute_ahead, planned_units_landed, unclaimed_units, wait_ready)


#: What :func:`compute_ahead` returns while a batch before the last has claimed its units and
#: not written its partial yet: try again later.
NOT_YET = "not yet"


def compute_ahead(spark, ws: WindowState, tail: Batch, slots: int, written: dict | None) -> dict | str | None:
    """A single query's last batch and merge, computed before the window's end once every unit
    the window counts has landed (:func:`~airflow_iqp.window.readiness.may_compute_ahead`),
    held in this process as the result's rows: ``{"files", "versions", "table", "meter",
    "quarantined", "rows_in", "computed_at"}``, or None.

    Nothing is claimed or written. ``tail._last_batch`` still claims at the ready time, and
    writes these rows as the result only if the claim reads exactly these files and the
    window's written partials are still these (files are immutable once complete): the
    same input, so the same result, and the time after the window's end is a listing, a
    claim and a small file's write. A unit that lands after this, or a partial written
    again, sends the tail down its usual path, this work thrown away. None (nothing done)
    where the rows would not be collected into this process anyway (a result store that is
    not local, an estimate above ``COLLECT_MAX_ROWS``, time stamps with and without a
    zone), when the cluster's turn does not come before the ready time, and on any error
    (printed: the tail meets it again, if it is one, and reports it); :data:`NOT_YET` while
    a claimed batch has not written its partial (a batch run by another task).
    """
    if tail.members or not is_local(ws.location):
        return None
    if unwritten(read_claims(ws), ws.written_partials()):
        return NOT_YET
    try:
        files = files_of(unclaimed_units(tail, ws), tail.streams)
        if not files:
            return None
        saved = load_query(ws.query_id, ws.store)
        inspection = inspect_files(files, saved, ws.store.query(ws.query_id), claimed=ws.claimed_files())
        if collected_rows(ws, check_coverage(ws)["partials"], inspection) is None:
            return None
        with cluster_turn(tail, slots, planned=tail.remaining_cost, until=tail.ready_ts) as got:
            if not got:
                return None
            done = result_ahead(spark, ws, saved, files, inspection, written,
                                lambda: run_batch(spark, saved, files, tail.static or None, inspection=inspection))
    except Exception as exc:  # noqa: BLE001 - computed ahead only saves time; the tail reports errors
        print(f"airflow-iqp final_job: {tail.label}: computing the result ahead failed, ignored: "
              f"{type(exc).__name__}: {exc}", flush=True)
        return None
    if done is not None:
        print(f"airflow-iqp final_job: {tail.label}: computed the result ahead from {len(files)} files in "
              f"{done['meter'].wall_seconds:.2f} s", flush=True)
    return done


def collected_rows(ws: WindowState, partials: list[str], inspection) -> int | None:
    """The rows of ``ws``'s result merged from its written ``partials`` and a last batch over
    the files of ``inspection``, if they would be collected into this process (at most
    ``COLLECT_MAX_ROWS``): a result computed ahead is held there until the claim."""
    rows = merge_rows_estimate(ws, partials, inspection.rows, tail=True)
    return None if rows is None or rows > COLLECT_MAX_ROWS else rows


def result_ahead(spark, ws: WindowState, saved, files: list[str], inspection, written: dict | None,
                 last_partial) -> dict | None:
    """``ws``'s result computed ahead: ``last_partial()`` (the last batch's partial over
    ``files``, as ``inspection`` checked them) merged with the window's written partials
    (``written``, as :func:`~airflow_iqp.spark.tail.read_written` folded them, if still
    theirs), its rows held in this process: ``{"files", "versions", "table", "meter",
    "quarantined", "rows_in", "computed_at"}``, what :func:`still_the_input` and
    :func:`~airflow_iqp.spark.merge.execute_final` read. None where the rows would not be
    collected (:func:`collected_rows`; time stamps with and without a zone)."""
    cover = check_coverage(ws)
    versions = ws.partial_versions()
    if collected_rows(ws, cover["partials"], inspection) is None:
        return None
    with StepMeter(spark) as meter:
        merged = run_final(spark, saved, ahead_or_paths(written, ws, cover["partials"]), also=last_partial())
        table = result_table(merged)
    if table is None:
        return None
    return {"files": sorted(files), "versions": versions, "table": table, "meter": meter,
            "quarantined": inspection.quarantined, "rows_in": inspection.rows, "computed_at": time.time()}


def left_to_last_batch(entry: Batch, tail: Batch, now: float) -> bool:
    """Whether a batch of a fused tail's ``before`` left its units to the last batch, the
    window having ended (:func:`~airflow_iqp.window.readiness.fold_into_tail`); said in the log."""
    if fold_into_tail(entry, tail, now) is None:
        return False
    print(f"airflow-iqp final_job: {entry.label}: the window has ended; its units go to the last batch", flush=True)
    return True


def compute_ahead_instead(spark, ws: WindowState, entry: Batch, tail: Batch, slots: int, written: dict | None,
                           computed: list) -> bool:
    """Whether a single query's batch before its last (``entry``) left its units to the result
    computed ahead, or to the last batch itself where a wait for the count lasted to the
    window's end (:func:`~airflow_iqp.window.readiness.fold_into_tail`). Once ``entry`` may
    start, if the window's count has landed by then
    (:func:`~airflow_iqp.window.readiness.may_compute_ahead` with ``folding``), a fused
    tail computes its last batch and merge (:func:`compute_ahead`) over every unclaimed
    unit, ``entry``'s among them, and ``entry`` claims nothing
    (:func:`~airflow_iqp.window.readiness.leave_to_tail`).
    That is one job where running ``entry`` would be two, with a partial written and read
    again between them, and it ends before the window's end where the plan's last batch
    would start. Where running ``entry`` now would finish after the deadline and the result
    computed at once would not, it waits for the count a while first
    (:func:`~airflow_iqp.window.readiness.count_wait_until`); a wait for planned units that
    were late is looked at again when they land, since the rest of the count is then due
    when planned. Where nothing was computed (a result too large to hold, a batch claimed by
    another task and not written yet, an error), ``entry`` runs as planned. The result is
    appended to ``computed``."""
    if ws.has_claim(entry.index):  # a retry: it claimed in the earlier attempt
        return False
    wait_ready(entry)
    now = time.time()
    until = count_wait_until(entry, tail, now)
    # A wait that ends before the last batch's ready time is one for planned units still missing.
    late = now < until < tail.ready_ts
    if until > now:
        print(f"airflow-iqp final_job: {entry.label}: run now, it would finish after the deadline; waiting up to "
              f"{until - now:.2f} s for the window's count{' (its planned units are late)' if late else ''}",
              flush=True)
    while not may_compute_ahead(tail, time.time(), folding=entry):
        now = time.time()
        if until < tail.ready_ts and planned_units_landed(entry, now):  # they came: the rest is due when planned
            until = count_wait_until(entry, tail, now)
        if now >= until:  # a wait that lasted to the window's end leaves the units to the last batch
            return left_to_last_batch(entry, tail, now)
        time.sleep(TAIL_POLL_S)
    done = compute_ahead(spark, ws, tail, slots, written)
    if not isinstance(done, dict):
        return False
    computed.append(done)
    if leave_to_tail(entry) is not None:
        print(f"airflow-iqp final_job: {entry.label}: the window's count had landed; its units are in the "
              "result computed ahead", flush=True)
    return True


def still_the_input(done: dict, ws: WindowState, claim: dict, label: str) -> bool:
    """Whether the last batch's ``claim`` reads exactly the files the result ``done`` was
    computed from (:func:`compute_ahead`), none of them quarantined, and the window's
    written partials are still those it merged: then ``done`` is that claim's result."""
    same = (done["files"] == sorted(files_to_read(claim)) and not claim.get("quarantined")
            and done["versions"] == ws.partial_versions())
    if same:
        print(f"airflow-iqp final_job: {label}: the claim reads the files the result was computed from "
              f"{time.time() - done['computed_at']:.2f} s ago; writing it", flush=True)
    else:
        print(f"airflow-iqp final_job: {label}: the claim differs from what the result was computed from "
              f"ahead; running the last batch and the merge", flush=True)
    return same
