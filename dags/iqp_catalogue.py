"""One DAG per other query of the catalogue (CQ2 has its own file), hourly, due 15 minutes after.

Each is what ``dags/iqp_cq2.py`` shows. No cost is given: the first window is planned with
the backend's built-in default, every later one with what the query's batches took.
"""

import os
from datetime import timedelta

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.options import Arrival
from airflow_iqp.query.catalogue import list_queries

DATA = os.environ.get("IQP_DATA", "/opt/iqp")

for qid in list_queries():
    if qid == "cq2":
        continue
    globals()[f"iqp_{qid}"] = iqp_dag(
        query=qid,
        streams=DATA + "/landing/" + qid + "/{{ data_interval_start | ts_nodash }}",
        static=DATA + "/tpch/static",
        window=timedelta(hours=1),
        deadline_offset=timedelta(minutes=15),
        arrival=Arrival(units=240),
    )
