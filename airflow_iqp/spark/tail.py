"""The fused tail: a window's last batch and its merge in one Spark job, in the final task's session.

A fused tail's final task starts before the window's end and opens its session
(:func:`run_tail`): it runs the batches that become ready after it started, rehearses its
last step while there is time (:func:`rehearse_tail`), reads the written partials as they
come (:func:`read_written`), then claims the last batch's units and runs that batch and the
merge as one job (:func:`execute_tail`). ``final_job.py --tail`` runs it under spark-submit;
the Spark Connect backend runs it in the task. No Airflow import here.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from airflow_iqp.spark.final_job import (
    _window_state, _written_dirs, execute_final, merge_rows_estimate,
)


def read_written(spark, window_dir: str | os.PathLike, earlier: dict | None = None) -> dict | None:
    """The partials of a window written by now, read and their schema resolved ahead of the
    merge: ``{"dirs": _written_dirs(), "df": DataFrame}``, None if there are none, or
    ``earlier`` if they have not changed since it was read.

    A fused tail reads them while it waits for the window's last units, so that after the
    window's end, where a tight deadline leaves tenths of a second, the merge does not
    resolve them again: on a warm Connect server that halves the time to build the merge's
    DataFrame (about 0.05 s instead of 0.11 s for CQ3).
    :func:`execute_final` uses it only if the window's partials are still those.
    """
    dirs = _written_dirs(window_dir)
    if earlier is not None and earlier["dirs"] == dirs:
        return earlier
    if not dirs:
        return None
    df = spark.read.parquet(*dirs)
    df.schema  # noqa: B018  (resolves the files' schema now, not after the window's end)
    return {"dirs": dirs, "df": df}


def execute_tail(spark, query_id: str, window_dir: str | os.PathLike, tail_batch: int | None,
                 static_dir: str | None, *, history: bool = True, written: dict | None = None,
                 backend: str | None = None) -> dict:
    """A fused tail: the last batch and the merge in one Spark job.

    The last batch's partial aggregate is merged with the written partials in the same job
    that writes the result: after the window's end, nothing is written before the result.
    The last batch's partial is never written: writing it after the result would compute
    the batch a second time, on the cluster the next query's turn needs (several seconds of
    a JVM's work per query on spark-submit). The result manifest covers its units
    (``final_job.check_coverage`` with ``computing``). A retry computes it again from the same
    claim, so no unit is counted twice; a partial found written (by an older version)
    is merged as any other. ``written``: :func:`read_written`, taken before the claim.
    """
    from airflow_iqp.filecheck import files_to_read
    from airflow_iqp.query.store import load_query, schema_dir
    from airflow_iqp.spark.steps import inspect_files, run_batch
    from airflow_iqp.state import claimed_files, read_json

    window_dir = Path(window_dir).absolute()
    ws = _window_state(window_dir)
    claim = ws.claim_path(tail_batch) if tail_batch is not None else None
    manifest = read_json(claim) if claim is not None and claim.is_file() else {}
    files = files_to_read(manifest)  # the units quarantined when claimed are left out
    pending = bool(files) and not ws.partial_path(tail_batch).is_dir()
    tail, bad, rows_in = None, [], None
    if pending:
        saved = load_query(query_id, ws.state_dir)
        inspection = inspect_files(files, saved, schema_dir(ws.state_dir, query_id), claimed=claimed_files(ws),
                                   checked=manifest.get("checked"))
        tail, bad = (tail_batch, run_batch(spark, saved, files, static_dir, inspection=inspection)), inspection.quarantined
        rows_in = _rows_in(inspection)
    return execute_final(spark, query_id, window_dir, history=history, tail=tail, written=written, quarantined=bad,
                         tail_rows_in=rows_in, backend=backend)


def _rows_in(inspection) -> int | None:
    """A batch's input rows from its files' inspection; None if a file's are unknown (remote)."""
    rows = [i.rows for i in inspection.infos]
    return None if None in rows else sum(rows)


def run_tail(spark, query_id: str, window_dir: str | os.PathLike, tail, slots: int = 0, *,
             history: bool = True, backend: str | None = None) -> dict:
    """A fused tail in the final task's own session (both backends; the spark-submit job's
    driver, or the Connect task): the session is open and warm before the last batch's
    input is complete, so after the window's end only the work is left.

    ``tail`` is the plan's tail (``split_tail``; a ``Batch`` or its JSON form). First each
    batch ready after the task started (``tail.before``), in order: wait until it may start,
    as its sensor would, claim, take a turn on the cluster, write its partial; or, once the
    last batch may claim, leave its units to it (``fold_into_tail``). Then the last
    batch: rehearse it while there is time (:func:`rehearse_tail`), wait, reading the written
    partials as they come (:func:`read_written`), claim, take a turn and run it with the
    merge (:func:`execute_tail`). Turns: ``slots`` batches
    of the state directory at once, earliest deadline first; with a gate the turn is its,
    and the last batch's ``turn_ts`` (``ahead``) does not hold it back as well. A retry
    re-reads every claim and skips a partial already written.
    """
    from airflow_iqp.window.tail import claim_when_ready, fold_into_tail, load, turn

    tail = load(tail)
    spark.range(1).collect()  # the session's first query pays its set-up: not after the window's end
    if slots > 0:
        tail = tail.with_(turn_ts=0.0)
    for entry in tail.before:
        if fold_into_tail(entry, tail, time.time()) is not None:
            print(f"airflow-iqp final_job: {entry.label}: the window has ended; its units go to the last batch",
                  flush=True)
            continue
        _run_batch_in_turn(spark, window_dir, entry, slots, history, backend)
    ahead = [read_written(spark, window_dir)]
    rehearse_tail(spark, query_id, window_dir, tail, slots, ahead[0])

    def sleep(seconds: float) -> None:  # while it waits: read the partials again when they change
        ahead[0] = read_written(spark, window_dir, ahead[0])
        time.sleep(seconds)

    claim = claim_when_ready(tail, sleep=sleep)
    print(f"airflow-iqp final_job: {tail.label}: claimed {len(claim['units'])} units", flush=True)
    # The turn lasts through the merge: the tail holds the cluster until the result is written.
    with turn(tail, slots, planned=tail.remaining_cost):
        return execute_tail(spark, query_id, window_dir, tail.index, tail.static or None, history=history,
                            written=ahead[0], backend=backend)


#: A fused tail rehearses (:func:`rehearse_tail`) only while the window's end is at least
#: this many times its expected seconds away, so that the rehearsal is over before then.
REHEARSAL_ROOM = 3.0


def rehearse_tail(spark, query_id: str, window_dir: str | os.PathLike, tail, slots: int = 0,
                  written: dict | None = None) -> float | None:
    """Run the fused tail's plan once before the window's end, on one unit the window's
    batches have claimed, merged with the ``written`` partials, and throw the result away.

    The tail after the window's end is then its session's second run of that plan: its
    code is generated and its classes are warm. On a warm local Connect server, in a fresh
    session that had run two batches, a one-unit tail took 0.20 s instead of 0.29 s for
    CQ1 and 0.74 s instead of 0.93 s for Q10 (median of 5). It is skipped (None) when no
    unit is claimed yet or the window's end is nearer than :data:`REHEARSAL_ROOM` times the
    tail's expected seconds, and takes a turn on the cluster like a batch (given up when
    that time comes first). Nothing is recorded: no claim, metrics or cost history. A
    failure is printed and ignored: the tail meets the same error, if it is one, and
    reports it. Returns the rehearsal's seconds.
    """
    from airflow_iqp.filecheck import files_to_read, kept_units
    from airflow_iqp.query.store import load_query, schema_dir
    from airflow_iqp.spark.steps import inspect_files, run_batch, run_final, unit_of, write_result
    from airflow_iqp.state import claimed_files, read_claims, temp_sibling
    from airflow_iqp.streams import stream_of
    from airflow_iqp.window.tail import turn

    expected = tail.remaining_cost / tail.cost_scale
    until = tail.ready_ts - REHEARSAL_ROOM * expected
    ws = _window_state(Path(window_dir).absolute())
    claims = [c for c in read_claims(ws).values() if kept_units(c)]
    if not claims or time.time() >= until:
        return None
    saved = load_query(query_id, ws.state_dir)
    unit = kept_units(claims[-1])[-1]
    files = [f for f in files_to_read(claims[-1]) if unit_of(f, stream_of(f, saved.streams)) == unit]
    out = temp_sibling(ws.result_dir)
    try:
        with turn(tail, slots, planned=tail.remaining_cost, until=until) as got:
            if not got or time.time() >= until:
                return None
            t0 = time.perf_counter()
            inspection = inspect_files(files, saved, schema_dir(ws.state_dir, query_id), claimed=claimed_files(ws))
            part = run_batch(spark, saved, files, tail.static or None, inspection=inspection)
            df = run_final(spark, saved, written["df"] if written else [], also=part)
            rows = merge_rows_estimate(ws, list(written["dirs"]) if written else [], _rows_in(inspection), tail=True)
            write_result(df, out, rows)
    except Exception as exc:  # noqa: BLE001 - a rehearsal only warms the session; the tail reports errors
        print(f"airflow-iqp final_job: {tail.label}: rehearsal failed, ignored: {type(exc).__name__}: {exc}",
              flush=True)
        return None
    finally:
        shutil.rmtree(out, ignore_errors=True)
    seconds = time.perf_counter() - t0
    print(f"airflow-iqp final_job: {tail.label}: rehearsed on unit {unit} in {seconds:.2f} s", flush=True)
    return seconds


def _run_batch_in_turn(spark, window_dir: str | os.PathLike, entry, slots: int, history: bool,
                       backend: str | None = None) -> None:
    """One batch of a fused tail before the last: claimed when ready, run in its turn into its partial."""
    from airflow_iqp.spark.batch_job import execute_planned_batch
    from airflow_iqp.window.tail import claim_when_ready, turn

    ws = _window_state(Path(window_dir).absolute())
    claim = claim_when_ready(entry)
    if not claim["units"]:
        print(f"airflow-iqp final_job: {entry.label}: nothing to claim", flush=True)
        return
    if ws.partial_path(entry.index).is_dir():  # a retry: written by the earlier attempt
        return
    with turn(entry, slots):
        metrics = execute_planned_batch(spark, entry, history=history, backend=backend)
    print(f"airflow-iqp final_job: {entry.label}: {metrics['units']} units in {metrics['wall_seconds']:.1f} s",
          flush=True)
