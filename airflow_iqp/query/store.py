"""A query and its inputs in the state store.

The plan step (and ``run-window``) saves what the DAG declared: the split query, its
streams' formats and schemas, and where its static tables are. The Spark jobs load it
from there, so a job runs exactly what was planned and needs no decomposer (sqlglot) on
the driver. A job never falls back to another description: a query id with nothing saved
is an error, even when the catalogue has a query of that id. Whoever runs a catalogued
query (``run-window --query``, ``calibrate``) saves it first, with the streams of
``airflow-iqp tpch`` (:func:`catalogued`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from airflow_iqp.errors import ConfigError
from airflow_iqp.query.model import Query, check_query_id
from airflow_iqp.streams import Stream, as_streams


@dataclass(frozen=True)
class Saved:
    """A query with its inputs: its streams, and its static tables (a directory of
    ``<table>.parquet``, or a mapping table -> path)."""

    query: Query
    streams: tuple[Stream, ...]
    static: str | Mapping[str, str] | None = None

    def stream(self, name: str) -> Stream:
        for s in self.streams:
            if s.name == name:
                return s
        raise ConfigError(f"query {self.query.id} reads stream {name}, which is not declared", field="streams")


def save_query(store, saved: Saved) -> str:
    """Save ``saved`` in ``store`` (a :class:`~airflow_iqp.store.StateStore` or its location);
    where it is."""
    from airflow_iqp.store import open_store

    doc = {"query": saved.query.to_dict(), "streams": [s.to_dict() for s in saved.streams],
           "static": dict(saved.static) if isinstance(saved.static, Mapping) else saved.static}
    return open_store(store).query(saved.query.id).save(doc)


def load_query(qid: str, store) -> Saved:
    """The query saved for ``qid`` in ``store`` (a store or its location)."""
    from airflow_iqp.store import open_store

    store = open_store(store)
    doc = store.query(check_query_id(qid)).saved()
    if doc is None:
        raise ConfigError(f"no query {qid} is saved in the state store {store.location}: the plan task (or "
                          f"run-window, or calibrate) saves it before any batch runs", field="query")
    return Saved(Query.from_dict(doc["query"]), as_streams(doc["streams"]), doc.get("static"))


def catalogued(qid: str, landing: str = "", static: str | None = None) -> Saved:
    """Catalogued query ``qid`` with the streams it reads: those of ``airflow-iqp tpch``
    (:func:`airflow_iqp.inputs.tpch.streams_at`) landing in ``landing``, and its static
    tables in ``static`` (a directory of ``<table>.parquet``)."""
    from airflow_iqp.inputs.tpch import streams_at
    from airflow_iqp.query.catalogue import get_query

    return Saved(get_query(qid), streams_at(landing), static)
