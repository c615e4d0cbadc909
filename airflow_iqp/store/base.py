"""The state store's interface, and its layout: the one place that names where things live.

A :class:`StateStore` holds what the batch jobs, the final job, the Airflow provider,
``airflow-iqp run-window`` and the benchmarks share: the saved queries, each window's
claims, plans, partials, results and reports, the cost history, and the cluster's turns.
Everything else asks it by meaning (:meth:`StateStore.window`, :meth:`WindowState.claim`,
:meth:`WindowState.partial_uri`, :meth:`StateStore.cost_history`, ...) and never builds a
location of its own. ``docs/state-layout.md`` describes every entry.

An implementation gives a handful of primitives on keys (``/``-separated names relative to
the store): read, write and list JSON documents, update one atomically, append to a log,
a lock that the window's claims are made under, a directory that a Spark job writes and
that appears whole (:meth:`StateStore.write_dir`), and the cluster's turns.
:mod:`airflow_iqp.store.local` is the one on a local (or shared) file system,
:mod:`airflow_iqp.store.objects` the one in an object store. Pure Python: no Spark, no Airflow.
"""

from __future__ import annotations

import abc
import time
from contextlib import AbstractContextManager
from typing import Any, Callable

from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import check_name
from airflow_iqp.store.layout import COST_HISTORY, query_key
from airflow_iqp.store.window import ClusterState, QueryState, WindowState


class Turns(abc.ABC):
    """The cluster's turns (:func:`airflow_iqp.coordination.cluster_turn`): batches queue by
    name (names sort earliest deadline first), and at most ``slots`` run at once. A queued or
    running batch whose task is gone no longer counts."""

    @abc.abstractmethod
    def queue(self, name: str) -> AbstractContextManager["Ticket"]:
        """Queue ``name`` until the context ends; the ticket takes the turn."""


class Ticket(abc.ABC):
    @abc.abstractmethod
    def try_take(self, slots: int, allowed: bool) -> tuple[bool, bool]:
        """Take the turn if no live queued name sorts before this one, fewer than ``slots``
        run, and ``allowed``; returns (taken, others ahead)."""


class StateStore(abc.ABC):
    """Where the state lives, and what it holds, by meaning."""

    #: What opens this store again, in another process (:func:`airflow_iqp.store.open_store`).
    location: str

    # ----------------------------------------------------------------- primitives

    @abc.abstractmethod
    def get(self, key: str) -> Any | None:
        """The JSON document at ``key``, or None."""

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        """The JSON documents at ``keys`` that exist, by key (a store may fetch them side by side)."""
        return {k: doc for k in keys if (doc := self.get(k)) is not None}

    @abc.abstractmethod
    def put(self, key: str, doc: Any) -> str:
        """Write ``doc`` at ``key`` atomically (a reader sees the old one or the new one); its location."""

    @abc.abstractmethod
    def create(self, key: str, doc: Any) -> bool:
        """Write ``doc`` at ``key`` only if nothing is there: whoever creates it first wins
        (False for the others, whose ``doc`` is not written)."""

    @abc.abstractmethod
    def has(self, key: str) -> bool:
        """Whether ``key`` holds a document or a directory."""

    @abc.abstractmethod
    def names(self, prefix: str) -> list[str]:
        """The names directly under ``prefix``, sorted; hidden ones (temporaries) left out."""

    @abc.abstractmethod
    def update(self, key: str, change: Callable[[Any | None], Any]) -> Any:
        """Replace the document at ``key`` with ``change(old)`` (old None if none), atomically
        against other updates of it; returns the new one."""

    @abc.abstractmethod
    def exclusive(self, prefix: str) -> AbstractContextManager[None]:
        """Held while a window's claims are checked and one is written."""

    @abc.abstractmethod
    def append(self, key: str, record: dict) -> None:
        """Append ``record`` to the log at ``key``; no writer loses a line."""

    @abc.abstractmethod
    def lines(self, key: str) -> list[dict]:
        """The records of the log at ``key``, oldest first."""

    @abc.abstractmethod
    def uri(self, key: str) -> str:
        """The URI of ``key`` itself: a document's location, or a directory's name in the store
        (where it is read is :meth:`dir_uri`)."""

    @abc.abstractmethod
    def write_dir(self, key: str, write: Callable[[str], Any]) -> str:
        """Have ``write(uri)`` write a directory (a Spark job's parquet) at a fresh place, then
        make it the directory at ``key``: a reader sees the one before or the new one, whole,
        never part of one; one written again replaces it. Returns where it is read
        (:meth:`dir_uri`)."""

    @abc.abstractmethod
    def dir_uri(self, key: str) -> str | None:
        """Where a Spark job reads the directory written at ``key`` (:meth:`write_dir`), or None."""

    def dir_uris(self, keys: list[str]) -> dict[str, str]:
        """:meth:`dir_uri` of each of ``keys`` that has a directory, by key."""
        return {k: uri for k in keys if (uri := self.dir_uri(k)) is not None}

    @abc.abstractmethod
    def remove_dir(self, key: str) -> None:
        """Remove the directory at ``key``, if any."""

    @abc.abstractmethod
    def version(self, key: str) -> Any:
        """Something that changes when the directory at ``key`` is written again (None: absent)."""

    @abc.abstractmethod
    def turns(self) -> Turns:
        """The cluster's turns of the queries of this store."""

    # ----------------------------------------------------------------- by meaning

    def window(self, query_id: str, window_id: str) -> WindowState:
        """One window of one query."""
        return WindowState(self, query_key(query_id), check_name(window_id, "window_id"))

    def query(self, query_id: str) -> QueryState:
        """What the store keeps of one query across its windows."""
        return QueryState(self, query_key(query_id))

    def cluster(self, name: str) -> ClusterState:
        """The registry of the queries on the cluster named ``name`` (joint planning)."""
        return ClusterState(self, name)

    def record_cost(self, *, query: str, kind: str, units: int, batches: int, wall_seconds: float,
                    cpu_seconds: float | None = None, task_seconds: float | None = None,
                    backend: str = "spark-submit", window: str | None = None, recorded_at: float | None = None,
                    **extra: Any) -> dict:
        """Append one measured batch (``kind="batch"``, ``batches`` 1) or final aggregation
        (``"final"``, ``batches`` partials covering ``units`` units) to the cost history."""
        if kind not in ("batch", "final"):
            raise ConfigError(f"must be 'batch' or 'final', got {kind!r}", field="kind")
        record = {
            "query": query_key(query), "backend": backend, "kind": kind, "units": int(units),
            "batches": int(batches), "wall_seconds": float(wall_seconds),
            "cpu_seconds": None if cpu_seconds is None else float(cpu_seconds),
            "task_seconds": None if task_seconds is None else float(task_seconds),
            "window": window, "recorded_at": time.time() if recorded_at is None else float(recorded_at),
        }
        record.update(extra)
        self.append(COST_HISTORY, record)
        return record

    def record_fit(self, *, query: str, backend: str, cost: dict, final_agg: dict, recorded_at: float | None = None,
                   **extra: Any) -> dict:
        """Append a calibrated fit (``kind: "fit"``): cost-model dicts the plan prefers to the records."""
        record = {"query": query_key(query), "backend": backend, "kind": "fit", "cost": cost, "final_agg": final_agg,
                  "recorded_at": time.time() if recorded_at is None else float(recorded_at), **extra}
        self.append(COST_HISTORY, record)
        return record

    def record_tail_start(self, *, query: str, backend: str, window: str, seconds: float,
                          recorded_at: float | None = None) -> dict | None:
        """Append a fused tail's start-up (``kind: "tail_start"``): ``seconds`` from its planned
        start to its session being ready, what the next windows' tails start ahead by
        (:func:`~airflow_iqp.window.costs.tail_start_lead`). One per window: a retry's start
        counts the failed attempt too, and is not recorded (returns None)."""
        if any(r.get("window") == window for r in self.cost_history(query, "tail_start", backend)):
            return None
        record = {"query": query_key(query), "backend": backend, "kind": "tail_start", "window": window,
                  "seconds": float(seconds), "recorded_at": time.time() if recorded_at is None else float(recorded_at)}
        self.append(COST_HISTORY, record)
        return record

    def cost_history(self, query: str | None = None, kind: str | None = None,
                     backend: str | None = None) -> list[dict]:
        """The cost history, oldest first, of one query, kind and backend if given."""
        q = None if query is None else query_key(query)
        return [r for r in self.lines(COST_HISTORY)
                if (q is None or r.get("query") == q) and (kind is None or r.get("kind") == kind)
                and (backend is None or r.get("backend") == backend)]

    @property
    def cost_history_location(self) -> str:
        return self.uri(COST_HISTORY)

    def queries(self) -> list[str]:
        """The ids of the queries with state here."""
        return [n for n in self.names("") if not n.startswith("_") and "." not in n]
