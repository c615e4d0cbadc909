"""A fixed set of windows and the plans the provider makes of them: the record that a change
of structure leaves every plan as it was (``test_plan_fixed_plans.py``). Each plan is kept as
its batch sizes, feasibility, total cost and models, and a digest of all the rest (the
plan, and every field of its batches but the paths).

``python -m tests.window.plans > tests/window/fixed_plans.json`` writes the record again;
do that only for a change that is meant to change plans, and say which in its commit.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import tempfile
from pathlib import Path

from airflow_iqp.backends import SparkConnect, SparkSubmit

from airflow_iqp.options import Algorithm1, Arrival, MinBatches, OneBatch
from airflow_iqp.store import open_store
from airflow_iqp.streams import Stream
from airflow_iqp.window.config import QueryConfig
from airflow_iqp.window.plan import plan_window

START = 1_800_000_000.0
RECORD = Path(__file__).with_name("fixed_plans.json")
STREAM = Stream("events", format="csv", pattern="*.csv")
#: What each batch of a plan keeps that its form does not choose: where it lands and the
#: state directory are the temporary directory's.
BATCH_FIELDS = ("index", "of", "units", "cumulative", "expected_total", "last", "ready_ts", "latest_start_ts",
                "cost", "remaining_cost", "deadline_ts", "label", "known_total", "spare", "skip", "max_units",
                "grace", "turn_ts", "backfill", "cost_scale", "backend")

CUTS = {"algorithm1": Algorithm1(), "margin0": Algorithm1(margin=0.0), "minbatches": MinBatches(),
        "onebatch": OneBatch(), "scaled": Algorithm1(cost_scale=1.5)}
BACKENDS = {"submit": SparkSubmit(), "submit-fused": SparkSubmit(fuse_tail=True), "connect": SparkConnect(),
            "connect-dispatch": SparkConnect(dispatch=2.0)}
COSTS = {"default": None, "hint": {"kind": "linear", "per_unit": 0.3, "per_batch": 6.0}, "history": "history"}
ARRIVALS = {"known": Arrival(units=120), "unknown-rate": Arrival(rate=1.0)}
DEADLINES = (10.0, 30.0, 80.0, 300.0)


def _history(state_dir: str, backend: str) -> None:
    store = open_store(state_dir)
    for units, seconds in ((5, 9.2), (115, 11.8), (60, 10.5)):
        store.record_cost(query="fixed", kind="batch", units=units, batches=1, wall_seconds=1.0, backend=backend,
                          end_to_end_seconds=seconds, recorded_at=1.0)
    for partials, seconds in ((1, 8.0), (3, 9.0)):
        store.record_cost(query="fixed", kind="final", units=120, batches=partials, wall_seconds=1.0, backend=backend,
                          end_to_end_seconds=seconds, recorded_at=1.0)


def plans() -> dict[str, dict]:
    """Every window of the set, by a name that says how it was set up, as plain JSON."""
    out = {}
    for (cut, c), (be, b), (cost, hint), (arr, a), deadline in itertools.product(
            CUTS.items(), BACKENDS.items(), COSTS.items(), ARRIVALS.items(), DEADLINES):
        with tempfile.TemporaryDirectory() as tmp:
            options = {**a.query_config(), **c.query_config(), **b.query_config()}
            if hint is not None and hint != "history":
                options["cost_hint"] = hint
            cfg = QueryConfig(query="fixed", landing=str(Path(tmp) / "landing"), state_dir=str(Path(tmp) / "state"),
                              streams=(STREAM.to_dict(),), **options)
            if hint == "history":
                _history(cfg.state_dir, cfg.backend)
            wp = plan_window(cfg, START, START + 120, START + 120 + deadline, now=START)
            whole = json.dumps({"models": wp.models, "backfill": wp.backfill, "plan": wp.plan.to_dict(),
                                "batches": [{k: getattr(e, k) for k in BATCH_FIELDS} for e in wp.batches]},
                               sort_keys=True)
            out[f"{cut}/{be}/{cost}/{arr}/{deadline:g}"] = {
                "sizes": [e.units for e in wp.batches], "feasible": wp.plan.feasible, "models": wp.models,
                "total_cost": round(wp.plan.total_cost, 6), "sha256": hashlib.sha256(whole.encode()).hexdigest(),
            }
    return out


if __name__ == "__main__":
    json.dump(plans(), sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
