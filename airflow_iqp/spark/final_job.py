"""spark-submit application: the final aggregation of one window.

    spark-submit final_job.py QUERY_ID WINDOW_DIR [--expect-units N] [--no-history] [--backend NAME]
                              [--tail ENTRY_JSON [--tail-slots N]] [--late BATCH]

WINDOW_DIR is ``STATE/<query>/<window>``. The job merges every batch's partial
(``partials/batch-NNNN/``) into ``result/`` (written to a hidden temporary directory and
renamed into place), then writes ``result.manifest.json`` last: its presence marks the
result complete. Before merging it checks coverage: every claimed batch has a partial,
and every unit is covered exactly once across the partials (a unit in two partials is an
error naming both batches).

With ``--tail`` (a fused tail: the plan's tail, the last batch's entry with the batches
ready after the task starts) the application starts before the window's end, warms its
session, runs those batches as each becomes ready, waits for the last batch's input,
claims it, waits for its turn (``--tail-slots``), and runs it with the merge: after the
window's end, no JVM start and one Spark application instead of two
(:func:`airflow_iqp.spark.tail.run_tail`).
While there is time before the window's end it rehearses that last step once on a unit
already claimed, so that the session's code for it is warm (``tail.rehearse_tail``). A
small result is collected and written by this process (``steps.write_result``).

With ``--late BATCH`` (late data, merged) it computes the claimed late batch, and any claimed
batch whose partial was never written, and writes the result again as a new revision
(:func:`execute_late`).

No Airflow import here: this file runs on a Spark driver.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def check_coverage(ws, expect_units: int | None = None, computing: int | None = None) -> dict:
    """The partials of a window and the units/files they cover (a claim's quarantined units
    are in none); raises DataError on a gap or overlap.

    ``computing``: a claimed batch whose partial this job computes itself (a fused tail's)
    and that counts as covered although its partial is not written yet.
    """
    from airflow_iqp.errors import DataError
    from airflow_iqp.filecheck import files_to_read, kept_units
    from airflow_iqp.state import batch_of, read_claims

    claims = {b: {**m, "units": kept_units(m), "files": files_to_read(m)} for b, m in read_claims(ws).items()}
    partial_dirs = {batch_of(p): p for p in _partial_dirs(ws)}
    if computing is not None and computing in claims:
        partial_dirs.setdefault(computing, ws.partial_path(computing))
    # A batch that found nothing to claim (its claim is empty), or whose every unit was
    # quarantined when it claimed, has no partial, and needs none.
    missing = sorted({b for b, m in claims.items() if m.get("units") or m.get("files")} - set(partial_dirs))
    if missing:
        raise DataError(f"{ws.root}: batch(es) {missing} claimed input but have no partial result yet; "
                        f"run them before the final aggregation")
    unclaimed = sorted(set(partial_dirs) - set(claims))
    if unclaimed:
        raise DataError(f"{ws.root}: partial(s) of batch(es) {unclaimed} have no claim manifest")
    owner: dict[str, int] = {}
    owner_file: dict[str, int] = {}
    for b in sorted(partial_dirs):
        for u in claims[b].get("units", []):
            if u in owner:
                raise DataError(f"{ws.root}: unit {u} is covered by two partials, batch {owner[u]} and batch {b}")
            owner[u] = b
        for f in claims[b].get("files", []):
            if f in owner_file:
                raise DataError(f"{ws.root}: file {f} is covered by two partials, batch {owner_file[f]} and batch {b}")
            owner_file[f] = b
    if expect_units is not None and len(owner) != expect_units:
        raise DataError(f"{ws.root}: partials cover {len(owner)} units, expected {expect_units}")
    return {
        "batches": sorted(partial_dirs),
        "partials": [str(partial_dirs[b]) for b in sorted(partial_dirs)],
        "units": [u for b in sorted(partial_dirs) for u in claims[b].get("units", [])],
        "files": [f for b in sorted(partial_dirs) for f in claims[b].get("files", [])],
    }


def _partial_dirs(ws) -> list[Path]:
    """The written partial directories of a window (``partials/batch-NNNN/``), in order."""
    if not ws.partials_dir.is_dir():
        return []
    return sorted(p for p in ws.partials_dir.iterdir() if p.is_dir() and p.name.startswith("batch-"))


def _window_state(window_dir: Path):
    """The WindowState of ``STATE/<query>/<window>`` (an absolute path)."""
    from airflow_iqp.state import WindowState

    return WindowState(window_dir.parents[1], window_dir.parent.name, window_dir.name)


def _written_dirs(window_dir: str | os.PathLike) -> dict[str, tuple[int, int]]:
    """``{path: (inode, mtime_ns)}`` of a window's written partial directories (a partial
    written again, by a retry, is a new directory in its place: a new identity)."""
    out = {}
    for p in _partial_dirs(_window_state(Path(window_dir).absolute())):
        try:
            st = p.stat()
        except OSError:
            continue
        out[str(p)] = (st.st_ino, st.st_mtime_ns)
    return out


def _ahead_or_paths(written: dict | None, window_dir: str | os.PathLike, paths: list[str]):
    """``written["df"]`` if it read exactly ``paths`` and none was written again since, else ``paths``."""
    if written is None or sorted(written["dirs"]) != sorted(paths) or _written_dirs(window_dir) != written["dirs"]:
        return paths
    return written["df"]


def merge_rows_estimate(ws, partials: list[str], tail_rows_in: int | None = None, *,
                        tail: bool = False) -> int | None:
    """The rows a window's merge reads, estimated before it runs: the written ``partials``'
    rows (their metrics, else their footers), plus, for a fused tail's unwritten partial
    (``tail``), its ``tail_rows_in`` input rows times the largest ratio of partial rows to
    input rows among the written batches, or those input rows themselves when no batch is
    written. None when a tail's input rows are unknown (files on an object store are not
    inspected). A result has no more rows than its merge reads:
    :func:`~airflow_iqp.spark.steps.write_result` collects a small one."""
    from airflow_iqp.spark.steps import parquet_rows
    from airflow_iqp.state import batch_of

    if tail and tail_rows_in is None:
        return None
    rows, ratio = 0, None
    for p in partials:
        m = _metrics(ws, batch_of(p))
        out = m.get("rows_out")
        rows += (parquet_rows(p) or 0) if out is None else out
        if out is not None and m.get("rows_in"):
            ratio = max(ratio or 0.0, out / m["rows_in"])
    if tail:
        rows += tail_rows_in if ratio is None else round(tail_rows_in * ratio)
    return rows


def execute_final(spark, query_id: str, window_dir: str | os.PathLike, *, expect_units: int | None = None,
                  history: bool = True, backend: str | None = None, tail: tuple[int, object] | None = None,
                  written: dict | None = None, quarantined: list[dict] | None = None,
                  tail_rows_in: int | None = None) -> dict:
    """Merge a window's partials into its result; return the result manifest.

    ``tail``: ``(batch, partial DataFrame)`` of a claimed batch whose partial is not written
    yet (a fused tail's): it is merged with the written ones in the same Spark job;
    ``tail_rows_in``, its input rows, if known (for :func:`merge_rows_estimate`).
    ``written``: those written ones as read ahead by ``tail.read_written`` (used with a
    ``tail`` only, and only if they are still the window's partials). ``quarantined``:
    the tail batch's units found bad in it; the claims' and the written batches' are in
    their manifests and metrics. The manifest lists them all (:func:`quarantined_units`),
    its ``units`` none of them.
    """
    from airflow_iqp.errors import ConfigError
    from airflow_iqp.spark.jobmetrics import StepMeter, merge_span
    from airflow_iqp.query.store import load_query
    from airflow_iqp.spark.steps import parquet_rows, run_final, write_result
    from airflow_iqp.state import append_cost_history, atomic_write_json, read_json

    window_dir = Path(window_dir).absolute()
    if not window_dir.is_dir():
        raise ConfigError(f"{window_dir}: window state directory does not exist", field="window_dir")
    ws = _window_state(window_dir)
    if ws.query_id != query_id.lower():
        raise ConfigError(f"{window_dir} belongs to query {ws.query_id}, not {query_id}", field="window_dir")
    saved = load_query(query_id, ws.state_dir)
    query = saved.query
    cover = check_coverage(ws, expect_units, computing=tail[0] if tail else None)
    paths = [p for p in cover["partials"] if not tail or p != str(ws.partial_path(tail[0]))]
    rows_estimate = merge_rows_estimate(ws, paths, tail_rows_in, tail=bool(tail))
    with StepMeter(spark) as meter:
        if tail:
            df = run_final(spark, saved, _ahead_or_paths(written, window_dir, paths), also=tail[1])
        elif paths:
            df = run_final(spark, saved, paths)
        else:  # an empty window: nothing landed, every batch skipped
            df = run_final(spark, saved, [], also=empty_partial(spark, saved, ws.state_dir))
        write_result(df, ws.result_dir, rows_estimate)
    bad = quarantined_units(ws, cover["batches"], quarantined)
    out = {q["unit"] for q in bad}
    manifest = {
        "query": query.id, "window": ws.window_id, "result": str(ws.result_dir),
        **cover, "units": [u for u in cover["units"] if u not in out], "quarantined": bad,
        "rows_out": parquet_rows(ws.result_dir),
        "wall_seconds": meter.wall_seconds, "cpu_seconds": meter.cpu_seconds, "task_seconds": meter.task_seconds,
        "backend": backend, "written_at": time.time(),
    }
    manifest |= revisions(read_json(ws.result_manifest) if ws.result_manifest.is_file() else None, manifest)
    # With a fused tail's batch in it, this is no merge's cost; nor is a late revision's.
    merge = history and not tail
    manifest["end_to_end_seconds"] = merge_span(ws, manifest["written_at"]) if merge else None
    atomic_write_json(ws.result_manifest, manifest)
    if merge:
        append_cost_history(ws.state_dir, query=query.id, kind="final", units=len(cover["units"]),
                            batches=len(cover["partials"]), wall_seconds=meter.wall_seconds,
                            cpu_seconds=meter.cpu_seconds, task_seconds=meter.task_seconds,
                            backend=backend, window=ws.window_id, end_to_end_seconds=manifest["end_to_end_seconds"])
    return manifest


def quarantined_units(ws, batches, more=None) -> list[dict]:
    """Every unit of the window left out of its result, once each (unit, file, reason): those
    its claims quarantined, those its ``batches`` found bad past the claim's sample (their
    metrics), and ``more`` (a fused tail's)."""
    from airflow_iqp.state import read_claims

    found = [q for c in read_claims(ws).values() for q in c.get("quarantined", [])]
    found += [q for b in batches for q in _metrics(ws, b).get("quarantined", [])] + list(more or [])
    out: dict[str, dict] = {}
    for q in found:
        out.setdefault(q["unit"], {k: q[k] for k in ("unit", "file", "reason")})
    return list(out.values())


def empty_partial(spark, saved, state_dir):
    """The partial of a window in which nothing landed: the batch step over no rows, with
    each stream's declared (or TPC-H) columns, else those recorded from its first unit of an
    earlier window. The merge of it is the query over no input: no groups, or the one row of
    a global aggregate (``count(*)`` is 0). A stream whose columns are unknown yet (its
    first window is empty) needs ``Stream(schema=...)``: a ConfigError says so."""
    from airflow_iqp.query.store import schema_dir
    from airflow_iqp.spark.steps import Inspection, run_batch
    from airflow_iqp.state import read_json

    columns = {}
    for name in saved.query.streams:
        record = schema_dir(state_dir, saved.query.id) / f"{name}.json"
        if record.is_file():
            columns[name] = dict(read_json(record)["columns"])
    return run_batch(spark, saved, [], inspection=Inspection([], [], columns))


def revisions(old: dict | None, new: dict) -> dict:
    """``{"revision", "revisions"}`` of a result written again: a new revision when it covers
    more units than the one before it (a late batch merged in), the same one when a retry
    wrote it again. Each revision lists its batches and units and when it was written; the
    first revision's time is what the deadline was about."""
    if old is None:
        return {"revision": 1, "revisions": [_revision(1, new)]}
    before = old.get("revisions") or [_revision(1, old)]
    number = old.get("revision", 1)
    if sorted(old.get("units", [])) != sorted(new["units"]):
        number += 1
    return {"revision": number, "revisions": [r for r in before if r["revision"] < number] + [_revision(number, new)]}


def _revision(number: int, manifest: dict) -> dict:
    return {"revision": number, "batches": manifest["batches"], "units": manifest["units"],
            "written_at": manifest["written_at"]}


def execute_late(spark, query_id: str, window_dir: str | os.PathLike, late_batch: int, static_dir=None, *,
                 history: bool = True, backend: str | None = None) -> dict:
    """Late data, merged (``late="merge"``): the late batch's claimed units into the window's result.

    Every claimed batch without a written partial (a fused tail's last batch, merged
    straight into the first revision) is computed from its claim and written, then the late
    batch's partial, then the result again from all partials: a new revision
    (:func:`revisions`). A retry skips the partials already written and recomputes none twice.
    """
    from airflow_iqp.spark.batch_job import execute_batch
    from airflow_iqp.state import read_claims

    ws = _window_state(Path(window_dir).absolute())
    for batch, claim in read_claims(ws).items():
        if claim.get("units") and not ws.partial_path(batch).is_dir():
            execute_batch(spark, query_id, ws.claim_path(batch), static_dir, ws.partial_path(batch),
                          history=history and batch == late_batch, backend=backend)
    return execute_final(spark, query_id, ws.root, history=False, backend=backend)


def _metrics(ws, batch: int) -> dict:
    from airflow_iqp.state import read_json

    path = ws.metrics_path(batch)
    return read_json(path) if path.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="final_job.py", description=__doc__.split("\n")[0])
    parser.add_argument("query")
    parser.add_argument("window_dir")
    parser.add_argument("--expect-units", type=int)
    parser.add_argument("--no-history", action="store_true")
    parser.add_argument("--tail", help="a fused tail: the last batch's plan entry (JSON); wait for its input, "
                                       "claim it, run it, then merge (run_tail)")
    parser.add_argument("--tail-slots", type=int, default=0, help="fused tails that run at once (0: no limit)")
    parser.add_argument("--late", type=int, metavar="BATCH",
                        help="late data: merge this claimed late batch into the result, a new revision (execute_late)")
    parser.add_argument("--backend", help="the backend's name, which the metrics and the cost history record")
    args = parser.parse_args(argv)

    from airflow_iqp.errors import IQPError
    from airflow_iqp.spark.batch_job import build_session, report_error

    spark = build_session(f"iqp-final-{args.query}-{Path(args.window_dir).name}")
    try:
        if args.late is not None:
            manifest = execute_late(spark, args.query, args.window_dir, args.late, history=not args.no_history,
                                    backend=args.backend)
        elif args.tail:
            from airflow_iqp.spark.tail import run_tail

            manifest = run_tail(spark, args.query, args.window_dir, args.tail, args.tail_slots,
                                history=not args.no_history, backend=args.backend)
        else:
            manifest = execute_final(spark, args.query, args.window_dir, expect_units=args.expect_units,
                                     history=not args.no_history, backend=args.backend)
    except IQPError as exc:
        report_error("final_job", exc)
        return 2
    except Exception as exc:  # a Spark error: said first as well, with its traceback after
        report_error("final_job", exc)
        raise
    finally:
        spark.stop()
    print(f"airflow-iqp final_job: wrote {manifest['result']} from {len(manifest['partials'])} partials", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
