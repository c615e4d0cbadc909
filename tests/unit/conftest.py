"""Fixtures of the unit tests of the provider's classes."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def spark_connections(monkeypatch):
    """A local Spark master and a Spark Connect server, as Airflow connections
    (``pytestmark = pytest.mark.usefixtures("spark_connections")``)."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
                       json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15002}))
