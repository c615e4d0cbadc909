"""The aggregations of a query: where each stream's rows are aggregated.

Each stream a query reads is aggregated by the first SELECT above it that aggregates, read
through that SELECT's FROM, joins or WHERE: that SELECT is one aggregation of the query,
split into a partial per batch and a merge. Everything above the aggregations runs in the
final step, over their merged rows and the static tables: outer queries, joins of
aggregations to each other and to static tables, scalar and IN subqueries over them,
aggregates over their rows. A stream's rows read where no aggregation is above them, or
above an aggregation, are refused: the final step has no stream rows.
"""

from __future__ import annotations

import sqlglot.expressions as exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import build_scope

from airflow_iqp.query.split._below import check_below
from airflow_iqp.query.split._common import SINGLE, QueryRefused, short, to_sql
from airflow_iqp.query.split._grouping import group_keys
from airflow_iqp.query.split._rewrite import norm
from airflow_iqp.query.split._tree import (
    BELOW, aggregates, clause_of, depth, names_of, own_nodes, reads, sources, stream_tables,
)


def lift_key_filters(tree: exp.Expression, streams: set[str]) -> exp.Expression:
    """Move each WHERE condition that reads an aggregation of a stream and, outside its
    subqueries, only the grouping keys of a plain GROUP BY, to HAVING: it keeps or drops
    whole groups, so after the merge it drops the same rows (``WHERE k IN (SELECT k ...
    GROUP BY k ...)``). Under ROLLUP, CUBE or GROUPING SETS it would not: it stays."""
    for select in list(tree.find_all(exp.Select)):
        where, group = select.args.get("where"), select.args.get("group")
        if where is None or group is None or group.args.get("rollup") or group.args.get("cube") or any(
                isinstance(g, (exp.Rollup, exp.Cube, exp.GroupingSets)) for g in group.expressions):
            continue
        try:
            keys = {norm(k) for k in group_keys(select)[0]}
        except QueryRefused:
            continue  # refused again, with the same words, where the aggregation is split
        conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
        lift = [c for c in conjuncts if _aggregates(c, streams) and _on_keys(c, keys)]
        if not lift:
            continue
        keep = [c for c in conjuncts if not any(c is x for x in lift)]
        select.set("where", exp.Where(this=exp.and_(*keep)) if keep else None)
        having = select.args.get("having")
        select.set("having", exp.Having(this=exp.and_(*([having.this] if having else []), *lift)))
    return tree


def _aggregates(node: exp.Expression, streams: set[str]) -> bool:
    return any(aggregates(s) and reads(s, streams) for s in node.find_all(exp.Select))


def _on_keys(node: exp.Expression, keys: set[str]) -> bool:
    if isinstance(node, (exp.Subquery, exp.Select)):
        return True
    if norm(node) in keys:
        return True
    if isinstance(node, exp.Column):
        return False
    return all(_on_keys(child, keys) for child in node.iter_expressions())


def find_aggregations(tree: exp.Expression, streams: set[str]) -> list[exp.Select]:
    """Every aggregation of a stream in ``tree``, checked, the innermost first."""
    found: dict[int, exp.Select] = {}
    for table in stream_tables(tree, streams):
        owner = _owner(table, streams)
        found[id(owner)] = owner
    aggs = sorted(found.values(), key=depth, reverse=True)
    for agg in aggs:
        for other in aggs:
            if other is not agg and _is_below(other, agg):
                _refuse_nested(other, agg, streams)
        check_below(agg, streams)
        _refuse_correlated(agg, streams)
    return aggs


def _is_below(node: exp.Expression, agg: exp.Select) -> bool:
    ancestor = node.parent
    while ancestor is not None and ancestor is not agg:
        ancestor = ancestor.parent
    return ancestor is agg and clause_of(node, agg) in BELOW


def _owner(table: exp.Table, streams: set[str]) -> exp.Select:
    """The aggregation of ``table``'s rows: the first SELECT above it that aggregates them."""
    node, passed = table, []
    while node.parent is not None:
        parent = node.parent
        if isinstance(parent, exp.Select):
            if aggregates(parent):
                if node.arg_key in BELOW:
                    return parent
                raise QueryRefused(f"stream {table.name} is read in a subquery of an aggregation's "
                                   f"{_clause(node.arg_key)} ({short(node)}): it would run over one batch's rows, "
                                   f"not the window's; aggregate the stream in a subquery of its own, {SINGLE}")
            passed.append((parent, node.arg_key))
        node = parent
    raise _no_aggregation(table, passed, streams)


def _clause(key: str) -> str:
    return {"expressions": "SELECT list", "order": "ORDER BY"}.get(key, key.upper())


def _no_aggregation(table: exp.Table, passed: list, streams: set[str]) -> QueryRefused:
    """Why the rows of ``table`` reach the result without an aggregation above them."""
    name = table.name.lower()
    for select, key in passed:
        other = [s for s in sources(select) if any(aggregates(n) and reads(n, streams) for n in s.find_all(exp.Select))]
        if other and key in BELOW[:3]:
            joined = next(s for s in sources(select) if any(t is table for t in s.find_all(exp.Table)))
            return QueryRefused(f"the rows of stream {name} are joined above the aggregation ({short(joined)}): "
                                f"the final step has only the aggregation's merged rows, not the stream's; join "
                                f"it inside the aggregation (or declare it static if its rows do not change), "
                                f"{SINGLE}")
        if other:
            return QueryRefused(f"stream {name} is read above the aggregation (in the outer query): the final step "
                                f"has only the aggregation's merged rows, not the stream's; read it inside the "
                                f"aggregation, {SINGLE}")
    for select, _ in passed:
        window = next((n for n in own_nodes(select) if isinstance(n, exp.Window)), None)
        if window is not None:
            return QueryRefused(f"window function over the stream's rows with no aggregation below it "
                                f"({short(window)}): it needs every row of the window at once; aggregate first "
                                f"and apply it over the aggregate, {SINGLE}")
        if select.args.get("distinct"):
            return QueryRefused(f"SELECT DISTINCT over the stream's rows with no aggregation ({short(select)}): "
                                f"write it as GROUP BY over the same columns, which splits, {SINGLE}")
    setop = table.find_ancestor(exp.SetOperation)
    if setop is not None:
        return QueryRefused(f"{setop.key.upper()} of queries that read the stream's rows without aggregating them: "
                            f"batches of rows are not merged into one result; aggregate each part, {SINGLE}")
    return QueryRefused(f"no aggregation (no GROUP BY and no aggregate function) over stream {name}: batches of a "
                        f"plain SELECT are not merged into one result; aggregate the rows, {SINGLE}")


def _refuse_nested(inner: exp.Select, agg: exp.Select, streams: set[str]) -> None:
    if clause_of(inner, agg) == "where":
        raise QueryRefused(f"a subquery that aggregates stream {names_of(inner, streams)} ({short(inner)}) filters "
                           f"the rows of another aggregation before they are aggregated: the window's value is "
                           f"not known while a batch runs; a filter on grouping keys only runs after the merge, "
                           f"{SINGLE}")
    raise QueryRefused(f"an aggregate nested in an aggregate: the subquery {short(inner)} aggregates a stream below "
                       f"an aggregation that also reads the stream's rows, {SINGLE}")


def _refuse_correlated(agg: exp.Select, streams: set[str]) -> None:
    """An aggregation that refers to a column of a query around it would need the window's
    rows once per row of that query: refused, naming the column."""
    column = _outer_reference(agg)
    if column is None:
        return
    source = _source_named(agg, column.table.lower())
    what = (f"a raw column of stream {source.name.lower()}" if isinstance(source, exp.Table)
            and source.name.lower() in streams else "a column of the query around it")
    raise QueryRefused(f"a correlated subquery over stream {names_of(agg, streams)} ({short(agg)}) refers to "
                       f"{to_sql(column)}, {what}: it needs the window's rows once per outer row; group it by the "
                       f"correlated columns and join it instead, {SINGLE}")


def _outer_reference(select: exp.Select) -> exp.Column | None:
    """A qualified column of ``select`` (or its subqueries) whose table is none of theirs (sqlglot's scopes)."""
    try:
        root = build_scope(select)
    except SqlglotError:
        return None
    for scope in root.traverse() if root is not None else ():
        names, s = set(), scope
        while s is not None:
            names.update(n.lower() for n in s.sources)
            s = s.parent
        for c in scope.columns:
            if c.table and c.table.lower() not in names:
                return c
    return None


def _source_named(node: exp.Expression, alias: str) -> exp.Expression | None:
    """The source named ``alias`` of the nearest SELECT around ``node`` that has one."""
    select = node.find_ancestor(exp.Select)
    while select is not None:
        found = next((s for s in sources(select) if s.alias_or_name.lower() == alias), None)
        if found is not None:
            return found
        select = select.find_ancestor(exp.Select)
    return None
