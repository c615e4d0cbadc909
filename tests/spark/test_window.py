"""run_window's data directories and its refusals before any claim (no Spark)."""

from __future__ import annotations

import pytest

from airflow_iqp.errors import ConfigError
from tests.inputs.test_replay import _make_units


def test_run_window_resolves_generated_and_landing_dirs(tmp_path):
    from airflow_iqp.spark.window import resolve_data, run_window, split_consecutive

    _make_units(tmp_path / "gen", 3)
    (tmp_path / "gen" / "static").mkdir()
    assert resolve_data(tmp_path / "gen") == (tmp_path / "gen" / "units", tmp_path / "gen" / "static")
    landing = tmp_path / "gen" / "units"
    assert resolve_data(landing) == (landing, None)
    assert resolve_data(landing, tmp_path / "gen" / "static") == (landing, tmp_path / "gen" / "static")
    with pytest.raises(ConfigError, match="static"):  # a join query on a landing dir needs --static
        run_window("q3", landing, 2, tmp_path / "state")
    with pytest.raises(ConfigError, match="3 batches for 2 units"):
        run_window("cq1", _two_units(tmp_path), 3, tmp_path / "state")
    assert not (tmp_path / "state").exists()  # refused before claiming anything
    assert split_consecutive(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_consecutive([], 2) == [[], []]


def _two_units(tmp_path):
    _make_units(tmp_path / "two", 2)
    return tmp_path / "two"
