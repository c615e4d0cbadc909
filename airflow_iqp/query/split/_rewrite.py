"""The aggregate rewrites: each aggregate into a partial state per batch and a merge of the
states, and the expressions above the aggregation over the merged columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import sqlglot.expressions as exp

from airflow_iqp.query.model import AVG_TYPE_OF, TYPE_OF
from airflow_iqp.query.split._common import ONLY, SINGLE, QueryRefused, col, short, to_sql

#: What percentile_approx (approx_percentile) is: each batch's answer is a value, not a sketch
#: that merges into the one the whole window's rows would give.
APPROX_PERCENTILE = "an approximate percentile whose per-batch results cannot be merged into the window's answer"
#: Aggregates that have no exact, mergeable partial state (the most specific class wins:
#: ApproxQuantile is a Quantile).
_UNSPLITTABLE = {
    exp.Median: "an exact median", exp.Quantile: "an exact percentile",
    exp.PercentileCont: "an exact percentile", exp.PercentileDisc: "an exact percentile",
    exp.ApproxQuantile: APPROX_PERCENTILE,
    exp.First: "first() (its value depends on row order)", exp.Last: "last() (its value depends on row order)",
    exp.AnyValue: "any_value() (its value depends on row order)",
    exp.ArrayAgg: "collect_list() (its order depends on batches)", exp.ArrayUniqueAgg: "collect_set()",
    exp.ArgMax: "max_by()", exp.ArgMin: "min_by()",
    exp.Corr: "corr()", exp.CovarPop: "covar_pop()", exp.CovarSamp: "covar_samp()",
}
#: Spark aggregates sqlglot parses as plain function calls, by lower-case name.
UNSPLITTABLE_NAMES = {
    "mode": "mode()", "collect_set": "collect_set()", "array_agg": "array_agg()", "kurtosis": "kurtosis()",
    "skewness": "skewness()", "percentile": "an exact percentile", "approx_percentile": APPROX_PERCENTILE,
    "histogram_numeric": "histogram_numeric()", "regr_slope": "regr_slope()", "listagg": "listagg()",
    "string_agg": "string_agg()", "first_value": "first_value()", "last_value": "last_value()",
}
EVERY = {"every": exp.LogicalAnd, "some": exp.LogicalOr, "any": exp.LogicalOr}
_VARIANCE = {exp.Variance: ("samp", False), exp.VariancePop: ("pop", False),
             exp.Stddev: ("samp", True), exp.StddevSamp: ("samp", True), exp.StddevPop: ("pop", True)}
_SAME = (exp.Min, exp.Max, exp.LogicalAnd, exp.LogicalOr)


def is_agg(node: exp.Expression) -> bool:
    if isinstance(node, exp.AggFunc):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in set(UNSPLITTABLE_NAMES) | set(EVERY)



@dataclass
class Split:
    """The per-batch projection and the merge of one aggregation, built while rewriting it.

    Partial columns are named with ``prefix`` (``_1_s0``: aggregation 1's first state), so
    that the aggregations of one query share one partial table; merged columns are not
    (``_k0``, ``_g0``, ``_a0``): each aggregation's merged rows are a table of their own.
    """

    keys: list[exp.Expression]                      # grouping expressions, in order of first appearance
    sets: list[tuple[int, ...]] | None = None       # grouping sets (ROLLUP, CUBE, GROUPING SETS), as key indexes
    prefix: str = ""
    raw: set[str] = field(default_factory=set)      # the aliases of the rows being aggregated
    distinct: list[exp.Expression] = field(default_factory=list)  # DISTINCT arguments: extra partial keys
    states: list[tuple[str, exp.Expression]] = field(default_factory=list)  # partial state columns
    merges: list[tuple[str, str]] = field(default_factory=list)   # (merged column, merge SQL)
    windows: list[tuple[str, str]] = field(default_factory=list)  # (column, window SQL) before the merge
    seen: dict[exp.Expression, str] = field(default_factory=dict)  # aggregate call -> merged column
    _key_texts: list[str] | None = field(default=None, repr=False)
    _state_names: dict[exp.Expression, str] = field(default_factory=dict, repr=False)  # state -> its column

    def key_index(self, node: exp.Expression) -> int | None:
        if not any(type(node) is type(k) for k in self.keys):  # most nodes: no key is of their kind
            return None
        if self._key_texts is None:
            self._key_texts = [norm(k) for k in self.keys]
        text = norm(node)
        return next((i for i, k in enumerate(self._key_texts) if k == text), None)

    def state(self, expression: exp.Expression) -> str:
        """The partial column computing ``expression``: one column per distinct state."""
        if expression not in self._state_names:  # sqlglot's trees are equal when their structures are
            self._state_names[expression] = f"{self.prefix}_s{len(self.states)}"
            self.states.append((self._state_names[expression], expression))
        return self._state_names[expression]

    def distinct_key(self, expression: exp.Expression) -> str:
        text = norm(expression)
        for i, d in enumerate(self.distinct):
            if norm(d) == text:
                return f"{self.prefix}_d{i}"
        self.distinct.append(expression)
        return f"{self.prefix}_d{len(self.distinct) - 1}"

    def merged(self, sql: str) -> str:
        name = f"_a{len(self.merges)}"
        self.merges.append((name, sql))
        return name

    @property
    def key_names(self) -> list[str]:
        """The partial's key columns (and, with grouping sets, its grouping bits)."""
        return [f"{self.prefix}_k{i}" for i in range(len(self.keys))] + self.bit_names

    @property
    def bit_names(self) -> list[str]:
        return [] if self.sets is None else [f"{self.prefix}_g{i}" for i in range(len(self.keys))]


def norm(node: exp.Expression) -> str:
    """An expression's SQL with table qualifiers dropped, for matching SELECT items to GROUP BY items."""
    copy = node.copy()
    for c in copy.find_all(exp.Column):
        c.set("table", None)
    return to_sql(copy).lower()


def _with_filter(agg: exp.Expression, cond: exp.Expression | None) -> exp.Expression:
    return agg if cond is None else exp.Filter(this=agg, expression=exp.Where(this=cond.copy()))


def split_aggregate(node: exp.Expression, split: Split) -> str:
    """The merged column of one aggregate call (with its FILTER), registering its states."""
    key = node  # equal calls (by structure) merge once
    if key in split.seen:
        return split.seen[key]
    cond = None
    agg = node
    if isinstance(node, exp.Filter):
        agg, cond = node.this, node.expression.this
    if isinstance(agg, exp.Anonymous) and agg.name.lower() in EVERY:
        agg = EVERY[agg.name.lower()](this=agg.expressions[0].copy())
    for inner in agg.find_all(exp.AggFunc):
        if inner is not agg:
            raise QueryRefused(f"an aggregate nested in an aggregate: {short(node)}; compute the inner one in a "
                               f"subquery, {SINGLE}")
    named = isinstance(agg, exp.Anonymous) and agg.name.lower() in UNSPLITTABLE_NAMES
    what = UNSPLITTABLE_NAMES[agg.name.lower()] if named else next(
        (_UNSPLITTABLE[cls] for cls in type(agg).__mro__ if cls in _UNSPLITTABLE), None)
    if what == APPROX_PERCENTILE:
        raise QueryRefused(f"{short(node)} is {what}; {ONLY}")
    if what is not None:
        raise QueryRefused(f"{what} cannot be computed from per-batch partial results: {short(node)}; {ONLY}")
    merged = _merge_of(agg, cond, split, node)
    split.seen[key] = merged
    return merged


def _merge_of(agg: exp.Expression, cond, split: Split, node: exp.Expression) -> str:
    arg = agg.this
    if isinstance(arg, exp.Distinct):  # agg(DISTINCT x[, y]): the arguments become grouping columns
        args = [a if cond is None else exp.If(this=cond.copy(), true=a.copy(), false=exp.null())
                for a in arg.expressions]
        names = [split.distinct_key(a.copy()) for a in args]
        fn = {exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX"}.get(type(agg))
        if fn is None:
            raise QueryRefused(f"{short(node)}: DISTINCT is supported in COUNT, SUM, AVG, MIN and MAX; {SINGLE}")
        return split.merged(f"{fn}(DISTINCT {', '.join(names)})")
    if isinstance(agg, (exp.Count, exp.CountIf)):
        s = split.state(_with_filter(agg.copy(), cond))
        return split.merged(f"COALESCE(SUM({s}), 0)")
    if isinstance(agg, exp.Sum):
        s = split.state(_with_filter(agg.copy(), cond))
        return split.merged(f"CAST(SUM({s}) AS {TYPE_OF.format(s)})")
    if isinstance(agg, _SAME):
        s = split.state(_with_filter(agg.copy(), cond))
        return split.merged(f"{to_sql(agg.__class__(this=col(s)))}")
    if isinstance(agg, exp.Avg):
        s = split.state(_with_filter(exp.Sum(this=arg.copy()), cond))
        c = split.state(_with_filter(exp.Count(this=arg.copy()), cond))
        return split.merged(f"CAST(TRY_DIVIDE(SUM({s}), SUM({c})) AS {AVG_TYPE_OF.format(s)})")
    if type(agg) in _VARIANCE:
        kind, root = _VARIANCE[type(agg)]
        x = exp.Cast(this=arg.copy(), to=exp.DataType.build("double"))
        n = split.state(_with_filter(exp.Count(this=x.copy()), cond))
        mean = split.state(_with_filter(exp.Avg(this=x.copy()), cond))
        m2 = split.state(exp.Mul(this=_with_filter(exp.VariancePop(this=x.copy()), cond),
                                 expression=_with_filter(exp.Count(this=x.copy()), cond)))
        gm = f"_m{len(split.windows)}"
        over = f"OVER (PARTITION BY {', '.join(split.key_names)})" if split.keys else "OVER ()"
        split.windows.append((gm, f"TRY_DIVIDE(SUM({n} * {mean}) {over}, SUM({n}) {over})"))
        total = f"SUM({n})"
        m2_all = f"SUM(CASE WHEN {n} > 0 THEN {m2} + {n} * ({mean} - {gm}) * ({mean} - {gm}) ELSE 0 END)"
        div = f"{total} - 1" if kind == "samp" else total
        value = f"CASE WHEN {total} > {1 if kind == 'samp' else 0} THEN {m2_all} / ({div}) END"
        return split.merged(f"SQRT({value})" if root else value)
    if isinstance(agg, exp.ApproxDistinct):
        x = exp.Cast(this=arg.copy(), to=exp.DataType.build("string"))
        s = split.state(_with_filter(exp.Anonymous(this="HLL_SKETCH_AGG", expressions=[x]), cond))
        return split.merged(f"COALESCE(HLL_SKETCH_ESTIMATE(HLL_UNION_AGG({s})), 0)")
    raise QueryRefused(f"aggregate {short(node)} has no exact merge here (supported: COUNT, SUM, MIN, MAX, AVG, "
                       f"COUNT_IF, BOOL_AND/OR, VAR_*/STDDEV_*, agg(DISTINCT ...), approx_count_distinct); {SINGLE}")


def fold_of(state: exp.Expression, name: str) -> str | None:
    """How partial column ``name``, aggregate state ``state``, folds with itself over several
    batches into one partial's column of the same type (the tail's running state,
    :func:`~airflow_iqp.query.split._combine.fold_sql`); None for a state that does not fold
    by one aggregate (a variance's mean and M2 need the merge's window)."""
    agg = state.this if isinstance(state, exp.Filter) else state
    if isinstance(agg, (exp.Count, exp.CountIf, exp.Sum)):
        return f"CAST(SUM({name}) AS {TYPE_OF.format(name)})"
    if isinstance(agg, _SAME):
        return to_sql(agg.__class__(this=col(name)))
    if isinstance(agg, exp.Anonymous) and agg.name.upper() == "HLL_SKETCH_AGG":
        return f"HLL_UNION_AGG({name})"
    return None


def rewrite_above(node: exp.Expression, split: Split, aliases: Mapping[str, exp.Expression]) -> exp.Expression:
    """An expression of the aggregation's SELECT/HAVING/ORDER BY over the merged columns."""
    index = split.key_index(node) if not isinstance(node, (exp.Literal, exp.Null, exp.Boolean)) else None
    if index is not None:
        return col(f"_k{index}")
    if isinstance(node, (exp.Grouping, exp.GroupingId)):
        return rewrite_grouping(node, split)
    if isinstance(node, exp.Filter) or (is_agg(node) and not isinstance(node.parent, exp.Window)):
        return col(split_aggregate(node, split))
    if isinstance(node, (exp.Subquery, exp.Select)):
        return _subquery_above(node, split)
    if isinstance(node, exp.Column) and not node.table:
        alias = aliases.get(node.name.lower())
        if alias is not None:
            return rewrite_above(alias.copy(), split, {})
    if isinstance(node, exp.Column):
        raise QueryRefused(f"column {to_sql(node)} is neither grouped nor aggregated: add it to GROUP BY or wrap it "
                           f"in an aggregate")
    new = node.copy()
    for key, value in node.args.items():
        if isinstance(value, exp.Expression):
            new.set(key, rewrite_above(value, split, aliases))
        elif isinstance(value, list):
            new.set(key, [rewrite_above(v, split, aliases) if isinstance(v, exp.Expression) else v for v in value])
    return new


def _subquery_above(node: exp.Expression, split: Split) -> exp.Expression:
    """A subquery in the aggregation's SELECT list, HAVING or ORDER BY: it runs in the final
    step as it is (over static tables, or another aggregation's merged rows), unless it
    refers to the rows being aggregated, which the final step no longer has."""
    raw = next((c for c in node.find_all(exp.Column) if c.table and c.table.lower() in split.raw), None)
    if raw is not None:
        raise QueryRefused(f"subquery {short(node)} above the aggregation refers to {to_sql(raw)}, a column of the "
                           f"rows being aggregated: the final step has only the merged groups, {SINGLE}")
    return node.copy()


def rewrite_grouping(node: exp.Expression, split) -> exp.Expression:
    """``grouping(k)`` or ``grouping_id(...)`` of the aggregation, over the merged bits: a
    key's bit, or the bits weighed as Spark weighs them (the last column is bit 0, over the
    grouping columns in the order they first appear in GROUP BY)."""
    if split.sets is None:
        raise QueryRefused(f"{short(node)} without ROLLUP, CUBE or GROUPING SETS: Spark allows it only with them")
    args = node.expressions or ([] if isinstance(node, exp.Grouping) else list(split.keys))
    indexes = []
    for a in args:
        i = split.key_index(a)
        if i is None:
            raise QueryRefused(f"{short(node)}: {short(a)} is not a grouping column")
        indexes.append(i)
    if isinstance(node, exp.Grouping):
        if len(indexes) != 1:
            raise QueryRefused(f"{short(node)}: grouping() takes one grouping column")
        return col(f"_g{indexes[0]}")
    terms = [exp.Cast(this=col(f"_g{i}"), to=exp.DataType.build("bigint")) for i in indexes]
    weighted = [t if n == 0 else exp.Mul(this=t, expression=exp.Literal.number(2 ** n))
                for n, t in zip(range(len(terms) - 1, -1, -1), terms)]
    out = weighted[0]
    for w in weighted[1:]:
        out = exp.Add(this=out, expression=w)
    return exp.Paren(this=out) if len(weighted) > 1 else out
