"""The options that name a user's query and its input, shared by ``explain`` and ``run-window``:
``--sql SQL | --sql-file F``, ``--stream NAME=DIR``, ``--static NAME=PATH``, ``--format``."""

from __future__ import annotations

from pathlib import Path

from airflow_iqp.cli import read_input
from airflow_iqp.errors import ConfigError
from airflow_iqp.streams import FORMATS


def add_query_args(p, *, required: bool) -> None:
    sql = p.add_mutually_exclusive_group(required=required)
    sql.add_argument("--sql", help="the query: one aggregate SELECT in Spark SQL")
    sql.add_argument("--sql-file", type=Path, metavar="F", help="a file holding the query")
    p.add_argument("--stream", action="append", default=[], metavar="NAME=DIR",
                   help="a stream table and the directory of the window's units: one file per unit, in name "
                        "order (streams sharing a DIR: each unit a directory with one NAME.<format> per stream)")
    p.add_argument("--static", dest="static_table", action="append", default=[], metavar="NAME=PATH",
                   help="a static table and its file or directory of files")
    p.add_argument("--format", choices=sorted(FORMATS), default="parquet", help="the streams' file format")
    p.add_argument("--name", default="query", help="the query's id (names its state directory; default 'query')")
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


def saved_from_args(args, *, check_files: bool):
    """The split query with its streams and static tables (``Saved``); with ``check_files``
    (streams given), every table and column is checked against the files' schemas."""
    from airflow_iqp.query import decompose
    from airflow_iqp.query.store import Saved
    from airflow_iqp.streams import Stream, file_schema, landing_of, list_units

    sql = args.sql if args.sql is not None else read_input(args.sql_file, "--sql-file")
    dirs = pairs(args.stream, "--stream")
    static = pairs(args.static_table, "--static")
    shared = len(dirs) > 1 and len(set(dirs.values())) == 1
    streams = tuple(Stream(name, path=str(Path(d).absolute()), format=args.format, unit="dir" if shared else "file")
                    for name, d in dirs.items())
    for name, path in static.items():
        if not Path(path).exists():
            raise ConfigError(f"{path} does not exist (static table {name})", "--static")
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
            fmt = next((f for f in FORMATS if path.endswith("." + f)), "parquet")
            schemas[name] = file_schema(path, fmt)
    query = decompose(sql, id=args.name, streams=[s.name for s in streams] if streams else None,
                      static=list(static) if streams else None, schemas=schemas,
                      allow_single_batch=args.allow_single_batch)
    read = tuple(s for s in streams if s.name in query.streams)
    if read:
        landing_of(read)
    return Saved(query, read, static or None)
