"""BatchPlanOperator against a real state store and landing directory."""

from __future__ import annotations

import datetime as dt
import json
import time

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_iqp.errors import ConfigError
from airflow_iqp.operators.plan import BatchPlanOperator
from airflow_iqp.backends import SparkConnect, SparkSubmit
from airflow_iqp.options import Algorithm1, Arrival, MinBatches
from airflow_iqp.query.store import load_query
from airflow_iqp.store import WindowState, open_store
from airflow_iqp.timetables.window import WindowTimetable
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import clock, window_id
from tests.support.batches import TPCH_STREAMS
from tests.support.tasks import START, TI, context

WINDOW = dt.timedelta(minutes=4)
COSTS = dict(cost_hint={"kind": "linear", "per_unit": 0.6, "per_batch": 25},
             final_agg_hint={"kind": "linear", "base": 25, "per_batch": 0.5})


def planner(tmp_path, **kwargs) -> BatchPlanOperator:
    kwargs.setdefault("deadline_offset", dt.timedelta(seconds=100))
    kwargs.setdefault("arrival", Arrival(units=240, rate=1.0))
    kwargs.setdefault("cut", Algorithm1(**COSTS))
    return BatchPlanOperator(task_id="plan", query="cq2", landing=str(tmp_path / "landing"),
                             streams=TPCH_STREAMS, per_window=True, state_dir=str(tmp_path / "state"), **kwargs)


def window_state(tmp_path, start=START) -> WindowState:
    return open_store(tmp_path / "state").window("cq2", window_id(start.timestamp()))


def test_the_plan_is_stored_pushed_and_returned_as_one_entry_per_batch(tmp_path):
    ti = TI("plan")
    entries = planner(tmp_path).execute(context(ti, end=START + WINDOW))
    ws = window_state(tmp_path)
    batches = [Batch.from_dict(e) for e in entries]
    assert len(batches) >= 2 and batches[-1].last and batches[-1].cumulative == 240
    assert all(b.state_dir == str(tmp_path / "state") and b.window_id == ws.window_id for b in batches)
    assert batches[-1].deadline_ts == (START + WINDOW).timestamp() + 100
    stored = ws.doc("plan")
    assert stored["batches"] == entries == ti.xcom["plan"]["batches"]
    assert ti.xcom["late"] == {}  # nothing to merge: late data is only recorded by default
    assert "tail" not in ti.xcom
    # What the jobs run is saved beside the plan, and the task's CPU is recorded.
    assert load_query("cq2", str(tmp_path / "state")).query.id == "cq2"
    assert [(r["task_id"], r["map_index"], r["try_number"], r["phase"]) for r in ws.records("cpu")] == [
        ("plan", -1, 1, "run")]


def test_a_fused_tail_is_not_mapped_and_starts_the_backend_s_lead_before_the_end(tmp_path):
    for backend, lead in ((SparkSubmit(fuse_tail=True), 30.0), (SparkConnect(fuse_tail=True, tail_lead=3), 3.0)):
        ti = TI("plan")
        entries = planner(tmp_path, backend=backend).execute(context(ti, end=START + WINDOW))
        tail = Batch.from_dict(ti.xcom["tail"])
        assert tail.last and tail.start_ts == tail.ready_ts - lead
        assert [Batch.from_dict(e).index for e in entries] + [b.index for b in tail.before] + [tail.index] == list(
            range(1, tail.of + 1))


def test_a_fused_tail_starts_ahead_by_its_tails_start_ups_before_unless_its_lead_is_given(tmp_path):
    from airflow_iqp.window.readiness import record_start

    connect = SparkConnect(fuse_tail=True)
    late = pendulum.now("UTC").subtract(hours=2).replace(microsecond=0)  # windows whose tails start late

    def plan(start, backend=connect) -> Batch:
        ti = TI("plan")
        planner(tmp_path, backend=backend).execute(context(ti, start=start, end=start + WINDOW))
        return Batch.from_dict(ti.xcom["tail"])

    tail = plan(late)
    assert tail.start_ts == tail.ready_ts - connect.lead  # no tail has started yet: the backend's lead
    # Planned now, long after its tail's planned start: the start-up counts from the plan.
    assert record_start(window_state(tmp_path, late), tail, "spark-connect")["seconds"] < 5.0
    # Planned as the window opened, as the plan task is: from the tail's planned start.
    tail = plan(late + WINDOW)
    ws = window_state(tmp_path, late + WINDOW)
    ws.write_doc("plan", {**ws.doc("plan"), "planned_at": (late + WINDOW).timestamp()})
    first = record_start(ws, tail, "spark-connect")
    assert first["seconds"] == pytest.approx(time.time() - tail.start_ts, abs=5.0)
    assert record_start(ws, tail, "spark-connect") is None  # a retry's start-up is not its own
    following = late + 2 * WINDOW
    for backend, lead in ((connect, 1.5 * first["seconds"]), (SparkConnect(fuse_tail=True, tail_lead=3), 3.0),
                          (SparkSubmit(fuse_tail=True), SparkSubmit().lead)):  # another backend's tails are not its
        tail = plan(following, backend)
        assert tail.start_ts == pytest.approx(tail.ready_ts - lead)


def test_a_deadline_that_cannot_be_met_is_reported_and_the_best_plan_still_runs(tmp_path):
    entries = planner(tmp_path, deadline_offset=dt.timedelta(seconds=1)).execute(context(end=START + WINDOW))
    assert entries
    risk = window_state(tmp_path).doc("deadline_risk")
    assert risk["query"] == "cq2" and risk["window"] == window_state(tmp_path).window_id


def test_the_deadline_comes_from_the_window_timetable_without_deadline_offset(tmp_path):
    with DAG("t", schedule=WindowTimetable(window=WINDOW, deadline_offset=dt.timedelta(seconds=90)),
             start_date=START) as dag:
        op = planner(tmp_path, deadline_offset=None)
    entries = op.execute(context(end=START + WINDOW, dag=dag))
    assert Batch.from_dict(entries[0]).deadline_ts == (START + WINDOW).timestamp() + 90
    with pytest.raises(ConfigError) as err:
        planner(tmp_path, deadline_offset=None).execute(context(end=START + WINDOW, dag=DAG("u", schedule=None)))
    assert err.value.field == "deadline_offset"


def test_late_merge_hands_this_run_the_earlier_window_s_late_batch(tmp_path):
    merge = Arrival(units=240, rate=1.0, late="merge", lateness=30)
    planner(tmp_path, arrival=merge).execute(context(end=START + WINDOW))
    ti = TI("plan")
    planner(tmp_path, arrival=merge).execute(context(ti, start=START + WINDOW, end=START + 2 * WINDOW))
    late = Batch.from_dict(ti.xcom["late"])
    assert late.late and late.window_id == window_state(tmp_path).window_id
    assert late.window_start_ts == START.timestamp() and late.lateness == 30


def test_bad_settings_and_a_run_without_a_window_name_what_to_fix(tmp_path):
    with pytest.raises(ConfigError) as err:
        planner(tmp_path, arrival="observed")
    assert err.value.field == "arrival"
    with pytest.raises(ConfigError) as err:
        planner(tmp_path, backend="spark-submit")
    assert err.value.field == "backend"
    with pytest.raises(ConfigError) as err:
        planner(tmp_path).execute(context(start=START, end=START))
    assert err.value.field == "data_interval"


def test_a_plain_landing_path_binds_the_window_to_the_streams_and_a_templated_one_does_not(tmp_path):
    from airflow_iqp.streams import Stream

    flat = Stream("events", path=str(tmp_path / "landing"), format="csv")
    for landing, bound in ((str(tmp_path / "landing"), True), (str(tmp_path) + "/{{ ts_nodash }}", False)):
        ti = TI("plan")
        op = BatchPlanOperator(task_id="plan", query="cq2", landing=landing, state_dir=str(tmp_path / "state"),
                               streams=[flat.to_dict()], deadline_offset=dt.timedelta(seconds=100),
                               arrival=Arrival(units=10, rate=1.0), cut=Algorithm1(**COSTS))
        op.landing = str(tmp_path / "landing")  # as Airflow renders it
        entries = op.execute(context(ti, end=START + WINDOW))
        windows = {tuple(s["window"]) if s["window"] else None for e in entries for s in e["streams"]}
        assert windows == ({(START.timestamp(), (START + WINDOW).timestamp())} if bound else {None})


@pytest.mark.parametrize("settings", [
    dict(),  # the built-in default costs, margin and the merge after one batch
    dict(cut=Algorithm1(margin=30, cost_hint={"kind": "linear", "per_unit": 0.3, "per_batch": 8}),
         backend=SparkSubmit(dispatch=4)),
    dict(cut=MinBatches(**COSTS), arrival=Arrival(units=240, rate=1.0, grace=5)),
    dict(backend=SparkConnect(fuse_tail=True, dispatch=2)),
], ids=["defaults", "margin-and-dispatch", "minbatches", "fused-tail"])
def test_airflow_iqp_plan_gives_the_plan_task_s_plan_of_the_same_window(tmp_path, capsys, settings):
    from airflow_iqp.cli.main import main

    planner(tmp_path, **settings).execute(context(TI("plan"), end=START + WINDOW))
    capsys.readouterr()  # the task's own log lines
    ws = window_state(tmp_path)
    stored = ws.doc("plan")
    assert main(["plan", "--window", ws.location, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [b["units"] for b in again["batches"]] == [b["units"] for b in stored["plan"]["batches"]]
    assert [b["latest_start"] for b in again["batches"]] == [b["latest_start"] for b in stored["plan"]["batches"]]
    assert again["final_agg_cost"] == stored["plan"]["final_agg_cost"] > 0
    # On the clock, as the plan task logged it, with where its costs came from.
    assert main(["plan", "--window", ws.location]) == 0
    table = capsys.readouterr().out
    assert stored["models"] in table
    # A fused tail's task pays its start-up (here Connect's dispatch, 2 s) in its lead: the
    # plan's latest start for the last batch is that much before the task's latest claim.
    startup = 2.0 if getattr(settings.get("backend"), "fuse_tail", False) else 0.0
    assert all(f" {clock(b['latest_start_ts'] - (startup if b['last'] else 0.0))} " in table
               for b in stored["batches"] if not b.get("spare"))


def test_a_spec_planned_like_the_dag_needs_its_margin_and_merge(tmp_path, capsys):
    """The same models without the plan task's margin and merge after one batch plan fewer batches."""
    from airflow_iqp.cli.main import main

    planner(tmp_path, cut=Algorithm1()).execute(context(TI("plan"), end=START + WINDOW))
    capsys.readouterr()
    stored = window_state(tmp_path).doc("plan")
    spec = stored["spec"]
    assert spec["margin"] == 10 and spec["final_agg"]["merge_single"]
    bare = {**spec, "margin": 0, "final_agg": {**spec["final_agg"], "merge_single": False}}
    (tmp_path / "spec.json").write_text(json.dumps(bare))
    assert main(["plan", "--spec", str(tmp_path / "spec.json"), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["batches"]) < len(stored["batches"])


def test_a_catalogued_querys_tpch_landing_is_the_directory_given_even_untemplated(tmp_path):
    entries = planner(tmp_path).execute(context(TI("plan"), end=START + WINDOW))
    # No window bound: every unit there is the window's.
    assert {s["name"]: s["window"] for e in entries for s in e["streams"]} == {"orders": None, "lineitem": None}
