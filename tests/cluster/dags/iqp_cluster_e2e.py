"""The cluster test's DAGs (tests/cluster/test_cluster_e2e.py), beside a copy of the example
``dags/iqp_cq2.py`` (CQ2 on spark-submit): CQ2 on Spark Connect, and TPC-H Q3 (orders joined
with lineitem, both streams, and with the static customer table) on both backends. All read
the same landing directory as the example; each backend has a state directory of its own.
Window, units, deadline and cost hints come from the same IQP_* variables as the example's."""

import os
from datetime import datetime, timedelta

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.backends import SparkConnect, SparkSubmit
from airflow_iqp.options import Algorithm1, Arrival

DATA = os.environ["IQP_DATA"]
LANDING = DATA + "/landing/cq2/{{ data_interval_start | ts_nodash }}"
COMMON = dict(
    window=timedelta(seconds=int(os.environ["IQP_WINDOW_S"])),
    deadline_offset=timedelta(seconds=int(os.environ["IQP_DEADLINE_S"])),
    arrival=Arrival(units=int(os.environ["IQP_UNITS"])),
    cut=Algorithm1(cost_hint={"kind": "linear", "per_unit": float(os.environ["IQP_COST_PER_UNIT"]),
                              "per_batch": float(os.environ["IQP_COST_PER_BATCH"])},
                   final_agg_hint={"kind": "linear", "base": 20.0, "per_batch": 0.5}),
    anchor=datetime.fromisoformat(os.environ["IQP_ANCHOR"]),
    end_date=datetime.fromisoformat(os.environ["IQP_END"]),
)

cq2_connect = iqp_dag(
    name="cq2", dag_id="iqp_cq2_connect",
    sql="SELECT count(*) AS totalorders, o_orderpriority FROM orders GROUP BY o_orderpriority",
    streams={"orders": {"path": LANDING, "unit": "dir"}},
    backend=SparkConnect(), state_dir=os.environ["T_STATE"] + "/connect", **COMMON)

for backend in (SparkSubmit(), SparkConnect()):
    globals()[f"q3_{backend.name.replace('-', '_')}"] = iqp_dag(
        query="q3", dag_id=f"iqp_q3_{backend.name.replace('-', '_')}", streams=LANDING,
        static=os.environ["T_STATIC"], backend=backend,
        state_dir=os.environ["T_STATE"] + "/" + backend.name.split("-")[-1], **COMMON)
