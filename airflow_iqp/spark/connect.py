"""The Spark Connect backend: one long-running Spark server shared by every batch and final.

No Airflow import. Spark's ``sbin/start-connect-server.sh`` is one line over
``spark-daemon.sh submit org.apache.spark.sql.connect.service.SparkConnectServer 1``; the
pyspark wheel ships ``spark-daemon.sh`` but not that wrapper, so :func:`start_server` makes
the same call (``spark-daemon.sh`` from pyspark's own ``sbin/``), bound to 127.0.0.1.

The server listens beyond loopback only with Spark Connect's own pre-shared token
(``spark.connect.authenticate.token``, or the ``SPARK_CONNECT_AUTHENTICATE_TOKEN``
environment variable that Spark reads when the conf is unset). This package hands the
token over in the environment only, never on a command line, so it does not show in ``ps``.

* :func:`start_server` / :func:`stop_server` / :func:`server_status`: the daemon, its pid
  file and log under ``<base>/port-<port>/`` (``base`` defaults to ``$IQP_CONNECT_DIR`` or
  ``~/.airflow-iqp/connect``).
* :func:`connect_session`: a Spark Connect client session for a ``sc://`` URL.
* :func:`without_connect_mode`: a Spark Connect client sets ``SPARK_CONNECT_MODE_ENABLED=1``
  in its process and never clears it; a ``spark-submit`` started from that process then
  fails. Every spark-submit environment of this package goes through this function.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Mapping
from urllib.parse import quote

from airflow_iqp.errors import ConfigError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
CONNECT_MODE_VAR = "SPARK_CONNECT_MODE_ENABLED"
DEFAULT_HOST = "127.0.0.1"
#: The server JVM's heap unless told otherwise. It holds the cached units and broadcast hash
#: tables of every batch running on the server at once (benchmarks/server_memory.py).
DEFAULT_DRIVER_MEMORY = "2g"
#: Spark Connect's pre-shared token. The server takes the conf, else the variable
#: (``Connect.getAuthenticateToken``); pyspark's client takes ``;token=`` of the URL, else
#: the same variable.
TOKEN_CONF = "spark.connect.authenticate.token"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
BIND_CONF = "spark.connect.grpc.binding.address"
PORT_CONF = "spark.connect.grpc.binding.port"
#: glibc's malloc arenas for the server's JVM (``MALLOC_ARENA_MAX``; :func:`_daemon_env`).
MALLOC_ARENAS = "2"

#: Server-side defaults for a small local server: the spark-submit LOCAL_CONF without its driver JVM
#: flags, which trade peak speed for a fast start (right for a short job, not for a server that
#: stays up and warm), and without its console progress setting (off by default outside a shell).
SERVER_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.log.level": "WARN",
    # partials and results it writes are not world-readable (airflow_iqp.paths)
    "spark.hadoop.fs.permissions.umask-mode": "027",
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


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).strip("[]")).is_loopback
    except ValueError:
        return False


def connect_url(port: int = DEFAULT_PORT, host: str = DEFAULT_HOST, token: str | None = None) -> str:
    """``sc://host:port``, with ``;token=`` when there is a token.

    pyspark sends a token over plain gRPC only to the host named ``localhost`` (local
    channel credentials); to any other name, even ``127.0.0.1``, it opens TLS. So with a
    token a loopback host is written ``localhost``.
    """
    if not token:
        return f"sc://{host}:{int(port)}"
    host = "localhost" if is_loopback(host) else host
    return f"sc://{host}:{int(port)}/;token={quote(token, safe='')}"


_TOKEN_PARAM = re.compile(r"(;token=)[^;]*")


def redact_url(url: str) -> str:
    """``url`` with its token (if any) replaced by ``***``, for logs and printed output."""
    return _TOKEN_PARAM.sub(r"\1***", str(url))


def client_url(url: str) -> str:
    """``url`` as pyspark can use it: with a token (in the URL or in the environment) and
    without ``use_ssl=true``, a loopback address becomes ``localhost`` (see :func:`connect_url`)."""
    m = re.match(r"sc://(\[[^\]]+\]|[^:/;]+)(.*)$", str(url))
    has_token = _TOKEN_PARAM.search(str(url)) or os.environ.get(TOKEN_ENV)
    if not m or not has_token or "use_ssl=true" in str(url).lower() or m.group(1) == "localhost":
        return str(url)
    return f"sc://localhost{m.group(2)}" if is_loopback(m.group(1)) else str(url)


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


SERVER_INFO = "server.json"


def server_status(port: int = DEFAULT_PORT, base: str | os.PathLike | None = None) -> dict:
    """``{"running", "pid", "port", "host", "authenticated", "url", "log", "dir"}`` of the server this
    package started on ``port``. ``url`` never carries the token: a client of an
    authenticated server adds it (``;token=``, or ``SPARK_CONNECT_AUTHENTICATE_TOKEN``)."""
    import json

    d = server_dir(port, base)
    pid_file = _pid_file(d)
    pid = int(pid_file.read_text().strip()) if pid_file.is_file() and pid_file.read_text().strip() else None
    running = pid is not None and _alive(pid)
    logs = sorted((d / "log").glob("*.out")) if (d / "log").is_dir() else []
    info = json.loads((d / SERVER_INFO).read_text()) if (d / SERVER_INFO).is_file() else {}
    host, auth = info.get("host", DEFAULT_HOST), bool(info.get("authenticated"))
    url = f"sc://{'localhost' if auth and is_loopback(host) else host}:{int(port)}"
    return {"running": running, "pid": pid if running else None, "port": int(port), "host": host,
            "authenticated": auth, "url": url, "log": str(logs[0]) if logs else None, "dir": str(d)}


def _daemon_env(d: Path, port: int, token: str | None = None) -> dict[str, str]:
    import sys

    env = without_connect_mode()
    env.update({"SPARK_PID_DIR": str(d / "pid"), "SPARK_LOG_DIR": str(d / "log"), "SPARK_IDENT_STRING": "iqp",
                "SPARK_HOME": str(spark_home())})
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    # glibc gives each thread that allocates natively an arena of its own, up to 8 per core,
    # and keeps what it freed: a server's hundreds of threads (gRPC, Arrow batches of
    # results, Parquet) grow its resident memory far past its heap. Hadoop's daemons cap the
    # arenas the same way; a value in the environment is kept.
    env.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENAS)
    env.pop(TOKEN_ENV, None)
    if token:  # the server JVM reads it from its environment: not on the command line, not in ps
        env[TOKEN_ENV] = token
    return env


def _check_binding(host: str, token: str | None, conf: Mapping[str, str]) -> None:
    """ConfigErrors for a server that would listen beyond loopback unauthenticated, or show its token."""
    if TOKEN_CONF in conf:
        raise ConfigError(f"{TOKEN_CONF} in --conf would show the token on the server's command line (ps): "
                          f"set the environment variable {TOKEN_ENV} instead", field="conf")
    for key in (BIND_CONF, PORT_CONF):
        if key in conf:
            raise ConfigError(f"{key} is set by the host and port arguments (--host, --port), not --conf",
                              field="conf")
    if not is_loopback(host) and not token:
        raise ConfigError(f"a Spark Connect server on {host} would accept anyone who reaches it: set the "
                          f"environment variable {TOKEN_ENV} (Spark's {TOKEN_CONF}) to a secret to require "
                          f"it of every client, or keep the default host {DEFAULT_HOST}", field="token")


def server_args(port: int = DEFAULT_PORT, *, master: str = "local[*]", conf: Mapping[str, str] | None = None,
                driver_memory: str = DEFAULT_DRIVER_MEMORY, host: str = DEFAULT_HOST) -> list[str]:
    """spark-submit's arguments after ``--class`` :data:`SERVER_CLASS` for a server on
    ``host``:``port``: the same for the daemon of :func:`start_server` and for a server that a
    supervisor runs in the foreground (the cluster harness)."""
    merged = {**SERVER_CONF, **(conf or {}), BIND_CONF: host, PORT_CONF: str(int(port))}
    argv = ["--name", "Spark Connect server", "--master", master, "--driver-memory", driver_memory]
    for k in sorted(merged):
        argv += ["--conf", f"{k}={merged[k]}"]
    return argv


def start_server(port: int = DEFAULT_PORT, *, base: str | os.PathLike | None = None, master: str = "local[*]",
                 conf: Mapping[str, str] | None = None, driver_memory: str = DEFAULT_DRIVER_MEMORY,
                 timeout: float = 180.0, host: str = DEFAULT_HOST, token: str | None = None) -> dict:
    """Start a Spark Connect server on ``host``:``port`` and wait until it answers a query.

    ``host`` is 127.0.0.1 unless given; any address that is not loopback needs ``token``
    (default: the environment's ``SPARK_CONNECT_AUTHENTICATE_TOKEN``), else a ConfigError
    names that variable. With a token, every client must send it; the server gets it in its
    environment, and the returned ``url`` carries it (:func:`redact_url` before printing).

    Returns :func:`server_status` plus ``startup_seconds`` (``0`` and ``"already": True``
    when this package's server was already running there). Raises :class:`ConfigError`
    when the port is taken by something else or the server dies, quoting its log.
    """
    from airflow_iqp.paths import make_dirs
    from airflow_iqp.store.files import atomic_write_json

    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    _check_binding(host, token, conf or {})
    d = server_dir(port, base)
    status = server_status(port, base)
    if status["running"]:
        return {**status, "startup_seconds": 0.0, "already": True}
    probe_host = DEFAULT_HOST if host in ("0.0.0.0", "::") or is_loopback(host) else host
    if _port_open(port, probe_host):
        raise ConfigError(f"port {port} on {probe_host} is already in use by another process; choose another --port",
                          field="port")
    daemon = spark_home() / "sbin" / "spark-daemon.sh"
    if not daemon.is_file():
        raise ConfigError(f"{daemon} not found: is pyspark installed (or SPARK_HOME set to a Spark distribution)?",
                          field="spark_home")
    argv = ["bash", str(daemon), "submit", SERVER_CLASS, "1",
            *server_args(port, master=master, conf=conf, driver_memory=driver_memory, host=host)]
    make_dirs(d)
    atomic_write_json(d / SERVER_INFO, {"host": host, "authenticated": bool(token)})
    # A server on one non-loopback address cannot be asked from here without TLS (pyspark
    # sends a token in the clear to "localhost" only): its open port is the sign of life.
    probe = connect_url(port, "localhost" if token else probe_host) if is_loopback(probe_host) else None
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=_daemon_env(d, port, token), capture_output=True, text=True, timeout=60)
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
        if _port_open(port, probe_host) and (probe is None or _answers(probe, token)):
            return {**status, "url": connect_url(port, host if probe is None else probe_host, token),
                    "startup_seconds": time.perf_counter() - t0, "already": False}
        time.sleep(0.5)
    stop_server(port, base)
    raise ConfigError(f"Spark Connect server on port {port} did not answer within {timeout:.0f}s; "
                      f"log {status['log']}", field="connect_server")


def _answers(url: str, token: str | None = None) -> bool:
    """Whether a server answers a trivial query (run in a child, so this process stays Connect-free;
    the token goes in the child's environment, not its command line)."""
    import sys

    code = ("from pyspark.sql import SparkSession; import sys; "
            "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate(); assert s.range(3).count() == 3; s.stop()")
    env = without_connect_mode()
    env.pop(TOKEN_ENV, None)
    if token:
        env[TOKEN_ENV] = token
    try:
        return subprocess.run([sys.executable, "-c", code, url], capture_output=True, timeout=60,
                              env=env).returncode == 0
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


def connect_session(url: str):
    """A new Spark Connect client session on ``url`` (``sc://host:port``, with ``/;token=...``
    for an authenticated server); ``stop()`` it when done."""
    if not str(url).startswith("sc://"):
        raise ConfigError(f"a Spark Connect URL starts with sc://, got {redact_url(url)!r}", field="url")
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(client_url(url)).create()
