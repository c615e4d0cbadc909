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
from typing import Iterable, Sequence

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.inputs.tpch import SCHEMAS, schema_ddl
from airflow_iqp.spark.queries import Query, get_query
from airflow_iqp.state import replace_dir, temp_sibling


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


def stream_of(path: str) -> str:
    """The stream a file belongs to, from its name: ``.../orders.parquet`` is ``orders``."""
    name = os.path.basename(str(path).rstrip("/"))
    for stream in SCHEMAS:
        if name == f"{stream}.parquet" or name.startswith(f"{stream}-") or name.startswith(f"{stream}."):
            return stream
    raise DataError(f"{path}: cannot tell which stream this file belongs to (expected orders.parquet or "
                    f"lineitem.parquet)")


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


def check_input_file(path: str, stream: str | None = None) -> FileInfo:
    """Check one stream file's footer and schema; return its row count and size.

    Raises :class:`DataError` naming the file when it is missing, not a readable parquet
    file, or lacks a column of its stream (or has it with another type). Extra columns
    (such as the event time) are allowed. Remote paths (``s3a://``...) are not inspected
    here; Spark reports their errors.
    """
    import pyarrow.parquet as pq

    stream = stream or stream_of(path)
    if not _is_local(path):
        return FileInfo(path, stream, None, None)
    local = _local(path)
    if not os.path.isfile(local):
        raise DataError(f"{path}: input file does not exist")
    try:
        pf = pq.ParquetFile(local)
        schema, rows = pf.schema_arrow, pf.metadata.num_rows
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError ... for a bad footer
        raise DataError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from exc
    problems = []
    for col, spark_type in SCHEMAS[stream]:
        idx = schema.get_field_index(col)
        if idx < 0:
            problems.append(f"column {col} is missing")
        elif not _arrow_ok(spark_type, schema.field(idx).type):
            problems.append(f"column {col} is {schema.field(idx).type}, expected {spark_type}")
    if problems:
        raise DataError(f"{path}: wrong schema for stream {stream}: " + "; ".join(problems))
    return FileInfo(path, stream, rows, os.path.getsize(local))


def check_input_files(files: Iterable[str], streams: Sequence[str] | None = None) -> list[FileInfo]:
    """:func:`check_input_file` for every file of the given streams (others are skipped)."""
    out = []
    for f in files:
        s = stream_of(f)
        if streams is None or s in streams:
            out.append(check_input_file(str(f), s))
    return out


def read_stream(spark, stream: str, files: Sequence[str]):
    """A DataFrame of one stream's files with the stream's schema (empty if no files)."""
    if not files:
        return spark.createDataFrame([], schema_ddl(stream))
    return spark.read.schema(schema_ddl(stream)).parquet(*files)


def static_path(static_dir: str, table: str) -> str:
    """``static_dir/<table>.parquet`` (a file or a parquet directory)."""
    return f"{str(static_dir).rstrip('/')}/{table}.parquet"


def read_static(spark, static_dir: str | os.PathLike, table: str):
    path = static_path(str(static_dir), table)
    if _is_local(path) and not os.path.exists(_local(path)):
        raise DataError(f"{path}: static table {table} does not exist")
    return spark.read.parquet(path)


def _as_query(query: Query | str) -> Query:
    return query if isinstance(query, Query) else get_query(query)


def run_batch(spark, query: Query | str, files: Sequence[str], static_dir: str | os.PathLike | None):
    """One batch's partial result, a DataFrame, for the given input files.

    ``files`` are the batch's claimed stream files; files of streams the query does not
    read are ignored. They are checked first (:func:`check_input_files`).
    """
    query = _as_query(query)
    files = [str(f) for f in files]
    check_input_files(files, query.streams)
    by_stream = {s: [f for f in files if stream_of(f) == s] for s in query.streams}
    tables = {s: read_stream(spark, s, fs) for s, fs in by_stream.items()}
    if query.static and static_dir is None:
        raise ConfigError(f"query {query.id} joins static tables {', '.join(query.static)}; give their directory",
                          field="static")
    for t in query.static:
        tables[t] = read_static(spark, static_dir, t)
    return query.partial(spark, tables)


def run_final(spark, query: Query | str, partials, also=None):
    """The final result, a DataFrame, from all partials of a window.

    ``partials`` is a list of partial parquet paths (or a DataFrame of their union);
    ``also``, a partial not written (a DataFrame from :func:`run_batch`), merged with them.
    """
    query = _as_query(query)
    if not isinstance(partials, (list, tuple)):
        return query.final(spark, partials if also is None else partials.unionByName(also))
    if not partials and also is None:
        raise ConfigError(f"query {query.id}: no partial results to merge", field="partials")
    paths = [str(p) for p in partials]
    for p in paths:
        if _is_local(p) and not os.path.exists(_local(p)):
            raise DataError(f"{p}: partial result does not exist")
    if not paths:
        return query.final(spark, also)
    union = spark.read.parquet(*paths)
    return query.final(spark, union if also is None else union.unionByName(also))


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
