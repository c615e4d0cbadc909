"""Output naming: the result's columns, named as Spark names them."""

from __future__ import annotations

import sqlglot.expressions as exp

from airflow_iqp.query.split._common import DIALECT, QueryRefused, short
from airflow_iqp.query.split._tree import aggregates, sources


def output_name(item: exp.Expression) -> str:
    """A SELECT item's result column name: its alias, its column's name, or its SQL as Spark writes it."""
    if item.alias:
        return item.alias
    if isinstance(item, exp.Column):
        return item.name
    if isinstance(item, exp.Subquery):
        return "scalarsubquery()"  # Spark's name for an unnamed scalar subquery
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


def final_columns(node: exp.Expression) -> list[str]:
    """A query's result columns (a set operation's are its first branch's; ``*`` expands to
    the columns of the subquery it reads)."""
    if isinstance(node, exp.SetOperation):
        return final_columns(node.this)
    if isinstance(node, exp.Subquery):
        return final_columns(node.this)
    names = []
    for p in node.expressions:
        if isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star)):
            names.extend(final_columns(_star_source(node, p)))
        else:
            names.append(output_name(p))
    return names


def _star_source(select: exp.Select, star: exp.Expression) -> exp.Expression:
    """The subquery a ``*`` expands to: the one source of ``select``, or the one it names
    (``t.*``). A static table's columns are not known here, nor are an aggregation's own."""
    if aggregates(select):
        raise QueryRefused("SELECT * in an aggregation: list the grouped columns and the aggregates")
    found = sources(select)
    qualifier = star.table.lower() if isinstance(star, exp.Column) else ""
    if qualifier:
        found = [s for s in found if s.alias_or_name.lower() == qualifier]
    elif len(found) > 1:
        named = next((s.alias_or_name for s in found if isinstance(s, exp.Subquery)), "t")
        raise QueryRefused(f"SELECT {short(star)} over a join above the aggregation: list the result's columns "
                           f"({named}.* for the aggregation's)")
    if len(found) != 1 or not isinstance(found[0], exp.Subquery):
        what = found[0].name if found and isinstance(found[0], exp.Table) else short(star)
        raise QueryRefused(f"SELECT {short(star)} over {what}: its columns are not known here; list them")
    return found[0].this
