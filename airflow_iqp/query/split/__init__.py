"""Split an aggregate SQL query into per-batch steps and a final step (sqlglot, Spark dialect).

A query is a small DAG of aggregations (``_find``): each SELECT that aggregates a stream's
rows, wherever it sits (the query itself, a CTE, a FROM subquery, a join's side, a scalar
or IN subquery), is one aggregation. Each runs per batch everything below its aggregation:
its FROM clause (joins with static tables, subqueries that do not aggregate, lateral
views), WHERE, the grouping expressions (and grouping sets), and each aggregate's mergeable
state; the final step merges each aggregation's states group by group. The final step is
then the query itself, each aggregation replaced by its merged groups and what its own
SELECT computes over them: HAVING, expressions over aggregates, window functions over the
aggregated rows, DISTINCT, ORDER BY, LIMIT; and above them, the outer queries, with the
static tables they join, the aggregations joined to each other, scalar and IN subqueries
over them, aggregates over their rows. A batch runs every aggregation in one job and
writes one partial (``_combine``).

Each aggregate is split by one rule (``_rewrite``):

=======================  ===================================  ==================================
aggregate                partial state                        merge
=======================  ===================================  ==================================
COUNT(*), COUNT(x),      COUNT(...)                           COALESCE(SUM(state), 0)
COUNT_IF(c)
SUM(x)                   SUM(x)                               SUM(state), cast to state's type
MIN, MAX, BOOL_AND/OR    the same                             the same
AVG(x)                   SUM(x), COUNT(x)                     SUM / SUM, cast to AVG's type
VAR_*, STDDEV_*          COUNT, AVG, M2 (VAR_POP * COUNT)     Chan's merge of (n, mean, M2)
agg(DISTINCT x)          x becomes a grouping column          agg(DISTINCT x)
APPROX_COUNT_DISTINCT    HLL_SKETCH_AGG(x)                    HLL_SKETCH_ESTIMATE(HLL_UNION_AGG)
=======================  ===================================  ==================================

``FILTER (WHERE c)`` stays on the partial state (a DISTINCT argument becomes
``IF(c, x, NULL)``). Semantics are those of the query run once over the whole window: a
SUM over only NULLs is NULL, a COUNT of nothing is 0, a global aggregate over an empty
window gives one row, and the result's columns are the SELECT list's, named and ordered
as there, with Spark's types.

A query that cannot be split exactly raises :class:`QueryRefused`, one line naming the
construct and what to do instead.

The rules are small functions from a tree to a tree (or to a refusal), in the style of
sqlglot's optimizer, grouped by concern in private modules: ``_tree`` (parse, inline the
CTEs, what a SELECT reads and aggregates), ``_refuse`` (the checks of the whole query),
``_find`` (the aggregations, and what may run above them), ``_below`` (what may run below
one), ``_rewrite`` (each aggregate into a partial state and a merge; the expressions above
the aggregation over the merged columns), ``_grouping`` (GROUP BY, ROLLUP, CUBE, GROUPING
SETS), ``_naming`` (the result's column names, as Spark gives them), ``_steps`` (one
aggregation's steps) and ``_combine`` (the aggregations' partials in one job).
:func:`decompose` below runs them in order; import it and :class:`QueryRefused` from
:mod:`airflow_iqp.query`. ``_types`` gives the steps' column types from the tables'
schemas, as Spark would (:func:`step_types`, for ``explain``).

Pure Python (sqlglot only): runs when a DAG file is parsed.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import sqlglot.expressions as exp

from airflow_iqp.query.model import Aggregation, Query
from airflow_iqp.query.split._combine import combine, fold_sql
from airflow_iqp.query.split._common import ONE_BATCH, QueryRefused
from airflow_iqp.query.split._find import find_aggregations, lift_key_filters
from airflow_iqp.query.split._naming import final_columns, output_name
from airflow_iqp.query.split._refuse import check_columns, check_tables, refuse_nondeterminism
from airflow_iqp.query.split._steps import MERGED_MARK, placeholders, read_above, split_aggregation
from airflow_iqp.query.split._tree import inline_ctes, parse, stream_tables
from airflow_iqp.query.split._types import step_types

__all__ = ["QueryRefused", "decompose", "step_types"]


def decompose(sql: str, *, id: str, streams: Sequence[str] | None = None, static: Sequence[str] | None = None,
              schemas: Mapping[str, Mapping[str, str]] | None = None, allow_single_batch: bool = False,
              title: str = "", one_batch: str = ONE_BATCH) -> Query:
    """Split ``sql`` into a :class:`Query`'s per-batch and final steps.

    ``streams`` and ``static`` name the tables the query may read (None: every table is a
    stream, for a syntax and split check without the data). ``schemas`` (table -> column
    -> type), when given, checks every column. A query that cannot be split raises
    :class:`QueryRefused`; with ``allow_single_batch`` it is returned as a single-batch
    query instead (the whole query runs once, after the window's end). A refusal's advice
    names ``one_batch`` as the way to do that: ``cut=OneBatch()``, as a DAG file says it,
    unless the caller has its own switch (the command line's ``--allow-single-batch``).
    """
    try:
        return _decompose(sql, id=id, streams=streams, static=static, schemas=schemas,
                          allow_single_batch=allow_single_batch, title=title)
    except QueryRefused as exc:
        raise exc.pointing_to(one_batch) from None


def _decompose(sql: str, *, id: str, streams, static, schemas, allow_single_batch: bool, title: str) -> Query:
    tree = parse(sql)
    tree, ctes = inline_ctes(tree)
    used_streams, used_static = check_tables(tree, streams, static, ctes)
    tables = used_streams + used_static
    if schemas:
        check_columns(tree, {t: schemas[t] for t in tables if t in schemas})
    try:
        refuse_nondeterminism(tree)
        columns = final_columns(tree)
        work = lift_key_filters(tree.copy(), set(used_streams))
        aggs = find_aggregations(work, set(used_streams))
        steps = _split_all(work, aggs, tables, used_static, set(used_streams))
    except QueryRefused:
        if not allow_single_batch:
            raise
        return single_batch_query(sql, tree, id=id, streams=used_streams, static=used_static, title=title)
    partial_sql, merges, fold, finish_sql, final_static, aggregations = steps
    return Query(id=id, streams=tuple(used_streams), static=tuple(used_static), sql=sql, partial_sql=partial_sql,
                 merge_sql=merges, fold_sql=fold, finish_sql=finish_sql, columns=tuple(columns),
                 ordered=bool(tree.args.get("order")), title=title, final_static=tuple(final_static),
                 aggregations=aggregations)


def _split_all(work: exp.Expression, aggs: list[exp.Select], tables: Sequence[str], static: Sequence[str],
               streams: set[str]):
    """Each aggregation split (the same one, read twice, once: a CTE's), innermost first,
    each replaced in ``work`` by its finish; then the batch's one job and the final step."""
    position = {id(n): i for i, n in enumerate(work.dfs())}  # numbered in the order the query reads them
    distinct = list(dict.fromkeys(a for a in sorted(aggs, key=lambda a: position[id(a)])))  # equal trees: one
    keys = {id(a): distinct.index(a) for a in aggs}  # before any is replaced by its finish
    several = len(distinct) > 1
    parts, root = {}, work
    for agg in aggs:
        index = keys[id(agg)]
        part, finish = split_aggregation(agg, index, several)
        parts.setdefault(index, part)
        if agg is root:
            root = finish
        else:
            agg.replace(finish)
    ordered = [parts[i] for i in range(len(distinct))]
    partial_sql, scans = combine(ordered, tables)
    final_static = read_above(root, static)
    finish_sql = re.sub(rf"\b{MERGED_MARK}(\d*)\b", lambda m: "{merged" + m[1] + "}",
                        placeholders(root, static, copy=False))
    aggregations = []
    for part, scan in zip(ordered, scans) if several else ():
        select = part.select()
        read = _streams_of(select, streams)
        aggregations.append(Aggregation(placeholders(select, tables, copy=False), read, scan))
    merges = tuple(p.merge_sql for p in ordered) if several else ordered[0].merge_sql
    return partial_sql, merges, fold_sql(ordered), finish_sql, final_static, tuple(aggregations)


def _streams_of(select: exp.Select, streams: set[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.name.lower() for t in stream_tables(select, streams)))


def single_batch_query(sql: str, tree: exp.Expression, *, id: str, streams: Sequence[str],
                       static: Sequence[str], title: str = "") -> Query:
    """The whole query as the one batch's step; the final step passes its rows through."""
    columns = [output_name(p) for p in tree.expressions] if isinstance(tree, exp.Select) else []
    ordered = bool(tree.args.get("order"))
    return Query(id=id, streams=tuple(streams), static=tuple(static), sql=sql,
                 partial_sql=placeholders(tree, list(streams) + list(static)),
                 merge_sql="SELECT * FROM {partials}", finish_sql="SELECT * FROM {merged}",
                 columns=tuple(c for c in columns if c != "*"), ordered=ordered, title=title, single_batch=True)
