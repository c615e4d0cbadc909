"""Input files checked with pyarrow before Spark reads them: when a batch claims them, and in the batch.

A unit file is bad when it is missing, cannot be read as its stream's format (a corrupt
file, a CSV row with the wrong number of fields), or lacks a column of its stream or holds
one with another type (a value that does not convert, in CSV or JSON). The columns are the
stream's declared schema, or those of the window's first readable unit, recorded
for every later batch and window (:func:`expected_columns`).

A batch's files are checked when it claims them (:func:`check_claim`), before any Spark job
starts: a parquet or ORC footer, and the first :data:`SAMPLE_BYTES` of a CSV or JSON file
(its header and first rows) parsed with the columns' types. A file no larger than that is
checked whole, and the claim records its rows so that the batch does not read it again;
the batch parses a larger file whole before Spark reads it (:func:`inspect_files`).

What happens to a bad file is its stream's ``on_bad_unit``. ``"quarantine"`` (the default):
the claim keeps its unit, so no later batch or window claims it, and lists it under
``quarantined``; the batch reads the rest (:func:`files_to_read`), and the result is marked
partial and names it. ``"fail"``: the batch fails, its first line naming every bad file of
the claim (:func:`bad_files_message`); the claim stays, so a rerun after the files are
replaced reads each unit once.

Pure Python and pyarrow: no Airflow and no Spark import. Remote paths (``s3a://``...) are
not inspected here; Spark reports their errors when it reads them.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.paths import is_local, local_path
from airflow_iqp.streams import Stream, arrow_type, ddl_columns, file_schema, stream_of
from airflow_iqp.streams import spark_type as spark_type_of

log = logging.getLogger(__name__)

#: How much of a CSV or JSON file the claim parses: its header and first rows. A file no
#: larger is checked whole when it is claimed and not parsed again before Spark reads it.
SAMPLE_BYTES = 1 << 20


@dataclass(frozen=True)
class FileInfo:
    path: str
    stream: str
    rows: int | None
    bytes: int | None


def expected_columns(stream: Stream, files: str | Sequence[str], record=None) -> dict[str, str]:
    """The columns (name -> Spark type) every unit file of ``stream`` must have.

    Declared (``stream.schema``), or taken from a unit: the first of ``files``
    (the window's claimed files in batch order, then the batch's own) that can be read;
    a corrupt file is skipped, for the file check to name it. With ``record`` (the
    query's :class:`~airflow_iqp.store.QueryState`) the first batch that needs it takes it
    so and records it, and every later batch and window checks against that record, so all
    partials agree on their columns' types.
    """
    if stream.schema:
        return ddl_columns(stream.schema)
    files = [files] if isinstance(files, str) else list(files)
    if record is None or not all(is_local(f) for f in files):
        return _first_schema(stream, files)
    recorded = record.columns(stream.name)
    if recorded is None:
        columns, taken_from = _first_schema(stream, files, with_file=True)
        # The first batch to record them wins; one that lost the race checks against its record.
        recorded = record.record_columns(stream.name, {"columns": columns, "taken_from": taken_from})
    return dict(recorded["columns"])


def _first_schema(stream: Stream, files: Sequence[str], with_file: bool = False):
    """The columns of the first of ``files`` that can be read (and that file); if none can,
    the first one's error."""
    first_error = None
    for f in files:
        try:
            columns = file_schema(local_path(f), stream.format)
        except ConfigError as exc:
            first_error = first_error or exc
            continue
        return (columns, f) if with_file else columns
    if first_error is None:
        raise ConfigError(f"stream {stream.name}: no file to take its columns from; declare them "
                          f"(Stream(schema=...))", field="schema")
    raise first_error


def check_input_file(path: str, stream: Stream, columns: Mapping[str, str] | None = None,
                     sample: int | None = None) -> FileInfo:
    """Check one unit file; return its rows and bytes.

    Raises :class:`DataError` naming the file when it is missing, cannot be read as the
    stream's format (a corrupt file), or lacks a column of ``columns`` or has it with
    another type (extra columns are allowed). CSV and JSON files are parsed with the
    columns' types, so a value that does not convert is a mismatch too; with ``sample``,
    only a file's first ``sample`` bytes are (its rows are then None if it is larger).
    Remote paths (``s3a://``...) are not inspected here; Spark reports their errors.
    """
    import pyarrow as pa

    if not is_local(path):
        return FileInfo(path, stream.name, None, None)
    local = local_path(path)
    if not os.path.isfile(local):
        raise DataError(f"{path}: input file does not exist")
    columns = dict(columns) if columns is not None else {}
    size = os.path.getsize(local)
    try:
        schema, rows = _read_checked(local, stream, columns, sample if sample and size > sample else None)
    except ConfigError:  # a type the check cannot read: the schema is to fix, not the file
        raise
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as exc:
        message = " ".join(str(exc).split())
        wrong = _conversion_problem(message, local, stream, columns)
        if wrong:
            raise DataError(f"{path}: wrong schema for stream {stream.name}: {wrong}") from exc
        raise DataError(f"{path}: not a readable {stream.format} file for stream {stream.name} "
                        f"({type(exc).__name__}: {message[:300]})") from exc
    problems = []
    for col, want in columns.items():
        idx = schema.get_field_index(col)
        if idx < 0:
            problems.append(f"column {col} is missing")
        elif not _arrow_ok(want, schema.field(idx).type):
            problems.append(f"column {col} is {schema.field(idx).type}, expected {want}")
    if problems:
        raise DataError(f"{path}: wrong schema for stream {stream.name}: " + "; ".join(problems))
    return FileInfo(path, stream.name, rows, size)


def _read_checked(local: str, stream: Stream, columns: Mapping[str, str], sample: int | None):
    """(arrow schema, rows) of a file: a footer, or a CSV / JSON file parsed with the columns'
    types; with ``sample``, its first ``sample`` bytes only (rows None)."""
    import pyarrow as pa

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

        header, sep = _csv_dialect(stream)
        read = pcsv.ReadOptions(autogenerate_column_names=not header, **({"block_size": sample} if sample else {}))
        parse = pcsv.ParseOptions(delimiter=sep)
        convert = pcsv.ConvertOptions(column_types={c: arrow_type(t) for c, t in columns.items()})
        if sample:  # the first block only: the header and the rows in it
            reader = pcsv.open_csv(local, read_options=read, parse_options=parse, convert_options=convert)
            reader.read_next_batch()
            return reader.schema, None
        table = pcsv.read_csv(local, read_options=read, parse_options=parse, convert_options=convert)
        return table.schema, table.num_rows
    import pyarrow.json as pjson

    explicit = pa.schema([(c, arrow_type(t)) for c, t in columns.items()]) if columns else None
    opts = pjson.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="ignore")
    if sample:  # JSON lines: the whole lines of the first block
        with open(local, "rb") as fh:
            head = fh.read(sample)
        table = pjson.read_json(pa.BufferReader(head[: head.rfind(b"\n") + 1]), parse_options=opts)
        return table.schema, None
    table = pjson.read_json(local, parse_options=opts)
    return table.schema, table.num_rows


def _csv_dialect(stream: Stream) -> tuple[bool, str]:
    opts = stream.read_options()
    return str(opts.get("header", "true")).lower() == "true", opts.get("sep", opts.get("delimiter", ","))


_CONVERSION = re.compile(r"In CSV column #(\d+): CSV conversion error to (\w+): invalid value '(.*)'")


def _conversion_problem(message: str, local: str, stream: Stream, columns: Mapping[str, str]) -> str | None:
    """A CSV value that does not convert to its column's type, said as a wrong type
    (``column amount has 'abc', expected DOUBLE``); None for any other error."""
    m = _CONVERSION.search(message)
    if not m or stream.format != "csv":
        return None
    import csv

    index, value = int(m.group(1)), m.group(3)
    header, sep = _csv_dialect(stream)
    names = []
    if header:
        with open(local, newline="", encoding="utf-8", errors="replace") as fh:
            names = next(csv.reader(fh, delimiter=sep), [])
    name = names[index] if index < len(names) else f"f{index}"
    return f"column {name} has {value[:60]!r}, expected {columns.get(name, m.group(2).upper())}"


def _arrow_ok(spark_type: str, arrow_type_) -> bool:
    """A file's column type is the expected Spark type (strings in any arrow string type)."""
    import pyarrow as pa

    want = spark_type.upper().replace(" ", "")
    if want == "STRING":
        return pa.types.is_string(arrow_type_) or pa.types.is_large_string(arrow_type_) or \
            str(arrow_type_) == "string_view"
    got = spark_type_of(arrow_type_).replace(" ", "")
    return got == {"INTEGER": "INT", "LONG": "BIGINT", "TIMESTAMP_NTZ": "TIMESTAMP"}.get(want, want)


def unit_of(path: str, stream: Stream) -> str:
    """The unit a file belongs to: its directory's name (directory units) or its own name."""
    p = path.rstrip("/")
    return os.path.basename(os.path.dirname(p)) if stream.unit == "dir" else os.path.basename(p)


def bad_files_message(bad: Sequence[Mapping], done: str = "") -> str:
    """One line naming every bad file and its problem (each ``reason`` starts with its file)."""
    what = f"{len(bad)} bad input file{'s' if len(bad) != 1 else ''}"
    return f"{what}{' ' + done if done else ''}: " + "; ".join(b["reason"] for b in bad)


def _columns(streams: Sequence[Stream], files: Sequence[str], candidates: Sequence[str],
             record, strict: bool) -> dict[str, dict[str, str]]:
    """Each stream's columns (:func:`expected_columns`) for the streams of ``files``, taken from
    ``candidates`` then ``files``. Not ``strict``: a stream none of whose files can be read,
    and that declares no columns, is checked for readability alone, and a stream of remote
    files is left out."""
    names = dict.fromkeys(stream_of(f, streams).name for f in files)
    out = {}
    for name in names:
        stream = next(s for s in streams if s.name == name)
        mine = dict.fromkeys(f for f in [*candidates, *files] if stream_of(f, streams).name == name)
        if not strict and not any(is_local(f) for f in mine):
            continue  # remote files are not inspected when claimed
        try:
            out[name] = expected_columns(stream, list(mine), record)
        except ConfigError:
            if strict:
                raise
            out[name] = {}
    return out


def _check_all(files: Sequence[str], streams: Sequence[Stream], columns: Mapping[str, Mapping[str, str]],
               sample: int | None = None) -> tuple[list[FileInfo], list[dict]]:
    """(infos of the good files, one entry per bad file: unit, file, stream and reason).
    With ``sample`` (a claim's check) a file whose columns the check cannot read is left
    to the batch, which says what to fix in the schema."""
    infos, bad = [], []
    for f in files:
        stream = stream_of(f, streams)
        try:
            infos.append(check_input_file(f, stream, columns.get(stream.name), sample))
        except DataError as exc:
            bad.append({"unit": unit_of(f, stream), "file": f, "stream": stream.name, "reason": str(exc)})
        except ConfigError as exc:
            if not sample:
                raise
            log.warning("%s: not checked when claimed: %s", f, exc)
    return infos, bad


def check_claim(ws, streams: Sequence[Stream], units: Sequence) -> dict:
    """What a claim of ``units`` (:class:`~airflow_iqp.streams.Unit`) records of their files' check,
    made before any Spark job: ``bad`` (every bad file, with its problem), ``quarantined``
    (the units taken out, those of a stream with ``on_bad_unit="quarantine"``, each with
    all its ``files``), ``checked`` (file -> rows of the files checked whole). Keys with
    nothing to say are left out. The claim keeps every unit: a quarantined one is claimed
    once, and no later batch or window takes it."""
    by_unit = {u.name: [f for s in streams for f in u.files.get(s.name, ())] for u in units}
    files = [f for fs in by_unit.values() for f in fs]
    columns = _columns(streams, files, ws.claimed_files(), ws.store.query(ws.query_id), strict=False)
    infos, bad = _check_all(files, streams, columns, SAMPLE_BYTES)
    out: dict = {}
    checked = {i.path: i.rows for i in infos if i.rows is not None}
    if checked:
        out["checked"] = checked
    if bad:
        modes = {s.name: s.on_bad_unit for s in streams}
        out["bad"] = bad
        quarantined = {}
        for b in bad:
            if modes[b["stream"]] == "quarantine":
                quarantined.setdefault(b["unit"], {"unit": b["unit"], "file": b["file"], "reason": b["reason"],
                                                   "files": by_unit.get(b["unit"], [b["file"]])})
        if quarantined:
            out["quarantined"] = list(quarantined.values())
        done = "quarantined, the batch goes on without them" if len(quarantined) == len({b["unit"] for b in bad}) \
            else "found; the batch will fail (on_bad_unit='fail')"
        log.warning("%s/%s: %s", ws.query_id, ws.window_id, bad_files_message(bad, done))
    return out


def kept_units(claim: Mapping) -> list[str]:
    """The units of a claim the batch reads: all but the quarantined ones."""
    out = {q["unit"] for q in claim.get("quarantined", [])}
    return [u for u in claim.get("units", []) if u not in out]


def files_to_read(claim: Mapping) -> list[str]:
    """The files of a claim the batch reads: all but its quarantined units'."""
    out = {f for q in claim.get("quarantined", []) for f in q.get("files", [q["file"]])}
    return [f for f in claim.get("files", []) if f not in out]


def still_bad(claim: Mapping, streams: Sequence[Stream], record=None) -> list[dict]:
    """The bad files of a claim that were not quarantined (``on_bad_unit="fail"``) and are
    bad still, checked again as at the claim: a rerun after they were replaced goes on."""
    quarantined = {q["unit"] for q in claim.get("quarantined", [])}
    files = [b["file"] for b in claim.get("bad", []) if b["unit"] not in quarantined]
    if not files:
        return []
    good = [f for f in claim.get("files", []) if f not in files]
    return _check_all(files, streams, _columns(streams, files, good, record, strict=False), SAMPLE_BYTES)[1]


@dataclass(frozen=True)
class Inspection:
    """A batch's files, checked: the good ones with their sizes, and the quarantined units."""

    infos: list[FileInfo]
    quarantined: list[dict]
    columns: dict[str, dict[str, str]]  #: stream -> the columns its files were checked against

    @property
    def files(self) -> list[str]:
        return [i.path for i in self.infos]

    @property
    def rows(self) -> int | None:
        """The good files' rows; None if a file's are unknown (remote files are not read whole)."""
        rows = [i.rows for i in self.infos]
        return None if None in rows else sum(rows)


def inspect_files(files: Sequence[str], saved, record=None,
                  claimed: Sequence[str] = (), checked: Mapping[str, int] | None = None) -> Inspection:
    """Check a batch's files (those of the streams its query reads). Bad files fail the batch
    (``on_bad_unit="fail"``: one :class:`DataError` whose first line names every one of them)
    or take their whole units out of the batch (``"quarantine"``: each such unit with the
    file and the reason).

    ``claimed``: the files the window's batches claimed, in batch order. A stream whose
    columns are neither declared nor recorded yet takes them from the first readable of
    those, then of the batch's own (:func:`expected_columns`): whichever batch runs first,
    the window's first good unit sets them, not a bad unit that happens to lead a batch.
    ``checked``: file -> rows of the files the claim checked whole; they are not read again.
    """
    read = [f for f in files if stream_of(f, saved.streams).name in saved.query.streams]
    columns = _columns(saved.streams, read, claimed, record, strict=True)
    checked = checked or {}
    done = [FileInfo(f, stream_of(f, saved.streams).name, checked[f], os.path.getsize(local_path(f)))
            for f in read if f in checked and os.path.isfile(local_path(f))]
    infos, bad = _check_all([f for f in read if f not in {i.path for i in done}], saved.streams, columns)
    fail = [b for b in bad if saved.stream(b["stream"]).on_bad_unit == "fail"]
    if fail:
        raise DataError(bad_files_message(fail))
    out = {}
    for b in bad:
        out.setdefault(b["unit"], {"unit": b["unit"], "file": b["file"], "reason": b["reason"]})
    order = {f: i for i, f in enumerate(read)}
    good = sorted((i for i in [*done, *infos] if unit_of(i.path, stream_of(i.path, saved.streams)) not in out),
                  key=lambda i: order[i.path])
    return Inspection(good, list(out.values()), columns)
