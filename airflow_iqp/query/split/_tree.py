"""From SQL text to one tree: parse it, then inline its CTEs."""

from __future__ import annotations

from typing import Mapping

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import ParseError

from airflow_iqp.query.split._common import DIALECT, QueryRefused


def parse(sql: str) -> exp.Expression:
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


def same_node(tree: exp.Expression, node: exp.Expression, copy: exp.Expression) -> exp.Expression:
    """The node of ``copy`` at the place ``node`` has in ``tree``."""
    for a, b in zip(tree.walk(), copy.walk()):
        if a is node:
            return b
    raise AssertionError("node not in tree")


def sources(select: exp.Select) -> list[exp.Expression]:
    """What a SELECT reads, in order: its FROM source, then each joined one."""
    clauses = [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or ())]
    return [c.this for c in clauses if c is not None]
