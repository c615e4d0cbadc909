"""The DAGs of ``benchmarks/vs_streaming.py``: one per query, all reading one landing directory.

Configured by environment (the benchmark sets it): IQP_QUERIES (comma-separated ids),
IQP_BACKEND, IQP_LANDING, IQP_STATIC, IQP_UNITS, IQP_WINDOW_S, IQP_ANCHOR / IQP_END (ISO
times: the one window), IQP_DEADLINES (JSON: query -> seconds after the window's end),
IQP_MARGIN (seconds), IQP_MODE ("plan" or "one_batch"), IQP_FUSE_TAIL ("1": the final task
runs the last batch), IQP_DISPATCH (seconds), IQP_TAIL_SLOTS, IQP_TAIL_LEAD (JSON: query ->
seconds), IQP_SHARES ("1": plan jointly with the other queries, their deadlines IQP_DEADLINES),
IQP_COST_SCALE (planned costs over calibrated ones).
Cost models come from the calibrated fits in the state directory.

``benchmarks/single_query_sweep.py`` runs many windows one after another in one Airflow:
IQP_WINDOWS names a JSON file of DAGs, each with its own ``dag_id``, ``query``, ``landing``,
``window_s``, ``anchor`` (ISO), ``deadline`` (seconds after the window's end), ``tail_lead``,
``mode`` and ``state_dir``; the other settings come from the variables above.
"""

import json
import os
from datetime import datetime, timedelta

from airflow_iqp.dag_factory import iqp_dag



def _shared() -> dict:
    return dict(static=os.environ["IQP_STATIC"], units=int(os.environ["IQP_UNITS"]), backend=os.environ["IQP_BACKEND"],
                margin=float(os.environ.get("IQP_MARGIN", "10")), deadline_alert=False, retries=0,
                fuse_tail=os.environ.get("IQP_FUSE_TAIL") == "1", dispatch=float(os.environ.get("IQP_DISPATCH", "0")),
                tail_slots=int(os.environ.get("IQP_TAIL_SLOTS", "0")),
                cost_scale=float(os.environ.get("IQP_COST_SCALE", "1")))


if os.environ.get("IQP_WINDOWS"):
    with open(os.environ["IQP_WINDOWS"]) as f:
        for w in json.load(f):
            start = datetime.fromisoformat(w["anchor"])
            globals()[w["dag_id"]] = iqp_dag(
                query=w["query"], dag_id=w["dag_id"], landing=w["landing"], window=timedelta(seconds=w["window_s"]),
                deadline_offset=timedelta(seconds=w["deadline"]), mode=w["mode"], tail_lead=w["tail_lead"],
                state_dir=w["state_dir"], anchor=start, start_date=start, end_date=start + timedelta(seconds=1),
                **_shared())

if os.environ.get("IQP_QUERIES"):
    ANCHOR = datetime.fromisoformat(os.environ["IQP_ANCHOR"])
    DEADLINES = json.loads(os.environ["IQP_DEADLINES"])
    LEAD = json.loads(os.environ.get("IQP_TAIL_LEAD") or "{}")
    for query in os.environ["IQP_QUERIES"].split(","):
        globals()[f"bench_{query}"] = iqp_dag(
            query=query, dag_id=f"bench_{query}", landing=os.environ["IQP_LANDING"], static=os.environ["IQP_STATIC"],
            units=int(os.environ["IQP_UNITS"]), window=timedelta(seconds=float(os.environ["IQP_WINDOW_S"])),
            deadline_offset=timedelta(seconds=float(DEADLINES[query])), backend=os.environ["IQP_BACKEND"],
            margin=float(os.environ.get("IQP_MARGIN", "10")), deadline_alert=False, retries=0,
            mode=os.environ.get("IQP_MODE", "plan"), fuse_tail=os.environ.get("IQP_FUSE_TAIL") == "1",
            tail_lead=LEAD.get(query),
            dispatch=float(os.environ.get("IQP_DISPATCH", "0")),
            tail_slots=int(os.environ.get("IQP_TAIL_SLOTS", "0")),
            shares=DEADLINES if os.environ.get("IQP_SHARES") == "1" else None,
            cost_scale=float(os.environ.get("IQP_COST_SCALE", "1")),
            anchor=ANCHOR, start_date=ANCHOR, end_date=datetime.fromisoformat(os.environ["IQP_END"]))
