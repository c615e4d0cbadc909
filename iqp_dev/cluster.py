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
* **A Spark Connect server** on that master, bound to 127.0.0.1, started as the package's
  own (:func:`airflow_iqp.spark.connect.server_args`) but in the foreground; start-up waits
  until its application runs on the master.
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

The Spark processes (:mod:`iqp_dev.spark_standalone`) and the Airflow ones each run under a
supervisor of the package (:class:`airflow_iqp.cli.supervisor.Supervisor`: a process group
and a log each), PostgreSQL under its own ``pg_ctl``. Teardown stops every process, also
after a failure; each process' log stays in ``<root>/logs`` (and the Airflow ones in
``<root>/airflow/process_logs``). :meth:`Cluster.logs_tail` prints their tails; a failed
``with`` block prints them to stderr and keeps the temp dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_iqp.cli.supervisor import send, wait_gone
from iqp_dev import procs
from iqp_dev.local_airflow import AirflowEnv, airflow_env, free_port
from iqp_dev.postgres import Postgres, pg_bindir
from iqp_dev.spark_standalone import SparkStandalone

SPARK_COMPONENTS = ("spark-master", "spark-worker", "spark-connect")
AIRFLOW_COMPONENTS = ("scheduler", "triggerer", "dag-processor", "api-server")
COMPONENTS = ("postgres", *SPARK_COMPONENTS, *AIRFLOW_COMPONENTS)

#: A task process's title, set by Airflow's task runner: ``airflow worker -- <task instance id>``.
TASK_TITLE = re.compile(r"airflow worker -- [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class Cluster:
    """A running cluster; build with :func:`cluster_env`. Components: :data:`COMPONENTS`."""

    root: Path
    postgres: Postgres
    spark: SparkStandalone
    airflow: AirflowEnv | None = None
    #: Keep the cluster's directories at exit (set it to look at the logs after a bad run).
    keep: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    # ---------------------------------------------------------------- addresses
    @property
    def pg_url(self) -> str:
        """The metadata DB's SQLAlchemy URL (no password: trust authentication on loopback)."""
        return self.postgres.url

    @property
    def master_url(self) -> str:
        return self.spark.master_url

    def log_path(self, component: str) -> Path:
        if component in AIRFLOW_COMPONENTS:
            assert self.airflow is not None
            return self.airflow.log_path(component)
        return self.postgres.log if component == "postgres" else self.spark.supervisor.log_path(component)

    # ---------------------------------------------------------------- state
    def pid(self, component: str) -> int | None:
        """The main process of a component, or None when it is not running."""
        if component == "postgres":
            return self.postgres.pid()
        if component in AIRFLOW_COMPONENTS:
            return self.airflow.pid(component) if self.airflow else None
        return self.spark.supervisor.pid(component)

    def pids(self) -> dict[str, int | None]:
        return {c: self.pid(c) for c in COMPONENTS}

    def master_state(self) -> dict:
        """The master web UI's JSON: ``workers`` (with ``state``), ``activeapps``, ..."""
        return self.spark.master_state()

    def wait_workers(self, alive: int, timeout: float = 120) -> float:
        """Wait until the master counts ``alive`` ALIVE workers; returns seconds."""
        return self.spark.wait_workers(alive, timeout)

    def executor_pids(self) -> list[int]:
        """The executor JVMs on the worker (children of the worker process)."""
        return self.spark.executor_pids()

    def processes(self) -> list[dict]:
        """Every live process started for this cluster's Airflow: ``{"pid", "ppid", "cmdline"}``;
        task processes, spark-submit JVMs and Python drivers among them, found by their
        ``AIRFLOW_HOME`` or by descent from one that has it (:func:`iqp_dev.procs.family`)."""
        return procs.family("AIRFLOW_HOME", str(self.airflow.home)) if self.airflow else []

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

    # ---------------------------------------------------------------- start / kill / restart
    def start(self, component: str, timeout: float = 180) -> float:
        """Start one component (after :meth:`kill`, or at cluster start) and wait until it
        serves; returns seconds. The worker and Connect server come back on the same master
        and ports."""
        t0 = time.monotonic()
        if component == "postgres":
            self.postgres.start()
        elif component in SPARK_COMPONENTS:
            self.spark.start(component, timeout, self.logs_tail)
        elif component in AIRFLOW_COMPONENTS:
            assert self.airflow is not None
            self.airflow.restart(component)
            if self.airflow.pid(component) is None:
                raise RuntimeError(f"{component} exited at once\n{self.logs_tail()}")
        else:
            raise ValueError(f"unknown component {component!r}; one of {COMPONENTS}")
        return time.monotonic() - t0

    def kill(self, component: str, sig: int = signal.SIGKILL, group: bool = True) -> int | None:
        """Send ``sig`` (default SIGKILL) to a component and wait until it is gone; returns its pid.

        ``group=True`` (default) also kills what the component started in its process group,
        as a crashed machine or container would: the worker's executors, the scheduler's task
        processes. ``group=False`` kills the main process only. PostgreSQL is always killed as
        its postmaster (its backends then exit by themselves).
        """
        pid = self.pid(component)
        if pid is None:
            return None
        if component in AIRFLOW_COMPONENTS:
            return self.airflow.kill(component, sig, group=group)
        if component == "postgres":
            send(pid, sig)
            wait_gone([pid], 60, poll=0.2)
            return pid
        return self.spark.kill(component, sig, group)

    def restart(self, component: str, timeout: float = 180) -> float:
        """:meth:`kill` (SIGTERM) the component if it runs, then :meth:`start` it; returns start-up seconds."""
        if self.pid(component) is not None:
            self.kill(component, signal.SIGTERM)
        return self.start(component, timeout)

    # ---------------------------------------------------------------- teardown and logs
    def stop(self) -> None:
        """Stop everything: Airflow, the Spark processes, any process left with this cluster's
        ``AIRFLOW_HOME`` or Spark conf dir (a task's spark-submit runs in a group of its own),
        then PostgreSQL."""
        if self.airflow is not None:
            self.airflow.stop()
        self.spark.stop()
        for pid in self.leftover_pids():
            send(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.postgres.stop()

    def leftover_pids(self) -> list[int]:
        """Live processes that belong to this cluster but to none of its running components'
        bookkeeping (after :meth:`stop` this should be empty)."""
        wanted = {"SPARK_CONF_DIR": self.spark.env["SPARK_CONF_DIR"]}
        if self.airflow is not None:
            wanted["AIRFLOW_HOME"] = str(self.airflow.home)
        return procs.with_env(wanted)

    def logs_tail(self, lines: int = 40) -> str:
        parts = [self.postgres.tail(lines), self.spark.supervisor.tail(lines)]
        if self.airflow is not None:
            parts.append(self.airflow.logs_tail(lines))
        return "\n".join(p for p in parts if p)

    def describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "pg_url": self.pg_url, "master_url": self.master_url,
                "master_ui": self.spark.master_ui, "connect_url": self.spark.connect_url,
                "api_url": self.airflow.api_url if self.airflow else None, "pids": self.pids(),
                "timings": {k: round(v, 1) for k, v in self.timings.items()}}


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
    cl = Cluster(root=base, postgres=pg, spark=SparkStandalone.create(base, worker_cores, worker_memory), keep=keep)
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
            "spark_default": {"conn_type": "spark", "host": "spark://127.0.0.1", "port": cl.spark.master_port},
            "spark_connect_default": {"conn_type": "spark_connect", "host": "127.0.0.1",
                                      "port": cl.spark.connect_port},
            **(connections or {}),
        }
        env = {"SPARK_CONF_DIR": cl.spark.env["SPARK_CONF_DIR"], "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOCAL_DIRS": cl.spark.env["SPARK_LOCAL_DIRS"], "SPARK_HOME": cl.spark.env["SPARK_HOME"],
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
