"""Streams: where a query's input lands, what one unit of it is, and how to read it.

A unit is either

* one file of the stream's landing directory that matches ``pattern`` (``unit="file"``,
  the default), or
* one sub-directory of the landing directory holding one file per stream, named
  ``<stream>.<ext>`` (``unit="dir"``): streams that must arrive together, like the
  paper's orders with their lineitems.

Where the files are found, and which window each belongs to, is the stream's layout: a
directory per window (a templated ``path``), one flat directory (a plain ``path``), or
Hive-style partitions named by the writer's clock (``partitions=``); a file of a flat or
partitioned layout belongs to the window in which it arrived, its last-modified time.
:mod:`airflow_iqp.landing` lists them.

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

import os
import re
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
    first unit's schema is taken and every later unit is checked against it, when a batch
    claims it, before any Spark job (:mod:`airflow_iqp.filecheck`). A unit whose file is
    corrupt or does not match follows ``on_bad_unit``: ``"quarantine"``, the default (the
    batch goes on without it; the claim keeps it, so no later batch or window takes it; the
    result is marked partial, and it and the run's report name it with its problem: an
    on-time result without a bad file beats none), or ``"fail"`` (the batch fails, its
    message's first line naming every bad file of the claim; the claim stays, so a rerun
    after the files are replaced processes each unit once).

    ``path`` is where the files land: templated with the window
    (``.../{{ data_interval_start | ts_nodash }}``) for a directory per window, or a plain
    directory or prefix that every window's files land in. ``partitions`` is a strftime
    template (UTC) of Hive-style partitions under ``path`` named by the writer's clock,
    such as ``"dt=%Y-%m-%d/hour=%H"``. In both of the last two, a file belongs to the window
    in which it arrived (its last-modified time); ``window`` is that span, bound by the plan
    for each window (:meth:`for_window`), never by a DAG author.
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
    on_bad_unit: str = "quarantine"
    partitions: str | None = None
    window: tuple[float, float] | None = None

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
        if self.partitions is not None:
            if not isinstance(self.partitions, str) or not STRFTIME_FIELD.search(self.partitions) \
                    or self.partitions.startswith("/") or ".." in self.partitions.split("/"):
                raise ConfigError(f"stream {self.name}: partitions is a strftime template of the partitions under "
                                  f"path, such as 'dt=%Y-%m-%d/hour=%H', got {self.partitions!r}",
                                  field=f"streams.{self.name}.partitions")
            if self.templated:
                raise ConfigError(f"stream {self.name}: give either a path templated per window or partitions= "
                                  f"under a plain path, not both", field=f"streams.{self.name}.partitions")
        if self.window is not None:
            object.__setattr__(self, "window", (float(self.window[0]), float(self.window[1])))
        object.__setattr__(self, "options", dict(self.options))

    @property
    def templated(self) -> bool:
        """The path names the window (a Jinja template): a directory per window."""
        return "{{" in self.path or "{%" in self.path

    def for_window(self, start: float, end: float, templated: bool | None = None) -> "Stream":
        """This stream listed for one window: files that arrived in ``[start, end)`` (epoch
        seconds), unless its landing path is templated per window (``templated``, by default
        the stream's own path), whose directory holds the window's files whatever their times."""
        if self.templated if templated is None else templated:
            return self
        return Stream.from_dict({**self.to_dict(), "window": (start, end)})

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
                "ready_marker": self.ready_marker, "min_age": self.min_age, "on_bad_unit": self.on_bad_unit,
                "partitions": self.partitions, "window": list(self.window) if self.window else None}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Stream":
        return cls(**{k: d[k] for k in _FIELDS if k in d})


_FIELDS = ("name", "path", "format", "pattern", "schema", "options", "unit", "ready_marker", "min_age", "on_bad_unit",
           "partitions", "window")
#: One field of a strftime template, such as ``%H``.
STRFTIME_FIELD = re.compile(r"%[a-zA-Z]")


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


def as_streams(spec) -> tuple[Stream, ...]:
    """Streams from what a DAG author or the CLI gives: Stream objects, a mapping
    name -> landing path (or -> Stream), or their ``to_dict()`` forms."""
    if not spec:
        raise ConfigError("no streams declared: give streams={'table': '<landing path>'}", field="streams")
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


def files_of(units: Iterable, streams: Sequence[Stream]) -> list[str]:
    """The files of the given units for the given streams, unit by unit in stream order
    (a :class:`Unit` knows them; a plain path is read as a unit directory of the streams'
    files, or as a file)."""
    out = []
    for u in units:
        if isinstance(u, Unit):
            out += [f for s in streams for f in u.files.get(s.name, ())]
        elif streams[0].unit == "dir":
            out += [str(Path(u).absolute() / f"{s.name}{s.ext}") for s in streams]
        else:
            out.append(str(Path(u).absolute()))
    return out


def stream_of(path: str, streams: Sequence[Stream]) -> Stream:
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
