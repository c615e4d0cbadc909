"""Streams: where a query's input lands, what one unit of it is, and how to read it.

A unit is either

* one file of the stream's landing directory that matches ``pattern`` (``unit="file"``,
  the default), or
* one sub-directory of the landing directory holding one file per stream, named
  ``<stream>.<ext>`` (``unit="dir"``): streams that must arrive together, like the
  paper's orders with their lineitems.

Names starting with ``.`` or ``_`` are still being written (or are a writer's markers,
such as ``_SUCCESS``) and are never units; neither are ``.crc`` checksum files.

Pure Python: no Airflow and no Spark import. Spark readers take a :class:`Stream` too
(:func:`airflow_iqp.spark.steps.read_stream`).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from airflow_iqp.errors import ConfigError

FORMATS = {"parquet": ".parquet", "csv": ".csv", "json": ".json", "orc": ".orc"}
UNITS = ("file", "dir")


@dataclass(frozen=True)
class Stream:
    """One stream of a query's input (see the module doc)."""

    name: str
    path: str = ""
    format: str = "parquet"
    pattern: str | None = None
    schema: str | None = None   #: Spark DDL, e.g. "id BIGINT, ts TIMESTAMP"; None: from the files
    options: Mapping[str, str] = field(default_factory=dict)
    unit: str = "file"

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ConfigError(f"a stream name is a SQL table name (letters, digits, '_'), got {self.name!r}",
                              field="streams")
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
                "schema": self.schema, "options": dict(self.options), "unit": self.unit}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Stream":
        return cls(**{k: d[k] for k in ("name", "path", "format", "pattern", "schema", "options", "unit") if k in d})


#: The TPC-H layout of ``airflow-iqp tpch``: each unit a directory with orders.parquet and lineitem.parquet.
TPCH = (Stream("orders", unit="dir"), Stream("lineitem", unit="dir"))


def as_streams(spec, default_path: str = "") -> tuple[Stream, ...]:
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
                out.append(v if v.name == name else Stream(**{**v.to_dict(), "name": name}))
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


def list_units(landing: str | os.PathLike, streams: Sequence[Stream] = TPCH) -> list[Path]:
    """The complete units of a landing directory, in name order (numeric names by number).

    Directory units are complete when every stream's file is there; file units match the
    stream's pattern. A missing landing directory has no units.
    """
    landing = Path(landing)
    try:
        entries = list(os.scandir(landing))
    except FileNotFoundError:
        return []
    if streams[0].unit == "dir":
        want = [f"{s.name}{s.ext}" for s in streams]
        units = [Path(e.path) for e in entries if e.is_dir() and not is_hidden(e.name)
                 and all((Path(e.path) / f).is_file() for f in want)]
    else:
        pattern = streams[0].file_pattern
        units = [Path(e.path) for e in entries if not is_hidden(e.name) and e.is_file()
                 and fnmatch.fnmatch(e.name, pattern)]
    return sorted(units, key=lambda p: _unit_sort_key(p.name))


def count_names(landing: str | os.PathLike) -> int:
    """How many units a landing directory may hold, from one listing: at least
    :func:`list_units`' count, far cheaper. Waits poll this, and list the units only once
    enough names are there."""
    try:
        return sum(1 for name in os.listdir(landing) if not is_hidden(name))
    except FileNotFoundError:
        return 0


def files_of(units: Iterable[str | os.PathLike], streams: Sequence[Stream] = TPCH) -> list[str]:
    """Absolute paths of the files of the given units (directory units: one per stream)."""
    if streams[0].unit == "dir":
        return [str(Path(u).absolute() / f"{s.name}{s.ext}") for u in units for s in streams]
    return [str(Path(u).absolute()) for u in units]


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
        schema = ds.dataset(str(path), format=format).schema
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
