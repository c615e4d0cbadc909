"""Spark's types of a split query's columns, from its tables' schemas, without Spark.

sqlglot's type annotation walks each step's scopes; the types are Spark's own rules (ANSI
mode, as Spark 4 runs): SUM and AVG widen (a decimal(p, s) to decimal(p + 10, s) and
decimal(p + 4, s + 4)), decimal arithmetic follows Spark's precision and scale rules (an
integer literal beside a decimal counts its digits; an integer column counts as
decimal(10, 0) or decimal(20, 0)), and an integer beside a float is a double. Only the
expressions listed here are typed; any other gives no type (``None``), never a guess: a
shown type is the one Spark gives (tests/query/test_split_types.py checks them against it).
"""

from __future__ import annotations

import re
from typing import Mapping

import sqlglot
import sqlglot.expressions as exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.helper import ensure_list
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from airflow_iqp.query.model import Query, resolve_types
from airflow_iqp.query.split._common import DIALECT
from airflow_iqp.query.split._naming import output_name

T = exp.DType
_INTEGRAL = {T.TINYINT: 3, T.SMALLINT: 5, T.INT: 10, T.BIGINT: 20}  # digits: Spark's decimal for each
_ORDER = [T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.FLOAT, T.DOUBLE]
#: Spark's simpleString of the types sqlglot reads Spark's names as (TIMESTAMP is TIMESTAMPTZ there).
_NAMES = {T.TINYINT: "tinyint", T.SMALLINT: "smallint", T.INT: "int", T.BIGINT: "bigint", T.FLOAT: "float",
          T.DOUBLE: "double", T.BOOLEAN: "boolean", T.DATE: "date", T.TIMESTAMPTZ: "timestamp",
          T.TIMESTAMPLTZ: "timestamp", T.TIMESTAMPNTZ: "timestamp_ntz", T.TEXT: "string", T.BINARY: "binary"}
_REF = re.compile(r"\{\{|\}\}|\{(\w+)\}")


def step_types(query: Query, schemas: Mapping[str, Mapping[str, str]]) -> tuple[dict, dict]:
    """(partial column -> type, result column -> type) of a SQL query over tables of these
    schemas (column -> Spark type), each type Spark's ``simpleString`` or None (not known).
    The partial of several aggregations is their columns' union, beside ``_agg``."""
    tables = {t: schemas.get(t, {}) for t in query.tables}
    if query.aggregations:
        partial: dict[str, str | None] = {"_agg": "int"}
        for agg in query.aggregations:
            partial |= select_types(agg.partial_sql, tables)
    else:
        partial = select_types(query.partial_sql, tables)
    merged = {name: select_types(resolve_types(merge, partial, unknown=lambda m: "UNKNOWN"),  # sqlglot's "no type"
                                 {"partials": partial})
              for name, merge in zip(query.merged_names, query.merges)}
    result = select_types(query.finish_sql, {**merged, **{t: schemas.get(t, {}) for t in query.final_static}})
    return partial, dict(zip(query.columns, result.values())) if len(result) == len(query.columns) else {}


def select_types(sql: str, tables: Mapping[str, Mapping[str, str | None]]) -> dict[str, str | None]:
    """The output columns of one step (``{table}`` references read ``tables``) and their types."""
    text = _REF.sub(lambda m: m[1] or m[0][0], sql)
    try:
        tree = sqlglot.parse_one(text, read=DIALECT)
        names = [output_name(p) for p in tree.expressions]
        schema = {t: {c: (ty or "UNKNOWN") for c, ty in cols.items()} for t, cols in tables.items()}
        tree = qualify(tree, schema=schema, dialect=DIALECT, validate_qualify_columns=False,
                       quote_identifiers=False, identify=False)
        tree = annotate_types(tree, schema=schema, dialect=DIALECT, expression_metadata=_METADATA)
    except SqlglotError:
        return {}
    if len(names) != len(tree.expressions) or "*" in names:
        names = [p.alias_or_name for p in tree.expressions]
    return {n: _name(p.type) for n, p in zip(names, tree.expressions)}


def _name(t: exp.DataType | None) -> str | None:
    if t is None:
        return None
    if t.this == T.DECIMAL:
        return "decimal({},{})".format(*_ps(t))
    return _NAMES.get(t.this)


def _ps(t: exp.DataType) -> tuple[int, int]:
    """A decimal's (precision, scale); DECIMAL alone is decimal(10,0), DECIMAL(p) decimal(p,0)."""
    params = [int(p.name) for p in t.expressions]
    p, s = (params + [10, 0][len(params):])[:2]
    return p, s


def _dec(p: int, s: int) -> exp.DataType:
    return exp.DataType.build(f"DECIMAL({p},{s})")


def _adjust(p: int, s: int) -> exp.DataType:
    """Spark's DecimalType.adjustPrecisionScale: above 38 digits, keep the integer digits and
    at least 6 of the scale."""
    if p <= 38:
        return _dec(p, s)
    return _dec(38, max(38 - (p - s), min(s, 6)))


def _kind(node: exp.Expression) -> T:
    return node.type.this if node.type else T.UNKNOWN


def _int_literal(node: exp.Expression) -> int | None:
    """The value of an integer literal (``-1`` and ``(1)`` too), else None."""
    sign = 1
    while isinstance(node, (exp.Paren, exp.Neg)):
        sign = -sign if isinstance(node, exp.Neg) else sign
        node = node.this
    return sign * int(node.name) if isinstance(node, exp.Literal) and node.is_int else None


def _as_decimal(node: exp.Expression, literal: bool) -> tuple[int, int] | None:
    k = _kind(node)
    if k == T.DECIMAL:
        return _ps(node.type)
    if k in _INTEGRAL:
        value = _int_literal(node) if literal else None
        return (len(str(abs(value))), 0) if value is not None else (_INTEGRAL[k], 0)
    return None


def _wider(types: list[exp.DataType]) -> exp.DataType | T:
    """Spark's wider common type (CASE, COALESCE, IF, GREATEST): UNKNOWN where it is not numeric or equal."""
    types = [t for t in types if t is not None and t.this != T.NULL]
    if not types:
        return T.NULL
    out = types[0]
    for t in types[1:]:
        if t == out:
            continue
        a, b = out.this, t.this
        if T.DECIMAL in (a, b) and {a, b} <= {T.DECIMAL, *_INTEGRAL}:
            (p1, s1), (p2, s2) = [_ps(x) if x.this == T.DECIMAL else (_INTEGRAL[x.this], 0) for x in (out, t)]
            s = max(s1, s2)
            out = _dec(min(38, max(p1 - s1, p2 - s2) + s), min(38, s))
        elif a in _ORDER + [T.DECIMAL] and b in _ORDER + [T.DECIMAL]:
            out = _numeric_wider(a, b)
        else:
            return T.UNKNOWN
    return out


def _numeric_wider(a: T, b: T) -> exp.DataType:
    if T.DECIMAL in (a, b) or T.DOUBLE in (a, b):
        return exp.DataType.build("DOUBLE")
    wider = max(a, b, key=_ORDER.index)
    return exp.DataType.build("DOUBLE" if wider == T.FLOAT and a != b else wider.value)


_DECIMAL_RULES = {
    exp.Add: lambda p1, s1, p2, s2: (max(p1 - s1, p2 - s2) + max(s1, s2) + 1, max(s1, s2)),
    exp.Sub: lambda p1, s1, p2, s2: (max(p1 - s1, p2 - s2) + max(s1, s2) + 1, max(s1, s2)),
    exp.Mul: lambda p1, s1, p2, s2: (p1 + p2 + 1, s1 + s2),
    exp.Div: lambda p1, s1, p2, s2: (p1 - s1 + s2 + max(6, s1 + p2 + 1), max(6, s1 + p2 + 1)),
    exp.Mod: lambda p1, s1, p2, s2: (min(p1 - s1, p2 - s2) + max(s1, s2), max(s1, s2)),
}
_DECIMAL_RULES[exp.SafeDivide] = _DECIMAL_RULES[exp.Div]


def _arithmetic(self, e: exp.Expression) -> None:
    left, right = e.this, e.expression
    a, b = _kind(left), _kind(right)
    numeric = _ORDER + [T.DECIMAL]
    if a not in numeric or b not in numeric:
        out = T.UNKNOWN
    elif T.DECIMAL in (a, b) and T.FLOAT not in (a, b) and T.DOUBLE not in (a, b):
        out = _adjust(*_DECIMAL_RULES[type(e)](*_as_decimal(left, True), *_as_decimal(right, True)))
    elif isinstance(e, (exp.Div, exp.SafeDivide)):
        out = exp.DataType.build("DOUBLE")
    else:
        out = _numeric_wider(a, b)
    self._set_type(e, out)


def _sum(self, e: exp.Expression) -> None:
    k = _kind(e.this)
    out = {**dict.fromkeys(_INTEGRAL, T.BIGINT), T.FLOAT: T.DOUBLE, T.DOUBLE: T.DOUBLE}.get(k, T.UNKNOWN)
    if k == T.DECIMAL:
        p, s = _ps(e.this.type)
        out = _dec(min(38, p + 10), s)
    self._set_type(e, out)


def _avg(self, e: exp.Expression) -> None:
    k = _kind(e.this)
    out = T.DOUBLE if k in _ORDER else T.UNKNOWN
    if k == T.DECIMAL:
        p, s = _ps(e.this.type)
        out = _dec(min(38, p + 4), min(38, s + 4))
    self._set_type(e, out)


def _round(self, e: exp.Expression) -> None:
    k, digits = _kind(e.this), _int_literal(e.args.get("decimals") or exp.Literal.number(0))
    out = e.this.type if k in _ORDER else T.UNKNOWN
    if k == T.DECIMAL and digits is not None and digits >= 0:
        p, s = _ps(e.this.type)
        out = _dec(min(38, p - s + 1 + min(s, digits)), min(s, digits))
    self._set_type(e, out)


def _literal(self, e: exp.Literal) -> None:
    if e.is_string:
        out = T.TEXT
    elif e.is_int:
        v = int(e.name)
        out = T.INT if v < 2 ** 31 else T.BIGINT if v < 2 ** 63 else _dec(len(str(v)), 0)
    elif re.fullmatch(r"\d*\.\d*", e.name):
        whole, frac = e.name.split(".")
        out = _dec(max(len((whole + frac).lstrip("0")), len(frac), 1), len(frac))
    else:
        out = T.DOUBLE
    self._set_type(e, out)


_HLL = {"hll_sketch_agg": T.BINARY, "hll_union_agg": T.BINARY, "hll_sketch_estimate": T.BIGINT}


def _returns(t: T) -> dict:
    return {"returns": t}


def _by(*keys: str) -> dict:
    """The wider type of the arguments under ``keys``."""
    def annotate(self, e: exp.Expression) -> None:
        args = [a for k in keys for a in ensure_list(e.args.get(k)) if a is not None]
        self._set_type(e, _wider([a.type for a in args]))

    return {"annotator": annotate}


_SPARK = Dialect.get_or_raise(DIALECT).EXPRESSION_METADATA
_METADATA = {
    **{cls: _SPARK[cls] for cls in (exp.Alias, exp.Paren, exp.Cast, exp.TryCast, exp.DataType, exp.Subquery)},
    **{cls: _returns(T.BOOLEAN) for cls in (*exp.Predicate.__subclasses__(), exp.And, exp.Or, exp.Not, exp.In,
                                             exp.Between, exp.Like, exp.ILike, exp.Is, exp.Boolean, exp.LogicalAnd,
                                             exp.LogicalOr, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)},
    **{cls: _returns(T.BIGINT) for cls in (exp.Count, exp.CountIf, exp.ApproxDistinct, exp.IntDiv, exp.GroupingId)},
    exp.Grouping: _returns(T.TINYINT),
    **{cls: _returns(T.DOUBLE) for cls in (exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevPop,
                                            exp.StddevSamp, exp.Sqrt)},
    **{cls: _returns(T.TEXT) for cls in (exp.Upper, exp.Lower)},
    **{cls: _returns(T.INT) for cls in (exp.Year, exp.Month, exp.Length, exp.RowNumber, exp.Rank, exp.DenseRank)},
    **{cls: {"annotator": _arithmetic} for cls in _DECIMAL_RULES},
    **{cls: _by("this") for cls in (exp.Min, exp.Max, exp.Abs, exp.Neg, exp.Window, exp.Filter, exp.Nullif,
                                     exp.AnyValue)},
    **{cls: _by("this", "expressions") for cls in (exp.Coalesce, exp.Greatest, exp.Least, exp.Distinct)},
    exp.If: _by("true", "false"),
    exp.Case: {"annotator": lambda self, e: self._set_type(
        e, _wider([i.args["true"].type for i in e.args["ifs"]] + [e.args["default"].type if e.args.get("default")
                                                                   else None]))},
    exp.Sum: {"annotator": _sum}, exp.Avg: {"annotator": _avg}, exp.Round: {"annotator": _round},
    exp.Literal: {"annotator": _literal}, exp.Null: _returns(T.NULL),
    exp.Anonymous: {"annotator": lambda self, e: self._set_type(e, _HLL.get(e.name.lower(), T.UNKNOWN))},
}
