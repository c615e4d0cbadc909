"""The DAGs of ``benchmarks/vs_streaming.py``: one per query, all reading one landing directory.

Configured by environment (the benchmark sets it): IQP_QUERIES (comma-separated ids),
IQP_BACKEND, IQP_LANDING, IQP_STATIC, IQP_UNITS, IQP_WINDOW_S, IQP_ANCHOR / IQP_END (ISO
times: the one window), IQP_DEADLINES (JSON: query -> seconds after the window's end),
IQP_MARGIN (seconds), IQP_MODE ("plan", "one_batch" or "dynamic"), IQP_FUSE_TAIL ("1": the final task
runs the last batch; "0": it does not), IQP_DISPATCH (seconds; unset: learned), IQP_TAIL_SLOTS, IQP_TAIL_LEAD
(JSON: query -> seconds), IQP_SHARES ("1": plan jointly with the other queries, their
deadlines IQP_DEADLINES), IQP_CLUSTER (a cluster's name: plan jointly through the store's
registry instead), IQP_COST_SCALE (planned costs over calibrated ones; unset: learned),
IQP_GROUP ("1": one ``iqp_group`` DAG, ``iqp_bench_group``, whose batches all the queries share).
A setting left unset is the provider's default (learned, where it is a margin).
Cost models come from the calibrated fits in the state directory.

``benchmarks/single_query_sweep.py`` runs many windows one after another in one Airflow:
IQP_WINDOWS names a JSON file of DAGs, each with its own ``dag_id``, ``query``, ``landing``,
``window_s``, ``anchor`` (ISO), ``deadline`` (seconds after the window's end), ``tail_lead``,
``mode`` and ``state_dir``; the other settings come from the variables above.
"""

import json
import os
from datetime import datetime, timedelta

from airflow_iqp.dag_factory import iqp_dag, iqp_group
from airflow_iqp.backends import SparkConnect, SparkSubmit
from airflow_iqp.options import Alerts, Algorithm1, Arrival, MinBatches, OneBatch



def _seconds(name: str) -> float | None:
    """A setting the environment may leave unset: then the provider learns it."""
    return float(os.environ[name]) if os.environ.get(name) else None


def _cut(mode: str, shares: dict | None = None):
    cost_scale = _seconds("IQP_COST_SCALE")
    if mode == "one_batch":
        return OneBatch(cost_scale=cost_scale)
    if mode == "dynamic":  # the paper's dynamic mode, δRSF and Cmax at their defaults
        return MinBatches(cost_scale=cost_scale)
    margin = _seconds("IQP_MARGIN")
    return Algorithm1(cost_scale=cost_scale, shares=shares, **({"margin": margin} if margin is not None else {}))


def _backend(tail_lead: float | None):
    """The backend of the environment's settings; a setting left unset is the provider's default."""
    spark = SparkConnect if os.environ["IQP_BACKEND"] == "spark-connect" else SparkSubmit
    fuse = {"1": True, "0": False}.get(os.environ.get("IQP_FUSE_TAIL", ""))
    return spark(retries=0, fuse_tail=fuse, tail_lead=tail_lead,
                 dispatch=_seconds("IQP_DISPATCH"), cluster=os.environ.get("IQP_CLUSTER") or None,
                 tail_slots=int(os.environ.get("IQP_TAIL_SLOTS", "0")))


if os.environ.get("IQP_WINDOWS"):
    with open(os.environ["IQP_WINDOWS"]) as f:
        for w in json.load(f):
            start = datetime.fromisoformat(w["anchor"])
            globals()[w["dag_id"]] = iqp_dag(
                # The Deadline Alert stays on here: the sweep's windows run as a user's would.
                query=w["query"], dag_id=w["dag_id"], streams=w["landing"], static=os.environ["IQP_STATIC"],
                window=timedelta(seconds=w["window_s"]), deadline_offset=timedelta(seconds=w["deadline"]),
                arrival=Arrival(units=int(os.environ["IQP_UNITS"])), cut=_cut(w["mode"]),
                backend=_backend(w["tail_lead"]), state_dir=w["state_dir"], anchor=start,
                end_date=start + timedelta(seconds=1))

if os.environ.get("IQP_QUERIES"):
    ANCHOR = datetime.fromisoformat(os.environ["IQP_ANCHOR"])
    DEADLINES = json.loads(os.environ["IQP_DEADLINES"])
    LEAD = json.loads(os.environ.get("IQP_TAIL_LEAD") or "{}")
    CUT = _cut(os.environ.get("IQP_MODE", "plan"), DEADLINES if os.environ.get("IQP_SHARES") == "1" else None)
    QUERIES = os.environ["IQP_QUERIES"].split(",")
    if os.environ.get("IQP_GROUP") == "1":
        QUERIES = []  # one DAG for all of them
        bench_group = iqp_group(
            name="bench_group", queries=os.environ["IQP_QUERIES"].split(","), streams=os.environ["IQP_LANDING"],
            static=os.environ["IQP_STATIC"], window=timedelta(seconds=float(os.environ["IQP_WINDOW_S"])),
            deadline_offset={q: timedelta(seconds=float(s)) for q, s in DEADLINES.items()},
            arrival=Arrival(units=int(os.environ["IQP_UNITS"])), cut=CUT, backend=_backend(None),
            alerts=Alerts(deadline=False), anchor=ANCHOR, end_date=datetime.fromisoformat(os.environ["IQP_END"]))
    for query in QUERIES:
        backend = _backend(LEAD.get(query))
        globals()[f"bench_{query}"] = iqp_dag(
            query=query, dag_id=f"bench_{query}", streams=os.environ["IQP_LANDING"], static=os.environ["IQP_STATIC"],
            window=timedelta(seconds=float(os.environ["IQP_WINDOW_S"])),
            deadline_offset=timedelta(seconds=float(DEADLINES[query])),
            arrival=Arrival(units=int(os.environ["IQP_UNITS"])), cut=CUT, backend=backend,
            alerts=Alerts(deadline=False), anchor=ANCHOR, end_date=datetime.fromisoformat(os.environ["IQP_END"]))
