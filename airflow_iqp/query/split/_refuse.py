"""The checks that refuse a query the decomposer cannot split exactly, each with one line
that names the construct and what to do instead."""

from __future__ import annotations

from typing import Mapping, Sequence

import sqlglot.expressions as exp
from sqlglot.errors import OptimizeError

from airflow_iqp.query.split._common import DIALECT, SINGLE, QueryRefused, short, to_sql
from airflow_iqp.query.split._rewrite import is_agg
from airflow_iqp.query.split._tree import sources

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


def find_aggregation(tree: exp.Expression, streams: Sequence[str]) -> exp.Select:
    """The one SELECT that aggregates the streams: the top query, or the subquery the
    outer queries read from. An outer query may join static tables to it (the final step
    reads them too), but no stream: the final step has only the aggregation's merged rows."""
    stream_set = set(streams)
    node = tree
    while True:
        if isinstance(node, exp.SetOperation):
            raise QueryRefused(f"{node.key.upper()} of queries: split each part into its own query, {SINGLE}")
        if not isinstance(node, exp.Select):
            raise QueryRefused(f"expected a SELECT, got {short(node)}")
        if _aggregates(node):
            return node
        inner = _stream_source(node, stream_set)
        if isinstance(inner, exp.Subquery):
            node = inner.this
            continue
        if any(isinstance(n, exp.Window) for n in _own_nodes(node)):
            window = next(n for n in _own_nodes(node) if isinstance(n, exp.Window))
            raise QueryRefused(f"window function over the stream ({short(window)}): it needs every row of the "
                               f"window at once; aggregate first and apply it over the aggregate, {SINGLE}")
        if inner is None and _reads(node, stream_set):
            raise QueryRefused(f"the stream is read only in a WHERE or SELECT subquery ({short(node)}): an "
                               f"aggregation is split in FROM or a join; put it there, {SINGLE}")
        raise QueryRefused(f"no aggregation (no GROUP BY and no aggregate function): batches of a plain "
                           f"SELECT are not merged into one result; aggregate the rows, {SINGLE}")


def _stream_source(select: exp.Select, streams: set[str]) -> exp.Expression | None:
    """The FROM or JOIN source of ``select`` that reads a stream: at most one may, beside
    any number that read only static tables (None: none reads a stream)."""
    reading = [s for s in sources(select) if _reads(s, streams)]
    aggregated = [s for s in reading if any(_aggregates(n) for n in s.find_all(exp.Select))]
    if len(reading) <= 1 or not aggregated:  # none, one, or raw rows only (refused as no aggregation)
        return reading[0] if reading else None
    raw = [s for s in reading if not any(s is a for a in aggregated)]
    if raw:
        raise QueryRefused(f"the rows of stream {_streams_in(raw[0], streams)} are joined above the aggregation "
                           f"({short(raw[0])}): the final step has only the aggregation's merged rows, not the "
                           f"stream's; join it inside the aggregation (or declare it static if its rows do not "
                           f"change), {SINGLE}")
    raise QueryRefused(f"a stream joined to another stream above the aggregation (an aggregation of "
                       f"{_streams_in(aggregated[0], streams)} joined to one of {_streams_in(aggregated[1], streams)}"
                       f"): a query splits one aggregation of its streams; split each into its own query, {SINGLE}")


def _streams_in(node: exp.Expression, streams: set[str]) -> str:
    return ", ".join(sorted({t.name.lower() for t in node.find_all(exp.Table)} & streams))


def _own_nodes(select: exp.Select):
    """Nodes of a SELECT's own projections, HAVING, QUALIFY and ORDER BY (not its subqueries)."""
    parts = list(select.expressions) + [select.args.get(k) for k in ("having", "qualify", "order")]
    for part in parts:
        if part is None:
            continue
        for node in part.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Select)) and n is not part):
            yield node


def _aggregates(select: exp.Select) -> bool:
    if select.args.get("group"):
        return True
    return any(is_agg(n) and not isinstance(n.parent, exp.Window) for n in _own_nodes(select))


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


def check_below(agg: exp.Select, streams: Sequence[str]) -> None:
    """What runs per batch may not aggregate or window over a stream in a subquery."""
    stream_set = set(streams)
    for part in _below_parts(agg):
        for node in part.walk():
            if isinstance(node, exp.Window):
                raise QueryRefused(f"window function over the stream ({short(node)}): it needs every row of the "
                                   f"window at once, {SINGLE}")
            if isinstance(node, exp.Select) and _aggregates(node) and _reads(node, stream_set):
                raise QueryRefused(f"an aggregate nested in an aggregate: the subquery {short(node)} aggregates "
                                   f"a stream below the query's own aggregation, {SINGLE}")


def _below_parts(agg: exp.Select):
    for key in ("from_", "from", "where"):
        if agg.args.get(key) is not None:
            yield agg.args[key]
    yield from agg.args.get("joins") or ()


def _reads(node: exp.Expression, names: set[str]) -> bool:
    return any(t.name.lower() in names for t in node.find_all(exp.Table))


def check_above(tree: exp.Expression, agg: exp.Select, streams: Sequence[str]) -> None:
    """The final step sees the aggregated rows and the static tables: nothing above the
    aggregation reads a stream."""
    names = set(streams)
    for node in tree.walk(prune=lambda n: n is agg):
        if node is not agg and isinstance(node, exp.Table) and node.name.lower() in names:
            raise QueryRefused(f"stream {node.name} is read above the aggregation (in the outer query): the final "
                               f"step has only the aggregation's merged rows, not the stream's; read it inside the "
                               f"aggregation, {SINGLE}")
    # Subqueries in the aggregation's own SELECT list, HAVING and ORDER BY are refused by
    # rewrite_above: they would run once per batch, not over the window.
