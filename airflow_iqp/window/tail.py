"""The fused tail's entry point for the Spark jobs, and the only part of the provider they use.

A fused tail's final task runs batches itself (``split_tail``): for each it waits until
the batch may start and claims its input (:func:`claim_when_ready`), then takes its turn
on the cluster (:func:`turn`); a batch the window's end overtook leaves its units to the
last batch (:func:`fold_into_tail`). The jobs get the batch as JSON (:func:`load`).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_iqp.coordination import cluster_turn as turn
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.readiness import fold_into_tail
from airflow_iqp.window.readiness import wait_and_claim as claim_when_ready

__all__ = ["Batch", "claim_when_ready", "fold_into_tail", "load", "turn"]


def load(value: Any) -> Batch:
    """A plan entry from its JSON text or dict, validated (:meth:`Batch.from_dict`)."""
    return Batch.from_dict(json.loads(value) if isinstance(value, str) else value)
