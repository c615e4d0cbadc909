"""The types ``explain`` derives from the tables' schemas, without Spark, are Spark's own:
each split query's partial and result columns are analysed by a local Spark session over
empty tables of the same schemas, and every type the decomposer gives must be the one
Spark gives (and for these queries it must give one for every column)."""

from __future__ import annotations

import pytest

from airflow_iqp.inputs.tpch import SCHEMAS
from airflow_iqp.query import decompose
from airflow_iqp.query.catalogue import get_query, list_queries
from airflow_iqp.query.model import resolve_types
from airflow_iqp.query.split import step_types
from airflow_iqp.streams import schema_ddl

pytestmark = pytest.mark.spark

EVENTS = {"ti": "TINYINT", "si": "SMALLINT", "i": "INT", "b": "BIGINT", "f": "FLOAT", "d": "DOUBLE",
          "p": "DECIMAL(15,2)", "q": "DECIMAL(15,2)", "w": "DECIMAL(38,10)", "k": "STRING", "bo": "BOOLEAN",
          "dt": "DATE", "ts": "TIMESTAMP"}

QUERIES = [
    "SELECT k, sum(i) AS a, sum(ti) AS b, sum(f) AS c, sum(p) AS e, sum(p * (1 - q)) AS g, sum(p * (1 - q) * (1 + q)) "
    "AS h FROM events GROUP BY k",
    "SELECT k, avg(i) AS a, avg(p) AS b, avg(f) AS c, avg(w) AS e, sum(w) AS g FROM events GROUP BY k",
    "SELECT count(*) AS n, count(k) AS nk, count_if(i > 0) AS c, min(p) AS lo, max(k) AS hi, min(dt) AS d0, "
    "max(ts) AS t1, bool_and(bo) AS every, bool_or(bo) AS some FROM events",
    "SELECT k, var_samp(p) AS v, stddev_pop(i) AS s, approx_count_distinct(k) AS u FROM events GROUP BY k",
    "SELECT k, count(DISTINCT i) AS a, sum(DISTINCT i) AS b, avg(DISTINCT p) AS c, "
    "sum(p) FILTER (WHERE i > 1) AS e FROM events GROUP BY k",
    "SELECT k, sum(p) / count(*) AS a, sum(i) * 1.0 / count(*) AS b, 100.0 * sum(p) / sum(q) AS c, "
    "sum(i) / sum(b) AS e, max(i) - min(i) AS g, sum(p) + 1 AS h, sum(p) % 7 AS m FROM events GROUP BY k",
    "SELECT round(avg(i), 2) AS a, round(sum(p), 0) AS b, round(avg(p), 2) AS c, abs(sum(p)) AS e, "
    "sqrt(sum(d)) AS g FROM events",
    "SELECT k, CASE WHEN sum(p) > 0 THEN sum(p) ELSE 0 END AS a, coalesce(sum(i), 0) AS b, "
    "if(count(*) > 1, sum(i), sum(b)) AS c, greatest(sum(p), max(i)) AS e, nullif(sum(p), 0) AS g, "
    "CASE WHEN count(*) > 1 THEN sum(f) ELSE max(i) END AS h FROM events GROUP BY k",
    "SELECT k, sum(ti + si) AS a, sum(f + i) AS b, sum(p + i) AS c, sum(p + b) AS e, sum(p * f) AS g, "
    "sum(p / 2) AS h, sum(p / i) AS j, sum(i DIV 2) AS l FROM events GROUP BY k",
    "SELECT year(dt) AS y, month(ts) AS mo, upper(k) AS uk, lower(k) AS lk, length(k) AS n, sum(i) AS s, "
    "rank() OVER (ORDER BY sum(i)) AS r, dense_rank() OVER (ORDER BY min(p)) AS dr, row_number() OVER "
    "(ORDER BY max(d)) AS rn FROM events GROUP BY year(dt), month(ts), upper(k), lower(k), length(k)",
    "SELECT k, coalesce(min(CAST(p AS DECIMAL(5,2))), 0) AS a, CASE WHEN count(*) > 1 THEN min(CAST(p AS "
    "DECIMAL(5,2))) ELSE 1 END AS b, min(CAST(p AS DECIMAL(5,2))) + 100 AS c, min(CAST(p AS DECIMAL(5,2))) * -3 AS e "
    "FROM events GROUP BY k",
    "SELECT k, n FROM (SELECT k, count(*) AS n, sum(p) AS s FROM events WHERE p > 0.5 GROUP BY k) WHERE s > 10 "
    "ORDER BY n DESC LIMIT 3",
    # Several aggregations in one partial (one scan, and a branch of its own), grouping sets.
    "SELECT (SELECT sum(p) FROM events WHERE i > 0) AS a, (SELECT avg(p) FROM events) AS b, "
    "(SELECT max(k) FROM events e JOIN events2 x ON e.i = x.i) AS c",
    "SELECT k, sum(p) / (SELECT sum(p) FROM events) AS share, count(DISTINCT i) AS n FROM events GROUP BY k",
    "SELECT k, dt, grouping(k) AS g, grouping_id(k, dt) AS gid, sum(p) AS s, var_pop(d) AS v, avg(i) AS a "
    "FROM events GROUP BY CUBE (k, dt)",
    "SELECT k, avg(s) AS a, max(n) AS m FROM (SELECT k, i, sum(p) AS s, count(*) AS n FROM events GROUP BY k, i) t "
    "GROUP BY k",
]


def spark_types(spark, query, schemas):
    frames = {t: spark.createDataFrame([], schema_ddl(schemas[t])) for t in query.tables}
    partials = query.compute_partial(spark, frames)
    static = {t: frames[t] for t in query.final_static}
    result = query.compute_final(spark, partials, static=static)
    simple = lambda df: {f.name: f.dataType.simpleString() for f in df.schema.fields}  # noqa: E731
    for merge in query.merges:
        assert spark.sql(resolve_types(merge, simple(partials)), partials=partials).schema  # resolves with these
    return simple(partials), simple(result)


@pytest.mark.parametrize("sql", QUERIES, ids=range(len(QUERIES)))
def test_types_derived_from_the_schema_are_sparks(spark, sql):
    schemas = {"events": EVENTS, "events2": {"i": "INT", "z": "STRING"}}
    query = decompose(sql, id="t", streams=["events"], static=["events2"], schemas=schemas)
    partial, result = step_types(query, schemas)
    assert (partial, result) == spark_types(spark, query, schemas)


@pytest.mark.parametrize("qid", [q for q in list_queries() if not get_query(q).static])
def test_catalogue_types_are_sparks(spark, qid):
    schemas = {t: dict(cols) for t, cols in SCHEMAS.items()}
    query = get_query(qid)
    assert step_types(query, schemas) == spark_types(spark, query, schemas)
