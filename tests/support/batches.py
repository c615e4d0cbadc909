"""Plan entries for tests that need a Batch but not a whole plan."""

from airflow_iqp.inputs.tpch import streams_at
from airflow_iqp.window.batch import Batch

#: The two streams of ``airflow-iqp tpch``'s layout (each unit a directory of orders.parquet
#: and lineitem.parquet), as a QueryConfig and a Batch carry them.
TPCH = streams_at()
TPCH_STREAMS = tuple(s.to_dict() for s in TPCH)

DEFAULTS = dict(streams=TPCH_STREAMS,
                query="q", window_id="w", index=1, of=1, units=1, cumulative=1, expected_total=1, last=True,
                ready_ts=0.0, latest_start_ts=0.0, cost=1.0, remaining_cost=1.0, deadline_ts=0.0, landing="",
                state_dir="", backend="spark-submit", label="batch")


def make_batch(**fields) -> Batch:
    """A Batch with every required field filled in; ``fields`` override."""
    return Batch(**{**DEFAULTS, **fields})


def tpch_files(units, names=("orders", "lineitem")) -> list[str]:
    """The files of the named TPC-H streams in the given unit directories, stream by stream in
    the order named (:func:`airflow_iqp.streams.files_of` over those of :data:`TPCH`)."""
    from airflow_iqp.streams import files_of

    by_name = {s.name: s for s in TPCH}
    return files_of(units, [by_name[n] for n in names])


def tpch_window(location, qid: str, window: str):
    """Window ``window`` of the catalogued query ``qid`` in the store at ``location``, with the
    query saved there as ``run-window`` saves it: the batch and merge jobs load it from the
    store (:func:`airflow_iqp.query.store.load_query`)."""
    from airflow_iqp.query.store import catalogued, save_query
    from airflow_iqp.store import open_store

    save_query(location, catalogued(qid))
    return open_store(location).window(qid, window)
