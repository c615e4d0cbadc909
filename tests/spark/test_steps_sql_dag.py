"""Queries of several aggregations, grouping sets and aggregates over aggregates, split by the
decomposer, equal DuckDB running the same SQL once over the whole window: one written
example of each kind the decomposer splits since it finds every aggregation of a query
(the README's "Your own query" shows the same kinds). For K = 1, 2, 3 and 6 batches, row
for row, with the column names and types of Spark running the query once
(``check_query`` of tests/spark/test_steps_sql_property.py).
"""

from __future__ import annotations

import pytest
from tests.spark.test_steps_sql_property import _saved, batched, check_query

from tests.support.events import EVENT_COLUMNS

from airflow_iqp.query import decompose
from airflow_iqp.query.store import Saved
from airflow_iqp.spark.steps import run_batch, run_final, write_atomic
from airflow_iqp.streams import Stream

pytestmark = pytest.mark.spark

#: kind -> a query of that kind over the events stream and the static users and categories.
#: Each ORDER BY is a total order of the result's rows.
KINDS = {
    "static table joined above": (
        "SELECT u.name, t.n FROM (SELECT user_id, count(*) n FROM events GROUP BY user_id) t "
        "JOIN users u ON u.user_id = t.user_id"),
    "scalar subqueries": (
        "SELECT (SELECT count(*) FROM events WHERE qty > 3) AS a, (SELECT avg(amount) FROM events "
        "WHERE country = 'fr') AS b, (SELECT count(DISTINCT user_id) FROM events) AS c"),
    "case over scalar subqueries": (
        "SELECT CASE WHEN (SELECT count(*) FROM events) > 100 THEN (SELECT avg(amount) FROM events) "
        "ELSE (SELECT max(qty) FROM events) END AS c"),
    "aggregated CTEs joined to each other": (
        "WITH fr AS (SELECT user_id, count(*) AS n FROM events WHERE country = 'fr' GROUP BY user_id), "
        "de AS (SELECT user_id, sum(amount) AS s, var_samp(qty) AS v FROM events WHERE country = 'de' "
        "GROUP BY user_id) "
        "SELECT coalesce(fr.user_id, de.user_id) AS user_id, fr.n, de.s, de.v FROM fr FULL JOIN de "
        "ON fr.user_id = de.user_id ORDER BY user_id ASC NULLS FIRST, fr.n ASC NULLS FIRST, de.s ASC NULLS FIRST"),
    "promotions against the total": (
        "WITH promo AS (SELECT c.cat_name, sum(amount) AS s FROM events e JOIN categories c ON e.cat_id = c.cat_id "
        "WHERE qty > 5 GROUP BY c.cat_name), total AS (SELECT sum(amount) AS t FROM events) "
        "SELECT promo.cat_name, promo.s / total.t AS share FROM promo CROSS JOIN total"),
    "aggregations of two FROM clauses and a static join above": (
        "SELECT u.name, a.n, b.top FROM (SELECT user_id, count(*) AS n FROM events GROUP BY user_id) a "
        "JOIN (SELECT e.user_id, max(c.weight) AS top FROM events e LEFT JOIN categories c ON e.cat_id = c.cat_id "
        "GROUP BY e.user_id) b ON a.user_id = b.user_id LEFT JOIN users u ON u.user_id = a.user_id"),
    "rollup with grouping() and rank over the rolled-up rows": (
        "SELECT country, qty % 3 AS q, grouping(country) AS gc, grouping(qty % 3) AS gq, sum(amount) AS s, "
        "count(*) AS n, rank() OVER (PARTITION BY grouping(country), grouping(qty % 3) ORDER BY count(*) DESC, "
        "country ASC NULLS FIRST, qty % 3 ASC NULLS FIRST) AS r FROM events GROUP BY ROLLUP (country, qty % 3)"),
    "cube with grouping_id and a distinct count": (
        "SELECT country, cat_id, grouping_id(country, cat_id) AS g, count(DISTINCT user_id) AS users, "
        "avg(qty) AS q FROM events WHERE amount IS NOT NULL GROUP BY CUBE (country, cat_id) HAVING count(*) > 1"),
    "grouping sets with the empty set": (
        "SELECT country, user_id IS NULL AS anon, min(ts) AS first, stddev_pop(amount) AS sd FROM events "
        "GROUP BY GROUPING SETS ((country), (user_id IS NULL), ())"),
    "an aggregate over an aggregate": (
        "SELECT country, avg(s) AS a, max(n) AS m, count(*) AS users FROM (SELECT country, user_id, "
        "sum(amount) AS s, count(*) AS n FROM events GROUP BY country, user_id) t GROUP BY country"),
    "running sum and average over partitions of the merged groups": (
        "SELECT country, cat_id, n, sum(n) OVER (PARTITION BY country ORDER BY cat_id ASC NULLS FIRST) AS running, "
        "avg(n) OVER (PARTITION BY country) AS mean FROM (SELECT country, cat_id, count(*) AS n FROM events "
        "GROUP BY country, cat_id) t"),
    "filter on a grouping key by another aggregation": (
        "SELECT country, sum(amount) AS s FROM events WHERE qty > 0 AND country IN (SELECT country FROM "
        "(SELECT country, rank() OVER (ORDER BY count(*) DESC, country ASC NULLS FIRST) AS r FROM events "
        "GROUP BY country) x WHERE r <= 2) GROUP BY country"),
    "a CTE read twice": (
        "WITH r AS (SELECT user_id, sum(qty) AS total FROM events GROUP BY user_id) "
        "SELECT u.name, r.total FROM users u JOIN r ON u.user_id = r.user_id WHERE r.total = (SELECT max(total) "
        "FROM r) ORDER BY u.name ASC NULLS FIRST"),
    "a share of the total in the SELECT list": (
        "SELECT country, sum(amount) / (SELECT sum(amount) FROM events) AS share FROM events GROUP BY country"),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_equals_duckdb(kind, spark, events_dir, tmp_path):
    check_query(spark, KINDS[kind], events_dir, tmp_path)


def test_several_global_aggregations_over_an_empty_window_give_their_one_row(spark, events_dir, tmp_path):
    """Each aggregation merges to the query over no rows: a COUNT of nothing is 0, a SUM NULL."""
    sql = ("SELECT (SELECT count(*) FROM events) AS n, (SELECT sum(amount) FROM events WHERE qty > 3) AS s, "
           "(SELECT count(*) FROM events e JOIN users u ON e.user_id = u.user_id) AS joined")
    query = decompose(sql, id="empty", streams=["events"], static=["users"])
    ddl = ", ".join(f"{c} {t}" for c, t in EVENT_COLUMNS.items())
    saved = Saved(query, (Stream("events", path=str(events_dir / "events"), schema=ddl),),
                  {"users": str(events_dir / "users.parquet")})
    partial = str(write_atomic(run_batch(spark, saved, []), tmp_path / "batch-0000"))
    assert [tuple(r) for r in run_final(spark, saved, [partial]).collect()] == [(0, None, 0)]


def test_a_batch_writes_one_partial_whose_rows_say_their_aggregation(spark, events_dir, tmp_path):
    sql = KINDS["aggregations of two FROM clauses and a static join above"]
    saved = _saved(decompose(sql, id="two", streams=["events"], static=["users", "categories"]), events_dir)
    from airflow_iqp.landing import list_units

    units = list_units(events_dir / "events", saved.streams)
    batched(spark, saved, units, 2, tmp_path)
    partial = spark.read.parquet(str(tmp_path / "k2" / "batch-0000"))
    assert partial.columns == ["_agg", "_0_k0", "_0_s0", "_1_k0", "_1_s0"]
    assert sorted(r[0] for r in partial.select("_agg").distinct().collect()) == [0, 1]


def test_the_window_jobs_run_a_query_of_several_aggregations_with_a_fused_tail(spark, events_dir, tmp_path):
    """The batch jobs write one partial each, the fused tail merges the last batch's unwritten
    partial with them (spark/batch.py, spark/tail.py, spark/merge.py, unchanged)."""
    import pyarrow.parquet as pq

    from tests.support.events import duckdb_events
    from tests.support.reference import assert_same_rows

    from airflow_iqp.landing import list_units
    from airflow_iqp.query.store import save_query
    from airflow_iqp.spark.batch import batch_work, execute_batch
    from airflow_iqp.spark.tail import execute_tail
    from airflow_iqp.spark.window import split_consecutive
    from airflow_iqp.store import open_store
    from airflow_iqp.streams import files_of

    sql = KINDS["aggregations of two FROM clauses and a static join above"]
    saved = _saved(decompose(sql, id="dag", streams=["events"], static=["users", "categories"]), events_dir)
    save_query(tmp_path, saved)
    ws = open_store(tmp_path).window("dag", "w0")
    chunks = split_consecutive(list_units(events_dir / "events", saved.streams), 3)
    for b, chunk in enumerate(chunks):
        ws.claim(b, [u.name for u in chunk], files_of(chunk, saved.streams))
        if b < len(chunks) - 1:
            execute_batch(spark, batch_work(ws, b), backend="test", history=False)
    manifest = execute_tail(spark, ws, len(chunks) - 1, None, backend="test", history=False)
    assert manifest["batches"] == [0, 1, 2] and not ws.has_partial(2)
    got = [tuple(r.values()) for r in pq.read_table(ws.result_uri).to_pylist()]
    assert_same_rows(got, duckdb_events(sql, events_dir)[1], ordered=False, label="fused tail")
