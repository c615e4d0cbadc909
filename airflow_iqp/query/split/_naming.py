"""Output naming: the result's columns, named as Spark names them."""

from __future__ import annotations

import sqlglot.expressions as exp

from airflow_iqp.query.split._common import DIALECT, QueryRefused


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
            source = (select.args.get("from_") or select.args.get("from")).this
            names.extend(final_columns(source.this, agg))  # only the aggregation is above it (check_above)
        else:
            names.append(output_name(p))
    return names
