"""A window's final aggregation: coverage, the merge of its partials into its result, revisions.

Before merging, the window's claims and written partials are checked against each other:
every batch that claimed input has a partial, every partial has a claim, and every unit
(and file) is covered exactly once (:func:`check_coverage`). The result is written through the store,
where it appears whole, and its manifest is written last: its presence marks the result
complete. A result written again with more units (late data
merged in) is a new revision (:func:`revisions`). No Airflow import here: this runs on a
Spark driver.
"""

from __future__ import annotations

import time

from airflow_iqp.errors import DataError
from airflow_iqp.filecheck import Inspection, files_to_read, kept_units
from airflow_iqp.paths import local_path
from airflow_iqp.query.store import load_query
from airflow_iqp.spark.jobmetrics import StepMeter
from airflow_iqp.spark.steps import parquet_rows, parquet_writer, run_batch, run_final, write_table
from airflow_iqp.store import WindowState
from airflow_iqp.window.accounting import merge_span, record_merge_cost


def read_claims(ws: WindowState) -> dict[int, dict]:
    """The window's claims by batch, each with the units and files it reads (a claim's
    quarantined units left out)."""
    return {b: {**m, "units": kept_units(m), "files": files_to_read(m)} for b, m in ws.claims().items()}


def unwritten(claims: dict, partials: dict) -> list[int]:
    """The batches of ``claims`` (as :func:`check_coverage` reads them) that claimed input and
    have no partial in ``partials``. A batch that found nothing to claim (its claim is
    empty), or whose every unit was quarantined when it claimed, has no partial, and needs none."""
    return sorted({b for b, m in claims.items() if m.get("units") or m.get("files")} - set(partials))


def check_coverage(ws: WindowState, expect_units: int | None = None,
                   computing: int | tuple[int, ...] | None = None) -> dict:
    """The partials of a window and the units/files they cover (a claim's quarantined units
    are in none); raises DataError on a gap or overlap.

    ``computing``: the claimed batch or batches whose partial this job computes itself (a
    fused tail's) and that count as covered although their partials are not written.
    """
    claims = read_claims(ws)
    partials = ws.written_partials()
    for b in tail_batches(computing):
        if b in claims:
            partials.setdefault(b, ws.partial_uri(b))
    missing = unwritten(claims, partials)
    if missing:
        raise DataError(f"{ws.location}: batch(es) {missing} claimed input but have no partial result yet; "
                        f"run them before the final aggregation")
    unclaimed = sorted(set(partials) - set(claims))
    if unclaimed:
        raise DataError(f"{ws.location}: partial(s) of batch(es) {unclaimed} have no claim")
    owner: dict[str, int] = {}
    owner_file: dict[str, int] = {}
    for b in sorted(partials):
        for u in claims[b].get("units", []):
            if u in owner:
                raise DataError(f"{ws.location}: unit {u} is covered by two partials, batch {owner[u]} and batch {b}")
            owner[u] = b
        for f in claims[b].get("files", []):
            if f in owner_file:
                raise DataError(f"{ws.location}: file {f} is covered by two partials, "
                                f"batch {owner_file[f]} and batch {b}")
            owner_file[f] = b
    if expect_units is not None and len(owner) != expect_units:
        raise DataError(f"{ws.location}: partials cover {len(owner)} units, expected {expect_units}")
    return {
        "batches": sorted(partials),
        "partials": [partials[b] for b in sorted(partials)],
        "units": [u for b in sorted(partials) for u in claims[b].get("units", [])],
        "files": [f for b in sorted(partials) for f in claims[b].get("files", [])],
    }


def ahead_or_paths(written: dict | None, ws: WindowState, paths: list[str]):
    """``written["df"]`` if it read exactly ``paths`` and none was written again since, else ``paths``."""
    if written is None or sorted(written["dirs"]) != sorted(paths) or ws.partial_versions() != written["dirs"]:
        return paths
    return written["df"]


def merge_rows_estimate(ws: WindowState, partials: list[str], tail_rows_in: int | None = None, *,
                        tail: bool = False) -> int | None:
    """The rows a window's merge reads, estimated before it runs: the written ``partials``'
    rows (their metrics, else their footers), plus, for a fused tail's unwritten partial
    (``tail``), its ``tail_rows_in`` input rows times the largest ratio of partial rows to
    input rows among the written batches, or those input rows themselves when no batch is
    written. None when a tail's input rows are unknown (files on an object store are not
    inspected). A result has no more rows than its merge reads:
    :func:`~airflow_iqp.spark.steps.parquet_writer` collects a small one."""
    if tail and tail_rows_in is None:
        return None
    by_uri = {uri: b for b, uri in ws.written_partials().items()}
    rows, ratio = 0, None
    for p in partials:
        m = ws.metrics(by_uri[p]) if p in by_uri else {}
        out = m.get("rows_out")
        rows += (parquet_rows(p) or 0) if out is None else out
        if out is not None and m.get("rows_in"):
            ratio = max(ratio or 0.0, out / m["rows_in"])
    if tail:
        rows += tail_rows_in if ratio is None else round(tail_rows_in * ratio)
    return rows


def execute_final(spark, ws: WindowState, *, backend: str, expect_units: int | None = None, history: bool = True,
                  tail: tuple[int, object] | None = None, written: dict | None = None,
                  quarantined: list[dict] | None = None, tail_rows_in: int | None = None,
                  computed_ahead: dict | None = None) -> dict:
    """Merge a window's partials into its result; return the result manifest.

    ``tail``: ``(batch, partial DataFrame)`` of a claimed batch whose partial is not written
    yet (a fused tail's), or ``((batch, ...), DataFrame)`` of several, computed together:
    it is merged with the written ones in the same Spark job;
    ``tail_rows_in``, its input rows, if known (for :func:`merge_rows_estimate`).
    ``written``: those written ones as read ahead by ``tail.read_written`` (used with a
    ``tail`` only, and only if they are still the window's partials). ``quarantined``:
    the tail batch's units found bad in it; the claims' and the written batches' are in
    their claims and metrics. The manifest lists them all (:func:`quarantined_units`),
    its ``units`` none of them.

    ``computed_ahead``: the result a fused tail computed before its claim from exactly the
    claimed files and these partials (``ahead.compute_ahead``): it is written, and nothing is run.
    """
    saved = load_query(ws.query_id, ws.store)
    query = saved.query
    cover = check_coverage(ws, expect_units, computing=tail[0] if tail else None)
    computed = {ws.partial_uri(b) for b in tail_batches(tail[0] if tail else None)}
    paths = [p for p in cover["partials"] if p not in computed]
    if computed_ahead is not None:
        merged = sorted(computed_ahead["versions"])
        if not tail or sorted(paths) != merged:
            raise DataError(f"{ws.location}: a result computed ahead from partials {merged} "
                            f"is not this window's merge of {sorted(paths)}")
        result = ws.write_result(lambda uri: write_table(computed_ahead["table"], local_path(uri)))
        meter = computed_ahead["meter"]
    else:
        result, meter = _merge(spark, ws, saved, paths, tail, written, tail_rows_in)
    bad = quarantined_units(ws, cover["batches"], quarantined)
    out = {q["unit"] for q in bad}
    manifest = {
        "query": query.id, "window": ws.window_id, "result": result,
        **cover, "units": [u for u in cover["units"] if u not in out], "quarantined": bad,
        "rows_out": parquet_rows(result),
        "wall_seconds": meter.wall_seconds, "cpu_seconds": meter.cpu_seconds, "task_seconds": meter.task_seconds,
        "backend": backend, "written_at": time.time(),
    }
    if computed_ahead is not None:
        manifest["computed_ahead_at"] = computed_ahead["computed_at"]
    manifest |= revisions(ws.manifest(), manifest)
    # With a fused tail's batch in it, this is no merge's cost; nor is a late revision's.
    merge = history and not tail
    manifest["end_to_end_seconds"] = merge_span(ws, manifest["written_at"]) if merge else None
    ws.write_manifest(manifest)
    if merge:
        record_merge_cost(ws, manifest, len(cover["units"]))
    return manifest


def _merge(spark, ws: WindowState, saved, paths: list[str], tail, written, tail_rows_in):
    """Run the merge of ``paths`` (and a fused tail's partial) and write the result: (where it is read, its meter)."""
    rows_estimate = merge_rows_estimate(ws, paths, tail_rows_in, tail=bool(tail))
    with StepMeter(spark) as meter:
        if tail:
            df = run_final(spark, saved, ahead_or_paths(written, ws, paths), also=tail[1])
        elif paths:
            df = run_final(spark, saved, paths)
        else:  # an empty window: nothing landed, every batch skipped
            df = run_final(spark, saved, [], also=empty_partial(spark, saved, ws))
        result = ws.write_result(parquet_writer(df, rows_estimate))
    return result, meter


def tail_batches(batches: int | tuple[int, ...] | None) -> tuple[int, ...]:
    """A fused tail's batch or batches (``execute_final``'s ``tail[0]``), as a tuple."""
    if batches is None:
        return ()
    return (batches,) if isinstance(batches, int) else tuple(batches)


def quarantined_units(ws: WindowState, batches, more=None) -> list[dict]:
    """Every unit of the window left out of its result, once each (unit, file, reason): those
    its claims quarantined, those its ``batches`` found bad past the claim's sample (their
    metrics), and ``more`` (a fused tail's)."""
    found = [q for c in ws.claims().values() for q in c.get("quarantined", [])]
    found += [q for b in batches for q in ws.metrics(b).get("quarantined", [])] + list(more or [])
    out: dict[str, dict] = {}
    for q in found:
        out.setdefault(q["unit"], {k: q[k] for k in ("unit", "file", "reason")})
    return list(out.values())


def empty_partial(spark, saved, ws: WindowState):
    """The partial of a window in which nothing landed: the batch step over no rows, with
    each stream's declared columns, else those recorded from its first unit of an
    earlier window. The merge of it is the query over no input: no groups, or the one row of
    a global aggregate (``count(*)`` is 0). A stream whose columns are unknown yet (its
    first window is empty) needs ``Stream(schema=...)``: a ConfigError says so."""
    record = ws.store.query(saved.query.id)
    columns = {name: dict(doc["columns"]) for name in saved.query.streams
               if (doc := record.columns(name)) is not None}
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


def execute_late(spark, ws: WindowState, late_batch: int, *, backend: str, history: bool = True) -> dict:
    """Late data, merged (``late="merge"``): the late batch's claimed units into the window's result.

    Every claimed batch without a written partial (a fused tail's last batch, merged
    straight into the first revision) is computed from its claim and written, then the late
    batch's partial, then the result again from all partials: a new revision
    (:func:`revisions`). A retry skips the partials already written and recomputes none twice.
    """
    from airflow_iqp.spark.batch import batch_work, execute_batch

    for batch, claim in ws.claims().items():
        if claim.get("units") and not ws.has_partial(batch):
            execute_batch(spark, batch_work(ws, batch), backend=backend, history=history and batch == late_batch)
    return execute_final(spark, ws, backend=backend, history=False)
