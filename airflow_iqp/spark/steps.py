"""The per-batch and final steps, as plain functions over a SparkSession.

The spark-submit jobs call these; tests drive many queries through one session with
them; a Spark Connect backend can reuse them: they use only the DataFrame / SQL API
(no RDDs, no SparkContext). Input files are checked on the driver with pyarrow before
Spark reads them, so a corrupt file or a wrong schema fails with a message naming it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.filecheck import Inspection, inspect_files
from airflow_iqp.query.model import Query
from airflow_iqp.query.store import Saved, catalogued
from airflow_iqp.paths import check_name, is_local, local_path, make_dirs
from airflow_iqp.store.files import write_dir
from airflow_iqp.store.objects import fs_and_path
from airflow_iqp.streams import Stream, stream_of
from airflow_iqp.streams import schema_ddl as columns_ddl


def read_stream(spark, stream: Stream, files: Sequence[str], columns: Mapping[str, str] | None = None):
    """A DataFrame of one stream's files: with the stream's declared schema, or (csv, json)
    ``columns``, those the files were checked against; parquet and orc files describe
    themselves."""
    ddl = stream.schema
    if ddl is None and columns and (stream.format in ("csv", "json") or not files):
        ddl = columns_ddl(columns)
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
    return f"{str(static).rstrip('/')}/{check_name(table, 'static')}.parquet"


#: The schemas of local static tables that this process asked Spark for
#: (:func:`hold_static_schemas`), by path and the files' names, sizes and modification times.
_STATIC_SCHEMAS: dict[tuple, object] = {}


def read_static(spark, static, table: str):
    """A static table's DataFrame. Its schema is given to the reader if this process holds it
    (:func:`hold_static_schemas`) and the table's files are unchanged; else Spark infers it."""
    path = static_path(static, table)
    if is_local(path) and not os.path.exists(local_path(path)):
        raise DataError(f"{path}: static table {table} does not exist")
    fmt = next((f for f in ("csv", "json", "orc") if path.endswith("." + f)), "parquet")
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    held = _STATIC_SCHEMAS.get(_files_key(path)) if is_local(path) else None
    return (reader if held is None else reader.schema(held)).load(path)


def hold_static_schemas(spark, saved: Saved, static=None) -> None:
    """Ask Spark now for the schemas of ``saved``'s local static tables (``static`` as
    :func:`run_batch` takes it; the final step's are among them), and give them with every
    later read of those tables in this process (:func:`read_static`).

    Spark infers a static table's schema each time a plan that reads it is analysed: a
    Spark job that reads a parquet file's footer (a scan of a csv file), on every batch and
    every merge. A fused tail runs many such plans in one session, the last of them after
    the window's end. A schema is held only for the files it was read from: a table whose
    files change (names, sizes or modification times) is inferred again. Tables on an object
    store are not held: knowing that they are unchanged costs a listing of the store."""
    query = saved.query
    static = static if static is not None else saved.static
    names = [t for t in query.static if static is not None and is_local(static_path(static, t))]
    for table, df in read_statics(spark, query, static, names).items():
        key = _files_key(static_path(static, table))
        if key not in _STATIC_SCHEMAS:
            _STATIC_SCHEMAS[key] = df.schema


def _files_key(path: str) -> tuple:
    """A local file's or directory's path with its files' names, sizes and modification times."""
    root = local_path(path)
    if os.path.isfile(root):
        found = [root]
    else:
        found = sorted(os.path.join(d, f) for d, _dirs, files in os.walk(root) for f in files)
    stats = []
    for f in found:
        try:
            st = os.stat(f)
        except FileNotFoundError:  # removed while listed: the key differs from any held
            continue
        stats.append((f, st.st_size, st.st_mtime_ns))
    return (root, tuple(stats))


def as_saved(query: Saved | str) -> Saved:
    """A query with its streams: ``query`` itself, or the catalogued query of that id over
    the streams of ``airflow-iqp tpch`` (:func:`~airflow_iqp.query.store.catalogued`)."""
    if isinstance(query, Saved):
        return query
    if isinstance(query, Query):
        raise ConfigError(f"query {query.id}: give it with its streams, as a Saved(query, streams)", field="query")
    return catalogued(query)


def run_batch(spark, query: Saved | str, files: Sequence[str], static=None, *,
              inspection: Inspection | None = None, record=None):
    """One batch's partial result, a DataFrame, for the given input files.

    ``files`` are the batch's claimed unit files; files of streams the query does not
    read are ignored. They are checked first (:func:`inspect_files`, or ``inspection``
    when the caller did), and a quarantined unit's files are left out. ``static``: a
    directory of ``<table>.parquet`` or a mapping table -> path (default: the saved query's).
    """
    saved = as_saved(query)
    ins = inspection or inspect_files([str(f) for f in files], saved, record)
    return partial_of(spark, saved, read_streams(spark, saved, ins), static)


def read_streams(spark, saved: Saved, inspection: Inspection) -> dict:
    """The checked files of a batch as one DataFrame per stream the query reads, by name."""
    return {s: read_stream(spark, saved.stream(s),
                           [f for f in inspection.files if stream_of(f, saved.streams).name == s],
                           inspection.columns.get(s)) for s in saved.query.streams}


def partial_of(spark, saved: Saved, tables: Mapping, static=None):
    """A query's partial result over its streams' ``tables`` (name -> DataFrame) and its
    static tables (from ``static``; default: the saved query's)."""
    query = saved.query
    static = static if static is not None else saved.static
    return query.compute_partial(spark, {s: tables[s] for s in query.streams}
                                 | read_statics(spark, query, static, query.static))


def read_statics(spark, query: Query, static, names: Sequence[str]) -> dict:
    """Static tables ``names`` of ``query``, name -> DataFrame, from ``static`` (see :func:`static_path`)."""
    if names and static is None:
        raise ConfigError(f"query {query.id} joins static tables {', '.join(names)}; give their paths",
                          field="static")
    return {t: read_static(spark, static, t) for t in names}


def run_final(spark, query: Saved | str, partials, also=None, static=None):
    """The final result, a DataFrame, from all partials of a window.

    ``partials`` is a list of partial parquet paths (or a DataFrame of their union);
    ``also``, a partial not written (a DataFrame from :func:`run_batch`), merged with them.
    The static tables joined above the aggregations are read from ``static`` (as
    :func:`run_batch` reads it; default: the saved query's).
    """
    saved = as_saved(query)
    query = saved.query
    static = read_statics(spark, query, static if static is not None else saved.static, query.final_static)
    if not isinstance(partials, (list, tuple)):  # read ahead: its schema is known, and the tail's is the same
        return query.compute_final(spark, partials if also is None else partials.unionByName(also),
                                   schema=partials.schema, static=static)
    if not partials and also is None:
        raise ConfigError(f"query {query.id}: no partial results to merge", field="partials")
    paths = [str(p) for p in partials]
    for p in paths:
        if is_local(p) and not os.path.exists(local_path(p)):
            raise DataError(f"{p}: partial result does not exist")
    if not paths:
        return query.compute_final(spark, also, static=static)
    union = spark.read.parquet(*paths)
    return query.compute_final(spark, union if also is None else union.unionByName(also), static=static)


def parquet_writer(df, rows_estimate: int | None = None, before_commit=None):
    """What writes ``df`` as parquet at a fresh place: ``write(uri)``, for the state store's
    :meth:`~airflow_iqp.store.base.StateStore.write_dir` (or :func:`write_atomic`), which
    makes it appear whole.

    A result estimated at no more than :data:`COLLECT_MAX_ROWS` rows (``rows_estimate``)
    on a local file system is collected through Arrow and written by this process as one
    file, laid out as Spark writes one (``part-00000-*.parquet`` and ``_SUCCESS``; time
    stamps as INT96, Spark's default); else, and for a result that mixes time stamps with
    and without a time zone, which one file cannot store as Spark would, by a Spark write
    job. ``before_commit(uri)`` runs after the write (tests use it to stop a job at exactly
    that point).
    """
    def write(uri: str) -> None:
        if not (rows_estimate is not None and rows_estimate <= COLLECT_MAX_ROWS and is_local(uri)
                and _write_arrow(df, local_path(uri))):
            df.write.mode("error").parquet(uri)  # "error" (not "errorifexists"): Spark Connect knows only this name
        if before_commit is not None:
            before_commit(uri)

    return write


def write_atomic(df, final_path: str | os.PathLike, before_rename=None, rows_estimate: int | None = None) -> Path:
    """Write ``df`` as parquet to the local directory ``final_path``, whole or not at all
    (:func:`~airflow_iqp.store.files.write_dir`; an older one is replaced). The state
    store's partials and results are written through the store instead."""
    if not is_local(final_path):
        raise ConfigError(f"{final_path}: not a local directory; a state store writes its partials and results "
                          f"(WindowState.write_partial, write_result)", field="path")
    return write_dir(local_path(final_path), parquet_writer(df, rows_estimate, before_rename))


#: A window's result estimated at no more rows than this is collected through Arrow and
#: written by this process (:func:`parquet_writer`) instead of by a Spark write job. A write
#: job's file commit costs 0.05 s (CQ1) to 0.25 s (Q10) more on a warm local Connect server,
#: where a tight deadline leaves tenths of a second; 100,000 rows of an aggregate's result
#: are a few megabytes in the final task's memory.
COLLECT_MAX_ROWS = 100_000


def _write_arrow(df, path: str) -> bool:
    """Write ``df``'s rows as one parquet file in the new directory ``path``, as Spark would
    lay it out; False (nothing written) for rows that one file cannot store as Spark would."""
    table = result_table(df)
    if table is None:
        return False
    write_table(table, path)
    return True


def result_table(df):
    """``df``'s rows as an Arrow table that one parquet file stores as Spark would
    (:func:`write_table`), or None for rows that mix time stamps with and without a time zone."""
    import pyarrow as pa

    table = _arrow_table(df)
    stamps = [f.type.tz for f in table.schema if pa.types.is_timestamp(f.type)]
    return None if stamps and any(stamps) and not all(stamps) else table


def write_table(table, path: str) -> None:
    """Write a :func:`result_table` as one parquet file in the new local directory ``path``,
    laid out as Spark writes one (``part-00000-*.parquet`` and ``_SUCCESS``; time stamps as
    INT96, Spark's default)."""
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    stamps = [f.type.tz for f in table.schema if pa.types.is_timestamp(f.type)]
    make_dirs(path)
    pq.write_table(table, str(Path(path) / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"),
                   use_deprecated_int96_timestamps=bool(stamps and all(stamps)))
    (Path(path) / "_SUCCESS").touch()


def _arrow_table(df):
    """``df``'s rows as an Arrow table, in one request on Spark Connect: its ``toArrow`` asks
    the server for the schema first, a round trip more (about 0.04 s here). The result's own
    schema comes with its rows, and the table is cast to it as ``toArrow`` casts it (pyspark
    4.2's ``DataFrame._to_table``, pinned in pyproject.toml)."""
    if type(df).__module__ != "pyspark.sql.connect.dataframe":
        return df.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    table, schema = df._to_table()
    if schema is None:
        return table
    return table.cast(to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC"))


def parquet_rows(uri: str | os.PathLike) -> int | None:
    """Rows in a parquet directory written by Spark, local or in an object store (from the
    files' footers); None if there is none."""
    import pyarrow.parquet as pq

    if is_local(uri):
        p = Path(local_path(uri))
        if not p.is_dir():
            return None
        return sum(pq.ParquetFile(f).metadata.num_rows for f in p.glob("*.parquet"))
    fs, path = fs_and_path(str(uri))
    if not fs.isdir(path):
        return None
    total = 0
    for f in fs.glob(f"{path.rstrip('/')}/*.parquet"):
        with fs.open(f, "rb") as fh:
            total += pq.ParquetFile(fh).metadata.num_rows
    return total
