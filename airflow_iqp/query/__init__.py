"""What a recurring query computes: the Query model and the SQL decomposer.

Pure Python: no Airflow and no Spark import, so that DAG files parse fast. The decomposer
(:mod:`airflow_iqp.query.split`, sqlglot) is imported on first use only: a Spark driver
loads a saved, already split query (:mod:`airflow_iqp.query.store`) and needs no sqlglot.
"""

from airflow_iqp.query.model import Query

__all__ = ["Query", "QueryRefused", "decompose"]


def __getattr__(name: str):
    if name in ("decompose", "QueryRefused"):
        from airflow_iqp.query import split

        return getattr(split, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
