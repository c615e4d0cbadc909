"""A throw-away cluster made of real processes: PostgreSQL, Spark standalone, Spark Connect, Airflow
(and, with the CeleryExecutor, Redis and Celery workers).

The topology of ``docker-compose.yaml`` without a container engine, for the cluster tests,
the fault suite and benchmarks. ``cluster_env()`` starts, on 127.0.0.1 and free ports, in one
temp dir:

* **PostgreSQL** (the Debian package's ``initdb`` / ``pg_ctl``): a fresh data directory, trust
  authentication on loopback only, a unix socket inside the data directory; the database
  ``airflow`` (owner ``airflow``) is the Airflow metadata DB
  (``postgresql+psycopg2://airflow@127.0.0.1:PORT/airflow``).
* **A Spark standalone master and one worker** (``spark_workers=N``: N workers, the components
  ``spark-worker``, ``spark-worker-2``, ...) from pyspark's own ``bin/spark-class``; start-up
  waits until the master counts every worker ALIVE (its web UI's ``/json/``).
* **A Spark Connect server** on that master, bound to 127.0.0.1, started as the package's
  own (:func:`airflow_iqp.spark.connect.server_args`) but in the foreground; start-up waits
  until its application runs on the master.
* **The Airflow scheduler, triggerer, dag-processor and api-server** from
  :func:`iqp_dev.local_airflow.airflow_env`, on the PostgreSQL DB, with the connections
  ``spark_default`` (the standalone master: spark-submit ships the package to the executors,
  ``[iqp] ship_package``) and ``spark_connect_default`` (the Connect server). By default on
  the LocalExecutor, whose task processes the scheduler starts.
* With ``executor="celery"``: the CeleryExecutor instead, with **Redis** as its broker
  (:mod:`iqp_dev.redis`: ``redis-server`` on a free port, nothing persisted; the component
  ``redis``) started before Airflow, the Celery result backend on the PostgreSQL DB
  (``db+postgresql+psycopg2://...``), and ``celery_workers`` (default 2) **Celery workers**
  (``airflow celery worker``, the components ``celery-worker-1``, ``celery-worker-2``, ...,
  Celery hostnames ``w1@<host>``, ...; ``celery_concurrency`` task slots each) that run the
  tasks: :func:`iqp_dev.local_airflow.airflow_env` waits until each answers a Celery ping.
  Their task processes reach the api-server at ``[core] execution_api_server_url``, as the
  LocalExecutor's do; a task finds its worker's Celery hostname in ``IQP_CELERY_WORKER``
  (the TaskInstance ``hostname`` is the machine's, the same for every worker).

Every Spark application gets a share of one worker (``spark-defaults.conf`` in the
cluster's ``SPARK_CONF_DIR``: one core and a small executor each), so the Connect server's
executor and a spark-submit batch run side by side.

PostgreSQL refuses to run as root. Run as root (as here and in CI containers), the harness
runs ``initdb``, ``pg_ctl`` and ``postgres`` as the unprivileged ``postgres`` user (which the
Debian package creates) through ``runuser -u postgres --``; its data directory is then a
separate temp dir under ``/tmp`` owned by that user (a dir under pytest's 0700 base temp
would not be reachable for it). Run as anyone else, they run as that user. When the
binaries are missing, ``scripts/setup_postgres.sh`` installs them (and
``scripts/setup_redis.sh`` ``redis-server``).

Usage::

    from iqp_dev.cluster import cluster_env

    with cluster_env(dags_folder, extra_env={...}) as cl:
        cl.airflow.wait_for_dag("iqp_cq2")        # the AirflowEnv of local_airflow.py
        cl.pids()                                 # {"postgres": 123, "spark-master": ..., ...}
        cl.kill("spark-worker"); cl.restart("spark-worker")

    with cluster_env(dags_folder, executor="celery", spark_workers=2) as cl:
        cl.components                             # (..., "redis", ..., "celery-worker-1", "celery-worker-2")
        cl.kill("celery-worker-1"); cl.restart("celery-worker-1")

By hand: ``python -m iqp_dev.cluster up [--dags DIR] [--executor celery] [--spark-workers N]``
(or ``scripts/cluster.sh``) starts it and prints its URLs until Ctrl-C.

The Spark processes (:mod:`iqp_dev.spark_standalone`) and the Airflow ones (Celery workers
among them) each run under a supervisor of the package
(:class:`airflow_iqp.cli.supervisor.Supervisor`: a process group and a log each), PostgreSQL
under its own ``pg_ctl``, Redis as a process group of its own. Teardown stops every process,
also after a failure; each process' log stays in ``<root>/logs`` (Redis's too, and the
Airflow ones in ``<root>/airflow/process_logs``). :meth:`Cluster.logs_tail` prints their
tails; a failed ``with`` block prints them to stderr and keeps the temp dir.
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

from airflow_iqp.cli.supervisor import alive, send, wait_gone
from iqp_dev import procs
from iqp_dev.airflow_config import celery_config
from iqp_dev.local_airflow import AirflowEnv, airflow_env, celery_worker_names, free_port
from iqp_dev.postgres import Postgres, pg_bindir
from iqp_dev.redis import Redis, redis_bin
from iqp_dev.spark_standalone import SparkStandalone

#: The components of the default topology (one Spark worker, the LocalExecutor); a cluster's
#: own are :attr:`Cluster.components`.
SPARK_COMPONENTS = ("spark-master", "spark-worker", "spark-connect")
AIRFLOW_COMPONENTS = ("scheduler", "triggerer", "dag-processor", "api-server")
COMPONENTS = ("postgres", *SPARK_COMPONENTS, *AIRFLOW_COMPONENTS)
EXECUTORS = ("local", "celery")

#: A task process's title, set by Airflow's task runner: ``airflow worker -- <task instance id>``.
TASK_TITLE = re.compile(r"airflow worker -- [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class Cluster:
    """A running cluster; build with :func:`cluster_env`. Components: :attr:`components`
    (:data:`COMPONENTS` in the default topology)."""

    root: Path
    postgres: Postgres
    spark: SparkStandalone
    airflow: AirflowEnv | None = None
    #: The Celery broker (``executor="celery"``); None on the LocalExecutor.
    redis: Redis | None = None
    #: The Celery worker components (``celery-worker-1``, ...); none on the LocalExecutor.
    celery_workers: tuple[str, ...] = ()
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

    @property
    def broker_url(self) -> str | None:
        """The Celery broker's URL (``redis://127.0.0.1:PORT/0``); None on the LocalExecutor."""
        return self.redis.url if self.redis else None

    @property
    def airflow_components(self) -> tuple[str, ...]:
        return (*AIRFLOW_COMPONENTS, *self.celery_workers)

    @property
    def components(self) -> tuple[str, ...]:
        """Every component, in start order: ``postgres``, ``redis`` (with Celery), the Spark
        ones, the Airflow ones (the Celery workers last)."""
        return ("postgres", *(("redis",) if self.redis else ()), *self.spark.components, *self.airflow_components)

    def log_path(self, component: str) -> Path:
        if component in self.airflow_components:
            assert self.airflow is not None
            return self.airflow.log_path(component)
        if component == "redis" and self.redis is not None:
            return self.redis.log
        return self.postgres.log if component == "postgres" else self.spark.supervisor.log_path(component)

    # ---------------------------------------------------------------- state
    def pid(self, component: str) -> int | None:
        """The main process of a component, or None when it is not running."""
        if component == "postgres":
            return self.postgres.pid()
        if component == "redis":
            return self.redis.pid() if self.redis else None
        if component in self.airflow_components:
            return self.airflow.pid(component) if self.airflow else None
        return self.spark.supervisor.pid(component)

    def pids(self) -> dict[str, int | None]:
        return {c: self.pid(c) for c in self.components}

    def master_state(self) -> dict:
        """The master web UI's JSON: ``workers`` (with ``state``), ``activeapps``, ..."""
        return self.spark.master_state()

    def wait_workers(self, alive: int, timeout: float = 120) -> float:
        """Wait until the master counts ``alive`` ALIVE workers; returns seconds."""
        return self.spark.wait_workers(alive, timeout)

    def executor_pids(self, worker: str | None = None) -> list[int]:
        """The executor JVMs on the Spark workers (children of the worker processes), or on the
        worker component ``worker`` alone."""
        return self.spark.executor_pids(worker)

    def processes(self) -> list[dict]:
        """Every live process started for this cluster's Airflow: ``{"pid", "ppid", "cmdline"}``;
        task processes, spark-submit JVMs and Python drivers among them, found by their
        ``AIRFLOW_HOME`` or by descent from one that has it (:func:`iqp_dev.procs.family`)."""
        if self.airflow is None:
            return []
        return procs.family("AIRFLOW_HOME", str(self.airflow.home), [self.pid(c) for c in self.airflow_components])

    def spark_submit_pids(self) -> list[int]:
        """The driver JVMs of the spark-submits that Airflow tasks of this cluster run now."""
        return [p["pid"] for p in self.processes()
                if "org.apache.spark.deploy.SparkSubmit" in p["cmdline"] and "java" in p["cmdline"].split()[0]]

    def task_pids(self, ti_id: str | None = None) -> list[int]:
        """The task processes (``airflow worker -- <ti id>``) now running, or the one of a TI
        (the REST API's task instance ``id``). The LocalExecutor's own worker processes
        (``airflow worker -- LocalExecutor: <idle>``) and the Celery workers' pool processes
        (``airflow supervisor: ...`` while they run a task) are not task processes."""
        return [p["pid"] for p in self.processes() if TASK_TITLE.fullmatch(p["cmdline"])
                and (ti_id is None or p["cmdline"].split()[-1] == ti_id)]

    # ---------------------------------------------------------------- start / kill / restart
    def start(self, component: str, timeout: float = 180) -> float:
        """Start one component (after :meth:`kill`, or at cluster start) and wait until it
        serves; returns seconds. The Spark workers and Connect server come back on the same
        master and ports, Redis on the same port (empty; it serves once the running Celery
        workers answer a ping again), a Celery worker with the same Celery hostname (it serves
        once it answers a ping)."""
        t0 = time.monotonic()
        if component == "postgres":
            self.postgres.start()
        elif component == "redis" and self.redis is not None:
            self.redis.start(timeout)
            # The running Celery workers reconnect by themselves (within seconds): wait for them.
            running = tuple(c for c in self.celery_workers if self.airflow is not None and self.airflow.pid(c))
            if running:
                self.airflow.wait_celery_workers(running, timeout)
        elif component in self.spark.components:
            self.spark.start(component, timeout, self.logs_tail)
        elif component in self.airflow_components:
            assert self.airflow is not None
            self.airflow.restart(component)
            if self.airflow.pid(component) is None:
                raise RuntimeError(f"{component} exited at once\n{self.logs_tail()}")
            if component in self.celery_workers:
                self.airflow.wait_celery_workers((component,), timeout)
        else:
            raise ValueError(f"unknown component {component!r}; one of {self.components}")
        return time.monotonic() - t0

    def kill(self, component: str, sig: int = signal.SIGKILL, group: bool = True) -> int | None:
        """Send ``sig`` (default SIGKILL) to a component and wait until it is gone; returns its pid.

        ``group=True`` (default) also kills what the component started in its process group,
        as a crashed machine or container would: a Spark worker's executors, the scheduler's
        (LocalExecutor) or a Celery worker's task processes. ``group=False`` kills the main
        process only. PostgreSQL is always killed as its postmaster (its backends then exit by
        themselves), Redis as its one process.
        """
        pid = self.pid(component)
        if pid is None:
            return None
        if component in self.airflow_components:
            return self.airflow.kill(component, sig, group=group)
        if component == "postgres":
            send(pid, sig)
            wait_gone([pid], 60, poll=0.2)
            return pid
        if component == "redis":
            return self.redis.kill(sig)
        return self.spark.kill(component, sig, group)

    def restart(self, component: str, timeout: float = 180) -> float:
        """:meth:`kill` (SIGTERM) the component if it runs, then :meth:`start` it; returns start-up seconds.

        A component still alive after the SIGTERM's wait (a Celery worker's warm shutdown waits
        for its running tasks) is SIGKILLed with its group first, so that two never run at once."""
        pid = self.pid(component)
        if pid is not None:
            self.kill(component, signal.SIGTERM)
            if alive(pid):
                send(pid, signal.SIGKILL, group=component != "postgres")
                wait_gone([pid], 60, poll=0.2)
        return self.start(component, timeout)

    # ---------------------------------------------------------------- teardown and logs
    def stop(self) -> None:
        """Stop everything: Airflow (the Celery workers with it), the Spark processes, any
        process left with this cluster's ``AIRFLOW_HOME`` or Spark conf dir (a task's
        spark-submit runs in a group of its own), then Redis and PostgreSQL."""
        if self.airflow is not None:
            self.airflow.stop()
        self.spark.stop()
        for pid in self.leftover_pids():
            send(pid, signal.SIGKILL)
        if self.redis is not None:
            with contextlib.suppress(Exception):
                self.redis.stop()
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
        # Redis's log is in <root>/logs too: the Spark supervisor's tail shows it.
        parts = [self.postgres.tail(lines), self.spark.supervisor.tail(lines)]
        if self.airflow is not None:
            parts.append(self.airflow.logs_tail(lines))
        return "\n".join(p for p in parts if p)

    def describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "pg_url": self.pg_url, "broker_url": self.broker_url,
                "master_url": self.master_url, "master_ui": self.spark.master_ui,
                "connect_url": self.spark.connect_url,
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
    executor: str = "local",
    celery_workers: int = 2,
    celery_concurrency: int = 4,
    spark_workers: int = 1,
    spark_conf: Mapping[str, str] | None = None,
) -> Iterator[Cluster]:
    """Start the cluster (module docstring), yield a :class:`Cluster`, stop everything at exit.

    ``extra_env`` and ``config`` (``{"SECTION__KEY": value}``) go to the Airflow processes as
    in :func:`~iqp_dev.local_airflow.airflow_env`; ``connections`` are added to
    ``spark_default`` and ``spark_connect_default`` (and may replace them).
    ``worker_cores`` are the cores each Spark worker offers (each application takes one; more
    than the machine has is fine: they are slots, not CPUs); ``spark_workers`` Spark workers
    are started, and every Spark application reads ``spark_conf`` too (e.g. the S3A connector's,
:func:`iqp_dev.s3a.s3a_spark_conf`). ``executor`` is ``"local"`` (the LocalExecutor) or ``"celery"`` (the
    CeleryExecutor on Redis with ``celery_workers`` workers of ``celery_concurrency`` task
    slots each; ``config`` may override its settings). The temp dir is removed after a clean
    exit unless ``keep``; after a failure it is kept for its logs.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, not {executor!r}")
    if executor == "celery" and celery_workers < 1:
        raise ValueError(f"the CeleryExecutor needs at least one Celery worker, not {celery_workers}")
    if executor == "celery" and redis_bin() is None:
        raise RuntimeError("redis-server (the Celery broker) was not found: run scripts/setup_redis.sh, "
                           "or set IQP_REDIS_SERVER to it")
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
    cl = Cluster(root=base, postgres=pg, spark=SparkStandalone.create(base, worker_cores, worker_memory, spark_workers,
                                                                        spark_conf),
                 keep=keep)
    if executor == "celery":
        cl.redis = Redis(dir=base / "redis", port=free_port(), log=base / "logs" / "redis.log")
        cl.celery_workers = celery_worker_names(celery_workers)
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
        if cl.redis is not None:
            cl.timings["redis"] = cl.start("redis", timeout=60)
        for component in cl.spark.components:
            cl.timings[component] = cl.start(component, timeout=startup_timeout)
        cl.wait_workers(len(cl.spark.workers), timeout=startup_timeout)
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
        cfg = {"IQP__SHIP_PACKAGE": "True",
               **(celery_config(cl.redis.url, pg.url, celery_concurrency) if cl.redis is not None else {}),
               **(config or {})}
        with airflow_env(dags_folder, config=cfg, home=base / "airflow", startup_timeout=startup_timeout,
                         keep_home=True, extra_env=env, db_url=pg.url, connections=conns,
                         celery_workers=len(cl.celery_workers), celery_concurrency=celery_concurrency) as af:
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
    up.add_argument("--executor", choices=EXECUTORS, default="local",
                    help="Airflow's executor: local (default) or celery (Redis and Celery workers)")
    up.add_argument("--celery-workers", type=int, default=2, help="Celery workers with --executor celery (default 2)")
    up.add_argument("--spark-workers", type=int, default=1, help="Spark standalone workers (default 1)")
    args = parser.parse_args(argv)
    try:
        with cluster_env(args.dags, root=args.root, keep=True, executor=args.executor,
                         celery_workers=args.celery_workers, spark_workers=args.spark_workers) as cl:
            print(json.dumps(cl.describe(), indent=1), flush=True)
            print("cluster up; Ctrl-C (or SIGTERM) stops it", flush=True)
            while True:
                time.sleep(1)
    except (KeyboardInterrupt, SystemExit):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
