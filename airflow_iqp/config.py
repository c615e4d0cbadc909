"""The provider's ``[iqp]`` configuration section (declared in ``get_provider_info``).

Set it in ``airflow.cfg`` or as ``AIRFLOW__IQP__<OPTION>`` environment variables.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULTS = {
    "state_dir": "",          # default: $AIRFLOW_HOME/iqp/state
    "spark_conn_id": "spark_default",
    "spark_connect_conn_id": "spark_connect_default",  # the Spark Connect server (backend="spark-connect")
    "poll_interval": "2",     # seconds between readiness checks in the triggerer
    "ship_package": "False",  # --py-files a zip of airflow_iqp (needed on a real cluster)
}


def get(option: str) -> str:
    """An ``[iqp]`` option, falling back to :data:`DEFAULTS`."""
    try:
        from airflow.configuration import conf

        value = conf.get("iqp", option, fallback=None)
    except Exception:  # noqa: BLE001 - outside Airflow (tests, CLI)
        value = None
    if value is None:
        value = os.environ.get(f"AIRFLOW__IQP__{option.upper()}", DEFAULTS[option])
    return value


def airflow_home() -> Path:
    """AIRFLOW_HOME as Airflow reads it: ``~/airflow`` when unset, ``~`` and variables
    expanded; made absolute, so every process agrees whatever its working directory."""
    home = os.environ.get("AIRFLOW_HOME") or "~/airflow"
    expanded = os.path.expanduser(os.path.expandvars(home))
    while expanded != home:  # a variable may name another
        home, expanded = expanded, os.path.expanduser(os.path.expandvars(expanded))
    return Path(home).absolute()


def state_dir() -> str:
    """``[iqp] state_dir``, by default ``iqp/state`` under :func:`airflow_home`: a directory
    that Airflow's own processes can write to on one machine. Set it to a shared location
    when tasks run on several."""
    value = get("state_dir")
    if value:
        return value
    return str(airflow_home() / "iqp" / "state")


def poll_interval() -> float:
    return float(get("poll_interval"))


def ship_package() -> bool:
    return get("ship_package").strip().lower() in ("1", "true", "yes")


def connect_conn_id() -> str:
    return get("spark_connect_conn_id")
