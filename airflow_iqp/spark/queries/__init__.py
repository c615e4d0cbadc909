"""The query catalogue: per query, its streams, static tables, partial step and final step.

A query's per-batch step is SQL over the batch's stream tables and the static tables,
referenced as ``{orders}``, ``{lineitem}``, ``{customer}`` ... ; its final step is SQL over
``{partials}``, the union of all partial results of the window. Both run through
``SparkSession.sql(text, **dataframes)``, which works in classic Spark and Spark Connect.

Rules the catalogue follows (the paper, section 6.1):

* joins with static tables and the orders-lineitem join happen inside a batch;
* averages travel as sums and counts, divided in the final step;
* ratios (Q14) and ORDER BY ... LIMIT (Q3, Q10) are computed only in the final step;
* the final result keeps the names and order of the query's SELECT list.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_iqp.errors import ConfigError


@dataclass(frozen=True)
class Query:
    """One recurring query of the catalogue."""

    id: str
    title: str
    streams: tuple[str, ...]
    static: tuple[str, ...]
    partial_sql: str
    final_sql: str
    columns: tuple[str, ...]
    ordered: bool = False  # the final result has a defined row order (ORDER BY)

    def partial(self, spark, tables: dict):
        """The per-batch partial aggregate, a DataFrame."""
        return spark.sql(self.partial_sql, **{k: tables[k] for k in self.streams + self.static})

    def final(self, spark, partials):
        """The final result from the union of all partials, a DataFrame."""
        return spark.sql(self.final_sql, partials=partials)

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "streams": list(self.streams), "static": list(self.static),
                "columns": list(self.columns), "ordered": self.ordered}


_CATALOGUE: dict[str, Query] = {}


def register(query: Query) -> Query:
    key = query.id.lower()
    if key in _CATALOGUE:
        raise ValueError(f"query {query.id} registered twice")
    _CATALOGUE[key] = query
    return query


def _load() -> None:
    if not _CATALOGUE:
        from airflow_iqp.spark.queries import custom, tpch  # noqa: F401  (they register)


def get_query(qid: str) -> Query:
    """The catalogued query ``qid`` (case-insensitive: ``"CQ2"``, ``"q4"``)."""
    _load()
    try:
        return _CATALOGUE[str(qid).strip().lower()]
    except KeyError:
        raise ConfigError(f"unknown query {qid!r}; known: {', '.join(list_queries())}", field="query") from None


def list_queries() -> list[str]:
    """Ids of all catalogued queries, in catalogue order."""
    _load()
    return list(_CATALOGUE)
