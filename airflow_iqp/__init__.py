"""airflow-iqp: deadline-aware intermittent query processing on Airflow and Spark.

This module imports neither Airflow nor Spark: the Spark jobs import the package
on executors where Airflow is not installed.
"""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Provider metadata, read by Airflow through the ``apache_airflow_provider`` entry point."""
    return {
        "package-name": "airflow-iqp",
        "name": "Intermittent Query Processing",
        "description": "Deadline-aware intermittent query processing of recurring queries on Apache Spark.",
        "versions": [__version__],
    }
