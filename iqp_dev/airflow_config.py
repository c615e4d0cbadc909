"""The throw-away AIRFLOW_HOME of the harness: its settings, its processes' environment, and
its migrated metadata DB.

The settings are those of ``airflow-iqp dev`` (:func:`airflow_iqp.cli.dev.stack_settings`),
with DAGs paused at creation (a test unpauses the one it runs) and a throw-away Fernet key.
The processes get them as ``AIRFLOW__SECTION__KEY`` variables on top of the test process's
environment without its own Airflow settings, so that they cannot be confused with another
AIRFLOW_HOME configured in the test process.

:func:`celery_config` gives the settings of the CeleryExecutor (the cluster harness's
``executor="celery"``): a Redis broker and the Celery result backend on the metadata DB.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_iqp.cli.dev import migrate, stack_env, stack_settings, use_wal

#: Migrated SQLite metadata DBs, one per Airflow version: a copy starts a home in seconds.
CACHE_DIR = Path(tempfile.gettempdir()) / "airflow_iqp_harness_cache"


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow")


def build_config(home: Path, dags_folder: Path, api_port: int, extra: Mapping[str, str] | None = None,
                 db_url: str | None = None) -> dict[str, str]:
    """The ``SECTION__KEY`` settings of a harness home (all values as strings).

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
        if not db_url.startswith("sqlite"):  # the connect arguments are SQLite's
            for key in ("DATABASE__SQL_ALCHEMY_CONNECT_ARGS", "DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"):
                del cfg[key]
    if extra:
        cfg.update(extra)
    return cfg


def celery_config(broker_url: str, db_url: str, concurrency: int = 4) -> dict[str, str]:
    """The ``SECTION__KEY`` settings of the CeleryExecutor (provider
    ``apache-airflow-providers-celery``): ``broker_url`` (``redis://...``) as the broker, the
    metadata DB ``db_url`` (a SQLAlchemy URL) as the result backend (``db+`` and that URL,
    its driver explicit), ``concurrency`` task slots per worker.

    The workers' tasks reach the api-server at ``[core] execution_api_server_url``, which
    :func:`build_config` sets already (the LocalExecutor's task supervisors need it too).
    """
    return {
        "CORE__EXECUTOR": "CeleryExecutor",
        "CELERY__BROKER_URL": broker_url,
        "CELERY__RESULT_BACKEND": f"db+{db_url}",
        "CELERY__WORKER_CONCURRENCY": str(concurrency),
        # Without it the provider warns at every start that it sets Redis's 24 h itself. A
        # task whose worker dies is the scheduler's to fail and retry (its heartbeat
        # lapses), not the broker's to deliver again.
        "CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "86400",
    }


def child_env(home: Path, config: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without its own Airflow settings, plus this home's."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
    return stack_env(home, config, base)


def connection_env(connections: Mapping[str, Mapping[str, Any] | str]) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` variables for ``{conn_id: {"conn_type": ..., "host": ...} or URI}``."""
    return {f"AIRFLOW_CONN_{cid.upper()}": c if isinstance(c, str) else json.dumps(dict(c))
            for cid, c in connections.items()}


def migrate_home(home: Path, env: Mapping[str, str], log: Path) -> float:
    """Migrate the metadata DB, starting from a cached migrated DB when there is one (SQLite
    only); returns seconds."""
    t0 = time.monotonic()
    if not env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite"):
        migrate(env, log, timeout=600)
        return time.monotonic() - t0
    db = home / "airflow.db"
    cached = CACHE_DIR / f"airflow-{_airflow_version()}.db"
    if cached.exists():
        for wal in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            wal.unlink(missing_ok=True)  # a killed run's write-ahead log belongs to the old file
        shutil.copyfile(cached, db)
    # Always migrate: against a cached DB it is a quick no-op check, and it also validates
    # the configuration of this home.
    migrate(env, log, timeout=300)
    if not cached.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(db, tmp)
        os.replace(tmp, cached)
    use_wal(db)  # nine DAGs on two cores otherwise die of "database is locked"
    return time.monotonic() - t0
