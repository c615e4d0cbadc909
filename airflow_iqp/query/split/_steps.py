"""The three SQL steps of a validated query: partial (per batch), merge and finish."""

from __future__ import annotations

from typing import Sequence

import sqlglot.expressions as exp

from airflow_iqp.query.split._common import QueryRefused, to_sql
from airflow_iqp.query.split._naming import names_output, output_name
from airflow_iqp.query.split._rewrite import Split, group_keys, rewrite_above


def placeholders(tree: exp.Expression, tables: Sequence[str]) -> str:
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
    text = to_sql(tree).replace("{", "{{").replace("}", "}}")
    for mark, name in marks.items():
        text = text.replace(mark, "{" + name + "}")
    return text


def build_steps(tree: exp.Expression, agg: exp.Select, tables: Sequence[str],
                static: Sequence[str]) -> tuple[str, str, str, list[str]]:
    """(partial SQL, merge SQL, finish SQL, the static tables the finish reads) of a validated query."""
    split = Split(keys=group_keys(agg))
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
        order.set("expressions", [o if names_output(o, out) else
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
    partial_sql = placeholders(partial, tables)

    keys = ", ".join(split.key_names)
    source = "{partials}"
    if split.windows:
        source = f"(SELECT *, {', '.join(f'{w} AS {n}' for n, w in split.windows)} FROM {{partials}}) AS p"
    cols = ", ".join(split.key_names + [f"{m} AS {n}" for n, m in split.merges]) or "COUNT(*) AS _rows"
    merge_sql = f"SELECT {cols} FROM {source}" + (f" GROUP BY {keys}" if keys else "")

    agg.replace(finish)
    top = tree if tree is not agg else finish
    finish_sql = placeholders(top, static).replace("iqpmerged", "{merged}")
    return partial_sql, merge_sql, finish_sql, read_above(top, static)


def read_above(top: exp.Expression, static: Sequence[str]) -> list[str]:
    """The static tables the final step reads, in order of appearance: those joined above
    the aggregation (the aggregation itself is the merged rows there)."""
    names = [t.name.lower() for t in top.find_all(exp.Table) if not t.args.get("db")]
    return [n for n in dict.fromkeys(names) if n in static]
