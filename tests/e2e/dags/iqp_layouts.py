"""Two DAGs over CSV files whose writer knows nothing of the DAGs' window grid (the end-to-end
test tests/e2e/test_own_data.py): one flat directory, one Hive layout of minute partitions
named by the writer's clock. Neither gives a cost hint. The Hive DAG's ``units`` undercounts
what arrives: the last batch still claims everything that arrived in the window. Windows,
deadline and anchor come from the environment."""

import os
from datetime import datetime, timedelta

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.backends import SparkConnect
from airflow_iqp.options import Arrival
from airflow_iqp.streams import Stream

DATA = os.environ.get("IQP_DATA", "/opt/iqp")
ANCHOR = datetime.fromisoformat(os.environ["IQP_ANCHOR"]) if os.environ.get("IQP_ANCHOR") else None
END = datetime.fromisoformat(os.environ["IQP_END"]) if os.environ.get("IQP_END") else None
SQL = """SELECT country, count(*) AS n, sum(amount) AS revenue, avg(qty) AS avg_qty,
                count(DISTINCT user_id) AS users
         FROM events WHERE amount IS NOT NULL GROUP BY country ORDER BY country"""
WINDOW = timedelta(seconds=int(os.environ.get("IQP_WINDOW_S", "3600")))
DEADLINE = timedelta(seconds=int(os.environ.get("IQP_DEADLINE_S", "600")))
GRACE = float(os.environ.get("IQP_GRACE_S", "3"))
HIVE_UNITS = int(os.environ.get("IQP_HIVE_UNITS", "4"))

flat = iqp_dag(
    name="events_flat", sql=SQL,
    streams={"events": Stream(path=DATA + "/flat", format="csv", pattern="*.csv")},
    window=WINDOW, deadline_offset=DEADLINE, arrival=Arrival(grace=GRACE),
    backend=SparkConnect(tail_slots=1), anchor=ANCHOR, end_date=END,
)

hive = iqp_dag(
    name="events_hive", sql=SQL,
    streams={"events": Stream(path=DATA + "/hive", format="csv", pattern="*.csv",
                              partitions="dt=%Y-%m-%d/hour=%H/minute=%M")},
    window=WINDOW, deadline_offset=DEADLINE, arrival=Arrival(units=HIVE_UNITS, grace=GRACE),
    backend=SparkConnect(tail_slots=1), anchor=ANCHOR, end_date=END,
)
