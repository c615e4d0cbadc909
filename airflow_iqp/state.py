"""The on-disk state of intermittent query processing: claims, partials, results, cost history.

Pure Python (no Spark, no Airflow): the Airflow provider, the Spark jobs, the offline
``run-window`` command and the benchmarks all read and write the same layout through
this module. The layout is documented in ``docs/state-layout.md``::

    STATE/<query_id>/<window_id>/claims/batch-<NNNN>.json
    STATE/<query_id>/<window_id>/partials/batch-<NNNN>/            (parquet directory)
    STATE/<query_id>/<window_id>/partials/batch-<NNNN>.metrics.json
    STATE/<query_id>/<window_id>/result/                           (parquet directory)
    STATE/<query_id>/<window_id>/result.manifest.json
    STATE/cost_history.jsonl

Every write goes to a hidden temporary path (name starting with ``.``) in the same
directory and is renamed into place, so a reader sees either nothing or a complete file.
Directories and files are made owner- and group-readable only, and every name that
becomes a path component is checked first (:mod:`airflow_iqp.paths`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from airflow_iqp.errors import ConfigError, IQPError
from airflow_iqp.paths import (  # noqa: F401  (DIR_MODE, FILE_MODE: re-exported for the layout's users)
    DIR_MODE, FILE_MODE, check_name, make_dirs, open_private, private_temp, restrict_tree,
)
from airflow_iqp.landing import count_names, list_units
from airflow_iqp.streams import TPCH, Stream, files_of

COST_HISTORY = "cost_history.jsonl"


class ClaimError(IQPError):
    """A batch tried to claim a unit (or file) that another batch of the window already claimed."""


# ----------------------------------------------------------------------------- paths


def batch_name(batch: int) -> str:
    """``batch-0007`` for batch 7 (batches are numbered from 0)."""
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 0:
        raise ConfigError(f"batch number must be an int >= 0, got {batch!r}", field="batch")
    return f"batch-{batch:04d}"


def _check_id(value: str, field: str) -> str:
    return check_name(value, field)


@dataclass(frozen=True)
class WindowState:
    """Paths of one query's state for one window: ``STATE/<query_id>/<window_id>/``."""

    state_dir: str | os.PathLike
    query_id: str
    window_id: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        object.__setattr__(self, "query_id", _check_id(self.query_id, "query_id").lower())
        object.__setattr__(self, "window_id", _check_id(self.window_id, "window_id"))

    @property
    def root(self) -> Path:
        return Path(self.state_dir) / self.query_id / self.window_id

    @property
    def claims_dir(self) -> Path:
        return self.root / "claims"

    @property
    def partials_dir(self) -> Path:
        return self.root / "partials"

    @property
    def result_dir(self) -> Path:
        return self.root / "result"

    @property
    def result_manifest(self) -> Path:
        return self.root / "result.manifest.json"

    @property
    def cost_history(self) -> Path:
        return Path(self.state_dir) / COST_HISTORY

    def claim_path(self, batch: int) -> Path:
        return self.claims_dir / f"{batch_name(batch)}.json"

    def partial_path(self, batch: int) -> Path:
        return self.partials_dir / batch_name(batch)

    def metrics_path(self, batch: int) -> Path:
        return self.partials_dir / f"{batch_name(batch)}.metrics.json"

    @classmethod
    def from_claim_path(cls, claim_path: str | os.PathLike) -> "WindowState":
        """The window a claim manifest belongs to, from its path in the layout."""
        p = Path(claim_path).absolute()
        if p.parent.name != "claims" or not p.name.startswith("batch-"):
            raise ConfigError(f"{p} is not STATE/<query>/<window>/claims/batch-NNNN.json", field="manifest")
        return cls(p.parents[3], p.parents[2].name, p.parents[1].name)


def batch_of(path: str | os.PathLike) -> int:
    """The batch number in a ``batch-NNNN`` name (claim, partial or metrics path)."""
    name = Path(path).name
    stem = name.split(".", 1)[0]
    if not stem.startswith("batch-") or not stem[6:].isdigit():
        raise ConfigError(f"not a batch-NNNN path: {path}", field="batch")
    return int(stem[6:])


# ----------------------------------------------------------------------------- atomic writes


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a hidden temp file beside ``path``, fsync it, rename it into place
    (mode :data:`~airflow_iqp.paths.FILE_MODE`, its directories :func:`~airflow_iqp.paths.make_dirs`'s)."""
    path = Path(path)
    make_dirs(path.parent)
    fd, tmp = private_temp(path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def temp_sibling(path: str | os.PathLike) -> Path:
    """A fresh hidden path in the same directory as ``path`` (for writing a directory)."""
    path = Path(path)
    return path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def replace_dir(tmp_dir: str | os.PathLike, final_dir: str | os.PathLike) -> Path:
    """Move a completely written directory into place, replacing an older one.

    A directory cannot be swapped atomically over a non-empty one, so the old one is
    first renamed aside (hidden) and removed after the new one is in place. A reader
    sees the old directory, then briefly none, then the new one; never a partial one.
    """
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    trash = None
    if final_dir.exists():
        trash = temp_sibling(final_dir)
        os.rename(final_dir, trash)
    os.rename(tmp_dir, final_dir)
    restrict_tree(final_dir)  # a writer without our Hadoop umask conf left it world-readable
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
    return final_dir


@contextlib.contextmanager
def locked(dir_path: str | os.PathLike, name: str = ".lock") -> Iterator[None]:
    """An exclusive ``fcntl`` lock on ``dir_path/name`` (created if needed)."""
    dir_path = make_dirs(dir_path)
    with os.fdopen(open_private(dir_path / name, os.O_RDWR | os.O_CREAT), "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- landing dir


def list_ready_units(landing_dir: str | os.PathLike, streams: Sequence[Stream] = TPCH) -> list[Path]:
    """The complete units of a landing directory, in arrival (name) order: :func:`airflow_iqp.landing.list_units`."""
    return list_units(landing_dir, streams)


def count_landed(landing_dir: str | os.PathLike) -> int:
    """An upper bound of the units a landing directory holds, from one listing: :func:`airflow_iqp.landing.count_names`."""
    return count_names(landing_dir)


def unit_files(unit_dirs: Iterable[str | os.PathLike], streams: Iterable[str] = ("orders", "lineitem")) -> list[str]:
    """Absolute paths of the named TPC-H streams' files in the given unit directories."""
    by_name = {s.name: s for s in TPCH}
    return files_of(unit_dirs, [by_name[s] for s in streams])


# ----------------------------------------------------------------------------- claims


def read_claims(ws: WindowState) -> dict[int, dict]:
    """All claim manifests of a window, by batch number."""
    out: dict[int, dict] = {}
    if not ws.claims_dir.is_dir():
        return out
    for p in ws.claims_dir.glob("batch-*.json"):
        out[batch_of(p)] = read_json(p)
    return dict(sorted(out.items()))


def claimed_files(ws: WindowState) -> list[str]:
    """Every file the window's batches have claimed, in batch order."""
    return [f for claim in read_claims(ws).values() for f in claim.get("files", [])]


SEEN = "seen.json"


def note_seen(ws: WindowState, names: Iterable[str], now: float | None = None) -> dict[str, float]:
    """When the provider first saw each unit of a window: ``{name: epoch seconds}`` in
    ``STATE/<query>/<window>/seen.json``, the names not in it yet added as seen ``now``.
    A unit's arrival time is this, not its file's modification time (which a writer or an
    object store sets as it likes)."""
    now = time.time() if now is None else now
    path = ws.root / SEEN
    make_dirs(ws.root)
    with locked(ws.root, ".seen.lock"):
        seen = read_json(path) if path.is_file() else {}
        new = {str(n): now for n in names if str(n) not in seen}
        if new:
            seen.update(new)
            atomic_write_json(path, seen)
    return seen


def claim_units(ws: WindowState, batch: int, units: Iterable[str | int], files: Iterable[str],
                arrived: dict[str, float] | None = None, found: dict | None = None) -> dict:
    """Claim input units (and their files) for one batch of one window; return the manifest.

    The single claim function. Under an exclusive lock on the window's claims directory:

    * if this batch already has a manifest, it is returned unchanged (a retry re-reads
      the claim of its first attempt, whatever ``units`` it passes now);
    * if any of ``units`` or ``files`` is already claimed by another batch,
      :class:`ClaimError` names the unit and both batches;
    * otherwise ``claims/batch-NNNN.json`` is written atomically (temp file + rename) as
      ``{"batch", "units", "files", "claimed_at"}`` and returned.

    Units are stored as strings (the unit directory names, e.g. ``"000003"``). ``found``:
    what the check of the files found (:func:`airflow_iqp.filecheck.check_claim`: ``bad``,
    ``quarantined``, ``checked``), recorded in the manifest with them.
    """
    units = [check_name(str(u), "units") for u in units]  # a unit name is one plain name, as listed
    files = [str(f) for f in files]
    if len(set(units)) != len(units):
        raise ClaimError(f"batch {batch} lists a unit twice: {units}")
    path = ws.claim_path(batch)
    with locked(ws.claims_dir):
        if path.exists():
            return read_json(path)
        wanted_units, wanted_files = set(units), set(files)
        for other, manifest in read_claims(ws).items():
            clash = wanted_units.intersection(manifest.get("units", []))
            if clash:
                raise ClaimError(
                    f"{ws.query_id}/{ws.window_id}: unit {sorted(clash)[0]} is already claimed by "
                    f"batch {other}; batch {batch} cannot claim it"
                )
            clash = wanted_files.intersection(manifest.get("files", []))
            if clash:
                raise ClaimError(
                    f"{ws.query_id}/{ws.window_id}: file {sorted(clash)[0]} is already claimed by "
                    f"batch {other}; batch {batch} cannot claim it"
                )
        manifest = {"batch": batch, "units": units, "files": files, "claimed_at": time.time()}
        if arrived is not None:  # when the provider first saw each unit (note_seen)
            manifest["arrived"] = {u: arrived[u] for u in units if u in arrived}
        manifest.update(found or {})
        atomic_write_json(path, manifest)
        return manifest


def claimed_units(ws: WindowState) -> set[str]:
    """Every unit claimed by some batch of the window."""
    return {u for m in read_claims(ws).values() for u in m.get("units", [])}


# ----------------------------------------------------------------------------- cost history

def append_cost_history(
    state_dir: str | os.PathLike,
    *,
    query: str,
    kind: str,
    units: int,
    batches: int,
    wall_seconds: float,
    cpu_seconds: float | None = None,
    task_seconds: float | None = None,
    backend: str = "spark-submit",
    window: str | None = None,
    recorded_at: float | None = None,
    **extra: Any,
) -> dict:
    """Append one record to ``STATE/cost_history.jsonl``; return it.

    ``kind`` is ``"batch"`` (one batch of ``units`` units; ``batches`` is 1) or ``"final"``
    (the final aggregation of ``batches`` partials covering ``units`` units). The file is
    rewritten through a temp file and a rename under an ``fcntl`` lock, so concurrent
    writers never lose a line and readers never see half a line.
    """
    if kind not in ("batch", "final"):
        raise ConfigError(f"must be 'batch' or 'final', got {kind!r}", field="kind")
    record = {
        "query": str(query).lower(), "backend": backend, "kind": kind, "units": int(units),
        "batches": int(batches), "wall_seconds": float(wall_seconds),
        "cpu_seconds": None if cpu_seconds is None else float(cpu_seconds),
        "task_seconds": None if task_seconds is None else float(task_seconds),
        "window": window, "recorded_at": time.time() if recorded_at is None else float(recorded_at),
    }
    record.update(extra)
    return _append_history_line(state_dir, record)


def append_cost_fit(state_dir: str | os.PathLike, *, query: str, backend: str, cost: dict, final_agg: dict,
                    recorded_at: float | None = None, **extra: Any) -> dict:
    """Append a calibrated fit (``kind: "fit"``) to ``STATE/cost_history.jsonl``; return it.

    ``cost`` and ``final_agg`` are cost-model dicts (``cost_model_from_dict`` /
    ``final_agg_from_dict`` read them). The plan operator plans with the newest fit of its
    query and backend, in preference to fitting the per-batch records.
    """
    record = {"query": str(query).lower(), "backend": backend, "kind": "fit", "cost": cost, "final_agg": final_agg,
              "recorded_at": time.time() if recorded_at is None else float(recorded_at), **extra}
    return _append_history_line(state_dir, record)


def _append_history_line(state_dir: str | os.PathLike, record: dict) -> dict:
    state_dir = Path(state_dir)
    path = state_dir / COST_HISTORY
    with locked(state_dir, ".cost_history.lock"):
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if old and not old.endswith("\n"):
            old += "\n"
        atomic_write_text(path, old + json.dumps(record, sort_keys=True) + "\n")
    return record


def read_cost_history(
    state_dir: str | os.PathLike,
    query: str | None = None,
    kind: str | None = None,
    backend: str | None = None,
) -> list[dict]:
    """Records of ``STATE/cost_history.jsonl`` (oldest first), optionally filtered."""
    path = Path(state_dir) / COST_HISTORY
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{n}: not a JSON line ({exc})", field="cost_history") from exc
        if query is not None and rec.get("query") != str(query).lower():
            continue
        if kind is not None and rec.get("kind") != kind:
            continue
        if backend is not None and rec.get("backend") != backend:
            continue
        out.append(rec)
    return out
