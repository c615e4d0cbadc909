"""From SQL text to one tree (parse it, inline its CTEs), and what the rules ask of a tree:
which SELECT aggregates, what it reads, and which of its clauses run below its aggregation."""

from __future__ import annotations

from typing import Iterator, Mapping

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import ParseError

from airflow_iqp.query.split._common import DIALECT, QueryRefused
from airflow_iqp.query.split._rewrite import is_agg

#: The clauses of a SELECT that run before its aggregation: what a batch computes.
BELOW = ("from_", "from", "joins", "where", "laterals")


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


def sources(select: exp.Select) -> list[exp.Expression]:
    """What a SELECT reads, in order: its FROM source, then each joined one."""
    clauses = [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or ())]
    return [c.this for c in clauses if c is not None]


def below_parts(select: exp.Select) -> Iterator[exp.Expression]:
    """The clauses of ``select`` that run before its aggregation (FROM, joins, WHERE, lateral views)."""
    for key in BELOW:
        value = select.args.get(key)
        if isinstance(value, list):
            yield from value
        elif value is not None:
            yield value


def own_nodes(select: exp.Select) -> Iterator[exp.Expression]:
    """Nodes of a SELECT's own projections, HAVING, QUALIFY and ORDER BY (not its subqueries)."""
    parts = list(select.expressions) + [select.args.get(k) for k in ("having", "qualify", "order")]
    for part in parts:
        if part is None:
            continue
        for node in part.walk(prune=lambda n: isinstance(n, (exp.Subquery, exp.Select)) and n is not part):
            yield node


def aggregates(select: exp.Expression) -> bool:
    """Whether ``select`` aggregates at its own level: GROUP BY, or an aggregate outside a window."""
    if not isinstance(select, exp.Select):
        return False
    if select.args.get("group"):
        return True
    return any(is_agg(n) and not isinstance(n.parent, exp.Window) for n in own_nodes(select))


def stream_tables(node: exp.Expression, streams: set[str]) -> list[exp.Table]:
    return [t for t in node.find_all(exp.Table) if t.name.lower() in streams and not t.args.get("db")]


def reads(node: exp.Expression, streams: set[str]) -> bool:
    return bool(stream_tables(node, streams))


def names_of(node: exp.Expression, streams: set[str]) -> str:
    """The streams ``node`` reads, as a list for a message."""
    return ", ".join(sorted({t.name.lower() for t in stream_tables(node, streams)}))


def clause_of(node: exp.Expression, select: exp.Select) -> str:
    """The argument of ``select`` that holds ``node`` (``where``, ``expressions``, ``joins``, ...)."""
    while node.parent is not select:
        node = node.parent
    return node.arg_key


def depth(node: exp.Expression) -> int:
    n = 0
    while node.parent is not None:
        node, n = node.parent, n + 1
    return n
