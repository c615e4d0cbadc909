"""One DAG per other query of the catalogue (CQ2 has its own file), hourly, due 15 minutes after.

Each is what ``dags/iqp_cq2.py`` shows, with the query's own cost hint: the streams it
reads decide how dear a unit is.
"""

import os
from datetime import timedelta

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.options import Algorithm1, Arrival
from airflow_iqp.query.catalogue import get_query, list_queries

DATA = os.environ.get("IQP_DATA", "/opt/iqp")

for qid in list_queries():
    if qid == "cq2":
        continue
    q = get_query(qid)
    globals()[f"iqp_{qid}"] = iqp_dag(
        query=qid,
        streams=DATA + "/landing/" + qid + "/{{ data_interval_start | ts_nodash }}",
        static=DATA + "/tpch/static",
        window=timedelta(hours=1),
        deadline_offset=timedelta(minutes=15),
        arrival=Arrival(units=240),
        cut=Algorithm1(cost_hint={"kind": "linear", "per_unit": 0.1 if "lineitem" in q.streams else 0.05,
                                  "per_batch": 20}),
    )
