"""``iqp_dag(sql=...)``: the user's SQL is split when the DAG is built, and refused there."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.operators.final import FinalOperator
from airflow_iqp.errors import ConfigError
from airflow_iqp.backends import SparkConnect, SparkSubmit
from airflow_iqp.options import Alerts, Arrival, OneBatch
from airflow_iqp.query import Query, QueryRefused

COMMON = dict(arrival=Arrival(units=10), window=timedelta(minutes=10), deadline_offset=timedelta(minutes=2),
              alerts=Alerts(deadline=False))


def test_a_sql_dag_plans_with_the_split_query_and_its_streams():
    dag = iqp_dag(name="rev", sql="SELECT country, sum(amount) AS revenue FROM events GROUP BY country",
                  streams={"events": "/data/events/{{ ds }}"}, static={"countries": "/data/c.parquet"}, **COMMON)
    assert dag.dag_id == "iqp_rev"
    plan = dag.get_task("plan")
    assert isinstance(plan.query_def, Query) and plan.query == "rev"
    assert plan.query_def.columns == ("country", "revenue") and plan.landing == "/data/events/{{ ds }}"
    assert plan.streams == ({"name": "events", "path": "/data/events/{{ ds }}", "format": "parquet",
                             "pattern": None, "schema": None, "options": {}, "unit": "file", "ready_marker": None,
                             "min_age": 0.0, "on_bad_unit": "quarantine", "partitions": None,
                            "window": None},)
    assert "```sql" in dag.doc_md


def test_a_query_that_cannot_be_split_is_refused_when_the_dag_is_built():
    with pytest.raises(QueryRefused, match="window function over the stream"):
        iqp_dag(name="w", sql="SELECT k, sum(x) OVER (PARTITION BY k) FROM events", streams={"events": "/d"}, **COMMON)


def test_a_refusal_in_a_dag_file_points_to_one_batch_not_to_the_command_line_flag():
    with pytest.raises(QueryRefused) as err:
        iqp_dag(name="p", sql="SELECT k, percentile_approx(x, 0.5) AS p FROM events GROUP BY k",
                streams={"events": "/d"}, **COMMON)
    assert str(err.value).endswith("(cut=OneBatch())") and "--allow-single-batch" not in str(err.value)


def test_one_batch_runs_a_query_that_cannot_be_split_after_the_windows_end():
    dag = iqp_dag(name="m", sql="SELECT k, median(x) AS m FROM events GROUP BY k", streams={"events": "/d"},
                  cut=OneBatch(), **COMMON)
    assert dag.get_task("plan").options["mode"] == "one_batch"


def test_declared_schemas_check_columns_at_parse_time():
    streams = {"events": {"path": "/d", "schema": "k STRING, amount DECIMAL(10,2)"}}
    iqp_dag(name="ok", sql="SELECT k, sum(amount) AS s FROM events GROUP BY k", streams=streams, **COMMON)
    with pytest.raises(QueryRefused, match="unknown column amt"):
        iqp_dag(name="bad", sql="SELECT k, sum(amt) FROM events GROUP BY k", streams=streams, **COMMON)


@pytest.mark.parametrize("kwargs, field", [
    (dict(sql="SELECT count(*) FROM events", streams={"events": "/d"}), "name"),
    (dict(name="x", sql="SELECT count(*) FROM events"), "streams"),
    (dict(name="x", sql="SELECT count(*) FROM events", streams={"events": "/d"}, query="cq2"), "sql"),
    (dict(name="../up", sql="SELECT count(*) FROM events", streams={"events": "/d"}), "name"),
    (dict(name="x", sql="SELECT count(*) FROM events", streams={"events": "/d"}, static="/dir"), "static"),
    (dict(name="j", sql="SELECT count(*) FROM a JOIN b ON a.k = b.k", streams={"a": "/d1", "b": "/d2"}), "streams"),
])
def test_bad_arguments_name_what_to_fix(kwargs, field):
    with pytest.raises(ConfigError) as err:
        iqp_dag(**kwargs, **COMMON)
    assert err.value.field == field, str(err.value)


@pytest.mark.parametrize("old, moved_to", [
    (dict(units=10), "Arrival(units=...)"),
    (dict(mode="dynamic"), "MinBatches()"),
    (dict(allow_single_batch=True), "OneBatch()"),
    (dict(fuse_tail=True), "SparkSubmit(fuse_tail=...)"),
    (dict(spark_conf={"spark.executor.memory": "1g"}), "SparkSubmit(conf=...)"),
    (dict(deadline_alert=False), "Alerts(deadline=...)"),
    (dict(landing="/d"), "streams="),
])
def test_an_old_keyword_says_which_object_it_moved_to(old, moved_to):
    with pytest.raises(ConfigError, match="moved to") as err:
        iqp_dag(name="x", sql="SELECT count(*) AS n FROM events", streams={"events": "/d"}, **old, **COMMON)
    assert err.value.field == next(iter(old)) and moved_to in str(err.value)


@pytest.mark.parametrize("kwargs, field", [
    (dict(backend="spark-connect"), "backend"),
    (dict(arrival="observed"), "arrival"),
    (dict(cut="dynamic"), "cut"),
])
def test_a_setting_given_as_a_string_names_the_object_to_give(kwargs, field):
    common = {**COMMON, **kwargs}
    with pytest.raises(ConfigError, match="from airflow_iqp.options") as err:
        iqp_dag(name="x", sql="SELECT count(*) AS n FROM events", streams={"events": "/d"}, **common)
    assert err.value.field == field


def test_a_catalogued_query_lands_where_its_streams_string_says():
    dag = iqp_dag(query="cq2", streams="/data/landing/{{ ds }}", static="/data/static", **COMMON)
    plan = dag.get_task("plan")
    assert plan.landing == "/data/landing/{{ ds }}" and plan.per_window and plan.units == 10
    assert [(s["name"], s["path"], s["unit"]) for s in plan.streams] == [
        ("orders", "/data/landing/{{ ds }}", "dir"), ("lineitem", "/data/landing/{{ ds }}", "dir")]
    with pytest.raises(ConfigError) as err:
        iqp_dag(query="cq2", static="/data/static", **COMMON)
    assert err.value.field == "streams"
    with pytest.raises(ConfigError) as err:
        iqp_dag(name="x", sql="SELECT count(*) AS n FROM events", streams="/d", **COMMON)
    assert err.value.field == "streams"


def test_the_backend_object_picks_the_operators_and_their_settings():
    dag = iqp_dag(name="c", sql="SELECT count(*) AS n FROM events", streams={"events": "/d"},
                  backend=SparkConnect(pool="spark", retries=0, fuse_tail=True, tail_slots=1), **COMMON)
    submit, final = dag.get_task("batch.submit"), dag.get_task("final")
    assert type(submit).__name__ == "BatchOperator" and submit.backend == final.backend == "spark-connect"
    assert submit.slots == 1 and submit.pool == "spark" and submit.conf == {}
    assert final.retries == 0 and dag.get_task("plan").tail_lead == SparkConnect().lead == 20.0
    assert dag.get_task("plan").options["backend"] == "spark-connect"
    dag = iqp_dag(name="s", sql="SELECT count(*) AS n FROM events", streams={"events": "/d"},
                  backend=SparkSubmit(conf={"spark.sql.shuffle.partitions": "4"}), **COMMON)
    assert dag.get_task("batch.submit").conf == dag.get_task("final").conf == {"spark.sql.shuffle.partitions": "4"}
    assert dag.get_task("batch.submit").backend == "spark-submit"
    assert "tail_wait" not in dag.task_ids and dag.get_task("plan").tail_lead == 30.0


GROUP_SQL = {"revenue": "SELECT country, sum(amount) AS revenue FROM events GROUP BY country",
             "buyers": "SELECT country, count(DISTINCT user_id) AS buyers FROM events GROUP BY country",
             "basket": "SELECT country, avg(amount) AS basket FROM events GROUP BY country"}


def test_a_group_is_one_dag_of_shared_batches_and_a_final_task_per_query():
    from airflow_iqp.dag_factory import iqp_group

    offsets = {"revenue": timedelta(minutes=2), "buyers": timedelta(minutes=3), "basket": timedelta(minutes=3)}
    dag = iqp_group(name="shop", queries=GROUP_SQL, streams={"events": "/data/events"}, window=timedelta(minutes=10),
                    deadline_offset=offsets, arrival=Arrival(units=10), backend=SparkConnect(fuse_tail=False))
    assert dag.dag_id == "iqp_shop" and dag.timetable.deadline_offset == timedelta(minutes=2)
    plan = dag.get_task("plan")
    assert plan.query == "shop" and set(plan.members) == set(GROUP_SQL)
    assert plan.deadlines == offsets
    for q in GROUP_SQL:
        final = dag.get_task(f"final_{q}")
        assert final.query == q and final.group == "shop" and final.deadline_offset == offsets[q]
        assert [a.name for a in final.outlets] == [f"iqp_{q}_result"]
        assert final.upstream_task_ids == {"plan", "batch.submit"}
    # One Deadline Alert per query, at its own offset, whose default callback checks its own result.
    alerts = {a.name: a for a in dag.deadline}
    assert set(alerts) == {f"iqp-window-deadline-{q}" for q in GROUP_SQL}
    assert alerts["iqp-window-deadline-buyers"].interval == offsets["buyers"]
    assert alerts["iqp-window-deadline-buyers"].callback.kwargs["member_of"] == "shop"


def test_a_group_with_a_fused_tail_merges_every_query_in_one_task_and_each_query_publishes_its_own():
    from airflow_iqp.dag_factory import iqp_group

    offsets = {"revenue": timedelta(minutes=2), "buyers": timedelta(minutes=3), "basket": timedelta(minutes=3)}
    dag = iqp_group(name="shop", queries=GROUP_SQL, streams={"events": "/data/events"}, window=timedelta(minutes=10),
                    deadline_offset=offsets, arrival=Arrival(units=10),
                    backend=SparkSubmit(fuse_tail=True, pool="spark"))
    tail = dag.get_task("tail")
    assert tail.query == "shop" and tail.outlets == [] and tail.pool == "spark" and not tail.merged
    assert tail.upstream_task_ids == {"plan", "batch.submit", "tail_wait"}
    assert dag.get_task("plan").fuse_tail
    for q in GROUP_SQL:
        final = dag.get_task(f"final_{q}")
        assert final.merged and final.group == "shop" and final.deadline_offset == offsets[q]
        assert final.upstream_task_ids == {"plan", "tail"}
        assert [a.name for a in final.outlets] == [f"iqp_{q}_result"]
        assert final.pool != "spark"  # it runs no Spark job: no cluster slot
    with pytest.raises(ConfigError) as err:
        FinalOperator(task_id="f", query="revenue", merged=True)
    assert err.value.field == "merged"


@pytest.mark.parametrize("kwargs, field", [
    (dict(arrival=Arrival(units=10, late="merge")), "arrival.late"),
    (dict(deadline_offset={"revenue": timedelta(minutes=2)}), "deadline_offset"),
    (dict(queries={**GROUP_SQL, "shop": "SELECT country, max(amount) AS m FROM events GROUP BY country"}),
     "queries"),
    (dict(queries={"median": "SELECT country, median(amount) AS m FROM events GROUP BY country"}), "sql"),
])
def test_a_group_refuses_what_it_cannot_do_naming_the_field(kwargs, field):
    from airflow_iqp.dag_factory import iqp_group

    args = dict(name="shop", queries=GROUP_SQL, streams={"events": "/data/events"}, window=timedelta(minutes=10),
                deadline_offset=timedelta(minutes=2), arrival=Arrival(units=10))
    with pytest.raises(ConfigError) as err:
        iqp_group(**{**args, **kwargs})
    assert err.value.field == field
