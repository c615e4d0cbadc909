"""One aggregation's three steps: its partial per batch, its merge, and its finish (what the
aggregation's own SELECT computes over its merged groups, in place of the aggregation in the
final step's query)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import sqlglot.expressions as exp

from airflow_iqp.query.split._common import QueryRefused, to_sql
from airflow_iqp.query.split._grouping import group_keys, grouping_bit, grouping_sets_clause
from airflow_iqp.query.split._naming import names_output, output_name
from airflow_iqp.query.split._rewrite import Split, rewrite_above
from airflow_iqp.query.split._tree import BELOW, sources

#: A table name in a finish step, replaced by ``{merged}`` (``{merged<i>}``) when it is written out.
MERGED_MARK = "iqpmerged"


@dataclass
class Part:
    """What a batch computes for one aggregation, and how its partial merges."""

    index: int
    keys: list[tuple[str, exp.Expression]]    # grouping columns (keys, DISTINCT arguments): name, expression
    bits: list[tuple[str, exp.Expression]]    # GROUPING(key) per key, with grouping sets
    states: list[tuple[str, exp.Expression]]  # aggregate states: name, expression
    below: dict                               # its FROM, joins, WHERE and lateral views
    group: exp.Group | None                   # its GROUP BY (a batch's)
    merge_sql: str

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.keys + self.bits + self.states]

    @property
    def fusable(self) -> bool:
        """Without grouping sets, it can share one scan with the aggregations of the same FROM clause."""
        return not self.bits

    @property
    def source(self) -> str:
        """Its FROM clause, joins and lateral views, as SQL: aggregations of the same one can share a scan."""
        parts = [self.below.get("from_") or self.below.get("from"), *(self.below.get("joins") or ()),
                 *(self.below.get("laterals") or ())]
        return " ".join(to_sql(p) for p in parts if p is not None)

    def select(self) -> exp.Select:
        """Its per-batch step: a SELECT of its partial columns over the batch's rows."""
        items = [exp.alias_(e.copy(), n) for n, e in self.keys + self.bits + self.states]
        out = exp.Select(expressions=items)
        for key, value in self.below.items():
            out.set(key, [v.copy() for v in value] if isinstance(value, list) else value.copy())
        if self.group is not None:
            out.set("group", self.group.copy())
        return out


def placeholders(tree: exp.Expression, tables: Sequence[str], copy: bool = True) -> str:
    """SQL text with each table read as a ``{name}`` DataFrame reference (``spark.sql`` kwargs);
    ``copy=False`` marks the tables in ``tree`` itself (a tree built for this text only)."""
    tree = tree.copy() if copy else tree
    marks = {}
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if name in tables and not table.args.get("db"):
            mark = f"iqpref{len(marks)}x{name}"
            marks[mark] = name
            alias = table.alias or table.name
            table.replace(exp.Table(this=exp.to_identifier(mark),
                                    alias=exp.TableAlias(this=exp.to_identifier(alias))))
    text = to_sql(tree, copy=False).replace("{", "{{").replace("}", "}}")
    for mark, name in marks.items():
        text = text.replace(mark, "{" + name + "}")
    return text


def split_aggregation(agg: exp.Select, index: int, several: bool) -> tuple[Part, exp.Select]:
    """(its partial and merge, its finish: the aggregation's SELECT over its merged groups,
    read from table ``iqpmerged`` (``iqpmerged<index>`` when the query has ``several``))."""
    keys, sets = group_keys(agg)
    prefix = f"_{index}" if several else ""
    split = Split(keys=keys, sets=sets, prefix=prefix, raw={s.alias_or_name.lower() for s in sources(agg)})
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
    for key in ("having", "group", "joins", "laterals"):
        finish.set(key, None)
    finish.set("where", exp.Where(this=rewrite_above(having.this, split, aliases)) if having else None)
    if agg.args.get("order"):
        order = agg.args["order"].copy()
        out = {n.lower() for n in names}
        order.set("expressions", [o if names_output(o, out) else
                                  o.__class__(**{**o.args, "this": rewrite_above(o.this, split, aliases)})
                                  for o in order.expressions])
        finish.set("order", order)
    if agg.args.get("qualify") is not None:
        finish.set("qualify", exp.Qualify(this=rewrite_above(agg.args["qualify"].this, split, aliases)))
    merged = MERGED_MARK + (str(index) if several else "")
    finish.set("from_" if "from_" in agg.args else "from", exp.From(this=exp.Table(this=exp.to_identifier(merged))))
    return _part(agg, split, index, several), finish


def _part(agg: exp.Select, split: Split, index: int, several: bool) -> Part:
    p = split.prefix
    keys = [(f"{p}_k{i}", k) for i, k in enumerate(split.keys)] + [(f"{p}_d{i}", d)
                                                                    for i, d in enumerate(split.distinct)]
    bits = [(f"{p}_g{i}", grouping_bit(k)) for i, k in enumerate(split.keys)] if split.sets is not None else []
    states = list(split.states) or ([] if keys else [(f"{p}_rows", exp.Count(this=exp.Star()))])
    below = {k: agg.args[k] for k in BELOW if agg.args.get(k)}
    group = None
    if split.sets is not None:
        group = grouping_sets_clause(split.keys, split.distinct, split.sets)
    elif split.keys or split.distinct:
        group = exp.Group(expressions=[k.copy() for k in split.keys + split.distinct])
    return Part(index, keys, bits, states, below, group, _merge_sql(split, index if several else None))


def _merge_sql(split: Split, index: int | None) -> str:
    """The merge of the aggregation's partial rows (of aggregation ``index`` of a shared partial)."""
    keys = split.key_names
    merged = [f"_k{i}" for i in range(len(split.keys))] + [f"_g{i}" for i in range(len(split.bit_names))]
    only = "" if index is None else f" WHERE _agg = {index}"
    source = "{partials}" + only
    if split.windows:
        source = f"(SELECT *, {', '.join(f'{w} AS {n}' for n, w in split.windows)} FROM {{partials}}{only}) AS p"
    cols = ", ".join([k if k == m else f"{k} AS {m}" for k, m in zip(keys, merged)]
                     + [f"{m} AS {n}" for n, m in split.merges]) or "COUNT(*) AS _rows"
    return f"SELECT {cols} FROM {source}" + (f" GROUP BY {', '.join(keys)}" if keys else "")


def read_above(top: exp.Expression, static: Sequence[str]) -> list[str]:
    """The static tables the final step reads, in order of appearance: those joined above
    the aggregations (each aggregation is its merged rows there)."""
    names = [t.name.lower() for t in top.find_all(exp.Table) if not t.args.get("db")]
    return [n for n in dict.fromkeys(names) if n in static]
