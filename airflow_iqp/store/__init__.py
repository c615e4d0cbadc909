"""The state store: the one owner of where claims, plans, partials, results, reports, the cost
history and the cluster's turns live (:mod:`airflow_iqp.store.base`).

``open_store(location)`` opens the store a location names: a directory (a path or a
``file://`` URL) is a :class:`~airflow_iqp.store.local.LocalStore`. A deployment chooses
its store with one setting, ``[iqp] state_dir``. Pure Python: no Spark, no Airflow.
"""

from __future__ import annotations

import os
from typing import Callable

from airflow_iqp.errors import ConfigError
from airflow_iqp.store.base import StateStore
from airflow_iqp.store.layout import ClaimError, batch_name, batch_of, query_key
from airflow_iqp.store.window import QueryState, WindowState
from airflow_iqp.store.local import LocalStore
from airflow_iqp.store.objects import ObjectStore

__all__ = ["ClaimError", "LocalStore", "ObjectStore", "QueryState", "StateStore", "WindowState", "batch_name", "batch_of",
           "open_store", "query_key", "window_at"]

#: The stores by the scheme of their location; a location without one is a local directory.
SCHEMES: dict[str, Callable[[str], StateStore]] = {"file": LocalStore, "s3": ObjectStore, "s3a": ObjectStore}


def open_store(location: str | os.PathLike | StateStore) -> StateStore:
    """The store at ``location`` (a store passes through)."""
    if isinstance(location, StateStore):
        return location
    text = os.fspath(location)
    if not text:
        raise ConfigError("no state store given: set [iqp] state_dir", field="state_dir")
    scheme = text.split("://", 1)[0] if "://" in text else "file"
    if scheme not in SCHEMES:
        raise ConfigError(f"no state store for {scheme}:// ({text}); one of {', '.join(sorted(SCHEMES))}:// "
                          f"or a directory", field="state_dir")
    return SCHEMES[scheme](text)


def window_at(location: str | os.PathLike) -> WindowState:
    """The window whose state is at ``location`` (a window's place in a store, as
    :attr:`WindowState.location` gives it), in that store."""
    text = os.fspath(location).rstrip("/")
    store, _, window = text.rpartition("/")
    store, _, query = store.rpartition("/")
    if not (store and query and window):
        raise ConfigError(f"{text} is not a window's place in a state store (STATE/<query>/<window>)",
                          field="window")
    return open_store(store).window(query, window)
