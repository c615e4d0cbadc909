"""Output naming: the result's columns, named as Spark names them."""

from __future__ import annotations

import sqlglot.expressions as exp

from airflow_iqp.query.split._common import DIALECT, QueryRefused, short
from airflow_iqp.query.split._tree import sources


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



def names_output(order_item: exp.Ordered, outputs: set[str]) -> bool:
    this = order_item.this
    return (isinstance(this, exp.Column) and not this.table and this.name.lower() in outputs) or (
        isinstance(this, exp.Literal) and this.is_int)


def final_columns(select: exp.Expression, agg: exp.Select) -> list[str]:
    """A SELECT's result columns, down to the aggregation (``*`` expands to its source's columns)."""
    names = []
    for p in select.expressions:
        if isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star)):
            if select is agg:
                raise QueryRefused("SELECT * in an aggregation: list the grouped columns and the aggregates")
            names.extend(final_columns(_star_source(select, agg, p), agg))
        else:
            names.append(output_name(p))
    return names


def _star_source(select: exp.Select, agg: exp.Select, star: exp.Expression) -> exp.Expression:
    """The query a ``*`` above the aggregation expands to: the source that holds the
    aggregation (only static tables are joined to it, find_aggregation), when the star
    is over it alone or names it (``t.*``); a static table's columns are not known here."""
    source = next(s for s in sources(select) if any(n is agg for n in s.walk()))
    qualifier = star.table.lower() if isinstance(star, exp.Column) else ""
    if qualifier != source.alias_or_name.lower() and (qualifier or select.args.get("joins")):
        raise QueryRefused(f"SELECT {short(star)} over a join above the aggregation: list the result's columns "
                           f"({source.alias_or_name}.* for the aggregation's)")
    return source.this
