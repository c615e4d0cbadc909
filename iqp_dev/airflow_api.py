"""A client of one Airflow: its REST API and read-only SQL on its metadata DB.

Through the public REST API of the api-server (the harness's simple auth manager with
``simple_auth_manager_all_admins`` adds an admin token to every request, so no login is
needed), plus :meth:`AirflowClient.sql` for what the API does not expose
(task_instance_history, trigger, deadline). The client never imports Airflow's settings,
so it cannot be confused with another AIRFLOW_HOME configured in the test process.

Its waits call :meth:`AirflowClient.check_alive` on every poll and put
:meth:`AirflowClient.logs_tail` into their errors. A bare client knows no processes (both
do nothing); :class:`iqp_dev.local_airflow.AirflowEnv`, the client of the Airflow it
started, checks and shows its own.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_iqp.cli.dev import HEALTH_KEYS

TERMINAL_RUN_STATES = frozenset({"success", "failed"})


class ApiError(RuntimeError):
    """An HTTP error answer of the API; ``status`` is its code."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class AirflowClient:
    """The API at ``api_url`` (``http://127.0.0.1:PORT``) and the metadata DB at ``db_url``
    (its SQLAlchemy URL)."""

    api_url: str
    db_url: str

    def check_alive(self) -> None:
        """Raise when the Airflow behind the API is known to be down; a bare client cannot tell."""

    def logs_tail(self, lines: int = 60) -> str:
        """The processes' logs for an error message; a bare client has none."""
        return ""

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
        # Any request is retried on 503: the server answers so when its database refused the
        # transaction (SQLite locked by the scheduler), which it rolled back.
        attempts = 3 if method == "GET" else 1
        busy = timeouts = 0
        while True:
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as exc:
                text = exc.read().decode(errors="replace")
                if exc.code == 503 and busy < 5:
                    busy += 1
                    time.sleep(busy)
                    continue
                raise ApiError(exc.code, f"{method} {path}: {exc.code} {text}") from None
            except (TimeoutError, urllib.error.URLError) as exc:
                timeouts += 1
                if timeouts >= attempts or (isinstance(exc, urllib.error.URLError)
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
                    raise AssertionError(f"run {run_id} {run['state']}: {self.ti_summary(dag_id, run_id)}\n{self.logs_tail()}")
                return run
            time.sleep(poll)
        raise TimeoutError(
            f"run {run_id} still {run.get('state')} after {timeout}s: {self.ti_summary(dag_id, run_id)}\n{self.logs_tail()}"
        )

    def ti_summary(self, dag_id: str, run_id: str) -> str:
        """``[task_id, map_index, state, try_number]`` of each TI of a run as JSON, for an error message."""
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
            return "\n".join(_log_line(c) for c in content)
        return str(content)

    # ---------------------------------------------------------------- direct DB reads
    def sql(self, query: str, params: tuple | Mapping = ()) -> list[dict]:
        """Read-only SQL against the metadata DB, rows as dicts.

        Write placeholders as SQLite's ``?``; on PostgreSQL (psycopg2) they become ``%s``.
        """
        url = self.db_url
        if not url.startswith("sqlite"):
            return _pg_sql(url, query.replace("%", "%%").replace("?", "%s") if params else query, params)
        uri = f"file:{url.split(':///', 1)[1]}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as con:
            con.row_factory = sqlite3.Row
            return [dict(r) for r in con.execute(query, params)]


def _log_line(entry) -> str:
    """One entry of a structured task log as text: its event, then the exception it carries
    (structlog's dict form, which Airflow 3 keeps under ``error_detail``), innermost frame last."""
    if not isinstance(entry, dict):
        return str(entry)
    lines = [str(entry.get("event", ""))]
    for exc in entry.get("error_detail") or ():
        if not isinstance(exc, dict):
            lines.append(str(exc))
            continue
        lines += [f'  File "{f.get("filename")}", line {f.get("lineno")}, in {f.get("name")}'
                  for f in exc.get("frames") or () if isinstance(f, dict)]
        lines.append(f"{exc.get('exc_type', 'Exception')}: {exc.get('exc_value', '')}")
    return "\n".join(lines)


def _pg_sql(url: str, query: str, params: tuple | Mapping) -> list[dict]:
    import psycopg2
    import psycopg2.extras

    dsn = url.replace("postgresql+psycopg2://", "postgresql://", 1)
    with contextlib.closing(psycopg2.connect(dsn)) as con:
        con.set_session(readonly=True, autocommit=True)
        with con.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(query, params or None)
            return [dict(r) for r in cur.fetchall()]
