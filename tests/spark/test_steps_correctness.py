"""Every catalogued query (its standard SQL text, split by the decomposer), cut into 1, 2, 3 and 6
batches, equals DuckDB over the same files."""

from __future__ import annotations

import pytest

from tests.support.batches import tpch_files
from tests.support.reference import assert_same_rows, duckdb_reference
from tests.support.reference_sql import REFERENCE_SQL

from airflow_iqp.query.catalogue import get_query, list_queries
from airflow_iqp.spark.steps import run_batch, run_final, write_atomic
from airflow_iqp.spark.window import split_consecutive

pytestmark = pytest.mark.spark

QUERIES = ["cq1", "cq2", "cq3", "cq4", "q1", "q3", "q4", "q6", "q9", "q10", "q12", "q14", "q15", "q18", "q19"]


def test_catalogue_covers_the_issue_queries():
    assert set(QUERIES) <= set(list_queries())
    assert set(REFERENCE_SQL) == set(QUERIES)


@pytest.fixture(scope="module")
def references(units, tpch_dir):
    return {q: duckdb_reference(q, units, tpch_dir / "static") for q in QUERIES}


@pytest.mark.parametrize("qid", QUERIES)
def test_batched_result_equals_duckdb(qid, spark, units, tpch_dir, references, tmp_path):
    query = get_query(qid)
    ref_cols, ref_rows = references[qid]
    assert ref_rows, f"{qid}: the reference is empty at SF 0.01, the comparison would prove little"
    for k in (1, 2, 3, 6):
        partials = []
        for b, chunk in enumerate(split_consecutive(units, k)):
            df = run_batch(spark, qid, tpch_files(chunk), tpch_dir / "static")
            partials.append(str(write_atomic(df, tmp_path / f"k{k}" / f"batch-{b:04d}")))
        result = run_final(spark, qid, partials, static=tpch_dir / "static")
        assert result.columns == list(query.columns) == ref_cols, qid
        assert_same_rows([tuple(r) for r in result.collect()], ref_rows, query.ordered, f"{qid} k={k}")
