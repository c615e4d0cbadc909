"""The fault suite's DAGs (tests/cluster/test_faults.py): one small query over parquet events,
as several DAGs that differ only in what the suite does to them.

``IQP_FAULTS`` (in the environment) names a JSON file that gives the query's SQL, the data directory and, per
DAG, its window (``anchor``, ``window`` and ``offset`` in seconds) and options; each DAG runs
exactly one window (``end_date`` just after its anchor). A DAG whose anchor is not set yet is
not defined; the suite rewrites the file as it goes (the dag-processor reads it at each parse). The landing directory of a DAG's window is
``<data>/<dag>/<window start, ts_nodash>``.
"""

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.backends import SparkConnect, SparkSubmit
from airflow_iqp.options import Algorithm1, Arrival, MinBatches
from airflow_iqp.streams import Stream

_SPEC_FILE = Path(os.environ.get("IQP_FAULTS") or "/nonexistent")
SPEC = json.loads(_SPEC_FILE.read_text()) if _SPEC_FILE.is_file() else {}


def _dag(name: str, opts: dict):
    anchor = datetime.fromtimestamp(opts["anchor"], UTC)
    backend_cls = SparkSubmit if opts.get("backend") == "spark-submit" else SparkConnect
    if opts.get("cut") == "minbatches":  # several small batches whatever the deadline
        cut = MinBatches(cost_hint={"kind": "linear", "per_unit": 0.5, "per_batch": 2.0},
                         final_agg_hint={"kind": "linear", "base": 3.0, "per_batch": 0.5},
                         rsf=0.5, c_max=3.0, max_batches=opts["units"] // 2)
    else:
        cut = Algorithm1(cost_hint=opts.get("cost_hint", {"kind": "linear", "per_unit": 0.5, "per_batch": 5.0}),
                         final_agg_hint={"kind": "linear", "base": 5.0, "per_batch": 0.5}, margin=2.0)
    return iqp_dag(
        name=name, sql=SPEC["sql"],
        streams={"events": Stream(path=f"{SPEC['data']}/{name}/" + "{{ data_interval_start | ts_nodash }}",
                                  on_bad_unit=opts.get("on_bad_unit", "fail"), schema=opts.get("schema"))},
        window=timedelta(seconds=opts["window"]), deadline_offset=timedelta(seconds=opts["offset"]),
        arrival=Arrival(units=opts.get("units"), rate=opts.get("rate"), grace=opts.get("grace", 0.0)),
        cut=cut, backend=backend_cls(retries=opts.get("retries", 3)),
        anchor=anchor, end_date=anchor + timedelta(seconds=1), tags=("faults",),
    )


for _name, _opts in SPEC.get("dags", {}).items():
    if _opts.get("anchor"):
        globals()[f"dag_{_name}"] = _dag(_name, _opts)
