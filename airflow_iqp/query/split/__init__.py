"""Split one aggregate SQL query into a per-batch step and a final step (sqlglot, Spark dialect).

The per-batch step runs everything below the aggregation on one batch: the FROM clause
(joins with static tables, subqueries that do not aggregate), WHERE, the grouping
expressions, and each aggregate's mergeable state. The final step merges the states
group by group, then runs everything above the aggregation: HAVING, expressions over
aggregates, window functions over the aggregated rows, DISTINCT, ORDER BY, LIMIT and the
outer query when the aggregation sits in a subquery or a CTE, with any static tables the
outer query joins to the aggregated rows (``Query.final_static``: the final step reads
them as well). A stream read above the aggregation is refused: the final step has the
merged rows of one aggregation, not a stream's rows.

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
CTEs), ``_refuse`` (the checks that refuse a query), ``_rewrite`` (each aggregate into a
partial state and a merge; the expressions above the aggregation over the merged columns),
``_naming`` (the result's column names, as Spark gives them) and ``_steps`` (the three SQL
steps). :func:`decompose` below runs them in order; import it and :class:`QueryRefused`
from :mod:`airflow_iqp.query`. ``_types`` gives the steps' column types from the tables'
schemas, as Spark would (:func:`step_types`, for ``explain``).

Pure Python (sqlglot only): runs when a DAG file is parsed.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import sqlglot.expressions as exp

from airflow_iqp.query.model import Query
from airflow_iqp.query.split._common import ONE_BATCH, QueryRefused
from airflow_iqp.query.split._naming import final_columns, output_name
from airflow_iqp.query.split._refuse import (
    check_above, check_below, check_columns, check_tables, find_aggregation, refuse_nondeterminism,
)
from airflow_iqp.query.split._steps import build_steps, placeholders
from airflow_iqp.query.split._tree import inline_ctes, parse, same_node
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
        agg = find_aggregation(tree, used_streams)
        check_below(agg, used_streams)
        check_above(tree, agg, used_streams)
        work = tree.copy()
        agg_in_work = same_node(tree, agg, work)
        final_cols = final_columns(tree, agg)
        partial_sql, merge_sql, finish_sql, final_static = build_steps(work, agg_in_work, tables, used_static)
    except QueryRefused:
        if not allow_single_batch:
            raise
        return single_batch_query(sql, tree, id=id, streams=used_streams, static=used_static, title=title)
    return Query(id=id, streams=tuple(used_streams), static=tuple(used_static), sql=sql, partial_sql=partial_sql,
                 merge_sql=merge_sql, finish_sql=finish_sql, columns=tuple(final_cols),
                 ordered=bool(tree.args.get("order")), title=title, final_static=tuple(final_static))


def single_batch_query(sql: str, tree: exp.Expression, *, id: str, streams: Sequence[str],
                       static: Sequence[str], title: str = "") -> Query:
    """The whole query as the one batch's step; the final step passes its rows through."""
    columns = [output_name(p) for p in tree.expressions] if isinstance(tree, exp.Select) else []
    ordered = bool(tree.args.get("order"))
    return Query(id=id, streams=tuple(streams), static=tuple(static), sql=sql,
                 partial_sql=placeholders(tree, list(streams) + list(static)),
                 merge_sql="SELECT * FROM {partials}", finish_sql="SELECT * FROM {merged}",
                 columns=tuple(c for c in columns if c != "*"), ordered=ordered, title=title, single_batch=True)
