"""The SQL decomposer without Spark: what each step holds, what is refused and how, and
``airflow-iqp explain``. The results of split queries are checked against DuckDB in
tests/spark/test_steps_sql_property.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.query import Query, QueryRefused, decompose
from airflow_iqp.query.catalogue import get_query, list_queries
from airflow_iqp.query.model import resolve_types

ROOT = Path(__file__).resolve().parents[2]


def split(sql: str, **kw) -> Query:
    return decompose(sql, id="t", **{"streams": ["events"], "static": ["dim"], **kw})


def test_avg_travels_as_sum_and_count_and_is_divided_at_the_end():
    q = split("SELECT country, avg(amount) AS a FROM events GROUP BY country")
    assert "SUM(amount) AS _s0" in q.partial_sql and "COUNT(amount) AS _s1" in q.partial_sql
    assert "TRY_DIVIDE(SUM(_s0), SUM(_s1))" in q.merge_sql
    assert q.columns == ("country", "a")


def test_where_joins_and_grouping_run_per_batch_having_order_limit_at_the_end():
    q = split("SELECT d.name, sum(e.x) AS s FROM events e JOIN dim d ON e.k = d.k WHERE e.x > 0 "
              "GROUP BY d.name HAVING count(*) > 3 ORDER BY s DESC LIMIT 5")
    assert "FROM {events} AS e JOIN {dim} AS d ON e.k = d.k WHERE e.x > 0 GROUP BY d.name" in q.partial_sql
    for above in ("HAVING", "ORDER BY", "LIMIT"):
        assert above not in q.partial_sql
    assert q.finish_sql.endswith("FROM {merged} WHERE _a1 > 3 ORDER BY s DESC LIMIT 5")
    assert q.ordered and q.streams == ("events",) and q.static == ("dim",)


def test_distinct_arguments_become_partial_grouping_columns():
    q = split("SELECT k, count(DISTINCT u) AS du, count(DISTINCT u) FILTER (WHERE x > 1) AS dx FROM events GROUP BY k")
    assert "u AS _d0" in q.partial_sql and "IF(x > 1, u, NULL) AS _d1" in q.partial_sql
    assert "GROUP BY k, u, IF(x > 1, u, NULL)" in q.partial_sql
    assert "COUNT(DISTINCT _d0)" in q.merge_sql and "GROUP BY _k0" in q.merge_sql


def test_identical_states_are_computed_once():
    q = split("SELECT stddev_samp(x) AS a, var_pop(x) AS b, var_samp(x) AS c, sum(x) AS s, sum(x) AS s2 FROM events")
    assert q.partial_sql.count("VAR_POP(") == 1 and q.partial_sql.count("SUM(x)") == 1


def test_variance_merges_count_mean_and_m2_not_sums_of_squares():
    q = split("SELECT var_samp(x) AS v FROM events")
    assert "VAR_POP(CAST(x AS DOUBLE)) * COUNT(CAST(x AS DOUBLE))" in q.partial_sql
    assert "OVER ()" in q.merge_sql and "x * x" not in q.partial_sql


def test_partials_fold_into_one_partial_of_their_columns_unless_a_state_needs_the_merge_s_window():
    q = split("SELECT k, count(DISTINCT y) AS d, sum(x) FILTER (WHERE x > 0) AS s, min(y) AS lo, "
              "approx_count_distinct(y) AS u FROM events GROUP BY k")
    assert q.fold_sql == ("SELECT _k0, _d0, CAST(SUM(_s0) AS __type_of___s0__) AS _s0, MIN(_s1) AS _s1, "
                          "HLL_UNION_AGG(_s2) AS _s2 FROM {partials} GROUP BY _k0, _d0")
    assert split("SELECT count(*) AS n FROM events").fold_sql.endswith("FROM {partials}")  # one row, no GROUP BY
    assert "GROUP BY _k0, _g0" in split("SELECT k, sum(x) AS s FROM events GROUP BY ROLLUP(k)").fold_sql
    two = split("SELECT a.k, a.n, b.m FROM (SELECT k, count(*) AS n FROM events GROUP BY k) a "
                "JOIN (SELECT k, max(x) AS m FROM events WHERE x > 1 GROUP BY k) b ON a.k = b.k")
    assert two.fold_sql.startswith("SELECT _agg, _0_k0, ") and two.fold_sql.endswith("GROUP BY _agg, _0_k0, _1_k0")
    assert split("SELECT k, var_samp(x) AS v FROM events GROUP BY k").fold_sql is None  # its mean and M2 do not
    assert Query.from_dict(q.to_dict()).fold_sql == q.fold_sql


def test_an_outer_query_and_a_cte_run_in_the_final_step():
    q = split("WITH a AS (SELECT k, sum(x) AS s FROM events GROUP BY k) SELECT k, s * 2 AS s2 FROM a WHERE s > 0")
    assert q.partial_sql == "SELECT k AS _k0, SUM(x) AS _s0 FROM {events} AS events GROUP BY k"
    assert q.finish_sql.startswith("SELECT k, s * 2 AS s2 FROM (SELECT _k0 AS `k`, _a0 AS `s` FROM {merged}) AS a")
    assert q.columns == ("k", "s2")


def test_group_by_alias_and_ordinal_resolve_to_the_select_items():
    q = split("SELECT upper(k) AS kk, lower(k), sum(x) AS s FROM events GROUP BY kk, 2")
    assert "GROUP BY UPPER(k), LOWER(k)" in q.partial_sql
    assert q.columns == ("kk", "lower(k)", "s")


def test_braces_in_the_users_sql_survive_spark_sql_formatting():
    q = split("SELECT k, count(*) AS n FROM events WHERE k <> '{not a table}' GROUP BY k")
    assert q.partial_sql.format(events="E") == "SELECT k AS _k0, COUNT(*) AS _s0 FROM E AS events " \
                                               "WHERE k <> '{not a table}' GROUP BY k"


def test_merge_types_come_from_the_partials():
    q = split("SELECT sum(x) AS s, avg(x) AS a FROM events")
    sql = resolve_types(q.merge_sql, {"_s0": "decimal(25,2)", "_s1": "bigint"})
    assert "CAST(SUM(_s0) AS decimal(25,2))" in sql and "AS decimal(19,6)" in sql
    assert "AS double" in resolve_types(q.merge_sql, {"_s0": "bigint", "_s1": "bigint"})


def test_a_sql_query_round_trips_through_json():
    q = split("SELECT k, max(x) AS m FROM events GROUP BY k ORDER BY m")
    assert Query.from_dict(q.to_dict()) == q


@pytest.mark.parametrize("sql, words", [
    ("SELECT k FROM events UNION ALL SELECT k FROM events", "UNION"),
    ("SELECT k, sum(x) AS s, (SELECT max(x) FROM events e2 WHERE e2.k = e.k) AS m FROM events e GROUP BY k",
     "a correlated subquery over stream events (SELECT MAX(x) FROM events AS e2 WHERE e2.k = e.k) refers to e.k, "
     "a raw column of stream events"),
    ("SELECT a.s FROM (SELECT k, sum(x) s FROM events GROUP BY k) a JOIN events e ON a.k = e.k",
     "the rows of stream events are joined above the aggregation"),
    ("SELECT a.s FROM (SELECT k, sum(x) s FROM events GROUP BY k) a JOIN clicks c ON a.k = c.k",
     "the rows of stream clicks are joined above the aggregation"),
    ("SELECT a.s FROM (SELECT k, sum(x) s FROM events GROUP BY k) a WHERE a.k IN (SELECT k FROM clicks)",
     "stream clicks is read above the aggregation"),
    ("SELECT * FROM (SELECT k, sum(x) s FROM events GROUP BY k) a JOIN dim d ON a.k = d.k",
     "SELECT * over a join above the aggregation: list the result's columns (a.* for the aggregation's)"),
    ("SELECT * FROM dim WHERE k IN (SELECT k FROM events GROUP BY k)", "SELECT * over dim: its columns are not known"),
    ("SELECT k, sum(x) FROM events GROUP BY GROUPING SETS ((k), (k))", "lists the grouping set (k) more than once"),
    ("SELECT k, grouping(k) FROM events GROUP BY k", "GROUPING(k) without ROLLUP, CUBE or GROUPING SETS"),
    ("SELECT k, x, sum(x) FROM events GROUP BY k", "neither grouped nor aggregated"),
    ("SELECT k, collect_list(x) FROM events GROUP BY k", "collect_list"),
    ("SELECT k, sum(x) AS s, sum(x) AS s FROM events GROUP BY k", "distinct aliases"),
    ("SELECT count(*) FROM dim", "reads no stream"),
    ("SELECT k, sum(x) FROM events WHERE x > (SELECT avg(x) FROM events) GROUP BY k",
     "a subquery that aggregates stream events (SELECT AVG(x) FROM events) filters the rows of another aggregation"),
    ("SELECT count(*) FROM events WHERE k IN (SELECT k FROM events GROUP BY k HAVING count(*) > 1)",
     "filters the rows of another aggregation before they are aggregated"),
    ("SELECT count(*) FROM events e JOIN (SELECT k, max(x) AS m FROM events GROUP BY k) t ON e.k = t.k",
     "an aggregate nested in an aggregate"),
    ("SELECT k, sum(x) OVER (PARTITION BY k) AS s FROM events", "window function over the stream's rows with no "
     "aggregation below it"),
    ("SELECT DISTINCT k FROM events", "SELECT DISTINCT over the stream's rows with no aggregation"),
    ("SELECT count(*) AS n FROM (SELECT DISTINCT k FROM events) t", "SELECT DISTINCT over the stream's rows below"),
    ("SELECT sum(x) AS s FROM (SELECT x FROM events LIMIT 10) t", "LIMIT over the stream's rows below"),
    ("SELECT count(*) AS n FROM (SELECT k FROM events UNION SELECT k FROM clicks) t", "UNION (DISTINCT) over"),
    ("SELECT d.k, count(*) AS n FROM dim d LEFT JOIN events e ON d.k = e.k GROUP BY d.k",
     "an outer join below the aggregation keeps the rows of static table dim AS d"),
    ("SELECT d.k, count(*) AS n FROM dim d WHERE d.k IN (SELECT k FROM events) GROUP BY d.k",
     "the aggregated rows come from static tables only (d)"),
    ("SELECT count(*) FROM events a JOIN events b ON a.u = b.u", "stream events is joined to itself"),
    ("SELECT count(*) FROM events WHERE u IN (SELECT u FROM events WHERE x > 1)",
     "stream events is read again in a subquery of a condition"),
    ("SELECT k, (SELECT x FROM events LIMIT 1) AS f, count(*) FROM events GROUP BY k",
     "stream events is read in a subquery of an aggregation's SELECT list"),
    ("DELETE FROM events", "SELECT"),
])
def test_constructs_that_cannot_be_split_are_refused_with_one_line(sql, words):
    with pytest.raises(QueryRefused) as err:
        split(sql, streams=["events", "clicks"])
    msg = str(err.value)
    assert words in msg and "\n" not in msg


def test_a_static_table_joined_above_the_aggregation_is_joined_in_the_final_step():
    q = split("SELECT d.name, t.n FROM (SELECT k, count(*) n FROM events GROUP BY k) t JOIN dim d ON d.k = t.k")
    assert q.partial_sql == "SELECT k AS _k0, COUNT(*) AS _s0 FROM {events} AS events GROUP BY k"
    assert q.merge_sql == "SELECT _k0, COALESCE(SUM(_s0), 0) AS _a0 FROM {partials} GROUP BY _k0"
    assert q.finish_sql == ("SELECT d.name, t.n FROM (SELECT _k0 AS `k`, _a0 AS `n` FROM {merged}) AS t "
                            "JOIN {dim} AS d ON d.k = t.k")
    assert q.columns == ("name", "n") and q.static == q.final_static == ("dim",)


def test_static_tables_below_and_above_the_aggregation_are_each_read_where_the_query_says():
    q = split("WITH t AS (SELECT e.k, count(*) n, sum(x) s FROM events e JOIN dim d ON e.k = d.k GROUP BY e.k) "
              "SELECT u.name, t.n * 2 AS n2, t.s / t.n AS mean, r.label FROM users u LEFT JOIN t ON u.k = t.k "
              "FULL JOIN regions r ON r.id = u.region WHERE t.n IS NULL OR t.n > 1 ORDER BY n2 DESC LIMIT 3",
              static=["dim", "users", "regions"])
    assert "FROM {events} AS e JOIN {dim} AS d ON e.k = d.k GROUP BY e.k" in q.partial_sql
    assert "{users}" not in q.partial_sql and "{regions}" not in q.partial_sql
    assert q.finish_sql == ("SELECT u.name, t.n * 2 AS n2, t.s / t.n AS mean, r.label FROM {users} AS u LEFT JOIN "
                            "(SELECT _k0 AS `k`, _a0 AS `n`, _a1 AS `s` FROM {merged}) AS t ON u.k = t.k FULL JOIN "
                            "{regions} AS r ON r.id = u.region WHERE t.n IS NULL OR t.n > 1 ORDER BY n2 DESC LIMIT 3")
    assert set(q.static) == {"dim", "users", "regions"} and q.final_static == ("users", "regions")
    assert q.columns == ("name", "n2", "mean", "label") and q.ordered
    assert Query.from_dict(q.to_dict()) == q


def test_a_star_of_the_aggregation_over_a_join_expands_to_its_columns():
    q = split("SELECT t.*, d.w FROM (SELECT k, max(x) AS m FROM events GROUP BY k) t RIGHT JOIN dim d ON d.k = t.k")
    assert q.columns == ("k", "m", "w") and q.final_static == ("dim",)


def test_a_static_subquery_above_the_aggregation_runs_in_the_final_step():
    q = split("SELECT t.k, t.s FROM (SELECT k, sum(x) AS s FROM events GROUP BY k) t "
              "WHERE t.k IN (SELECT k FROM dim WHERE w > 1)")
    assert q.finish_sql.endswith("WHERE t.k IN (SELECT k FROM {dim} AS dim WHERE w > 1)")
    assert "dim" not in q.partial_sql and q.final_static == ("dim",)


def test_the_joined_static_columns_get_their_types_in_the_result():
    from airflow_iqp.query.split import step_types

    q = split("SELECT d.w, t.n FROM (SELECT k, count(*) AS n FROM events GROUP BY k) t LEFT JOIN dim d ON d.k = t.k")
    _, result = step_types(q, {"events": {"k": "string", "x": "int"}, "dim": {"k": "string", "w": "double"}})
    assert result == {"w": "double", "n": "bigint"}


def test_a_stream_joined_above_the_aggregation_can_run_as_one_batch():
    q = split("SELECT a.s, e.x FROM (SELECT k, sum(x) s FROM events GROUP BY k) a JOIN events e ON a.k = e.k",
              allow_single_batch=True)
    assert q.single_batch and q.final_static == () and q.columns == ("s", "x")


def test_the_final_step_reads_only_static_tables_of_the_query():
    with pytest.raises(ConfigError, match="the final step reads users, which is not one of its static tables"):
        Query(id="t", streams=("events",), static=("dim",), partial_sql="x", merge_sql="x", finish_sql="x",
              final_static=("users",))
    with pytest.raises(ConfigError, match="cannot be named merged"):
        split("SELECT m.w, t.n FROM (SELECT k, count(*) AS n FROM events GROUP BY k) t JOIN merged m ON m.k = t.k",
              static=["merged"])
    with pytest.raises(ConfigError, match="cannot be named merged"):
        split("SELECT m.w, t.n FROM (SELECT k, count(*) AS n FROM events GROUP BY k) t JOIN merged1 m ON m.k = t.n",
              static=["merged1"])


def test_a_subquery_over_a_static_table_in_where_runs_per_batch():
    q = split("SELECT k, sum(x) AS s FROM events WHERE k IN (SELECT k FROM dim WHERE w > 1) GROUP BY k")
    assert "IN (SELECT k FROM {dim} AS dim WHERE w > 1)" in q.partial_sql


def test_unknown_columns_are_refused_when_the_schemas_are_known():
    schemas = {"events": {"k": "STRING", "x": "INT"}, "dim": {"k": "STRING", "w": "DOUBLE"}}
    split("SELECT e.k, sum(x * w) AS s FROM events e JOIN dim d ON e.k = d.k GROUP BY e.k", schemas=schemas)
    with pytest.raises(QueryRefused, match="unknown column y"):
        split("SELECT k, sum(y) FROM events GROUP BY k", schemas=schemas)


def test_allow_single_batch_runs_the_whole_query_as_one_batch():
    q = split("SELECT k, median(x) AS m FROM events GROUP BY k ORDER BY k", allow_single_batch=True)
    assert q.single_batch and q.columns == ("k", "m") and q.ordered
    assert q.partial_sql == "SELECT k, MEDIAN(x) AS m FROM {events} AS events GROUP BY k ORDER BY k"


def test_a_query_id_cannot_name_a_path_outside_the_state_directory():
    for bad in ("../x", "a/b", "", ".."):
        with pytest.raises(ConfigError):
            split("SELECT count(*) AS n FROM events").__class__(id=bad, streams=("events",), partial_sql="x",
                                                                 merge_sql="x", finish_sql="x")


def test_the_catalogue_is_sql_text_split_by_the_decomposer():
    assert list_queries() == ["cq1", "cq2", "cq3", "cq4", "q1", "q3", "q4", "q6", "q9", "q10", "q12", "q14", "q15", "q18",
                             "q19"]
    q9 = get_query("Q9")
    assert q9.streams == ("lineitem", "orders") and set(q9.static) == {"part", "supplier", "partsupp", "nation"}
    assert q9.sql.lstrip().lower().startswith("select") and q9.columns == ("nation", "o_year", "sum_profit")
    with pytest.raises(ConfigError, match="unknown query 'q99'"):
        get_query("q99")


def test_the_decomposer_imports_neither_airflow_nor_spark():
    code = ("import sys, airflow_iqp.query, airflow_iqp.query.catalogue, airflow_iqp.query.store, airflow_iqp.streams\n"
            "airflow_iqp.query.catalogue.get_query('q9')\n"
            "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark', 'ortools'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


# ----------------------------------------------------------------------- the CLI


def explain(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "explain", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd)


@pytest.fixture(scope="module")
def stream_dir(tmp_path_factory) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("explain")
    (d / "events").mkdir()
    pq.write_table(pa.table({"k": ["a", "b"], "x": [1, 2]}), d / "events" / "0001.parquet")
    (d / "events" / "_SUCCESS").write_text("")
    pq.write_table(pa.table({"k": ["a"], "w": [1.5]}), d / "dim.parquet")
    return d


REFUSED = {
    "window function": ("SELECT k, sum(x) OVER (PARTITION BY k) AS s FROM events", "window function"),
    "exact percentile": ("SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY x) FROM events", "exact percentile"),
    "median": ("SELECT k, median(x) FROM events GROUP BY k", "exact median"),
    "approximate percentile": ("SELECT k, percentile_approx(x, 0.5) FROM events GROUP BY k",
                               "is an approximate percentile whose per-batch results cannot be merged"),
    "no aggregation": ("SELECT k, x FROM events WHERE x > 1", "no aggregation"),
    "nested aggregate": ("SELECT k, sum(count(x)) FROM events GROUP BY k", "aggregate nested in an aggregate"),
    "non-deterministic": ("SELECT k, sum(x * rand()) FROM events GROUP BY k", "non-deterministic function RAND()"),
    "unknown table": ("SELECT k, count(*) FROM clicks GROUP BY k", "unknown table clicks"),
    "unknown column": ("SELECT k, sum(y) FROM events GROUP BY k", "unknown column y"),
    "syntax error": ("SELECT k, sum(x FROM events GROUP BY k", "SQL syntax error"),
}


@pytest.mark.parametrize("construct", list(REFUSED))
def test_explain_refuses_with_exit_2_and_one_line(construct, stream_dir):
    sql, words = REFUSED[construct]
    proc = explain("--sql", sql, "--stream", f"events={stream_dir / 'events'}", "--static",
                   f"dim={stream_dir / 'dim.parquet'}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("airflow-iqp explain: sql: ")


def test_explain_prints_both_steps_and_checks_columns_against_the_files(stream_dir, tmp_path):
    (tmp_path / "q.sql").write_text("SELECT e.k, sum(x * w) AS s FROM events e JOIN dim d ON e.k = d.k GROUP BY e.k")
    proc = explain("--sql-file", str(tmp_path / "q.sql"), "--stream", f"events={stream_dir / 'events'}",
                   "--static", f"dim={stream_dir / 'dim.parquet'}", "--json")
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads(proc.stdout)
    assert out["streams"] == ["events"] and out["static"] == ["dim"] and out["columns"] == ["k", "s"]
    assert out["partial_sql"].startswith("SELECT e.k AS _k0, SUM(x * w) AS _s0 FROM {events} AS e JOIN {dim} AS d")
    text = explain("--sql", "SELECT count(*) AS n FROM events").stdout
    assert "per batch" in text and "COALESCE(SUM(_s0), 0)" in text


def test_explain_shows_the_static_tables_the_final_step_joins_and_their_columns_types(stream_dir):
    proc = explain("--sql", "SELECT d.w, t.n FROM (SELECT k, count(*) AS n FROM events GROUP BY k) t "
                   "LEFT JOIN dim d ON d.k = t.k", "--stream", f"events={stream_dir / 'events'}",
                   "--static", f"dim={stream_dir / 'dim.parquet'}")
    assert proc.returncode == 0, proc.stderr
    assert "final, result (over {merged} and {dim}):" in proc.stdout and "LEFT JOIN {dim} AS d" in proc.stdout
    assert "columns: w double, n bigint" in proc.stdout
