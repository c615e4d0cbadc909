"""A throw-away local Airflow 3.3 made of real processes, for the demo and the tests.

``airflow_env(dags_folder)`` is a context manager that builds a throw-away AIRFLOW_HOME
(SQLite metadata DB, LocalExecutor, fast parsing/scheduling intervals, simple auth manager
with everybody admin), migrates the DB, starts the scheduler, dag-processor, triggerer and
api-server as real processes (each in its own process group), waits until the api-server's
``/api/v2/monitor/health`` reports all of them healthy, and stops every process group at exit.

It is a plain module (no pytest fixtures) so any test or conftest can use it::

    from iqp_dev.local_airflow import airflow_env

    with airflow_env(dags_folder) as af:
        af.wait_for_dag("my_dag")
        run_id = af.trigger("my_dag", conf={"x": 1})
        run = af.wait_for_run("my_dag", run_id, timeout=120)
        tis = af.task_instances("my_dag", run_id)

Three parts, each a module: the home's settings, environment and migrated DB
(:mod:`iqp_dev.airflow_config`); the processes, under the package's one supervisor
(:class:`airflow_iqp.cli.supervisor.Supervisor`, the one ``airflow-iqp dev`` runs on); and
how a test reads state, the REST API and read-only SQL of :class:`iqp_dev.airflow_api.AirflowClient`,
which :class:`AirflowEnv` is, bound to the processes it started.

With ``celery_workers=N`` (the cluster harness's ``executor="celery"``, whose ``config``
sets the CeleryExecutor, its broker and result backend:
:func:`iqp_dev.airflow_config.celery_config`) it also starts N ``airflow celery worker``
processes, the components ``celery-worker-1`` ... ``celery-worker-N``, under the same
supervisor and on the same home, and waits until each answers a Celery ping on the broker.
Each has a Celery hostname of its own (``w1@<host>``, ...), which its task processes find in
``IQP_CELERY_WORKER``; the first serves the task logs (``[logging] worker_log_server_port``,
as the scheduler does under the LocalExecutor), the others run with ``--skip-serve-logs``
(one port for all; the logs are files of the one home anyway). All of them report the same
TaskInstance ``hostname``: the machine's.

On failure (any exception inside the ``with`` block, or a start-up failure) the tail of
every component's log is printed to stderr, so pytest shows why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_iqp.cli.dev import COMPONENTS, airflow_bin, free_port
from airflow_iqp.cli.supervisor import Supervisor, tail_file
from iqp_dev.airflow_api import AirflowClient
from iqp_dev.airflow_config import build_config, child_env, connection_env, migrate_home

__all__ = ["AirflowEnv", "airflow_env", "celery_worker_names", "free_port", "utcnow"]

#: What a task process of a harness's Celery worker finds its worker's Celery hostname in.
CELERY_WORKER_ENV = "IQP_CELERY_WORKER"


def celery_worker_names(n: int) -> tuple[str, ...]:
    """The components of ``n`` Celery workers: ``celery-worker-1`` ... ``celery-worker-N``."""
    return tuple(f"celery-worker-{i}" for i in range(1, n + 1))


@dataclass
class AirflowEnv(AirflowClient):
    """A running set of Airflow processes and the client of their API. Build with :func:`airflow_env`."""

    home: Path
    dags_folder: Path
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)
    #: The Celery worker components (:func:`celery_worker_names`); none under the LocalExecutor.
    celery_workers: tuple[str, ...] = ()
    #: The task slots (``--concurrency``) of each Celery worker.
    celery_concurrency: int = 4
    supervisor: Supervisor = field(init=False)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(self.home / "process_logs", env=self.env, cwd=self.home)

    @property
    def components(self) -> tuple[str, ...]:
        """Every component: scheduler, dag-processor, triggerer, api-server, the Celery workers."""
        return (*COMPONENTS, *self.celery_workers)

    # ---------------------------------------------------------------- processes
    def log_path(self, component: str) -> Path:
        return self.supervisor.log_path(component)

    def start(self, component: str) -> int:
        """Start ``airflow <component>`` (``scheduler``, ``api-server``, ...); returns its pid."""
        return self.supervisor.start(component, [airflow_bin(), *component.split()])

    def pid(self, component: str) -> int | None:
        """The component's main process, or None when it is not running."""
        return self.supervisor.pid(component)

    # ---------------------------------------------------------------- Celery workers
    def celery_hostname(self, component: str) -> str:
        """The Celery hostname of a worker component: ``w<i>@<host>`` for ``celery-worker-<i>``."""
        return f"w{self.celery_workers.index(component) + 1}@{socket.gethostname()}"

    def start_celery_worker(self, component: str) -> int:
        """Start ``airflow celery worker`` as the component ``celery-worker-<i>``; returns its pid."""
        i = self.celery_workers.index(component) + 1
        argv = [airflow_bin(), "celery", "worker", "--celery-hostname", self.celery_hostname(component),
                "--concurrency", str(self.celery_concurrency)]
        if i > 1:
            argv.append("--skip-serve-logs")  # the first worker serves them, on the one port
        env = {**self.env, CELERY_WORKER_ENV: self.celery_hostname(component)}
        return self.supervisor.start(component, argv, env=env)

    def celery_ping(self, timeout: float = 1.0) -> list[str]:
        """The Celery hostnames of the workers that answer a ping on the broker now (none when
        the broker does not answer)."""
        from celery import Celery

        app = Celery(set_as_current=False, broker=self.env["AIRFLOW__CELERY__BROKER_URL"])
        app.conf.broker_connection_retry_on_startup = False
        app.conf.broker_connection_max_retries = 1
        try:
            replies = app.control.ping(timeout=timeout) or []
        except Exception:  # noqa: BLE001 - a broker that is down or starting answers nothing
            return []
        finally:
            app.close()
        return sorted(name for reply in replies for name in reply)

    def wait_celery_workers(self, components: tuple[str, ...] | None = None, timeout: float = 120) -> float:
        """Wait until the Celery workers ``components`` (default: all) answer a ping; returns seconds."""
        wanted = {self.celery_hostname(c) for c in (self.celery_workers if components is None else components)}
        t0 = time.monotonic()
        answered: list[str] = []
        while not wanted <= set(answered := self.celery_ping()):
            self.check_alive()
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"Celery workers {sorted(wanted - set(answered))} do not answer a ping after "
                                   f"{timeout}s (answered: {answered})\n{self.logs_tail()}")
            time.sleep(0.5)
        return time.monotonic() - t0

    def kill(self, component: str, sig: int = signal.SIGKILL, group: bool = True) -> int | None:
        """Send ``sig`` to a component (its whole process group, or only its main process with
        ``group=False``) and wait for the main process to exit; returns its pid.

        The component is no longer expected alive until :meth:`restart`.
        """
        return self.supervisor.kill(component, sig, group=group)

    def restart(self, component: str) -> int:
        """Start a component again (after :meth:`kill`, or stopping the running one first), with
        the command and environment it started with; returns its pid."""
        return self.supervisor.restart(component)

    def check_alive(self) -> None:
        dead = self.supervisor.exited()
        if dead:
            raise RuntimeError(f"Airflow components exited: {dead}\n{self.logs_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every process group, then SIGKILL what is left after ``timeout`` seconds."""
        self.supervisor.stop(timeout)

    def leftover_pids(self) -> list[int]:
        """PIDs still alive in any of the harness's process groups (should be empty after stop)."""
        return self.supervisor.leftover_pids()

    def logs_tail(self, lines: int = 60) -> str:
        """The end of every process log and of the newest task logs."""
        parts = [self.supervisor.tail(lines)]
        for path in sorted((self.home / "logs").rglob("*.log"))[-8:]:
            if "dag_processor" not in path.parts:
                parts.append(tail_file(path, lines, f"task log {path.relative_to(self.home)}"))
        return "\n".join(p for p in parts if p)

    def cli(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``airflow <args>`` against this home."""
        return subprocess.run(
            [airflow_bin(), *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def task_log_files(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[Path]:
        """Local task log files of one TI, all attempts, including ``*.trigger.<id>.log``
        files that the triggerer writes while the TI is deferred."""
        base = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            base = base / f"map_index={map_index}"
        return sorted(base.glob("attempt=*.log*"))


@contextlib.contextmanager
def airflow_env(
    dags_folder: str | os.PathLike,
    config: Mapping[str, str] | None = None,
    home: str | os.PathLike | None = None,
    startup_timeout: float = 180,
    keep_home: bool = False,
    local_settings: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    db_url: str | None = None,
    connections: Mapping[str, Mapping[str, Any] | str] | None = None,
    celery_workers: int = 0,
    celery_concurrency: int = 4,
) -> Iterator[AirflowEnv]:
    """Start scheduler, dag-processor, triggerer and api-server (and ``celery_workers`` Celery
    workers) on a fresh home; stop them at exit.

    ``config`` adds/overrides settings as ``{"SECTION__KEY": "value"}``.
    ``local_settings`` is written to ``$AIRFLOW_HOME/config/airflow_local_settings.py``
    (cluster policies such as ``task_instance_mutation_hook``).
    ``extra_env`` is added to every process's environment.
    ``db_url`` is the metadata DB (an empty, reachable database; default: SQLite in the home).
    ``connections`` are Airflow connections, given to every process as ``AIRFLOW_CONN_*``
    variables (:func:`~iqp_dev.airflow_config.connection_env`).
    ``celery_workers`` Celery workers with ``celery_concurrency`` task slots each are started
    too (module docstring); ``config`` must then set the CeleryExecutor and its broker
    (:func:`~iqp_dev.airflow_config.celery_config`).
    ``af.timings`` reports seconds for ``migrate``, ``healthy`` (processes up), ``celery_workers``
    (until they answer a ping, with any) and ``startup`` (total).
    """
    t0 = time.monotonic()
    tmp = None
    if home is None:
        tmp = tempfile.mkdtemp(prefix="airflow_iqp_home_")
        home = tmp
    home_path = Path(home).resolve()
    home_path.mkdir(parents=True, exist_ok=True)
    (home_path / "process_logs").mkdir(exist_ok=True)
    api_port = free_port()
    cfg = build_config(home_path, Path(dags_folder).resolve(), api_port, config, db_url=db_url)
    env = child_env(home_path, cfg)
    env.update(connection_env(connections or {}))
    env.update(extra_env or {})
    if local_settings is not None:
        (home_path / "config").mkdir(exist_ok=True)
        (home_path / "config" / "airflow_local_settings.py").write_text(local_settings)
    if celery_workers and "AIRFLOW__CELERY__BROKER_URL" not in env:
        raise ValueError("celery_workers need [celery] broker_url in config: see iqp_dev.airflow_config.celery_config")
    af = AirflowEnv(api_url=f"http://127.0.0.1:{api_port}", db_url=env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
                    home=home_path, dags_folder=Path(dags_folder).resolve(), env=env,
                    celery_workers=celery_worker_names(celery_workers), celery_concurrency=celery_concurrency)
    ok = False
    try:
        try:
            af.timings["migrate"] = migrate_home(home_path, env, af.log_path("db-migrate"))
        except subprocess.CalledProcessError:
            raise RuntimeError(f"airflow db migrate failed\n{af.logs_tail()}") from None
        for component in COMPONENTS:
            af.start(component)
        for component in af.celery_workers:
            af.start_celery_worker(component)
        af.timings["healthy"] = af.wait_healthy(startup_timeout)
        if af.celery_workers:
            af.timings["celery_workers"] = af.wait_celery_workers(timeout=startup_timeout)
        af.timings["startup"] = time.monotonic() - t0
        print(f"[airflow_harness] home={home_path} api={af.api_url} timings={af.timings}", file=sys.stderr)
        yield af
        ok = True
    except BaseException:
        print(f"[airflow_harness] failure; process logs of {home_path}:\n{af.logs_tail()}", file=sys.stderr)
        raise
    finally:
        af.stop()
        if tmp and ok and not keep_home:
            shutil.rmtree(tmp, ignore_errors=True)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
