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

On failure (any exception inside the ``with`` block, or a start-up failure) the tail of
every component's log is printed to stderr, so pytest shows why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
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

__all__ = ["AirflowEnv", "airflow_env", "free_port", "utcnow"]


@dataclass
class AirflowEnv(AirflowClient):
    """A running set of Airflow processes and the client of their API. Build with :func:`airflow_env`."""

    home: Path
    dags_folder: Path
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)
    supervisor: Supervisor = field(init=False)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(self.home / "process_logs", env=self.env, cwd=self.home)

    # ---------------------------------------------------------------- processes
    def log_path(self, component: str) -> Path:
        return self.supervisor.log_path(component)

    def start(self, component: str) -> int:
        """Start ``airflow <component>`` (``scheduler``, ``api-server``, ...); returns its pid."""
        return self.supervisor.start(component, [airflow_bin(), *component.split()])

    def pid(self, component: str) -> int | None:
        """The component's main process, or None when it is not running."""
        return self.supervisor.pid(component)

    def kill(self, component: str, sig: int = signal.SIGKILL, group: bool = True) -> int | None:
        """Send ``sig`` to a component (its whole process group, or only its main process with
        ``group=False``) and wait for the main process to exit; returns its pid.

        The component is no longer expected alive until :meth:`restart`.
        """
        return self.supervisor.kill(component, sig, group=group)

    def restart(self, component: str) -> int:
        """Start a component again (after :meth:`kill`, or stopping the running one first); returns its pid."""
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
) -> Iterator[AirflowEnv]:
    """Start scheduler, dag-processor, triggerer and api-server on a fresh home; stop them at exit.

    ``config`` adds/overrides settings as ``{"SECTION__KEY": "value"}``.
    ``local_settings`` is written to ``$AIRFLOW_HOME/config/airflow_local_settings.py``
    (cluster policies such as ``task_instance_mutation_hook``).
    ``extra_env`` is added to every process's environment.
    ``db_url`` is the metadata DB (an empty, reachable database; default: SQLite in the home).
    ``connections`` are Airflow connections, given to every process as ``AIRFLOW_CONN_*``
    variables (:func:`~iqp_dev.airflow_config.connection_env`).
    ``af.timings`` reports seconds for ``migrate``, ``healthy`` (processes up) and ``startup`` (total).
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
    af = AirflowEnv(api_url=f"http://127.0.0.1:{api_port}", db_url=env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
                    home=home_path, dags_folder=Path(dags_folder).resolve(), env=env)
    ok = False
    try:
        try:
            af.timings["migrate"] = migrate_home(home_path, env, af.log_path("db-migrate"))
        except subprocess.CalledProcessError:
            raise RuntimeError(f"airflow db migrate failed\n{af.logs_tail()}") from None
        for component in COMPONENTS:
            af.start(component)
        af.timings["healthy"] = af.wait_healthy(startup_timeout)
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
