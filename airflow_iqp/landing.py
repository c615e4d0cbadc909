"""What has landed: a stream's complete units, and which window each belongs to.

A stream's files are found in one of three layouts; the rule that gives each file to
exactly one window follows from the layout, and the same listing serves every wait, claim
and late-data check of the window:

* **a directory per window**: the path is templated with the window
  (``.../{{ data_interval_start | ts_nodash }}``); the rendered directory holds the window's
  units, whatever their times. The writer knows the DAG's grid.
* **flat**: one directory (or object-store prefix) that every window's files land in. A
  unit belongs to the window in which it arrived: its last-modified time, in
  ``[window start, window end)``. The plan binds each window's span to its streams
  (:meth:`~airflow_iqp.streams.Stream.for_window`).
* **partitioned**: Hive-style partitions under the path, named by the writer's own clock
  (``partitions="dt=%Y-%m-%d/hour=%H"``, UTC). The partitions that the window's span can
  fall in (with :data:`PARTITION_SKEW_S` either side for the writer's clock) are listed,
  and units belong to windows by their last-modified time as in a flat directory; a
  window may span several partitions, and a partition several windows.

Names starting with ``.`` or ``_`` are still being written (or are a writer's markers)
and are never units; neither are ``.crc`` checksum files. A flat directory grows without
end: a local one is read with one ``scandir`` and a ``stat`` of the names that match the
stream's pattern, and the window's span is applied before anything else is made of an
entry, so an older file costs one ``stat`` a poll (``benchmarks/listing.py`` times it).

Listing goes through fsspec for object stores (``s3://``, ``gs://``, ``abfs://``).
Pure Python: no Airflow and no Spark import.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import logging
import os
import posixpath
import time
from typing import Mapping, NamedTuple, Sequence

from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import check_name, is_local, local_path
from airflow_iqp.streams import STRFTIME_FIELD, Stream, Unit, is_hidden

log = logging.getLogger(__name__)

#: A writer's clock, which names its partitions, may differ from the store's clock, which
#: stamps the files' last-modified times: partitions this far either side of a window are
#: listed too (each is one directory listing; a missing one costs nothing).
PARTITION_SKEW_S = 600.0
#: Joins a partitioned unit's path components into its name (a unit name is one plain
#: path component in the state: claims, ``seen.json``, reports).
PARTITION_SEP = "~"


class _Entry(NamedTuple):
    """One entry of a directory: its base name, its full path (as Spark and fsspec read it
    again), whether it is a directory, and its last change in epoch seconds."""

    name: str
    path: str
    is_dir: bool
    mtime: float


def _fs(path: str | os.PathLike):
    import fsspec

    return fsspec.core.url_to_fs(str(path))


def _mtime(entry: Mapping) -> float:
    """An fsspec listing entry's last change, in epoch seconds (``mtime``, object stores'
    ``LastModified`` / ``last_modified`` / ``updated``)."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        v = entry.get(key)
        if v is None:
            continue
        if hasattr(v, "timestamp"):
            return v.timestamp()
        if isinstance(v, str):
            return dt.datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
        return float(v)
    return 0.0


def _warn_unsafe(path: str, name: str, why: str) -> None:
    log.warning("%s: listed entry %r ignored: %s", path, name, why)


def _safe(path: str, name: str) -> bool:
    """A listed name that may become part of the state: no control characters, no separator."""
    try:
        check_name(name, "unit")
    except ConfigError as exc:
        _warn_unsafe(path, name, str(exc))
        return False
    return True


def _entries(path: str, wanted=None, span: tuple[float, float] | None = None) -> list[_Entry]:
    """The visible entries directly inside ``path`` (none if it is missing).

    ``wanted(name, is_dir)`` picks the entries worth a ``stat`` before it is made: in a
    flat directory of many files only those matching the stream's pattern are. With
    ``span``, only entries last changed in ``[start, end)`` are kept, before anything else
    is made of them: a flat directory's older files cost a ``stat`` each and no more.
    """
    if is_local(path):
        local = os.path.abspath(local_path(path))
        out = []
        try:
            with os.scandir(local) as it:
                for e in it:
                    if is_hidden(e.name):
                        continue
                    try:
                        is_dir = e.is_dir()
                        if wanted is not None and not wanted(e.name, is_dir):
                            continue
                        mtime = e.stat().st_mtime
                    except FileNotFoundError:  # renamed or removed while listed
                        continue
                    if span is not None and not span[0] <= mtime < span[1]:
                        continue
                    if _safe(local, e.name):
                        out.append(_Entry(e.name, os.path.join(local, e.name), is_dir, mtime))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return out
    fs, root = _fs(path)
    try:
        listed = fs.ls(root, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    parent = posixpath.normpath(str(root).rstrip("/") or "/")
    out = []
    for e in listed:
        full = str(e["name"]).rstrip("/")
        base = posixpath.basename(full)
        if is_hidden(base) or base == "..":
            continue
        # An object store may list a key such as ``landing/../x`` that resolves outside it.
        if ".." in full.split("/") or posixpath.normpath(posixpath.dirname(full) or "/") != parent:
            _warn_unsafe(root, full, "not inside the listed directory")
            continue
        is_dir = e["type"] == "directory"
        if wanted is not None and not wanted(base, is_dir):
            continue
        mtime = _mtime(e)
        if (span is None or span[0] <= mtime < span[1]) and _safe(root, base):
            out.append(_Entry(base, fs.unstrip_protocol(full), is_dir, mtime))
    return out


def _dir_unit(entry: _Entry, streams: Sequence[Stream], name: str) -> Unit | None:
    """A directory unit, if complete: every stream's file (or files matching its pattern)
    and the ``ready_marker``, if any, are in it."""
    marker = streams[0].ready_marker
    if marker:  # a hidden name (``_SUCCESS``): looked up, not listed
        if is_local(entry.path):
            present = os.path.exists(os.path.join(local_path(entry.path), marker))
        else:
            present = _fs(entry.path)[0].exists(posixpath.join(str(entry.path), marker))
        if not present:
            return None
    inside = {e.name: e for e in _entries(entry.path)}
    files: dict[str, tuple[str, ...]] = {}
    for s in streams:
        if s.pattern:
            chosen = sorted(n for n, e in inside.items() if not e.is_dir and fnmatch.fnmatch(n, s.pattern))
        else:
            own = inside.get(f"{s.name}{s.ext}")
            chosen = [own.name] if own is not None and not own.is_dir else []
        if not chosen:
            return None
        files[s.name] = tuple(inside[n].path for n in chosen)
    changed = max([e.mtime for e in inside.values()] + [entry.mtime])
    return Unit(name, entry.path, changed, files)


def _units_in(path: str, streams: Sequence[Stream], prefix: str = "") -> list[Unit]:
    """The complete units directly inside one directory."""
    s = streams[0]
    if s.unit == "dir":
        return [u for e in _entries(path, lambda n, is_dir: is_dir)
                if (u := _dir_unit(e, streams, prefix + e.name)) is not None]
    pattern = s.file_pattern
    return [Unit(prefix + e.name, e.path, e.mtime, {s.name: (e.path,)})
            for e in _entries(path, lambda n, is_dir: not is_dir and fnmatch.fnmatch(n, pattern), s.window)]


def partition_step(template: str) -> float:
    """Seconds between two consecutive values of the finest field a partition template names."""
    fields = set(STRFTIME_FIELD.findall(template))
    if fields & {"%S", "%s", "%f", "%T", "%X", "%c"}:
        return 1.0
    if fields & {"%M", "%R"}:
        return 60.0
    if fields & {"%H", "%I", "%p"}:
        return 3600.0
    return 86400.0


def partitions_between(template: str, start: float, end: float) -> list[str]:
    """The partitions (``template`` formatted in UTC) that times in ``[start, end]`` fall in, in order."""
    step = partition_step(template)
    out: dict[str, None] = {}
    t = start
    while t < end:
        out[dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime(template)] = None
        t += step
    out[dt.datetime.fromtimestamp(end, dt.timezone.utc).strftime(template)] = None
    return list(out)


def _partition_dirs(root: str, stream: Stream) -> list[tuple[str, str]]:
    """(relative partition, its path) for the partitions a listing reads: those a bound
    window's span can fall in, or every partition there is."""
    template = stream.partitions.strip("/")
    if stream.window is not None:
        start, end = stream.window
        rels = partitions_between(template, start - PARTITION_SKEW_S, end + PARTITION_SKEW_S)
    else:
        fs, base = _fs(root)
        glob = posixpath.join(str(base).rstrip("/"), STRFTIME_FIELD.sub("*", template))
        rels = sorted(posixpath.relpath(str(p), str(base).rstrip("/")) for p in fs.glob(glob) if fs.isdir(p))
    sep = os.sep if is_local(root) else "/"
    return [(rel, str(root).rstrip("/") + sep + rel.replace("/", sep)) for rel in rels]


def list_units(landing: str | os.PathLike, streams: Sequence[Stream], now: float | None = None) -> list[Unit]:
    """The complete units of a stream's landing place, in arrival order.

    Directory units are complete when every stream has its file (or files matching its
    pattern) and the ``ready_marker``, if any, is there; file units match the stream's
    pattern. With ``min_age``, a unit that changed less than that long ago is not complete
    yet. With a window bound to the streams (a flat or partitioned layout), only the
    units whose last change falls in ``[start, end)`` of that window are listed. A missing
    directory has no units.

    Units of a directory per window come in name order (numeric names by number); units of
    a flat or partitioned layout in the order they arrived (last change, then name).
    """
    s = streams[0]
    root = os.fspath(landing)
    if s.partitions:
        units = [u for rel, path in _partition_dirs(root, s)
                 for u in _units_in(path, streams, prefix=rel.replace("/", PARTITION_SEP) + PARTITION_SEP)]
    else:
        units = _units_in(root, streams)
    if s.window is not None:
        start, end = s.window
        units = [u for u in units if start <= u.mtime < end]
    min_age = max(x.min_age for x in streams)
    if min_age:
        now = time.time() if now is None else now
        units = [u for u in units if now - u.mtime >= min_age]
    if s.window is not None or s.partitions:
        return sorted(units, key=lambda u: (u.mtime, u.name))
    return sorted(units, key=lambda u: _unit_sort_key(u.name))


def _unit_sort_key(name: str) -> tuple:
    stem = name.split(".")[0]
    return (0, int(stem), name) if stem.isdigit() else (1, 0, name)


def count_names(landing: str | os.PathLike) -> int:
    """How many units a directory per window may hold, from one listing: at least
    :func:`list_units`' count, far cheaper. Waits poll this, and list the units only once
    enough names are there. (A flat or partitioned layout holds other windows' files too,
    so its waits list the units at once.)"""
    if not is_local(landing):
        fs, root = _fs(landing)
        try:
            listed = fs.ls(root, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return 0
        return sum(1 for name in listed if not is_hidden(posixpath.basename(str(name).rstrip("/"))))
    try:
        return sum(1 for name in os.listdir(local_path(landing)) if not is_hidden(name))
    except FileNotFoundError:
        return 0
