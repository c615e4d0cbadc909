"""A user's SQL over their own CSV files, with no ``Arrival(units=...)``: the end-to-end test's DAG
(tests/e2e/test_own_data.py). Windows, rate hint and deadline come from the environment. It
runs on the Spark Connect server of ``spark_connect_default``, as the test's other DAGs do:
their jobs share one JVM instead of starting one each at every window's end."""

import os
from datetime import datetime, timedelta

from airflow_iqp.backends import SparkConnect
from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.options import Algorithm1, Arrival
from airflow_iqp.streams import Stream

DATA = os.environ.get("IQP_DATA", "/opt/iqp")
ANCHOR = datetime.fromisoformat(os.environ["IQP_ANCHOR"]) if os.environ.get("IQP_ANCHOR") else None
END = datetime.fromisoformat(os.environ["IQP_END"]) if os.environ.get("IQP_END") else None

dag = iqp_dag(
    name="events_csv",
    sql="""SELECT country, count(*) AS n, sum(amount) AS revenue, avg(qty) AS avg_qty,
                  count(DISTINCT user_id) AS users
           FROM events WHERE amount IS NOT NULL GROUP BY country ORDER BY country""",
    streams={"events": Stream(path=DATA + "/landing/{{ data_interval_start | ts_nodash }}", format="csv",
                              pattern="*.csv")},
    window=timedelta(seconds=int(os.environ.get("IQP_WINDOW_S", "3600"))),
    deadline_offset=timedelta(seconds=int(os.environ.get("IQP_DEADLINE_S", "600"))),
    arrival=Arrival(rate=float(os.environ.get("IQP_RATE", "0.2")), grace=float(os.environ.get("IQP_GRACE_S", "3")),
                    late=os.environ.get("IQP_LATE", "record"),
                    lateness=float(os.environ.get("IQP_LATENESS_S", "0"))),
    cut=Algorithm1(cost_hint={"kind": "linear", "per_unit": 0.1, "per_batch": 20},
                   final_agg_hint={"kind": "linear", "base": 20.0, "per_batch": 0.5}),
    backend=SparkConnect(), anchor=ANCHOR, end_date=END,
)
