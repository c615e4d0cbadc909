"""Spark's S3A connector (the jars of scripts/setup_spark_jars.sh, the conf of iqp_dev.s3a)
against the session's moto server: a DataFrame written as parquet to an ``s3a://`` path reads
back the same, with the committer's ``_SUCCESS`` object beside it.

The session runs in a child process: ``spark.jars`` only reaches the driver's classpath when
the JVM starts, and this process's JVM may already be running for the shared ``spark``
fixture, without the jars and with options that should not change under the other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iqp_dev.s3 import CREDENTIALS
from iqp_dev.s3a import s3a_jars, s3a_spark_conf

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
ROWS = [(i, f"name-{i}", i * 0.5) for i in range(100)]


def test_parquet_round_trip_through_s3a(s3_server):
    s3a_jars()  # missing jars fail here, naming scripts/setup_spark_jars.sh
    bucket = s3_server.bucket("spark-s3a")
    path = bucket.replace("s3://", "s3a://", 1) + "/round-trip"
    proc = subprocess.run([sys.executable, "-m", "tests.iqp_dev.test_s3a", s3_server.endpoint, path],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(tuple(r) for r in got["rows"]) == ROWS
    assert got["second_write"] == "refused"

    import boto3

    keys = [o["Key"] for o in boto3.client("s3", endpoint_url=s3_server.endpoint)
            .list_objects_v2(Bucket="spark-s3a", Prefix="round-trip/")["Contents"]]
    assert "round-trip/_SUCCESS" in keys
    assert any(k.endswith(".parquet") for k in keys) and not any("_temporary" in k for k in keys)


def _child(endpoint: str, path: str) -> None:
    """In the child: one local session with the S3A conf; write ``ROWS`` to ``path``
    (mode "error", a fresh path), read them back, try the write again; print JSON."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import SparkSession

    t0 = time.monotonic()
    builder = (SparkSession.builder.master("local[2]").appName("s3a-round-trip")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC"))
    for key, value in s3a_spark_conf(endpoint, CREDENTIALS["AWS_ACCESS_KEY_ID"],
                                     CREDENTIALS["AWS_SECRET_ACCESS_KEY"]).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        t1 = time.monotonic()
        df = spark.createDataFrame(ROWS, "id long, name string, score double").repartition(2)
        df.write.mode("error").parquet(path)
        t2 = time.monotonic()
        rows = [list(r) for r in spark.read.parquet(path).collect()]
        t3 = time.monotonic()
        try:
            df.write.mode("error").parquet(path)
            second = "written"
        except AnalysisException:
            second = "refused"
    finally:
        spark.stop()
    print(f"s3a: session {t1 - t0:.1f} s, write {t2 - t1:.1f} s, read {t3 - t2:.1f} s", file=sys.stderr)
    print(json.dumps({"rows": rows, "second_write": second}))


if __name__ == "__main__":
    _child(*sys.argv[1:3])
