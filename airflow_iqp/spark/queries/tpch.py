"""TPC-H Q1, Q3, Q4, Q6, Q10, Q12, Q14 and Q19 with the default substitution parameters.

Each partial step is the standard query text over one batch's rows, minus what can only
be done once over the whole window: averages become sums and counts, the Q14 ratio becomes
its numerator and denominator, ORDER BY / LIMIT move to the final step.
"""

from airflow_iqp.spark.queries import Query, register

_REV = "l_extendedprice * (1 - l_discount)"

register(Query(
    id="q1", title="TPC-H Q1 pricing summary report", streams=("lineitem",), static=(),
    partial_sql=f"""
        SELECT l_returnflag, l_linestatus,
               sum(l_quantity) AS sum_qty,
               sum(l_extendedprice) AS sum_base_price,
               sum({_REV}) AS sum_disc_price,
               sum({_REV} * (1 + l_tax)) AS sum_charge,
               sum(l_discount) AS sum_disc,
               count(*) AS count_order
        FROM {{lineitem}}
        WHERE l_shipdate <= date '1998-12-01' - interval '90' day
        GROUP BY l_returnflag, l_linestatus""",
    final_sql="""
        SELECT l_returnflag, l_linestatus,
               sum(sum_qty) AS sum_qty,
               sum(sum_base_price) AS sum_base_price,
               sum(sum_disc_price) AS sum_disc_price,
               sum(sum_charge) AS sum_charge,
               CAST(sum(sum_qty) AS DOUBLE) / sum(count_order) AS avg_qty,
               CAST(sum(sum_base_price) AS DOUBLE) / sum(count_order) AS avg_price,
               CAST(sum(sum_disc) AS DOUBLE) / sum(count_order) AS avg_disc,
               sum(count_order) AS count_order
        FROM {partials}
        GROUP BY l_returnflag, l_linestatus
        ORDER BY l_returnflag, l_linestatus""",
    columns=("l_returnflag", "l_linestatus", "sum_qty", "sum_base_price", "sum_disc_price", "sum_charge",
             "avg_qty", "avg_price", "avg_disc", "count_order"),
    ordered=True,
))

register(Query(
    id="q3", title="TPC-H Q3 shipping priority", streams=("orders", "lineitem"), static=("customer",),
    partial_sql=f"""
        SELECT l_orderkey, sum({_REV}) AS revenue, o_orderdate, o_shippriority
        FROM {{customer}} c
        JOIN {{orders}} o ON c.c_custkey = o.o_custkey
        JOIN {{lineitem}} l ON l.l_orderkey = o.o_orderkey
        WHERE c_mktsegment = 'BUILDING'
          AND o_orderdate < date '1995-03-15'
          AND l_shipdate > date '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority""",
    final_sql="""
        SELECT l_orderkey, sum(revenue) AS revenue, o_orderdate, o_shippriority
        FROM {partials}
        GROUP BY l_orderkey, o_orderdate, o_shippriority
        ORDER BY revenue DESC, o_orderdate
        LIMIT 10""",
    columns=("l_orderkey", "revenue", "o_orderdate", "o_shippriority"),
    ordered=True,
))

register(Query(
    id="q4", title="TPC-H Q4 order priority checking", streams=("orders", "lineitem"), static=(),
    partial_sql="""
        SELECT o_orderpriority, count(*) AS order_count
        FROM {orders} o
        WHERE o_orderdate >= date '1993-07-01'
          AND o_orderdate < date '1993-07-01' + interval '3' month
          AND EXISTS (SELECT * FROM {lineitem} l
                      WHERE l.l_orderkey = o.o_orderkey AND l.l_commitdate < l.l_receiptdate)
        GROUP BY o_orderpriority""",
    final_sql="""
        SELECT o_orderpriority, sum(order_count) AS order_count
        FROM {partials}
        GROUP BY o_orderpriority
        ORDER BY o_orderpriority""",
    columns=("o_orderpriority", "order_count"),
    ordered=True,
))

register(Query(
    id="q6", title="TPC-H Q6 forecasting revenue change", streams=("lineitem",), static=(),
    partial_sql="""
        SELECT sum(l_extendedprice * l_discount) AS revenue
        FROM {lineitem}
        WHERE l_shipdate >= date '1994-01-01'
          AND l_shipdate < date '1994-01-01' + interval '1' year
          AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01
          AND l_quantity < 24""",
    final_sql="SELECT sum(revenue) AS revenue FROM {partials}",
    columns=("revenue",),
))

register(Query(
    id="q10", title="TPC-H Q10 returned item reporting", streams=("orders", "lineitem"),
    static=("customer", "nation"),
    partial_sql=f"""
        SELECT c_custkey, c_name, sum({_REV}) AS revenue, c_acctbal, n_name, c_address, c_phone, c_comment
        FROM {{customer}} c
        JOIN {{orders}} o ON c.c_custkey = o.o_custkey
        JOIN {{lineitem}} l ON l.l_orderkey = o.o_orderkey
        JOIN {{nation}} n ON c.c_nationkey = n.n_nationkey
        WHERE o_orderdate >= date '1993-10-01'
          AND o_orderdate < date '1993-10-01' + interval '3' month
          AND l_returnflag = 'R'
        GROUP BY c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment""",
    final_sql="""
        SELECT c_custkey, c_name, sum(revenue) AS revenue, c_acctbal, n_name, c_address, c_phone, c_comment
        FROM {partials}
        GROUP BY c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment
        ORDER BY revenue DESC
        LIMIT 20""",
    columns=("c_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment"),
    ordered=True,
))

register(Query(
    id="q12", title="TPC-H Q12 shipping modes and order priority", streams=("orders", "lineitem"), static=(),
    partial_sql="""
        SELECT l_shipmode,
               sum(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = '2-HIGH'
                        THEN 1 ELSE 0 END) AS high_line_count,
               sum(CASE WHEN o_orderpriority <> '1-URGENT' AND o_orderpriority <> '2-HIGH'
                        THEN 1 ELSE 0 END) AS low_line_count
        FROM {orders} o
        JOIN {lineitem} l ON o.o_orderkey = l.l_orderkey
        WHERE l_shipmode IN ('MAIL', 'SHIP')
          AND l_commitdate < l_receiptdate
          AND l_shipdate < l_commitdate
          AND l_receiptdate >= date '1994-01-01'
          AND l_receiptdate < date '1994-01-01' + interval '1' year
        GROUP BY l_shipmode""",
    final_sql="""
        SELECT l_shipmode, sum(high_line_count) AS high_line_count, sum(low_line_count) AS low_line_count
        FROM {partials}
        GROUP BY l_shipmode
        ORDER BY l_shipmode""",
    columns=("l_shipmode", "high_line_count", "low_line_count"),
    ordered=True,
))

register(Query(
    id="q14", title="TPC-H Q14 promotion effect", streams=("lineitem",), static=("part",),
    partial_sql=f"""
        SELECT sum(CASE WHEN p_type LIKE 'PROMO%' THEN {_REV} ELSE 0 END) AS promo_revenue_sum,
               sum({_REV}) AS revenue_sum
        FROM {{lineitem}} l
        JOIN {{part}} p ON l.l_partkey = p.p_partkey
        WHERE l_shipdate >= date '1995-09-01'
          AND l_shipdate < date '1995-09-01' + interval '1' month""",
    final_sql="""
        SELECT 100.00 * CAST(sum(promo_revenue_sum) AS DOUBLE)
               / nullif(CAST(sum(revenue_sum) AS DOUBLE), 0) AS promo_revenue
        FROM {partials}""",
    columns=("promo_revenue",),
))

register(Query(
    id="q19", title="TPC-H Q19 discounted revenue", streams=("lineitem",), static=("part",),
    partial_sql=f"""
        SELECT sum({_REV}) AS revenue
        FROM {{lineitem}} l
        JOIN {{part}} p ON p.p_partkey = l.l_partkey
        WHERE (p_brand = 'Brand#12'
               AND p_container IN ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG')
               AND l_quantity >= 1 AND l_quantity <= 1 + 10
               AND p_size BETWEEN 1 AND 5
               AND l_shipmode IN ('AIR', 'AIR REG')
               AND l_shipinstruct = 'DELIVER IN PERSON')
           OR (p_brand = 'Brand#23'
               AND p_container IN ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK')
               AND l_quantity >= 10 AND l_quantity <= 10 + 10
               AND p_size BETWEEN 1 AND 10
               AND l_shipmode IN ('AIR', 'AIR REG')
               AND l_shipinstruct = 'DELIVER IN PERSON')
           OR (p_brand = 'Brand#34'
               AND p_container IN ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG')
               AND l_quantity >= 20 AND l_quantity <= 20 + 10
               AND p_size BETWEEN 1 AND 15
               AND l_shipmode IN ('AIR', 'AIR REG')
               AND l_shipinstruct = 'DELIVER IN PERSON')""",
    final_sql="SELECT sum(revenue) AS revenue FROM {partials}",
    columns=("revenue",),
))
