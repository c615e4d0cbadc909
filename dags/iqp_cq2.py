"""CQ2, orders per priority: one run per window, the result due soon after the window closes.

Set IQP_DATA to the directory that holds tpch/static and the landing directories; the
window, the units per window and the deadline offset come from IQP_WINDOW_S, IQP_UNITS
and IQP_DEADLINE_S (an hour, 240 units and 10 minutes by default). IQP_ANCHOR (ISO
time) puts a window boundary there, and no window starts before it; none starts after
IQP_END (ISO time), if set.
"""

import os
from datetime import datetime, timedelta

from airflow_iqp.dag_factory import iqp_dag

DATA = os.environ.get("IQP_DATA", "/opt/iqp")

ANCHOR = datetime.fromisoformat(os.environ["IQP_ANCHOR"]) if os.environ.get("IQP_ANCHOR") else None
END = datetime.fromisoformat(os.environ["IQP_END"]) if os.environ.get("IQP_END") else None

dag = iqp_dag(
    query="cq2",
    landing=DATA + "/landing/cq2/{{ data_interval_start | ts_nodash }}",
    static=DATA + "/tpch/static",
    units=int(os.environ.get("IQP_UNITS", "240")),
    window=timedelta(seconds=int(os.environ.get("IQP_WINDOW_S", "3600"))),
    deadline_offset=timedelta(seconds=int(os.environ.get("IQP_DEADLINE_S", "600"))),
    profile=os.environ.get("IQP_PROFILE", "fixed"),
    cost_hint={"kind": "linear", "per_unit": float(os.environ.get("IQP_COST_PER_UNIT", "0.05")),
               "per_batch": float(os.environ.get("IQP_COST_PER_BATCH", "20"))},
    final_agg_hint={"kind": "linear", "base": 20.0, "per_batch": 0.5},
    deadline_alert=os.environ.get("IQP_DEADLINE_ALERT", "1") == "1",
    anchor=ANCHOR,
    start_date=ANCHOR,
    end_date=END,
)
