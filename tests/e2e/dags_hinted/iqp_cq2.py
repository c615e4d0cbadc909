"""The demo's CQ2 DAG (dags/iqp_cq2.py), planned with a cost hint from the environment
(IQP_COST_PER_UNIT, IQP_COST_PER_BATCH): for the end-to-end tests whose windows must be cut
into several batches whatever this machine's costs are. The demo DAG itself gives no hint."""

import functools
import os
import runpy
from pathlib import Path

import airflow_iqp
import airflow_iqp.dag_factory as factory
from airflow_iqp.options import Algorithm1

DEMO = Path(airflow_iqp.__file__).resolve().parents[1] / "dags" / "iqp_cq2.py"
HINT = Algorithm1(cost_hint={"kind": "linear", "per_unit": float(os.environ.get("IQP_COST_PER_UNIT", "0.05")),
                             "per_batch": float(os.environ.get("IQP_COST_PER_BATCH", "20"))},
                  final_agg_hint={"kind": "linear", "base": 20.0, "per_batch": 0.5})

_real = factory.iqp_dag
factory.iqp_dag = functools.partial(_real, cut=HINT)
try:
    dag = runpy.run_path(str(DEMO))["dag"]
finally:
    factory.iqp_dag = _real
