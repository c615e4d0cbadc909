"""The paper's custom queries CQ1..CQ4 (table 3): counts over the whole window."""

from airflow_iqp.spark.queries import Query, register

register(Query(
    id="cq1", title="count orders", streams=("orders",), static=(),
    partial_sql="SELECT count(*) AS totalorders FROM {orders}",
    final_sql="SELECT CAST(coalesce(sum(totalorders), 0) AS BIGINT) AS totalorders FROM {partials}",
    columns=("totalorders",),
))

register(Query(
    id="cq2", title="count orders by o_orderpriority", streams=("orders",), static=(),
    partial_sql="SELECT count(*) AS totalorders, o_orderpriority FROM {orders} GROUP BY o_orderpriority",
    final_sql="SELECT sum(totalorders) AS totalorders, o_orderpriority FROM {partials} GROUP BY o_orderpriority",
    columns=("totalorders", "o_orderpriority"),
))

register(Query(
    id="cq3", title="count lineitems by l_suppkey", streams=("lineitem",), static=(),
    partial_sql="SELECT count(*) AS totalitems, l_suppkey FROM {lineitem} GROUP BY l_suppkey",
    final_sql="SELECT sum(totalitems) AS totalitems, l_suppkey FROM {partials} GROUP BY l_suppkey",
    columns=("totalitems", "l_suppkey"),
))

register(Query(
    id="cq4", title="count lineitems by l_partkey", streams=("lineitem",), static=(),
    partial_sql="SELECT count(*) AS totalitems, l_partkey FROM {lineitem} GROUP BY l_partkey",
    final_sql="SELECT sum(totalitems) AS totalitems, l_partkey FROM {partials} GROUP BY l_partkey",
    columns=("totalitems", "l_partkey"),
))
