"""What the spark-submit entry points share: the session, the error the task says first, and
the main loop around one job.

No Airflow import here: this runs on a Spark driver.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

#: A file the job writes its error to, as JSON ``{"type", "message"}``, for the task that
#: started it to raise with that message first (``IQPSparkHook.submit`` sets it): the
#: message, not spark-submit's command line, is what the task's failure says.
JOB_ERROR_VAR = "AIRFLOW_IQP_JOB_ERROR_FILE"


def build_session(app_name: str):
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("AIRFLOW_IQP_SPARK_LOG_LEVEL", "WARN"))
    return spark


def report_error(job: str, exc: Exception) -> None:
    """Say a job's error on stderr in one line, and in :data:`JOB_ERROR_VAR`'s file if it is set."""
    print(f"airflow-iqp {job}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    path = os.environ.get(JOB_ERROR_VAR)
    if path:
        try:
            Path(path).write_text(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
        except OSError:  # the task then says what spark-submit says
            pass


def run_job(job: str, app_name: str, work: Callable) -> tuple[int, object]:
    """Run ``work(spark)`` on a new session; (exit code, what it returned). An error of the
    provider's (bad input or configuration) is said in one line and exits 2; a Spark error
    is said first as well, and raised with its traceback."""
    from airflow_iqp.errors import IQPError

    spark = build_session(app_name)
    try:
        return 0, work(spark)
    except IQPError as exc:
        report_error(job, exc)
        return 2, None
    except Exception as exc:
        report_error(job, exc)
        raise
    finally:
        spark.stop()


def load_work(text: str | None, uri: str | None) -> dict:
    """A job's work: the JSON given on the command line, or in the document it names (work
    too large for one argument), which the state store wrote: a local file, or an object."""
    from airflow_iqp.paths import is_local, local_path
    from airflow_iqp.store.objects import fs_and_path

    if uri and is_local(uri):
        with open(local_path(uri), encoding="utf-8") as fh:
            return json.load(fh)
    if uri:
        fs, path = fs_and_path(uri)
        return json.loads(fs.cat_file(path))
    return json.loads(text)
