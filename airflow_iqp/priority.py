"""Priority-weight strategies for the per-batch mapped tasks: EDF, LLF and SJF.

Use them on the mapped batch task by qualified class name (the string form that
Airflow 3.3 resolves through plugin-registered strategies)::

    run_batch.partial(weight_rule="airflow_iqp.priority.LLFPriority").expand(...)

or pass an instance (``weight_rule=LLFPriority()``); both serialize to the qualified name.
Short names are not supported by Airflow: only "absolute"/"downstream"/"upstream" are.

How the weight is found. Airflow calls ``get_weight(ti)`` in the scheduler (which has
metadata-DB access) when it creates a task instance, and stores the result in
``task_instance.priority_weight`` (32-bit). For a mapped task that happens

* when the run is created, for the single unexpanded TI (``map_index=-1``; the
  TaskInstance is transient and the plan does not exist yet), and
* when the upstream ``plan`` task has finished and the scheduler expands the task: for
  map indexes >= 1 via ``TaskInstance.refresh_from_task`` on a TI attached to the
  scheduler's session. **Map index 0 is the old unexpanded TI renamed in place**
  (``airflow.models.taskmap.TaskMap.expand_mapped_task``): Airflow does not recompute its
  weight, it only calls the ``task_instance_mutation_hook`` cluster policy on it. The
  :func:`task_instance_mutation_hook` below, registered as an ``airflow.policy`` entry
  point or from ``airflow_local_settings.py``, recomputes it.

The per-batch key comes from the plan: the ``return_value`` XCom of the upstream task
``plan`` (``PLAN_TASK_ID``), a list of dicts, one per batch, with ``index`` (1-based,
``map_index + 1``), ``deadline_ts`` (epoch s), ``remaining_cost`` (s, this batch to the
end incl. final aggregation) and ``cost`` (s). It is read in the scheduler's own session,
the one the TI is attached to (so it sees the same transaction); a transient TI gets no
DB read at all (opening a session there would commit the scheduler's). Without a
plan entry EDF falls back to the run's deadline (``data_interval_end`` plus the
``WindowTimetable``'s ``deadline_offset``); otherwise the weight is ``NEUTRAL_WEIGHT``.

The keys and their mapping to 32-bit weights are layer 1's
:func:`airflow_iqp.planning.policies.airflow_weight`, the same policy definitions the
simulator orders batches by.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from airflow.policies import hookimpl
from airflow.task.priority_strategy import PriorityWeightStrategy

from airflow_iqp.planning.policies import Policy, airflow_weight

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

log = logging.getLogger(__name__)

PLAN_TASK_ID = "plan"
NEUTRAL_WEIGHT = 1


def _session_of(ti: Any):
    from sqlalchemy.orm import object_session

    try:
        return object_session(ti)
    except Exception:  # noqa: BLE001 - unmapped/transient objects
        return None


def _read_plan(ti: Any, session) -> list[dict] | None:
    from sqlalchemy import select

    from airflow.models.xcom import XComModel

    query = select(XComModel.value).where(
        XComModel.dag_id == ti.dag_id,
        XComModel.run_id == ti.run_id,
        XComModel.task_id == PLAN_TASK_ID,
        XComModel.key == "return_value",
        XComModel.map_index == -1,
    )
    # no_autoflush: the scheduler may be half-way through initialising this very TI.
    with session.no_autoflush:
        row = session.execute(query).first()
    if row is None:
        return None
    value = XComModel.deserialize_value(row)
    return value if isinstance(value, list) else None


def plan_entry(ti: Any) -> dict | None:
    """The plan's entry for ``ti.map_index`` (``index == map_index + 1``), or None."""
    if ti.map_index is None or ti.map_index < 0 or not ti.run_id:
        return None
    session = _session_of(ti)
    if session is None:
        # A transient TI (run creation, or a new mapped TI before session.merge): never open a
        # session here. airflow.utils.session.create_session() hands out the scheduler's own
        # scoped session and commits it, which the scheduler forbids ("UNEXPECTED COMMIT -
        # THIS WILL BREAK HA LOCKS!") and which crashes the scheduler.
        return None
    try:
        plan = _read_plan(ti, session)
    except Exception:  # noqa: BLE001 - a weight must never break scheduling
        log.exception("could not read the plan of %s/%s", ti.dag_id, ti.run_id)
        return None
    if not plan:
        return None
    wanted = ti.map_index + 1
    for entry in plan:
        if isinstance(entry, dict) and entry.get("index") == wanted:
            return entry
    return None


def run_deadline_ts(ti: Any) -> float | None:
    """The run's deadline under a WindowTimetable: its window's end plus the deadline offset.

    Read from the run id first (``scheduled__<logical date>``, likewise for backfill and
    manual runs), which needs no database: Airflow computes an unmapped task's weight
    when the run is created, before the task instance has a session. Otherwise from the
    run's data interval, in the task instance's own session.
    """
    timetable = getattr(getattr(ti.task, "dag", None), "timetable", None)
    offset, window = getattr(timetable, "deadline_offset", None), getattr(timetable, "window", None)
    if offset is None or window is None:
        return None
    logical = _logical_date_of(ti.run_id)
    if logical is not None:
        return (timetable.window_start_at_or_before(logical) + window + offset).timestamp()
    session = _session_of(ti)
    if session is None:
        return None
    try:
        from airflow.models.dagrun import DagRun
        from sqlalchemy import select

        with session.no_autoflush:
            end = session.scalar(
                select(DagRun.data_interval_end).where(DagRun.dag_id == ti.dag_id, DagRun.run_id == ti.run_id)
            )
        return None if end is None else (end + offset).timestamp()
    except Exception:  # noqa: BLE001
        log.exception("could not read the run deadline of %s/%s", ti.dag_id, ti.run_id)
        return None


def _logical_date_of(run_id: str | None):
    """The logical date in Airflow's generated run ids (``<type>__<ISO date>``), or None."""
    from datetime import datetime

    if not run_id or "__" not in run_id:
        return None
    try:
        moment = datetime.fromisoformat(run_id.split("__", 1)[1])
    except ValueError:
        return None
    return moment if moment.tzinfo else None


class _PlanKeyPriority(PriorityWeightStrategy):
    """A weight from the batch's plan entry under one of layer 1's policies."""

    policy: Policy

    def get_weight(self, ti: TaskInstance) -> int:
        entry = plan_entry(ti)
        try:
            if entry is not None:
                return airflow_weight(self.policy, deadline=float(entry["deadline_ts"]),
                                      remaining_cost=float(entry["remaining_cost"]), batch_cost=float(entry["cost"]))
        except (KeyError, TypeError, ValueError):
            log.warning("plan entry %r of %s lacks the keys for %s", entry, ti.run_id, type(self).__name__)
        if self.policy is Policy.EDF:  # EDF needs only the run's deadline
            deadline = run_deadline_ts(ti)
            if deadline is not None:
                return airflow_weight(self.policy, deadline=deadline, remaining_cost=0.0, batch_cost=0.0)
        return NEUTRAL_WEIGHT


class EDFPriority(_PlanKeyPriority):
    """Earliest deadline first: the query's deadline."""

    policy = Policy.EDF


class LLFPriority(_PlanKeyPriority):
    """Least laxity first: deadline minus the planned work from this batch on (see policies)."""

    policy = Policy.LLF


class SJFPriority(_PlanKeyPriority):
    """Shortest job first: this batch's planned seconds."""

    policy = Policy.SJF


STRATEGIES: tuple[type[PriorityWeightStrategy], ...] = (EDFPriority, LLFPriority, SJFPriority)


@hookimpl
def task_instance_mutation_hook(task_instance: Any, dag_run: Any) -> None:
    """Cluster policy: recompute IQP weights when Airflow mutates a TI without doing so.

    Airflow renames the unexpanded TI to map index 0 and only calls this hook on it, so
    without the hook batch 1 keeps the weight computed before the plan existed. Register
    with an ``airflow.policy`` entry point pointing at this module, or import it in
    ``airflow_local_settings.py``.
    """
    task = getattr(task_instance, "task", None)
    if task is None or task_instance.map_index is None or task_instance.map_index < 0:
        return
    if _session_of(task_instance) is None:
        return  # a new mapped TI before session.merge: refresh_from_task computes its weight next
    try:
        rule = task.weight_rule
    except Exception:  # noqa: BLE001
        return
    if isinstance(rule, _PlanKeyPriority):
        task_instance.priority_weight = rule.get_weight(task_instance)
