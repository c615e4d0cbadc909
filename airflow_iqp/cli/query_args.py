"""The options that name a user's query and its input, shared by ``explain`` and ``run-window``:
``--sql SQL | --sql-file F``, ``--stream NAME=DIR``, ``--static NAME=PATH``, ``--format``.

A table's format is ``--format`` when given, else its files': their extension (``.parquet``,
``.csv``, ``.json``, ``.orc``), or for files without one their first bytes (parquet and orc
files start with their magic, a JSON lines file with ``{``, anything else is read as CSV)."""

from __future__ import annotations

from pathlib import Path

from airflow_iqp.cli import read_input
from airflow_iqp.errors import ConfigError
from airflow_iqp.streams import FORMATS, is_hidden

#: Where a refusal tells a command-line user to run the query as one batch.
ONE_BATCH_HERE = "--allow-single-batch here, cut=OneBatch() in a DAG"
_EXTENSIONS = {ext: fmt for fmt, ext in FORMATS.items()}


def add_query_args(p, *, required: bool) -> None:
    sql = p.add_mutually_exclusive_group(required=required)
    sql.add_argument("--sql", help="the query: one aggregate SELECT in Spark SQL")
    sql.add_argument("--sql-file", type=Path, metavar="F", help="a file holding the query")
    p.add_argument("--stream", action="append", default=[], metavar="NAME=DIR",
                   help="a stream table and the directory of the window's units: one file per unit, in name "
                        "order (streams sharing a DIR: each unit a directory with one NAME.<format> per stream)")
    p.add_argument("--static", dest="static_table", action="append", default=[], metavar="NAME=PATH",
                   help="a static table and its file or directory of files")
    p.add_argument("--format", choices=sorted(FORMATS),
                   help="the streams' file format (default: each stream's files tell, by extension or content)")
    p.add_argument("--name", help="the query's id (names its state directory; default 'query')")
    p.add_argument("--allow-single-batch", action="store_true",
                   help="run a query that cannot be split as one batch after the window's end")


def pairs(items: list[str], option: str) -> dict[str, str]:
    """``NAME=VALUE`` options as a dict; a clear error for one without ``=``."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ConfigError(f"expected NAME=VALUE, got {item!r}", option)
        if name in out:
            raise ConfigError(f"{name} is given twice", option)
        out[name] = value
    return out


def sniff_format(files: list[Path], where: str, option: str) -> tuple[str, bool]:
    """(format, read from the content) of a table's files: their extension, or for files
    without one, the first one's first bytes."""
    found = sorted({_EXTENSIONS[f.suffix.lower()] for f in files if f.suffix.lower() in _EXTENSIONS})
    if len(found) > 1:
        raise ConfigError(f"{where} holds {' and '.join(found)} files: keep one format per table, or give "
                          f"--format", option)
    if found:
        return found[0], False
    bare = [f for f in files if not f.suffix]
    if not bare:
        raise ConfigError(f"{where} holds no {', '.join(FORMATS.values())} file, nor one without an extension "
                          f"to read", option)
    try:
        with open(bare[0], "rb") as f:
            head = f.read(512)
    except OSError as exc:
        raise ConfigError(f"cannot read {bare[0]}: {exc.strerror}", option) from None
    if head.startswith(b"PAR1"):
        return "parquet", True
    if head.startswith(b"ORC"):
        return "orc", True
    return ("json" if head.lstrip()[:1] == b"{" else "csv"), True


def _files(path: Path, stem: str | None = None) -> list[Path]:
    """The visible files of a directory (of its sub-directories named ``stem.*`` or ``stem``
    with ``stem``), or the file itself."""
    if not path.is_dir():
        return [path]
    inside = sorted(p for p in path.iterdir() if not is_hidden(p.name))
    if stem is None:
        return [p for p in inside if p.is_file()]
    return [f for d in inside if d.is_dir() for f in sorted(d.iterdir())
            if f.is_file() and f.name.split(".")[0] == stem]


def saved_from_args(args, *, check_files: bool):
    """The split query with its streams and static tables (``Saved``); with ``check_files``
    (streams given), every table and column is checked against the files' schemas."""
    return read_query_args(args, check_files=check_files)[0]


def read_query_args(args, *, check_files: bool):
    """(``Saved``, the tables' schemas: table -> column -> Spark type, or None without files)."""
    from airflow_iqp.query import decompose
    from airflow_iqp.query.store import Saved
    from airflow_iqp.landing import list_units
    from airflow_iqp.streams import Stream, file_schema, landing_of

    sql = args.sql if args.sql is not None else read_input(args.sql_file, "--sql-file")
    dirs = pairs(args.stream, "--stream")
    static = pairs(args.static_table, "--static")
    shared = len(dirs) > 1 and len(set(dirs.values())) == 1
    for name, path in static.items():
        if not Path(path).exists():
            raise ConfigError(f"{path} does not exist (static table {name})", "--static")
    streams = []
    for name, d in dirs.items():
        fmt, by_content = args.format, False
        if fmt is None and check_files and Path(d).is_dir():
            fmt, by_content = sniff_format(_files(Path(d), name if shared else None), f"{d} (stream {name})",
                                           "--stream")
        streams.append(Stream(name, path=str(Path(d).absolute()), format=fmt or "parquet",
                              unit="dir" if shared else "file", pattern=(name if shared else "*") if by_content
                              else None))
    schemas = None
    if streams and check_files:
        schemas = {}
        for s in streams:
            if not Path(s.path).is_dir():
                raise ConfigError(f"{s.path} is not a directory (stream {s.name})", "--stream")
            units = list_units(s.path, (s,))
            if not units:
                raise ConfigError(f"{s.path} holds no unit of stream {s.name} (files matching {s.file_pattern})"
                                  if s.unit == "file" else f"{s.path} holds no unit directory with "
                                  f"{s.name}{s.ext}", "--stream")
            first = units[0].files[s.name][0]
            schemas[s.name] = file_schema(first, s.format)
        for name, path in static.items():
            schemas[name] = file_schema(path, sniff_format(_files(Path(path)), f"{path} (static table {name})",
                                                           "--static")[0])
    query = decompose(sql, id=args.name or "query", streams=[s.name for s in streams] if streams else None,
                      static=list(static) if streams else None, schemas=schemas,
                      allow_single_batch=args.allow_single_batch, one_batch=ONE_BATCH_HERE)
    read = tuple(s for s in streams if s.name in query.streams)
    if read:
        landing_of(read)
    return Saved(query, read, static or None), schemas
