"""Run one window offline, without Airflow: K batch jobs and one final job via spark-submit."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from airflow_iqp.backends.base import Backend
from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.landing import list_units
from airflow_iqp.query.store import Saved, catalogued, save_query
from airflow_iqp.spark.batch import batch_work, work_args
from airflow_iqp.spark.submit import build_pyfiles_zip, job_path, run_submit, submit_args
from airflow_iqp.store import open_store
from airflow_iqp.streams import files_of, landing_of


def resolve_data(data: str | os.PathLike, static: str | os.PathLike | None = None) -> tuple[Path, Path | None]:
    """(landing dir, static dir) for a generated data dir (``units/`` + ``static/``) or a landing dir."""
    data = Path(data)
    if not data.is_dir():
        raise ConfigError(f"{data} is not a directory", field="data")
    if (data / "units").is_dir():
        landing = data / "units"
        static = Path(static) if static else (data / "static" if (data / "static").is_dir() else None)
    else:
        landing, static = data, (Path(static) if static else None)
    if static is not None and not static.is_dir():
        raise ConfigError(f"{static} is not a directory", field="static")
    return landing, static


def split_consecutive(items: Sequence, k: int) -> list[list]:
    """Cut ``items`` into ``k`` consecutive, nearly equal parts (earlier parts one larger)."""
    if int(k) != k or k < 1:
        raise ConfigError(f"must be an integer >= 1, got {k!r}", field="batches")
    n = len(items)
    q, r = divmod(n, k)
    out, i = [], 0
    for b in range(k):
        size = q + (1 if b < r else 0)
        out.append(list(items[i:i + size]))
        i += size
    return out


def run_window(query: str | Saved, data: str | os.PathLike | None, batches: int, out: str | os.PathLike, *,
               static: str | os.PathLike | None = None, window_id: str = "w0", master: str = "local[*]",
               conf: Mapping[str, str] | None = None, ship_package: bool | None = None,
               timeout: float | None = None, log=None, backend: str = Backend.default_name) -> dict:
    """Claim and run ``batches`` consecutive batches of a window's units, then the final job.

    ``query`` is a catalogued query's id, whose units are in ``data`` (see
    :func:`resolve_data`), or a :class:`Saved` query whose streams say where its units are
    (``data`` is then ignored). ``out`` is the state store (its location) the window's
    state goes to; the query is saved there for the jobs to load. ``backend``: the name
    its jobs' metrics and cost history record (a spark-submit backend's).

    Returns ``{"result", "manifest", "batches": [{"batch","units","files","wall_seconds","cpu_seconds",
    "job"}], "final": {"wall_seconds","cpu_seconds","job"}}`` where wall/CPU seconds are
    those of each whole spark-submit process tree and ``job`` the job's own metrics.
    """
    if isinstance(query, Saved):
        saved, landing = query, Path(landing_of(query.streams))
        if not landing.is_dir():
            raise ConfigError(f"{landing} is not a directory", field="stream")
    else:
        landing, static_dir = resolve_data(data, static)
        saved = catalogued(query, str(landing), str(static_dir) if static_dir else None)
    query = saved.query
    if query.static and saved.static is None:
        raise ConfigError(f"query {query.id} needs static tables {', '.join(query.static)}; give --static",
                          field="static")
    read = [s for s in saved.streams if s.name in query.streams]
    units = list_units(landing, saved.streams)
    if units and batches > len(units):
        raise ConfigError(f"{batches} batches for {len(units)} units; use at most {len(units)}", field="batches")
    store = open_store(Path(out).absolute())
    ws = store.window(query.id, window_id)
    save_query(store, saved)
    ship = (not master.startswith("local")) if ship_package is None else ship_package
    with tempfile.TemporaryDirectory(prefix="iqp-pyfiles-") as tmp:
        py_files = str(build_pyfiles_zip(Path(tmp) / "airflow_iqp.zip")) if ship else None

        def submit(job: str, args: list[str], name: str):
            argv = submit_args(job_path(job), args, master=master, conf=conf, py_files=py_files, name=name)
            return run_submit(argv, timeout=timeout)

        report = {"query": query.id, "window": window_id, "result": ws.result_uri, "manifest": ws.manifest_uri,
                  "batches": [], "final": None}
        for b, chunk in enumerate(split_consecutive(units, batches)):
            claim = ws.claim(b, [u.name for u in chunk], files_of(chunk, read))
            res = submit("batch", [*work_args(ws, batch_work(ws, b)), "--backend", backend],
                         f"iqp-{query.id}-{window_id}-b{b}")
            if res.returncode != 0:
                raise DataError(f"batch {b} of {query.id} failed (exit {res.returncode}):\n{res.tail()}")
            report["batches"].append({"batch": b, "units": claim["units"], "files": claim["files"],
                                      "wall_seconds": res.wall_seconds, "cpu_seconds": res.cpu_seconds,
                                      "job": ws.metrics(b)})
            if log:
                log(f"batch {b}: {len(claim['units'])} units, {res.wall_seconds:.1f}s wall, "
                    f"{res.cpu_seconds:.1f}s cpu")
        res = submit("final", ["--store", store.location, "--query", query.id, "--window", window_id,
                               "--backend", backend, "--expect-units", str(len(units))],
                     f"iqp-{query.id}-{window_id}-final")
    if res.returncode != 0:
        raise DataError(f"final aggregation of {query.id} failed (exit {res.returncode}):\n{res.tail()}")
    report["final"] = {"wall_seconds": res.wall_seconds, "cpu_seconds": res.cpu_seconds, "job": ws.manifest()}
    if log:
        log(f"final: {res.wall_seconds:.1f}s wall, {res.cpu_seconds:.1f}s cpu -> {ws.result_uri}")
    return report
