"""The Spark side of the cluster harness (:mod:`iqp_dev.cluster`): its settings, environment,
and the commands of a standalone master, its workers (one by default) and a Spark Connect
server on them.

Every process runs in the foreground under the harness's supervisor, from pyspark's own
``bin/``: the master and worker through ``spark-class``, the Connect server through
``spark-submit`` with the arguments :func:`airflow_iqp.spark.connect.server_args` gives the
package's own daemon. ``spark-class`` ends in ``exec java``, so a component's pid is its JVM.
The workers are the components ``spark-worker``, ``spark-worker-2``, ... (:func:`worker_names`),
each with a web UI port and a work directory of its own, all on 127.0.0.1.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from airflow_iqp.cli.supervisor import Supervisor
from iqp_dev import procs

#: Per Spark application on the workers: one core (so one executor on one worker), a small executor.
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
#: The name the Connect server's application has on the master (``server_args`` gives it).
CONNECT_APP = "Spark Connect server"


def worker_names(n: int) -> tuple[str, ...]:
    """The components of ``n`` workers: ``spark-worker`` (the one of a one-worker cluster), then
    ``spark-worker-2``, ``spark-worker-3``, ..."""
    return tuple("spark-worker" if i == 1 else f"spark-worker-{i}" for i in range(1, n + 1))


def spark_home() -> Path:
    from airflow_iqp.spark.connect import spark_home as home

    return home()


def spark_env(root: Path, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every Spark process of a cluster in ``root``; its ``spark-defaults.conf``
    (:data:`SPARK_DEFAULTS` and ``conf``, such as :func:`iqp_dev.s3a.s3a_spark_conf`'s) is
    written to ``root/spark-conf``: every application of the cluster reads it, the Connect
    server, each spark-submit and each executor."""
    from airflow_iqp.spark.connect import TOKEN_ENV, without_connect_mode

    conf_dir = root / "spark-conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in {**SPARK_DEFAULTS, **(conf or {})}.items()))
    env = without_connect_mode()
    env.pop(TOKEN_ENV, None)  # the Connect server takes no token: the Airflow connection sends none
    env.update({"SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(conf_dir), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_DIRS": str(root / "spark-local"), "SPARK_DAEMON_MEMORY": "384m",
                "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "PYTHONUNBUFFERED": "1"})
    return env


def master_argv(port: int, ui_port: int) -> list[str]:
    return [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)]


def worker_argv(master_url: str, cores: int, memory: str, ui_port: int, work_dir: Path) -> list[str]:
    return [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", master_url,
            "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory, "--webui-port", str(ui_port),
            "--work-dir", str(work_dir)]


def connect_argv(port: int, master_url: str) -> list[str]:
    from airflow_iqp.spark.connect import SERVER_CLASS, server_args

    args = server_args(port, master=master_url, conf={**SPARK_DEFAULTS, "spark.driver.host": "127.0.0.1"},
                       driver_memory="1g")
    return [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, *args]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", int(port))) == 0


@dataclass
class SparkStandalone:
    """A master, its workers (:attr:`workers`, each offering ``worker_cores`` and
    ``worker_memory``) and a Connect server on 127.0.0.1, under one supervisor whose logs are
    ``<root>/logs/<component>.log``. Build with :meth:`create`."""

    root: Path
    master_port: int
    master_ui_port: int
    #: One web UI port per worker, in the order of :attr:`components`.
    worker_ui_ports: list[int]
    connect_port: int
    env: dict[str, str]
    worker_cores: int = 4
    worker_memory: str = "3g"
    supervisor: Supervisor = field(init=False)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(self.root / "logs", env=self.env, cwd=self.root)

    @classmethod
    def create(cls, root: Path, worker_cores: int = 4, worker_memory: str = "3g", workers: int = 1,
               conf: Mapping[str, str] | None = None) -> SparkStandalone:
        """Free ports and the environment of :func:`spark_env` (with ``conf``) for ``workers``
        workers; nothing started yet."""
        from airflow_iqp.cli.dev import free_port

        if workers < 1:
            raise ValueError(f"a standalone cluster needs at least one worker, not {workers}")
        return cls(root=root, master_port=free_port(), master_ui_port=free_port(),
                   worker_ui_ports=[free_port() for _ in range(workers)], connect_port=free_port(),
                   env=spark_env(root, conf), worker_cores=worker_cores, worker_memory=worker_memory)

    @property
    def workers(self) -> tuple[str, ...]:
        """The worker components: ``spark-worker``, ``spark-worker-2``, ..."""
        return worker_names(len(self.worker_ui_ports))

    @property
    def components(self) -> tuple[str, ...]:
        """Every component, in start order: the master, the workers, the Connect server."""
        return ("spark-master", *self.workers, "spark-connect")

    @property
    def worker_ui_port(self) -> int:
        """The first worker's web UI port."""
        return self.worker_ui_ports[0]

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://127.0.0.1:{self.master_ui_port}"

    @property
    def connect_url(self) -> str:
        return f"sc://127.0.0.1:{self.connect_port}"

    def master_state(self) -> dict:
        """The master web UI's JSON: ``workers`` (with ``state``), ``activeapps``, ..."""
        with urllib.request.urlopen(self.master_ui + "/json/", timeout=10) as resp:
            return json.loads(resp.read())

    def listed(self, key: str, state: str, name: str | None = None) -> list[dict]:
        """The master's ``workers`` or ``activeapps`` in ``state`` (named ``name``); none when it does not answer."""
        try:
            return [e for e in self.master_state().get(key, [])
                    if e.get("state") == state and (name is None or e.get("name") == name)]
        except (OSError, ValueError):
            return []

    def wait_workers(self, alive: int, timeout: float = 120) -> float:
        """Wait until the master counts ``alive`` ALIVE workers (after a kill it notices the
        lost worker within seconds, not at once); returns seconds."""
        t0 = time.monotonic()
        while len(self.listed("workers", "ALIVE")) != alive:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"the master has {len(self.listed('workers', 'ALIVE'))} alive workers, "
                                   f"not {alive}, after {timeout}s")
            time.sleep(0.5)
        return time.monotonic() - t0

    def executor_pids(self, worker: str | None = None) -> list[int]:
        """The executor JVMs on the workers (children of the worker processes), or on the
        worker component ``worker`` alone."""
        parent = self.supervisor.pid(worker) if worker is not None else None
        if worker is not None and parent is None:
            return []
        return [pid for pid, p in procs.live().items() if "CoarseGrainedExecutorBackend" in p["cmdline"]
                and procs.environ(pid).get("SPARK_CONF_DIR") == self.env["SPARK_CONF_DIR"]
                and (parent is None or p["ppid"] == parent)]

    def _launch(self, component: str) -> Callable[[], bool]:
        """Start a component; returns the test that it serves. The worker and the Connect
        server serve once the master lists them anew (it may still list the ones killed)."""
        if component == "spark-master":
            self.supervisor.start(component, master_argv(self.master_port, self.master_ui_port))
            return self._answers
        if component in self.workers:
            i = self.workers.index(component)
            before = {w["id"] for w in self.listed("workers", "ALIVE")}
            work_dir = self.root / ("worker-work" if i == 0 else f"worker-work-{i + 1}")
            self.supervisor.start(component, worker_argv(self.master_url, self.worker_cores, self.worker_memory,
                                                         self.worker_ui_ports[i], work_dir))
            return lambda: bool({w["id"] for w in self.listed("workers", "ALIVE")} - before)
        if component != "spark-connect":
            raise ValueError(f"unknown Spark component {component!r}")
        before = {a["id"] for a in self.listed("activeapps", "RUNNING", CONNECT_APP)}
        # Spark's launcher sizes a Connect server by SPARK_DAEMON_MEMORY before --driver-memory
        # (as a daemon, like the master): the master's 384m is too small for a driver.
        env = {k: v for k, v in self.env.items() if k != "SPARK_DAEMON_MEMORY"}
        self.supervisor.start(component, connect_argv(self.connect_port, self.master_url), env=env)
        # RUNNING: the master has given the server its executor, as a first query needs.
        return lambda: _port_open(self.connect_port) and bool(
            {a["id"] for a in self.listed("activeapps", "RUNNING", CONNECT_APP)} - before)

    def _answers(self) -> bool:
        """Whether the master's web UI answers with its JSON. While the UI starts, ``/json/``
        can answer with the HTML of its main page (a ValueError to the JSON parser)."""
        try:
            self.master_state()
            return True
        except (OSError, ValueError):
            return False

    def start(self, component: str, timeout: float, diagnostics: Callable[[], str]) -> None:
        """Start ``component`` and wait until it serves; ``diagnostics`` is the text an error shows."""
        ready = self._launch(component)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.supervisor.exited().get(component)
            if code is not None:
                raise RuntimeError(f"{component} exited with {code}\n{diagnostics()}")
            if ready():
                return
            time.sleep(0.5)
        raise TimeoutError(f"{component} not ready after {timeout}s\n{diagnostics()}")

    def kill(self, component: str, sig: int, group: bool) -> int | None:
        """Send ``sig`` to the component (its group, or the JVM alone) and wait until it is gone."""
        pid = self.supervisor.kill(component, sig, group=group, timeout=60)
        # The Connect server comes back on the same port: wait until its listener is closed.
        deadline = time.monotonic() + 60
        while component == "spark-connect" and _port_open(self.connect_port) and time.monotonic() < deadline:
            time.sleep(0.2)
        return pid

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the Connect server, then the workers, then the master, each given ``timeout``
        seconds (a worker whose master is gone first only retries to reach it), then SIGKILL
        what is left in their groups."""
        for component in ("spark-connect", *self.workers, "spark-master"):
            self.supervisor.kill(component, signal.SIGTERM, timeout=timeout)
        self.supervisor.stop(timeout=5)
