"""The per-batch and final steps, as plain functions over a SparkSession.

The spark-submit jobs call these; tests drive many queries through one session with
them; a Spark Connect backend can reuse them: they use only the DataFrame / SQL API
(no RDDs, no SparkContext). Input files are checked on the driver with pyarrow before
Spark reads them, so a corrupt file or a wrong schema fails with a message naming it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.inputs.tpch import SCHEMAS, schema_ddl
from airflow_iqp.query.model import Query
from airflow_iqp.query.store import Saved, load_query
from airflow_iqp.state import check_name, make_dirs, open_private, replace_dir, temp_sibling
from airflow_iqp.streams import Stream, arrow_type, ddl_columns, file_schema, stream_of
from airflow_iqp.streams import schema_ddl as columns_ddl
from airflow_iqp.streams import spark_type as spark_type_of


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


def _is_tpch(stream: Stream) -> bool:
    return stream.unit == "dir" and stream.name in SCHEMAS and stream.schema is None


SCHEMA_RECORD = "schema"


def expected_columns(stream: Stream, files: str | Sequence[str],
                     record_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """The columns (name -> Spark type) every unit file of ``stream`` must have.

    Declared (``stream.schema``), TPC-H's, or taken from a unit: the first of ``files``
    (the window's claimed files in batch order, then the batch's own) that can be read;
    a corrupt file is skipped, for the file check to name it. With ``record_dir``
    (``STATE/<query>/schema``) the first batch that needs it takes it so and records it in
    ``<stream>.json``, and every later batch and window checks against that record, so
    all partials agree on their columns' types.
    """
    if _is_tpch(stream):
        return dict(SCHEMAS[stream.name])
    if stream.schema:
        return ddl_columns(stream.schema)
    files = [files] if isinstance(files, str) else list(files)
    if record_dir is None or not all(_is_local(f) for f in files):
        return _first_schema(stream, files)
    from airflow_iqp.state import read_json

    path = Path(record_dir) / f"{stream.name}.json"
    if not path.is_file():
        columns, taken_from = _first_schema(stream, files, with_file=True)
        try:  # the first writer wins; a batch that lost the race reads the winner's
            with os.fdopen(open_private(path), "w") as fh:
                json.dump({"columns": columns, "taken_from": taken_from}, fh)
            return columns
        except FileExistsError:
            pass
    return dict(read_json(path)["columns"])


def _first_schema(stream: Stream, files: Sequence[str], with_file: bool = False):
    """The columns of the first of ``files`` that can be read (and that file); if none can,
    the first one's error."""
    first_error = None
    for f in files:
        try:
            columns = file_schema(_local(f), stream.format)
        except ConfigError as exc:
            first_error = first_error or exc
            continue
        return (columns, f) if with_file else columns
    if first_error is None:
        raise ConfigError(f"stream {stream.name}: no file to take its columns from; declare them "
                          f"(Stream(schema=...))", field="schema")
    raise first_error


def check_input_file(path: str, stream: Stream, columns: Mapping[str, str] | None = None) -> FileInfo:
    """Check one unit file; return its rows and bytes.

    Raises :class:`DataError` naming the file when it is missing, cannot be read as the
    stream's format (a corrupt file), or lacks a column of ``columns`` or has it with
    another type (extra columns are allowed). CSV and JSON files are parsed with the
    columns' types, so a value that does not convert is a mismatch too. Remote paths
    (``s3a://``...) are not inspected here; Spark reports their errors.
    """
    import pyarrow as pa

    if not _is_local(path):
        return FileInfo(path, stream.name, None, None)
    local = _local(path)
    if not os.path.isfile(local):
        raise DataError(f"{path}: input file does not exist")
    columns = dict(columns) if columns is not None else {}
    try:
        schema, rows = _read_checked(local, stream, columns)
    except DataError:
        raise
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable {stream.format} file for stream {stream.name} "
                        f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]})") from exc
    problems = []
    for col, want in columns.items():
        idx = schema.get_field_index(col)
        if idx < 0:
            problems.append(f"column {col} is missing")
        elif not _arrow_ok(want, schema.field(idx).type):
            problems.append(f"column {col} is {schema.field(idx).type}, expected {want}")
    if problems:
        raise DataError(f"{path}: wrong schema for stream {stream.name}: " + "; ".join(problems))
    return FileInfo(path, stream.name, rows, os.path.getsize(local))


def _read_checked(local: str, stream: Stream, columns: Mapping[str, str]):
    """(arrow schema, rows) of a file: a footer, or a CSV / JSON file parsed with the columns' types."""
    if stream.format == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(local)
        return pf.schema_arrow, pf.metadata.num_rows
    if stream.format == "orc":
        import pyarrow.orc as orc

        f = orc.ORCFile(local)
        return f.schema, f.nrows
    if stream.format == "csv":
        import pyarrow.csv as pcsv

        opts = {k: v for k, v in stream.read_options().items()}
        header = str(opts.get("header", "true")).lower() == "true"
        sep = opts.get("sep", opts.get("delimiter", ","))
        table = pcsv.read_csv(local, read_options=pcsv.ReadOptions(autogenerate_column_names=not header),
                              parse_options=pcsv.ParseOptions(delimiter=sep),
                              convert_options=pcsv.ConvertOptions(column_types={c: arrow_type(t)
                                                                                for c, t in columns.items()}))
        return table.schema, table.num_rows
    import pyarrow as pa
    import pyarrow.json as pjson

    explicit = pa.schema([(c, arrow_type(t)) for c, t in columns.items()]) if columns else None
    table = pjson.read_json(local, parse_options=pjson.ParseOptions(explicit_schema=explicit,
                                                                    unexpected_field_behavior="ignore"))
    return table.schema, table.num_rows


def _arrow_ok(spark_type: str, arrow_type_) -> bool:
    """A file's column type is the expected Spark type (strings in any arrow string type)."""
    import pyarrow as pa

    want = spark_type.upper().replace(" ", "")
    if want == "STRING":
        return pa.types.is_string(arrow_type_) or pa.types.is_large_string(arrow_type_) or \
            str(arrow_type_) == "string_view"
    got = spark_type_of(arrow_type_).replace(" ", "")
    return got == {"INTEGER": "INT", "LONG": "BIGINT", "TIMESTAMP_NTZ": "TIMESTAMP"}.get(want, want)


@dataclass(frozen=True)
class Inspection:
    """A batch's files, checked: the good ones with their sizes, and the quarantined units."""

    infos: list[FileInfo]
    quarantined: list[dict]
    columns: dict[str, dict[str, str]]  #: stream -> the columns its files were checked against

    @property
    def files(self) -> list[str]:
        return [i.path for i in self.infos]


def unit_of(path: str, stream: Stream) -> str:
    """The unit a file belongs to: its directory's name (directory units) or its own name."""
    p = path.rstrip("/")
    return os.path.basename(os.path.dirname(p)) if stream.unit == "dir" else os.path.basename(p)


def inspect_files(files: Sequence[str], saved: Saved, record_dir: str | os.PathLike | None = None,
                  claimed: Sequence[str] = ()) -> Inspection:
    """Check a batch's files (those of the streams its query reads). A bad file fails the batch
    (``on_bad_unit="fail"``, a :class:`DataError` naming it) or takes its whole unit out of the
    batch (``"quarantine"``: each such unit with the file and the reason).

    ``claimed``: the files the window's batches claimed, in batch order. A stream whose
    columns are neither declared nor recorded yet takes them from the first readable of
    those, then of the batch's own (:func:`expected_columns`): whichever batch runs first,
    the window's first good unit sets them, not a bad unit that happens to lead a batch."""
    read = [f for f in files if stream_of(f, saved.streams).name in saved.query.streams]
    candidates: dict[str, dict[str, None]] = {}  # per stream, its files in order, each once
    for f in [*claimed, *read]:
        candidates.setdefault(stream_of(f, saved.streams).name, {})[f] = None
    names = {stream_of(f, saved.streams).name for f in read}
    columns = {name: expected_columns(saved.stream(name), list(candidates[name]), record_dir) for name in sorted(names)}
    infos, bad = [], {}
    for f in read:
        stream = stream_of(f, saved.streams)
        try:
            infos.append(check_input_file(f, stream, columns[stream.name]))
        except DataError as exc:
            if stream.on_bad_unit == "fail":
                raise
            bad.setdefault(unit_of(f, stream), {"unit": unit_of(f, stream), "file": f, "reason": str(exc)})
    good = [i for i in infos if unit_of(i.path, stream_of(i.path, saved.streams)) not in bad]
    return Inspection(good, list(bad.values()), columns)


def read_stream(spark, stream: Stream, files: Sequence[str], columns: Mapping[str, str] | None = None):
    """A DataFrame of one stream's files: with the TPC-H stream's schema, the declared one,
    or (csv, json) ``columns``, those the files were checked against; parquet and orc
    files describe themselves."""
    ddl = schema_ddl(stream.name) if _is_tpch(stream) else stream.schema
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


def run_batch(spark, query: Saved | Query | str, files: Sequence[str], static=None, *,
              inspection: Inspection | None = None, record_dir: str | os.PathLike | None = None):
    """One batch's partial result, a DataFrame, for the given input files.

    ``files`` are the batch's claimed unit files; files of streams the query does not
    read are ignored. They are checked first (:func:`inspect_files`, or ``inspection``
    when the caller did), and a quarantined unit's files are left out. ``static``: a
    directory of ``<table>.parquet`` or a mapping table -> path (default: the saved query's).
    """
    saved = as_saved(query)
    query = saved.query
    ins = inspection or inspect_files([str(f) for f in files], saved, record_dir)
    static = static if static is not None else saved.static
    tables = {s: read_stream(spark, saved.stream(s), [f for f in ins.files if stream_of(f, saved.streams).name == s],
                             ins.columns.get(s)) for s in query.streams}
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
    if not isinstance(partials, (list, tuple)):  # read ahead: its schema is known, and the tail's is the same
        return query.compute_final(spark, partials if also is None else partials.unionByName(also),
                                   schema=partials.schema)
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
    make_dirs(final_path.parent)
    tmp = temp_sibling(final_path)
    df.write.mode("error").parquet(str(tmp))  # "error" (not "errorifexists"): Spark Connect knows only this name
    if before_rename is not None:
        before_rename(tmp)
    return replace_dir(tmp, final_path)


#: A window's result estimated at no more rows than this is collected through Arrow and
#: written by this process (:func:`write_result`) instead of by a Spark write job. A write
#: job's file commit costs 0.05 s (CQ1) to 0.25 s (Q10) more on a warm local Connect server,
#: where a tight deadline leaves tenths of a second; 100,000 rows of an aggregate's result
#: are a few megabytes in the final task's memory.
COLLECT_MAX_ROWS = 100_000


def write_result(df, final_path: str | os.PathLike, rows_estimate: int | None = None) -> Path:
    """Write a window's result ``df`` to ``final_path`` as parquet, atomically.

    With ``rows_estimate`` at most :data:`COLLECT_MAX_ROWS` the result is collected through
    Arrow and written here as one file, laid out as Spark writes one (``part-00000-*.parquet``
    and ``_SUCCESS``; time stamps as INT96, Spark's default); else, and for a result that
    mixes time stamps with and without a time zone, which one file cannot store as Spark
    would, by :func:`write_atomic`. Either way a reader sees the whole result or none.
    """
    if rows_estimate is None or rows_estimate > COLLECT_MAX_ROWS:
        return write_atomic(df, final_path)
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = _arrow_table(df)
    stamps = [f.type.tz for f in table.schema if pa.types.is_timestamp(f.type)]
    if stamps and any(stamps) and not all(stamps):
        return write_atomic(df, final_path)
    final_path = Path(final_path)
    make_dirs(final_path.parent)
    tmp = temp_sibling(final_path)
    make_dirs(tmp)
    pq.write_table(table, str(tmp / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"),
                   use_deprecated_int96_timestamps=bool(stamps and all(stamps)))
    (tmp / "_SUCCESS").touch()
    return replace_dir(tmp, final_path)


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


def parquet_rows(path: str | os.PathLike) -> int | None:
    """Rows in a local parquet directory written by Spark (from the footers)."""
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_dir():
        return None
    return sum(pq.ParquetFile(f).metadata.num_rows for f in p.glob("*.parquet"))
