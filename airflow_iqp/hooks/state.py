"""IQPStateHook: the state store as the operators reach it.

Claims, plans, cost history, a window's state and its report all live in one state store
(``[iqp] state_dir``; ``docs/state-layout.md``). The operators reach it through this hook,
which opens the store and hands out its windows (:class:`~airflow_iqp.store.WindowState`);
what is done with a window's state beyond reading and writing it is in
:mod:`airflow_iqp.window.accounting`, which the sensor, the trigger and the Spark jobs use
too.
"""

from __future__ import annotations

import os

from airflow.sdk import BaseHook

from airflow_iqp import config
from airflow_iqp.query.store import Saved, save_query
from airflow_iqp.store import StateStore, WindowState, open_store
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import window_id


class IQPStateHook(BaseHook):
    """The state store: claims, plans, cost history, window state and reports.

    :param state_dir: the store's location (default ``[iqp] state_dir``). A batch carries its
        own (``Batch.state_dir``): build the hook with it to read that batch's state.
    """

    hook_name = "Intermittent Query Processing: state store"

    def __init__(self, state_dir: str | os.PathLike | None = None) -> None:
        super().__init__()
        self.state_dir = str(state_dir or config.state_dir())
        self.store: StateStore = open_store(self.state_dir)

    def get_conn(self) -> StateStore:
        """The state store."""
        return self.store

    def window(self, query: str, window_start: float) -> WindowState:
        """The state of ``query``'s window that starts at ``window_start`` (Unix seconds)."""
        return self.store.window(query, window_id(window_start))

    def window_of(self, batch: Batch) -> WindowState:
        """The state of the window ``batch`` belongs to."""
        return self.store.window(batch.query, batch.window_id)

    def save_query(self, saved: Saved) -> str:
        """Save what the jobs run for a query (:func:`airflow_iqp.query.store.save_query`)."""
        return save_query(self.store, saved)

    def cost_history(self, query: str | None = None, kind: str | None = None,
                     backend: str | None = None) -> list[dict]:
        """Records of the cost history, oldest first."""
        return self.store.cost_history(query, kind, backend)
