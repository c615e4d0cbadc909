"""The per-batch and final steps, as plain functions over a SparkSession.

The spark-submit jobs call these; tests drive many queries through one session with
them; a Spark Connect backend can reuse them: they use only the DataFrame / SQL API
(no RDDs, no SparkContext). Input files are checked on the driver with pyarrow before
Spark reads them, so a corrupt file or a wrong schema fails with a message naming it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.inputs.tpch import SCHEMAS, schema_ddl
from airflow_iqp.query.model import Query
from airflow_iqp.query.store import Saved, load_query
from airflow_iqp.state import replace_dir, temp_sibling
from airflow_iqp.streams import TPCH, Stream, file_schema, stream_of
from airflow_iqp.streams import schema_ddl as columns_ddl


@dataclass(frozen=True)
class FileInfo:
    path: str
    stream: str
    rows: int | None
    bytes: int | None


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def _arrow_ok(spark_type: str, arrow_type) -> bool:
    import pyarrow as pa

    if spark_type == "BIGINT":
        return pa.types.is_int64(arrow_type)
    if spark_type == "INT":
        return pa.types.is_int32(arrow_type)
    if spark_type == "DATE":
        return pa.types.is_date32(arrow_type)
    if spark_type == "STRING":
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or str(arrow_type) == "string_view"
    if spark_type.startswith("DECIMAL("):
        p, s = spark_type[8:-1].split(",")
        return pa.types.is_decimal(arrow_type) and arrow_type.precision == int(p) and arrow_type.scale == int(s)
    raise AssertionError(spark_type)


def _is_tpch(stream: Stream) -> bool:
    return stream.unit == "dir" and stream.name in SCHEMAS and stream.schema is None


def check_input_file(path: str, stream: Stream) -> FileInfo:
    """Check one unit file; return its row count and size (parquet) or size.

    Raises :class:`DataError` naming the file when it is missing or not a readable parquet
    file; a TPC-H stream's file must also have every column of its stream with its type
    (extra columns, such as the event time, are allowed). Remote paths (``s3a://``...) are
    not inspected here; Spark reports their errors.
    """
    import pyarrow.parquet as pq

    if not _is_local(path):
        return FileInfo(path, stream.name, None, None)
    local = _local(path)
    if not os.path.isfile(local):
        raise DataError(f"{path}: input file does not exist")
    if stream.format != "parquet":
        return FileInfo(path, stream.name, None, os.path.getsize(local))
    try:
        pf = pq.ParquetFile(local)
        schema, rows = pf.schema_arrow, pf.metadata.num_rows
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError ... for a bad footer
        raise DataError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from exc
    problems = []
    for col, spark_type in (SCHEMAS[stream.name] if _is_tpch(stream) else ()):
        idx = schema.get_field_index(col)
        if idx < 0:
            problems.append(f"column {col} is missing")
        elif not _arrow_ok(spark_type, schema.field(idx).type):
            problems.append(f"column {col} is {schema.field(idx).type}, expected {spark_type}")
    if problems:
        raise DataError(f"{path}: wrong schema for stream {stream.name}: " + "; ".join(problems))
    return FileInfo(path, stream.name, rows, os.path.getsize(local))


def check_input_files(files: Iterable[str], streams: Sequence[Stream] = TPCH,
                      read: Sequence[str] | None = None) -> list[FileInfo]:
    """:func:`check_input_file` for every file of the streams named in ``read`` (all if None)."""
    out = []
    for f in files:
        s = stream_of(f, streams)
        if read is None or s.name in read:
            out.append(check_input_file(str(f), s))
    return out


def read_stream(spark, stream: Stream, files: Sequence[str]):
    """A DataFrame of one stream's files: the TPC-H stream's schema, the declared one, or
    (csv, json) the first file's; parquet and orc files describe themselves."""
    ddl = schema_ddl(stream.name) if _is_tpch(stream) else stream.schema
    if ddl is None and stream.format in ("csv", "json") and files and _is_local(files[0]):
        ddl = columns_ddl(file_schema(_local(files[0]), stream.format))
    if not files:
        if ddl is None:
            raise ConfigError(f"stream {stream.name}: an empty batch needs a declared schema", field="schema")
        return spark.createDataFrame([], ddl)
    reader = spark.read.format(stream.format).options(**stream.read_options())
    return (reader.schema(ddl) if ddl else reader).load(list(files))


def static_path(static, table: str) -> str:
    """A static table's path: ``static[table]`` of a mapping, or ``static/<table>.parquet`` of a directory."""
    if isinstance(static, Mapping):
        if table not in static:
            raise ConfigError(f"static table {table} has no path; give static={{'{table}': PATH}}", field="static")
        return str(static[table])
    return f"{str(static).rstrip('/')}/{table}.parquet"


def read_static(spark, static, table: str):
    path = static_path(static, table)
    if _is_local(path) and not os.path.exists(_local(path)):
        raise DataError(f"{path}: static table {table} does not exist")
    fmt = next((f for f in ("csv", "json", "orc") if path.endswith("." + f)), "parquet")
    reader = spark.read.format(fmt)
    return (reader.option("header", "true").option("inferSchema", "true") if fmt == "csv" else reader).load(path)


def as_saved(query: Saved | Query | str) -> Saved:
    if isinstance(query, Saved):
        return query
    return Saved(query) if isinstance(query, Query) else load_query(query)


def run_batch(spark, query: Saved | Query | str, files: Sequence[str], static=None):
    """One batch's partial result, a DataFrame, for the given input files.

    ``files`` are the batch's claimed unit files; files of streams the query does not
    read are ignored. They are checked first (:func:`check_input_files`). ``static``: a
    directory of ``<table>.parquet`` or a mapping table -> path (default: the saved query's).
    """
    saved = as_saved(query)
    query = saved.query
    files = [str(f) for f in files]
    check_input_files(files, saved.streams, query.streams)
    static = static if static is not None else saved.static
    tables = {s: read_stream(spark, saved.stream(s), [f for f in files if stream_of(f, saved.streams).name == s])
              for s in query.streams}
    if query.static and static is None:
        raise ConfigError(f"query {query.id} joins static tables {', '.join(query.static)}; give their paths",
                          field="static")
    for t in query.static:
        tables[t] = read_static(spark, static, t)
    return query.compute_partial(spark, tables)


def run_final(spark, query: Saved | Query | str, partials, also=None):
    """The final result, a DataFrame, from all partials of a window.

    ``partials`` is a list of partial parquet paths (or a DataFrame of their union);
    ``also``, a partial not written (a DataFrame from :func:`run_batch`), merged with them.
    """
    query = as_saved(query).query
    if not isinstance(partials, (list, tuple)):
        return query.compute_final(spark, partials if also is None else partials.unionByName(also))
    if not partials and also is None:
        raise ConfigError(f"query {query.id}: no partial results to merge", field="partials")
    paths = [str(p) for p in partials]
    for p in paths:
        if _is_local(p) and not os.path.exists(_local(p)):
            raise DataError(f"{p}: partial result does not exist")
    if not paths:
        return query.compute_final(spark, also)
    union = spark.read.parquet(*paths)
    return query.compute_final(spark, union if also is None else union.unionByName(also))


def write_atomic(df, final_path: str | os.PathLike, before_rename=None) -> Path:
    """Write ``df`` as parquet to a hidden sibling of ``final_path``, then rename it into place.

    ``before_rename(tmp_path)`` runs after the write and before the rename (tests use it
    to stop a job at exactly that point). An older directory at ``final_path`` is replaced.
    """
    final_path = Path(final_path)
    final_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(final_path)
    df.write.mode("error").parquet(str(tmp))  # "error" (not "errorifexists"): Spark Connect knows only this name
    if before_rename is not None:
        before_rename(tmp)
    return replace_dir(tmp, final_path)


def parquet_rows(path: str | os.PathLike) -> int | None:
    """Rows in a local parquet directory written by Spark (from the footers)."""
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_dir():
        return None
    return sum(pq.ParquetFile(f).metadata.num_rows for f in p.glob("*.parquet"))
