"""The checks of a whole query before it is split: its tables, its columns, and no
non-deterministic function. Each refuses with one line that names the construct and what
to do instead."""

from __future__ import annotations

from typing import Mapping, Sequence

import sqlglot.expressions as exp
from sqlglot.errors import OptimizeError

from airflow_iqp.query.split._common import DIALECT, SINGLE, QueryRefused, short, to_sql

_NONDETERMINISTIC = (exp.Rand, exp.Randn, exp.Uuid, exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime,
                     exp.CurrentDatetime)
_NONDETERMINISTIC_NAMES = {"shuffle", "monotonically_increasing_id", "spark_partition_id", "input_file_name",
                           "input_file_block_start", "input_file_block_length", "now", "uniform", "randstr",
                           "current_timestamp", "localtimestamp", "unix_timestamp"}


def refuse_nondeterminism(tree: exp.Expression) -> None:
    for node in tree.walk():
        name = node.name.lower() if isinstance(node, exp.Anonymous) else None
        if isinstance(node, _NONDETERMINISTIC) or (name in _NONDETERMINISTIC_NAMES):
            raise QueryRefused(f"non-deterministic function {short(node)}: each batch would see a different "
                               f"value; compute it outside the query (e.g. a literal from the DAG), {SINGLE}")


def check_tables(tree: exp.Expression, streams: Sequence[str] | None, static: Sequence[str] | None,
                 ctes: set[str]) -> tuple[list[str], list[str]]:
    """The streams and static tables the query reads, in order of appearance; an unknown one is refused."""
    seen: dict[str, None] = {}
    for table in tree.find_all(exp.Table):
        if not table.name:
            continue
        seen[table.name.lower() if not table.args.get("db") else to_sql(table)] = None
    known_streams = None if streams is None else [s.lower() for s in streams]
    known_static = [s.lower() for s in static or ()]
    used_streams, used_static = [], []
    for name in seen:
        if name in ctes:
            continue
        if known_streams is None or name in known_streams:
            if name not in known_static:
                used_streams.append(name)
                continue
        if name in known_static:
            used_static.append(name)
            continue
        raise QueryRefused(f"unknown table {name}: the query's streams are {', '.join(known_streams) or 'none'} "
                           f"and its static tables {', '.join(known_static) or 'none'}; declare it in streams= "
                           f"or static=")
    if not used_streams:
        raise QueryRefused("the query reads no stream, only static tables: there is nothing to cut into batches")
    return used_streams, used_static


def check_columns(tree: exp.Expression, schemas: Mapping[str, Mapping[str, str]]) -> None:
    """Every column resolves against the tables' schemas (sqlglot's qualify)."""
    from sqlglot.optimizer.qualify import qualify

    try:
        qualify(tree.copy(), schema={t: dict(cols) for t, cols in schemas.items()}, dialect=DIALECT,
                validate_qualify_columns=True, quote_identifiers=False, identify=False)
    except OptimizeError as exc:
        msg = str(exc).splitlines()[0]
        if "could not be resolved" in msg:
            col = msg.split("'")[1] if "'" in msg else msg
            raise QueryRefused(f"unknown column {col}: no table of the query has it (or more than one has it "
                               f"and it is not qualified); tables: "
                               + "; ".join(f"{t}({', '.join(c)})" for t, c in schemas.items())) from None
        raise QueryRefused(f"cannot resolve the query's columns: {msg}") from None
