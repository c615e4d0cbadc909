"""What a window's run leaves behind besides its result: late units, observed arrivals, task CPU."""

from __future__ import annotations

import os
import time
from typing import Any

from airflow_iqp.landing import list_units
from airflow_iqp.store import WindowState, batch_name, open_store
from airflow_iqp.streams import files_of
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import QueryConfig, clock, window_id


def late_entry(cfg: QueryConfig, window_start: float, window_end: float) -> Batch | None:
    """With ``late="merge"``: the late batch of the window before this one, for this run to
    merge into its result, or None (no earlier window planned, or late data only recorded).

    It fires ``lateness`` seconds after that window's end plus ``grace``, once that window's
    result (its first revision) is written, or at its deadline plus ``lateness`` if none ever
    is, and claims every unit of it that no batch has claimed; :func:`airflow_iqp.spark.final_job.execute_late`
    merges them as a new revision. It runs in the next window's run, so the earlier run
    is over by its deadline and its deadline alert says only whether the first revision
    was on time.
    """
    if cfg.late != "merge":
        return None
    previous = open_store(cfg.state_dir).window(cfg.query, window_id(window_start - (window_end - window_start)))
    doc = previous.doc("plan")
    if doc is None or not doc["batches"] or doc.get("backfill"):
        return None
    last = max((Batch.from_dict(e) for e in doc["batches"]), key=lambda e: e.index)
    at = doc["window_end"] + last.grace + cfg.lateness
    return last.with_(index=last.index + 1, of=last.index + 1, last=True, late=True, known_total=True, spare=False,
                      skip=False, turn_ts=0.0, max_units=None, ready_ts=at, latest_start_ts=at,
                      window_start_ts=doc["window_start"], lateness=cfg.lateness,
                      label=f"late data of window {previous.window_id} · ready {clock(at)}")


def late_units(batch: Batch, window_start: float) -> dict:
    """Units in the landing directory of ``batch``'s query that no batch of the window
    starting at ``window_start`` claimed: late data, with arrival times."""
    ws = open_store(batch.state_dir).window(batch.query, window_id(window_start))
    taken = ws.claimed_units()
    streams = batch.streams
    late = [p for p in list_units(batch.landing, streams) if p.name not in taken]
    seen = ws.note_seen([p.name for p in late])
    return {"units": [p.name for p in late], "files": files_of(late, streams),
            "arrival_times": [seen[p.name] for p in late]}


def record_arrivals(batch: Batch, window_start: float) -> str:
    """Observed arrival offsets of the window's units, for the next window's plan."""
    ws = open_store(batch.state_dir).window(batch.query, window_id(window_start))
    units = list_units(batch.landing, batch.streams)
    seen = ws.note_seen([p.name for p in units])
    offsets = sorted(max(0.0, seen[p.name] - window_start) for p in units)
    return ws.write_doc("arrivals", {"offsets": offsets, "units": [p.name for p in units]})


def record_task_cpu(ws: WindowState, ti: Any, phase: str = "run") -> dict:
    """Record this task process's CPU seconds so far with the window; return the record.

    ``self`` is the task process itself (Airflow's task runner, the DAG file's imports, a
    Spark Connect client); ``children`` every child it has reaped: for a spark-submit task,
    the whole spark-submit process tree (JVM, Python driver, Python workers). One file per
    task instance, try and phase (a deferred sensor runs in two processes).
    """
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rec = {"task_id": ti.task_id, "map_index": getattr(ti, "map_index", -1), "try_number": ti.try_number,
           "phase": phase, "self_cpu_seconds": me.ru_utime + me.ru_stime,
           "children_cpu_seconds": kids.ru_utime + kids.ru_stime, "recorded_at": time.time()}
    ws.record("cpu", f"{rec['task_id']}.{rec['map_index']}.{rec['try_number']}.{phase}", rec)
    return rec


def record_attempt(ws: WindowState, name: str, ti: Any) -> str:
    """Record that an attempt of a window's task on ``name`` starts.

    ``name`` is what the attempt works on (``batch-0001``, ``final``). Written before the
    work, so an attempt killed with its process (a task, its host) is on record too: the
    window's report counts them, and says which batches ran more than once.
    """
    rec = {"name": name, "task_id": ti.task_id, "map_index": getattr(ti, "map_index", -1),
           "try_number": ti.try_number, "pid": os.getpid(), "started_at": time.time()}
    return ws.record("attempts", f"{name}.{ti.try_number}", rec)


def attempts(ws: WindowState) -> dict[str, list[int]]:
    """The recorded attempts of a window's tasks (:func:`record_attempt`): name -> try numbers."""
    out: dict[str, list[int]] = {}
    for rec in ws.records("attempts"):
        out.setdefault(rec["name"], []).append(rec["try_number"])
    return {name: sorted(tries) for name, tries in out.items()}


def window_task_cpu(ws: WindowState) -> dict:
    """The CPU the window's task processes recorded (:func:`record_task_cpu`), summed."""
    recs = ws.records("cpu")
    own = sum(r["self_cpu_seconds"] for r in recs)
    kids = sum(r["children_cpu_seconds"] for r in recs)
    return {"tasks": len(recs), "self_cpu_seconds": own, "children_cpu_seconds": kids, "cpu_seconds": own + kids}



def _tries(ws: WindowState, name: str) -> int:
    """How many attempts of the window's task on ``name`` started (:func:`record_attempt`)."""
    return sum(1 for rec in ws.records("attempts") if rec["name"] == name)


def batch_span(ws: WindowState, batch: int, claimed_at: float | None, written_at: float | None) -> float | None:
    """Seconds from a batch's claim to its written partial: what the batch cost its window
    (the task's start, the JVM or session, the Spark work), as the cost history records it.

    None when that is not one batch's cost: its claim has no time, or the batch did not run
    once in a task of its own (a retry's span holds the failed attempt and the wait; a fused
    tail's batches run in a session that was open before their claim; a claim outside
    Airflow has no attempt)."""
    if claimed_at is None or written_at is None or _tries(ws, batch_name(batch)) != 1:
        return None
    return max(0.0, written_at - claimed_at)


def merge_span(ws: WindowState, written_at: float) -> float | None:
    """Seconds from the end of a window's last batch to its written result: the final
    task's start, its JVM or session, and the merge, as the cost history records them. A
    batch ends when its partial is written, or when it claimed nothing.

    None when that is not one merge's cost: the final task did not run once, or a batch
    claimed units and wrote no partial."""
    if _tries(ws, "final") != 1:
        return None
    ends = [claim.get("claimed_at") if not claim.get("units") else ws.metrics(index).get("written_at")
            for index, claim in ws.claims().items()]
    if not ends or None in ends:
        return None
    return max(0.0, written_at - max(ends))


def record_batch_cost(ws: WindowState, metrics: dict, claimed_at: float | None, backend: str) -> dict:
    """A batch's measured cost into the cost history: its Spark step, and its span from claim
    to written partial (:func:`batch_span`)."""
    return ws.store.record_cost(query=ws.query_id, kind="batch", units=metrics["units"], batches=1,
                                wall_seconds=metrics["wall_seconds"], cpu_seconds=metrics["cpu_seconds"],
                                task_seconds=metrics["task_seconds"], backend=backend, window=ws.window_id,
                                end_to_end_seconds=batch_span(ws, metrics["batch"], claimed_at,
                                                              metrics["written_at"]))


def record_merge_cost(ws: WindowState, manifest: dict, units: int) -> dict:
    """A window's merge of ``units`` units into the cost history: its Spark step, and its span
    from the last batch's end to the written result (:func:`merge_span`, as the manifest says)."""
    return ws.store.record_cost(query=ws.query_id, kind="final", units=units,
                                batches=len(manifest["partials"]), wall_seconds=manifest["wall_seconds"],
                                cpu_seconds=manifest["cpu_seconds"], task_seconds=manifest["task_seconds"],
                                backend=manifest["backend"], window=ws.window_id,
                                end_to_end_seconds=manifest["end_to_end_seconds"])
