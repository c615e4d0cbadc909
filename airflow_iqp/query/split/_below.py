"""What may run below an aggregation, per batch: each rule refuses a construct whose result
over one batch's rows, merged with the other batches', is not its result over the window's.

A batch sees its units' rows of each stream and every row of each static table. Below the
aggregation, each row it aggregates must come from exactly one stream row (or one unit's
rows of streams that arrive together), so that the window's rows are the batches' rows
added up: projections, filters, UNION ALL and joins with static tables keep that; a
DISTINCT, a LIMIT, a set operation that removes rows, a stream joined to itself, and a static
table's rows kept by an outer join whatever the stream holds do not.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from airflow_iqp.query.split._common import SINGLE, QueryRefused, short
from airflow_iqp.query.split._tree import below_parts, names_of, reads, sources, stream_tables


def check_below(agg: exp.Select, streams: set[str]) -> None:
    """Refuse what, below ``agg``'s aggregation, would not add up over batches."""
    for part in below_parts(agg):
        for node in part.walk():
            if isinstance(node, exp.Window):
                raise QueryRefused(f"window function over the stream ({short(node)}): it needs every row of the "
                                   f"window at once, {SINGLE}")
            if isinstance(node, exp.Select) and reads(node, streams):
                _check_self_join(node, streams)
    _check_self_join(agg, streams)
    if not _stream_rows(agg, streams, top=True):
        tables = ", ".join(s.alias_or_name for s in sources(agg)) or "no table"
        raise QueryRefused(f"the aggregated rows come from static tables only ({tables}); the stream "
                           f"({names_of(agg, streams)}) is read only in a subquery: every batch would aggregate "
                           f"those rows again; aggregate the stream's rows, {SINGLE}")


def _check_rows_kept(select: exp.Expression, streams: set[str]) -> None:
    """The rows a subquery below the aggregation passes on are each stream row's own."""
    if not reads(select, streams):
        return
    if isinstance(select, exp.SetOperation):
        if not isinstance(select, exp.Union) or select.args.get("distinct"):
            kind = select.key.upper() + ("" if not isinstance(select, exp.Union) else " (DISTINCT)")
            raise QueryRefused(f"{kind} over the stream's rows below the aggregation ({short(select)}): it "
                               f"removes rows that another batch's rows would match; use UNION ALL, {SINGLE}")
        return
    if select.args.get("distinct"):
        raise QueryRefused(f"SELECT DISTINCT over the stream's rows below the aggregation ({short(select)}): a row "
                           f"seen in two batches would be kept twice; aggregate with GROUP BY instead, {SINGLE}")
    for key in ("limit", "offset", "fetch"):
        if select.args.get(key) is not None:
            raise QueryRefused(f"{key.upper()} over the stream's rows below the aggregation ({short(select)}): each "
                               f"batch would keep its own first rows, not the window's, {SINGLE}")


def _check_self_join(select: exp.Select, streams: set[str]) -> None:
    """A stream read twice by one SELECT, in two of its sources or in a source and a subquery
    of its conditions, meets only the rows of its own batch, not the window's."""
    seen: dict[str, str] = {}
    for source in sources(select):
        for name in {t.name.lower() for t in stream_tables(source, streams)}:
            if name in seen:
                raise QueryRefused(f"stream {name} is joined to itself below the aggregation: rows of different "
                                   f"batches would never meet; aggregate each side and join the aggregations, "
                                   f"{SINGLE}")
            seen[name] = source.alias_or_name
    conditions = [select.args.get("where"), *((j.args.get("on") for j in select.args.get("joins") or ()))]
    for cond in conditions:
        for table in stream_tables(cond, streams) if cond is not None else ():
            if table.name.lower() in seen:
                raise QueryRefused(f"stream {table.name.lower()} is read again in a subquery of a condition below "
                                   f"the aggregation ({short(cond)}): a batch's rows would meet only its own batch's "
                                   f"rows, not the window's; aggregate the subquery (a filter on grouping keys "
                                   f"runs after the merge), {SINGLE}")


def _stream_rows(select: exp.Expression, streams: set[str], top: bool = False) -> bool:
    """Whether each row of ``select``'s FROM clause comes from a stream's row (not from a
    static table alone). Refuses, in the subqueries the rows come through, what keeps a row
    once per batch (an outer join that keeps a static table's unmatched rows; a DISTINCT,
    a LIMIT, a set operation that removes rows)."""
    if not top:
        _check_rows_kept(select, streams)
    if isinstance(select, exp.SetOperation):
        branches = [_stream_rows(select.this, streams), _stream_rows(select.expression, streams)]
        if any(branches) and not all(branches):
            raise QueryRefused(f"a set operation below the aggregation adds rows of static tables to the stream's "
                               f"({short(select)}): every batch would add them again; aggregate each part in its "
                               f"own subquery, {SINGLE}")
        return all(branches)
    if not isinstance(select, exp.Select):
        return False
    found = sources(select)
    if not found:
        return False
    left = _source_rows(found[0], streams)
    for join in select.args.get("joins") or ():
        right = _source_rows(join.this, streams)
        if join.kind in ("SEMI", "ANTI"):
            continue
        kept = {"LEFT": not left and right, "RIGHT": left and not right, "FULL": left != right}.get(join.side)
        if kept:
            static = join.this if not right else found[0]
            raise QueryRefused(f"an outer join below the aggregation keeps the rows of static table {short(static)} "
                               f"that match no stream row ({join.side} JOIN {short(join.this)}): every batch would "
                               f"keep them again; join the static table to the stream's side, {SINGLE}")
        left = left or right
    return left


def _source_rows(source: exp.Expression, streams: set[str]) -> bool:
    if isinstance(source, exp.Table):
        return source.name.lower() in streams and not source.args.get("db")
    if isinstance(source, exp.Subquery):
        return _stream_rows(source.this, streams)
    return False
