"""Plan entries for tests that need a Batch but not a whole plan."""

from airflow_iqp.window.batch import Batch

DEFAULTS = dict(query="q", window_id="w", index=1, of=1, units=1, cumulative=1, expected_total=1, last=True,
                ready_ts=0.0, latest_start_ts=0.0, cost=1.0, remaining_cost=1.0, deadline_ts=0.0, landing="",
                state_dir="", backend="spark-submit", label="batch")


def make_batch(**fields) -> Batch:
    """A Batch with every required field filled in; ``fields`` override."""
    return Batch(**{**DEFAULTS, **fields})
