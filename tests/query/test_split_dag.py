"""A query as a DAG of aggregations, without Spark: each kind the decomposer splits, what each
step holds, and what is shared. The results are checked against DuckDB in
tests/spark/test_steps_sql_dag.py."""

from __future__ import annotations

import pytest

from airflow_iqp.query import Query, decompose
from airflow_iqp.query.split import step_types


def split(sql: str, **kw) -> Query:
    return decompose(sql, id="t", **{"streams": ["events", "clicks"], "static": ["users", "pages"], **kw})


def test_a_static_table_joined_above_the_aggregation_is_one_aggregation_and_a_final_join():
    q = split("SELECT u.name, t.n FROM (SELECT user_id, count(*) n FROM events GROUP BY user_id) t "
              "JOIN users u ON u.id = t.user_id")
    assert q.aggregations == () and isinstance(q.merge_sql, str) and q.final_static == ("users",)
    assert "{users}" in q.finish_sql and "{merged}" in q.finish_sql


def test_scalar_subqueries_are_aggregations_of_their_own_sharing_one_scan():
    q = split("SELECT (SELECT count(*) FROM events WHERE x > 1) AS a, (SELECT avg(v) FROM events WHERE k = 'y') AS b")
    assert len(q.merges) == 2 and [a.scan for a in q.aggregations] == [0, 0]
    assert q.aggregations[0].partial_sql == "SELECT COUNT(*) AS _0_s0 FROM {events} AS events WHERE x > 1"
    assert q.partial_sql.count("FROM {events}") == 1
    assert "LATERAL VIEW EXPLODE(ARRAY(0, 1)) _iqp AS _agg" in q.partial_sql
    assert "WHERE (_agg = 0 AND x > 1) OR (_agg = 1 AND k = 'y')" in q.partial_sql
    assert "COUNT(*) FILTER(WHERE _agg = 0) AS _0_s0" in q.partial_sql
    assert q.merges[1].endswith("FROM {partials} WHERE _agg = 1")
    assert q.finish_sql == ("SELECT (SELECT _a0 AS `count(1)` FROM {merged0}) AS a, "
                            "(SELECT _a0 AS `avg(v)` FROM {merged1}) AS b")
    assert q.columns == ("a", "b") and Query.from_dict(q.to_dict()) == q


def test_a_case_over_scalar_subqueries_runs_in_the_final_step():
    q = split("SELECT CASE WHEN (SELECT count(*) FROM events) > 10 THEN (SELECT avg(v) FROM events) END AS c")
    assert q.finish_sql.startswith("SELECT CASE WHEN (SELECT _a0 AS `count(1)` FROM {merged0}) > 10 THEN")


def test_aggregated_ctes_joined_to_each_other_each_merge_then_join():
    q = split("WITH this AS (SELECT k, count(*) n FROM events WHERE w = 2 GROUP BY k), "
              "last AS (SELECT k, count(*) n FROM events WHERE w = 1 GROUP BY k) "
              "SELECT this.k, this.n - coalesce(last.n, 0) AS growth FROM this LEFT JOIN last ON this.k = last.k")
    assert "IF(_agg = 0, k, NULL) AS _0_k0" in q.partial_sql and "GROUP BY _agg, IF(_agg = 0, k, NULL), " \
                                                                  "IF(_agg = 1, k, NULL)" in q.partial_sql
    assert q.finish_sql == ("SELECT this.k, this.n - COALESCE(last.n, 0) AS growth FROM (SELECT _k0 AS `k`, _a0 AS `n` "
                            "FROM {merged0}) AS this LEFT JOIN (SELECT _k0 AS `k`, _a0 AS `n` FROM {merged1}) AS last "
                            "ON this.k = last.k")


def test_aggregations_of_other_from_clauses_are_branches_of_one_union_all():
    q = split("SELECT a.k, a.s, c.n FROM (SELECT k, sum(x) s FROM events GROUP BY k) a "
              "JOIN (SELECT k, count(*) n FROM clicks GROUP BY k) c ON a.k = c.k")
    assert [a.scan for a in q.aggregations] == [0, 1] and [a.streams for a in q.aggregations] == [("events",),
                                                                                                  ("clicks",)]
    assert q.partial_sql == ("SELECT 0 AS _agg, k AS _0_k0, SUM(x) AS _0_s0, NULL AS _1_k0, NULL AS _1_s0 FROM "
                             "{events} AS events GROUP BY k UNION ALL SELECT 1 AS _agg, NULL AS _0_k0, NULL AS _0_s0, "
                             "k AS _1_k0, COUNT(*) AS _1_s0 FROM {clicks} AS clicks GROUP BY k")


def test_a_cte_read_twice_is_one_aggregation():
    q = split("WITH r AS (SELECT k, sum(x) AS total FROM events GROUP BY k) "
              "SELECT p.name, r.total FROM pages p JOIN r ON p.k = r.k WHERE r.total = (SELECT max(total) FROM r)")
    assert q.aggregations == () and q.finish_sql.count("{merged}") == 2
    assert "(SELECT MAX(total) FROM (SELECT _k0 AS `k`, _a0 AS `total` FROM {merged}) AS r)" in q.finish_sql


def test_rollup_keeps_each_keys_grouping_bit_and_the_merge_groups_by_them():
    q = split("SELECT k, c, grouping(c) AS gc, grouping_id() AS g, sum(x) AS s, "
              "rank() OVER (PARTITION BY grouping(c) ORDER BY sum(x) DESC) AS r FROM events GROUP BY ROLLUP (k, c)")
    assert q.partial_sql == ("SELECT k AS _k0, c AS _k1, GROUPING(k) AS _g0, GROUPING(c) AS _g1, SUM(x) AS _s0 FROM "
                             "{events} AS events GROUP BY GROUPING SETS ((k, c), (k), ())")
    assert q.merge_sql.endswith("FROM {partials} GROUP BY _k0, _k1, _g0, _g1")
    assert ("_g1 AS `gc`, (CAST(_g0 AS BIGINT) * 2 + CAST(_g1 AS BIGINT)) AS `g`" in q.finish_sql
            and "RANK() OVER (PARTITION BY _g1 ORDER BY _a0 DESC) AS `r`" in q.finish_sql)
    schemas = {"events": {"k": "string", "c": "string", "x": "int"}}
    _, types = step_types(split(q.sql, schemas=schemas), schemas)
    assert types == {"k": "string", "c": "string", "gc": "tinyint", "g": "bigint", "s": "bigint", "r": "int"}


@pytest.mark.parametrize("group, sets", [
    ("CUBE (k, c)", "((k, c, u), (c, u), (k, u), (u))"),
    ("GROUPING SETS ((k), (c), ())", "((k, u), (c, u), (u))"),
    ("k, c WITH ROLLUP", "((k, c, u), (k, u), (u))"),
    ("c, ROLLUP (k)", "((c, k, u), (c, u))"),
])
def test_cube_grouping_sets_and_mixed_groupings_are_listed_as_sets_with_distinct_arguments_in_each(group, sets):
    q = split(f"SELECT k, c, count(DISTINCT u) AS n FROM events GROUP BY {group}")
    assert q.partial_sql.endswith(f"GROUP BY GROUPING SETS {sets}")
    assert q.merge_sql.endswith("GROUP BY _k0, _k1, _g0, _g1")


def test_an_aggregate_over_an_aggregate_runs_over_the_merged_rows():
    q = split("SELECT store, avg(s) AS a FROM (SELECT store, item, sum(x) AS s FROM events GROUP BY store, item) t "
              "GROUP BY store")
    assert q.partial_sql == ("SELECT store AS _k0, item AS _k1, SUM(x) AS _s0 FROM {events} AS events "
                             "GROUP BY store, item")
    assert q.finish_sql == ("SELECT store, AVG(s) AS a FROM (SELECT _k0 AS `store`, _k1 AS `item`, _a0 AS `s` "
                            "FROM {merged}) AS t GROUP BY store")


def test_a_filter_on_a_grouping_key_by_another_aggregation_runs_after_the_merge():
    q = split("SELECT state, sum(x) AS s FROM events WHERE x > 0 AND state IN (SELECT state FROM (SELECT state, "
              "rank() OVER (ORDER BY count(*) DESC) AS r FROM events GROUP BY state) WHERE r <= 3) GROUP BY state")
    assert q.aggregations[0].partial_sql == ("SELECT state AS _0_k0, SUM(x) AS _0_s0 FROM {events} AS events "
                                             "WHERE x > 0 GROUP BY state")
    assert q.finish_sql == ("SELECT _k0 AS `state`, _a0 AS `s` FROM {merged0} WHERE _k0 IN (SELECT state FROM "
                            "(SELECT _k0 AS `state`, RANK() OVER (ORDER BY _a0 DESC) AS `r` FROM {merged1}) "
                            "WHERE r <= 3)")


def test_a_subquery_over_another_aggregation_in_the_select_list_runs_in_the_final_step():
    q = split("SELECT k, sum(x) / (SELECT sum(x) FROM events) AS share FROM events GROUP BY k")
    assert q.finish_sql == ("SELECT _k0 AS `k`, _a0 / (SELECT _a0 AS `sum(x)` FROM {merged1}) AS `share` "
                            "FROM {merged0}")


def test_a_saved_query_of_several_aggregations_round_trips_through_json():
    q = split("SELECT (SELECT count(*) FROM events) AS a, (SELECT count(*) FROM clicks) AS b")
    d = q.to_dict()
    assert isinstance(d["merge_sql"], list) and d["aggregations"][1]["streams"] == ["clicks"]
    assert Query.from_dict(d) == q and q.merged_names == ("merged0", "merged1")


def test_explain_shows_each_aggregation_the_scans_they_share_and_the_final_step(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_iqp.cli.main import main

    (tmp_path / "events").mkdir()
    pq.write_table(pa.table({"k": ["a", "b"], "x": [1, 2]}), tmp_path / "events" / "0.parquet")
    pq.write_table(pa.table({"k": ["a"], "w": [1.5]}), tmp_path / "users.parquet")
    sql = ("WITH a AS (SELECT k, count(*) AS n FROM events GROUP BY k), b AS (SELECT e.k, sum(x) AS s FROM events e "
           "JOIN users u ON e.k = u.k GROUP BY e.k) SELECT a.k, a.n, b.s, (SELECT max(x) FROM events) AS top "
           "FROM a LEFT JOIN b ON a.k = b.k")
    code = main(["explain", "--sql", sql, "--stream", f"events={tmp_path / 'events'}",
                 "--static", f"users={tmp_path / 'users.parquet'}"])
    out = capsys.readouterr().out
    assert code == 0
    assert "3 aggregations, each batch's in one job; scans of the batch's rows:" in out
    assert "  aggregations 0, 1 share one scan of events\n  aggregation 2 reads events in a scan of its own" in out
    assert "aggregation 2, over events:\n  per batch: SELECT e.k AS _2_k0, SUM(x) AS _2_s0 FROM {events} AS e" in out
    assert "  partial columns: _2_k0 string, _2_s0 bigint\n  merge into {merged2}: " in out
    assert "final, result (over {merged0}, {merged1} and {merged2}):" in out
    assert "columns: k string, n bigint, s bigint, top bigint" in out
