"""Several aggregations, one job per batch: their partials in one table.

A query of one aggregation has the partial of that aggregation, its columns ``_k0``,
``_s0``, ... With several, a batch's partial is still one table: ``_agg``, the aggregation
a row belongs to, then every aggregation's columns (``_<i>_k0``, ``_<i>_s0``, ...), NULL in
the rows of the others. Aggregation ``i``'s merge reads the rows ``WHERE _agg = i``.

Aggregations over the same FROM clause (the same stream, the same joins and lateral views)
without grouping sets share one scan of the batch's rows: each row is read once and tagged
once per aggregation (``LATERAL VIEW EXPLODE(ARRAY(0, 1)) _iqp AS _agg``); each
aggregation's WHERE keeps its own rows, its keys are its own only in its rows, and its
states aggregate only its rows (``FILTER (WHERE _agg = i)``). Each other aggregation reads
the batch's rows in a branch of its own, and the branches are one UNION ALL: one job.
"""

from __future__ import annotations

from typing import Sequence

import sqlglot.expressions as exp

from airflow_iqp.query.split._common import col
from airflow_iqp.query.split._rewrite import fold_of
from airflow_iqp.query.split._steps import Part, placeholders

TAG = "_agg"


def combine(parts: list[Part], tables: Sequence[str]) -> tuple[str, list[int]]:
    """(the batch's SQL, the scan of the batch's rows each part reads: parts of one scan share it)."""
    if len(parts) == 1:
        return placeholders(parts[0].select(), tables, copy=False), [0]
    groups: dict[str, list[Part]] = {}
    for p in parts:
        groups.setdefault(p.source if p.fusable else f"\0{p.index}", []).append(p)
    names = [TAG] + [n for p in parts for n in p.names]
    branches, scan = [], {}
    for n, group in enumerate(groups.values()):
        select = _fused(group) if len(group) > 1 else _tagged(group[0])
        branches.append(_padded(select, names))
        scan.update((p.index, n) for p in group)
    union = branches[0]
    for branch in branches[1:]:
        union = exp.union(union, branch, distinct=False)
    return placeholders(union, tables, copy=False), [scan[p.index] for p in parts]


def fold_sql(parts: list[Part]) -> str | None:
    """Partials of several batches folded into one partial of the same columns and types:
    grouped by every column that is not a state (keys, DISTINCT arguments, grouping bits,
    the ``_agg`` tag), each state by its own fold (:func:`~airflow_iqp.query.split._rewrite.fold_of`).
    Merging the fold with more partials gives what merging them all gives: SUM, COUNT,
    MIN, MAX, BOOL_AND/OR and HLL sketches are associative. None when a state does not fold."""
    states: dict[str, str] = {}
    for p in parts:
        for name, state in p.states:
            fold = fold_of(state, name)
            if fold is None:
                return None
            states[name] = fold
    names = ([TAG] if len(parts) > 1 else []) + [n for p in parts for n in p.names]
    keys = [n for n in names if n not in states]
    cols = ", ".join(n if n not in states else f"{states[n]} AS {n}" for n in names)
    return f"SELECT {cols} FROM {{partials}}" + (f" GROUP BY {', '.join(keys)}" if keys else "")


def _tagged(part: Part) -> exp.Select:
    select = part.select()
    select.set("expressions", [exp.alias_(exp.Literal.number(part.index), TAG), *select.expressions])
    return select


def _padded(select: exp.Select, names: list[str]) -> exp.Select:
    """``select``'s columns in the order of ``names``; those it has not are NULL."""
    have = {e.alias_or_name: e for e in select.expressions}
    select.set("expressions", [have.get(n) or exp.alias_(exp.Null(), n) for n in names])
    return select


def _fused(group: list[Part]) -> exp.Select:
    """The parts of one FROM clause in one SELECT, over one scan of its rows."""
    first = group[0]
    out = exp.Select(expressions=[col(TAG)])
    for key, value in first.below.items():
        if key != "where":
            out.set(key, [v.copy() for v in value] if isinstance(value, list) else value.copy())
    tag = exp.Lateral(this=exp.Explode(this=exp.Array(expressions=[exp.Literal.number(p.index) for p in group])),
                      view=True, alias=exp.TableAlias(this=exp.to_identifier("_iqp"),
                                                      columns=[exp.to_identifier(TAG)]))
    out.set("laterals", [*(out.args.get("laterals") or []), tag])
    keep, group_by, filtered = [], [col(TAG)], False
    for p in group:
        mine = exp.EQ(this=col(TAG), expression=exp.Literal.number(p.index))
        where = p.below.get("where")
        keep.append(mine if where is None else exp.and_(mine, where.this.copy()))
        filtered = filtered or where is not None
        for name, e in p.keys:
            key = exp.If(this=mine.copy(), true=e.copy(), false=exp.Null())
            out.append("expressions", exp.alias_(key, name))
            group_by.append(key.copy())
        for name, e in p.states:
            out.append("expressions", exp.alias_(_only_in(e, mine), name))
    if filtered:
        out.set("where", exp.Where(this=exp.or_(*keep)))
    out.set("group", exp.Group(expressions=group_by))
    return out


def _only_in(state: exp.Expression, mine: exp.Expression) -> exp.Expression:
    """A state's aggregates over only the rows ``mine`` keeps (their FILTER and'ed with it)."""
    if isinstance(state, exp.Filter):
        return exp.Filter(this=state.this.copy(),
                          expression=exp.Where(this=exp.and_(mine.copy(), state.expression.this.copy())))
    if isinstance(state, exp.AggFunc) or (isinstance(state, exp.Anonymous) and state.name.upper() == "HLL_SKETCH_AGG"):
        return exp.Filter(this=state.copy(), expression=exp.Where(this=mine.copy()))
    new = state.copy()
    for key, value in state.args.items():
        if isinstance(value, exp.Expression):
            new.set(key, _only_in(value, mine))
        elif isinstance(value, list):
            new.set(key, [_only_in(v, mine) if isinstance(v, exp.Expression) else v for v in value])
    return new
