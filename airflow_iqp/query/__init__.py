"""What a recurring query computes: the Query model and the SQL decomposer.

Pure Python (sqlglot): no Airflow and no Spark import, so that DAG files parse fast and
the Spark jobs can load a saved query on a driver without Airflow.
"""

from airflow_iqp.query.decompose import QueryRefused, decompose
from airflow_iqp.query.model import Query

__all__ = ["Query", "QueryRefused", "decompose"]
