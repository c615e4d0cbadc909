"""What a window's run leaves behind besides its result: late units, observed arrivals, task CPU."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airflow_iqp.state import (
    WindowState, atomic_write_json, check_name, list_ready_units, note_seen, read_claims, read_json,
)
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
    previous = WindowState(cfg.state_dir, cfg.query, window_id(window_start - (window_end - window_start)))
    path = previous.root / "plan.json"
    if not path.is_file():
        return None
    doc = read_json(path)
    if not doc["batches"] or doc.get("backfill"):
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
    ws = WindowState(batch.state_dir, batch.query, window_id(window_start))
    taken = {u for m in read_claims(ws).values() for u in m.get("units", [])}
    streams = batch.stream_list()
    late = [p for p in list_ready_units(batch.landing, streams) if p.name not in taken]
    seen = note_seen(ws, [p.name for p in late])
    return {"units": [p.name for p in late], "files": files_of(late, streams),
            "arrival_times": [seen[p.name] for p in late]}


def record_arrivals(batch: Batch, window_start: float) -> Path:
    """Observed arrival offsets of the window's units, for the next window's plan."""
    ws = WindowState(batch.state_dir, batch.query, window_id(window_start))
    units = list_ready_units(batch.landing, batch.stream_list())
    seen = note_seen(ws, [p.name for p in units])
    offsets = sorted(max(0.0, seen[p.name] - window_start) for p in units)
    return atomic_write_json(ws.root / "arrivals.json", {"offsets": offsets, "units": [p.name for p in units]})


def record_task_cpu(window_root: str | os.PathLike, ti: Any, phase: str = "run") -> dict:
    """Record this task process's CPU seconds so far in ``<window>/cpu/``; return the record.

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
    name = check_name(f"{rec['task_id']}.{rec['map_index']}.{rec['try_number']}.{phase}.json", "task_id")
    atomic_write_json(Path(window_root) / "cpu" / name, rec)
    return rec


def record_attempt(window_root: str | os.PathLike, name: str, ti: Any) -> Path:
    """Record that an attempt of a window's task starts: ``<window>/attempts/<name>.<try>.json``.

    ``name`` is what the attempt works on (``batch-0001``, ``final``). Written before the
    work, so an attempt killed with its process (a task, its host) is on record too: the
    window's report counts them, and says which batches ran more than once.
    """
    rec = {"name": name, "task_id": ti.task_id, "map_index": getattr(ti, "map_index", -1),
           "try_number": ti.try_number, "pid": os.getpid(), "started_at": time.time()}
    return atomic_write_json(Path(window_root) / "attempts" / f"{name}.{ti.try_number}.json", rec)


def attempts(window_root: str | os.PathLike) -> dict[str, list[int]]:
    """The recorded attempts of a window's tasks (:func:`record_attempt`): name -> try numbers."""
    out: dict[str, list[int]] = {}
    for path in sorted((Path(window_root) / "attempts").glob("*.json")):
        rec = read_json(path)
        out.setdefault(rec["name"], []).append(rec["try_number"])
    return {name: sorted(tries) for name, tries in out.items()}


def window_task_cpu(window_root: str | os.PathLike) -> dict:
    """The CPU the window's task processes recorded (:func:`record_task_cpu`), summed."""
    recs = [read_json(p) for p in sorted((Path(window_root) / "cpu").glob("*.json"))]
    own = sum(r["self_cpu_seconds"] for r in recs)
    kids = sum(r["children_cpu_seconds"] for r in recs)
    return {"tasks": len(recs), "self_cpu_seconds": own, "children_cpu_seconds": kids, "cpu_seconds": own + kids}

