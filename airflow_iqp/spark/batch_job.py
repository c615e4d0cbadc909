"""spark-submit application: one batch's partial aggregation.

    spark-submit batch_job.py QUERY_ID MANIFEST STATIC_DIR OUTPUT [--state-dir DIR] [--no-history] [--backend NAME]

MANIFEST is the batch's claim (``STATE/<q>/<w>/claims/batch-NNNN.json``); the job reads
exactly the files it lists. The partial is written as parquet to a hidden temporary
directory beside OUTPUT and renamed into place; a retry overwrites only its own OUTPUT.
``OUTPUT.metrics.json`` records units, bytes, rows in/out, wall, CPU and task seconds,
and a ``batch`` line goes to ``STATE/cost_history.jsonl`` (STATE is derived from the
manifest's place in the layout, or given with ``--state-dir``).

Test hook: with ``AIRFLOW_IQP_PAUSE_BEFORE_RENAME=SECONDS`` in the environment the job
sleeps that long after the partial is completely written to its temporary path and
before the rename, so a test can kill it at exactly that point.

No Airflow import here: this file runs on a Spark driver.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

PAUSE_ENV = "AIRFLOW_IQP_PAUSE_BEFORE_RENAME"
#: A file the job writes its error to, as JSON ``{"type", "message"}``, for the task that
#: started it to raise with that message first (``IQPSparkHook.submit`` sets it): the
#: message, not spark-submit's command line, is what the task's failure says.
JOB_ERROR_VAR = "AIRFLOW_IQP_JOB_ERROR_FILE"


def metrics_path_for(output: str | os.PathLike) -> Path:
    return Path(str(output).rstrip("/") + ".metrics.json")


def _pause_hook(tmp: Path) -> None:
    seconds = float(os.environ.get(PAUSE_ENV, "0") or 0)
    if seconds > 0:
        print(f"airflow-iqp: partial written to {tmp}; pausing {seconds}s before rename", file=sys.stderr, flush=True)
        time.sleep(seconds)


def report_error(job: str, exc: Exception) -> None:
    """Say a job's error on stderr in one line, and in :data:`JOB_ERROR_VAR`'s file if it is set."""
    import json

    print(f"airflow-iqp {job}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    path = os.environ.get(JOB_ERROR_VAR)
    if path:
        try:
            Path(path).write_text(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
        except OSError:  # the task then says what spark-submit says
            pass


def _remove_stale_temps(output: Path) -> None:
    """Temp directories left by a killed attempt of this same batch."""
    for p in output.parent.glob(f".{output.name}.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)


def _check_manifest(manifest: dict, saved) -> None:
    """A claim manifest names plain units and only files of the query's landing paths: one edited by
    hand cannot make the batch read, or name in its state, anything else."""
    from airflow_iqp.paths import check_name, check_within

    for unit in manifest.get("units", []):
        check_name(str(unit), "manifest.units")
    roots = [_fixed_root(s.path) for s in saved.streams if s.path]
    for f in manifest.get("files", []) if roots else ():
        check_within(str(f), roots, "manifest.files")


def _fixed_root(path: str) -> str:
    """The directory of a landing path before its first template expression: a saved stream
    keeps its path as the DAG wrote it (``.../{{ data_interval_start | ts_nodash }}``), and a
    claim names files of the rendered path."""
    cut = min((i for i in (path.find("{{"), path.find("{%")) if i >= 0), default=-1)
    return path if cut < 0 else path[:cut].rsplit("/", 1)[0]


def _window_claimed(manifest_path: Path) -> list[str]:
    """The files the window's batches claimed (this one's among them), in batch order: where
    a stream's columns are taken from (:func:`~airflow_iqp.spark.steps.inspect_files`)."""
    from airflow_iqp.errors import ConfigError
    from airflow_iqp.state import WindowState, claimed_files

    try:
        return claimed_files(WindowState.from_claim_path(manifest_path))
    except ConfigError:  # a claim outside a window's state directory
        return []


def execute_batch(spark, query_id: str, manifest_path: str | os.PathLike, static_dir: str | None,
                  output: str | os.PathLike, *, state_dir: str | os.PathLike | None = None,
                  history: bool = True, backend: str | None = None) -> dict:
    """Run one batch end to end in ``spark``: read the claim, compute, write, record. Returns the metrics."""
    from airflow_iqp.errors import ConfigError
    from airflow_iqp.filecheck import files_to_read, kept_units
    from airflow_iqp.spark.jobmetrics import StepMeter, batch_span
    from airflow_iqp.query.store import load_query, schema_dir
    from airflow_iqp.spark.steps import inspect_files, parquet_rows, run_batch, write_atomic
    from airflow_iqp.state import WindowState, append_cost_history, atomic_write_json, batch_of, read_json

    manifest_path = Path(manifest_path)
    if not manifest_path.is_file():
        raise ConfigError(f"{manifest_path}: claim manifest does not exist", field="manifest")
    manifest = read_json(manifest_path)
    files = [str(f) for f in files_to_read(manifest)]  # the units quarantined when claimed are left out
    output = Path(output)
    window = None
    if state_dir is None:
        try:
            ws = WindowState.from_claim_path(manifest_path)
            state_dir, window = ws.state_dir, ws.window_id
        except ConfigError:
            state_dir = None
    saved = load_query(query_id, state_dir)
    query = saved.query
    _check_manifest(manifest, saved)
    _remove_stale_temps(output)
    units = kept_units(manifest)
    if manifest.get("units") and not units:  # every unit quarantined when claimed: nothing to compute
        return {"query": query.id, "batch": manifest.get("batch", batch_of(manifest_path)), "units": 0,
                "unit_ids": [], "quarantined": manifest["quarantined"], "wall_seconds": 0.0, "written_at": None}
    with StepMeter(spark) as meter:
        inspection = inspect_files(files, saved, schema_dir(state_dir, query.id) if state_dir else None,
                                   claimed=_window_claimed(manifest_path), checked=manifest.get("checked"))
        infos = inspection.infos
        df = run_batch(spark, saved, files, static_dir, inspection=inspection)
        write_atomic(df, output, before_rename=_pause_hook)
    later = {q["unit"] for q in inspection.quarantined}  # found bad past the claim's sample
    units = [u for u in units if u not in later]
    metrics = {
        "query": query.id,
        "batch": manifest.get("batch", batch_of(manifest_path)),
        "manifest": str(manifest_path),
        "units": len(units),
        "unit_ids": units,
        "files": len(infos),
        "bytes": sum(i.bytes or 0 for i in infos),
        "rows_in": sum(i.rows or 0 for i in infos),
        "rows_out": parquet_rows(output),
        "wall_seconds": meter.wall_seconds,
        "cpu_seconds": meter.cpu_seconds,
        "task_seconds": meter.task_seconds,
        "backend": backend,
        "quarantined": [{k: q[k] for k in ("unit", "file", "reason")} for q in manifest.get("quarantined", [])]
                       + inspection.quarantined,
        "written_at": time.time(),
    }
    atomic_write_json(metrics_path_for(output), metrics)
    if history and state_dir is not None:
        append_cost_history(state_dir, query=query.id, kind="batch", units=metrics["units"], batches=1,
                            wall_seconds=meter.wall_seconds, cpu_seconds=meter.cpu_seconds,
                            task_seconds=meter.task_seconds, backend=backend, window=window,
                            end_to_end_seconds=batch_span(manifest_path, metrics["written_at"]))
    return metrics


def execute_planned_batch(spark, batch, *, history: bool = True, backend: str | None = None) -> dict:
    """:func:`execute_batch` for one plan entry (a ``Batch``) on an open session:
    its claim in, its partial out. A Connect batch task and a fused tail's final task run
    batches this way."""
    ws = batch.window_state()
    return execute_batch(spark, batch.query, ws.claim_path(batch.index), batch.static or None,
                         ws.partial_path(batch.index), state_dir=ws.state_dir, history=history, backend=backend)


def build_session(app_name: str):
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("AIRFLOW_IQP_SPARK_LOG_LEVEL", "WARN"))
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="batch_job.py", description=__doc__.split("\n")[0])
    parser.add_argument("query")
    parser.add_argument("manifest")
    parser.add_argument("static_dir")
    parser.add_argument("output")
    parser.add_argument("--state-dir")
    parser.add_argument("--no-history", action="store_true")
    parser.add_argument("--backend", help="the backend's name, which the metrics and the cost history record")
    args = parser.parse_args(argv)

    from airflow_iqp.errors import IQPError

    spark = build_session(f"iqp-batch-{args.query}-{Path(args.output).name}")
    try:
        metrics = execute_batch(spark, args.query, args.manifest, args.static_dir or None, args.output,
                                state_dir=args.state_dir, history=not args.no_history, backend=args.backend)
    except IQPError as exc:
        report_error("batch_job", exc)
        return 2
    except Exception as exc:  # a Spark error: said first as well, with its traceback after
        report_error("batch_job", exc)
        raise
    finally:
        spark.stop()
    if metrics.get("written_at") is None:
        print("airflow-iqp batch_job: every unit was quarantined when claimed; nothing to write", flush=True)
        return 0
    print(f"airflow-iqp batch_job: wrote {args.output} ({metrics['rows_out']} rows, "
          f"{metrics['wall_seconds']:.2f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
