"""A deadline reference for query windows: "the run's window end", never for backfills.

Use it in a DAG (Airflow 3.3 Task SDK)::

    from airflow.sdk import AsyncCallback, DeadlineAlert
    from airflow_iqp.deadlines import WindowEndDeadline, log_deadline_missed

    DAG(
        ...,
        schedule=WindowTimetable(window=timedelta(days=1), deadline_offset=timedelta(hours=2)),
        deadline=DeadlineAlert(
            reference=WindowEndDeadline(),
            interval=timedelta(hours=2),  # the deadline offset after the window's end
            callback=AsyncCallback(log_deadline_missed, kwargs={"query": "orders_per_priority"}),
        ),
    )

(:func:`window_deadline_alert` builds that alert from a ``WindowTimetable``.)

How Airflow 3.3 handles it: when a DAG run is created the scheduler evaluates every
``DeadlineAlert`` of the DAG version (``SerializedDAG._process_dagrun_deadline_alerts``),
for every run type, backfills included. A custom reference is serialized with its
``__class_path`` and, in the scheduler, looked up among the classes that plugins list in
``deadline_references`` (``airflow.serialization.helpers.find_registered_custom_deadline_reference``),
so ``IQPPlugin`` registers this class. ``_evaluate_with`` returning ``None`` means "no
deadline for this run": no row is written to the ``deadline`` table and nothing fires.
A backfill run is recognisable by ``dag_run.run_type == "backfill"`` (its
``triggered_by`` is ``"backfill"`` too; the run also carries a ``backfill_id``).
When the deadline passes while the run is unfinished, the scheduler marks it missed and
queues the callback; an ``AsyncCallback`` runs in the triggerer.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import AsyncCallback, BaseDeadlineReference, DeadlineAlert

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)



class WindowEndDeadline(BaseDeadlineReference):
    """Deadline base time = the run's ``data_interval_end`` (its window's end).

    Gives no deadline for backfill runs (old windows re-run later are not late) and for
    runs without a data interval (a manual run triggered without a logical date).
    """

    required_kwargs = {"dag_id", "run_id"}

    def _evaluate_with(self, *, session: Session, dag_id: str, run_id: str, **kwargs: Any) -> datetime | None:
        from sqlalchemy import select

        from airflow.models.dagrun import DagRun
        from airflow.utils.types import DagRunType

        row = session.execute(
            select(DagRun.data_interval_end, DagRun.run_type).where(
                DagRun.dag_id == dag_id, DagRun.run_id == run_id
            )
        ).first()
        if row is None:
            return None
        end, run_type = row
        if run_type == DagRunType.BACKFILL_JOB or end is None:
            return None
        return end


async def log_deadline_missed(context: dict | None = None, query: str | None = None, **kwargs: Any) -> None:
    """Default ``AsyncCallback`` target (runs in the triggerer): log it, and record it as JSON.

    The record goes to the query's state in the store (``state_dir`` if given, else
    ``[iqp] state_dir``), by run id.
    """
    from airflow_iqp import config
    from airflow_iqp.store import open_store

    context = context or {}
    dag_run = context.get("dag_run") or {}
    deadline = context.get("deadline") or {}
    if kwargs.get("member_of") and query and _member_on_time(query, dag_run, kwargs["deadline_offset_s"],
                                                             kwargs.get("state_dir")):
        log.info("IQP group %s: query %s's result was complete by its deadline; the run goes on with the "
                 "queries due later", kwargs["member_of"], query)
        return
    record = {"query": query, "kwargs": kwargs, "dag_run": _jsonable(dag_run), "deadline": _jsonable(deadline)}
    log.warning("IQP deadline missed: %s", json.dumps(record, default=str))
    # the context's dag_run is the REST API's DAGRunResponse: the id is "dag_run_id"
    run_id = str(dag_run.get("dag_run_id", "unknown")).replace("/", "_").replace(":", "_")
    store = open_store(kwargs.get("state_dir") or config.state_dir())
    store.query(query or "unknown").record_deadline_missed(run_id, record)


def _member_on_time(query: str, dag_run: dict, offset_s: float, state_dir: str | None = None) -> bool:
    """Whether ``query``'s result for the run's window was complete (its manifest written) by
    the window's end plus ``offset_s``, in ``state_dir`` (default ``[iqp] state_dir``)."""
    from airflow_iqp import config
    from airflow_iqp.store import open_store
    from airflow_iqp.window.config import window_id

    try:
        start = datetime.fromisoformat(str(dag_run["data_interval_start"]).replace("Z", "+00:00")).timestamp()
        end = datetime.fromisoformat(str(dag_run["data_interval_end"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError):
        return False
    manifest = open_store(state_dir or config.state_dir()).window(query, window_id(start)).manifest() or {}
    return manifest.get("written_at") is not None and manifest["written_at"] <= end + offset_s


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


def window_deadline_alert(
    deadline_offset: timedelta, callback: Any = None, name: str | None = "iqp-window-deadline",
    query: str | None = None, member_of: str | None = None, state_dir: str | None = None,
) -> DeadlineAlert:
    """A ``DeadlineAlert`` at window end + ``deadline_offset`` (default callback: log and record it).

    ``member_of``: the group whose DAG holds ``query`` (``iqp_group``). Airflow raises a DAG's
    alert while its run is unfinished, and a group's run goes on with the queries due later:
    the default callback then records a miss only if ``query``'s own result (in ``state_dir``,
    default ``[iqp] state_dir``) was not complete by its deadline."""
    if callback is None:
        extra = ({"member_of": member_of, "deadline_offset_s": deadline_offset.total_seconds(), "state_dir": state_dir}
                 if member_of else {})
        callback = AsyncCallback(log_deadline_missed, kwargs={"query": query, **extra})
    return DeadlineAlert(reference=WindowEndDeadline(), interval=deadline_offset, callback=callback, name=name)
