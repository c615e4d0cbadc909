"""Revenue per country per hour, due 10 minutes after the hour: a user's own SQL over their
own files.

Writers drop order events as parquet files under a per-hour prefix of
``$IQP_DATA/landing/events/``; ``$IQP_DATA/static/countries.parquet`` maps country codes to
regions. The query is split when this file is parsed: per batch, the join, the filter and
per-country sums, counts and distinct buyers; at the end, the merge, the average and the
ORDER BY. ``airflow-iqp explain --sql-file ...`` prints the two steps.
"""

import os
from datetime import timedelta

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.options import Arrival

DATA = os.environ.get("IQP_DATA", "/opt/iqp")

dag = iqp_dag(
    name="revenue_by_country",
    sql="""
        SELECT c.region, e.country,
               sum(e.amount) AS revenue,
               avg(e.amount) AS avg_order,
               count(DISTINCT e.user_id) AS buyers
        FROM events e JOIN countries c ON e.country = c.code
        WHERE e.amount > 0
        GROUP BY c.region, e.country
        ORDER BY revenue DESC
    """,
    streams={"events": DATA + "/landing/events/{{ data_interval_start | ts_nodash }}"},
    static={"countries": DATA + "/static/countries.parquet"},
    window=timedelta(hours=1),
    deadline_offset=timedelta(minutes=10),
    arrival=Arrival(units=120),
)
