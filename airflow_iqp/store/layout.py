"""The names of the state store's layout: the documents of a window, batch names, query ids.

Pure Python. :mod:`airflow_iqp.store.base` and :mod:`airflow_iqp.store.window` build every
key from these; nothing else does.
"""

from __future__ import annotations

from airflow_iqp.errors import ConfigError, IQPError
from airflow_iqp.paths import check_name

#: The documents and directories of the layout, by meaning.
QUERY_FILE = "query.json"
COST_HISTORY = "cost_history.jsonl"
#: The named clusters' registries: ``_clusters/<cluster>/<query>.json``.
CLUSTERS = "_clusters"
BATCH_PREFIX = "batch-"
WINDOW_DOCS = ("plan", "replan", "report", "late", "arrivals", "deadline_risk", "seen")


class ClaimError(IQPError):
    """A batch tried to claim a unit (or file) that another batch of the window already claimed."""


def batch_name(batch: int) -> str:
    """``batch-0007`` for batch 7 (batches are numbered from 0)."""
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 0:
        raise ConfigError(f"batch number must be an int >= 0, got {batch!r}", field="batch")
    return f"{BATCH_PREFIX}{batch:04d}"


def batch_of(name: str) -> int:
    """The batch number in a ``batch-NNNN`` name (a claim, a partial or its metrics)."""
    stem = str(name).rsplit("/", 1)[-1].split(".", 1)[0]
    if not stem.startswith(BATCH_PREFIX) or not stem[len(BATCH_PREFIX):].isdigit():
        raise ConfigError(f"not a batch-NNNN name: {name}", field="batch")
    return int(stem[len(BATCH_PREFIX):])


def query_key(query_id: str) -> str:
    """A query's id as the store keeps it: one plain name, in lower case (the one place a
    query id is normalised)."""
    return check_name(query_id, "query_id").lower()
