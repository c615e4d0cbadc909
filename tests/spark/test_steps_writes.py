"""``write_atomic`` writes a local directory only: the state store's partials and results
go through the store (``WindowState.write_partial``, ``write_result``), which writes an object
store's its own way (pure Python: the check comes before any Spark work)."""

from __future__ import annotations

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.spark.steps import write_atomic


@pytest.mark.parametrize("where", ["s3a://lake/state/q/w/partials/batch-0001", "s3://lake/state/q/w/result"])
def test_a_directory_in_an_object_store_is_refused_naming_the_way_to_write_it(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a URL taken for a relative path would make a directory here
    for rows in (None, 1):
        with pytest.raises(ConfigError, match=r"not a local directory; a state store writes its partials"):
            write_atomic(None, where, rows_estimate=rows)
    assert list(tmp_path.iterdir()) == []
