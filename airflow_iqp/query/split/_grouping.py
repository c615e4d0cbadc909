"""GROUP BY: the grouping keys of an aggregation and, for ROLLUP, CUBE and GROUPING SETS, its
grouping sets; and ``grouping()`` / ``grouping_id()`` over the merged rows.

A batch groups by the same sets and keeps, per key, ``GROUPING(key)``: the merge groups by
the keys and those bits, so a rolled-up row (its key NULL, its bit 1) never merges with the
group of a NULL key (bit 0). Above the aggregation, ``grouping()`` and ``grouping_id()``
read the merged bits (``_rewrite.rewrite_grouping``).
"""

from __future__ import annotations

import itertools

import sqlglot.expressions as exp

from airflow_iqp.query.split._common import QueryRefused, short
from airflow_iqp.query.split._rewrite import is_agg, norm

_SETS = (exp.Rollup, exp.Cube, exp.GroupingSets)


def group_keys(agg: exp.Select) -> tuple[list[exp.Expression], list[tuple[int, ...]] | None]:
    """(the grouping keys, in order of first appearance; the grouping sets as tuples of key
    indexes, or None for a plain GROUP BY). Ordinals and SELECT aliases resolve to the items."""
    group = agg.args.get("group")
    if not group:
        return [], None
    keys: list[exp.Expression] = []
    projections = {p.alias.lower(): p.unalias() for p in agg.expressions if p.alias}

    def index(g: exp.Expression) -> int:
        g = _resolve(agg, g, projections)
        text = norm(g)
        for i, k in enumerate(keys):
            if norm(k) == text:
                return i
        keys.append(g.copy())
        return len(keys) - 1

    factors = [_sets_of(g, index) for g in group.expressions]
    for kind, expand in (("rollup", _rollup), ("cube", _cube)):
        if group.args.get(kind):  # GROUP BY a, b WITH ROLLUP: the plain keys, rolled up
            factors = [expand([s for f in factors for s in f])]
    if not any(isinstance(g, _SETS) for g in group.expressions) and not (group.args.get("rollup")
                                                                         or group.args.get("cube")):
        return keys, None
    sets = [tuple(sorted(set(itertools.chain(*combo)))) for combo in itertools.product(*factors)]
    twice = next((s for s in sets if sets.count(s) > 1), None)
    if twice is not None:
        shown = ", ".join(short(keys[i]) for i in twice)
        raise QueryRefused(f"GROUP BY lists the grouping set ({shown}) more than once: Spark gives its rows once per "
                           f"copy, which partials merged by key cannot tell apart; list each set once")
    return keys, sets


def _resolve(agg: exp.Select, g: exp.Expression, projections) -> exp.Expression:
    if isinstance(g, exp.Literal) and g.is_int:  # GROUP BY 2: the second SELECT item
        i = int(g.name)
        if not 1 <= i <= len(agg.expressions):
            raise QueryRefused(f"GROUP BY {i}: the SELECT list has {len(agg.expressions)} items")
        g = agg.expressions[i - 1].unalias()
    elif isinstance(g, exp.Column) and not g.table and g.name.lower() in projections:
        target = projections[g.name.lower()]  # GROUP BY an alias of the SELECT list (Spark allows it)
        if not (isinstance(target, exp.Column) and target.name.lower() == g.name.lower()):
            g = target
    if any(is_agg(n) for n in g.walk()):
        raise QueryRefused(f"an aggregate in GROUP BY: {short(g)}")
    return g


def _items(node: exp.Expression, index) -> tuple[int, ...]:
    """One element of ROLLUP, CUBE or GROUPING SETS: a column, or a parenthesised list of them."""
    if isinstance(node, exp.Tuple):
        return tuple(index(e) for e in node.expressions)
    if isinstance(node, exp.Paren):
        return (index(node.this),)
    return (index(node),)


def _rollup(items: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    return [tuple(itertools.chain(*items[:n])) for n in range(len(items), -1, -1)]


def _cube(items: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    return [tuple(itertools.chain(*(items[i] for i in range(len(items)) if mask >> i & 1)))
            for mask in range(2 ** len(items) - 1, -1, -1)]


def _sets_of(g: exp.Expression, index) -> list[tuple[int, ...]]:
    """The grouping sets one element of GROUP BY stands for (a plain key: the one set of it)."""
    if isinstance(g, exp.Rollup):
        return _rollup([_items(e, index) for e in g.expressions])
    if isinstance(g, exp.Cube):
        return _cube([_items(e, index) for e in g.expressions])
    if isinstance(g, exp.GroupingSets):
        return [s for e in g.expressions for s in (_sets_of(e, index) if isinstance(e, _SETS) else [_items(e, index)])]
    return [(index(g),)]


def grouping_sets_clause(keys: list[exp.Expression], extra: list[exp.Expression],
                         sets: list[tuple[int, ...]]) -> exp.Group:
    """``GROUP BY GROUPING SETS (...)`` of a batch: each set, with ``extra`` (DISTINCT arguments) in every one."""
    tuples = [exp.Tuple(expressions=[keys[i].copy() for i in s] + [e.copy() for e in extra]) for s in sets]
    return exp.Group(expressions=[exp.GroupingSets(expressions=tuples)])


def grouping_bit(key: exp.Expression) -> exp.Expression:
    """The partial column that says whether ``key`` is rolled up in a batch's row."""
    return exp.Grouping(expressions=[key.copy()])
