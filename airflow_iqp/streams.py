"""Streams: where a query's input lands, what one unit of it is, and how to read it.

A unit is either

* one file of the stream's landing directory that matches ``pattern`` (``unit="file"``,
  the default), or
* one sub-directory of the landing directory holding one file per stream, named
  ``<stream>.<ext>`` (``unit="dir"``): streams that must arrive together, like the
  paper's orders with their lineitems.

Names starting with ``.`` or ``_`` are still being written (or are a writer's markers,
such as ``_SUCCESS``) and are never units; neither are ``.crc`` checksum files. Writers
that do not rename atomically are covered by ``ready_marker`` (a directory unit is
complete once that file is in it, e.g. ``_SUCCESS``) and ``min_age`` (a unit is complete
once nothing in it changed for that many seconds).

Listing goes through fsspec, so an object store path (``s3://``, ``gs://``, ``abfs://``)
works wherever fsspec's filesystem for it is installed, and Spark reads the same paths
where its Hadoop connector is (docs/spark.md).

Pure Python: no Airflow and no Spark import. Spark readers take a :class:`Stream` too
(:func:`airflow_iqp.spark.steps.read_stream`).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from airflow_iqp.errors import ConfigError

FORMATS = {"parquet": ".parquet", "csv": ".csv", "json": ".json", "orc": ".orc"}
UNITS = ("file", "dir")
BAD_UNIT = ("fail", "quarantine")


@dataclass(frozen=True)
class Stream:
    """One stream of a query's input (see the module doc).

    ``name`` is the table name the query reads it by (in ``iqp_dag(streams={name: Stream(...)})``
    the key gives it). ``schema`` is Spark DDL (``"id BIGINT, ts TIMESTAMP"``); without it the
    first unit's schema is taken and every later unit is checked against it. A unit whose
    file is corrupt or does not match follows ``on_bad_unit``: ``"fail"`` (the batch fails,
    naming the file; its claim stays, so a rerun after the file is replaced processes the
    unit once) or ``"quarantine"`` (the batch goes on without it, the run's report names it
    and the result is marked partial).
    """

    name: str = ""
    path: str = ""
    format: str = "parquet"
    pattern: str | None = None
    schema: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    unit: str = "file"
    ready_marker: str | None = None
    min_age: float = 0.0
    on_bad_unit: str = "fail"

    def __post_init__(self) -> None:
        if self.name and not self.name.replace("_", "").isalnum():
            raise ConfigError(f"a stream name is a SQL table name (letters, digits, '_'), got {self.name!r}",
                              field="streams")
        if self.on_bad_unit not in BAD_UNIT:
            raise ConfigError(f"stream {self.name}: on_bad_unit must be 'fail' or 'quarantine', got "
                              f"{self.on_bad_unit!r}", field=f"streams.{self.name}.on_bad_unit")
        if self.ready_marker and self.unit != "dir":
            raise ConfigError(f"stream {self.name}: ready_marker is a file inside a unit directory; give "
                              f"unit='dir', or min_age for file units", field=f"streams.{self.name}.ready_marker")
        if not (isinstance(self.min_age, (int, float)) and self.min_age >= 0):
            raise ConfigError(f"stream {self.name}: min_age must be seconds >= 0, got {self.min_age!r}",
                              field=f"streams.{self.name}.min_age")
        if self.format not in FORMATS:
            raise ConfigError(f"stream {self.name}: format must be one of {', '.join(FORMATS)}, got "
                              f"{self.format!r}", field=f"streams.{self.name}.format")
        if self.unit not in UNITS:
            raise ConfigError(f"stream {self.name}: unit must be 'file' or 'dir', got {self.unit!r}",
                              field=f"streams.{self.name}.unit")
        object.__setattr__(self, "options", dict(self.options))

    @property
    def ext(self) -> str:
        return FORMATS[self.format]

    @property
    def file_pattern(self) -> str:
        return self.pattern or f"*{self.ext}"

    def read_options(self) -> dict[str, str]:
        """Spark reader options: CSV files have a header unless told otherwise."""
        return ({"header": "true"} if self.format == "csv" else {}) | dict(self.options)

    def to_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "format": self.format, "pattern": self.pattern,
                "schema": self.schema, "options": dict(self.options), "unit": self.unit,
                "ready_marker": self.ready_marker, "min_age": self.min_age, "on_bad_unit": self.on_bad_unit}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Stream":
        return cls(**{k: d[k] for k in _FIELDS if k in d})


_FIELDS = ("name", "path", "format", "pattern", "schema", "options", "unit", "ready_marker", "min_age", "on_bad_unit")


@dataclass(frozen=True)
class Unit:
    """One complete unit of a landing directory: its name, its path (a file, or a directory),
    when it last changed, and its files by stream. ``os.fspath(unit)`` is its path."""

    name: str
    path: str
    mtime: float
    files: Mapping[str, tuple[str, ...]]

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __truediv__(self, name: str) -> Path:
        """A file in a directory unit, as with a :class:`~pathlib.Path`."""
        return Path(self.path) / name


#: The TPC-H layout of ``airflow-iqp tpch``: each unit a directory with orders.parquet and lineitem.parquet.
TPCH = (Stream("orders", unit="dir"), Stream("lineitem", unit="dir"))


def as_streams(spec) -> tuple[Stream, ...]:
    """Streams from what a DAG author or the CLI gives: Stream objects, a mapping
    name -> landing path (or -> Stream), or None for the TPC-H layout."""
    if spec is None:
        return TPCH
    if isinstance(spec, Stream):
        return (spec,)
    if isinstance(spec, Mapping):
        out = []
        for name, v in spec.items():
            if isinstance(v, Stream):
                out.append(v if v.name == name else Stream.from_dict({**v.to_dict(), "name": name}))
            elif isinstance(v, Mapping):
                out.append(Stream.from_dict({"name": name, **v}))
            else:
                out.append(Stream(name=name, path=str(v)))
        return tuple(out)
    return tuple(s if isinstance(s, Stream) else Stream.from_dict(s) for s in spec)


def landing_of(streams: Sequence[Stream]) -> str:
    """The one landing directory of a query's streams; streams read together land together."""
    paths = {s.path for s in streams}
    if len(streams) > 1 and (len(paths) > 1 or any(s.unit != "dir" for s in streams)):
        raise ConfigError(f"streams {', '.join(s.name for s in streams)} are read by one query, so their units "
                          f"must arrive together: give them the same landing path with unit='dir' (each unit a "
                          f"directory holding one file per stream)", field="streams")
    return next(iter(paths))


def is_hidden(name: str) -> bool:
    """In flight or a marker: ``.tmp-x``, ``_SUCCESS``, ``_temporary``, ``part-0.parquet.crc``."""
    return name.startswith((".", "_")) or name.endswith(".crc")


def _unit_sort_key(name: str) -> tuple:
    stem = name.split(".")[0]
    return (0, int(stem), name) if stem.isdigit() else (1, 0, name)


def _fs(path: str | os.PathLike):
    import fsspec

    return fsspec.core.url_to_fs(str(path))


def _mtime(entry: Mapping) -> float:
    """An fsspec listing entry's last change, in epoch seconds (local ``mtime``, object stores'
    ``LastModified`` / ``mtime`` / ``updated``)."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        v = entry.get(key)
        if v is None:
            continue
        if hasattr(v, "timestamp"):
            return v.timestamp()
        if isinstance(v, str):
            from datetime import datetime

            return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
        return float(v)
    return 0.0


def _ls(fs, path: str) -> list[dict]:
    """The entries directly inside ``path``. An object store may list a key such as
    ``landing/../x`` that resolves outside it, and a name may hold control characters: such
    an entry is not a unit, and is left out with a warning (a unit name becomes part of the
    state: claims, ``seen.json``, reports)."""
    from airflow_iqp.paths import check_name

    try:
        entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    parent = posixpath.normpath(str(path).rstrip("/") or "/")
    inside = []
    for e in entries:
        name = str(e["name"]).rstrip("/")
        base = posixpath.basename(name)
        try:
            if ".." in name.split("/") or posixpath.normpath(posixpath.dirname(name) or "/") != parent:
                raise ConfigError("not inside the listed directory", field="unit")
            if not is_hidden(base):
                check_name(base, "unit")
        except ConfigError as exc:
            if base != "..":  # a store's pseudo-directory "..": nothing to say
                import logging

                logging.getLogger(__name__).warning("%s: listed entry %r ignored: %s", path, name, exc)
            continue
        inside.append(e)
    return inside


def _full(fs, name: str) -> str:
    """A listed name as a path Spark and fsspec read again: plain for local files, with the
    protocol for an object store."""
    from fsspec.implementations.local import LocalFileSystem

    return name if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(name)


def _dir_unit(fs, entry: Mapping, streams: Sequence[Stream]) -> Unit | None:
    inside = {posixpath.basename(e["name"].rstrip("/")): e for e in _ls(fs, entry["name"])}
    marker = streams[0].ready_marker
    if marker and marker not in inside:
        return None
    files: dict[str, tuple[str, ...]] = {}
    for s in streams:
        if s.pattern:
            names = sorted(n for n, e in inside.items() if e["type"] == "file" and not is_hidden(n)
                           and fnmatch.fnmatch(n, s.pattern))
        else:
            names = [f"{s.name}{s.ext}"] if inside.get(f"{s.name}{s.ext}", {}).get("type") == "file" else []
        if not names:
            return None
        files[s.name] = tuple(_full(fs, inside[n]["name"]) for n in names)
    changed = max([_mtime(e) for e in inside.values()] + [_mtime(entry)])
    return Unit(posixpath.basename(entry["name"].rstrip("/")), _full(fs, entry["name"]), changed, files)


def list_units(landing: str | os.PathLike, streams: Sequence[Stream] = TPCH, now: float | None = None) -> list[Unit]:
    """The complete units of a landing directory, in name order (numeric names by number).

    Directory units are complete when every stream has its file (or files matching its
    pattern) and the ``ready_marker``, if any, is there; file units match the stream's
    pattern. With ``min_age``, a unit that changed less than that long ago is not complete
    yet. A missing landing directory has no units.
    """
    fs, root = _fs(landing)
    entries = [e for e in _ls(fs, root) if not is_hidden(posixpath.basename(e["name"].rstrip("/")))]
    if streams[0].unit == "dir":
        units = [u for e in entries if e["type"] == "directory" and (u := _dir_unit(fs, e, streams)) is not None]
    else:
        s = streams[0]
        units = [Unit(n, _full(fs, e["name"]), _mtime(e), {s.name: (_full(fs, e["name"]),)}) for e in entries
                 if e["type"] == "file" and fnmatch.fnmatch(n := posixpath.basename(e["name"]), s.file_pattern)]
    min_age = max(s.min_age for s in streams)
    if min_age:
        now = time.time() if now is None else now
        units = [u for u in units if now - u.mtime >= min_age]
    return sorted(units, key=lambda u: _unit_sort_key(u.name))


def count_names(landing: str | os.PathLike) -> int:
    """How many units a landing directory may hold, from one listing: at least
    :func:`list_units`' count, far cheaper. Waits poll this, and list the units only once
    enough names are there."""
    if "://" in str(landing) and not str(landing).startswith("file://"):
        fs, root = _fs(landing)
        return sum(1 for e in _ls(fs, root) if not is_hidden(posixpath.basename(e["name"].rstrip("/"))))
    try:
        return sum(1 for name in os.listdir(landing) if not is_hidden(name))
    except FileNotFoundError:
        return 0


def files_of(units: Iterable, streams: Sequence[Stream] = TPCH) -> list[str]:
    """The files of the given units for the given streams, unit by unit in stream order
    (a :class:`Unit` knows them; a plain path is read as a TPC-H unit directory or a file)."""
    out = []
    for u in units:
        if isinstance(u, Unit):
            out += [f for s in streams for f in u.files.get(s.name, ())]
        elif streams[0].unit == "dir":
            out += [str(Path(u).absolute() / f"{s.name}{s.ext}") for s in streams]
        else:
            out.append(str(Path(u).absolute()))
    return out


def stream_of(path: str, streams: Sequence[Stream] = TPCH) -> Stream:
    """The stream a unit file belongs to: its name's stem in a directory unit, else the one stream."""
    if streams[0].unit != "dir" and len(streams) == 1:
        return streams[0]
    name = os.path.basename(str(path).rstrip("/"))
    for s in streams:
        if name == f"{s.name}{s.ext}" or name.startswith(f"{s.name}-") or name.startswith(f"{s.name}."):
            return s
    raise ConfigError(f"{path}: cannot tell which stream this file belongs to (expected one of "
                      f"{', '.join(s.name + s.ext for s in streams)})", field="streams")


def file_schema(path: str | os.PathLike, format: str = "parquet") -> dict[str, str]:
    """Column -> Spark SQL type of a file, or of a directory of files (hidden names skipped),
    read with pyarrow: a footer, or a sample of a CSV or JSON file."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    try:
        schema = ds.dataset(os.fspath(path), format=format).schema
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read it as {format} ({exc})", field="format") from exc
    return {f.name: spark_type(f.type) for f in schema}


def spark_type(t) -> str:
    """The Spark SQL type name of a pyarrow type (the common ones; others as STRING)."""
    import pyarrow as pa

    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "INT"
    if pa.types.is_integer(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    return "STRING"


def schema_ddl(columns: Mapping[str, str]) -> str:
    return ", ".join(f"`{c}` {t}" for c, t in columns.items())


def ddl_columns(ddl: str) -> dict[str, str]:
    """``"a INT, b DECIMAL(15,2)"`` as ``{"a": "INT", "b": "DECIMAL(15,2)"}``."""
    out, depth, part = {}, 0, ""
    for ch in ddl + ",":
        if ch == "," and depth == 0:
            if part.strip():
                col, _, typ = part.strip().partition(" ")
                out[col.strip("`")] = typ.strip().upper()
            part = ""
            continue
        depth += (ch in "(<") - (ch in ")>")
        part += ch
    return out


def arrow_type(spark: str):
    """The pyarrow type a Spark SQL type name reads as (the types :func:`spark_type` names)."""
    import pyarrow as pa

    t = spark.upper().replace(" ", "")
    simple = {"BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(),
              "INTEGER": pa.int32(), "BIGINT": pa.int64(), "LONG": pa.int64(), "FLOAT": pa.float32(),
              "DOUBLE": pa.float64(), "STRING": pa.string(), "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("us"),
              "TIMESTAMP_NTZ": pa.timestamp("us")}
    if t in simple:
        return simple[t]
    if t.startswith("DECIMAL("):
        p, s = t[8:-1].split(",")
        return pa.decimal128(int(p), int(s))
    raise ConfigError(f"type {spark} is not one a unit's schema can be checked against "
                      f"({', '.join(sorted(simple))}, DECIMAL(p,s))", field="schema")
