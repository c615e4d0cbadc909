"""IQPSparkHook: the spark-submit it starts (run against a stand-in binary) and the Connect checks."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.hooks.spark import IQPSparkHook
from airflow_iqp.paths import HADOOP_UMASK_CONF
from airflow_iqp.spark.submit import LOCAL_CONF, job_path
from tests.support.tasks import alive, fake_submit, read_record

pytestmark = pytest.mark.usefixtures("spark_connections")


def submitted(record: Path) -> tuple[list[str], dict[str, str]]:
    rec = read_record(record)
    return rec["argv"], rec["env"]


def conf_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")


def test_a_local_master_gets_the_local_defaults_under_the_given_conf(monkeypatch):
    hook = IQPSparkHook(conf={"spark.sql.shuffle.partitions": 8})
    assert hook.conn_id == "spark_default" and hook.master == "local[2]"
    assert hook.submit_conf() == {**HADOOP_UMASK_CONF, **LOCAL_CONF, "spark.sql.shuffle.partitions": "8"}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_HA", json.dumps({"conn_type": "spark", "host": "spark://m1",
                                                             "port": 7077}))
    assert IQPSparkHook("spark_yarn", conf={"a": "1"}).submit_conf() == {**HADOOP_UMASK_CONF, "a": "1"}
    assert IQPSparkHook("spark_ha").master == "spark://m1:7077"


def test_a_missing_spark_default_is_spark_on_this_machine_and_any_other_missing_connection_is_named(
        tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT")
    hook = IQPSparkHook()
    assert hook.master == "local[*]" and hook.submit_conf() == {**HADOOP_UMASK_CONF, **LOCAL_CONF}
    binary, record = fake_submit(tmp_path)
    IQPSparkHook(spark_binary=binary).submit(job_path("batch"), ["q"])
    argv, _ = submitted(record)
    assert argv[argv.index("--master") + 1] == "local[*]"
    with pytest.raises(ConfigError, match=r"^backend\.conn_id: the Airflow connection 'no_such' does not exist"):
        IQPSparkHook("no_such").master
    monkeypatch.setenv("AIRFLOW__IQP__SPARK_CONN_ID", "my_spark")
    with pytest.raises(ConfigError, match=r"^\[iqp\] spark_conn_id: .*'my_spark' does not exist.*AIRFLOW_CONN_MY_SPARK="):
        IQPSparkHook().submit_hook(job_path("batch"))


def test_the_binary_is_pyspark_s_own_when_none_is_given_or_on_path(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    beside = Path(sys.executable).parent / "spark-submit"
    assert IQPSparkHook().spark_binary == str(beside)
    assert IQPSparkHook(spark_binary="/opt/spark/bin/spark-submit").spark_binary == "/opt/spark/bin/spark-submit"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK3", json.dumps({"conn_type": "spark", "host": "local",
                                                          "extra": {"spark-binary": "spark3-submit"}}))
    assert IQPSparkHook("spark3").spark_binary == "spark3-submit"


def test_submit_runs_with_a_clean_environment_and_leaves_this_process_s_alone(tmp_path, monkeypatch):
    # What a Spark Connect session in this process leaves behind: spark-submit fails with it.
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    before = dict(os.environ)
    binary, record = fake_submit(tmp_path)
    hook = IQPSparkHook(conf={"spark.executor.cores": "1"}, spark_binary=binary, env_vars={"IQP_TEST": "yes"})
    app = job_path("final")
    hook.submit(app, ["--store", tmp_path / "state", "--query", "cq2", "--window", "w", "--backend", "spark-submit"],
                name="iqp-final-cq2")
    argv, env = submitted(record)
    assert dict(os.environ) == before
    assert "SPARK_CONNECT_MODE_ENABLED" not in env and "SPARK_REMOTE" not in env
    assert env["PATH"] == "/usr/bin:/bin" and env["IQP_TEST"] == "yes"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert str(Path(app).parents[2]) in env["PYTHONPATH"].split(os.pathsep)
    assert argv[argv.index("--master") + 1] == "local[2]" and argv[argv.index("--name") + 1] == "iqp-final-cq2"
    assert conf_of(argv) == {**HADOOP_UMASK_CONF, **LOCAL_CONF, "spark.executor.cores": "1"}
    assert argv[argv.index(app):] == [app, "--store", str(tmp_path / "state"), "--query", "cq2", "--window", "w",
                                      "--backend", "spark-submit"] and "--py-files" not in argv


def test_the_package_is_shipped_as_py_files_when_asked(tmp_path):
    binary, record = fake_submit(tmp_path)
    IQPSparkHook(spark_binary=binary, ship_package=True).submit(job_path("batch"), ["q"])
    argv, _env = submitted(record)
    zipped = Path(argv[argv.index("--py-files") + 1])
    assert zipped.name == "airflow_iqp.zip" and zipped.is_file()


def test_a_job_s_own_error_is_raised_with_its_message_first_not_the_command_line(tmp_path):
    """The job says why it failed (``report_error``); the task's error starts with that, and
    spark-submit's command line, which the Spark provider repeats, is not in it."""
    binary = tmp_path / "spark-submit"
    binary.write_text(f"#!{sys.executable}\n"
                      "import sys\n"
                      "from airflow_iqp.errors import DataError\n"
                      "from airflow_iqp.spark.entry import report_error\n"
                      "report_error('batch_job', DataError('2 bad input files: /d/b.csv: not a readable csv file; '\n"
                      "                                    '/d/c.csv: wrong schema for stream e: column x has 1'))\n"
                      "sys.exit(2)\n")
    binary.chmod(0o755)
    with pytest.raises(DataError) as err:
        IQPSparkHook(spark_binary=str(binary)).submit(job_path("batch"), ["q"])
    assert str(err.value).splitlines()[0] == ("2 bad input files: /d/b.csv: not a readable csv file; "
                                              "/d/c.csv: wrong schema for stream e: column x has 1")
    assert "Cannot execute" not in str(err.value) and err.value.__cause__ is None


def test_a_failed_submit_raises_and_on_kill_kills_the_running_one(tmp_path):
    binary, record = fake_submit(tmp_path, exit_code=3)
    with pytest.raises(AirflowException, match="Error code is: 3"):
        IQPSparkHook(spark_binary=binary).submit(job_path("batch"), ["q"])
    binary, record = fake_submit(tmp_path, sleep=60)
    record.unlink()
    hook = IQPSparkHook(spark_binary=binary)
    errors = []

    def run():
        try:
            hook.submit(job_path("batch"), ["q"])
        except AirflowException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = read_record(record)["pid"]
    assert alive(pid)
    hook.on_kill()
    thread.join(timeout=30)
    assert not thread.is_alive() and errors and not alive(pid)


def test_connect_reads_the_spark_connect_connection_and_refuses_conf(monkeypatch):
    hook = IQPSparkHook("spark_connect_default")
    assert hook.connect_url() == "sc://127.0.0.1:15002/"
    refused = IQPSparkHook("spark_connect_default", conf={"spark.executor.memory": "4g"})
    before = dict(os.environ)
    with pytest.raises(ConfigError) as err:
        with refused.session():
            pass
    assert err.value.field == "conf" and "spark.executor.memory" in str(err.value)
    assert dict(os.environ) == before
