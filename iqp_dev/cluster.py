"""A throw-away cluster made of real processes: PostgreSQL, Spark standalone, Spark Connect, Airflow.

The topology of ``docker-compose.yaml`` without a container engine, for the cluster tests,
the fault suite and benchmarks. ``cluster_env()`` starts, on 127.0.0.1 and free ports, in one
temp dir:

* **PostgreSQL** (the Debian package's ``initdb`` / ``pg_ctl``): a fresh data directory, trust
  authentication on loopback only, a unix socket inside the data directory; the database
  ``airflow`` (owner ``airflow``) is the Airflow metadata DB
  (``postgresql+psycopg2://airflow@127.0.0.1:PORT/airflow``).
* **A Spark standalone master and one worker** from pyspark's own ``bin/spark-class``; start-up
  waits until the worker is registered (the master web UI's ``/json/``).
* **A Spark Connect server** on that master (:func:`airflow_iqp.spark.connect.start_server`),
  bound to 127.0.0.1.
* **The Airflow scheduler, triggerer, dag-processor and api-server** from
  :func:`iqp_dev.local_airflow.airflow_env`, on the PostgreSQL DB, with the connections
  ``spark_default`` (the standalone master: spark-submit ships the package to the executors,
  ``[iqp] ship_package``) and ``spark_connect_default`` (the Connect server).

Every Spark application gets a share of the one worker (``spark-defaults.conf`` in the
cluster's ``SPARK_CONF_DIR``: one core and a small executor each), so the Connect server's
executor and a spark-submit batch run side by side.

PostgreSQL refuses to run as root. Run as root (as here and in CI containers), the harness
runs ``initdb``, ``pg_ctl`` and ``postgres`` as the unprivileged ``postgres`` user (which the
Debian package creates) through ``runuser -u postgres --``; its data directory is then a
separate temp dir under ``/tmp`` owned by that user (a dir under pytest's 0700 base temp
would not be reachable for it). Run as anyone else, they run as that user. When the
binaries are missing, ``scripts/setup_postgres.sh`` installs them.

Usage::

    from iqp_dev.cluster import cluster_env

    with cluster_env(dags_folder, extra_env={...}) as cl:
        cl.airflow.wait_for_dag("iqp_cq2")        # the AirflowEnv of local_airflow.py
        cl.pids()                                 # {"postgres": 123, "spark-master": ..., ...}
        cl.kill("spark-worker"); cl.restart("spark-worker")

By hand: ``python -m iqp_dev.cluster up [--dags DIR]`` (or ``scripts/cluster.sh``) starts it
and prints its URLs until Ctrl-C.

Teardown stops every process, also after a failure; each process' log stays in
``<root>/logs`` (and the Airflow ones in ``<root>/airflow/process_logs``). :meth:`Cluster.logs_tail`
prints their tails; a failed ``with`` block prints them to stderr and keeps the temp dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iqp_dev.local_airflow import AirflowEnv, airflow_env, free_port
from iqp_dev.postgres import Postgres, pg_bindir
from iqp_dev.procs import alive as _alive

SPARK_COMPONENTS = ("spark-master", "spark-worker", "spark-connect")
AIRFLOW_COMPONENTS = ("scheduler", "triggerer", "dag-processor", "api-server")
COMPONENTS = ("postgres", *SPARK_COMPONENTS, *AIRFLOW_COMPONENTS)

#: Per Spark application on the one worker: one core, a small executor.
SPARK_DEFAULTS: dict[str, str] = {
    "spark.cores.max": "1",
    "spark.executor.cores": "1",
    "spark.executor.memory": "768m",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.log.level": "WARN",
    # A batch that loses its executor (worker killed) gets new ones when the worker is back.
    "spark.deploy.maxExecutorRetries": "20",
}
# ------------------------------------------------------------------------- processes

def _proc_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", int(port))) == 0


#: A task process's title, set by Airflow's task runner: ``airflow worker -- <task instance id>``.
TASK_TITLE = re.compile(r"airflow worker -- [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def _spark_home() -> Path:
    from airflow_iqp.spark.connect import spark_home

    return spark_home()


@dataclass
class Cluster:
    """A running cluster; build with :func:`cluster_env`. Components: :data:`COMPONENTS`."""

    root: Path
    postgres: Postgres
    master_port: int
    master_ui_port: int
    worker_ui_port: int
    connect_port: int
    spark_env: dict[str, str]
    worker_cores: int = 4
    worker_memory: str = "3g"
    airflow: AirflowEnv | None = None
    #: Keep the cluster's directories at exit (set it to look at the logs after a bad run).
    keep: bool = False
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    # ---------------------------------------------------------------- addresses
    @property
    def pg_url(self) -> str:
        """The metadata DB's SQLAlchemy URL (no password: trust authentication on loopback)."""
        return self.postgres.url

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://127.0.0.1:{self.master_ui_port}"

    @property
    def connect_url(self) -> str:
        return f"sc://127.0.0.1:{self.connect_port}"

    @property
    def connect_dir(self) -> Path:
        return self.root / "connect"

    def log_path(self, component: str) -> Path:
        if component in AIRFLOW_COMPONENTS:
            assert self.airflow is not None
            return self.airflow.log_path(component)
        if component == "postgres":
            return self.postgres.log
        if component == "spark-connect":
            from airflow_iqp.spark.connect import server_status

            log = server_status(self.connect_port, base=self.connect_dir)["log"]
            return Path(log) if log else self.root / "logs" / "spark-connect.missing"
        return self.root / "logs" / f"{component}.log"

    # ---------------------------------------------------------------- state
    def pid(self, component: str) -> int | None:
        """The main process of a component, or None when it is not running."""
        if component == "postgres":
            return self.postgres.pid()
        if component == "spark-connect":
            from airflow_iqp.spark.connect import server_status

            return server_status(self.connect_port, base=self.connect_dir)["pid"]
        if component in AIRFLOW_COMPONENTS:
            return self.airflow.pid(component) if self.airflow else None
        proc = self.procs.get(component)
        return proc.pid if proc is not None and proc.poll() is None else None

    def pids(self) -> dict[str, int | None]:
        return {c: self.pid(c) for c in COMPONENTS}

    def master_state(self) -> dict:
        """The master web UI's JSON: ``workers`` (with ``state``), ``activeapps``, ..."""
        with urllib.request.urlopen(self.master_ui + "/json/", timeout=10) as resp:
            return json.loads(resp.read())

    def alive_workers(self) -> list[dict]:
        try:
            return [w for w in self.master_state().get("workers", []) if w.get("state") == "ALIVE"]
        except OSError:
            return []

    def wait_workers(self, alive: int, timeout: float = 120) -> float:
        """Wait until the master counts ``alive`` ALIVE workers (after a kill it notices the
        lost worker within seconds, not at once); returns seconds."""
        t0 = time.monotonic()
        while len(self.alive_workers()) != alive:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"the master has {len(self.alive_workers())} alive workers, not {alive}, "
                                   f"after {timeout}s")
            time.sleep(0.5)
        return time.monotonic() - t0

    def processes(self) -> list[dict]:
        """Every live process started for this cluster's Airflow: ``{"pid", "ppid", "cmdline"}``;
        task processes, spark-submit JVMs and Python drivers among them. Found by their
        ``AIRFLOW_HOME``, or by descent from one that has it: a process title (``airflow
        worker -- <ti id>``, set by the task runner) overwrites the memory that
        ``/proc/<pid>/environ`` reads."""
        home = str(self.airflow.home) if self.airflow else None
        if not home:
            return []
        every = {}
        for pid in _pids():
            if pid == os.getpid() or not _alive(pid):
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                every[pid] = {"pid": pid, "ppid": int(stat[stat.rindex(")") + 2:].split()[1]), "cmdline": _cmdline(pid)}
            except (OSError, ValueError):
                continue
        found = {pid for pid in every if _proc_env(pid).get("AIRFLOW_HOME") == home}
        while grown := {pid for pid, e in every.items() if e["ppid"] in found} - found:
            found |= grown
        return [every[pid] for pid in sorted(found)]

    def spark_submit_pids(self) -> list[int]:
        """The driver JVMs of the spark-submits that Airflow tasks of this cluster run now."""
        return [p["pid"] for p in self.processes()
                if "org.apache.spark.deploy.SparkSubmit" in p["cmdline"] and "java" in p["cmdline"].split()[0]]

    def task_pids(self, ti_id: str | None = None) -> list[int]:
        """The task processes (``airflow worker -- <ti id>``) now running, or the one of a TI
        (the REST API's task instance ``id``). The LocalExecutor's own worker processes
        (``airflow worker -- LocalExecutor: <idle>``) are not task processes."""
        return [p["pid"] for p in self.processes() if TASK_TITLE.fullmatch(p["cmdline"])
                and (ti_id is None or p["cmdline"].split()[-1] == ti_id)]

    def executor_pids(self) -> list[int]:
        """The executor JVMs on the worker (children of the worker process)."""
        return [pid for pid in _pids() if "CoarseGrainedExecutorBackend" in _cmdline(pid)
                and _proc_env(pid).get("SPARK_CONF_DIR") == self.spark_env["SPARK_CONF_DIR"]]

    # ---------------------------------------------------------------- start / kill / restart
    def _spark_class(self, component: str, *args: str) -> None:
        log = self.root / "logs" / f"{component}.log"
        with open(log, "ab") as out:
            self.procs[component] = subprocess.Popen(
                [str(_spark_home() / "bin" / "spark-class"), *args], env=self.spark_env, cwd=self.root,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def start(self, component: str, timeout: float = 180) -> float:
        """Start one component (after :meth:`kill`, or at cluster start) and wait until it
        serves; returns seconds. The worker and Connect server come back on the same master
        and ports."""
        t0 = time.monotonic()
        if component == "postgres":
            self.postgres.start()
        elif component == "spark-master":
            self._spark_class(component, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", str(self.master_port), "--webui-port", str(self.master_ui_port))
            self._wait(lambda: self._master_up(), component, timeout)
        elif component == "spark-worker":
            before = {w["id"] for w in self.alive_workers()}
            self._spark_class(component, "org.apache.spark.deploy.worker.Worker", self.master_url,
                              "--host", "127.0.0.1", "--cores", str(self.worker_cores),
                              "--memory", self.worker_memory, "--webui-port", str(self.worker_ui_port),
                              "--work-dir", str(self.root / "worker-work"))
            self._wait(lambda: bool({w["id"] for w in self.alive_workers()} - before), component, timeout)
        elif component == "spark-connect":
            from airflow_iqp.spark.connect import start_server

            start_server(self.connect_port, base=self.connect_dir, master=self.master_url,
                         conf={**SPARK_DEFAULTS, "spark.driver.host": "127.0.0.1"},
                         driver_memory="1g", timeout=timeout)
        elif component in AIRFLOW_COMPONENTS:
            assert self.airflow is not None
            self.airflow.restart(component)
            self._wait(lambda: self.pid(component) is not None, component, 10)
        else:
            raise ValueError(f"unknown component {component!r}; one of {COMPONENTS}")
        return time.monotonic() - t0

    def _master_up(self) -> bool:
        try:
            self.master_state()
            return True
        except OSError:
            return False

    def _wait(self, ready, component: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self.procs.get(component)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{component} exited with {proc.returncode}\n{self.logs_tail()}")
            if ready():
                return
            time.sleep(0.5)
        raise TimeoutError(f"{component} not ready after {timeout}s\n{self.logs_tail()}")

    def kill(self, component: str, sig: int = signal.SIGKILL, group: bool = True) -> int | None:
        """Send ``sig`` (default SIGKILL) to a component and wait until it is gone; returns its pid.

        ``group=True`` (default) also kills what the component started, as a crashed machine
        or container would: the worker's executors, the scheduler's task processes, the
        Connect server's Python workers. ``group=False`` kills the main process only.
        PostgreSQL is always killed as its postmaster (its backends then exit by themselves).
        """
        pid = self.pid(component)
        if component in AIRFLOW_COMPONENTS:
            return self.airflow.kill(component, sig, group=group) if pid else None
        if pid is None:
            return None
        if component == "spark-connect":
            import psutil

            victims = [pid]
            if group:
                with contextlib.suppress(psutil.Error):
                    victims += [c.pid for c in psutil.Process(pid).children(recursive=True)]
            for v in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(v, sig)
            # spark-daemon.sh refuses to start while its pid file names a "java" process, and
            # a killed server can stay a zombie (when init does not reap): forget its pid.
            for pid_file in (self.connect_dir / f"port-{self.connect_port}" / "pid").glob("*.pid"):
                pid_file.unlink(missing_ok=True)
        elif component == "postgres" or not group:
            os.kill(pid, sig)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
        deadline = time.monotonic() + 60
        # A SIGKILLed JVM is a zombie before its last threads have closed its sockets: the
        # Connect server's port (to be reused by a restart) is free only once that is done.
        while (_alive(pid) or (component == "spark-connect" and _port_open(self.connect_port))) \
                and time.monotonic() < deadline:
            proc = self.procs.get(component)
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.2)
            else:
                time.sleep(0.2)
        return pid

    def restart(self, component: str, timeout: float = 180) -> float:
        """:meth:`kill` (SIGTERM) the component if it runs, then :meth:`start` it; returns start-up seconds."""
        if self.pid(component) is not None:
            self.kill(component, signal.SIGTERM)
        return self.start(component, timeout)

    # ---------------------------------------------------------------- teardown and logs
    def stop(self) -> None:
        """Stop everything: Airflow, the Connect server, the worker, the master, PostgreSQL,
        and any process left with this cluster's ``AIRFLOW_HOME`` or Spark conf dir."""
        if self.airflow is not None:
            self.airflow.stop()
        with contextlib.suppress(Exception):
            from airflow_iqp.spark.connect import stop_server

            stop_server(self.connect_port, base=self.connect_dir, timeout=10)
        for component in ("spark-worker", "spark-master"):
            proc = self.procs.get(component)
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for pid in self.leftover_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.postgres.stop()

    def leftover_pids(self) -> list[int]:
        """Live processes that belong to this cluster but to none of its running components'
        bookkeeping (after :meth:`stop` this should be empty)."""
        conf_dir = self.spark_env["SPARK_CONF_DIR"]
        home = str(self.airflow.home) if self.airflow else None
        left = []
        for pid in _pids():
            if pid == os.getpid() or not _alive(pid):
                continue
            env = _proc_env(pid)
            if env.get("SPARK_CONF_DIR") == conf_dir or (home and env.get("AIRFLOW_HOME") == home):
                left.append(pid)
        return left

    def logs_tail(self, lines: int = 40) -> str:
        parts = [f"----- postgres (last {lines} lines) -----\n{self.postgres.tail(lines)}"]
        for component in SPARK_COMPONENTS:
            try:
                path = self.log_path(component)
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except (OSError, AssertionError):
                continue
            parts.append(f"----- {component} (last {lines} lines) -----\n" + "\n".join(text))
        if self.airflow is not None:
            parts.append(self.airflow.logs_tail(lines))
        return "\n".join(parts)

    def describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "pg_url": self.pg_url, "master_url": self.master_url,
                "master_ui": self.master_ui, "connect_url": self.connect_url,
                "api_url": self.airflow.api_url if self.airflow else None, "pids": self.pids(),
                "timings": {k: round(v, 1) for k, v in self.timings.items()}}


def _spark_env(root: Path) -> dict[str, str]:
    conf_dir = root / "spark-conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in SPARK_DEFAULTS.items()))
    from airflow_iqp.spark.connect import without_connect_mode

    env = without_connect_mode()
    env.update({"SPARK_HOME": str(_spark_home()), "SPARK_CONF_DIR": str(conf_dir), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_DIRS": str(root / "spark-local"), "SPARK_DAEMON_MEMORY": "384m",
                "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "PYTHONUNBUFFERED": "1"})
    return env


def _raise_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def cluster_env(
    dags_folder: str | os.PathLike,
    *,
    extra_env: Mapping[str, str] | None = None,
    config: Mapping[str, str] | None = None,
    connections: Mapping[str, Mapping[str, Any] | str] | None = None,
    root: str | os.PathLike | None = None,
    worker_cores: int = 4,
    worker_memory: str = "3g",
    keep: bool = False,
    startup_timeout: float = 240,
) -> Iterator[Cluster]:
    """Start the cluster (module docstring), yield a :class:`Cluster`, stop everything at exit.

    ``extra_env`` and ``config`` (``{"SECTION__KEY": value}``) go to the Airflow processes as
    in :func:`~iqp_dev.local_airflow.airflow_env`; ``connections`` are added to
    ``spark_default`` and ``spark_connect_default`` (and may replace them).
    ``worker_cores`` are the cores the worker offers (each application takes one; more than
    the machine has is fine: they are slots, not CPUs). The temp dir is removed after a
    clean exit unless ``keep``; after a failure it is kept for its logs.
    """
    t0 = time.monotonic()
    base = Path(root) if root else Path(tempfile.mkdtemp(prefix="iqp-cluster-"))
    base.mkdir(parents=True, exist_ok=True)
    (base / "logs").mkdir(exist_ok=True)
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) were not found: run "
                           "scripts/setup_postgres.sh, or set IQP_PG_BIN to their directory")
    # As root the data directory belongs to the postgres user, in a temp dir of its own.
    pg_parent = Path(tempfile.mkdtemp(prefix="iqp-pg-")) if os.geteuid() == 0 else base
    pg = Postgres(datadir=pg_parent / "data", port=free_port(), bindir=bindir, log=pg_parent / "postgres.log")
    cl = Cluster(root=base, postgres=pg, master_port=free_port(), master_ui_port=free_port(),
                 worker_ui_port=free_port(), connect_port=free_port(), spark_env=_spark_env(base),
                 worker_cores=worker_cores, worker_memory=worker_memory, keep=keep)
    ok = False
    # A SIGTERM (a CI timeout, a kill of the test run) unwinds through the teardown below
    # instead of leaving every process running.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        t = time.monotonic()
        pg.init()
        pg.start()
        pg.create_db()
        cl.timings["postgres"] = time.monotonic() - t
        for component in SPARK_COMPONENTS:
            cl.timings[component] = cl.start(component, timeout=startup_timeout)
        conns: dict[str, Any] = {
            "spark_default": {"conn_type": "spark", "host": "spark://127.0.0.1", "port": cl.master_port},
            "spark_connect_default": {"conn_type": "spark_connect", "host": "127.0.0.1", "port": cl.connect_port},
            **(connections or {}),
        }
        env = {"SPARK_CONF_DIR": cl.spark_env["SPARK_CONF_DIR"], "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOCAL_DIRS": cl.spark_env["SPARK_LOCAL_DIRS"], "SPARK_HOME": cl.spark_env["SPARK_HOME"],
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               **(extra_env or {})}
        cfg = {"IQP__SHIP_PACKAGE": "True", **(config or {})}
        with airflow_env(dags_folder, config=cfg, home=base / "airflow", startup_timeout=startup_timeout,
                         keep_home=True, extra_env=env, db_url=pg.url, connections=conns) as af:
            cl.airflow = af
            cl.timings.update({f"airflow_{k}": v for k, v in af.timings.items()})
            cl.timings["startup"] = time.monotonic() - t0
            print(f"[cluster] {json.dumps(cl.describe())}", file=sys.stderr)
            yield cl
        ok = True
    except BaseException:
        print(f"[cluster] failure; logs under {base} and {pg_parent}:\n{cl.logs_tail()}", file=sys.stderr)
        raise
    finally:
        cl.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if ok and not (keep or cl.keep):
            shutil.rmtree(base, ignore_errors=True)
            if pg_parent != base:
                shutil.rmtree(pg_parent, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m iqp_dev.cluster up [--dags DIR]``: start the cluster and wait for Ctrl-C."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m iqp_dev.cluster", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the cluster, print its addresses, stop it on Ctrl-C")
    up.add_argument("--dags", default=str(Path(__file__).resolve().parents[1] / "dags"))
    up.add_argument("--root", default=None, help="the cluster's directory (default: a new temp dir)")
    args = parser.parse_args(argv)
    try:
        with cluster_env(args.dags, root=args.root, keep=True) as cl:
            print(json.dumps(cl.describe(), indent=1), flush=True)
            print("cluster up; Ctrl-C (or SIGTERM) stops it", flush=True)
            while True:
                time.sleep(1)
    except (KeyboardInterrupt, SystemExit):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
