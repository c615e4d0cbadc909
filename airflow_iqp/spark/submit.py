"""Build spark-submit command lines (the provider's Spark hook takes its conf from here) and run them.

No Airflow import. ``submit_args`` only builds a list of strings; ``run_submit`` runs it
as a child process and measures its wall time and the CPU time of its whole process tree
(``os.wait4`` rusage: the JVM, the Python driver and every process they reaped).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from airflow_iqp.paths import HADOOP_UMASK_CONF

#: The package's directory: this module is airflow_iqp/spark/submit.py.
PACKAGE_DIR = Path(__file__).resolve().parents[1]

#: Local defaults that cut per-job overhead on small data. Override through ``conf``.
LOCAL_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.log.level": "WARN",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def spark_submit_binary() -> str:
    """The ``spark-submit`` to run: the one on PATH, else the one installed beside this interpreter.

    A benchmark or CLI started as ``.venv/bin/python ...`` without an activated venv has no
    ``spark-submit`` on PATH, but pyspark put one next to ``sys.executable``.
    """
    found = shutil.which("spark-submit")
    if found:
        return found
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


def job_path(name: str) -> str:
    """Absolute path of a job script: ``job_path("batch")`` -> ``.../airflow_iqp/spark/batch_job.py``."""
    path = PACKAGE_DIR / "spark" / f"{name}_job.py"
    if not path.is_file():
        raise FileNotFoundError(path)
    return str(path)


def submit_spec(app: str, app_args: Sequence[str] = (), master: str = "local[*]",
                conf: Mapping[str, str] | None = None, *, py_files: Sequence[str] | str | None = None,
                name: str | None = None, deploy_mode: str | None = None,
                driver_memory: str | None = None) -> dict:
    """The pieces of one spark-submit, as arguments of the Spark provider's ``SparkSubmitHook``.

    ``{"application", "application_args", "conf", "py_files", "name", "deploy_mode",
    "driver_memory", "master"}``. Every master gets Hadoop's umask ``027`` (partials and
    results are not world-readable: :data:`~airflow_iqp.paths.HADOOP_UMASK_CONF`); local
    masters (``local``, ``local[N]``, ``local[*]``) get :data:`LOCAL_CONF` too; ``conf`` goes over both.
    :func:`submit_args` renders exactly this as a command line.
    """
    merged: dict[str, str] = {**HADOOP_UMASK_CONF, **(LOCAL_CONF if str(master).startswith("local") else {})}
    merged.update({k: str(v) for k, v in (conf or {}).items()})
    if py_files is not None and not isinstance(py_files, str):
        py_files = ",".join(str(p) for p in py_files)
    return {"application": str(app), "application_args": [str(a) for a in app_args], "conf": merged,
            "py_files": py_files or None, "name": name, "deploy_mode": deploy_mode,
            "driver_memory": driver_memory, "master": master}


def submit_args(app: str, app_args: Sequence[str] = (), master: str = "local[*]", conf: Mapping[str, str] | None = None,
                *, py_files: Sequence[str] | str | None = None, name: str | None = None,
                deploy_mode: str | None = None, driver_memory: str | None = None,
                spark_submit: str | None = None) -> list[str]:
    """The spark-submit command line for ``app`` (a job script path) with ``app_args``.

    Built from :func:`submit_spec` (same defaults). ``py_files`` is a path or list of
    paths (e.g. :func:`build_pyfiles_zip`) shipped to the executors. ``spark_submit``
    defaults to :func:`spark_submit_binary`.
    """
    spec = submit_spec(app, app_args, master, conf, py_files=py_files, name=name, deploy_mode=deploy_mode,
                       driver_memory=driver_memory)
    argv = [spark_submit or spark_submit_binary(), "--master", spec["master"]]
    for flag, key in (("--deploy-mode", "deploy_mode"), ("--name", "name"), ("--driver-memory", "driver_memory")):
        if spec[key]:
            argv += [flag, spec[key]]
    for k in sorted(spec["conf"]):
        argv += ["--conf", f"{k}={spec['conf'][k]}"]
    if spec["py_files"]:
        argv += ["--py-files", spec["py_files"]]
    return argv + [spec["application"], *spec["application_args"]]


def submit_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a local spark-submit: this interpreter for driver and workers, the package importable.

    Spark Connect's mode flag is dropped (:func:`airflow_iqp.spark.connect.without_connect_mode`):
    with it, spark-submit fails.
    """
    from airflow_iqp.spark.connect import without_connect_mode

    env = without_connect_mode(base)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    root = str(PACKAGE_DIR.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    return env


def build_pyfiles_zip(dest: str | os.PathLike | None = None) -> Path:
    """Zip the ``airflow_iqp`` package for ``--py-files`` (sources only, no caches); return its path."""
    dest = Path(dest) if dest else Path(tempfile.mkdtemp(prefix="iqp-pyfiles-")) / "airflow_iqp.zip"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(PACKAGE_DIR.rglob("*.py")):
            if "__pycache__" in f.parts:
                continue
            zf.write(f, f.relative_to(PACKAGE_DIR.parent).as_posix())
    os.replace(tmp, dest)
    return dest


@dataclass
class SubmitResult:
    argv: list[str]
    returncode: int
    wall_seconds: float
    cpu_seconds: float
    output: str  # stdout and stderr, interleaved

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def run_submit(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float | None = None) -> SubmitResult:
    """Run a spark-submit command line; measure wall and process-tree CPU seconds."""
    if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
        from airflow_iqp.errors import ConfigError

        raise ConfigError(f"{argv[0]} not found on PATH (is pyspark installed in this environment?)",
                          field="spark_submit")
    with tempfile.TemporaryFile(mode="w+") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, env=submit_env(env),
                                start_new_session=True)
        deadline = None if timeout is None else t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                os.killpg(proc.pid, 9)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    return SubmitResult(list(argv), proc.returncode, wall, usage.ru_utime + usage.ru_stime, output)
