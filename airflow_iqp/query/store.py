"""A query and its inputs in the state directory: ``STATE/<query>/query.json``.

The plan step (and ``run-window``) saves what the DAG declared: the split query, its
streams' formats and schemas, and where its static tables are. The Spark jobs load it
from there, so a job runs exactly what was planned and needs no decomposer (sqlglot) on
the driver. A query id with no saved file is looked up in the catalogue.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from airflow_iqp.errors import ConfigError
from airflow_iqp.query.model import Query, check_query_id
from airflow_iqp.streams import TPCH, Stream

QUERY_FILE = "query.json"


@dataclass(frozen=True)
class Saved:
    """A query with its inputs: its streams, and its static tables (a directory of
    ``<table>.parquet``, or a mapping table -> path)."""

    query: Query
    streams: tuple[Stream, ...] = TPCH
    static: str | Mapping[str, str] | None = None

    def stream(self, name: str) -> Stream:
        for s in self.streams:
            if s.name == name:
                return s
        raise ConfigError(f"query {self.query.id} reads stream {name}, which is not declared", field="streams")


def query_file(state_dir: str | os.PathLike, qid: str) -> Path:
    return Path(state_dir) / check_query_id(qid).lower() / QUERY_FILE


def schema_dir(state_dir: str | os.PathLike, qid: str) -> Path:
    """``STATE/<query>/schema/``: each stream's columns as taken from its first unit."""
    return Path(state_dir) / check_query_id(qid).lower() / "schema"


def save_query(state_dir: str | os.PathLike, saved: Saved) -> Path:
    from airflow_iqp.state import atomic_write_json

    doc = {"query": saved.query.to_dict(), "streams": [s.to_dict() for s in saved.streams],
           "static": dict(saved.static) if isinstance(saved.static, Mapping) else saved.static}
    return atomic_write_json(query_file(state_dir, saved.query.id), doc)


def load_query(qid: str, state_dir: str | os.PathLike | None = None) -> Saved:
    """The query saved for ``qid`` in ``state_dir``, else the catalogued one on the TPC-H layout."""
    if state_dir is not None:
        path = query_file(state_dir, qid)
        if path.is_file():
            from airflow_iqp.state import read_json

            doc = read_json(path)
            return Saved(Query.from_dict(doc["query"]), tuple(Stream.from_dict(s) for s in doc["streams"]),
                         doc.get("static"))
    from airflow_iqp.query.catalogue import get_query

    return Saved(get_query(qid))
