"""CQ2, orders per priority, written as SQL: one run per window, the result due soon after
the window closes.

The orders land as TPC-H units (``airflow-iqp tpch``): each unit a directory holding
``orders.parquet`` (and the orders' ``lineitem.parquet``, which this query does not read).
Set IQP_DATA to the directory that holds the landing directories; the
window, the units per window and the deadline offset come from IQP_WINDOW_S, IQP_UNITS
and IQP_DEADLINE_S (an hour, 240 units and 10 minutes by default). IQP_ANCHOR (ISO
time) puts a window boundary there, and no window starts before it; none starts after
IQP_END (ISO time), if set. No cost is given: the first window is planned with the
backend's built-in default, every later one with what this query's batches and merges took.
"""

import os
from datetime import datetime, timedelta

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.options import Alerts, Arrival

DATA = os.environ.get("IQP_DATA", "/opt/iqp")

ANCHOR = datetime.fromisoformat(os.environ["IQP_ANCHOR"]) if os.environ.get("IQP_ANCHOR") else None
END = datetime.fromisoformat(os.environ["IQP_END"]) if os.environ.get("IQP_END") else None

dag = iqp_dag(
    name="cq2",
    sql="SELECT count(*) AS totalorders, o_orderpriority FROM orders GROUP BY o_orderpriority",
    streams={"orders": {"path": DATA + "/landing/cq2/{{ data_interval_start | ts_nodash }}", "unit": "dir"}},
    window=timedelta(seconds=int(os.environ.get("IQP_WINDOW_S", "3600"))),
    deadline_offset=timedelta(seconds=int(os.environ.get("IQP_DEADLINE_S", "600"))),
    arrival=Arrival(units=int(os.environ.get("IQP_UNITS", "240")), profile=os.environ.get("IQP_PROFILE", "fixed")),
    alerts=Alerts(deadline=os.environ.get("IQP_DEADLINE_ALERT", "1") == "1"),
    anchor=ANCHOR,
    end_date=END,
)
