"""spark-submit's command line and spec, and the py-files zip a driver runs from (no Spark)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from airflow_iqp.spark.submit import build_pyfiles_zip, spark_submit_binary, submit_args, submit_spec


def test_submit_args_and_pyfiles_zip(tmp_path, monkeypatch):
    argv = submit_args("/x/batch_job.py", ["--work-file", "w.json", "--backend", "spark-submit"], master="local[2]",
                       conf={"spark.sql.shuffle.partitions": "8"}, py_files=["a.zip"])
    assert Path(argv[0]).name == "spark-submit" and argv[1:3] == ["--master", "local[2]"]
    assert argv[-5:] == ["/x/batch_job.py", "--work-file", "w.json", "--backend", "spark-submit"]
    assert "spark.sql.shuffle.partitions=8" in argv and "spark.ui.enabled=false" in argv
    assert argv[argv.index("--py-files") + 1] == "a.zip"
    # without an activated venv (PATH lacks .venv/bin) the one beside this interpreter is found
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert spark_submit_binary() == str(Path(sys.executable).parent / "spark-submit")
    remote = submit_args("app.py", [], master="spark://h:7077", spark_submit="/opt/spark/bin/spark-submit")
    assert remote[0] == "/opt/spark/bin/spark-submit"
    assert "spark.ui.enabled=false" not in remote
    spec = submit_spec("/x/final_job.py", ["--query", "cq2", "--expect-units", 3], master="yarn", conf={"a": 1},
                       py_files=["p.zip", "q.zip"])
    assert spec["application_args"] == ["--query", "cq2", "--expect-units", "3"] and spec["py_files"] == "p.zip,q.zip"
    assert spec["conf"] == {"spark.hadoop.fs.permissions.umask-mode": "027", "a": "1"}  # not world-readable
    z = build_pyfiles_zip(tmp_path / "pkg.zip")
    names = zipfile.ZipFile(z).namelist()
    assert "airflow_iqp/spark/batch_job.py" in names and "airflow_iqp/store/local.py" in names
    assert not [n for n in names if "__pycache__" in n]
    # The zip alone is enough for a driver to load a saved, split query and the jobs: no sqlglot.
    from airflow_iqp.query.catalogue import get_query

    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import airflow_iqp.spark.batch_job, "
            "airflow_iqp.spark.final_job, airflow_iqp.spark.batch, airflow_iqp.spark.merge, airflow_iqp.spark.tail; "
            "from airflow_iqp.query.model import Query; "
            "import airflow_iqp.query.store as s; assert s.__file__.startswith(sys.argv[1]); "
            "q = Query.from_dict(json.loads(sys.argv[2])); print(q.id, 'sqlglot' in sys.modules)")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(z), json.dumps(get_query("q9").to_dict())],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["q9", "False"]
