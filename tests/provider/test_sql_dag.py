"""``iqp_dag(sql=...)``: the user's SQL is split when the DAG is built, and refused there."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_iqp.dag_factory import iqp_dag
from airflow_iqp.errors import ConfigError
from airflow_iqp.query import Query, QueryRefused

COMMON = dict(units=10, window=timedelta(minutes=10), deadline_offset=timedelta(minutes=2), deadline_alert=False)


def test_a_sql_dag_plans_with_the_split_query_and_its_streams():
    dag = iqp_dag(name="rev", sql="SELECT country, sum(amount) AS revenue FROM events GROUP BY country",
                  streams={"events": "/data/events/{{ ds }}"}, static={"countries": "/data/c.parquet"}, **COMMON)
    assert dag.dag_id == "iqp_rev"
    plan = dag.get_task("plan")
    assert isinstance(plan.query_def, Query) and plan.query == "rev"
    assert plan.query_def.columns == ("country", "revenue") and plan.landing == "/data/events/{{ ds }}"
    assert plan.streams == ({"name": "events", "path": "/data/events/{{ ds }}", "format": "parquet",
                             "pattern": None, "schema": None, "options": {}, "unit": "file", "ready_marker": None,
                             "min_age": 0.0, "on_bad_unit": "fail"},)
    assert "```sql" in dag.doc_md


def test_a_query_that_cannot_be_split_is_refused_when_the_dag_is_built():
    with pytest.raises(QueryRefused, match="window function over the stream"):
        iqp_dag(name="w", sql="SELECT k, sum(x) OVER (PARTITION BY k) FROM events", streams={"events": "/d"}, **COMMON)


def test_allow_single_batch_plans_one_batch_after_the_windows_end():
    dag = iqp_dag(name="m", sql="SELECT k, median(x) AS m FROM events GROUP BY k", streams={"events": "/d"},
                  allow_single_batch=True, **COMMON)
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
