"""The Spark Connect backend: one long-running Spark server shared by every batch and final.

No Airflow import. Spark's ``sbin/start-connect-server.sh`` is one line over
``spark-daemon.sh submit org.apache.spark.sql.connect.service.SparkConnectServer 1``; the
pyspark wheel ships ``spark-daemon.sh`` but not that wrapper, so :func:`start_server` makes
the same call (``spark-daemon.sh`` from pyspark's own ``sbin/``), bound to 127.0.0.1.

* :func:`start_server` / :func:`stop_server` / :func:`server_status`: the daemon, its pid
  file and log under ``<base>/port-<port>/`` (``base`` defaults to ``$IQP_CONNECT_DIR`` or
  ``~/.airflow-iqp/connect``).
* :func:`connect_session`: a Spark Connect client session for a ``sc://`` URL.
* :func:`without_connect_mode`: a Spark Connect client sets ``SPARK_CONNECT_MODE_ENABLED=1``
  in its process and never clears it; a ``spark-submit`` started from that process then
  fails. Every spark-submit environment of this package goes through this function.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Mapping

from airflow_iqp.errors import ConfigError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
CONNECT_MODE_VAR = "SPARK_CONNECT_MODE_ENABLED"

#: Server-side defaults for a small local server: the spark-submit LOCAL_CONF without its driver JVM
#: flags, which trade peak speed for a fast start (right for a short job, not for a server that
#: stays up and warm), and without its console progress setting (off by default outside a shell).
SERVER_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.log.level": "WARN",
}


def without_connect_mode(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default ``os.environ``) without Spark Connect's mode flag, for a spark-submit child."""
    out = dict(os.environ if env is None else env)
    out.pop(CONNECT_MODE_VAR, None)
    out.pop("SPARK_REMOTE", None)
    return out


def spark_home() -> Path:
    """``SPARK_HOME`` if set, else the pyspark package (which carries ``bin/``, ``sbin/`` and ``jars/``)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def server_dir(port: int = DEFAULT_PORT, base: str | os.PathLike | None = None) -> Path:
    base = Path(base or os.environ.get("IQP_CONNECT_DIR") or Path.home() / ".airflow-iqp" / "connect")
    return base / f"port-{int(port)}"


def connect_url(port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> str:
    return f"sc://{host}:{int(port)}"


def _pid_file(d: Path) -> Path:
    return d / "pid" / f"spark-iqp-{SERVER_CLASS}-1.pid"


def _alive(pid: int) -> bool:
    import psutil

    try:
        p = psutil.Process(pid)
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE and "java" in p.name().lower()
    except psutil.Error:
        return False


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0


def server_status(port: int = DEFAULT_PORT, base: str | os.PathLike | None = None) -> dict:
    """``{"running", "pid", "port", "url", "log", "dir"}`` of the server this package started on ``port``."""
    d = server_dir(port, base)
    pid_file = _pid_file(d)
    pid = int(pid_file.read_text().strip()) if pid_file.is_file() and pid_file.read_text().strip() else None
    running = pid is not None and _alive(pid)
    logs = sorted((d / "log").glob("*.out")) if (d / "log").is_dir() else []
    return {"running": running, "pid": pid if running else None, "port": int(port), "url": connect_url(port),
            "log": str(logs[0]) if logs else None, "dir": str(d)}


def _daemon_env(d: Path, port: int) -> dict[str, str]:
    import sys

    env = without_connect_mode()
    env.update({"SPARK_PID_DIR": str(d / "pid"), "SPARK_LOG_DIR": str(d / "log"), "SPARK_IDENT_STRING": "iqp",
                "SPARK_HOME": str(spark_home())})
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def start_server(port: int = DEFAULT_PORT, *, base: str | os.PathLike | None = None, master: str = "local[*]",
                 conf: Mapping[str, str] | None = None, driver_memory: str = "2g", timeout: float = 180.0) -> dict:
    """Start a Spark Connect server on 127.0.0.1:``port`` and wait until it answers a query.

    Returns :func:`server_status` plus ``startup_seconds`` (``0`` and ``"already": True``
    when this package's server was already running there). Raises :class:`ConfigError`
    when the port is taken by something else or the server dies, quoting its log.
    """
    d = server_dir(port, base)
    status = server_status(port, base)
    if status["running"]:
        return {**status, "startup_seconds": 0.0, "already": True}
    if _port_open(port):
        raise ConfigError(f"port {port} on 127.0.0.1 is already in use by another process; choose another --port",
                          field="port")
    daemon = spark_home() / "sbin" / "spark-daemon.sh"
    if not daemon.is_file():
        raise ConfigError(f"{daemon} not found: is pyspark installed (or SPARK_HOME set to a Spark distribution)?",
                          field="spark_home")
    merged = {**SERVER_CONF, **(conf or {}), "spark.connect.grpc.binding.address": "127.0.0.1",
              "spark.connect.grpc.binding.port": str(int(port))}
    argv = ["bash", str(daemon), "submit", SERVER_CLASS, "1", "--name", "Spark Connect server",
            "--master", master, "--driver-memory", driver_memory]
    for k in sorted(merged):
        argv += ["--conf", f"{k}={merged[k]}"]
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=_daemon_env(d, port), capture_output=True, text=True, timeout=60)
    if out.returncode != 0 or "failed to launch" in out.stdout:
        raise ConfigError(f"Spark Connect server did not start: {out.stdout.strip()} {out.stderr.strip()}",
                          field="connect_server")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = server_status(port, base)
        if not status["running"]:
            tail = Path(status["log"]).read_text()[-3000:] if status["log"] else "(no log)"
            raise ConfigError(f"Spark Connect server exited during start-up; log {status['log']}:\n{tail}",
                              field="connect_server")
        if _port_open(port) and _answers(connect_url(port)):
            return {**status, "startup_seconds": time.perf_counter() - t0, "already": False}
        time.sleep(0.5)
    stop_server(port, base)
    raise ConfigError(f"Spark Connect server on port {port} did not answer within {timeout:.0f}s; "
                      f"log {status['log']}", field="connect_server")


def _answers(url: str) -> bool:
    """Whether a server answers a trivial query (run in a child, so this process stays Connect-free)."""
    import sys

    code = ("from pyspark.sql import SparkSession; import sys; "
            "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate(); assert s.range(3).count() == 3; s.stop()")
    try:
        return subprocess.run([sys.executable, "-c", code, url], capture_output=True, timeout=60,
                              env=without_connect_mode()).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def stop_server(port: int = DEFAULT_PORT, *, base: str | os.PathLike | None = None, timeout: float = 30.0) -> bool:
    """Stop the server this package started on ``port`` (SIGTERM, then SIGKILL); True if one was running."""
    import psutil

    status = server_status(port, base)
    if not status["running"]:
        return False
    p = psutil.Process(status["pid"])
    procs = [p, *p.children(recursive=True)]
    for q in procs:
        try:
            q.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for q in alive:
        try:
            q.kill()
        except psutil.Error:
            pass
    _pid_file(server_dir(port, base)).unlink(missing_ok=True)
    return True


def server_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds so far of the server JVM and its children (Python workers)."""
    import psutil

    total = 0.0
    try:
        p = psutil.Process(pid)
        for q in (p, *p.children(recursive=True)):
            try:
                t = q.cpu_times()
                total += t.user + t.system + getattr(t, "children_user", 0) + getattr(t, "children_system", 0)
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return total


def server_rss_mb(pid: int) -> float:
    import psutil

    try:
        p = psutil.Process(pid)
        return sum(q.memory_info().rss for q in (p, *p.children(recursive=True))) / 2**20
    except psutil.Error:
        return 0.0


def connect_session(url: str):
    """A new Spark Connect client session on ``url`` (``sc://host:port``); ``stop()`` it when done."""
    if not str(url).startswith("sc://"):
        raise ConfigError(f"a Spark Connect URL starts with sc://, got {url!r}", field="url")
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).create()
