"""The query catalogue: the paper's CQ1-CQ4 and TPC-H Q1, Q3, Q4, Q6, Q9, Q10, Q12, Q14, Q15,
Q18 and Q19, each its standard query text (``<id>.sql`` beside this file, default
substitution parameters), split by the same decomposer as a user's SQL. Q15 reads its revenue
view twice (a CTE: one aggregation, and the maximum of its merged rows in the final step);
Q18 aggregates lineitem twice (each order's quantity, and the large orders' lines).

They read the TPC-H streams ``orders`` and ``lineitem`` (one unit: an orders file and its
lineitems, which arrive together) and the static tables.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from airflow_iqp.errors import ConfigError
from airflow_iqp.query import decompose
from airflow_iqp.query.model import Query

TPCH_STREAMS = ("orders", "lineitem")
TPCH_STATIC = ("customer", "nation", "region", "part", "partsupp", "supplier")

#: id -> title, in catalogue order.
TITLES = {
    "cq1": "count orders",
    "cq2": "count orders by o_orderpriority",
    "cq3": "count lineitems by l_suppkey",
    "cq4": "count lineitems by l_partkey",
    "q1": "TPC-H Q1 pricing summary report",
    "q3": "TPC-H Q3 shipping priority",
    "q4": "TPC-H Q4 order priority checking",
    "q6": "TPC-H Q6 forecasting revenue change",
    "q9": "TPC-H Q9 product type profit measure",
    "q10": "TPC-H Q10 returned item reporting",
    "q12": "TPC-H Q12 shipping modes and order priority",
    "q14": "TPC-H Q14 promotion effect",
    "q15": "TPC-H Q15 top supplier",
    "q18": "TPC-H Q18 large volume customer",
    "q19": "TPC-H Q19 discounted revenue",
}


def catalogue_sql(qid: str) -> str:
    """The standard text of catalogued query ``qid``."""
    return resources.files(__name__).joinpath(f"{qid}.sql").read_text()


@lru_cache(maxsize=None)
def _split(qid: str) -> Query:
    return decompose(catalogue_sql(qid), id=qid, streams=TPCH_STREAMS, static=TPCH_STATIC, title=TITLES[qid])


def get_query(qid: str) -> Query:
    """The catalogued query ``qid`` (case-insensitive: ``"CQ2"``, ``"q4"``)."""
    key = str(qid).strip().lower()
    if key not in TITLES:
        raise ConfigError(f"unknown query {qid!r}; known: {', '.join(TITLES)}", field="query")
    return _split(key)


def list_queries() -> list[str]:
    """Ids of all catalogued queries, in catalogue order."""
    return list(TITLES)
