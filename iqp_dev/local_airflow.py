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

How the test reads state: through the public REST API of the real api-server (the
simple auth manager with ``simple_auth_manager_all_admins`` adds an admin token to every
request, so no login is needed), plus ``af.sql(...)`` for read-only SQL against the SQLite
metadata DB for what the API does not expose (task_instance_history, trigger, deadline).
The test process never imports Airflow's settings for this home, so it cannot be confused
with another AIRFLOW_HOME configured in the test process.

On failure (any exception inside the ``with`` block, or a start-up failure) the tail of
every component's log is printed to stderr, so pytest shows why.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_iqp.cli.dev import COMPONENTS, HEALTH_KEYS, airflow_bin, free_port, stack_env, stack_settings, use_wal
from airflow_iqp.cli.supervisor import stop_groups

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
_CACHE_DIR = Path(tempfile.gettempdir()) / "airflow_iqp_harness_cache"


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow")


def build_config(home: Path, dags_folder: Path, api_port: int, extra: Mapping[str, str] | None = None,
                 db_url: str | None = None) -> dict[str, str]:
    """The AIRFLOW__SECTION__KEY settings of a harness home (all values as strings): the
    stack of ``airflow-iqp dev`` (:func:`airflow_iqp.cli.dev.stack_settings`), with DAGs
    paused at creation (a test unpauses the one it runs) and a throw-away Fernet key.

    ``db_url`` is the metadata DB's SQLAlchemy URL; the default is a SQLite file in ``home``.
    """
    try:
        from cryptography.fernet import Fernet

        fernet = Fernet.generate_key().decode()
    except ImportError:  # pragma: no cover - cryptography is an Airflow dependency
        fernet = ""
    cfg = {**stack_settings(home, dags_folder, api_port, paused=True), "CORE__FERNET_KEY": fernet}
    if db_url:
        cfg["DATABASE__SQL_ALCHEMY_CONN"] = db_url
    if extra:
        cfg.update(extra)
    return cfg


def _child_env(home: Path, config: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without its own Airflow settings, plus this home's."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
    return stack_env(home, config, base)


def _is_sqlite(env: Mapping[str, str]) -> bool:
    return env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite")


def _migrate(home: Path, env: Mapping[str, str], log: Path) -> float:
    """Migrate the metadata DB, copying a cached migrated DB when one exists (SQLite only).
    Returns seconds."""
    t0 = time.monotonic()
    if not _is_sqlite(env):
        with open(log, "ab") as out:
            subprocess.run([airflow_bin(), "db", "migrate"], env=env, stdout=out, stderr=subprocess.STDOUT,
                           check=True, timeout=600)
        return time.monotonic() - t0
    db = home / "airflow.db"
    cached = _CACHE_DIR / f"airflow-{_airflow_version()}.db"
    if cached.exists():
        for log in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            log.unlink(missing_ok=True)  # a killed run's write-ahead log belongs to the old file
        shutil.copyfile(cached, db)
    with open(log, "ab") as out:
        # Always run migrate: against a cached DB it is a quick no-op check, and it also
        # validates the configuration of this home.
        subprocess.run([airflow_bin(), "db", "migrate"], env=env, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=300)
    if not cached.exists():
        _CACHE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(db, tmp)
        os.replace(tmp, cached)
    use_wal(db)  # nine DAGs on two cores otherwise die of "database is locked"
    return time.monotonic() - t0


@dataclass
class AirflowEnv:
    """A running set of Airflow processes. Build with :func:`airflow_env`."""

    home: Path
    dags_folder: Path
    api_url: str
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: Process groups of components killed on purpose (:meth:`kill`): no longer checked by
    #: :meth:`check_alive`, still swept by :meth:`stop`.
    killed: list[int] = field(default_factory=list)

    # ---------------------------------------------------------------- processes
    def log_path(self, component: str) -> Path:
        return self.home / "process_logs" / f"{component}.log"

    def _start(self, component: str) -> None:
        path = self.log_path(component)
        path.parent.mkdir(parents=True, exist_ok=True)
        out = open(path, "ab")
        self.procs[component] = subprocess.Popen(
            [airflow_bin(), *component.split()],
            env=self.env,
            cwd=self.home,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: killpg reaches workers and children
        )
        out.close()

    def kill(self, component: str, sig: int = signal.SIGKILL, group: bool = True) -> int:
        """Send ``sig`` to a component (its whole process group, or only its main process with
        ``group=False``) and wait for the main process to exit; returns its pid.

        The component is no longer expected alive until :meth:`restart`.
        """
        proc = self.procs.pop(component)
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        self.killed.append(proc.pid)
        return proc.pid

    def restart(self, component: str) -> int:
        """Start a component again (after :meth:`kill`, or stopping the running one first); returns its pid."""
        if component in self.procs:
            self.kill(component, signal.SIGTERM)
        self._start(component)
        return self.procs[component].pid

    def check_alive(self) -> None:
        dead = {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise RuntimeError(f"Airflow components exited: {dead}\n{self.logs_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every process group, then SIGKILL what is left after ``timeout`` seconds."""
        stop_groups(self.procs.values(), self.killed, timeout)

    def leftover_pids(self) -> list[int]:
        """PIDs still alive in any of the harness's process groups (should be empty after stop)."""
        pgids = {p.pid for p in self.procs.values()} | set(self.killed)
        left = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z" and int(fields[2]) in pgids:
                left.append(int(entry.name))
        return left

    def logs_tail(self, lines: int = 60) -> str:
        parts = []
        for path in sorted((self.home / "process_logs").glob("*.log")):
            text = path.read_text(errors="replace").splitlines()
            parts.append(f"----- {path.name} (last {lines} lines) -----\n" + "\n".join(text[-lines:]))
        for path in sorted((self.home / "logs").rglob("*.log"))[-8:]:
            if "dag_processor" in path.parts:
                continue
            text = path.read_text(errors="replace").splitlines()
            parts.append(f"----- task log {path.relative_to(self.home)} -----\n" + "\n".join(text[-lines:]))
        return "\n".join(parts)

    def cli(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``airflow <args>`` against this home."""
        return subprocess.run(
            [airflow_bin(), *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    # ---------------------------------------------------------------- REST API
    def api(self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        url = self.api_url + path
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        # A GET is retried when the API server is too busy to answer in time (many task
        # processes start at once on a small machine, and they talk to the same server).
        attempts = 3 if method == "GET" else 1
        for attempt in range(1, attempts + 1):
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as exc:
                raise ApiError(exc.code, f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')}") from None
            except (TimeoutError, urllib.error.URLError) as exc:
                if attempt == attempts or (isinstance(exc, urllib.error.URLError)
                                           and not isinstance(exc.reason, TimeoutError)):
                    raise
        return json.loads(raw) if raw else None

    def health(self) -> dict:
        return self.api("GET", "/api/v2/monitor/health")

    def wait_healthy(self, timeout: float = 120) -> float:
        t0 = time.monotonic()
        last: Any = None
        while time.monotonic() - t0 < timeout:
            self.check_alive()
            try:
                last = self.health()
                if all(
                    (last.get(k) or {}).get("status") == "healthy"
                    for k in HEALTH_KEYS
                ):
                    return time.monotonic() - t0
            except (urllib.error.URLError, ConnectionError, ApiError, OSError) as exc:
                last = repr(exc)
            time.sleep(0.5)
        raise TimeoutError(f"Airflow not healthy after {timeout}s: {last}\n{self.logs_tail()}")

    def import_errors(self) -> list[dict]:
        return self.api("GET", "/api/v2/importErrors")["import_errors"]

    def wait_for_dag(self, dag_id: str, timeout: float = 90) -> dict:
        """Wait until the dag-processor has serialized ``dag_id``; fail fast on an import error."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            self.check_alive()
            try:
                dag = self.api("GET", f"/api/v2/dags/{dag_id}")
                # The DAG row can exist before its serialized version; the details endpoint needs both.
                self.api("GET", f"/api/v2/dags/{dag_id}/details")
                return dag
            except ApiError as exc:
                if exc.status != 404:
                    raise
            errors = self.import_errors()
            if errors:
                raise RuntimeError(f"DAG import errors: {json.dumps(errors, indent=1)}")
            time.sleep(0.5)
        raise TimeoutError(f"DAG {dag_id} not parsed after {timeout}s\n{self.logs_tail()}")

    def unpause(self, dag_id: str) -> None:
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": True})

    def trigger(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        logical_date: datetime | str | None = None,
        run_id: str | None = None,
        unpause: bool = True,
    ) -> str:
        """Trigger a manual run (unpausing the DAG first by default); return its run id.

        ``logical_date=None`` gives a run without a logical date (the 3.x default for
        manual runs); pass a datetime to get a timetable-aligned data interval
        (the timetable's ``infer_manual_data_interval``).
        """
        if unpause:
            self.unpause(dag_id)
        if isinstance(logical_date, datetime):
            if logical_date.tzinfo is None:
                raise ValueError("logical_date must be timezone-aware")
            logical_date = logical_date.isoformat()
        body: dict[str, Any] = {"logical_date": logical_date, "conf": dict(conf or {})}
        if run_id:
            body["dag_run_id"] = run_id
        return self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"]

    def backfill(self, dag_id: str, from_date: datetime, to_date: datetime, **extra: Any) -> dict:
        """Create a backfill (``POST /api/v2/backfills``); returns the backfill JSON."""
        body = {
            "dag_id": dag_id,
            "from_date": from_date.isoformat(),
            "to_date": to_date.isoformat(),
            "reprocess_behavior": extra.pop("reprocess_behavior", "none"),
            "max_active_runs": extra.pop("max_active_runs", 10),
            "run_backwards": extra.pop("run_backwards", False),
            "dag_run_conf": extra.pop("dag_run_conf", {}),
            **extra,
        }
        return self.api("POST", "/api/v2/backfills", body)

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def dag_runs(self, dag_id: str) -> list[dict]:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100, "order_by": "run_after"})[
            "dag_runs"
        ]

    def window_run(self, dag_id: str, start: float, timeout: float = 180) -> str:
        """The run id of the DAG's scheduled run for the window that starts at ``start`` (Unix
        seconds), waiting up to ``timeout`` seconds past that start for the scheduler to create it."""
        end = time.time() + timeout + max(0.0, start - time.time())
        while time.time() < end:
            for r in self.dag_runs(dag_id):
                s = r.get("data_interval_start")
                if r.get("run_type") == "scheduled" and s and \
                        datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() == start:
                    return r["dag_run_id"]
            time.sleep(1)
        raise RuntimeError(f"{dag_id}: no run was created for the window starting at "
                           f"{datetime.fromtimestamp(start, timezone.utc).isoformat()}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        """TIs of a run, sorted by (task_id, map_index).

        Each dict is the REST API's TaskInstanceResponse: task_id, map_index, state,
        start_date, end_date, try_number, rendered_map_index, priority_weight, ...
        """
        tis = self.api(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances",
            params={"limit": 1000},
        )["task_instances"]
        return sorted(tis, key=lambda t: (t["task_id"], t["map_index"]))

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        entry = self.api(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/{task_id}/xcomEntries/{key}",
            params={"map_index": map_index, "deserialize": "true", "stringify": "false"},
        )
        return entry["value"]

    def wait_for_run(
        self,
        dag_id: str,
        run_id: str,
        timeout: float = 180,
        poll: float = 0.5,
        observe: dict[tuple[str, int], list[str]] | None = None,
        expect_success: bool = True,
    ) -> dict:
        """Wait until the run is success/failed. Returns the run JSON.

        ``observe``, if given, collects the distinct states each (task_id, map_index)
        was seen in while polling (so a test can see e.g. ``deferred``).
        With ``expect_success`` a failed run raises with TI states and process logs.
        """
        t0 = time.monotonic()
        run: dict = {}
        while time.monotonic() - t0 < timeout:
            self.check_alive()
            run = self.dag_run(dag_id, run_id)
            if observe is not None:
                for ti in self.task_instances(dag_id, run_id):
                    seen = observe.setdefault((ti["task_id"], ti["map_index"]), [])
                    if not seen or seen[-1] != ti["state"]:
                        seen.append(ti["state"])
            if run["state"] in TERMINAL_RUN_STATES:
                if expect_success and run["state"] != "success":
                    raise AssertionError(f"run {run_id} {run['state']}: {self._ti_summary(dag_id, run_id)}\n{self.logs_tail()}")
                return run
            time.sleep(poll)
        raise TimeoutError(
            f"run {run_id} still {run.get('state')} after {timeout}s: {self._ti_summary(dag_id, run_id)}\n{self.logs_tail()}"
        )

    def _ti_summary(self, dag_id: str, run_id: str) -> str:
        try:
            return json.dumps(
                [(t["task_id"], t["map_index"], t["state"], t["try_number"]) for t in self.task_instances(dag_id, run_id)]
            )
        except Exception as exc:  # noqa: BLE001 - diagnostics only
            return f"<no TIs: {exc!r}>"

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1) -> str:
        """The task's log text as the api-server serves it."""
        data = self.api(
            "GET",
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/{task_id}/logs/{try_number}",
            params={"map_index": map_index, "full_content": "true"},
        )
        content = data.get("content")
        if isinstance(content, list):
            return "\n".join(c.get("event", "") if isinstance(c, dict) else str(c) for c in content)
        return str(content)

    def task_log_files(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[Path]:
        """Local task log files of one TI, all attempts, including ``*.trigger.<id>.log``
        files that the triggerer writes while the TI is deferred."""
        base = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            base = base / f"map_index={map_index}"
        return sorted(base.glob("attempt=*.log*"))

    # ---------------------------------------------------------------- direct DB reads
    def sql(self, query: str, params: tuple | Mapping = ()) -> list[dict]:
        """Read-only SQL against the metadata DB, rows as dicts.

        Write placeholders as SQLite's ``?``; on PostgreSQL (psycopg2) they become ``%s``.
        """
        url = self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        if not url.startswith("sqlite"):
            return _pg_sql(url, query.replace("%", "%%").replace("?", "%s") if params else query, params)
        uri = f"file:{self.home / 'airflow.db'}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as con:
            con.row_factory = sqlite3.Row
            return [dict(r) for r in con.execute(query, params)]


def _pg_sql(url: str, query: str, params: tuple | Mapping) -> list[dict]:
    import psycopg2
    import psycopg2.extras

    dsn = url.replace("postgresql+psycopg2://", "postgresql://", 1)
    with contextlib.closing(psycopg2.connect(dsn)) as con:
        con.set_session(readonly=True, autocommit=True)
        with con.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(query, params or None)
            return [dict(r) for r in cur.fetchall()]


def connection_env(connections: Mapping[str, Mapping[str, Any] | str]) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` variables for ``{conn_id: {"conn_type": ..., "host": ...} or URI}``."""
    return {f"AIRFLOW_CONN_{cid.upper()}": c if isinstance(c, str) else json.dumps(dict(c))
            for cid, c in connections.items()}


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


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
    variables (:func:`connection_env`).
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
    env = _child_env(home_path, cfg)
    env.update(connection_env(connections or {}))
    env.update(extra_env or {})
    if local_settings is not None:
        (home_path / "config").mkdir(exist_ok=True)
        (home_path / "config" / "airflow_local_settings.py").write_text(local_settings)
    af = AirflowEnv(home=home_path, dags_folder=Path(dags_folder).resolve(), api_url=f"http://127.0.0.1:{api_port}", env=env)
    ok = False
    try:
        try:
            af.timings["migrate"] = _migrate(home_path, env, af.log_path("db-migrate"))
        except subprocess.CalledProcessError:
            raise RuntimeError(f"airflow db migrate failed\n{af.logs_tail()}") from None
        for component in COMPONENTS:
            af._start(component)
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
