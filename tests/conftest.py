"""Fixtures shared by the tests: SF 0.01 TPC-H in 6 units, one local SparkSession and a generated event
stream for the Spark-side tests, and Airflow connections for the unit tests of the provider's classes."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
# py4j logs a dropped connection at INFO with its traceback, from the finalizer of a
# connection whose JVM has gone, which the garbage collector may run at any allocation.
# Run inside ast.parse (tests/test_comments.py parses the sources after the Spark tests), the
# traceback's formatting parses source lines itself on Python 3.11, and the outer parse
# then fails with "SystemError: AST constructor recursion depth mismatch" (CPython
# gh-106905). py4j's warnings and errors still show.
logging.getLogger("py4j").setLevel(logging.WARNING)
# The repository root, so tests import the shared DuckDB reference as tests.support.reference.
sys.path.insert(0, str(HERE.parent))

N_UNITS = 6


@pytest.fixture(scope="session")
def tpch_dir(tmp_path_factory) -> Path:
    """SF 0.01 generated once per session: units/000000..000005 and static/."""
    from airflow_iqp.inputs.tpch import generate

    out = tmp_path_factory.mktemp("tpch") / "sf001"
    generate(0.01, N_UNITS, out)
    return out


@pytest.fixture(scope="session")
def units(tpch_dir) -> list[Path]:
    from airflow_iqp.landing import list_units
    from tests.support.batches import TPCH

    found = list_units(tpch_dir / "units", TPCH)
    assert len(found) == N_UNITS
    return found


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (moto's, as a process: :mod:`iqp_dev.s3`) for the session,
    its credentials and endpoint in this process's environment meanwhile."""
    from iqp_dev.s3 import s3_server as serve

    with serve(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="session")
def spark():
    """One local[2] session for the in-process tests (same run_batch/run_final the jobs call)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]").appName("airflow-iqp-tests")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.autoBroadcastJoinThreshold", str(64 << 20))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def events_dir(tmp_path_factory) -> Path:
    """The generated non-TPC-H event stream (tests/support/events.py): 6 units and a categories table."""
    from tests.support.events import generate_events

    return generate_events(tmp_path_factory.mktemp("events"))


@pytest.fixture
def spark_connections(monkeypatch):
    """A local Spark master and a Spark Connect server, as Airflow connections
    (``pytestmark = pytest.mark.usefixtures("spark_connections")``)."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
                       json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15002}))
