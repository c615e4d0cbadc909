"""Split one aggregate SQL query into a per-batch step and a final step (sqlglot, Spark dialect).

The per-batch step runs everything below the aggregation on one batch: the FROM clause
(joins with static tables, subqueries that do not aggregate), WHERE, the grouping
expressions, and each aggregate's mergeable state. The final step merges the states
group by group, then runs everything above the aggregation: HAVING, expressions over
aggregates, window functions over the aggregated rows, DISTINCT, ORDER BY, LIMIT and the
outer query when the aggregation sits in a subquery or a CTE.

Each aggregate is split by one rule (:data:`_STATES`):

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

Pure Python (sqlglot only): runs when a DAG file is parsed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import OptimizeError, ParseError

from airflow_iqp.errors import ConfigError
from airflow_iqp.query.model import AVG_TYPE_OF, TYPE_OF, Query

DIALECT = "spark"


class QueryRefused(ConfigError):
    """The query cannot be split into batches exactly. The message says why and what to do."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()), field="sql")


_SINGLE = "or run it as one batch after the window's end (cut=OneBatch(), or --allow-single-batch)"
_ONLY = "run it as one batch after the window's end (cut=OneBatch(), or --allow-single-batch)"

#: Aggregates that have no exact, mergeable partial state.
_UNSPLITTABLE = {
    exp.Median: "an exact median", exp.Quantile: "an exact percentile",
    exp.PercentileCont: "an exact percentile", exp.PercentileDisc: "an exact percentile",
    exp.ApproxQuantile: "percentile_approx (its sketch is not mergeable in SQL)",
    exp.First: "first() (its value depends on row order)", exp.Last: "last() (its value depends on row order)",
    exp.AnyValue: "any_value() (its value depends on row order)",
    exp.ArrayAgg: "collect_list() (its order depends on batches)", exp.ArrayUniqueAgg: "collect_set()",
    exp.ArgMax: "max_by()", exp.ArgMin: "min_by()",
    exp.Corr: "corr()", exp.CovarPop: "covar_pop()", exp.CovarSamp: "covar_samp()",
}
#: Spark aggregates sqlglot parses as plain function calls, by lower-case name.
_UNSPLITTABLE_NAMES = {
    "mode": "mode()", "collect_set": "collect_set()", "array_agg": "array_agg()", "kurtosis": "kurtosis()",
    "skewness": "skewness()", "percentile": "an exact percentile", "approx_percentile": "approx_percentile()",
    "histogram_numeric": "histogram_numeric()", "regr_slope": "regr_slope()", "listagg": "listagg()",
    "string_agg": "string_agg()", "first_value": "first_value()", "last_value": "last_value()",
}
_EVERY = {"every": exp.LogicalAnd, "some": exp.LogicalOr, "any": exp.LogicalOr}
_NONDETERMINISTIC = (exp.Rand, exp.Randn, exp.Uuid, exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime,
                     exp.CurrentDatetime)
_NONDETERMINISTIC_NAMES = {"shuffle", "monotonically_increasing_id", "spark_partition_id", "input_file_name",
                           "input_file_block_start", "input_file_block_length", "now", "uniform", "randstr",
                           "current_timestamp", "localtimestamp", "unix_timestamp"}
_VARIANCE = {exp.Variance: ("samp", False), exp.VariancePop: ("pop", False),
             exp.Stddev: ("samp", True), exp.StddevSamp: ("samp", True), exp.StddevPop: ("pop", True)}
_SAME = (exp.Min, exp.Max, exp.LogicalAnd, exp.LogicalOr)


def _sql(node: exp.Expression) -> str:
    return node.sql(dialect=DIALECT)


def _short(node: exp.Expression, limit: int = 60) -> str:
    text = " ".join(_sql(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _col(name: str) -> exp.Column:
    return exp.column(name)


def _parse(sql: str) -> exp.Expression:
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRefused("SQL syntax error: the query is empty")
    try:
        trees = sqlglot.parse(sql, read=DIALECT)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        desc = first.get("description") or str(exc).splitlines()[0]
        where = f" at line {first['line']}, column {first['col']}" if first.get("line") else ""
        raise QueryRefused(f"SQL syntax error{where}: {desc}") from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise QueryRefused(f"expected one SELECT statement, got {len(trees)}")
    tree = trees[0]
    if not isinstance(tree, exp.Query):
        raise QueryRefused(f"expected a SELECT query, got {tree.key.upper()}")
    return tree


# ----------------------------------------------------------------------------- rules


def inline_ctes(tree: exp.Expression) -> tuple[exp.Expression, set[str]]:
    """Replace every reference to a CTE by its body as a subquery; return the tree and the CTE names."""
    names: set[str] = set()
    with_ = tree.args.get("with_") or tree.args.get("with")
    if not with_:
        return tree, names
    bodies: dict[str, exp.Expression] = {}
    for cte in with_.expressions:
        body = _substitute_ctes(cte.this.copy(), bodies)
        bodies[cte.alias_or_name.lower()] = body
        names.add(cte.alias_or_name.lower())
    tree = tree.copy()
    tree.set("with_" if "with_" in tree.args else "with", None)
    return _substitute_ctes(tree, bodies), names


def _substitute_ctes(tree: exp.Expression, bodies: Mapping[str, exp.Expression]) -> exp.Expression:
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if name in bodies and not table.args.get("db"):
            alias = table.alias or table.name
            table.replace(exp.Subquery(this=bodies[name].copy(), alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return tree


def refuse_nondeterminism(tree: exp.Expression) -> None:
    for node in tree.walk():
        name = node.name.lower() if isinstance(node, exp.Anonymous) else None
        if isinstance(node, _NONDETERMINISTIC) or (name in _NONDETERMINISTIC_NAMES):
            raise QueryRefused(f"non-deterministic function {_short(node)}: each batch would see a different "
                               f"value; compute it outside the query (e.g. a literal from the DAG), {_SINGLE}")


def find_aggregation(tree: exp.Expression) -> exp.Select:
    """The one SELECT that aggregates the streams: the top query, or the subquery the
    outer queries read from (each through a single FROM subquery)."""
    node = tree
    while True:
        if isinstance(node, exp.SetOperation):
            raise QueryRefused(f"{node.key.upper()} of queries: split each part into its own query, {_SINGLE}")
        if not isinstance(node, exp.Select):
            raise QueryRefused(f"expected a SELECT, got {_short(node)}")
        if _aggregates(node):
            return node
        source = node.args.get("from_") or node.args.get("from")
        inner = source.this if source is not None else None
        if isinstance(inner, exp.Subquery) and not node.args.get("joins"):
            node = inner.this
            continue
        if isinstance(inner, exp.Subquery) and any(_aggregates(s) for s in inner.find_all(exp.Select)):
            joined = ", ".join(_short(j.this) for j in node.args["joins"])
            raise QueryRefused(f"{joined} is joined above the aggregation (in the outer query): the final step "
                               f"sees only aggregated rows; join it inside the aggregation, {_SINGLE}")
        if any(isinstance(n, exp.Window) for n in _own_nodes(node)):
            window = next(n for n in _own_nodes(node) if isinstance(n, exp.Window))
            raise QueryRefused(f"window function over the stream ({_short(window)}): it needs every row of the "
                               f"window at once; aggregate first and apply it over the aggregate, {_SINGLE}")
        raise QueryRefused(f"no aggregation (no GROUP BY and no aggregate function): batches of a plain "
                           f"SELECT are not merged into one result; aggregate the rows, {_SINGLE}")


def _own_nodes(select: exp.Select):
    """Nodes of a SELECT's own projections, HAVING, QUALIFY and ORDER BY (not its subqueries)."""
    parts = list(select.expressions) + [select.args.get(k) for k in ("having", "qualify", "order")]
    for part in parts:
        if part is None:
            continue
        for node in part.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Select)) and n is not part):
            yield node


def _is_agg(node: exp.Expression) -> bool:
    if isinstance(node, exp.AggFunc):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in set(_UNSPLITTABLE_NAMES) | set(_EVERY)


def _aggregates(select: exp.Select) -> bool:
    if select.args.get("group"):
        return True
    return any(_is_agg(n) and not isinstance(n.parent, exp.Window) for n in _own_nodes(select))


def check_tables(tree: exp.Expression, streams: Sequence[str] | None, static: Sequence[str] | None,
                 ctes: set[str]) -> tuple[list[str], list[str]]:
    """The streams and static tables the query reads, in order of appearance; an unknown one is refused."""
    seen: dict[str, None] = {}
    for table in tree.find_all(exp.Table):
        if not table.name:
            continue
        seen[table.name.lower() if not table.args.get("db") else _sql(table)] = None
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
                raise QueryRefused(f"window function over the stream ({_short(node)}): it needs every row of the "
                                   f"window at once, {_SINGLE}")
            if isinstance(node, exp.Select) and _aggregates(node) and _reads(node, stream_set):
                raise QueryRefused(f"an aggregate nested in an aggregate: the subquery {_short(node)} aggregates "
                                   f"a stream below the query's own aggregation, {_SINGLE}")


def _below_parts(agg: exp.Select):
    for key in ("from_", "from", "where"):
        if agg.args.get(key) is not None:
            yield agg.args[key]
    yield from agg.args.get("joins") or ()


def _reads(node: exp.Expression, names: set[str]) -> bool:
    return any(t.name.lower() in names for t in node.find_all(exp.Table))


def check_above(tree: exp.Expression, agg: exp.Select, tables: Sequence[str]) -> None:
    """The final step sees only the aggregated rows: nothing above the aggregation reads a table."""
    names = set(tables)
    for node in tree.walk(prune=lambda n: n is agg):
        if node is not agg and isinstance(node, exp.Table) and node.name.lower() in names:
            raise QueryRefused(f"table {node.name} is read above the aggregation (in the outer query): the final "
                               f"step sees only aggregated rows; join it inside the aggregation, {_SINGLE}")
    # Subqueries in the aggregation's own SELECT list, HAVING and ORDER BY are refused by
    # rewrite_above: they would run once per batch, not over the window.


# ----------------------------------------------------------------------------- the split


@dataclass
class _Split:
    """The per-batch projection and the merge, built while rewriting the aggregation."""

    keys: list[exp.Expression]                      # grouping expressions, as in GROUP BY
    distinct: list[exp.Expression] = field(default_factory=list)  # DISTINCT arguments: extra partial keys
    states: list[tuple[str, exp.Expression]] = field(default_factory=list)  # partial state columns
    merges: list[tuple[str, str]] = field(default_factory=list)   # (merged column, merge SQL)
    windows: list[tuple[str, str]] = field(default_factory=list)  # (column, window SQL) before the merge
    seen: dict[str, str] = field(default_factory=dict)            # aggregate SQL -> merged column
    counter: itertools.count = field(default_factory=itertools.count)

    def key_index(self, node: exp.Expression) -> int | None:
        norm = _norm(node)
        for i, k in enumerate(self.keys):
            if _norm(k) == norm:
                return i
        return None

    def state(self, expression: exp.Expression) -> str:
        """The partial column computing ``expression``: one column per distinct state."""
        text = _sql(expression)
        for name, e in self.states:
            if _sql(e) == text:
                return name
        name = f"_s{len(self.states)}"
        self.states.append((name, expression))
        return name

    def distinct_key(self, expression: exp.Expression) -> str:
        norm = _norm(expression)
        for i, d in enumerate(self.distinct):
            if _norm(d) == norm:
                return f"_d{i}"
        self.distinct.append(expression)
        return f"_d{len(self.distinct) - 1}"

    def merged(self, sql: str) -> str:
        name = f"_a{len(self.merges)}"
        self.merges.append((name, sql))
        return name

    @property
    def key_names(self) -> list[str]:
        return [f"_k{i}" for i in range(len(self.keys))]


def _norm(node: exp.Expression) -> str:
    """An expression's SQL with table qualifiers dropped, for matching SELECT items to GROUP BY items."""
    copy = node.copy()
    for c in copy.find_all(exp.Column):
        c.set("table", None)
    return _sql(copy).lower()


def _with_filter(agg: exp.Expression, cond: exp.Expression | None) -> exp.Expression:
    return agg if cond is None else exp.Filter(this=agg, expression=exp.Where(this=cond.copy()))


def split_aggregate(node: exp.Expression, split: _Split) -> str:
    """The merged column of one aggregate call (with its FILTER), registering its states."""
    key = _sql(node)
    if key in split.seen:
        return split.seen[key]
    cond = None
    agg = node
    if isinstance(node, exp.Filter):
        agg, cond = node.this, node.expression.this
    if isinstance(agg, exp.Anonymous) and agg.name.lower() in _EVERY:
        agg = _EVERY[agg.name.lower()](this=agg.expressions[0].copy())
    for inner in agg.find_all(exp.AggFunc):
        if inner is not agg:
            raise QueryRefused(f"an aggregate nested in an aggregate: {_short(node)}; compute the inner one in a "
                               f"subquery, {_SINGLE}")
    if isinstance(agg, exp.Anonymous) and agg.name.lower() in _UNSPLITTABLE_NAMES:
        raise QueryRefused(f"{_UNSPLITTABLE_NAMES[agg.name.lower()]} cannot be computed from per-batch partial "
                           f"results: {_short(node)}; {_ONLY}")
    for cls, what in _UNSPLITTABLE.items():
        if isinstance(agg, cls):
            raise QueryRefused(f"{what} cannot be computed from per-batch partial results: {_short(node)}; {_ONLY}")
    merged = _merge_of(agg, cond, split, node)
    split.seen[key] = merged
    return merged


def _merge_of(agg: exp.Expression, cond, split: _Split, node: exp.Expression) -> str:
    arg = agg.this
    if isinstance(arg, exp.Distinct):  # agg(DISTINCT x[, y]): the arguments become grouping columns
        args = [a if cond is None else exp.If(this=cond.copy(), true=a.copy(), false=exp.null())
                for a in arg.expressions]
        names = [split.distinct_key(a.copy()) for a in args]
        fn = {exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX"}.get(type(agg))
        if fn is None:
            raise QueryRefused(f"{_short(node)}: DISTINCT is supported in COUNT, SUM, AVG, MIN and MAX; {_SINGLE}")
        return split.merged(f"{fn}(DISTINCT {', '.join(names)})")
    if isinstance(agg, (exp.Count, exp.CountIf)):
        s = split.state(_with_filter(agg.copy(), cond))
        return split.merged(f"COALESCE(SUM({s}), 0)")
    if isinstance(agg, exp.Sum):
        s = split.state(_with_filter(agg.copy(), cond))
        return split.merged(f"CAST(SUM({s}) AS {TYPE_OF.format(s)})")
    if isinstance(agg, _SAME):
        s = split.state(_with_filter(agg.copy(), cond))
        return split.merged(f"{_sql(agg.__class__(this=_col(s)))}")
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
    raise QueryRefused(f"aggregate {_short(node)} has no exact merge here (supported: COUNT, SUM, MIN, MAX, AVG, "
                       f"COUNT_IF, BOOL_AND/OR, VAR_*/STDDEV_*, agg(DISTINCT ...), approx_count_distinct); {_SINGLE}")


def rewrite_above(node: exp.Expression, split: _Split, aliases: Mapping[str, exp.Expression]) -> exp.Expression:
    """An expression of the aggregation's SELECT/HAVING/ORDER BY over the merged columns."""
    index = split.key_index(node) if not isinstance(node, (exp.Literal, exp.Null, exp.Boolean)) else None
    if index is not None:
        return _col(f"_k{index}")
    if isinstance(node, exp.Filter) or (_is_agg(node) and not isinstance(node.parent, exp.Window)):
        return _col(split_aggregate(node, split))
    if isinstance(node, (exp.Subquery, exp.Select)):
        raise QueryRefused(f"subquery {_short(node)} above the aggregation: it would run per batch; {_SINGLE}")
    if isinstance(node, exp.Column) and not node.table:
        alias = aliases.get(node.name.lower())
        if alias is not None:
            return rewrite_above(alias.copy(), split, {})
    if isinstance(node, exp.Column):
        raise QueryRefused(f"column {_sql(node)} is neither grouped nor aggregated: add it to GROUP BY or wrap it "
                           f"in an aggregate")
    new = node.copy()
    for key, value in node.args.items():
        if isinstance(value, exp.Expression):
            new.set(key, rewrite_above(value, split, aliases))
        elif isinstance(value, list):
            new.set(key, [rewrite_above(v, split, aliases) if isinstance(v, exp.Expression) else v for v in value])
    return new


def _group_keys(agg: exp.Select) -> list[exp.Expression]:
    group = agg.args.get("group")
    if not group:
        return []
    for g in [*group.expressions, *(group.args.get(k) for k in ("rollup", "cube", "grouping_sets"))]:
        if isinstance(g, (exp.Rollup, exp.Cube, exp.GroupingSets)) or (g and not isinstance(g, exp.Expression)):
            kind = type(g).__name__.upper() if isinstance(g, exp.Expression) else "ROLLUP, CUBE or GROUPING SETS"
            raise QueryRefused(f"GROUP BY {kind}: group by the columns, and compute each level as its own query, "
                               f"{_SINGLE}")
    projections = {p.alias.lower(): p.unalias() for p in agg.expressions if p.alias}
    keys = []
    for g in group.expressions:
        if isinstance(g, exp.Literal) and g.is_int:  # GROUP BY 2: the second SELECT item
            i = int(g.name)
            if not 1 <= i <= len(agg.expressions):
                raise QueryRefused(f"GROUP BY {i}: the SELECT list has {len(agg.expressions)} items")
            g = agg.expressions[i - 1].unalias()
        elif isinstance(g, exp.Column) and not g.table and g.name.lower() in projections:
            target = projections[g.name.lower()]  # GROUP BY an alias of the SELECT list (Spark allows it)
            if not (isinstance(target, exp.Column) and target.name.lower() == g.name.lower()):
                g = target
        if _is_agg(g) or any(_is_agg(n) for n in g.walk()):
            raise QueryRefused(f"an aggregate in GROUP BY: {_short(g)}")
        keys.append(g.copy())
    return keys


def output_name(item: exp.Expression) -> str:
    """A SELECT item's result column name: its alias, its column's name, or its SQL as Spark writes it."""
    if item.alias:
        return item.alias
    if isinstance(item, exp.Column):
        return item.name
    # Spark names an expression by its SQL with lower-case functions and every binary
    # operation in parentheses: "(qty % 2)", "sum((a * b))", "count(1)" for count(*).
    named = item.copy().transform(lambda n: exp.Paren(this=n) if isinstance(n, exp.Binary)
                                  and not isinstance(n.parent, exp.Paren) else n)
    text = named.sql(dialect=DIALECT, normalize_functions="lower")
    return text.replace("count(*)", "count(1)")


def _placeholders(tree: exp.Expression, tables: Sequence[str]) -> str:
    """SQL text with each table read as a ``{name}`` DataFrame reference (``spark.sql`` kwargs)."""
    tree = tree.copy()
    marks = {}
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if name in tables and not table.args.get("db"):
            mark = f"iqpref{len(marks)}x{name}"
            marks[mark] = name
            alias = table.alias or table.name
            table.replace(exp.Table(this=exp.to_identifier(mark),
                                    alias=exp.TableAlias(this=exp.to_identifier(alias))))
    text = _sql(tree).replace("{", "{{").replace("}", "}}")
    for mark, name in marks.items():
        text = text.replace(mark, "{" + name + "}")
    return text


def build_steps(tree: exp.Expression, agg: exp.Select, tables: Sequence[str]) -> tuple[str, str, str, list[str]]:
    """(partial SQL, merge SQL, finish SQL, output columns) of a validated query."""
    split = _Split(keys=_group_keys(agg))
    aliases = {p.alias.lower(): p.unalias() for p in agg.expressions if p.alias}
    finish = agg.copy()
    items, names = [], []
    for p in agg.expressions:
        if isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star)):
            raise QueryRefused("SELECT * in an aggregation: list the grouped columns and the aggregates")
        name = output_name(p)
        items.append(exp.alias_(rewrite_above(p.unalias(), split, {}), name, quoted=True))
        names.append(name)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise QueryRefused(f"two result columns are named {dupes[0]}: give them distinct aliases")
    finish.set("expressions", items)
    having = agg.args.get("having")
    finish.set("having", None)
    finish.set("group", None)
    finish.set("joins", None)
    finish.set("where", exp.Where(this=rewrite_above(having.this, split, aliases)) if having else None)
    if agg.args.get("order"):
        order = agg.args["order"].copy()
        out = {n.lower() for n in names}
        order.set("expressions", [o if _names_output(o, out) else
                                  o.__class__(**{**o.args, "this": rewrite_above(o.this, split, aliases)})
                                  for o in order.expressions])
        finish.set("order", order)
    from_key = "from_" if "from_" in agg.args else "from"
    finish.set(from_key, exp.From(this=exp.Table(this=exp.to_identifier("iqpmerged"))))
    for key in ("qualify",):
        if agg.args.get(key) is not None:
            finish.set(key, exp.Qualify(this=rewrite_above(agg.args[key].this, split, aliases)))

    partial = exp.Select(
        expressions=[exp.alias_(k.copy(), f"_k{i}") for i, k in enumerate(split.keys)]
        + [exp.alias_(d.copy(), f"_d{i}") for i, d in enumerate(split.distinct)]
        + [exp.alias_(e, name) for name, e in split.states]
        or [exp.alias_(exp.Count(this=exp.Star()), "_rows")])
    for key in (from_key, "joins", "where"):
        if agg.args.get(key) is not None:
            partial.set(key, agg.args[key].copy())
    if split.keys or split.distinct:
        partial.set("group", exp.Group(expressions=[k.copy() for k in split.keys + split.distinct]))
    partial_sql = _placeholders(partial, tables)

    keys = ", ".join(split.key_names)
    source = "{partials}"
    if split.windows:
        source = f"(SELECT *, {', '.join(f'{w} AS {n}' for n, w in split.windows)} FROM {{partials}}) AS p"
    cols = ", ".join(split.key_names + [f"{m} AS {n}" for n, m in split.merges]) or "COUNT(*) AS _rows"
    merge_sql = f"SELECT {cols} FROM {source}" + (f" GROUP BY {keys}" if keys else "")

    agg.replace(finish)
    top = tree if tree is not agg else finish
    finish_sql = _sql(top).replace("{", "{{").replace("}", "}}").replace("iqpmerged", "{merged}")
    return partial_sql, merge_sql, finish_sql, names


def _names_output(order_item: exp.Ordered, outputs: set[str]) -> bool:
    this = order_item.this
    return (isinstance(this, exp.Column) and not this.table and this.name.lower() in outputs) or (
        isinstance(this, exp.Literal) and this.is_int)


def _final_columns(select: exp.Expression, agg: exp.Select) -> list[str]:
    """A SELECT's result columns, down to the aggregation (``*`` expands to its source's columns)."""
    names = []
    for p in select.expressions:
        if isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star)):
            if select is agg:
                raise QueryRefused("SELECT * in an aggregation: list the grouped columns and the aggregates")
            source = (select.args.get("from_") or select.args.get("from")).this
            names.extend(_final_columns(source.this, agg))  # only the aggregation is above it (check_above)
        else:
            names.append(output_name(p))
    return names


# ----------------------------------------------------------------------------- entry point


def decompose(sql: str, *, id: str, streams: Sequence[str] | None = None, static: Sequence[str] | None = None,
              schemas: Mapping[str, Mapping[str, str]] | None = None, allow_single_batch: bool = False,
              title: str = "") -> Query:
    """Split ``sql`` into a :class:`Query`'s per-batch and final steps.

    ``streams`` and ``static`` name the tables the query may read (None: every table is a
    stream, for a syntax and split check without the data). ``schemas`` (table -> column
    -> type), when given, checks every column. A query that cannot be split raises
    :class:`QueryRefused`; with ``allow_single_batch`` it is returned as a single-batch
    query instead (the whole query runs once, after the window's end).
    """
    tree = _parse(sql)
    tree, ctes = inline_ctes(tree)
    used_streams, used_static = check_tables(tree, streams, static, ctes)
    tables = used_streams + used_static
    if schemas:
        check_columns(tree, {t: schemas[t] for t in tables if t in schemas})
    try:
        refuse_nondeterminism(tree)
        agg = find_aggregation(tree)
        check_below(agg, used_streams)
        check_above(tree, agg, tables)
        work = tree.copy()
        agg_in_work = _same_node(tree, agg, work)
        final_cols = _final_columns(tree, agg)
        partial_sql, merge_sql, finish_sql, _inner = build_steps(work, agg_in_work, tables)
    except QueryRefused:
        if not allow_single_batch:
            raise
        return single_batch_query(sql, tree, id=id, streams=used_streams, static=used_static, title=title)
    return Query(id=id, streams=tuple(used_streams), static=tuple(used_static), sql=sql, partial_sql=partial_sql,
                 merge_sql=merge_sql, finish_sql=finish_sql, columns=tuple(final_cols),
                 ordered=bool(tree.args.get("order")), title=title)


def _same_node(tree: exp.Expression, node: exp.Expression, copy: exp.Expression) -> exp.Expression:
    """The node of ``copy`` at the place ``node`` has in ``tree``."""
    for a, b in zip(tree.walk(), copy.walk()):
        if a is node:
            return b
    raise AssertionError("node not in tree")


def single_batch_query(sql: str, tree: exp.Expression, *, id: str, streams: Sequence[str],
                       static: Sequence[str], title: str = "") -> Query:
    """The whole query as the one batch's step; the final step passes its rows through."""
    columns = [output_name(p) for p in tree.expressions] if isinstance(tree, exp.Select) else []
    ordered = bool(tree.args.get("order"))
    return Query(id=id, streams=tuple(streams), static=tuple(static), sql=sql,
                 partial_sql=_placeholders(tree, list(streams) + list(static)),
                 merge_sql="SELECT * FROM {partials}", finish_sql="SELECT * FROM {merged}",
                 columns=tuple(c for c in columns if c != "*"), ordered=ordered, title=title, single_batch=True)
