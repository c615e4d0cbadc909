"""``airflow-iqp dev --dags DIR [--home DIR] [--port N]``: a local Airflow for any DAG folder.

The stack the demo runs on, for a user's own DAGs: a SQLite metadata DB, the LocalExecutor,
short parsing and scheduling intervals, no example DAGs, DAGs unpaused as they appear,
and the simple auth manager with everybody admin (the UI needs no login; the API server
listens on 127.0.0.1 only). The command migrates the metadata DB, starts Airflow's
scheduler, dag-processor, triggerer and api-server, prints the UI's address once they
are healthy, and runs in the foreground until Ctrl-C, which stops them all.

``--home`` is AIRFLOW_HOME (default: ``$AIRFLOW_HOME``, else ``~/airflow``). The provider's
own defaults apply there as under any Airflow: the state directory is
``HOME/iqp/state``, and without a ``spark_default`` connection the batches run on Spark
``local[*]``. The processes' logs are ``HOME/logs/<component>.log``; the settings are
given to them as ``AIRFLOW__SECTION__KEY`` variables, on top of this environment's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from airflow_iqp.cli.supervisor import Supervisor, tail_file
from airflow_iqp.errors import ConfigError

#: The Airflow components of the stack, each a process of its own.
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
#: The components the api-server's health endpoint reports on.
HEALTH_KEYS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
#: The SQLite metadata DB's connection arguments (``[database] sql_alchemy_connect_args``
#: and its ``_async`` twin name these): a writer waits up to 30 s for another's transaction,
#: where Python's default is 5 s. On two busy cores a component (the dag-processor with ten
#: DAGs of many mapped tasks) otherwise exits with "database is locked" and stops the stack.
SQLITE_CONNECT_ARGS = {"timeout": 30}
SQLITE_CONNECT_ARGS_ASYNC = {"timeout": 30}


def add_parser(subparsers):
    p = subparsers.add_parser("dev", help="run a local Airflow (SQLite, LocalExecutor) on a DAG folder until Ctrl-C",
                              description=__doc__)
    p.add_argument("--dags", required=True, type=Path, help="the DAG folder")
    p.add_argument("--home", type=Path, default=None,
                   help="AIRFLOW_HOME: metadata DB, logs, state (default: $AIRFLOW_HOME, else ~/airflow)")
    p.add_argument("--port", type=int, default=8080, help="the UI's and API's port on 127.0.0.1 (default 8080)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds to wait for every component to be healthy (default 300)")
    return p


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def airflow_bin() -> str:
    """The ``airflow`` beside this interpreter (a virtualenv that is not activated), else on PATH."""
    exe = Path(sys.executable).with_name("airflow")
    if exe.exists():
        return str(exe)
    found = shutil.which("airflow")
    if not found:
        raise ConfigError("the `airflow` executable is neither beside this Python nor on PATH: install "
                          "apache-airflow into this environment", "PATH")
    return found


def stack_settings(home: Path, dags: Path, port: int, *, paused: bool = False) -> dict[str, str]:
    """The settings of the local stack, as ``SECTION__KEY`` -> value (strings).

    Secrets (the API's and the JWT's) are new for every start, the same in every component:
    the scheduler signs task tokens that the api-server verifies. ``paused`` makes new DAGs
    start paused, as Airflow's own default does.
    """
    secret = os.urandom(16).hex()
    return {
        "CORE__DAGS_FOLDER": str(dags),
        "CORE__EXECUTOR": "LocalExecutor",
        "CORE__LOAD_EXAMPLES": "False",
        "CORE__PARALLELISM": "4",
        "CORE__MAX_ACTIVE_TASKS_PER_DAG": "4",
        "CORE__DAGS_ARE_PAUSED_AT_CREATION": str(paused),
        "CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "1",
        # LocalExecutor workers (task supervisors) talk to the Execution API of the api-server.
        "CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "simple_auth_manager_passwords.json"),
        "DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "DATABASE__SQL_ALCHEMY_CONNECT_ARGS": f"{__name__}.SQLITE_CONNECT_ARGS",
        "DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": f"{__name__}.SQLITE_CONNECT_ARGS_ASYNC",
        "DATABASE__CHECK_MIGRATIONS": "False",
        "API__HOST": "127.0.0.1",
        "API__PORT": str(port),
        "API__BASE_URL": f"http://127.0.0.1:{port}",
        "API__WORKERS": "1",
        "API__SECRET_KEY": secret,
        "API__EXPOSE_CONFIG": "True",
        "API_AUTH__JWT_SECRET": secret,
        "API_AUTH__JWT_ISSUER": "airflow-iqp",
        "SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "SCHEDULER__JOB_HEARTBEAT_SEC": "1",
        "SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
        "SCHEDULER__TASK_INSTANCE_HEARTBEAT_SEC": "2",
        "SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "30",
        "SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "30",
        "SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "2",
        "SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "DAG_PROCESSOR__REFRESH_INTERVAL": "2",
        "DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "1",
        # Airflow's own default. A file that changes is parsed again at once all the same (the
        # dag-processor queues files by modification time); re-parsing unchanged files every few
        # seconds takes CPU that the Spark jobs beside it need.
        "DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        "DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "DAG_PROCESSOR__PRINT_STATS_INTERVAL": "0",
        "DAG_PROCESSOR__STALE_DAG_THRESHOLD": "30",
        "DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD": "30",
        "TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        "TRIGGERER__CAPACITY": "100",
        "TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "30",
        # Ports of their own, so that two stacks on one machine do not collide.
        "LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "LOGGING__DAG_PROCESSOR_CHILD_PROCESS_LOG_DIRECTORY": str(home / "logs" / "dag_processor"),
        "LOGGING__COLORED_CONSOLE_LOG": "False",
    }


def stack_env(home: Path, settings: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """The environment of the stack's processes: ``base`` with AIRFLOW_HOME and the settings
    as ``AIRFLOW__SECTION__KEY`` variables."""
    env = dict(base)
    env["AIRFLOW_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    env.update({f"AIRFLOW__{key}": value for key, value in settings.items()})
    return env


def use_wal(db: Path) -> None:
    """Put a SQLite metadata DB in write-ahead logging (a property of the file): readers no
    longer block the writer, so components and tasks do not fail with "database is locked"
    when a small machine is busy."""
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as con:
        con.execute("PRAGMA journal_mode=WAL")


def migrate(env: Mapping[str, str], log: Path, timeout: float = 600) -> None:
    """``airflow db migrate`` with ``env``, its output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        subprocess.run([airflow_bin(), "db", "migrate"], env=env, stdout=out, stderr=subprocess.STDOUT,
                       check=True, timeout=timeout)


def port_taken(port: int) -> bool:
    """Whether something listens on ``port`` of 127.0.0.1 (or it cannot be bound).

    The bind takes SO_REUSEADDR, as the api-server's own bind does: connections that a
    stopped server closed linger in TIME_WAIT for a minute and do not make the port taken.
    """
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _health(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=10) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _healthy(health: dict | None) -> bool:
    return bool(health) and all((health.get(k) or {}).get("status") == "healthy" for k in HEALTH_KEYS)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run(args) -> int:
    from airflow_iqp.config import airflow_home

    dags = args.dags.expanduser().absolute()
    if not dags.is_dir():
        raise ConfigError(f"{args.dags} is not a directory: give the folder that holds your DAG files", "--dags")
    home = args.home.expanduser().absolute() if args.home else airflow_home()
    if not 0 < args.port < 65536 or port_taken(args.port):
        raise ConfigError(f"port {args.port} on 127.0.0.1 is in use (or not a port): give another", "--port")
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = stack_env(home, stack_settings(home, dags, args.port), os.environ)
    state = env.get("AIRFLOW__IQP__STATE_DIR") or home / "iqp" / "state"
    print(f"AIRFLOW_HOME={home}\nDAGs from {dags}\nresults and state in {state}\nlogs in {logs}", flush=True)
    # Each component in a process group of its own: Ctrl-C reaches this command alone, which
    # then stops each group, task processes and Spark jobs with it.
    stack = Supervisor(logs, env=env)
    # Ctrl-C and SIGTERM stop the stack, also where this command started with SIGINT ignored
    # (a background job of a non-interactive shell inherits that, and Python keeps it).
    previous = signal.signal(signal.SIGINT, _interrupt), signal.signal(signal.SIGTERM, _interrupt)
    try:
        print("migrating the metadata DB (the first time takes a minute)", flush=True)
        try:
            migrate(env, logs / "db-migrate.log")
        except subprocess.CalledProcessError:
            print(f"airflow db migrate failed\n{tail_file(logs / 'db-migrate.log', 25)}", file=sys.stderr)
            return 1
        use_wal(home / "airflow.db")
        print(f"starting {', '.join(COMPONENTS)}", flush=True)
        for component in COMPONENTS:
            stack.start(component, [airflow_bin(), component])
        return _serve(stack, args.port, args.timeout, logs)
    except KeyboardInterrupt:
        print("stopping Airflow", flush=True)
        return 0
    finally:
        # A second Ctrl-C must not leave components running: each is in a group of its own.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            stack.stop()
        finally:
            signal.signal(signal.SIGINT, previous[0])
            signal.signal(signal.SIGTERM, previous[1])


def _serve(stack: Supervisor, port: int, timeout: float, logs: Path) -> int:
    """Wait until every component is healthy, print the UI's address, then watch them until
    one exits (1) or Ctrl-C."""
    end, up = time.monotonic() + timeout, False
    while True:
        dead = stack.exited()
        if dead:
            print(f"Airflow's {', '.join(dead)} exited\n{stack.tail(25, dead)}", file=sys.stderr)
            return 1
        if not up:
            health = _health(port)
            if _healthy(health):
                up = True
                print(f"Airflow is up: http://127.0.0.1:{port} (Ctrl-C stops it)", flush=True)
            elif time.monotonic() > end:
                print(f"Airflow is not healthy after {timeout:.0f} s: {health}; logs in {logs}", file=sys.stderr)
                return 1
        time.sleep(1)
