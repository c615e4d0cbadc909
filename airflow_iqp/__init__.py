"""airflow-iqp: deadline-aware intermittent query processing on Airflow and Spark.

This module imports neither Airflow nor Spark: the Spark jobs import the package
on executors where Airflow is not installed.
"""

from __future__ import annotations

__version__ = "0.1.0"

# The settings of iqp_dag: pure Python, so importing them here keeps this module free of both.
from airflow_iqp.backends import SparkConnect, SparkSubmit  # noqa: E402
from airflow_iqp.options import Alerts, Algorithm1, Arrival, MinBatches, OneBatch  # noqa: E402

__all__ = ["Alerts", "Algorithm1", "Arrival", "MinBatches", "OneBatch", "SparkConnect", "SparkSubmit",
           "get_provider_info"]


def get_provider_info() -> dict:
    """Provider metadata, read by Airflow through the ``apache_airflow_provider`` entry point.

    The plugin (timetable, priority strategies, deadline reference) is not listed here:
    it registers through the ``airflow.plugins`` entry point, and Airflow rejects a
    plugin registered twice.
    """
    return {
        "package-name": "airflow-iqp",
        "name": "Intermittent Query Processing",
        "description": "Deadline-aware intermittent query processing of recurring queries on Apache Spark: "
                       "plans the fewest batches that meet each window's deadline.",
        "versions": [__version__],
        "integrations": [{
            "integration-name": "Intermittent Query Processing",
            "external-doc-url": "https://pypi.org/project/airflow-iqp/",
            "tags": ["software"],
        }],
        "operators": [{"integration-name": "Intermittent Query Processing",
                       "python-modules": ["airflow_iqp.operators.plan", "airflow_iqp.operators.batch",
                                          "airflow_iqp.operators.final"]}],
        "sensors": [{"integration-name": "Intermittent Query Processing",
                     "python-modules": ["airflow_iqp.sensors.ready"]}],
        "triggers": [{"integration-name": "Intermittent Query Processing",
                      "python-modules": ["airflow_iqp.triggers.ready"]}],
        "hooks": [{"integration-name": "Intermittent Query Processing",
                   "python-modules": ["airflow_iqp.hooks.state", "airflow_iqp.hooks.spark"]}],
        "notifications": ["airflow_iqp.notifications.deadline.DeadlineRiskNotifier"],
        "config": {
            "iqp": {
                "description": "Deadline-aware intermittent query processing.",
                "options": {
                    "state_dir": {"description": "Where claims, partials, results and the cost history live "
                                                 "(default: $AIRFLOW_HOME/iqp/state).",
                                  "version_added": "0.1.0", "type": "string", "example": "/data/iqp/state",
                                  "default": ""},
                    "spark_conn_id": {"description": "The Spark connection batches are submitted through.",
                                      "version_added": "0.1.0", "type": "string", "example": None,
                                      "default": "spark_default"},
                    "spark_connect_conn_id": {"description": "The spark_connect connection (sc://host:port) "
                                                             "that batches and finals use with "
                                                             "backend='spark-connect'.",
                                              "version_added": "0.2.0", "type": "string", "example": None,
                                              "default": "spark_connect_default"},
                    "poll_interval": {"description": "Seconds between readiness checks of a landing directory "
                                                     "in the triggerer.",
                                      "version_added": "0.1.0", "type": "float", "example": None, "default": "2"},
                    "ship_package": {"description": "Ship airflow_iqp to the executors with --py-files "
                                                    "(needed on a real cluster).",
                                     "version_added": "0.1.0", "type": "boolean", "example": None,
                                     "default": "False"},
                },
            },
        },
    }
