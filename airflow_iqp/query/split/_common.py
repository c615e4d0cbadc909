"""What every rule of the decomposer shares: the SQL dialect, the refusal and its advice."""

from __future__ import annotations

import sqlglot.expressions as exp

from airflow_iqp.errors import ConfigError

DIALECT = "spark"


#: How a query that cannot be split is run anyway, as a DAG file says it. A refusal's advice
#: names it through ``{one_batch}``, filled where the refusal reaches the user: a caller with
#: its own switch (the command line's flag) names that one (:meth:`QueryRefused.pointing_to`).
ONE_BATCH = "cut=OneBatch()"
SINGLE = "or run it as one batch after the window's end ({one_batch})"
ONLY = "run it as one batch after the window's end ({one_batch})"


class QueryRefused(ConfigError):
    """The query cannot be split into batches exactly. The message says why and what to do."""

    def __init__(self, message: str, one_batch: str = ONE_BATCH):
        self.template = " ".join(message.split())
        super().__init__(self.template.replace("{one_batch}", one_batch), field="sql")

    def pointing_to(self, one_batch: str) -> "QueryRefused":
        """The same refusal, its advice naming ``one_batch`` as the way to run the query as one batch."""
        return QueryRefused(self.template, one_batch)


def to_sql(node: exp.Expression, copy: bool = True) -> str:
    """Spark SQL of ``node``; ``copy=False`` for a tree made only to be written out (sqlglot's
    generator copies the tree first, unless told not to)."""
    return node.sql(dialect=DIALECT, copy=copy)


def short(node: exp.Expression, limit: int = 60) -> str:
    text = " ".join(to_sql(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def col(name: str) -> exp.Column:
    return exp.column(name)
