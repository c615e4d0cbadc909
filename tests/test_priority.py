"""EDFPriority, LLFPriority, SJFPriority and the mutation hook, on real task instances.

A task instance of a serialized DAG sits in a SQLAlchemy session over an in-memory SQLite
database that holds the XCom table, with the plan task's output in it: the weight is read as
the scheduler reads it. (tests/e2e/test_priority.py checks the same in a running Airflow.)
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pendulum
import pytest
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization
from airflow.task.priority_strategy import validate_and_load_priority_weight_strategy
from sqlalchemy import create_engine, insert
from sqlalchemy.orm import Session

from airflow_iqp.planning.policies import Policy, airflow_weight
from airflow_iqp.priority import (
    NEUTRAL_WEIGHT,
    PLAN_TASK_ID,
    STRATEGIES,
    EDFPriority,
    LLFPriority,
    SJFPriority,
    plan_entry,
    run_deadline_ts,
    task_instance_mutation_hook,
)
from airflow_iqp.timetables.window import WindowTimetable

RUN_ID = "scheduled__2024-03-01T00:00:00+00:00"
WINDOW_END = pendulum.datetime(2024, 3, 1, 6, tz="UTC").timestamp()
OFFSET = 1800
PLAN = [
    {"index": 1, "deadline_ts": WINDOW_END + OFFSET, "remaining_cost": 300.0, "cost": 100.0},
    {"index": 2, "deadline_ts": WINDOW_END + OFFSET, "remaining_cost": 200.0, "cost": 140.5},
]


def task(rule: str):
    """The batch task as the scheduler has it: from the serialized DAG, under a WindowTimetable."""
    timetable = WindowTimetable(window=timedelta(hours=6), deadline_offset=timedelta(seconds=OFFSET))
    with DAG("q", schedule=timetable, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")) as dag:
        EmptyOperator(task_id="run", weight_rule=rule)
    return DagSerialization.from_dict(DagSerialization.to_dict(dag)).get_task("run")


def instance(rule: str, map_index: int, run_id: str = RUN_ID) -> TaskInstance:
    return TaskInstance(task(rule), dag_version_id=uuid.uuid4(), run_id=run_id, map_index=map_index)


@pytest.fixture
def session():
    """A session whose database has the plan task's output for RUN_ID."""
    engine = create_engine("sqlite://")
    XComModel.__table__.create(engine)
    with Session(engine) as s:
        s.execute(insert(XComModel.__table__).values(
            dag_run_id=1, task_id=PLAN_TASK_ID, map_index=-1, key="return_value", dag_id="q", run_id=RUN_ID,
            value=json.dumps(PLAN), timestamp=pendulum.now("UTC")))
        yield s


def weight(policy: Policy, entry: dict) -> int:
    return airflow_weight(policy, deadline=entry["deadline_ts"], remaining_cost=entry["remaining_cost"],
                          batch_cost=entry["cost"])


@pytest.mark.parametrize("strategy, policy", [(EDFPriority, Policy.EDF), (LLFPriority, Policy.LLF),
                                              (SJFPriority, Policy.SJF)])
def test_a_mapped_batch_gets_its_policys_weight_from_the_plan(session, strategy, policy):
    ti = instance(f"airflow_iqp.priority.{strategy.__name__}", map_index=1)
    session.add(ti)
    assert plan_entry(ti) == PLAN[1]
    assert strategy().get_weight(ti) == weight(policy, PLAN[1])


def test_the_urgent_batch_weighs_more():
    first, second = PLAN
    assert weight(Policy.LLF, first) > weight(Policy.LLF, second)  # more work left before the same deadline
    assert weight(Policy.SJF, first) > weight(Policy.SJF, second)  # the shorter batch


def test_without_a_session_no_database_is_read(session):
    ti = instance("airflow_iqp.priority.LLFPriority", map_index=1)  # transient: run creation, or before merge
    assert plan_entry(ti) is None
    assert LLFPriority().get_weight(ti) == NEUTRAL_WEIGHT


def test_edf_without_a_plan_falls_back_to_the_runs_deadline():
    ti = instance("airflow_iqp.priority.EDFPriority", map_index=-1)  # the unexpanded task: no plan yet
    assert run_deadline_ts(ti) == WINDOW_END + OFFSET
    assert EDFPriority().get_weight(ti) == airflow_weight(Policy.EDF, deadline=WINDOW_END + OFFSET,
                                                         remaining_cost=0.0, batch_cost=0.0)


def test_the_runs_deadline_comes_from_any_generated_run_id():
    for run_id in ("manual__2024-03-01T05:59:00+00:00", "backfill__2024-03-01T00:00:00+00:00"):
        assert run_deadline_ts(instance("airflow_iqp.priority.EDFPriority", -1, run_id)) == WINDOW_END + OFFSET
    assert run_deadline_ts(instance("airflow_iqp.priority.EDFPriority", -1, "my own run")) is None


def test_a_plan_entry_without_the_keys_gives_the_neutral_weight(session):
    session.execute(insert(XComModel.__table__).values(
        dag_run_id=2, task_id=PLAN_TASK_ID, map_index=-1, key="return_value", dag_id="q", run_id="other",
        value=json.dumps([{"index": 1}]), timestamp=pendulum.now("UTC")))
    ti = instance("airflow_iqp.priority.SJFPriority", map_index=0, run_id="other")
    session.add(ti)
    assert plan_entry(ti) == {"index": 1}
    assert SJFPriority().get_weight(ti) == NEUTRAL_WEIGHT


def test_the_mutation_hook_gives_batch_1_its_weight(session):
    """Airflow renames the unexpanded instance to map index 0 and never recomputes its weight."""
    ti = instance("airflow_iqp.priority.LLFPriority", map_index=0)
    session.add(ti)
    assert ti.priority_weight == NEUTRAL_WEIGHT  # computed when there was no plan
    task_instance_mutation_hook(ti, dag_run=None)
    assert ti.priority_weight == weight(Policy.LLF, PLAN[0])


def test_the_mutation_hook_leaves_other_instances_alone(session):
    unexpanded = instance("airflow_iqp.priority.LLFPriority", map_index=-1)
    session.add(unexpanded)
    transient = instance("airflow_iqp.priority.LLFPriority", map_index=0)
    other_rule = instance("absolute", map_index=0)
    session.add(other_rule)
    for ti in (unexpanded, transient, other_rule):
        before = ti.priority_weight
        task_instance_mutation_hook(ti, dag_run=None)
        assert ti.priority_weight == before


def test_airflow_resolves_the_strategies_by_qualified_name():
    for strategy in STRATEGIES:
        loaded = validate_and_load_priority_weight_strategy(f"airflow_iqp.priority.{strategy.__name__}")
        assert type(loaded) is strategy
