"""The cluster test's DAGs (tests/cluster/test_cluster_e2e.py), beside a copy of the example
``dags/iqp_cq2.py`` (CQ2 on spark-submit): a user's SQL over their own CSV files on Spark
Connect, and TPC-H Q3 (orders joined with lineitem, both streams, and with the static
customer table) on both backends, and a group of three queries over the same CSV files that
shares its batches on Spark Connect. The TPC-H DAGs read the same landing directory as the
example, the CSV ones a directory of their own; each backend has a state store of its own
under ``T_STATE`` (an ``s3://`` prefix in the test). Window, units, deadline and cost hints
come from the same IQP_* variables as the example's."""

import json
import os
from datetime import datetime, timedelta

from airflow_iqp.dag_factory import iqp_dag, iqp_group
from airflow_iqp.backends import SparkConnect, SparkSubmit
from airflow_iqp.options import Algorithm1, Arrival
from airflow_iqp.streams import Stream

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

events_connect = iqp_dag(
    name="events", dag_id="iqp_events_connect",
    sql="""SELECT country, count(*) AS n, sum(amount) AS revenue, avg(qty) AS avg_qty,
                  count(DISTINCT user_id) AS users
           FROM events WHERE amount IS NOT NULL GROUP BY country""",
    streams={"events": Stream(path=DATA + "/landing/events/{{ data_interval_start | ts_nodash }}", format="csv",
                              pattern="*.csv")},
    backend=SparkConnect(), state_dir=os.environ["T_STATE"] + "/connect", **COMMON)

# Three queries of one shop over the same CSV files: one batch job per batch for all three,
# and a fused tail (a group's default) that runs the last batch and all three merges.
# Hints under which one batch cannot meet even the staggered deadline the tail's order
# allows: the plan cuts two. (On Spark Connect every query of a shared batch pays its own
# fixed cost, so sharing is planned at no less work than apart: the plan says so.)
shop = iqp_group(
    name="shop", queries=json.loads(os.environ["IQP_GROUP_SQL"]),
    streams={"events": Stream(path=DATA + "/landing/events/{{ data_interval_start | ts_nodash }}", format="csv",
                              pattern="*.csv")},
    deadline_offset={q: timedelta(seconds=s) for q, s in json.loads(os.environ["IQP_GROUP_DEADLINES"]).items()},
    window=COMMON["window"], arrival=COMMON["arrival"], anchor=COMMON["anchor"], end_date=COMMON["end_date"],
    cut=Algorithm1(cost_hint={"kind": "linear", "per_unit": 4.0, "per_batch": 5.0},
                   final_agg_hint={"kind": "linear", "base": 10.0, "per_batch": 0.5}),
    backend=SparkConnect(), state_dir=os.environ["T_STATE"] + "/connect")

for backend in (SparkSubmit(), SparkConnect()):
    globals()[f"q3_{backend.name.replace('-', '_')}"] = iqp_dag(
        query="q3", dag_id=f"iqp_q3_{backend.name.replace('-', '_')}", streams=LANDING,
        static=os.environ["T_STATIC"], backend=backend,
        state_dir=os.environ["T_STATE"] + "/" + backend.name.split("-")[-1], **COMMON)
