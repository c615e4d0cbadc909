"""One batch's partial aggregation: the work a batch job is handed, and the job itself.

The store hands a batch job its work by value (:func:`batch_work`): the files its claim
lists (without the units quarantined when claimed), the units they belong to, and where its
partial and metrics go. The job reads exactly those files, writes the partial through the
store, where it appears whole (a retry replaces only its own), then its metrics, and a ``batch`` line of the cost history. No Airflow import here:
this runs on a Spark driver.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from airflow_iqp.errors import ConfigError
from airflow_iqp.filecheck import files_to_read, inspect_files, kept_units
from airflow_iqp.query.store import Saved, load_query
from airflow_iqp.spark.jobmetrics import StepMeter
from airflow_iqp.spark.steps import parquet_rows, parquet_writer, partial_of, read_stream, run_batch
from airflow_iqp.streams import stream_of
from airflow_iqp.store import WindowState, open_store
from airflow_iqp.window.accounting import record_batch_cost

#: Test hook: with this set to SECONDS the job sleeps that long after the partial is
#: completely written to its temporary path and before the rename, so that a test can kill
#: it at exactly that point.
PAUSE_ENV = "AIRFLOW_IQP_PAUSE_BEFORE_RENAME"


def batch_work(ws: WindowState, batch: int, static: str | dict | None = None,
               members: tuple[str, ...] = ()) -> dict:
    """What batch ``batch`` of window ``ws`` reads and writes, as plain JSON: its claimed
    files and units (those quarantined when claimed left out, and listed), the rows of the
    files the claim checked whole, where its partial and metrics go, and its static tables
    (None: the saved query's). A group's shared batch (``ws`` the group's window) names
    its ``members``: the queries it writes a partial for, each in its own window."""
    claim = ws.claim_of(batch)
    if claim is None:
        raise ConfigError(f"{ws.query_id}/{ws.window_id}: batch {batch} has not claimed its input", field="batch")
    return {"store": ws.store.location, "query": ws.query_id, "window": ws.window_id, "batch": batch,
            "claimed": len(claim.get("units", [])), "units": kept_units(claim), "files": files_to_read(claim),
            "checked": claim.get("checked") or {}, "claimed_at": claim.get("claimed_at"),
            "quarantined": [{k: q[k] for k in ("unit", "file", "reason")} for q in claim.get("quarantined", [])],
            "partial": ws.partial_uri(batch), "metrics": ws.metrics_uri(batch), "static": static,
            **({"members": list(members)} if members else {})}


#: Work longer than this (in characters of JSON) goes to the job as a file the store writes,
#: not as an argument: Linux takes no argument over 128 KiB.
MAX_WORK_ARG = 100_000


def work_args(ws: WindowState, work: dict) -> list[str]:
    """The batch job's arguments that give it ``work``: the JSON itself, or where the store
    wrote it when it is too long for one argument of a command line."""
    text = json.dumps(work)
    if len(text) <= MAX_WORK_ARG:
        return ["--work", text]
    return ["--work-file", ws.work_uri(work["batch"], work)]


def _pause_hook(tmp) -> None:
    seconds = float(os.environ.get(PAUSE_ENV, "0") or 0)
    if seconds > 0:
        print(f"airflow-iqp: partial written to {tmp}; pausing {seconds}s before rename", file=sys.stderr, flush=True)
        time.sleep(seconds)


#: How many members' steps a group's shared batch runs at once on its session (its fused
#: tail runs one at a time: :data:`airflow_iqp.spark.group_tail.TAIL_LANES`). Part of
#: a member's step on a batch of a few units is the driver's work (analysis, scheduling,
#: the partial's or result's commit) on one core, which one member after another leaves
#: the other core of a small cluster idle through. Two CPU-heavy members side by side
#: each take longer than alone, and together about as long as one after the other.
LANES = 2


def in_lanes(step, members: list[str], *, stop=None, pick=None, on_done=None,
             lanes: int = LANES) -> tuple[dict, list[str]]:
    """``step(member)`` for each of ``members``, at most ``lanes`` at once:
    ``({member: its step's return}, [the members handed over])``. Each time a lane frees,
    ``stop()`` (if given) is asked first: once it is true, the members not started are
    handed over and do not start; then ``pick(waiting)`` names the member to start (the
    first waiting without it). ``on_done(member, its return)`` runs as each is done. A step
    that fails raises once the steps already started are done, and no other starts."""
    out, queue, left = {}, list(members), []
    with ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="iqp-lane") as pool:
        running: dict = {}
        while queue or running:
            while queue and len(running) < lanes:
                if stop is not None and stop():
                    left, queue = queue, []
                    break
                m = pick(queue) if pick is not None else queue[0]
                queue.remove(m)
                running[pool.submit(step, m)] = m
            for future in wait(running, return_when=FIRST_COMPLETED).done if running else ():
                m = running.pop(future)
                out[m] = future.result()
                if on_done is not None:
                    on_done(m, out[m])
    return out, left


def _check_work(work: dict, saved: Saved) -> None:
    """The work names plain units and only files of the query's landing paths: work edited
    by hand cannot make the batch read, or name in its state, anything else."""
    from airflow_iqp.paths import check_name, check_within

    for unit in work["units"]:
        check_name(str(unit), "work.units")
    roots = [_fixed_root(s.path) for s in saved.streams if s.path]
    for f in work["files"] if roots else ():
        check_within(str(f), roots, "work.files")


def _fixed_root(path: str) -> str:
    """The directory of a landing path before its first template expression: a saved stream
    keeps its path as the DAG wrote it (``.../{{ data_interval_start | ts_nodash }}``), and a
    claim names files of the rendered path."""
    cut = min((i for i in (path.find("{{"), path.find("{%")) if i >= 0), default=-1)
    return path if cut < 0 else path[:cut].rsplit("/", 1)[0]


def execute_batch(spark, work: dict, *, backend: str, history: bool = True, stop=None, keep: dict | None = None) -> dict:
    """Run one batch end to end in ``spark``: compute, write, record. Returns the metrics.
    ``stop``, ``keep``: see :func:`execute_shared_batch` (a group's batch only)."""
    if work.get("members"):
        return execute_shared_batch(spark, work, backend=backend, history=history, stop=stop, keep=keep)
    ws = open_store(work["store"]).window(work["query"], work["window"])
    saved = load_query(work["query"], ws.store)
    query = saved.query
    _check_work(work, saved)
    files, units = [str(f) for f in work["files"]], list(work["units"])
    if work["claimed"] and not units:  # every unit quarantined when claimed: nothing to compute
        return {"query": query.id, "batch": work["batch"], "units": 0, "unit_ids": [],
                "quarantined": work["quarantined"], "wall_seconds": 0.0, "written_at": None}
    record = ws.store.query(query.id)
    with StepMeter(spark) as meter:
        # The window's claimed files, in batch order, are where a stream's columns not yet
        # declared or recorded are taken from: the window's first good unit sets them.
        claimed = ws.claimed_files() if _columns_unknown(saved, record) else ()
        inspection = inspect_files(files, saved, record, claimed=claimed, checked=work["checked"])
        infos = inspection.infos
        df = run_batch(spark, saved, files, work["static"] or None, inspection=inspection)
        partial = ws.write_partial(work["batch"], parquet_writer(df, before_commit=_pause_hook))
    later = {q["unit"] for q in inspection.quarantined}  # found bad past the claim's sample
    units = [u for u in units if u not in later]
    metrics = {
        "query": query.id, "batch": work["batch"], "units": len(units), "unit_ids": units, "files": len(infos),
        "bytes": sum(i.bytes or 0 for i in infos), "rows_in": sum(i.rows or 0 for i in infos),
        "rows_out": parquet_rows(partial), "wall_seconds": meter.wall_seconds,
        "cpu_seconds": meter.cpu_seconds, "task_seconds": meter.task_seconds, "backend": backend,
        "quarantined": work["quarantined"] + inspection.quarantined, "written_at": time.time(),
    }
    ws.write_metrics(work["batch"], metrics)
    if history:
        record_batch_cost(ws, metrics, work["claimed_at"], backend)
    return metrics


def _columns_unknown(saved: Saved, record) -> bool:
    """Whether a stream the query reads has columns neither declared nor recorded."""
    return any(not s.schema and record.columns(s.name) is None
               for s in saved.streams if s.name in saved.query.streams)


def execute_shared_batch(spark, work: dict, *, backend: str, history: bool = True, stop=None,
                         keep: dict | None = None) -> dict:
    """A group's batch: its units read once (cached), and each member query's partial
    written into that query's window, whose claim of the batch is the group's
    (:meth:`~airflow_iqp.store.WindowState.adopt_claim`), before its partial is written.
    The group's window gets the batch's metrics, and the group's cost history its cost:
    every member's step together, from the group's claim to the last partial written. The
    members' steps run in the group's order, :data:`LANES` at once (:func:`in_lanes`).

    ``stop()``, asked before each member's step starts, hands the rest over: once it is
    true, the members not started get no partial of this batch (``metrics["left"]`` names
    them), and a group's fused tail computes their step on these units with its last
    batch's, earliest deadline first
    (:func:`airflow_iqp.spark.group_tail.execute_group_tail`). A batch handed over records
    no cost history: its cost is not every member's. With ``stop`` (in a fused tail), a
    member whose partial an earlier attempt wrote is not computed again; without it, a
    retry writes every member's partial again. ``keep``: where a batch that hands members
    over leaves its read units, still cached, for the tail in the same session
    (``keep[batch] = (inspection, {stream: DataFrame})``; the tail unpersists them)."""
    store = open_store(work["store"])
    group = store.window(work["query"], work["window"])
    claim = group.claim_of(work["batch"])
    if claim is None:
        raise ConfigError(f"{group.location}: batch {work['batch']} has not claimed its input", field="batch")
    members = {m: load_query(m, store) for m in work["members"]}
    for saved in members.values():
        _check_work(work, saved)
    files, units = [str(f) for f in work["files"]], list(work["units"])
    windows = {m: store.window(m, work["window"]) for m in members}
    for ws in windows.values():
        ws.adopt_claim(work["batch"], claim)
    if work["claimed"] and not units:  # every unit quarantined when claimed: nothing to compute
        return {"query": group.query_id, "batch": work["batch"], "units": 0, "unit_ids": [], "members": list(members),
                "quarantined": work["quarantined"], "wall_seconds": 0.0, "written_at": None}
    todo = [m for m in members if not (stop is not None and windows[m].has_partial(work["batch"]))]
    with StepMeter(spark) as meter:
        inspection, tables = read_shared(spark, group, members, files, work["checked"])

        def step(m: str) -> dict:
            t0 = time.time()
            df = partial_of(spark, members[m], tables, work["static"] or None)
            uri = windows[m].write_partial(work["batch"], parquet_writer(df, before_commit=_pause_hook))
            return {"uri": uri, "seconds": time.time() - t0, "written_at": time.time()}

        left: list = []
        try:
            per_member, left = in_lanes(step, todo, stop=stop)
        finally:
            if left and keep is not None:
                keep[work["batch"]] = (inspection, tables)
            else:
                for df in tables.values():
                    df.unpersist()
    infos = inspection.infos
    later = {q["unit"] for q in inspection.quarantined}
    units = [u for u in units if u not in later]
    quarantined = work["quarantined"] + inspection.quarantined
    base = {"batch": work["batch"], "units": len(units), "unit_ids": units, "files": len(infos),
            "bytes": sum(i.bytes or 0 for i in infos), "rows_in": sum(i.rows or 0 for i in infos),
            "backend": backend, "quarantined": quarantined}
    for m, done in per_member.items():
        windows[m].write_metrics(work["batch"], {
            **base, "query": m, "group": group.query_id, "rows_out": parquet_rows(done["uri"]),
            "wall_seconds": done["seconds"], "cpu_seconds": None, "task_seconds": None,
            "written_at": done["written_at"]})
    metrics = {**base, "query": group.query_id, "members": list(members), "wall_seconds": meter.wall_seconds,
               "cpu_seconds": meter.cpu_seconds, "task_seconds": meter.task_seconds,
               "written_at": max((d["written_at"] for d in per_member.values()), default=time.time()),
               **({"left": left} if left else {})}
    group.write_metrics(work["batch"], metrics)
    if history and len(per_member) == len(members):  # every member's step: none handed over or skipped
        record_batch_cost(group, metrics, work["claimed_at"], backend)
    return metrics


def read_shared(spark, group: WindowState, members: dict[str, Saved], files: list[str], checked: dict | None):
    """A shared batch's files, checked once and read once for every member: (the
    inspection, ``{stream: DataFrame}``, persisted where more than one member reads the
    stream; the caller unpersists them).

    One check of the batch's files, of every stream a member reads: a unit bad in any of
    them is out of the batch for every member (the group claimed it once). The record of
    the streams' columns is the first member's, and every member's gets what it records."""
    store = group.store
    lead = reader_of_all(members)
    record = store.query(lead.query.id)
    claimed = group.claimed_files() if _columns_unknown(lead, record) else ()
    inspection = inspect_files(files, lead, record, claimed=claimed, checked=checked)
    for m in list(members)[1:]:  # a member's merge of an empty window reads its own record
        for stream, columns in inspection.columns.items():
            if columns and store.query(m).columns(stream) is None and record.columns(stream) is not None:
                store.query(m).record_columns(stream, record.columns(stream))
    readers = Counter(s for saved in members.values() for s in saved.query.streams)
    # Caching reads and stores every column of a stream; a member that reads it alone reads
    # only its own columns, straight from the files.
    return inspection, {name: df.persist() if readers[name] > 1 else df
                        for name, df in _union_streams(spark, members, inspection).items()}


def reader_of_all(members: dict[str, Saved]) -> Saved:
    """The first member, reading every stream any member reads: what checks a shared
    batch's files once for all of them (:func:`inspect_files`)."""
    first = next(iter(members.values()))
    read = tuple(dict.fromkeys(s for saved in members.values() for s in saved.query.streams))
    return dataclasses.replace(first, query=dataclasses.replace(first.query, streams=read))


def _union_streams(spark, members: dict[str, Saved], inspection) -> dict:
    """One DataFrame per stream any member reads, read once for all of them."""
    out: dict = {}
    for saved in members.values():
        for name in saved.query.streams:
            if name not in out:
                out[name] = read_stream(spark, saved.stream(name),
                                        [f for f in inspection.files if stream_of(f, saved.streams).name == name],
                                        inspection.columns.get(name))
    return out
