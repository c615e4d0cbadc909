"""Where the Spark jobs write a partial or a result: a directory made whole by a rename, so
never an object store's URL (pure Python: the check comes before any Spark work)."""

from __future__ import annotations

import re

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.spark.steps import write_atomic, write_result


@pytest.mark.parametrize("where", ["s3a://lake/state/q/w/partials/batch-0001", "s3://lake/state/q/w/result"])
def test_a_partial_or_a_result_in_an_object_store_is_refused_naming_the_setting(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a URL taken for a relative path would make a directory here
    with pytest.raises(ConfigError, match=r"not in an object store: set \[iqp\] state_dir to a directory"):
        write_atomic(None, where)
    for rows in (None, 1):
        with pytest.raises(ConfigError, match=re.escape(where) + ": the Spark jobs write"):
            write_result(None, where, rows_estimate=rows)
    assert list(tmp_path.iterdir()) == []
