"""What every rule of the decomposer shares: the SQL dialect, the refusal and its advice."""

from __future__ import annotations

import sqlglot.expressions as exp

from airflow_iqp.errors import ConfigError

DIALECT = "spark"


class QueryRefused(ConfigError):
    """The query cannot be split into batches exactly. The message says why and what to do."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()), field="sql")


SINGLE = "or run it as one batch after the window's end (cut=OneBatch(), or --allow-single-batch)"
ONLY = "run it as one batch after the window's end (cut=OneBatch(), or --allow-single-batch)"


def to_sql(node: exp.Expression) -> str:
    return node.sql(dialect=DIALECT)


def short(node: exp.Expression, limit: int = 60) -> str:
    text = " ".join(to_sql(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def col(name: str) -> exp.Column:
    return exp.column(name)
